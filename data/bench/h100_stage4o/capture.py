"""Where capture's time goes on the device machine: ``bridge.capture`` of a TorchVision model
(dynamic "auto", batch 1, 224²) with its parameters on DEVICE, the first and a second time in one
process, and the first one's cProfile, top functions by own time.

    PYTHONPATH=. python3 data/bench/h100_stage4o/capture.py MODEL DEVICE
"""
import cProfile
import pstats
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402
import torchvision  # noqa: E402

from dlcb_lab.bridge.capture import capture  # noqa: E402

name, device = sys.argv[1], sys.argv[2]
print(f"import {time.perf_counter() - t0:.2f} s")
m = getattr(torchvision.models, name)(weights=None).eval().to(device)
x = torch.randn(1, 3, 224, 224, device=device)
pr = cProfile.Profile()
for i in range(2):
    t = time.perf_counter()
    if i == 0:
        pr.enable()
    capture(m, (x,), "auto")
    if i == 0:
        pr.disable()
    print(f"{name} on {device}: capture {i}: {time.perf_counter() - t:.2f} s")
st = pstats.Stats(pr)
st.sort_stats("tottime").print_stats(25)
st.sort_stats("cumulative").print_stats(40)
