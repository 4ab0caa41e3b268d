"""CUDA-graph replay (``runtime.graphs``) on and off, on one compile, beside eager and eager
replayed as one CUDA graph; the cost of a new signature's first calls.

    python -m dlcb_lab.bench.graphs [--models resnet18,vit_b_16] [--batches 1,8,32] [--reps 30]

One ``dl.compile`` per model (batch dynamic, 224², torch's math flags). Per batch, in ms (median
CUDA-event time of one call): ``eager``, ``eager_graph`` (the module captured once per shape with
``torch.cuda.CUDAGraph``, as ``bench.models``' eager-cudagraph), ``dlcb_plain`` (graph cache
off), ``dlcb_graph`` (replays); ``first_ms`` the new signature's first call, made first at that
shape (plain launches, the warm-up), ``capture_ms`` its second (capture and replay), ``copy_ms``
one device copy of the input (what a replay adds per input), ``rel_err`` against eager;
``compile_s`` the cold compile.
"""

from __future__ import annotations

import argparse
import time

import torch

import dlcb_lab as dl
from dlcb_lab.bench import zoo
from dlcb_lab.bench.models import _CudaGraph


def _wall_ms(fn) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def run(models=("resnet18", "vit_b_16"), batches=(1, 8, 32), reps: int = 30):
    """The rows as a pandas DataFrame."""
    import pandas as pd

    rows = []
    ms = lambda fn: zoo._event_median_ms(fn, reps, 3)   # noqa: E731
    for name in models:
        m = zoo.MODELS[name].build().cuda().eval()
        t0 = time.perf_counter()
        cm = dl.compile(m, (zoo.make_input(2, (224, 224), "cuda"),), dynamic={0: {0: "N"}},
                        backend="cuda")
        cold = time.perf_counter() - t0
        cache = cm._thunk.graphs
        for b in batches:
            x = zoo.make_input(b, (224, 224), "cuda")
            with torch.no_grad():
                want = m(x)
                eager = ms(lambda: m(x))
            first, capture = _wall_ms(lambda: cm(x)), _wall_ms(lambda: cm(x))
            capacity, cache.capacity = cache.capacity, 0
            plain = ms(lambda: cm(x))
            cache.capacity = capacity
            with torch.no_grad():
                graph = _CudaGraph(m, "cuda").setup((x,))
            rows.append(dict(model=name, batch=b, eager=eager, eager_graph=ms(graph),
                             dlcb_plain=plain, dlcb_graph=ms(lambda: cm(x)), first_ms=first,
                             capture_ms=capture, copy_ms=ms(lambda: x.clone()),
                             rel_err=zoo.rel_error(cm(x), want), compile_s=cold))
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,vit_b_16")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args(argv)
    df = run(a.models.split(","), [int(b) for b in a.batches.split(",")], a.reps)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
