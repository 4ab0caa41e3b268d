"""Write the CUDA source ``kgen`` emits for convnext_tiny's window kernels (the 7x7 depthwise
convolution ``k42`` and the head pool ``k115``), dynamic and static at batch 1 and 8, 224², into
``src/`` as ``{tag}dyn_``/``{tag}static_``/``{tag}b8_static_`` files (run on the CPU):

    PYTHONPATH=. python3 data/bench/h100_stage4m/emit_src.py TAG
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
NAMES = ("dlcb_k42_conv2d_9_nhwc", "dlcb_k115_adaptive_avg_pool2d")
tag = sys.argv[1] if len(sys.argv) > 1 else ""
m = torchvision.models.convnext_tiny(weights=None).eval()
for prefix, batch, dynamic in (("dyn_", 1, "auto"), ("static_", 1, None), ("b8_static_", 8, None)):
    g, _ = run_passes(lower_to_ir(capture(m, [torch.randn(batch, 3, 224, 224)], dynamic)))
    kernels = {k.name: k for k in infer_kernels(g, cooperative=True)}
    for name in NAMES:
        (SRC / f"{tag}{prefix}{name}.cu").write_text(cuda_module([kernels[name]])[len(CUDA_PRELUDE) + 1:])
