"""(1) DLCB dynamic against its static twin in one process, timed alternately (CUDA graphs on, then
plain launches), with each call's device time from torch.profiler; (2) a new batch size's first
call of a dynamic ResNet-50 compile, beside eager's, and where its host time goes.

    PYTHONPATH=. python3 data/bench/h200_stage4c/dynamic_static_first_call.py
"""

import statistics
import time

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile

import dlcb_lab as dl

torch.backends.cudnn.allow_tf32 = True
torch.backends.cuda.matmul.allow_tf32 = True


def median_ms(fn, reps=20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return statistics.median(out)


def device_us(cm, x, calls=10):
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(calls):
            cm(x)
        torch.cuda.synchronize()
    ev = [e for e in p.key_averages() if e.device_type.name == "CUDA"]
    return round(sum(e.device_time_total for e in ev) / calls, 1)


def dynamic_vs_static(name):
    m = getattr(torchvision.models, name)(weights=None).eval().cuda()
    x = torch.randn(32, 3, 224, 224, device="cuda")
    dyn = dl.compile(m, (torch.randn(2, 3, 224, 224, device="cuda"),), dynamic={0: {0: "N"}})
    sta = dl.compile(m, (x,))
    for graphs in (True, False):
        if not graphs:
            dyn._thunk.graphs = sta._thunk.graphs = None
        for _ in range(3):
            dyn(x)
            sta(x)
        r = {"dyn": [], "static": []}
        for _ in range(5):
            r["dyn"].append(median_ms(lambda: dyn(x)))
            r["static"].append(median_ms(lambda: sta(x)))
        print(name, "graphs" if graphs else "plain",
              {k: round(statistics.median(v), 4) for k, v in r.items()}, flush=True)
    print(name, "device us/call", {"dyn": device_us(dyn, x), "static": device_us(sta, x)})


def first_call():
    m = torchvision.models.resnet50(weights=None).eval().cuda()
    cm = dl.compile(m, (torch.randn(2, 3, 224, 224, device="cuda"),), dynamic={0: {0: "N"}})
    cm(torch.randn(2, 3, 224, 224, device="cuda"))
    for n in (16, 24):
        x = torch.randn(n, 3, 224, 224, device="cuda")
        for tag, fn in (("dlcb", cm), ("eager", m)):
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn(x)
            torch.cuda.synchronize()
            print(f"{tag} first call at batch {n}: {(time.perf_counter() - t) * 1e3:.2f} ms")
    x = torch.randn(40, 3, 224, 224, device="cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        cm(x)
        torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=14,
                                 max_name_column_width=50))


if __name__ == "__main__":
    with torch.no_grad():
        for name in ("squeezenet1_1", "efficientnet_b0"):
            dynamic_vs_static(name)
        first_call()
