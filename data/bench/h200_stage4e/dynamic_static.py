"""DLCB dynamic against its static twin in one process, alternating, per batch (CUDA graphs on)."""
import statistics, sys, torch, torchvision
import dlcb_lab as dl
sys.path.insert(0, "data/bench/h200_stage4c")
from dynamic_static_first_call import median_ms
for name in sys.argv[1].split(","):
    m = getattr(torchvision.models, name)(weights=None).eval().cuda()
    dyn = dl.compile(m, (torch.randn(2, 3, 224, 224, device="cuda"),), dynamic={0: {0: "N"}})
    for n in (1, 8, 32):
        x = torch.randn(n, 3, 224, 224, device="cuda")
        sta = dl.compile(m, (x,))
        for _ in range(3):
            dyn(x); sta(x)
        r = {"dyn": [], "static": []}
        for _ in range(7):
            r["dyn"].append(median_ms(lambda: dyn(x)))
            r["static"].append(median_ms(lambda: sta(x)))
        d, s = statistics.median(r["dyn"]), statistics.median(r["static"])
        print(f"{name} batch {n}: dyn {d:.4f} ms static {s:.4f} ms dyn/static {d / s:.3f}", flush=True)
