"""Issue 14 on the H200, fourth session: what holds device memory at batch 32, and what makes
a dynamic kernel slower than its static twin. One process per part:

    python3 data/bench/h200_stage4j/diag.py fold|peak|kernels [models]

- ``fold``: batch norm's scale folded into every convolution weight (the earlier rule) against
  folding it only where the NHWC weight is a copy anyway (``nhwc_weight_is_a_copy``): the new
  constants each holds, the batch-32 plain-call peak, and both timed in turn at batch 1/8/32.
- ``peak``: the allocations live at the peak of one batch-32 call (eager, DLCB plain, DLCB
  capture), from the caching allocator's trace, grouped by the frame that allocated them.
- ``kernels``: dynamic and static compiles of one model at batch 1 under torch.profiler (20
  replays): device time per kernel name, the two side by side.
"""
import statistics
import sys
from collections import defaultdict

import torch
import torchvision

import dlcb_lab as dl
import dlcb_lab.passes.layout as layout
from dlcb_lab.bench import zoo

part = sys.argv[1]
names = sys.argv[2].split(",") if len(sys.argv) > 2 else None
MB = 2 ** 20


def model(name):
    return getattr(torchvision.models, name)().eval().cuda()


def x(b):
    return torch.randn(b, 3, 224, 224, device="cuda")


def new_constants(cm, m):
    own = {p.untyped_storage().data_ptr() for p in [*m.parameters(), *m.buffers()]}
    return sum(c.numel() * c.element_size() for c in cm._constants
               if c.untyped_storage().data_ptr() not in own) / MB


def peak_of(fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = fn()
    torch.cuda.synchronize()
    del y
    return (torch.cuda.max_memory_allocated() - base) / MB


def compile_with(m, fold_all):
    keep = layout.nhwc_weight_is_a_copy
    if fold_all:
        layout.nhwc_weight_is_a_copy = lambda w: True
    try:
        cm = dl.compile(m, (x(1),), dynamic="auto")
    finally:
        layout.nhwc_weight_is_a_copy = keep
    for _ in range(3):
        cm(x(1))
    return cm


if part == "fold":
    for name in names or ["resnet50", "wide_resnet50_2", "resnext50_32x4d", "mobilenet_v3_large"]:
        m = model(name)
        with torch.no_grad():
            eager = peak_of(lambda: m(x(32)))
            cms = {"fold all": compile_with(m, True), "fold kxk": compile_with(m, False)}
            for k, cm in cms.items():
                print(f"{name} {k}: new constants {new_constants(cm, m):.1f} MiB; plain-call "
                      f"peak at 32 {peak_of(lambda: cm(x(32))):.1f} MiB (eager {eager:.1f})",
                      flush=True)
            for b in (1, 8, 32):
                xb = x(b)
                ts = defaultdict(list)
                for _ in range(5):
                    for k, cm in cms.items():
                        ts[k].append(zoo._event_median_ms(lambda: cm(xb), 20, 3))
                med = {k: statistics.median(v) for k, v in ts.items()}
                print(f"  batch {b}: " + ", ".join(f"{k} {v:.4f} ms" for k, v in med.items()) +
                      f"; kxk/all {med['fold kxk'] / med['fold all']:.3f}", flush=True)
        del cms, m
        torch.cuda.empty_cache()


def live_at_peak(fn):
    """(peak MiB above the start, [(MiB, frame)] of the blocks live at the peak)."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    try:
        y = fn()
        torch.cuda.synchronize()
        del y
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    live, cur, best, at_best = {}, 0, 0, {}
    for ev in snap["device_traces"][0]:
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            cur += ev["size"]
            if cur > best:
                best, at_best = cur, dict(live)
        elif ev["action"] in ("free_requested", "free_completed") and ev["addr"] in live:
            cur -= live.pop(ev["addr"])["size"]
    groups = defaultdict(int)
    for ev in at_best.values():
        frames = [f for f in ev.get("frames", []) if f["filename"].endswith(".py") and
                  ("dlcb_lab" in f["filename"] or "torchvision" in f["filename"])]
        where = f"{frames[0]['filename'].split('/')[-1]}:{frames[0]['line']} " \
                f"{frames[0]['name']}" if frames else "(no python frame)"
        groups[where] += ev["size"]
    return best / MB, sorted(((v / MB, k) for k, v in groups.items()), reverse=True)


if part == "peak":
    for name in names or ["resnet50", "wide_resnet50_2", "resnext50_32x4d"]:
        m = model(name)
        with torch.no_grad():
            xb = x(32)
            m(xb)
            cm = compile_with(m, False)
            cm(xb)   # the signature's warm-up: the next call captures
            for what, fn in (("eager", lambda: m(xb)), ("DLCB capture", lambda: cm(xb)),
                             ("DLCB replay", lambda: cm(xb))):
                peak, groups = live_at_peak(fn)
                print(f"{name} {what}: live at peak {peak:.1f} MiB", flush=True)
                for mb, where in groups[:8]:
                    print(f"    {mb:8.1f}  {where}")
            import os
            os.environ["DLCB_CUDA_GRAPHS"] = "0"
            plain = dl.compile(m, (x(1),), dynamic="auto")
            del os.environ["DLCB_CUDA_GRAPHS"]
            plain(xb)
            peak, groups = live_at_peak(lambda: plain(xb))
            print(f"{name} DLCB plain: live at peak {peak:.1f} MiB", flush=True)
            for mb, where in groups[:8]:
                print(f"    {mb:8.1f}  {where}")
        del m, cm
        torch.cuda.empty_cache()

if part == "kernels":
    from torch.profiler import ProfilerActivity, profile
    for name in names or ["efficientnet_b0"]:
        m = model(name)
        with torch.no_grad():
            x1 = x(1)
            cms = {"dynamic": compile_with(m, False),
                   "static": dl.compile(m, (x1,), dynamic=False)}
            per = {}
            for k, cm in cms.items():
                for _ in range(5):
                    cm(x1)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        cm(x1)
                    torch.cuda.synchronize()
                per[k] = {e.key: (e.device_time_total / 20, e.count // 20)
                          for e in prof.key_averages() if e.device_time_total > 0}
            keys = sorted(set(per["dynamic"]) | set(per["static"]),
                          key=lambda n: -max(per["dynamic"].get(n, (0, 0))[0],
                                             per["static"].get(n, (0, 0))[0]))
            tot = {k: sum(v for v, _ in per[k].values()) for k in per}
            print(f"{name} batch 1, device us per call: dynamic {tot['dynamic']:.1f}, static "
                  f"{tot['static']:.1f}")
            print(f"  {'dynamic us':>10} {'n':>3} {'static us':>10} {'n':>3}  kernel")
            for n in keys[:40]:
                d, s = per["dynamic"].get(n, (0, 0)), per["static"].get(n, (0, 0))
                print(f"  {d[0]:10.2f} {d[1]:3d} {s[0]:10.2f} {s[1]:3d}  {n[:90]}")
