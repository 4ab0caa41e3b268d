"""The bridge's benchmark (Stage 3): TorchVision models and two transformers compiled once with
``dynamic="auto"``, checked against eager and timed at several batch (and sequence) sizes.

    python -m dlcb_lab.bench.bridge                       # CUDA: the zoo's seven, BERT-base, GPT-2
    python -m dlcb_lab.bench.bridge --device cpu --models resnet18 --text bert --tiny

One row per (model, shape): free input axes, eager ops in the plan, relative error, eager and
DLCB latency (median of CUDA-event or wall timings), cold compile seconds, compiles so far.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch

import dlcb_lab as dl
from dlcb_lab.bench import zoo

MODELS = ("resnet18", "squeezenet1_1", "mobilenet_v3_large", "resnet50", "efficientnet_b0",
          "convnext_tiny", "vit_b_16")
SHAPES = {"image": (1, 8, 32), "text": ((1, 32), (8, 128), (32, 512))}


def _median_ms(f: Callable, *args, device: str, n: int = 20) -> float:
    for _ in range(3):
        f(*args)
    ts = []
    for _ in range(n):
        if device == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f(*args)
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            f(*args)
            ts.append((time.perf_counter() - t0) * 1e3)
    return sorted(ts)[len(ts) // 2]


class Hidden(torch.nn.Module):
    """A transformers model as a function of (input_ids, attention_mask) -> last hidden state."""

    def __init__(self, m: torch.nn.Module):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def text_model(name: str, tiny: bool) -> torch.nn.Module:
    import transformers as T

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64) if tiny else {}
    if name == "bert":
        return Hidden(T.BertModel(T.BertConfig(**small)).eval())
    if name == "gpt2":
        g = dict(n_embd=32, n_layer=2, n_head=2) if tiny else {}
        return Hidden(T.GPT2Model(T.GPT2Config(**g)).eval())
    raise ValueError(f"text model {name!r}: 'bert' or 'gpt2'")


def _row(name, cm, m, args, device, cold, **shape):
    with torch.no_grad():
        want, got = m(*args), cm(*args)
        err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
        te = _median_ms(m, *args, device=device)
        td = _median_ms(cm, *args, device=device)
    return dict(model=name, **shape, eager_ops=sum(n.op.name == "eager"
                                                  for n in cm.pipeline.graph.nodes),
                rel_err=err, eager_ms=te, dlcb_ms=td, speedup=te / td, compile_s=cold,
                compiles=cm.stats()["compiles"])


def run(models=MODELS, text=("bert", "gpt2"), device: str = "cuda", tiny: bool = False,
        batches=SHAPES["image"], text_shapes=SHAPES["text"]):
    """The rows as a pandas DataFrame."""
    import pandas as pd

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    backend = "cuda" if device == "cuda" else "cpu"
    rows = []
    for name in models:
        spec = zoo.MODELS[name]
        m = spec.build().to(device).eval()
        res = (spec.native, spec.native) if device == "cuda" else spec.test_res[0]
        t0 = time.perf_counter()
        cm = dl.compile(m, (zoo.make_input(1, res, device),), dynamic="auto", backend=backend)
        cold = time.perf_counter() - t0
        free = [r.axis for r in cm.pipeline.dims.of("x") if r.kind.value != "literal"]
        for b in batches:
            rows.append(_row(name, cm, m, (zoo.make_input(b, res, device),), device, cold,
                             batch=b, free_axes=str(free)))
    for name in text:
        torch.manual_seed(0)
        m = text_model(name, tiny).to(device)
        ids = torch.randint(0, 1000, (2, 16), device=device)
        t0 = time.perf_counter()
        cm = dl.compile(m, (ids, torch.ones_like(ids)), dynamic="auto", backend=backend)
        cold = time.perf_counter() - t0
        for b, s in text_shapes:
            ids = torch.randint(0, 1000, (b, s), device=device)
            mask = torch.ones_like(ids)
            mask[0, -3:] = 0
            rows.append(_row(name, cm, m, (ids, mask), device, cold, batch=b, seq=s))
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m dlcb_lab.bench.bridge", description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default=",".join(MODELS), help="zoo models, comma-separated")
    ap.add_argument("--text", default="bert,gpt2", help="transformers models: bert, gpt2")
    ap.add_argument("--tiny", action="store_true", help="tiny transformer configs")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--csv", default="", help="also write the rows here")
    a = ap.parse_args(argv)
    df = run([m for m in a.models.split(",") if m], [t for t in a.text.split(",") if t],
             a.device, a.tiny, tuple(int(b) for b in a.batches.split(",")))
    print(df.to_string(index=False))
    if a.csv:
        df.to_csv(a.csv, index=False)


if __name__ == "__main__":
    main()
