"""Launchers: call one compiled kernel (and its variants) with buffers and int params.

Both take ``(variant, numel, out, ins, params, narrow)``: ``variant`` 0 is one thread per output
element, 1 (reductions) one block per output element; ``narrow`` selects the 32-bit index entry
point (CUDA only; the host program decides it from the kernel's index bound). ``geometry(variant,
numel)`` is the launch configuration ``(grid, block)`` a call uses (``Thunk.launches`` reports it;
``Kernel.forall`` launches with it)."""

from __future__ import annotations

import torch

from ..errors import ShapeMismatch
from ..kgen.abi import pack

BLOCK = 256
MAX_GRID = 1 << 16
NARROW_LIMIT = (1 << 31) - (1 << 25)
"""Largest index bound served by the 32-bit entry point: every index intermediate (at most
``kgen.infer.BOUND_SLACK`` above the bound), and ``t`` plus the grid-stride step (at most
``MAX_GRID * BLOCK``), stays below 2**31."""


class CpuLauncher:
    """numba kernel ``fn(out, *ins, numel, *params)`` (``kgen.abi``) over flat views of CPU
    tensors."""

    def __init__(self, fn):
        self.fn = fn

    def choose(self, numel: int, extent: int) -> int:
        return 0

    def geometry(self, variant: int, numel: int) -> tuple[int, int]:
        """``(numel, 1)``: one ``prange`` iteration per output element (numba splits them over
        its threads)."""
        return numel, 1

    def __call__(self, variant: int, numel: int, out: torch.Tensor, ins, params, narrow=False):
        self.fn(*pack(_flat_array(out), [_flat_array(a) for a in ins], numel, params))


def _flat_array(t: torch.Tensor):
    """A flat numpy view of ``t``; 16-bit floats as their ``uint16`` bits (see ``runtime.half``)."""
    t = t.view(-1)
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().view("uint16")
    return t.numpy()


class CudaLauncher:
    """``CudaKernel``s ``(out, *ins, numel, *params)`` (``kgen.abi``) keyed by (variant,
    narrow). The cooperative variant is chosen when the reduced extent is large enough to occupy
    a block and either the outputs alone would not fill the GPU or the extent is long."""

    def __init__(self, kernels: dict, sm_count: int = 132):
        self.kernels = kernels
        self.fill = sm_count * 2048 // BLOCK * BLOCK  # threads resident on the whole GPU

    def choose(self, numel: int, extent: int) -> int:
        if (1, False) not in self.kernels or extent < 64:
            return 0
        return 1 if (numel < self.fill or extent >= 4096) else 0

    def geometry(self, variant: int, numel: int) -> tuple[int, int]:
        """``(grid, block)`` for ``numel`` outputs: ``BLOCK`` threads per block, one thread (variant
        0) or one block (variant 1) per output element, the grid capped at ``MAX_GRID`` (the
        kernels loop grid-stride over the rest); grid 0 when there is nothing to compute."""
        return min(MAX_GRID, numel if variant else -(-numel // BLOCK)), BLOCK

    def __call__(self, variant: int, numel: int, out, ins, params, narrow=False):
        k = self.kernels[variant, narrow]
        k[self.geometry(variant, numel)](*pack(out, ins, numel, params))


def check_index(t: torch.Tensor, extent: int, what: str) -> None:
    """Every value of index tensor ``t`` in ``[0, extent)``, before a kernel reads it as a
    coordinate (a device sync on CUDA)."""
    if not t.numel():
        return
    lo, hi = torch.stack(torch.aminmax(t.reshape(-1))).tolist()   # one sync
    if not (0 <= lo and hi < extent):
        raise ShapeMismatch(f"{what}: index values in [{lo}, {hi}], outside [0, {extent})")
