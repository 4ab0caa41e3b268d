"""Compiled-module artifacts: ``save(cm, path)`` writes one self-contained, versioned file;
``load(path)`` returns a ``CompiledModule`` that runs with no kernel build (cubins loaded as
saved; numba modules imported over the numba cache files shipped with them).

An artifact (``format``: a zip of members checked by the SHA-256 digests in ``manifest.json``)
holds the call signature, the constants (parameters and buffers, ``torch.save``, loaded with
``weights_only=True``) and one unit per compiled region (``unit``: records, kernels, thunk). The
records are pickled and load under an allowlist of record classes: no code from the artifact
runs by unpickling (the kernels themselves, cubins and numba modules, are code: load artifacts
you would run). A corrupt, truncated or other-version artifact is an ``ArtifactError``; a cuda
artifact without CUDA or on another sm arch an ``ArtifactDeviceError`` (also a ``DeviceError``).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import torch

from ..errors import ArtifactError
from .format import (FORMAT, FORMAT_VERSION, ArtifactDeviceError, Reader, TensorTable, Writer,
                     versions)
from .signature import signature_json, signature_of
from .unit import load_unit, save_unit

__all__ = ["save", "load", "ArtifactError", "ArtifactDeviceError", "FORMAT", "FORMAT_VERSION",
           "versions"]


def save(cm, path: str | os.PathLike) -> pathlib.Path:
    """Write compiled module ``cm`` to ``path`` (one file, written atomically); returns the path."""
    from ..api import CompiledModule

    if not isinstance(cm, CompiledModule):
        raise ArtifactError(f"save takes a CompiledModule, not {type(cm).__name__}")
    w, tensors = Writer(), TensorTable()
    units = [save_unit(w, f"unit{i}", p, tensors) for i, p in enumerate(_units(cm))]
    backend = units[0]["backend"]
    g = cm.pipeline.graph
    consts = [_const_ref(c, g_c, tensors) for c, (_, g_c) in zip(cm._constants, g.constants)]
    if len(consts) != len(cm._constants):
        raise ArtifactError(f"the module has {len(cm._constants)} constants, its graph "
                            f"{len(g.constants)}")
    w.add("tensors.pt", tensors.to_bytes())
    manifest = {"backend": backend, "units": units, "constants": consts,
                "signature": signature_json(cm.signature)}
    if backend == "cuda":
        manifest["arch"] = units[0]["arch"]
    return w.write(path, manifest)


def load(path: str | os.PathLike):
    """The compiled module saved at ``path``, ready to call on this machine's backend device.
    ``stats()["kernel_builds"]`` counts kernels compiled by the load: 0 when numba's shipped
    cache applies (same CPU kind and numba version) and always for cubins."""
    from ..api import CompiledModule

    r = Reader(path)
    m = r.manifest
    backend = m.get("backend")
    if backend not in ("cpu", "cuda"):
        raise r.error(f"unknown backend {backend!r}")
    what = f"artifact {r.path}"
    tensors = TensorTable.from_bytes(r.member("tensors.pt"), what)
    units = m.get("units")
    if not isinstance(units, list) or len(units) != 1:
        raise r.error("expected one compiled unit (this dlcb_lab runs single-region modules)")
    loaded = [load_unit(r, u, tensors.get) for u in units]
    pipe, builds = loaded[0]
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "cuda" else \
        torch.device("cpu")
    consts = m.get("constants")
    if not isinstance(consts, list) or len(consts) != len(pipe.graph.constants):
        raise r.error(f"constants table does not match the graph's {len(pipe.graph.constants)} "
                      f"constants")
    constants = [_const_of(c, tensors, device, r) for c in consts]
    for c, (v, _) in zip(constants, pipe.graph.constants):
        if c.dtype != v.dtype or list(c.shape) != _static_shape(v, pipe):
            raise r.error(f"constant {v.name!r} is {c.dtype} {list(c.shape)}, its graph value "
                          f"{v.dtype} {_static_shape(v, pipe)}")
    try:
        signature = signature_of(m["signature"])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise r.error("malformed call signature") from None
    return CompiledModule(pipe, signature, builds, constants)


def _units(cm) -> list:
    """The compiled regions of ``cm`` (one pipeline each); one today."""
    return [cm.pipeline]


def _const_ref(c: torch.Tensor, graph_c: torch.Tensor, tensors: TensorTable) -> dict[str, Any]:
    """A module constant: the graph's tensor when equal to it (placed on the device on load),
    else its own copy."""
    same = graph_c.shape == c.shape and graph_c.dtype == c.dtype and \
        torch.equal(graph_c.detach().to(c.device), c)
    return {"tensor": tensors.ref(graph_c if same else c)}


def _const_of(ref: Any, tensors: TensorTable, device: torch.device, r: Reader) -> torch.Tensor:
    if not isinstance(ref, dict):
        raise r.error(f"malformed constant reference {ref!r}")
    return tensors.get(ref.get("tensor")).to(device).contiguous()


def _static_shape(v, pipe) -> list[int]:
    """A constant's shape as the graph solved it (constants are static)."""
    from ..dims import Lit

    es = [pipe.graph.solver.resolve(d) for d in v.shape.items]
    return [e.value if isinstance(e, Lit) else -1 for e in es]

