"""Memory-bound subgraphs at ImageNet-like sizes: DLCB (one dynamic-batch compile, and its static
twin compiled per batch) vs eager and ``torch.compile(dynamic=True)``. Reports ``ms``: median
latency of one synchronized call; ``stream_ms`` (CUDA): mean time per call queued back to back
(CUDA events), ``GB/s`` from it (bytes of each input read once plus each output written once), and
``pct_copy``: a device-to-device copy moving the same bytes (system ``copy``) as a percentage of
the call's ``stream_ms`` (100 = as fast as a copy).

    python -m dlcb_lab.bench.bandwidth [--backend cuda] [--out results.csv] [--no-inductor]
"""

from __future__ import annotations

import argparse
import time

import torch

import dlcb_lab as dl

from .overhead import _median_ms, stream_ms


class BiasReLU(torch.nn.Module):          # broadcast [1, C, 1, 1] operands, fused elementwise
    def forward(self, x, s, b):
        return torch.relu(x * s + b)


class ToNHWC(torch.nn.Module):            # layout change: permute + scale
    def forward(self, x, s, b):
        return (x * s).permute(0, 2, 3, 1).reshape(x.size(0), -1, x.size(1))


class GlobalPool(torch.nn.Module):        # reduction over H, W
    def forward(self, x, s, b):
        return (x * s + b).mean(dim=(2, 3))


class Softmax(torch.nn.Module):           # reduction + broadcast back (two passes)
    def forward(self, x, s, b):
        h = x.flatten(2)
        e = torch.exp(h - h.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)


class LayerNorm(torch.nn.Module):         # two-moment reduction over each (n, c) plane
    def forward(self, x, s, b):
        return torch.nn.functional.layer_norm(x, x.shape[-2:]) * s + b


class RowLayerNorm(torch.nn.Module):      # layer norm over C-element token rows (ViT, Swin, ConvNeXt)
    def forward(self, x, s, b):
        return torch.nn.functional.layer_norm(x.reshape(x.size(0), -1, x.size(1)), (x.size(1),),
                                              s.flatten(), b.flatten())


class RowSoftmax(torch.nn.Module):        # softmax over rows of 49 (Swin's 7x7 window attention)
    def forward(self, x, s, b):
        return torch.softmax(x.reshape(x.size(0), -1, 49), -1)


MODELS = {"bias_relu": BiasReLU, "to_nhwc": ToNHWC, "global_pool": GlobalPool, "softmax": Softmax,
          "layer_norm": LayerNorm, "row_layer_norm": RowLayerNorm, "row_softmax": RowSoftmax}


def run(backend="auto", batches=(1, 8, 32, 128), chw=(64, 56, 56), with_inductor=True, reps=100):
    import pandas as pd

    dev = "cuda" if (backend == "cuda" or (backend == "auto" and torch.cuda.is_available())) \
        else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    c, h, w = chw
    s, b = torch.randn(1, c, 1, 1, device=dev), torch.randn(1, c, 1, 1, device=dev)
    rows = []
    for name, cls in MODELS.items():
        m = cls()
        t0 = time.perf_counter()
        cm = dl.compile(m, (torch.randn(2, c, h, w, device=dev), s, b), dynamic={0: {0: "N"}},
                        backend=backend)
        rows.append((name, "dlcb", 0, "compile_s", time.perf_counter() - t0))
        tc = torch.compile(m, dynamic=True) if with_inductor else None
        for n in batches:
            x = torch.randn(n, c, h, w, device=dev)
            want = m(x, s, b)
            static = dl.compile(m, (x, s, b), backend=backend)
            for got in (cm(x, s, b), static(x, s, b)):
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            nbytes = (x.numel() + want.numel() + 2 * c) * x.element_size()
            systems = [("eager", lambda: m(x, s, b)), ("dlcb", lambda: cm(x, s, b)),
                       ("dlcb-static", lambda: static(x, s, b))]
            if tc is not None:
                t0 = time.perf_counter()
                tc(x, s, b)
                sync()
                rows.append((name, "torch.compile", n, "first_call_s", time.perf_counter() - t0))
                systems.append(("torch.compile", lambda: tc(x, s, b)))
            if dev == "cuda":   # the same bytes read and written by one device copy
                src = torch.empty(nbytes // 2, dtype=torch.uint8, device=dev)
                dst = torch.empty_like(src)
                copy_ms = stream_ms(lambda: dst.copy_(src), reps=reps)
                rows.append((name, "copy", n, "stream_ms", copy_ms))
            for sysname, fn in systems:
                ms = _median_ms(fn, sync, reps=reps, warmup=10)
                rows.append((name, sysname, n, "ms", ms))
                if dev == "cuda":
                    ms = stream_ms(fn, reps=reps)
                    rows.append((name, sysname, n, "stream_ms", ms))
                    rows.append((name, sysname, n, "pct_copy", 100 * copy_ms / ms))
                rows.append((name, sysname, n, "GB/s", nbytes / ms / 1e6))
    return pd.DataFrame(rows, columns=["model", "system", "batch", "metric", "value"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--out", default="")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--small", action="store_true", help="tiny sizes (a CPU smoke run)")
    a = ap.parse_args(argv)
    kw = dict(batches=(1, 2), chw=(4, 7, 7), reps=5) if a.small else {}
    df = run(a.backend, with_inductor=not a.no_inductor, **kw)
    if a.out:
        df.to_csv(a.out, index=False)
    ms = df[df.metric.isin(["ms", "stream_ms", "GB/s", "pct_copy"])]
    print(ms.pivot_table(index=["model", "batch"], columns=["metric", "system"],
                         values="value").round(3).to_string())
    print(df[df.metric.isin(["compile_s", "first_call_s"])].to_string(index=False))


if __name__ == "__main__":
    main()
