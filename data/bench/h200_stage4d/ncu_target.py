"""The bench.bandwidth subgraphs at batch 128 (dynamic compile), each called twice after warm-up,
eager once, for ncu."""
import torch, dlcb_lab as dl
from dlcb_lab.bench.bandwidth import MODELS
c, h, w = 64, 56, 56
s, b = torch.randn(1, c, 1, 1, device="cuda"), torch.randn(1, c, 1, 1, device="cuda")
x = torch.randn(128, c, h, w, device="cuda")
for name, cls in MODELS.items():
    m = cls()
    cm = dl.compile(m, (torch.randn(2, c, h, w, device="cuda"), s, b), dynamic={0: {0: "N"}},
                    backend="cuda")
    for _ in range(2):
        cm(x, s, b)
    m(x, s, b)
    torch.cuda.synchronize()
    print(name, "done", flush=True)
