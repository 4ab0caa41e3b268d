"""The artifact container: one zip file (stored, not compressed) of named members and a
``manifest.json`` holding the format version, the versions of what wrote it, the backend, and
the SHA-256 of every other member; records pickled under an allowlist; tensors by ``torch.save``.

Reading checks, in order: the zip (CRC, truncation), the manifest (JSON, ``format``,
``format_version``), that the members are exactly the manifest's, each member's digest. Any
failure is an :class:`ArtifactError`; nothing of the artifact is interpreted before the checks.
The digests detect corruption, not tampering: an artifact is code (kernels), trust it as such.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import json
import os
import pathlib
import pickle
import re
import sys
import zipfile
from typing import Any, Callable

import torch

from ..errors import ArtifactError, DeviceError

__all__ = ["FORMAT", "FORMAT_VERSION", "ArtifactDeviceError", "Reader", "Writer", "TensorTable",
           "dump_records", "load_records", "versions"]

FORMAT = "dlcb-artifact"
FORMAT_VERSION = 8   # 2: one cubin per NVRTC unit (kernels.<j>.cubin, manifest "units");
#                      3: two per unit, the 32-bit and the 64-bit index entry points (.wide.cubin);
#                      4: the 32-bit cubin holds the vectorized entry points too;
#                      5: and the warp-per-output ones;
#                      6: the call signature's slots, constants and output spec;
#                      7: a unit lists the suffixes of the entry points built ("suffixes",
#                         kgen.entries) and all their names, for the boolean "vectorized";
#                      8: the records hold the compile's dl.Config (Graph.config, Kernel.config)
MANIFEST = "manifest.json"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*")


class ArtifactDeviceError(ArtifactError, DeviceError):
    """A cuda artifact loaded where its cubins cannot run: no CUDA device, or another sm arch."""


def versions() -> dict[str, str]:
    """Versions recorded in (and, for ``dlcb_lab``, required of) every artifact."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        dl = version("dlcb-lab")
    except PackageNotFoundError:   # pragma: no cover - a source tree without install
        dl = "unknown"
    return {"dlcb_lab": dl, "torch": torch.__version__, "numba": version("numba"),   # unimported
            "python": "%d.%d" % sys.version_info[:2]}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Writer:
    """Members added by name; :meth:`write` puts them and the manifest in one file, atomically."""

    def __init__(self):
        self.members: dict[str, bytes] = {}

    def add(self, name: str, data: bytes) -> str:
        if not _NAME.fullmatch(name) or ".." in name.split("/") or name == MANIFEST:
            raise ArtifactError(f"bad artifact member name {name!r}")
        if name in self.members:
            raise ArtifactError(f"artifact member {name!r} written twice")
        self.members[name] = bytes(data)
        return name

    def write(self, path: str | os.PathLike, manifest: dict[str, Any]) -> pathlib.Path:
        """Write the artifact to ``path`` (temp file + ``os.replace``: no partial file)."""
        path = pathlib.Path(path)
        head = {"format": FORMAT, "format_version": FORMAT_VERSION, **versions(), **manifest,
                "members": {n: _digest(d) for n, d in self.members.items()}}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
                z.writestr(MANIFEST, json.dumps(head, indent=1, sort_keys=True))
                for name, data in self.members.items():
                    z.writestr(name, data)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path


class Reader:
    """An artifact read whole and verified (see the module docstring). ``manifest`` is the parsed
    manifest, ``member(name)`` a member's verified bytes."""

    def __init__(self, path: str | os.PathLike):
        self.path = pathlib.Path(path)
        try:
            with zipfile.ZipFile(self.path) as z:
                names, first = z.namelist(), z.infolist()[:1]
                if not first or first[0].filename != MANIFEST or first[0].header_offset != 0:
                    # a torch.save member is a zip too: a cut file may show its directory
                    raise self.error("no manifest.json at the start (not a dlcb_lab artifact, "
                                     "or truncated or corrupt)")
                raw = z.read(MANIFEST)
                self.manifest = self._parse(raw)
                data = {n: z.read(n) for n in names if n != MANIFEST}
        except ArtifactError:
            raise
        except FileNotFoundError:
            raise self.error("no such file") from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
                KeyError, RuntimeError) as err:   # zlib.error is an Exception: caught below
            raise self.error(f"not a readable zip file (truncated or corrupt): "
                             f"{type(err).__name__}: {err}") from None
        except Exception as err:   # zlib.error and friends from a damaged member
            raise self.error(f"corrupt zip member: {type(err).__name__}: {err}") from None
        want = self.manifest["members"]
        if set(want) != set(data):
            extra, missing = sorted(set(data) - set(want)), sorted(set(want) - set(data))
            raise self.error(f"members differ from the manifest (missing {missing}, "
                             f"unexpected {extra})")
        for name, blob in data.items():
            if _digest(blob) != want[name]:
                raise self.error(f"member {name!r} fails its SHA-256 check (corrupt)")
        self._data = data

    def error(self, msg: str) -> ArtifactError:
        return ArtifactError(f"artifact {self.path}: {msg}")

    def _parse(self, raw: bytes) -> dict[str, Any]:
        try:
            m = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise self.error(f"manifest.json is not valid JSON ({err})") from None
        if not isinstance(m, dict) or m.get("format") != FORMAT:
            raise self.error(f"manifest.json does not describe a {FORMAT} artifact")
        if m.get("format_version") != FORMAT_VERSION:
            raise self.error(f"format version {m.get('format_version')!r}; this dlcb_lab reads "
                             f"version {FORMAT_VERSION} only (re-save the module with this "
                             f"version)")
        here = versions()["dlcb_lab"]
        if m.get("dlcb_lab") != here:
            raise self.error(f"written by dlcb_lab {m.get('dlcb_lab')!r}, this is {here!r} "
                             f"(records are version-specific)")
        members = m.get("members")
        if not isinstance(members, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in members.items()):
            raise self.error("manifest.json has no valid 'members' table")
        return m

    def member(self, name: str) -> bytes:
        try:
            return self._data[name]
        except (KeyError, TypeError):
            raise self.error(f"missing member {name!r}") from None


# --- tensors -------------------------------------------------------------------------------------

class TensorTable:
    """Tensors referenced by the records, by identity: one ``torch.save`` member, loaded with
    ``weights_only=True`` onto the CPU."""

    def __init__(self, tensors: list[torch.Tensor] | None = None):
        self.tensors: list[torch.Tensor] = list(tensors or ())
        self._index: dict[int, int] = {id(t): i for i, t in enumerate(self.tensors)}

    def ref(self, t: torch.Tensor) -> int:
        i = self._index.get(id(t))
        if i is None:
            i = self._index[id(t)] = len(self.tensors)
            self.tensors.append(t)
        return i

    def get(self, i: Any) -> torch.Tensor:
        if type(i) is not int or not 0 <= i < len(self.tensors):
            raise ArtifactError(f"tensor reference {i!r} outside the artifact's "
                                f"{len(self.tensors)} tensors")
        return self.tensors[i]

    def to_bytes(self) -> bytes:
        buf = io.BytesIO()
        torch.save([t.detach().cpu() for t in self.tensors], buf)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, what: str) -> "TensorTable":
        try:
            ts = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as err:
            raise ArtifactError(f"{what}: tensors do not load ({type(err).__name__}: {err})") \
                from None
        if not isinstance(ts, list) or not all(isinstance(t, torch.Tensor) for t in ts):
            raise ArtifactError(f"{what}: the tensor member is not a list of tensors")
        return cls(ts)


# --- records: pickle under an allowlist ------------------------------------------------------------

RECORD_MODULES = (
    "dlcb_lab.records", "dlcb_lab.dims.expr", "dlcb_lab.dims.constraints", "dlcb_lab.dims.solver",
    "dlcb_lab.dims.bounds", "dlcb_lab.dims.bind", "dlcb_lab.ir.dtypes", "dlcb_lab.ir.graph",
    "dlcb_lab.ir.ops.core", "dlcb_lab.ir.ops.elementwise", "dlcb_lab.ir.ops.shape",
    "dlcb_lab.ir.ops.reduction", "dlcb_lab.ir.ops.library", "dlcb_lab.ir.ops.index",
    "dlcb_lab.ir.ops.normalization", "dlcb_lab.ir.ops.eager", "dlcb_lab.kgen.kir",
    "dlcb_lab.kgen.abi",
    "dlcb_lab.hostgen.guards", "dlcb_lab.hostgen.lower", "dlcb_lab.hostgen.program",
    "dlcb_lab.passes.core", "dlcb_lab.passes.layout", "dlcb_lab.passes.partition",
    "dlcb_lab.passes.rewrite", "dlcb_lab.runtime.direct", "dlcb_lab.bridge.guards",
    "dlcb_lab.config",
)
"""Modules whose record classes (defined there; no exceptions, no runtime objects) unpickle."""

RECORD_FUNCTIONS = (("dlcb_lab.dims.expr", "_rebuild"), ("dlcb_lab.ir.ops.core", "op_def"))
"""The only functions a record pickle may call: re-interning an expression, an op by name."""

_BUILTINS = ("set", "frozenset", "slice", "range", "complex", "Ellipsis", "NotImplemented")
_REFUSED_BASES = (BaseException,)
_allowed: dict[tuple[str, str], Any] | None = None


def allowlist() -> dict[tuple[str, str], Any]:
    """(module, name) -> object for every global a record pickle may reference: the record
    classes of ``RECORD_MODULES``, ``RECORD_FUNCTIONS``, torch dtypes and ``torch.Size``, and a
    few builtins (containers, ``slice``, ``Ellipsis``)."""
    global _allowed
    if _allowed is None:
        out: dict[tuple[str, str], Any] = {}
        for modname in RECORD_MODULES:
            try:
                mod = importlib.import_module(modname)
            except ImportError:   # a module gone from this version: its records cannot load
                continue
            for name, obj in vars(mod).items():
                if inspect.isclass(obj) and obj.__module__ == modname and \
                        not issubclass(obj, _REFUSED_BASES) and not _is_runtime(obj):
                    out[modname, name] = obj
        for modname, name in RECORD_FUNCTIONS:
            out[modname, name] = getattr(importlib.import_module(modname), name)
        for name in dir(torch):
            obj = getattr(torch, name, None)
            if isinstance(obj, torch.dtype):
                out["torch", name] = obj
        out["torch", "Size"] = torch.Size
        import builtins

        for name in _BUILTINS:
            out["builtins", name] = getattr(builtins, name)
        _allowed = out
    return _allowed


def _is_runtime(cls: type) -> bool:
    """Classes that hold or run built code (a launcher, a direct launch) stay out of records."""
    return cls.__name__ in ("DirectKernel", "DirectLaunch", "BoundLaunch")


class _RecordPickler(pickle.Pickler):
    def __init__(self, file, tensors: TensorTable):
        super().__init__(file, protocol=5)
        self._tensors = tensors

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor):
            return ("tensor", self._tensors.ref(obj))
        return None


class _RecordUnpickler(pickle.Unpickler):
    def __init__(self, file, tensor: Callable[[Any], Any], what: str):
        super().__init__(file)
        self._tensor, self._what = tensor, what

    def find_class(self, module: str, name: str):
        obj = allowlist().get((module, name))
        if obj is None:
            raise ArtifactError(f"{self._what}: the pickle references {module}.{name}, which is "
                                f"not an allowed record class (refused, nothing was run)")
        return obj

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "tensor"):
            raise ArtifactError(f"{self._what}: unknown persistent reference {pid!r}")
        return self._tensor(pid[1])


def dump_records(obj: Any, tensors: TensorTable, check: bool = True) -> bytes:
    """Pickle ``obj`` with its tensors put in ``tensors``; then (``check``) read back under the
    allowlist, so a record that would not load is refused now (``ArtifactError``), not at load
    time."""
    buf = io.BytesIO()
    try:
        _RecordPickler(buf, tensors).dump(obj)
    except (pickle.PicklingError, TypeError, AttributeError) as err:
        raise ArtifactError(f"cannot save the compiled module's records: {err}") from None
    data = buf.getvalue()
    if check:
        load_records(data, lambda i: None, "saving the compiled module")
    return data


def load_records(data: bytes, tensor: Callable[[Any], Any], what: str) -> Any:
    """Unpickle records under the allowlist; ``tensor(i)`` resolves a tensor reference. Any
    failure (a refused global, a damaged stream, a record that no longer fits its class) is an
    ``ArtifactError``."""
    try:
        return _RecordUnpickler(io.BytesIO(data), tensor, what).load()
    except ArtifactError:
        raise
    except Exception as err:
        raise ArtifactError(f"{what}: records do not load ({type(err).__name__}: {err})") \
            from None
