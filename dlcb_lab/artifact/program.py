"""The program cache (Stage 8, warm compiles): a compile's finished program (the pipeline's
records after the passes, its kernels, cubins or numba's cache files) kept on disk under
``cache_dir("program")``, so that compiling the same module on the same call again, in this or
another process, loads it (milliseconds) instead of running the passes, kgen, hostgen and the
build; the capture cache (``artifact.capture``) then saves the trace as well.

The key is the capture cache's key (everything the capture reads: DLCB's source digest, torch's
version, the module tree's code, attributes and parameter shapes, the call, the ``dynamic``
spec), the compile's ``Config``, the backend, ``strict`` and ``fallback``, and on CUDA the
device's sm arch. An entry holds no weights. Its constants are bound to the live module: the
module's parameters and buffers by name, the values the lowering computed by value (each with
the digests of the parameters it was read from, as in the capture cache), and every constant a
pass computed (a batch norm folded into a convolution's weight, merged q/k/v weights) is
recomputed from those by the pass's own arithmetic (``passes.core.replay`` of
``Graph.derived``): new weights of the same shapes give the program the new weights, bit for bit
what a fresh compile folds. The one place a program reads the values of constants, the
compile-time range check of constant index tensors (``LaunchPlan.constant_indices``), is checked
again; an entry whose check fails, whose digests differ, or that is damaged (the artifact
container's checks, ``format``) is a miss, never an error. An entry is written in a background
thread once the compile's kernels are all built (``wait`` joins the writes).
``DLCB_PROGRAM_CACHE=0`` (``Config.program_cache``) turns it off, as does
``DLCB_CAPTURE_CACHE=0`` (its key is the capture cache's).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import pathlib
import threading
from typing import Any

import torch

from ..errors import ArtifactError

__all__ = ["PROGRAM_FORMAT", "key", "load", "store", "wait"]

PROGRAM_FORMAT = 1
_log = logging.getLogger(__name__)
_writes: list[threading.Thread] = []
_NOT_PROGRAM = ("numba_workers", "capture_cache", "program_cache")   # switches that change no
#                                                                      program


def key(capture_key: str, config, backend: str, strict: bool, fallback: bool) -> str:
    """The entry name of the program compiled from capture ``capture_key`` under these
    settings."""
    switches = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                if f.compare and f.name not in _NOT_PROGRAM}
    parts = [f"format {PROGRAM_FORMAT}", capture_key, f"config {sorted(switches.items())}",
             f"backend {backend}", f"strict {strict}", f"fallback {fallback}"]
    if backend == "cuda":
        from ..runtime.nvrtc import device_arch

        parts.append(f"arch {device_arch()}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _path(k: str) -> pathlib.Path:
    from ..runtime.cache import cache_dir

    return cache_dir("program") / f"{k}.dlcb"


def store(k: str, cm, roots: list[tuple[Any, torch.Tensor]], origin, compiled: dict) -> None:
    """Write entry ``k`` for compiled module ``cm`` in a background thread (after its last
    kernel build). ``roots``: the lowered graph's constants before the passes, ``(value,
    tensor)``; ``origin``: where they come from (``capture.Origin``); ``compiled``: what the
    compiled module needs to compile again for other calls (``api.compile``'s source record)."""
    t = threading.Thread(target=_write, args=(_path(k), cm, list(roots), origin, compiled),
                         name="dlcb-program-cache")   # the folder of now, not of the write
    t.start()
    _writes.append(t)


def wait() -> None:
    """Join the entry writes under way."""
    while _writes:
        _writes.pop().join()


def _write(path: pathlib.Path, cm, roots, origin, compiled: dict) -> None:
    from .format import TensorTable, Writer, dump_records
    from .signature import signature_json
    from .unit import save_unit

    try:
        g = cm.pipeline.graph
        w, table, values = Writer(), TensorTable(), TensorTable()
        unit = save_unit(w, "unit", cm.pipeline, table)

        def ref(t: torch.Tensor) -> list:
            fqn = origin.fqns.get(id(t))
            return ["state", fqn] if fqn is not None else \
                ["value", values.ref(t), str(t.device)]

        root_of = {v.id: ref(t) for v, t in roots}
        derived = {d.out.id for d in g.derived}
        by_id = {id(t): v.id for v, t in g.constants}
        refs = [["derived"] if by_id.get(id(t)) in derived else
                root_of.get(by_id.get(id(t))) or ref(t) for t in table.tensors]
        w.add("compiled.pkl", dump_records(compiled, TensorTable(), check=False))
        w.add("tensors.pt", values.to_bytes())
        w.write(path, {"kind": "program", "unit": unit, "roots": list(root_of.items()), "refs": refs,
                           "checks": origin.checks, "signature": signature_json(cm.signature)})
    except Exception as err:   # a cache that cannot be written costs the next compile, only
        _log.warning("program cache: entry not written (%s: %s)", type(err).__name__, err)


def load(k: str, module: torch.nn.Module):
    """``(pipeline, kernel builds, signature, compiled)`` of entry ``k``, its graph's constants
    bound to ``module``'s tensors, or None (no entry, a damaged one, other parameter values under
    a computed value, a constant index out of range)."""
    from ..passes.core import replay
    from .capture import open_entry
    from .format import load_records
    from .signature import signature_of
    from .unit import load_unit

    path = _path(k)
    try:
        opened = open_entry(path, "program", module)
        if opened is None:
            return None
        r, tensor = opened
        m = r.manifest
        roots = {vid: tensor(ref) for vid, ref in m["roots"]}
        refs = m["refs"]
        p, builds = load_unit(r, m["unit"], lambda i: None if refs[i][0] == "derived" else
                         tensor(refs[i]), emitter_checked=True)
        g = p.graph
        have = replay(g.derived, roots)
        g.constants = [(v, have[v.id]) for v, _ in g.constants]
        for v, t in g.constants:
            if t.dtype != v.dtype or list(t.shape) != [
                    getattr(g.solver.resolve(d), "value", None) for d in v.shape.items]:
                return None
        for vid, extent in p.launch_plan.constant_indices:
            t = have[vid]
            if t.numel() and not (0 <= int(t.min()) and int(t.max()) < extent):
                return None
        compiled = load_records(r.member("compiled.pkl"), lambda i: None, str(path))
        return p, builds, signature_of(m["signature"]), compiled
    except (ArtifactError, KeyError, IndexError, TypeError, ValueError) as err:
        _log.info("program cache entry %s not used: %s", path.name, err)
        return None
