"""Issue 14's three missed targets, each broken down on the H200 in one process per part:
capture (torch.export, fake tensors on cuda against cpu), the first call at a new shape (torch.profiler's
host-side operators), and peak memory at batch 32 (per call: plain, capture, replay).

    python3 data/bench/h200_stage4i/diag.py capture|init|first|memory [models]
"""
import sys
import time

import torch
import torchvision

import dlcb_lab as dl
from dlcb_lab.bridge.capture import capture

part = sys.argv[1]
names = sys.argv[2].split(",") if len(sys.argv) > 2 else None
dev = "cuda"


def model(name, device=dev):
    return getattr(torchvision.models, name)().eval().to(device)


def x(b, device=dev):
    return torch.randn(b, 3, 224, 224, device=device)


def wall(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t) * 1e3


if part == "capture":   # export of the same model with fake tensors on cuda, then on cpu, twice
    for name in names or ["resnet18", "mobilenet_v3_large", "densenet121"]:
        for device in ("cuda", "cpu", "cuda", "cpu"):
            m, e = model(name, device), x(2, device)
            t = time.perf_counter()
            capture(m, (e,), "auto")
            print(f"capture {name} {device}: {time.perf_counter() - t:.2f} s", flush=True)

if part == "init":   # the first capture in a fresh process, profiled (cumulative, then own time)
    import cProfile
    import pstats
    m, e = model(names[0] if names else "resnet18"), x(2)
    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    capture(m, (e,), "auto")
    pr.disable()
    print(f"first capture: {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    capture(m, (e,), "auto")
    print(f"second capture: {time.perf_counter() - t:.2f} s")
    pstats.Stats(pr, stream=sys.stdout).sort_stats("cumulative").print_stats(60)
    pstats.Stats(pr, stream=sys.stdout).sort_stats("tottime").print_stats(25)

if part == "first":   # compiled at batch 1; the first call at 8 and 32, profiled
    from torch.profiler import ProfilerActivity, profile
    for name in names or ["densenet121", "vit_b_16", "efficientnet_b0", "resnet18"]:
        m = model(name)
        with torch.no_grad():
            cm = dl.compile(m, (x(1),), dynamic="auto")
            cm(x(1)); cm(x(1)); cm(x(1))
            for b in (8, 32):
                xb = x(b)
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    _, t1 = wall(lambda: cm(xb))
                _, t2 = wall(lambda: cm(xb))
                _, t3 = wall(lambda: cm(xb))
                me = model(name)
                _, e1 = wall(lambda: me(xb))
                _, e2 = wall(lambda: me(xb))
                mc = model(name).to(memory_format=torch.channels_last)
                xc = xb.to(memory_format=torch.channels_last)
                _, c1 = wall(lambda: mc(xc))
                _, c2 = wall(lambda: mc(xc))
                print(f"\n== {name} batch {b}: DLCB first/second(capture)/third(replay) "
                      f"{t1:.1f} / {t2:.1f} / {t3:.1f} ms; eager NCHW first/second {e1:.1f} / "
                      f"{e2:.1f} ms; eager channels-last first/second {c1:.1f} / {c2:.1f} ms")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14,
                                                max_name_column_width=60))
                print(cm.stats()["graphs"])

if part == "memory":   # batch 32 after a compile at batch 1: per-call peaks above the resident
    MB = 2 ** 20
    for name in names or ["alexnet", "resnet50", "wide_resnet50_2", "mobilenet_v3_small"]:
        m = model(name)
        weights = sum(p.numel() * p.element_size() for p in m.parameters()) / MB
        xb = x(32)
        with torch.no_grad():
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            y = m(xb)
            del y
            torch.cuda.synchronize()
            eager = (torch.cuda.max_memory_allocated() - base) / MB
            cm = dl.compile(m, (x(1),), dynamic="auto")
            cm(x(1)); cm(x(1)); cm(x(1))
            ptrs = {p.data_ptr() for p in [*m.parameters(), *m.buffers()]}
            consts = sum(c.numel() * c.element_size() for c in cm._constants
                         if c.data_ptr() not in ptrs) / MB
            torch.cuda.synchronize()
            res = torch.cuda.memory_allocated()
            row = []
            for what in ("plain", "capture", "replay"):
                torch.cuda.reset_peak_memory_stats()
                y = cm(xb)
                torch.cuda.synchronize()
                held = (torch.cuda.memory_allocated() - res) / MB
                peak = (torch.cuda.max_memory_allocated() - res) / MB
                del y
                row.append(f"{what} peak {peak:.1f} held-with-output {held:.1f}")
            after = (torch.cuda.memory_allocated() - res) / MB
            print(f"{name}: weights {weights:.1f} MB, eager peak above weights+input {eager:.1f};"
                  f" DLCB new constants {consts:.1f}, resident after batch-1 compile "
                  f"{(res - base) / MB:.1f}; at 32: {'; '.join(row)}; held after {after:.1f}; "
                  f"graphs {cm.stats()['graphs']}", flush=True)
            snap = torch.cuda.memory_stats()
            print("  reserved", snap["reserved_bytes.all.current"] / MB, "MB", flush=True)
