"""Write the CUDA source ``kgen`` emits for squeezenet1_1's first max pool (``k1``), dynamic at
batch 1 and static at batch 8, 224², into ``src/`` as ``sq_{tag}dyn_``/``sq_{tag}b8_static_``:

    PYTHONPATH=. python3 data/bench/h100_stage4m/emit_sq.py TAG
"""
import pathlib
import sys

import torch
import torchvision

from dlcb_lab.bridge.aten import lower_to_ir
from dlcb_lab.bridge.capture import capture
from dlcb_lab.kgen.emit import CUDA_PRELUDE, cuda_module
from dlcb_lab.kgen.infer import infer_kernels
from dlcb_lab.passes import run_passes

SRC = pathlib.Path(__file__).parent / "src"   # the kernels; the prelude in prelude.cuh
NAME = "dlcb_k1_max_pool2d_nhwc"
tag = sys.argv[1] if len(sys.argv) > 1 else ""
m = torchvision.models.squeezenet1_1(weights=None).eval()
for prefix, batch, dynamic in (("dyn_", 1, "auto"), ("b8_static_", 8, None)):
    g, _ = run_passes(lower_to_ir(capture(m, [torch.randn(batch, 3, 224, 224)], dynamic)))
    k = next(k for k in infer_kernels(g, cooperative=True) if k.name == NAME)
    (SRC / f"sq_{tag}{prefix}{NAME}.cu").write_text(cuda_module([k])[len(CUDA_PRELUDE) + 1:])
