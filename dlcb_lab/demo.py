"""``make demo``: compile one module once, run it at three batch sizes, check against eager, and show
the stage objects (dims classification, solver trace, host program, one generated CUDA kernel);
then write the pipeline report (every stage, one tab each) as a standalone HTML page
(``--report PATH``, default ``dlcb_demo_report.html`` in the system temp dir)."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

import dlcb_lab as dl


class Demo(torch.nn.Module):
    """Broadcast, reshape, permute and reductions mixed (DESIGN.md's worked example, extended)."""

    def forward(self, x, y):
        z = torch.relu(x * y).reshape(-1, 24)           # broadcast y [1,4,1]; -1 solves to N
        w = z.permute(1, 0)                             # [24, N]
        col = w.sum(dim=1, keepdim=True)                # reduce over the dynamic axis
        peak = z.amax(dim=1, keepdim=True)              # [N, 1]
        return col.permute(1, 0) + z / (peak + 1.0)     # [N, 24]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m dlcb_lab.demo", description=__doc__)
    ap.add_argument("--report", default=os.path.join(tempfile.gettempdir(),
                                                     "dlcb_demo_report.html"),
                    help="where to write the pipeline report (standalone HTML)")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    x, y = torch.randn(8, 4, 6), torch.randn(1, 4, 1)
    t0 = time.perf_counter()
    cm = dl.compile(Demo(), (x, y), dynamic={0: {0: "N"}})
    print(f"compiled once in {time.perf_counter() - t0:.2f} s ({cm.stats()['thunk']} thunk, "
          f"backend {cm.pipeline.kernels[0].backend})\n")
    p = cm.pipeline
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
    print(f"generated CUDA C++ for {k.name}:\n{k.cuda_source}")
    path = cm.report(x, y).to_html(args.report)
    print(f"\npipeline report (open in a browser; every stage, one tab each): {path.resolve()}")


if __name__ == "__main__":
    main()
