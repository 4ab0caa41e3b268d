"""Build the kernels of one compile: NVRTC translation units compiled in parallel (CUDA) or one
numba module file (CPU), and a launcher per kernel.

CUDA: ptxas time grows with the kernels of a unit, and NVRTC releases the GIL, so a compile's
kernels are split into contiguous units of about ``UNIT_BYTES`` of source each (at most one per
CPU), compiled by parallel threads. Each unit is two cubins: the 32-bit index entry points
(``kgen.entries.EntryPoint.narrow``: ``_i32``, ``_w`` and the vectorized ``_v``), which every call
whose index bounds fit in int32 launches, compiled before the compile returns; and the 64-bit
ones, compiled on background threads (``nvrtc.compile_cubin_later``; about half of the NVRTC time
off the compile's critical path), loaded when a call first needs one. ``units`` records which
kernels each pair holds; an artifact stores the cubins, that list and the suffixes built
(``cuda_launchers`` rebuilds the launchers from them, with no NVRTC). A launcher gets every entry
point built (``kgen.entries.entries``), each with its loaded function, and picks among them.

Kernels of the same code (``distinct``: a ViT's twelve layers, a ResNet's repeated blocks) are
compiled once: a unit holds the first of them, and the others launch its entry points."""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

import torch

from ..config import Config
from ..kgen.emit import cuda_kernel, cuda_module, entry_points, numba_kernel, numba_module
from ..kgen.entries import NARROW, VECTOR, WARP, entries
from ..kgen.kir import KernelBody
from .launchers import CpuLauncher, CudaLauncher


def narrow_unit(vectorize: bool = True) -> tuple[str, ...]:
    """The entry points of a unit's first cubin: 32-bit index, warp per output where a
    block-per-output kernel has one, and vectorized where a kernel has one (``vectorize``,
    ``Config.vectorize``; False: none)."""
    return (NARROW, WARP, VECTOR) if vectorize else (NARROW, WARP)


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


def cpu_module(bodies: Sequence[KernelBody], parallel: bool = False) -> tuple[str, list[str]]:
    """The numba module source of the distinct kernels (``distinct``; ``parallel``:
    ``Config.numba_parallel``) and, per kernel, the name of the function it runs."""
    rep = distinct(bodies, "cpu")
    return numba_module([b for i, b in enumerate(bodies) if rep[i] == i], parallel), \
        [bodies[r].name for r in rep]


def units(bodies: Sequence[KernelBody], workers: int | None = None,
          rep: Sequence[int] | None = None, vectorize: bool = True) -> list[tuple[int, ...]]:
    """Groups of kernel positions, one translation unit each: the distinct kernels (``distinct``)
    in contiguous runs of balanced source size (the 32-bit unit's: ``narrow_unit``), ``min(workers
    (default: the CPUs), distinct kernels, source / UNIT_BYTES)`` runs, at least one; a kernel of
    the same code as an earlier one is in that one's group (the unit compiles the first alone).
    ``rep``: ``distinct(bodies)``, where the caller has it; ``vectorize``: ``narrow_unit``'s."""
    rep = distinct(bodies) if rep is None else rep
    widths = narrow_unit(vectorize)
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
                   groups: Sequence[Sequence[int]], built: Sequence[str] | None = None,
                   rep: Sequence[int] | None = None) -> list[CudaLauncher]:
    """A launcher per kernel over the cubins of its unit (``groups[j]``: the kernels of
    ``cubins[j]``, a pair of cubins or their futures: the 32-bit index entry points, the 64-bit
    ones). ``built``: the suffixes of the entry points the cubins hold (default: ``""`` and
    ``narrow_unit``'s); each launcher gets those of its kernel, each from the cubin of its index
    width. A unit holds the entry points of the first kernel of each code (``rep``, default
    ``distinct(bodies)``); the others of that code launch those."""
    from .cuda_launch import CudaModule

    sm = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    launchers: list[CudaLauncher | None] = [None] * len(bodies)
    built = ("", *narrow_unit()) if built is None else tuple(built)
    rep = distinct(bodies) if rep is None else rep
    for pair, group in zip(cubins, groups):
        sub = [bodies[i] for i in group if rep[i] == i]
        mods = {narrow: CudaModule(cubin, [e.name for k in sub for e in entries(k, built)
                                           if e.narrow == narrow])
                for narrow, cubin in zip((True, False), pair)}
        for i in group:   # bodies[rep[i]]: the kernel whose entry points the unit holds
            launchers[i] = CudaLauncher([(e, mods[e.narrow].kernel(e.name, e.signature))
                                         for e in entries(bodies[rep[i]], built)], sm)
    return launchers


def _cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # pragma: no cover - not Linux
        return os.cpu_count() or 1


def build_kernels(bodies: Sequence[KernelBody], backend: str, config: Config | None = None
                  ) -> tuple[list, int]:
    """Returns (a launcher per kernel, kernel functions built: every entry point of every
    variant, ``kgen.entries``); ``config``: the compile's (default ``Config()``)."""
    config = config or Config()
    if backend == "cuda":
        from .nvrtc import compile_cubin_later, compile_cubins, device_arch

        rep, unit = distinct(bodies), narrow_unit(config.vectorize)
        groups, arch = units(bodies, rep=rep, vectorize=config.vectorize), device_arch()
        subs = [[bodies[i] for i in g if rep[i] == i] for g in groups]
        narrow = compile_cubins([cuda_module(sub, unit) for sub in subs], arch=arch)
        wide = [compile_cubin_later(cuda_module(sub, ("",)), arch=arch) for sub in subs]
        cubins = list(zip(narrow, wide))
        return cuda_launchers(bodies, cubins, groups, ("", *unit), rep), \
            len(entry_points([b for sub in subs for b in sub], ("", *unit)))
    from .numba_cpu import load_numba_module

    source, names = cpu_module(bodies, config.numba_parallel)
    rep = distinct(bodies, "cpu")
    sizes = [(b.name, len(numba_kernel(b))) for i, b in enumerate(bodies) if rep[i] == i]
    mod, _ = load_numba_module(source, sizes, config.numba_workers or _cpus())
    return [CpuLauncher(getattr(mod, n)) for n in names], len(set(names))
