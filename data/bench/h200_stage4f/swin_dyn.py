import re, collections, torch
import dlcb_lab as dl
from dlcb_lab.bench.models import build
from torch.profiler import profile, ProfilerActivity
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
m = build("swin_t").cuda().eval()
x = torch.randn(32, 3, 224, 224, device="cuda")
def kind(n):
    if not n.startswith("dlcb_k"): return "lib:" + n[:60]
    n = re.sub(r"^dlcb_k\d+_", "", n); n = re.sub(r"_\d+(?=_|$)", "", n); return n
with torch.no_grad():
    cms = {"static": dl.compile(m, (x,), dynamic=False), "dynamic": dl.compile(m, (x[:1],), dynamic="auto")}
    per = {}
    for name, cm in cms.items():
        for _ in range(5): cm(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(10): cm(x)
            torch.cuda.synchronize()
        agg = collections.Counter(); cnt = collections.Counter(); top = collections.Counter()
        for e in p.key_averages():
            if e.device_type != torch.autograd.DeviceType.CUDA: continue
            us = getattr(e, "self_device_time_total", None) or e.self_cuda_time_total
            agg[kind(e.key)] += us / 10; cnt[kind(e.key)] += e.count / 10; top[e.key] = us / 10
        per[name] = (agg, cnt, top)
        print(name, "total us", round(sum(agg.values())), "variants", getattr(cm, "variants", None) and len(cm.variants), flush=True)
    ks = sorted(set(per["static"][0]) | set(per["dynamic"][0]), key=lambda k: -per["dynamic"][0][k])
    print(f"{'kind':70s} {'static us':>10s} {'dyn us':>10s} {'n_s':>5s} {'n_d':>5s}")
    for k in ks[:30]:
        print(f"{k:70s} {per['static'][0][k]:10.1f} {per['dynamic'][0][k]:10.1f} {per['static'][1][k]:5.0f} {per['dynamic'][1][k]:5.0f}")
    for name in ("static", "dynamic"):
        print("== top kernels", name)
        for k, v in per[name][2].most_common(12): print(f"  {v:9.1f} {k[:100]}")
