"""A TorchVision model's cold DLCB compile in a fresh process: import, dl.compile (dynamic
"auto", batch 1, 224², parameters on cuda), the first call, each phase; one line of JSON.

    PYTHONPATH=. python3 data/bench/h100_stage4q/cold.py MODEL
"""
import json
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402
import torchvision  # noqa: E402

import dlcb_lab as dl  # noqa: E402

t_import = time.perf_counter() - t0
name = sys.argv[1]
m = getattr(torchvision.models, name)(weights=None).eval().cuda()
x = torch.randn(1, 3, 224, 224, device="cuda")
torch.cuda.synchronize()
with torch.no_grad():
    t = time.perf_counter()
    cm = dl.compile(m, x, dynamic="auto")
    cm(x)
    torch.cuda.synchronize()
    total = time.perf_counter() - t
print(json.dumps({"model": name, "import_s": round(t_import, 3), "compile_s": round(total, 3),
                  **{k: round(v, 3) for k, v in cm.pipeline.timings.items()}}))
