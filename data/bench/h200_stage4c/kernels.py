"""Device time per kernel of each ``bench.bandwidth`` subgraph at batch 128 (torch.profiler, 20
calls): DLCB dynamic with plain launches beside eager's kernels. ``NOUNROLL=1`` emits the
block-per-output reduction loops without ``#pragma unroll 4`` (the A/B in kernels.csv);
``DLCB_VECTORIZE=0`` builds no vectorized entry points.

    PYTHONPATH=. python3 data/bench/h200_stage4c/kernels.py OUT.csv
"""

import os
import sys

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

import dlcb_lab as dl
from dlcb_lab.bench.bandwidth import MODELS

if os.environ.get("NOUNROLL"):
    from dlcb_lab.kgen import emit

    emit._Cuda.loop_pragmas = lambda self, s: []


def main(out: str) -> None:
    c, h, w, n = 64, 56, 56, 128
    s, b = (torch.randn(1, c, 1, 1, device="cuda") for _ in range(2))
    x = torch.randn(n, c, h, w, device="cuda")
    rows = []
    for name, cls in MODELS.items():
        m = cls()
        cm = dl.compile(m, (torch.randn(2, c, h, w, device="cuda"), s, b), dynamic={0: {0: "N"}})
        cm._thunk.graphs = None
        for system, fn in (("dlcb", lambda: cm(x, s, b)), ("eager", lambda: m(x, s, b))):
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
            rows += [(name, system, e.key[:60], e.count // 20, round(e.device_time, 1))
                     for e in p.key_averages()
                     if e.device_type.name == "CUDA" and e.count >= 20]
    df = pd.DataFrame(rows, columns=["model", "system", "kernel", "per_call", "us"])
    print(df.to_string())
    df.to_csv(out, index=False)


if __name__ == "__main__":
    main(sys.argv[1])
