"""Launchers: call one compiled kernel (and its variants) with buffers and int params.

Both take ``(variant, numel, out, ins, params, narrow, width)``: ``variant`` 0 is one thread per
output element, 1 (reductions) one block per output element; ``narrow`` selects the 32-bit index
entry point (CUDA only; the host program decides it from the kernel's index bound); ``width`` > 1
the wide entry point: of variant 0 the vectorized one, that many outputs per thread, of variant 1
the warp-per-output one, that many outputs per block (``width(...)`` decides it at launch).
``geometry(variant, numel, width)`` is the launch configuration ``(grid, block)`` a call uses
(``Thunk.launches`` reports it; ``Kernel.forall`` launches with it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..errors import ShapeMismatch
from ..kgen.abi import pack

BLOCK = 256
MAX_GRID = 1 << 16
WARP_MAX = 512
"""Longest reduced extent a warp per output serves (``kgen.emit.WARP``; the row it keeps in
registers, ``kgen.emit.ROW_CACHE`` elements per lane) where the kernel gives no other
(``kgen.emit.warp_cache``: a normalization or softmax row of literal extent, up to
``kgen.emit.WARP_ROW_MAX``): every block-per-output launch at or below it runs a warp per
output instead. A block per row there holds 256 threads through two block
barriers per row for a handful of elements each: on the H200, Swin-T's layer norms over 96
channels at batch 32 took 1 ms a call (eager's 43 us)."""
WARP_MIN_ROWS = 32
"""Shortest row (``kgen.emit.warp_rows``: no reduced load steps by more than one element) that a
warp per output takes over from a thread per output, whatever the outputs: a thread walking its
own row reads 32 rows' elements per warp load (Swin-T's softmax over 49-element window rows,
301,056 rows at batch 32: 606 us, eager's 89)."""
WARPS_PER_SM = 8
"""Outputs per SM from which a plain row reduction (``kgen.emit.caches_row`` false: a sum, mean
or max over contiguous rows, nothing kept in registers) runs a warp per output at any reduced
extent, past ``warp_max``: every warp streams its row with no block barrier. On the H100, a
global average pool over 3136-element NCHW rows at batch 128 (8192 rows): a block per row 54 us
(73 % of a device copy of the same bytes), a warp per row 40 us (100 %); a squeeze-excite pool
over 12544-element rows at batch 32 (3072 rows) 74 against 65 us; at 768 rows the two tie
(data/bench/h100_stage4k/pool.txt)."""
NARROW_LIMIT = (1 << 31) - (1 << 25)
"""Largest index bound served by the 32-bit entry point: every index intermediate (at most
``kgen.infer.BOUND_SLACK`` above the bound), and ``t`` plus the grid-stride step (at most
``MAX_GRID * BLOCK``), stays below 2**31."""


class CpuLauncher:
    """numba kernel ``fn(out, *ins, numel, *params)`` (``kgen.abi``) over flat views of CPU
    tensors."""

    def __init__(self, fn):
        self.fn = fn

    def choose(self, numel: int, extent: int, narrow: bool = False) -> int:
        return 0

    def width(self, variant: int, numel: int, narrow: bool, out=None, ins=(), extent: int = 0
              ) -> int:
        return 1

    def geometry(self, variant: int, numel: int, width: int = 1) -> tuple[int, int]:
        """``(numel, 1)``: one ``prange`` iteration per output element (numba splits them over
        its threads)."""
        return numel, 1

    def __call__(self, variant: int, numel: int, out: torch.Tensor, ins, params, narrow=False,
                 width=1):
        self.fn(*pack(_flat_array(out), [_flat_array(a) for a in ins], numel, params))


def _flat_array(t: torch.Tensor):
    """A flat numpy view of ``t``; 16-bit floats as their ``uint16`` bits (see ``runtime.half``)."""
    t = t.view(-1)
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().view("uint16")
    return t.numpy()


class CudaLauncher:
    """``CudaKernel``s ``(out, *ins, numel, *params)`` (``kgen.abi``) keyed by (variant,
    narrow). The cooperative variant is chosen for rows a warp per output serves
    (``rows``, ``WARP_MIN_ROWS``..``warp_max``), or when the reduced extent is large enough to
    occupy a block and either the outputs alone would not fill the GPU or the extent is long.
    ``vector``: the vectorized entry point of variant 0 and what it needs (``Vector``), or None;
    ``warp``: the warp-per-output entry point of variant 1, or None; ``rows``: whether variant 1
    reduces rows, not columns (``kgen.emit.warp_rows``); ``warp_max``: the longest reduced extent
    that entry point serves (``lanes * kgen.emit.warp_cache``) whatever the outputs; ``stream``: a
    plain row reduction, which a warp per output serves at any extent from ``WARPS_PER_SM``
    outputs per SM; ``lanes``: the warp entry point's lanes per output
    (``kgen.emit.group_lanes``)."""

    def __init__(self, kernels: dict, sm_count: int = 132, vector: "Vector | None" = None,
                 warp: Any = None, rows: bool = False, warp_max: int = WARP_MAX,
                 stream: bool = False, lanes: int = 32):
        self.kernels = kernels
        self.lanes = lanes
        self.vector = vector
        self.warp = warp
        self.rows = rows
        self.warp_max = warp_max
        self.stream_min = WARPS_PER_SM * sm_count if stream else None
        self.fill = sm_count * 2048 // BLOCK * BLOCK  # threads resident on the whole GPU

    def _by_warp(self, extent: int, narrow: bool, numel: int) -> bool:
        """Whether variant 1 runs a warp per output at this ``extent``, index width and count of
        outputs."""
        return self.warp is not None and narrow and (
            extent <= self.warp_max or self.stream_min is not None and numel >= self.stream_min)

    def width(self, variant: int, numel: int, narrow: bool, out=None, ins=(), extent: int = 0
              ) -> int:
        """Variant 1: outputs per block, ``BLOCK // lanes`` (a group of lanes each) where the warp
        entry point serves the
        reduced ``extent`` (at most ``warp_max``, or any with ``stream`` and enough outputs;
        32-bit index), else 1. Variant 0: outputs per
        thread, the vectorized entry point's width where it applies (32-bit index, ``numel`` a
        multiple of the width, the output and every input it reads as vectors aligned to a
        vector's bytes; pointers not given are taken as aligned), else 1."""
        if variant:
            return BLOCK // self.lanes if self._by_warp(extent, narrow, numel) else 1
        vec = self.vector
        if vec is None or not narrow or numel % vec.width:
            return 1
        if out is not None and (out.data_ptr() % vec.out_bytes or
                                any(ins[i].data_ptr() % b for i, b in vec.loads)):
            return 1
        return vec.width

    def choose(self, numel: int, extent: int, narrow: bool = False) -> int:
        if (1, False) not in self.kernels:
            return 0
        if self.rows and extent >= WARP_MIN_ROWS and self._by_warp(extent, narrow, numel):
            return 1
        if extent < 64:
            return 0
        return 1 if (numel < self.fill or extent >= 4096) else 0

    def geometry(self, variant: int, numel: int, width: int = 1) -> tuple[int, int]:
        """``(grid, block)`` for ``numel`` outputs: ``BLOCK`` threads per block, one thread per
        ``width`` output elements (variant 0) or one block per ``width`` output elements (variant
        1), the grid capped at ``MAX_GRID`` (the kernels loop grid-stride over the rest); grid 0
        when there is nothing to compute."""
        return min(MAX_GRID, -(-numel // width) if variant else -(-(numel // width) // BLOCK)), \
            BLOCK

    def __call__(self, variant: int, numel: int, out, ins, params, narrow=False, width=1):
        k = (self.warp if variant else self.vector.kernel) if width > 1 else \
            self.kernels[variant, narrow]
        k[self.geometry(variant, numel, width)](*pack(out, ins, numel, params))


@dataclass(frozen=True)
class Vector:
    """A kernel's vectorized entry point (``kgen.emit.VECTOR``): ``width`` outputs per thread,
    ``loads`` (input position, bytes of one vector) for each input read as vectors, ``out_bytes``
    the bytes of one output vector (each pointer must be a multiple of its vector's bytes)."""

    kernel: Any
    width: int
    loads: tuple[tuple[int, int], ...]
    out_bytes: int


def check_index(t: torch.Tensor, extent: int, what: str) -> None:
    """Every value of index tensor ``t`` in ``[0, extent)``, before a kernel reads it as a
    coordinate (a device sync on CUDA)."""
    check_indices([(t, extent, what)])


def check_indices(checks: "Sequence[tuple[torch.Tensor, int, str]]") -> None:
    """``check_index`` for each ``(t, extent, what)``, with one device sync for all of them
    (one ``aminmax`` per distinct tensor): GPT-2's token ids, read by two kernels, cost two
    syncs per call, each a host round trip with the GPU idle."""
    live = [c for c in checks if c[0].numel()]
    if not live:
        return
    order = list({id(t): t for t, _, _ in live}.values())
    flat = torch.stack([m for t in order for m in torch.aminmax(t.reshape(-1))]).tolist()
    at = {id(t): (flat[2 * i], flat[2 * i + 1]) for i, t in enumerate(order)}
    for t, extent, what in live:
        lo, hi = at[id(t)]
        if not (0 <= lo and hi < extent):
            raise ShapeMismatch(f"{what}: index values in [{lo}, {hi}], outside [0, {extent})")
