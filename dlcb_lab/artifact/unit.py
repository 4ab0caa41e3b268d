"""One compiled unit in an artifact: a pipeline's records, its built kernels and its thunk.

``save_unit`` / ``load_unit`` are the pair a module's save and load are built on (a module with
several compiled regions saves a list of units). Members of unit ``u`` live under ``u/``:

- ``records.pkl``: the ``Pipeline`` without thunks and launchers (``format.dump_records``).
- CUDA: ``kernels.<j>.cubin`` and ``kernels.<j>.wide.cubin``, the cubins the module launches,
  the 32-bit and the 64-bit index entry points of NVRTC unit ``j`` (the manifest's ``units``
  lists the kernels of each; no NVRTC on load).
- CPU: ``kernels.py``, the numba module source, and ``numba/<file>``, numba's cache files of its
  functions (index ``.nbi`` and data ``.nbc``); load puts both where ``runtime.numba_cpu`` and
  numba look, so numba's decoration-time compile is a cache hit.

The unit's JSON record (in the manifest) holds the thunk kind and static shapes, the SHA-256 of
the kernel source as the emitter writes it, and (CUDA) the suffixes of the entry points the cubins
hold (``kgen.entries``) with their names. Load re-emits the source and the names from the records
and compares: kernels built by another emitter are refused, not launched with a mismatched ABI.
The launchers get the entry points saved. The records hold the compile's ``Config``
(``Pipeline.config``): the loaded module runs with it (its entry points, numba's ``parallel``, its
CUDA-graph capacity); ``cache_dir`` is the loading process's.
"""

from __future__ import annotations

import hashlib
import logging
import pathlib
from dataclasses import replace
from typing import Any, Callable

import torch

from ..errors import ArtifactError
from ..kgen.emit import cuda_module, entry_points
from ..kgen.entries import SUFFIXES
from ..runtime.build import cpu_module, distinct
from ..records import Pipeline
from ..runtime.thunks import DynamicAOTThunk, StaticThunk, Thunk
from .format import (ArtifactDeviceError, Reader, TensorTable, Writer, dump_records,
                     load_records)

__all__ = ["save_unit", "load_unit"]

_log = logging.getLogger(__name__)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def save_unit(w: Writer, prefix: str, pipeline: Pipeline, tensors: TensorTable) -> dict[str, Any]:
    """Add unit ``prefix`` (its records, kernels and thunk) to ``w``; its tensors go to
    ``tensors``. Returns the unit's JSON record for the manifest."""
    if len(pipeline.thunks) != 1:
        raise ArtifactError(f"unit {prefix}: expected one built thunk, found "
                            f"{len(pipeline.thunks)}")
    thunk = pipeline.thunks[0]
    bodies = [k.body for k in pipeline.kernels]
    backend = thunk.device
    bare = replace(pipeline, thunks=(),
                   kernels=tuple(replace(k, launcher=None) for k in pipeline.kernels))
    w.add(f"{prefix}/records.pkl", dump_records(bare, tensors))
    meta: dict[str, Any] = {
        "prefix": prefix, "backend": backend, "thunk": thunk.kind,
        "shapes": [list(s) for s in thunk.shapes] if isinstance(thunk, StaticThunk) else None,
        "kernels": [b.name for b in bodies],
    }
    if backend == "cuda":
        from ..runtime.nvrtc import device_arch

        source = cuda_module(bodies)
        built = {e.suffix for ln in thunk.launchers for e in ln.kernels}
        meta["suffixes"] = [x for x in SUFFIXES if x in built]
        meta["entry_points"] = entry_points(bodies, meta["suffixes"])
        meta["arch"] = device_arch()
        cubins, meta["units"] = _cubins_of(thunk, prefix)
        meta["rep"] = distinct(bodies)
        for j, (narrow, wide) in enumerate(cubins):
            w.add(f"{prefix}/kernels.{j}.cubin", narrow)
            w.add(f"{prefix}/kernels.{j}.wide.cubin", wide)
    else:
        source, _ = cpu_module(bodies, pipeline.config.numba_parallel)
        if bodies:
            w.add(f"{prefix}/kernels.py", source.encode())
            meta["numba_files"] = [w.add(f"{prefix}/numba/{f.name}", f.read_bytes()).rsplit(
                "/", 1)[1] for f in _numba_cache_files(thunk, prefix)]
            meta["numba_module"] = _module_path(thunk).stem
            meta["host_cpu"] = _host_cpu()
    meta["source_sha256"] = _sha(source)
    return meta


def load_unit(r: Reader, meta: dict[str, Any], tensor: Callable[[Any], Any],
              emitter_checked: bool = False) -> tuple[Pipeline, int]:
    """Unit ``meta`` of ``r``: the pipeline with its thunk and launchers, and the kernel functions
    built on the way (0 unless numba's cache missed, e.g. on another CPU). ``tensor`` resolves
    the records' tensor references (``TensorTable.get``). ``emitter_checked``: the caller knows
    this DLCB's code generator wrote the kernels (the program cache's key holds its source
    digest): the CUDA source is not emitted again to compare."""
    prefix = _field(r, meta, "prefix", str)
    backend = _field(r, meta, "backend", str)
    what = f"artifact {r.path}, unit {prefix}"
    if backend == "cuda":
        _check_device(meta, what)
    elif backend != "cpu":
        raise ArtifactError(f"{what}: unknown backend {backend!r}")
    p = load_records(r.member(f"{prefix}/records.pkl"), tensor, what)
    if not isinstance(p, Pipeline):
        raise ArtifactError(f"{what}: records hold a {type(p).__name__}, not a Pipeline")
    _check_host_program(p, what)
    bodies = [k.body for k in p.kernels]
    if [b.name for b in bodies] != meta.get("kernels"):
        raise ArtifactError(f"{what}: kernel list differs from the manifest's")
    source = ("" if emitter_checked else cuda_module(bodies)) if backend == "cuda" else \
        cpu_module(bodies, p.config.numba_parallel)[0]
    if not (emitter_checked and backend == "cuda") and _sha(source) != meta.get("source_sha256"):
        raise ArtifactError(f"{what}: this dlcb_lab emits different {backend} source for the "
                            f"saved kernels (the artifact was built by another code generator)")
    if backend == "cuda":
        launchers, builds = _cuda_launchers(r, prefix, meta, bodies, what, emitter_checked), 0
    else:
        launchers, builds = _cpu_launchers(r, prefix, meta, bodies, source, what)
    g = p.graph
    args = (p.host_program, p.launch_plan, launchers, [v.dtype for v in g.inputs], backend,
            [v.name for v in g.inputs], len(g.inputs) - len(g.constants), p.config.cuda_graphs)
    if meta.get("thunk") == "static":
        shapes = meta.get("shapes")
        if not isinstance(shapes, list) or not all(
                isinstance(s, list) and all(type(d) is int for d in s) for s in shapes):
            raise ArtifactError(f"{what}: static thunk without valid shapes")
        thunk: Thunk = StaticThunk(*args, shapes=shapes)
    elif meta.get("thunk") == "dynamic":
        thunk = DynamicAOTThunk(*args)
    else:
        raise ArtifactError(f"{what}: unknown thunk kind {meta.get('thunk')!r}")
    kernels = tuple(replace(k, launcher=ln) for k, ln in zip(p.kernels, launchers))
    return replace(p, thunks=(thunk,), kernels=kernels), builds


def _field(r: Reader, meta: Any, key: str, typ: type):
    v = meta.get(key) if isinstance(meta, dict) else None
    if not isinstance(v, typ):
        raise r.error(f"unit record without a valid {key!r}")
    return v


def _check_host_program(p: Pipeline, what: str) -> None:
    """The host program becomes Python source on load (``HostProgram.compile``): every
    instruction must be a known op over int operands, every message a string."""
    from ..hostgen.program import INSTRUCTIONS, Instr

    hp = p.host_program
    for i, ins in enumerate(hp.instrs):
        if type(ins) is not Instr or ins.op not in INSTRUCTIONS or \
                not all(type(x) is int for x in (ins.dst, ins.a, ins.b)):
            raise ArtifactError(f"{what}: host instruction {i} is malformed ({ins!r})")
    if not all(type(m) is str for m in hp.messages) or type(hp.n_args) is not int or \
            type(hp.n_regs) is not int:
        raise ArtifactError(f"{what}: host program header is malformed")


# --- CUDA ----------------------------------------------------------------------------------------

def _cubins_of(thunk: Thunk, prefix: str) -> tuple[list[tuple[bytes, bytes]], list[list[int]]]:
    """The cubins the thunk launches (per NVRTC unit, ``runtime.build.units``: its 32-bit and its
    64-bit index entry points; waits for those still compiling) and the kernel positions each
    unit holds."""
    mods: dict[int, tuple[tuple[bytes, bytes], list[int]]] = {}
    for i, ln in enumerate(thunk.launchers):
        by_width = {e.narrow: k for e, k in ln.kernels.items()}
        narrow, wide = by_width.get(True), by_width.get(False)
        if narrow is None or wide is None:
            raise ArtifactError(f"unit {prefix}: a cuda kernel without a loaded cubin")
        mods.setdefault(id(narrow.module), ((narrow.module.cubin, wide.module.cubin), []))[1] \
            .append(i)
    return [c for c, _ in mods.values()], [g for _, g in mods.values()]


def _check_device(meta: dict, what: str) -> None:
    """A CUDA device of the cubins' sm arch, else ``ArtifactDeviceError``."""
    arch = meta.get("arch")
    if not torch.cuda.is_available():
        raise ArtifactDeviceError(f"{what}: a cuda artifact ({arch}) but torch sees no CUDA device")
    from ..runtime.nvrtc import device_arch

    here = device_arch()
    if arch != here:
        raise ArtifactDeviceError(f"{what}: cubins for {arch}, this device is {here} (re-save "
                                  f"the module on a {here} machine)")


def _cuda_launchers(r: Reader, prefix: str, meta: dict, bodies: list, what: str,
                    emitter_checked: bool = False) -> list:
    """CudaLaunchers over the saved cubin, as ``runtime.build.build_kernels`` makes them (no
    NVRTC). ``emitter_checked``: the kernels of one code are those the manifest lists
    (``rep``), not found again by emitting every kernel."""
    if not bodies:
        return []
    from ..runtime.build import cuda_launchers

    suffixes = meta.get("suffixes")
    if not isinstance(suffixes, list) or "" not in suffixes or \
            suffixes != [x for x in SUFFIXES if x in suffixes]:
        raise ArtifactError(f"{what}: the manifest's entry point suffixes are malformed")
    if entry_points(bodies, suffixes) != meta.get("entry_points"):
        raise ArtifactError(f"{what}: entry points differ from the manifest's")
    groups = meta.get("units")
    if not isinstance(groups, list) or sorted(i for g in groups for i in g) != \
            list(range(len(bodies))):
        raise ArtifactError(f"{what}: the manifest's kernel units do not cover its kernels")
    cubins = [(r.member(f"{prefix}/kernels.{j}.cubin"), r.member(f"{prefix}/kernels.{j}.wide.cubin"))
              for j in range(len(groups))]
    rep = meta.get("rep") if emitter_checked else None
    if rep is not None and not (isinstance(rep, list) and len(rep) == len(bodies) and all(
            type(j) is int and 0 <= j <= i and rep[j] == j for i, j in enumerate(rep))):
        raise ArtifactError(f"{what}: the manifest's kernel representatives are malformed")
    return cuda_launchers(bodies, cubins, groups, suffixes, rep)   # as the saved config built them


# --- CPU (numba) -----------------------------------------------------------------------------------

def _host_cpu() -> str:
    """LLVM's name of this CPU (part of numba's cache key, with its features)."""
    import llvmlite.binding as ll

    return ll.get_host_cpu_name()


def _module_path(thunk: Thunk) -> pathlib.Path:
    """The file the thunk's numba module was loaded from (``runtime.numba_cpu``)."""
    import inspect

    return pathlib.Path(inspect.getfile(thunk.launchers[0].fn.py_func))


def _numba_cache_files(thunk: Thunk, prefix: str) -> list[pathlib.Path]:
    """numba's cache files (``.nbi``, ``.nbc``) of the module's functions: one index per kernel."""
    folders = {pathlib.Path(ln.fn.stats.cache_path) for ln in thunk.launchers}
    stem = _module_path(thunk).stem
    files = sorted(f for d in folders for f in d.glob(f"{stem}.*")
                   if f.is_file() and ".tmp" not in f.name and f.suffix in (".nbi", ".nbc"))
    have = {f.name.split("-", 1)[0] for f in files if f.suffix == ".nbi"}
    missing = [ln.fn.py_func.__name__ for ln in thunk.launchers
               if f"{stem}.{ln.fn.py_func.__name__}" not in have]
    if missing:
        raise ArtifactError(f"unit {prefix}: numba cache files of {missing} not found under "
                            f"{sorted(map(str, folders))} (numba's cache is off or not "
                            f"writable): an artifact without them would recompile on load")
    return files


def _cpu_launchers(r: Reader, prefix: str, meta: dict, bodies: list, source: str, what: str
                   ) -> tuple[list, int]:
    """Put the module source and numba's cache files where a load finds them, import the module
    (numba compiles at decoration: a cache hit), and count the functions numba compiled."""
    if not bodies:
        return [], 0
    from ..runtime import numba_cpu
    from ..runtime.cache import atomic_write, cache_dir, content_key
    from ..runtime.launchers import CpuLauncher

    if r.member(f"{prefix}/kernels.py") != source.encode():
        raise ArtifactError(f"{what}: kernels.py differs from the source emitted for its records")
    stem = f"dlcb_{content_key(source)[:24]}"   # runtime.numba_cpu's file name
    if meta.get("numba_module") != stem:
        raise ArtifactError(f"{what}: numba module name {meta.get('numba_module')!r} does not "
                            f"match its source ({stem})")
    files = meta.get("numba_files")
    if not isinstance(files, list) or not all(
            isinstance(f, str) and f.startswith(stem + ".") and "/" not in f and
            f.rsplit(".", 1)[-1] in ("nbi", "nbc") for f in files):
        raise ArtifactError(f"{what}: malformed numba cache file list")
    path = (cache_dir("numba") / f"{stem}.py").absolute()
    with numba_cpu._LOCK:
        if content_key(source)[:24] not in numba_cpu._LOADED:
            numba_cpu._ensure_file(path, source.encode())
            folder = numba_cpu._numba_cache_dirs(path)[0]
            folder.mkdir(parents=True, exist_ok=True)
            for f in sorted(files, key=lambda f: f.endswith(".nbi")):   # data before indexes
                atomic_write(folder / f, r.member(f"{prefix}/numba/{f}"))
        try:
            mod, fresh = numba_cpu.load_numba_module(source)
        except Exception as err:
            raise ArtifactError(f"{what}: the numba module does not load ({err})") from None
    try:
        fns = [getattr(mod, n) for n in cpu_module(bodies)[1]]
    except AttributeError as err:
        raise ArtifactError(f"{what}: the numba module lacks a kernel ({err})") from None
    builds = sum(1 for fn in set(fns) if sum(fn.stats.cache_misses.values())) if fresh else 0
    if builds:
        _log.warning("%s: numba compiled %d of %d kernels: its cache missed (saved on CPU %r, "
                     "this is %r)", what, builds, len(set(fns)), meta.get("host_cpu"), _host_cpu())
    return [CpuLauncher(fn) for fn in fns], builds
