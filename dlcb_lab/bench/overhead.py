"""Per-call latency of a compiled module vs eager and torch.compile, at several batch sizes.

    python -m dlcb_lab.bench.overhead [--backend cuda] [--out results.csv]

One DLCB compile (dynamic batch) serves every batch size; torch.compile is run with
``dynamic=True``. Times are medians of repeated calls, synchronized on CUDA.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import dlcb_lab as dl
from dlcb_lab.demo import Demo


def _median_ms(fn, sync, reps: int = 200, warmup: int = 20) -> float:
    for _ in range(warmup):
        fn()
    sync()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def stream_ms(fn, reps: int = 200, warmup: int = 20) -> float:
    """Mean ms per call with calls queued back to back, timed by CUDA events (device throughput,
    host overhead hidden when the GPU is the bottleneck)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def run(backend: str = "auto", batches=(1, 8, 64, 1024, 16384), with_inductor: bool = True):
    import pandas as pd

    dev = "cuda" if (backend == "cuda" or (backend == "auto" and torch.cuda.is_available())) \
        else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    m = Demo()
    y = torch.randn(1, 4, 1, device=dev)
    t0 = time.perf_counter()
    cm = dl.compile(m, (torch.randn(8, 4, 6, device=dev), y), dynamic={0: {0: "N"}},
                    backend=backend)
    rows = [("dlcb", "compile", 0, time.perf_counter() - t0)]
    tc = torch.compile(m, dynamic=True) if with_inductor else None
    for n in batches:
        x = torch.randn(n, 4, 6, device=dev)
        torch.testing.assert_close(cm(x, y), m(x, y), rtol=1e-5, atol=1e-5)
        rows.append(("eager", "call_ms", n, _median_ms(lambda: m(x, y), sync)))
        rows.append(("dlcb", "call_ms", n, _median_ms(lambda: cm(x, y), sync)))
        if tc is not None:
            t0 = time.perf_counter()
            tc(x, y)
            sync()
            rows.append(("torch.compile", "first_call_s", n, time.perf_counter() - t0))
            rows.append(("torch.compile", "call_ms", n, _median_ms(lambda: tc(x, y), sync)))
    rows.append(("dlcb", "kernel_builds", 0, cm.stats()["kernel_builds"]))
    return pd.DataFrame(rows, columns=["system", "metric", "batch", "value"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default="")
    ap.add_argument("--no-inductor", action="store_true")
    a = ap.parse_args(argv)
    df = run(a.backend, with_inductor=not a.no_inductor)
    if a.out:
        df.to_csv(a.out, index=False)
    print(df.pivot_table(index=["metric", "batch"], columns="system", values="value").to_string())


if __name__ == "__main__":
    main()
