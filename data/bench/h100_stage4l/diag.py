"""Issue 14 on the H100, sixth session: where a dynamic compile is slower than its static twin.

    python3 data/bench/h100_stage4l/diag.py dynstatic MODEL[,MODEL..] BATCH[,BATCH..]

For each model, one dynamic compile (``dynamic="auto"`` at batch 1, as ``bench.models`` does)
and a static compile per batch: the median CUDA-event latency of each, timed in turn (5 rounds
of 30 calls), ``cm.stats()`` after, the host time of one call (wall, synchronized), and the
device time per kernel under torch.profiler over 20 calls, the two side by side.
"""
import statistics
import sys
import time

import torch
import torchvision

import dlcb_lab as dl
from dlcb_lab.bench.zoo import _event_median_ms

part, names, batches = sys.argv[1], sys.argv[2].split(","), [int(b) for b in sys.argv[3].split(",")]


def x(b):
    return torch.randn(b, 3, 224, 224, device="cuda")


def per_kernel(cm, xb, n=20):
    from torch.profiler import ProfilerActivity, profile
    for _ in range(5):
        cm(xb)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            cm(xb)
        torch.cuda.synchronize()
    return {e.key: (e.device_time_total / n, e.count // n)
            for e in prof.key_averages() if e.device_time_total > 0 and e.count >= n}


def host_ms(cm, xb, n=50):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        cm(xb)
        ts.append(time.perf_counter() - t)   # launch (or replay) time, not the device's
    torch.cuda.synchronize()
    return 1e3 * statistics.median(ts)


if part == "dynstatic":
    for name in names:
        m = getattr(torchvision.models, name)().eval().cuda()
        with torch.no_grad():
            dyn = dl.compile(m, (x(1),), dynamic="auto")
            for b in batches:
                xb = x(b)
                st = dl.compile(m, (xb,), dynamic=False)
                cms = {"dynamic": dyn, "static": st}
                times = {k: [] for k in cms}
                for _ in range(5):
                    for k, cm in cms.items():
                        times[k].append(_event_median_ms(lambda: cm(xb), 30, 5))
                med = {k: statistics.median(v) for k, v in times.items()}
                hosts = {k: host_ms(cm, xb) for k, cm in cms.items()}
                print(f"\n{name} batch {b}: dynamic {med['dynamic']:.4f} ms, static "
                      f"{med['static']:.4f} ms, ratio {med['dynamic'] / med['static']:.3f}; "
                      f"host ms per call: dynamic {hosts['dynamic']:.4f}, static "
                      f"{hosts['static']:.4f}")
                for k, cm in cms.items():
                    s = cm.stats()
                    print(f"  {k}: thunk {s['thunk']}, variants {s['variants']}, jit "
                          f"{s['jit_builds']}, graphs {s['graphs']}, kernels {s['kernels']}")
                per = {k: per_kernel(cm, xb) for k, cm in cms.items()}
                tot = {k: sum(v for v, _ in per[k].values()) for k in per}
                print(f"  device us per call: dynamic {tot['dynamic']:.1f}, static "
                      f"{tot['static']:.1f}")
                keys = sorted(set(per["dynamic"]) | set(per["static"]),
                              key=lambda n: -abs(per["dynamic"].get(n, (0, 0))[0] -
                                                 per["static"].get(n, (0, 0))[0]))
                print(f"  {'dynamic us':>10} {'n':>3} {'static us':>10} {'n':>3}  kernel "
                      f"(largest differences first)")
                for n in keys[:25]:
                    d, s = per["dynamic"].get(n, (0, 0)), per["static"].get(n, (0, 0))
                    print(f"  {d[0]:10.2f} {d[1]:3d} {s[0]:10.2f} {s[1]:3d}  {n[:100]}")
