"""A new shape's first call, what bounds it: efficientnet_b0 (the sweep's worst cell, 96 ms at
batch 32 after a compile at 1), in one process per SYSTEM: ``dlcb`` (dl.compile dynamic "auto"
at batch 1, its channels-last convolutions), ``eager-nhwc`` (eager on a channels-last copy) and
``eager`` (NCHW). Each runs batch 1 three times, batch 8 three times (as the sweep's shapes
follow each other), then batch 32: the first call timed and profiled (torch.profiler, CPU and
CUDA), then the second and third (DLCB: the capture, then a replay).

    PYTHONPATH=. python3 data/bench/h100_stage4q/first.py SYSTEM [MODEL]
"""
import sys
import time

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile

import dlcb_lab as dl

system = sys.argv[1]
name = sys.argv[2] if len(sys.argv) > 2 else "efficientnet_b0"
m = getattr(torchvision.models, name)(weights=None).eval().cuda()
x1 = torch.randn(1, 3, 224, 224, device="cuda")
x8 = torch.randn(8, 3, 224, 224, device="cuda")
x32 = torch.randn(32, 3, 224, 224, device="cuda")
if system == "eager-nhwc":
    m = m.to(memory_format=torch.channels_last)
    x1, x8, x32 = (t.contiguous(memory_format=torch.channels_last) for t in (x1, x8, x32))


def timed(f, x):
    torch.cuda.synchronize()
    t = time.perf_counter()
    f(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


with torch.no_grad():
    f = dl.compile(m, x1, dynamic="auto") if system == "dlcb" else m
    for b, x in ((1, x1), (8, x8)):
        print(system, name, f"batch {b}:", ", ".join(f"{timed(f, x):.2f}" for _ in range(3)), "ms")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        first = timed(f, x32)
    later = [timed(f, x32) for _ in range(2)]
    print(f"{system} {name} batch 32: first {first:.2f} ms (profiled), then "
          + ", ".join(f"{t:.2f}" for t in later) + " ms")
    if system == "dlcb":
        print(f.stats())
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))
