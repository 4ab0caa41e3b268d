"""Layer norm and softmax over literal rows of 513..1024 (BERT/GPT-2: 768): a warp per row with
the row in registers (kgen.emit.warp_cache) against the block per row before it, eager and a
device copy of the same bytes (read + write), in one process. stream_ms: mean ms per call."""
import torch, torch.nn.functional as F
import dlcb_lab as dl
from dlcb_lab.runtime import launchers
from dlcb_lab.bench.overhead import stream_ms
L = launchers.CudaLauncher
real = L._by_warp
class ADDLN(torch.nn.Module):
    def forward(self, x, r, w, b): return F.layer_norm(x + r, (x.shape[-1],), w, b)
class SM(torch.nn.Module):
    def forward(self, x, r, w, b): return torch.softmax(x + r, -1)
for name, cls in (("add+layer_norm", ADDLN), ("add+softmax", SM)):
    for rows, c in ((16384, 768), (1024, 768), (32, 768), (16384, 1024), (16384, 640)):
        x, r = (torch.randn(rows, c, device="cuda") for _ in range(2))
        w, b = torch.randn(c, device="cuda"), torch.randn(c, device="cuda")
        m = cls()
        cm = dl.compile(m, (x[:2], r[:2], w, b), dynamic={0: {0: "N"}, 1: {0: "N"}}, backend="cuda")
        want = m(x, r, w, b)
        res = {"eager": stream_ms(lambda: m(x, r, w, b), reps=50)}
        for tag, by in (("warp", real), ("block", lambda self, e, n: self.warp is not None and n and e <= launchers.WARP_MAX)):
            L._by_warp = by
            torch.testing.assert_close(cm(x, r, w, b), want, rtol=1e-5, atol=1e-5)
            names = [s.name for s in cm.trace(x, r, w, b).steps if s.kind == "kernel"]
            res[tag] = stream_ms(lambda: cm(x, r, w, b), reps=50)
            res[tag + "_k"] = names[-1].split("_", 2)[-1]
        L._by_warp = real
        src = torch.empty(x.numel() * 3 // 2, device="cuda"); dst = torch.empty_like(src)   # same bytes moved
        res["copy"] = stream_ms(lambda: dst.copy_(src), reps=50)
        print(f"{name:15s} {rows:6d}x{c:5d} eager {res['eager']*1e3:7.1f}us  warp {res['warp']*1e3:7.1f}us ({res['warp_k']})  "
              f"block {res['block']*1e3:7.1f}us ({res['block_k']})  copy {res['copy']*1e3:6.1f}us", flush=True)
