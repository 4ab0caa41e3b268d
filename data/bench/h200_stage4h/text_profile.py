"""BERT-base and GPT-2: DLCB dynamic (one compile) against torch.compile(mode="reduce-overhead")
in one process, per shape: median CUDA-event ms of one call, and each system's device time per
call by kernel kind (torch.profiler). Run on the GPU machine: python text_profile.py [shapes]."""
import collections, re, sys, time
import torch
import dlcb_lab as dl
from dlcb_lab.bench import zoo
from dlcb_lab.bench.models import build, make_inputs
from torch.profiler import profile, ProfilerActivity

SHAPES = [tuple(map(int, s.split("x"))) for s in (sys.argv[1] if len(sys.argv) > 1 else "1x32,8x128,32x512").split(",")]
MODELS = (sys.argv[2] if len(sys.argv) > 2 else "bert,gpt2").split(",")


def kind(n):
    if n.startswith("dlcb_k"):
        n = re.sub(r"^dlcb_k\d+_", "gen:", n)
        return re.sub(r"_\d+(?=_|$)", "", n)[:60]
    if n.startswith("triton"):
        return "triton:" + re.sub(r"_\d+$", "", n[7:])[:53]
    return "lib:" + n[:56]


def prof(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    agg, cnt = collections.Counter(), collections.Counter()
    for e in p.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = getattr(e, "self_device_time_total", None) or e.self_cuda_time_total
        agg[kind(e.key)] += us / reps
        cnt[kind(e.key)] += e.count / reps
    return agg, cnt


with torch.no_grad():
    for name in MODELS:
        m = build(name).cuda().eval()
        t0 = time.perf_counter()
        cm = dl.compile(m, make_inputs(name, (SHAPES[0][0], SHAPES[0][1], None), "cuda", 1), dynamic="auto")
        print(f"== {name}: dlcb compile {time.perf_counter() - t0:.1f} s", flush=True)
        tc = torch.compile(m, mode="reduce-overhead")
        for b, s in SHAPES:
            args = make_inputs(name, (b, s, None), "cuda", 1)
            want = m(*args)
            sys_ = {"dlcb": lambda: cm(*args), "ro": lambda: tc(*args)}
            t0 = time.perf_counter(); tc(*args); tc(*args); torch.cuda.synchronize()
            print(f"-- {name} {b}x{s}: reduce-overhead setup {time.perf_counter() - t0:.1f} s", flush=True)
            errs = {k: zoo.rel_error(f(), want) for k, f in sys_.items()}
            ms = {k: zoo._event_median_ms(f, 20, 5) for k, f in sys_.items()}
            ms2 = {k: zoo._event_median_ms(f, 20, 5) for k, f in sys_.items()}
            print(f"   ms dlcb {ms['dlcb']:.3f}/{ms2['dlcb']:.3f}  ro {ms['ro']:.3f}/{ms2['ro']:.3f}  err {errs}", flush=True)
            per = {k: prof(f) for k, f in sys_.items()}
            for k in per:
                print(f"   {k}: device us/call {sum(per[k][0].values()):.1f} in {sum(per[k][1].values()):.0f} kernels")
            for k in per:
                print(f"   top {k}:")
                for kk, v in per[k][0].most_common(14):
                    print(f"     {v:9.1f} us  x{per[k][1][kk]:4.0f}  {kk}")
            del want
