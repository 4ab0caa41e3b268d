"""Entry points as data: the ``extern "C"`` functions of a kernel, described once (paper §4.5).

A kernel (``KernelBody``) has one or two *variants*, which the host picks between per call
(``runtime.launchers.CudaLauncher.choose``): itself, one thread per output element, and, for a
reduction, its cooperative alternative (``KernelBody.variant``, ``_blk``: a group of threads per
output). The CUDA printer prints each variant once, as a body template over its index type (and
group of lanes), and calls it from several *entry points*, one ``EntryPoint`` each, made here
from the variant alone (``variant_entries``) and read by everything after kgen: the printer
(``emit.cuda_kernel``), the build (``runtime.build``: which cubin holds each), the launcher
(``runtime.launchers``: which one a call takes), thunks and direct launches, artifacts and the
report's ptxas table.

========  ======================================  ======  ===============  =====================
suffix    has one                                 index   outputs          the host takes it
========  ======================================  ======  ===============  =====================
``""``    every variant                           64-bit  1 a thread/group always (the fallback)
``_i32``  every variant                           32-bit  1 a thread/group the index bound fits
``_v``    per-element kernels (``vector_width``)  32-bit  ``per`` a thread and the vectors align
``_w``    every cooperative variant               32-bit  ``per`` a block  and the extent fits
========  ======================================  ======  ===============  =====================

The index width is decided once per launch, by ``fits`` (the kernel's index bound against
``NARROW_LIMIT``); the rest of each condition is the launcher's (``CudaLauncher.serves``), from the
entry's fields. numba has one function per kernel: its variant 0's ``""``.

Also here, the policy behind them: which kernels vectorize (``vector_width``), which inputs the
output may overwrite (``in_place_inputs``), and a cooperative variant's group of lanes
(``group_lanes``, ``warp_cache``, ``warp_rows``, ``caches_row``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from .abi import abi
from .kir import (Compute, IdxCast, IdxClamp, IdxDivMod, IdxProd, IdxSum, KernelBody, Load, Loop,
                  Pred, RowInit, Select, Store)

__all__ = ["NARROW", "VECTOR", "WARP", "SUFFIXES", "BLOCK", "MAX_GRID", "NARROW_LIMIT", "fits",
           "EntryPoint", "variant_entries", "entries", "vector_width", "vector_loads",
           "in_place_inputs", "warp_rows", "caches_row", "group_lanes", "warp_cache"]

NARROW = "_i32"
"""Suffix of a variant's 32-bit-index entry point (valid while every index bound fits in int32)."""
VECTOR = "_v"
"""Suffix of a kernel's vectorized entry point (32-bit index arithmetic, ``vector_width``
outputs per thread)."""
WARP = "_w"
"""Suffix of a cooperative variant's group-of-lanes entry point (32-bit index arithmetic,
``group_lanes`` lanes of a warp per output, ``BLOCK // group_lanes`` outputs per block, the
reduction over the lanes' shuffles: no shared memory, no block barrier)."""
SUFFIXES = ("", NARROW, WARP, VECTOR)
"""Every suffix an entry point may have, in the order a module prints them."""

BLOCK = 256
"""Threads per block of every launch."""
MAX_GRID = 1 << 16
"""Most blocks a launch takes: the kernels loop grid-stride over the rest."""
NARROW_LIMIT = (1 << 31) - (1 << 25)
"""Largest index bound served by the 32-bit entry points: every index intermediate (at most
``kgen.infer.BOUND_SLACK`` above the bound), and ``t`` plus the grid-stride step (at most
``MAX_GRID * BLOCK``), stays below 2**31."""

VECTOR_BYTES = 16
"""Output bytes per thread of a vectorized entry point (one 128-bit store)."""
ROW_CACHE = 16
"""Row elements per thread a group-per-row kernel keeps in registers: a row of at most
``ROW_CACHE * gsize`` elements (4096 for a block of 256 threads, 512 for a warp) is read from
memory once, its second pass reading the registers; a longer row is read twice. The
group-of-lanes entry point of a row of literal extent keeps ``warp_cache`` elements a lane
instead. A reduced extent up to ``32 * ROW_CACHE`` runs a warp per output instead of a block
(``EntryPoint.extent_max``): a block per row there held 256 threads through two block barriers
per row for a handful of elements each (on the H200, Swin-T's layer norms over 96 channels at
batch 32 took 1 ms a call, eager's 43 us)."""
WARP_ROW_MAX = 1024
"""Longest literal row a warp per output keeps in registers (``warp_cache``: 32 elements a lane).
A block per row of 768 (BERT's and GPT-2's layer norms) held 256 threads through eight block
barriers for three elements each, three blocks resident per SM: on the H200, 163 us per layer
norm at 32x512, a fourth of the bandwidth a warp per row reaches."""
HALF_ROW_MAX = 64
"""Longest literal reduced extent whose group-of-lanes entry point runs 16 lanes per output, two
outputs a warp (``group_lanes``): 32 lanes per row of 49 (Swin-T's window softmax) held one or two
elements each, 67 % of a device copy's rate on the H100, where eager's kernel does two rows a
warp."""


def fits(bound: int | None) -> bool:
    """Whether a launch whose index bound (the maximum of its kernel's ``index_bounds``, all
    variants) is ``bound`` may take a 32-bit entry point; None (not known) may not. The one rule
    of index width, for thunks and direct launches alike."""
    return bound is not None and bound <= NARROW_LIMIT


@dataclass(frozen=True)
class EntryPoint:
    """One ``extern "C"`` function of a kernel: ``kernel`` (the variant's ``KernelBody.name``)
    plus ``suffix``. ``variant``: its variant's position in ``KernelBody.variants()`` (the host's
    choice); ``cooperative``: a group of threads per output, else a thread; ``narrow``: ``int``
    index arithmetic, taken only where ``fits``; ``per``: outputs per thread (a thread per output)
    or per block (cooperative); ``lanes``: a group's threads, the body's template argument ``G``
    (0: the block); ``signature``: the launch kinds (``kgen.abi``).

    What the host checks at run time besides the index width, for ``per`` > 1: a vectorized
    entry needs ``numel`` a multiple of ``per`` and, aligned to its bytes, the output vector
    (``out_bytes``) and each input vector ``loads`` lists (input position, bytes); a group of
    lanes serves reduced extents up to ``extent_max`` whatever the outputs, any extent where it
    ``stream``s (a plain row reduction) and the outputs are many; ``rows``: the variant reduces
    rows (``warp_rows``), so the host prefers it to variant 0 from a few dozen elements a row."""

    kernel: str
    suffix: str = ""
    variant: int = 0
    cooperative: bool = False
    narrow: bool = False
    per: int = 1
    lanes: int = 0
    signature: tuple[str, ...] = ()
    loads: tuple[tuple[int, int], ...] = ()
    out_bytes: int = 0
    extent_max: int = 0
    stream: bool = False
    rows: bool = False

    @property
    def name(self) -> str:
        return self.kernel + self.suffix

    @property
    def index_type(self) -> str:
        """The C type of its index arithmetic (the body template's ``I``)."""
        return "int" if self.narrow else "long long"

    @property
    def vector(self) -> bool:
        """Several outputs per thread (the body's ``_vbody``)."""
        return self.per > 1 and not self.cooperative

    def geometry(self, numel: int) -> tuple[int, int]:
        """``(grid, block)`` for ``numel`` outputs: ``BLOCK`` threads a block, a thread per
        ``per`` outputs, or a block per ``per`` outputs (cooperative), the grid capped at
        ``MAX_GRID``; grid 0 when there is nothing to compute."""
        grid = -(-numel // self.per) if self.cooperative else -(-(numel // self.per) // BLOCK)
        return min(MAX_GRID, grid), BLOCK

    def describe(self) -> str:
        """The launch in words: index width and outputs per thread or group."""
        if self.cooperative:
            how = (f"{self.lanes} lanes per output, {self.per} a block" if self.lanes else
                   "a block per output")
        else:
            how = f"{self.per} outputs a thread (vectorized)" if self.per > 1 else \
                "a thread per output"
        return f"{'32' if self.narrow else '64'}-bit index, {how}"


def variant_entries(v: KernelBody, variant: int = 0, suffixes: Sequence[str] = SUFFIXES
                    ) -> tuple[EntryPoint, ...]:
    """The entry points variant body ``v`` (position ``variant`` in its kernel's
    ``variants()``) has among ``suffixes``, in their order."""
    have = {e.suffix: e for e in _made(v, variant)}
    return tuple(have[s] for s in suffixes if s in have)


def entries(k: KernelBody, suffixes: Sequence[str] = SUFFIXES) -> tuple[EntryPoint, ...]:
    """The entry points of kernel ``k`` among ``suffixes``: per variant, in ``suffixes`` order."""
    return tuple(e for i, v in enumerate(k.variants()) for e in variant_entries(v, i, suffixes))


def _made(v: KernelBody, variant: int) -> list[EntryPoint]:
    """Every entry point of variant body ``v``: both index widths, then its wide one, if any."""
    a = abi(v)
    base = EntryPoint(v.name, "", variant, v.cooperative, signature=a.launch_kinds)
    out = [base, replace(base, suffix=NARROW, narrow=True)]
    w = vector_width(v)
    if w > 1:
        out.append(replace(base, suffix=VECTOR, narrow=True, per=w,
                           loads=tuple((b, w * a.inputs[b].dtype.torch.itemsize)
                                       for b in vector_loads(v)),
                           out_bytes=w * v.dtype.torch.itemsize))
    if v.cooperative:
        lanes, rows = group_lanes(v), warp_rows(v)
        out.append(replace(base, suffix=WARP, narrow=True, per=BLOCK // lanes, lanes=lanes,
                           extent_max=lanes * warp_cache(v), rows=rows,
                           stream=rows and not caches_row(v)))
    return out


# --- which kernels have which entry points --------------------------------------------------------

_ELEMENTWISE = (IdxSum, IdxProd, IdxDivMod, IdxCast, IdxClamp, Pred, Load, Select, Compute, Store)


def _per_element(k: KernelBody) -> bool:
    """One thread-per-output kernel whose every statement is per element (no loop, reduction or
    scattered store)."""
    return not k.cooperative and all(isinstance(s, _ELEMENTWISE) for s in k.stmts)


def vector_width(k: KernelBody) -> int:
    """Consecutive outputs per thread of ``k``'s vectorized entry point, or 1 where it has none.
    A per-element kernel (``_per_element``) gets one: ``VECTOR_BYTES`` of output (at most 8
    elements). Each thread computes its outputs' coordinates as the scalar kernel does; the
    store, and each load at the output's own index (``vector_loads``), move as one aligned
    vector."""
    if not _per_element(k):
        return 1
    return max(1, min(8, VECTOR_BYTES // k.dtype.torch.itemsize))


def vector_loads(k: KernelBody) -> tuple[int, ...]:
    """Inputs of ``k`` its vectorized entry point reads as vectors: those loaded, unpredicated,
    at the output's own index ``t`` (an elementwise operand of the output's shape)."""
    return tuple(sorted({s.buf for s in k.stmts
                         if isinstance(s, Load) and s.index == "t" and not s.pred}))


def in_place_inputs(k: KernelBody) -> tuple[int, ...]:
    """Inputs of ``k`` its output may overwrite (the launch plan writes the output into such an
    input's buffer where that buffer dies at the launch: ``hostgen.lower``). ``k`` is a
    per-element kernel (``vector_width``'s condition) without a cooperative variant, and every
    load of the input is unpredicated at the output's own index ``t``, in the output's dtype: each
    element is read only by the thread that writes it, before it writes it. Their pointers and
    ``out`` are not ``__restrict__``."""
    if k.variant is not None or not _per_element(k):
        return ()
    loads = [s for s in k.stmts if isinstance(s, Load)]
    other = {s.buf for s in loads if s.index != "t" or s.pred}
    return tuple(sorted({s.buf for s in loads if s.buf not in other and
                         k.inputs[s.buf].dtype == k.out.dtype}))


def warp_rows(k: KernelBody) -> bool:
    """Whether block-per-output kernel ``k`` reads rows, not columns: no load in its cooperative
    loops steps by more than one element per step of the loop variable (its index a sum with
    another coefficient on the variable, or a product of it), so a warp per output beats a thread
    per output whatever the outputs. A read the index arithmetic leaves unproven (div/mod-split,
    gathered) counts as a row: reductions over the innermost axis are the common case, and a
    reshaped row (``x.reshape(N, -1, C)`` of an NCHW tensor) is one. A nested loop counts as
    columns."""
    loops = [s for s in k.stmts if isinstance(s, Loop)]
    return k.cooperative and bool(loops) and not any(_strided(s) for s in loops)


def _strided(loop: Loop) -> bool:
    for s in loop.body:
        if isinstance(s, Loop) or isinstance(s, IdxProd) and loop.var in s.factors:
            return True
        if isinstance(s, IdxSum) and any(n == loop.var and abs(c) != 1 for c, n in s.terms):
            return True
    return False


def caches_row(k: KernelBody) -> bool:
    """Whether block-per-output kernel ``k`` keeps its row in registers between passes (a
    normalization or softmax: ``emit._row_passes``); a plain reduction (sum, mean, max) keeps
    none."""
    return any(isinstance(s, RowInit) for s in k.stmts)


def _literal_extent(k: KernelBody) -> int | None:
    """The reduced extent of block-per-output kernel ``k`` where it is a literal, else None."""
    loop = next((s for s in k.stmts if isinstance(s, Loop)), None)
    return int(loop.extent) if loop is not None and loop.extent.isdigit() else None


def group_lanes(k: KernelBody) -> int:
    """Lanes per output of the group-of-lanes entry point of block-per-output kernel ``k`` (its
    template argument ``G``): 16 where the reduced extent is a literal up to ``HALF_ROW_MAX``,
    else 32."""
    e = _literal_extent(k)
    return 16 if e is not None and e <= HALF_ROW_MAX else 32


def warp_cache(k: KernelBody) -> int:
    """Row elements per lane the group-of-lanes entry point of block-per-output kernel ``k``
    keeps in registers: for a normalization or softmax row (``caches_row``) of literal extent
    ``E`` up to ``WARP_ROW_MAX``, ``ceil(E / group_lanes(k))`` (no unrolled stride past the row's
    end), else ``ROW_CACHE``; ``group_lanes(k) * warp_cache(k)`` is the longest reduced extent
    the entry point serves whatever the outputs (``EntryPoint.extent_max``; a plain row
    reduction takes one at any extent where the outputs are many:
    ``runtime.launchers.WARPS_PER_SM``)."""
    e = _literal_extent(k)
    if e is not None and caches_row(k) and e <= WARP_ROW_MAX:
        return max(1, -(-e // group_lanes(k)))
    return ROW_CACHE
