"""``make demo``: DLCB on this machine, in two parts.

1. The worked example (DESIGN.md's, extended): one module compiled once with its batch axis named
   ``N``, run at three batch sizes against eager; its stage objects (dims classification, solver
   trace, host program, a coordinate map) and the generated code of one kernel, in the language
   of the backend that ran it (numba on a CPU, CUDA C++ on a GPU).
2. A TorchVision model (``--model``, default ResNet-18, random weights) compiled once at
   ``1x3xSxS`` with the default ``dynamic`` (every axis proposed free; the export keeps what the
   model admits), then run at two batch sizes and a second resolution from that one compile,
   each checked against eager.

Then the model's pipeline report (every stage, one tab each; the call trace of the second
resolution) is written as a standalone HTML page (``--report PATH``, default
``dlcb_demo_report.html`` in the working directory)."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

import dlcb_lab as dl

REPORT = "dlcb_demo_report.html"
"""The report's default file name, in the working directory."""
TOL = {"rtol": 1e-4, "atol": 1e-4}


class Demo(torch.nn.Module):
    """Broadcast, reshape, permute and reductions mixed (DESIGN.md's worked example, extended)."""

    def forward(self, x, y):
        z = torch.relu(x * y).reshape(-1, 24)           # broadcast y [1,4,1]; -1 solves to N
        w = z.permute(1, 0)                             # [24, N]
        col = w.sum(dim=1, keepdim=True)                # reduce over the dynamic axis
        peak = z.amax(dim=1, keepdim=True)              # [N, 1]
        return col.permute(1, 0) + z / (peak + 1.0)     # [N, 24]


@dataclass
class Result:
    """What a demo run did: the two compiled modules, the model and its calls (input shape,
    largest error against eager), the kernel whose code was printed and the report's path."""

    toy: dl.CompiledModule
    model: torch.nn.Module
    compiled: dl.CompiledModule
    calls: list[tuple[tuple[int, ...], float]]
    shown: dl.Kernel
    report: Path


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dlcb_lab.demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", default=REPORT,
                    help="where to write the model's pipeline report (standalone HTML; "
                         "default: %(default)s in the working directory)")
    ap.add_argument("--model", default="resnet18",
                    help="a TorchVision classification model, built with weights=None "
                         "(default: %(default)s)")
    ap.add_argument("--size", type=int, default=64,
                    help="the compile's input resolution (default: %(default)s)")
    ap.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"),
                    help="cuda on a GPU, else cpu (default: %(default)s)")
    return ap


def listing(k: dl.Kernel) -> tuple[str, str]:
    """(language, source) of the code ``k`` runs: its numba function on the CPU backend, its CUDA
    C++ (every entry point the build compiles, after the shared prelude) on the CUDA backend."""
    if k.backend == "cuda":
        return "CUDA C++ (after the shared prelude, as in Kernel.cuda_source)", \
            "\n\n".join(k.cuda_parts)
    return "numba (Python)", k.numba_source


def _rule(title: str) -> None:
    print(f"\n{'=' * 100}\n{title}\n{'=' * 100}")


def worked_example(backend: str) -> tuple[dl.CompiledModule, dl.Kernel]:
    torch.manual_seed(0)
    x, y = torch.randn(8, 4, 6), torch.randn(1, 4, 1)
    t0 = time.perf_counter()
    cm = dl.compile(Demo(), (x, y), dynamic={0: {0: "N"}}, backend=backend)
    p = cm.pipeline
    print(f"compiled once in {time.perf_counter() - t0:.2f} s ({cm.stats()['thunk']} thunk, "
          f"backend {p.kernels[0].backend})\n")
    print(p, "\n")
    print(p.graph, "\n")
    print(p.dims, "\n")
    print("solver trace:")
    for r in p.solver_trace:
        print(f"  #{r.constraint_id} {r.rule:<22} {r.before}  ->  {r.after}")
    print()
    dev = "cuda" if p.kernels[0].backend == "cuda" else "cpu"
    for n in (1, 7, 64):
        xs, ys = torch.randn(n, 4, 6, device=dev), y.to(dev)
        got, want = cm(xs, ys), Demo()(xs, ys)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        print(f"N={n:<3} output {tuple(got.shape)}  max |err| {(got - want).abs().max():.2e}  ok")
    s = cm.stats()
    print(f"\nstats: {s}")
    assert s["compiles"] == 1 and s["calls"] == 3
    try:
        cm(torch.randn(2, 5, 6, device=dev), y.to(dev))
    except dl.ShapeMismatch as e:
        print(f"\nbad input rejected before launch: {e}")
    print(f"\n{p.host_program}\n")
    k = max(p.kernels, key=lambda k: len(k.body.params))
    print(k.coord_map, "\n")
    language, source = listing(k)
    print(f"generated {language} for {k.name}, as the {k.backend} backend ran it:\n{source}")
    return cm, k


def real_model(name: str, size: int, backend: str):
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, size, size)
    t0 = time.perf_counter()
    cm = dl.compile(model, (x,), backend=backend)    # the default dynamic: every axis proposed
    p = cm.pipeline
    dev = "cuda" if p.kernels and p.kernels[0].backend == "cuda" else "cpu"
    model = model.to(dev)
    dims = ", ".join(f"{r.expr!r}:{r.kind.value}" for r in p.dims.of(p.graph.inputs[0].name))
    print(f"{name} (weights=None) compiled once at 1x3x{size}x{size} in "
          f"{time.perf_counter() - t0:.2f} s: input [{dims}], {len(p.graph.nodes)} ops, "
          f"{len(p.kernels)} generated kernels, {p.partition.counts()}\n")
    calls = []
    before = cm.stats()["calls"]   # a compile traced at batch 1 runs the example once
    big = size + size // 2
    for shape in ((2, 3, size, size), (5, 3, size, size), (2, 3, big, size + size // 4)):
        xs = torch.randn(*shape, device=dev)
        t0 = time.perf_counter()
        got = cm(xs)
        dt = time.perf_counter() - t0
        with torch.no_grad():
            want = model(xs)
        torch.testing.assert_close(got, want, **TOL)
        err = (got - want).abs().max().item()
        calls.append((shape, err))
        print(f"input {shape}: output {tuple(got.shape)} in {dt * 1e3:.1f} ms, max |err| against "
              f"eager {err:.2e}  ok")
    s = cm.stats()
    print(f"\nstats: compiles {s['compiles']}, calls {s['calls'] - before} (+{before} by the "
          f"compile, on the example), thunk {s['thunk']}, kernel builds {s['kernel_builds']}, compile "
          f"{s['compile_s']:.2f} s")
    assert s["compiles"] == 1 and s["calls"] == before + 3, s
    return model, cm, calls, shape


def main(argv: Sequence[str] | None = None) -> Result:
    args = parser().parse_args(argv)
    t0 = time.perf_counter()
    _rule("1. The worked example: relu(x * y).reshape(-1, 24), reduced (batch axis named N)")
    toy, shown = worked_example(args.backend)
    _rule(f"2. A TorchVision model: {args.model}, one compile for every batch and resolution")
    model, cm, calls, last = real_model(args.model, args.size, args.backend)
    path = Path(args.report).resolve()
    t1 = time.perf_counter()
    cm.report(last).to_html(path)
    print(f"\npipeline report of {args.model} ({time.perf_counter() - t1:.1f} s; every stage, "
          f"one tab each, with the call trace of input {last}; open in a browser): {path}")
    print(f"\ndemo done in {time.perf_counter() - t0:.1f} s")
    return Result(toy, model, cm, calls, shown, path)


if __name__ == "__main__":
    main()
