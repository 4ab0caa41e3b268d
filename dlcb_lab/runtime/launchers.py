"""Launchers: call one compiled kernel through the entry point a launch takes.

A launcher holds a kernel's entry points (``kgen.entries.EntryPoint``, each with its function)
and decides per launch: ``choose(numel, extent, narrow)`` the variant (0: one thread per output
element, 1: reductions, a group of threads per output), then ``pick(variant, numel, narrow, out,
ins, extent)`` the entry point of that variant (its index width and outputs per thread or group:
the first whose condition holds, ``CudaLauncher.serves``), ``geometry(entry, numel)`` its launch
configuration ``(grid, block)``, and ``launcher(entry, numel, out, ins, params)`` launches it.
``narrow``: whether the kernel's index bound allows a 32-bit entry point (``kgen.entries.fits``,
decided by the caller: ``Thunk._choose``, ``DirectKernel.check``). ``Thunk.launches`` reports
what it picks; ``Kernel.forall`` launches with its geometry."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..errors import ShapeMismatch
from ..kgen.abi import pack
from ..kgen.entries import BLOCK, EntryPoint

WARP_MIN_ROWS = 32
"""Shortest row (``kgen.entries.warp_rows``: no reduced load steps by more than one element) that
a group of lanes per output takes over from a thread per output, whatever the outputs: a thread
walking its own row reads 32 rows' elements per warp load (Swin-T's softmax over 49-element
window rows, 301,056 rows at batch 32: 606 us, eager's 89)."""
WARPS_PER_SM = 8
"""Outputs per SM from which a plain row reduction (``EntryPoint.stream``: a sum, mean or max
over contiguous rows, nothing kept in registers) runs a group of lanes per output at any reduced
extent, past ``EntryPoint.extent_max``: every warp streams its row with no block barrier. On the
H100, a global average pool over 3136-element NCHW rows at batch 128 (8192 rows): a block per row
54 us (73 % of a device copy of the same bytes), a warp per row 40 us (100 %); a squeeze-excite
pool over 12544-element rows at batch 32 (3072 rows) 74 against 65 us; at 768 rows the two tie
(data/bench/h100_stage4k/pool.txt)."""


class CpuLauncher:
    """numba kernel ``fn(out, *ins, numel, *params)`` (``kgen.abi``) over flat views of CPU
    tensors: one entry point, variant 0 at 64-bit index (numba's ``int64``), one ``prange``
    iteration per output element."""

    def __init__(self, fn):
        self.fn = fn
        self.entry = EntryPoint(getattr(fn, "__name__", ""))

    def choose(self, numel: int, extent: int, narrow: bool = False) -> int:
        return 0

    def pick(self, variant: int, numel: int, narrow: bool, out=None, ins=(), extent: int = 0,
             plain: bool = False) -> EntryPoint:
        return self.entry

    def geometry(self, entry: EntryPoint, numel: int) -> tuple[int, int]:
        """``(numel, 1)``: one ``prange`` iteration per output element (numba splits them over
        its threads)."""
        return numel, 1

    def __call__(self, entry: EntryPoint, numel: int, out: torch.Tensor, ins, params):
        self.fn(*pack(_flat_array(out), [_flat_array(a) for a in ins], numel, params))


def _flat_array(t: torch.Tensor):
    """A flat numpy view of ``t``; 16-bit floats as their ``uint16`` bits (see ``runtime.half``)."""
    t = t.view(-1)
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().view("uint16")
    return t.numpy()


class CudaLauncher:
    """``CudaKernel``s ``(out, *ins, numel, *params)`` (``kgen.abi``), one per entry point
    (``entries``: (``EntryPoint``, kernel) pairs, as ``runtime.build`` loads them), on a GPU of
    ``sm_count`` SMs. ``variants``: per variant, its entry points in the order ``pick`` tries
    them (most outputs per thread or group first, then 32-bit, then 64-bit). The cooperative
    variant is chosen for rows its group of lanes serves (``EntryPoint.rows``, from
    ``WARP_MIN_ROWS``), or when the reduced extent is large enough to occupy a block and either
    the outputs alone would not fill the GPU or the extent is long."""

    def __init__(self, entries: Sequence[tuple[EntryPoint, Any]], sm_count: int = 132):
        self.kernels = dict(entries)
        self._fns = {id(e): k for e, k in entries}   # by identity: no hash of the description
        order: dict[int, list[EntryPoint]] = {}
        for e in sorted(self.kernels, key=lambda e: (e.per, e.narrow), reverse=True):
            order.setdefault(e.variant, []).append(e)
        self.variants = {v: tuple(es) for v, es in order.items()}
        self.many = WARPS_PER_SM * sm_count   # outputs from which a streaming group serves all
        self.fill = sm_count * 2048 // BLOCK * BLOCK  # threads resident on the whole GPU

    def serves(self, e: EntryPoint, numel: int, narrow: bool, out=None, ins=(),
               extent: int = 0) -> bool:
        """Whether entry point ``e`` serves a launch of ``numel`` outputs: a 32-bit one only
        where ``narrow``; one of several outputs per thread where ``numel`` divides by them and
        its vectors are aligned (``_vectors_align``), per block where the group of lanes serves
        the reduced ``extent`` (``_lanes_serve``)."""
        if e.narrow and not narrow:
            return False
        if e.per == 1:
            return True
        return self._lanes_serve(e, numel, extent) if e.cooperative else \
            self._vectors_align(e, numel, out, ins)

    def _lanes_serve(self, e: EntryPoint, numel: int, extent: int) -> bool:
        """A group of lanes per output: the reduced extent at most ``e.extent_max``, or any
        where ``e.stream`` and the outputs are ``WARPS_PER_SM`` per SM."""
        return extent <= e.extent_max or e.stream and numel >= self.many

    @staticmethod
    def _vectors_align(e: EntryPoint, numel: int, out, ins) -> bool:
        """Vectors of ``e.per`` outputs: ``numel`` a multiple, the output and every input read
        as vectors aligned to a vector's bytes (pointers not given are taken as aligned)."""
        if numel % e.per:
            return False
        return out is None or not (out.data_ptr() % e.out_bytes or
                                   any(ins[i].data_ptr() % b for i, b in e.loads))

    def pick(self, variant: int, numel: int, narrow: bool, out=None, ins=(), extent: int = 0,
             plain: bool = False) -> EntryPoint:
        """The entry point of ``variant`` a launch takes: the first of ``variants[variant]``
        that ``serves`` it (``plain``: of one output per thread or group: a direct launch, whose
        grid is the caller's)."""
        for e in self.variants[variant]:
            if (e.per == 1 or not plain) and self.serves(e, numel, narrow, out, ins, extent):
                return e
        raise LookupError(f"no entry point of variant {variant} serves this launch")

    def choose(self, numel: int, extent: int, narrow: bool = False) -> int:
        if 1 not in self.variants:
            return 0
        best = self.pick(1, numel, narrow, extent=extent)
        if best.rows and best.per > 1 and extent >= WARP_MIN_ROWS:
            return 1
        if extent < 64:
            return 0
        return 1 if (numel < self.fill or extent >= 4096) else 0

    def geometry(self, entry: EntryPoint, numel: int) -> tuple[int, int]:
        """``(grid, block)`` for ``numel`` outputs (``EntryPoint.geometry``)."""
        return entry.geometry(numel)

    def __call__(self, entry: EntryPoint, numel: int, out, ins, params):
        self._fns[id(entry)][entry.geometry(numel)](*pack(out, ins, numel, params))


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
