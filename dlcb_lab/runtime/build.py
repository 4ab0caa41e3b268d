"""Build the kernels of one compile: NVRTC translation units compiled in parallel (CUDA) or one
numba module file (CPU), and a launcher per kernel.

CUDA: ptxas time grows with the kernels of a unit, and NVRTC releases the GIL, so a compile's
kernels are split into contiguous units of about ``UNIT_BYTES`` of source each (at most one per
CPU), compiled by parallel threads. Each unit is two cubins: the 32-bit index entry points (and
the vectorized ones, ``kgen.emit.VECTOR``), which every call whose index bounds fit in int32
launches, compiled before the compile returns; and the
64-bit ones, compiled on background threads (``nvrtc.compile_cubin_later``; about half of the
NVRTC time off the compile's critical path), loaded when a call first needs one. ``units``
records which kernels each pair holds; an artifact stores the cubins and that list
(``cuda_launchers`` rebuilds the launchers from both, with no NVRTC).

Kernels of the same code (``distinct``: a ViT's twelve layers, a ResNet's repeated blocks) are
compiled once: a unit holds the first of them, and the others launch its entry points."""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

import torch

from ..kgen.abi import abi
from ..kgen.emit import (NARROW, VECTOR, WARP, all_variants, caches_row, cuda_kernel,
                         cuda_module, entry_points, group_lanes, numba_kernel, numba_module,
                         signature, vector_loads, vector_width, warp_cache, warp_rows)
from ..kgen.kir import KernelBody
from .launchers import CpuLauncher, CudaLauncher, Vector


def narrow_unit() -> tuple[str, ...]:
    """The entry points of a unit's first cubin: 32-bit index, warp per output where a
    block-per-output kernel has one, and vectorized where a kernel has one (``DLCB_VECTORIZE=0``:
    none; read at each build)."""
    return _unit(os.environ.get("DLCB_VECTORIZE", "1") != "0")


def _unit(vectorized: bool) -> tuple[str, ...]:
    return (NARROW, WARP, VECTOR) if vectorized else (NARROW, WARP)


UNIT_BYTES = 8_000
"""Source per NVRTC unit: each unit also pays NVRTC's start-up and the prelude's parse (~0.1 s)."""


_COMMENT = {"cuda": re.compile(r"//[^\n]*"), "cpu": re.compile(r"#[^\n]*")}


def _code(k: KernelBody, backend: str) -> str:
    """``k``'s source for ``backend`` (CUDA: at every entry point), less its name and its
    comments (which name graph values and dims): kernels of one code compute the same function
    of their arguments."""
    src = "\n".join(cuda_kernel(v, (NARROW, WARP, VECTOR)) for v in k.variants()) \
        if backend == "cuda" else numba_kernel(k)
    return _COMMENT[backend].sub("", src.replace(k.name, "K"))


def distinct(bodies: Sequence[KernelBody], backend: str = "cuda") -> list[int]:
    """Per kernel position, the first position of a kernel of the same code (``_code``): itself
    where it is the first."""
    first: dict[str, int] = {}
    return [first.setdefault(_code(b, backend), i) for i, b in enumerate(bodies)]


def cpu_module(bodies: Sequence[KernelBody]) -> tuple[str, list[str]]:
    """The numba module source of the distinct kernels (``distinct``) and, per kernel, the name of
    the function it runs."""
    rep = distinct(bodies, "cpu")
    return numba_module([b for i, b in enumerate(bodies) if rep[i] == i]), \
        [bodies[r].name for r in rep]


def units(bodies: Sequence[KernelBody], workers: int | None = None,
          rep: Sequence[int] | None = None) -> list[tuple[int, ...]]:
    """Groups of kernel positions, one translation unit each: the distinct kernels (``distinct``)
    in contiguous runs of balanced source size (the 32-bit unit's: ``narrow_unit``), ``min(workers
    (default: the CPUs), distinct kernels, source / UNIT_BYTES)`` runs, at least one; a kernel of
    the same code as an earlier one is in that one's group (the unit compiles the first alone).
    ``rep``: ``distinct(bodies)``, where the caller has it."""
    rep = distinct(bodies) if rep is None else rep
    widths = narrow_unit()
    sizes = {i: sum(len(cuda_kernel(v, widths)) for v in bodies[i].variants())
             for i in sorted(set(rep))}
    total = sum(sizes.values())
    n = max(1, min(workers or os.cpu_count() or 1, len(sizes), total // UNIT_BYTES))
    out: list[list[int]] = []
    cur: list[int] = []
    acc = 0
    group: dict[int, list[int]] = {}
    for i, r in enumerate(rep):
        if r != i:
            group[r].append(i)
            continue
        cur.append(i)
        group[i] = cur
        acc += sizes[i]
        if acc * n >= total * (len(out) + 1) and len(out) < n - 1:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return [tuple(g) for g in out]


def cuda_launchers(bodies: Sequence[KernelBody], cubins: Sequence[tuple[Any, Any]],
                   groups: Sequence[Sequence[int]], vectorized: bool | None = None,
                   rep: Sequence[int] | None = None) -> list[CudaLauncher]:
    """A launcher per kernel over the cubins of its unit (``groups[j]``: the kernels of
    ``cubins[j]``, a pair (32-bit, 64-bit index entry points) of cubins or their futures).
    ``vectorized``: whether the 32-bit cubins hold the vectorized entry points (default: as
    ``narrow_unit`` builds them). A unit holds the entry points of the first kernel of each code
    (``rep``, default ``distinct(bodies)``); the others of that code launch those."""
    from .cuda_launch import CudaModule

    sm = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    launchers: list[CudaLauncher | None] = [None] * len(bodies)
    unit = narrow_unit() if vectorized is None else _unit(vectorized)
    rep = distinct(bodies) if rep is None else rep
    for pair, group in zip(cubins, groups):
        sub = [bodies[i] for i in group if rep[i] == i]
        mods = {narrow: CudaModule(cubin, entry_points(sub, unit if narrow else ("",)))
                for narrow, cubin in zip((True, False), pair)}
        for i in group:
            k = bodies[rep[i]]   # the kernel whose entry points the unit holds
            launchers[i] = CudaLauncher({(j, narrow): mods[narrow].kernel(
                v.name + NARROW * narrow, signature(v))
                for j, v in enumerate(k.variants()) for narrow in (False, True)}, sm,
                _vector(k, mods[True]) if VECTOR in unit else None, *_warp(k, mods[True]))
    return launchers


def _vector(k: KernelBody, mod) -> Vector | None:
    """The launcher's view of ``k``'s vectorized entry point in ``mod``, or None."""
    w = vector_width(k)
    if w == 1:
        return None
    ins = abi(k).inputs
    return Vector(mod.kernel(k.name + VECTOR, signature(k)), w,
                  tuple((b, w * ins[b].dtype.torch.itemsize) for b in vector_loads(k)),
                  w * k.dtype.torch.itemsize)


def _warp(k: KernelBody, mod) -> tuple[Any, bool, int, bool, int]:
    """The warp entry point of ``k``'s block-per-output variant in ``mod`` (or None), whether
    that variant reduces rows, not columns (``warp_rows``), the longest reduced extent the entry
    point serves whatever the outputs (``warp_cache`` elements a lane), whether it is a plain row
    reduction (rows, ``caches_row`` false: ``CudaLauncher``'s ``stream``), and its lanes per
    output (``group_lanes``)."""
    v = k.variant
    if v is None:
        return None, False, 0, False, 32
    rows, lanes = warp_rows(v), group_lanes(v)
    return mod.kernel(v.name + WARP, signature(v)), rows, lanes * warp_cache(v), \
        rows and not caches_row(v), lanes


def build_kernels(bodies: Sequence[KernelBody], backend: str) -> tuple[list, int]:
    """Returns (a launcher per kernel, kernel functions built incl. variants and index widths)."""
    if backend == "cuda":
        from .nvrtc import compile_cubin_later, compile_cubins, device_arch

        rep = distinct(bodies)
        groups, arch = units(bodies, rep=rep), device_arch()
        subs = [[bodies[i] for i in g if rep[i] == i] for g in groups]
        narrow = compile_cubins([cuda_module(sub, narrow_unit()) for sub in subs], arch=arch)
        wide = [compile_cubin_later(cuda_module(sub, ("",)), arch=arch) for sub in subs]
        cubins = list(zip(narrow, wide))
        built = [b for sub in subs for b in sub]
        return cuda_launchers(bodies, cubins, groups, rep=rep), \
            2 * len(all_variants(built)) + sum(vector_width(b) > 1 for b in built) + \
            sum(b.variant is not None for b in built)
    from .numba_cpu import load_numba_module

    source, names = cpu_module(bodies)
    mod, _ = load_numba_module(source)
    return [CpuLauncher(getattr(mod, n)) for n in names], len(set(names))
