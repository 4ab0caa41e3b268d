"""Row kernels: warp per row vs the launch policy before it (block / thread per row), vs eager."""
import torch, torch.nn.functional as F
import dlcb_lab as dl
from dlcb_lab.runtime import launchers
from dlcb_lab.bench.overhead import stream_ms
L = launchers.CudaLauncher
real = L._by_warp
class LN(torch.nn.Module):
    def forward(self, x, w, b): return F.layer_norm(x, (x.shape[-1],), w, b)
class SM(torch.nn.Module):
    def forward(self, x, w, b): return torch.softmax(x + b, -1)
class SUM(torch.nn.Module):
    def forward(self, x, w, b): return (x * w).sum(-1)
rows = []
for name, cls, shapes in (("layer_norm", LN, [(100352, 96), (25088, 192), (6272, 384), (1568, 768), (8, 96), (16384, 64), (4096, 512)]),
                          ("softmax", SM, [(301056, 49), (32*197*12, 197), (4096, 128), (64, 49)]),
                          ("sum", SUM, [(100352, 96), (65536, 49)])):
    for r, c in shapes:
        x = torch.randn(r, c, device="cuda"); w = torch.randn(c, device="cuda"); b = torch.randn(c, device="cuda")
        m = cls()
        cm = dl.compile(m, (x[:2], w, b), dynamic={0: {0: "N"}}, backend="cuda")
        want = m(x, w, b)
        res = {"eager": stream_ms(lambda: m(x, w, b), reps=50)}
        for tag, by in (("warp", real), ("before", lambda self, e, n: False)):
            L._by_warp = by
            torch.testing.assert_close(cm(x, w, b), want, rtol=1e-5, atol=1e-5)
            names = [s.name for s in cm.trace(x, w, b).steps if s.kind == "kernel"]
            res[tag] = stream_ms(lambda: cm(x, w, b), reps=50)
            res[tag + "_k"] = names[-1].split("_", 2)[-1]
        L._by_warp = real
        copy = torch.empty(x.numel() * 2, device="cuda"); src = torch.empty_like(copy)
        res["copy"] = stream_ms(lambda: copy.copy_(src), reps=50)
        rows.append((name, r, c, res))
        print(f"{name:10s} {r:7d}x{c:4d} eager {res['eager']*1e3:8.1f}us  warp {res['warp']*1e3:8.1f}us ({res['warp_k']})  before {res['before']*1e3:8.1f}us ({res['before_k']})  copy {res['copy']*1e3:7.1f}us", flush=True)
