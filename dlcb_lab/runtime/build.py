"""Build the kernels of one compile as one unit: one NVRTC translation unit (CUDA) or one numba
module file (CPU), and a launcher per kernel."""

from __future__ import annotations

from typing import Sequence

import torch

from ..kgen.emit import NARROW, cuda_module, entry_points, numba_module, signature
from ..kgen.kir import KernelBody
from .launchers import CpuLauncher, CudaLauncher


def build_kernels(bodies: Sequence[KernelBody], backend: str) -> tuple[list, int]:
    """Returns (a launcher per kernel, kernel functions built incl. variants and index widths)."""
    if backend == "cuda":
        from .cuda_launch import CudaModule
        from .nvrtc import compile_cubin, device_arch

        names = entry_points(bodies)
        mod = CudaModule(compile_cubin(cuda_module(bodies), arch=device_arch()), names)
        sm = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        launchers = [CudaLauncher({(i, narrow): mod.kernel(v.name + NARROW * narrow, signature(v))
                                   for i, v in enumerate(b.variants()) for narrow in (False, True)},
                                  sm)
                     for b in bodies]
        return launchers, len(names)
    from .numba_cpu import load_numba_module

    mod, _ = load_numba_module(numba_module(bodies))
    return [CpuLauncher(getattr(mod, b.name)) for b in bodies], len(bodies)
