"""Issue 14 on the H100, fifth session: what bounds two missed targets. One process per part:

    python3 data/bench/h100_stage4k/diag.py pool|first

- ``pool``: the block-per-output reductions of ``bench.bandwidth`` (global_pool, row_softmax)
  and the pools of CNNs (a 7x7 ResNet head, a 112x112 squeeze-excite), each compiled once with a
  dynamic batch and launched with every strategy the launcher has (a thread, a block, a warp per
  output), plain launches queued back to back (``stream_ms``), against a device copy of the
  same bytes.
- ``first``: vit_b_16 compiled at batch 1, called at 1 and 8, then its first call at 32 under
  torch.profiler, after eager's first call at 32 in the same process (as the bench orders
  them): host time by op.
"""
import os
import sys

os.environ["DLCB_CUDA_GRAPHS"] = "0"

import torch
import torchvision

import dlcb_lab as dl
from dlcb_lab.bench.bandwidth import GlobalPool, RowSoftmax
from dlcb_lab.bench.overhead import stream_ms

part = sys.argv[1]


def force(cm, how):
    """Every cooperative launcher of ``cm`` made to pick ``how`` (None: its own choice)."""
    for f in cm.pipeline.thunks[0].launchers:
        if (1, False) not in getattr(f, "kernels", {}):
            continue
        if not hasattr(f, "_own"):
            f._own = (f.choose, f.warp_max)
        choose, wmax = f._own
        if how is None:
            f.choose, f.warp_max = choose, wmax
        else:
            f.choose = (lambda *a, **k: 0) if how == "thread" else (lambda *a, **k: 1)
            f.warp_max = (1 << 30) if how == "warp" else 0 if how == "block" else wmax


if part == "pool":
    cases = [("global_pool", GlobalPool, (64, 56, 56), (8, 32, 128)),
             ("row_softmax", RowSoftmax, (64, 56, 56), (8, 32, 128)),
             ("head_pool", GlobalPool, (2048, 7, 7), (1, 8, 32, 128)),
             ("se_pool", GlobalPool, (96, 112, 112), (1, 8, 32))]
    print(f"{'case':12} {'batch':>5} {'copy_us':>8}  " +
          "  ".join(f"{h:>14}" for h in ("default", "thread", "block", "warp")))
    for name, cls, (c, h, w), batches in cases:
        m = cls()
        s, b = torch.randn(1, c, 1, 1, device="cuda"), torch.randn(1, c, 1, 1, device="cuda")
        cm = dl.compile(m, (torch.randn(2, c, h, w, device="cuda"), s, b), dynamic={0: {0: "N"}})
        for n in batches:
            x = torch.randn(n, c, h, w, device="cuda")
            want = m(x, s, b)
            nbytes = (x.numel() + want.numel() + 2 * c) * 4
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            copy = stream_ms(lambda: dst.copy_(src), reps=100)
            cells = []
            for how in (None, "thread", "block", "warp"):
                force(cm, how)
                got = cm(x, s, b)
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
                ms = stream_ms(lambda: cm(x, s, b), reps=100)
                cells.append(f"{ms * 1e3:7.1f} ({100 * copy / ms:3.0f}%)")
            force(cm, None)
            print(f"{name:12} {n:5} {copy * 1e3:8.1f}  " + "  ".join(f"{c:>14}" for c in cells),
                  flush=True)

if part == "first":
    from torch.profiler import ProfilerActivity, profile

    m = torchvision.models.vit_b_16().eval().cuda()
    x = {b: torch.randn(b, 3, 224, 224, device="cuda") for b in (1, 8, 32)}
    with torch.no_grad():
        cm = dl.compile(m, (x[1],), dynamic="auto")
        for b in (1, 8):
            cm(x[b]), m(x[b])
        torch.cuda.synchronize()
        for name, fn in (("eager", lambda: m(x[32])), ("DLCB", lambda: cm(x[32]))):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                fn()
                torch.cuda.synchronize()
            print(f"=== {name}: first call at batch 32")
            print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=22,
                                         max_name_column_width=70))
