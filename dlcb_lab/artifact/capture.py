"""The capture cache (Stage 8, warm compiles): the captured and lowered program of a module,
kept on disk under ``cache_dir("capture")`` and read back by a later compile of the same module
on the same example call, in this or another process, instead of tracing again (``torch.export``
is most of a cold compile; reading the entry takes milliseconds).

An entry holds the lowered IR graph (before the passes, which fold parameter values and run
again on every compile), the capture's records (dims, pins, ties, the call signature) and the
values of the tensors the lowering computed (folded constants: masks, tables). The module's own
parameters and buffers are not stored: the graph refers to them by name and a hit binds the live
module's tensors, so new weights of the same shapes need no new capture.

Never stale. The key (``key``) is a SHA-256 over everything the capture reads:
- versions: this cache's format, a digest of DLCB's own source files, torch's version string,
  Python's;
- the code: for every class of the module tree (its MRO below ``nn.Module``) the module it is
  defined in, and, transitively, the local modules those reference; a module of an installed
  package (site-packages, torch) counts by the package's version, any other by the digest of
  its file (a class whose source cannot be located, one typed into a notebook cell say, makes
  the module uncacheable: it is traced every time);
- the module tree: each submodule's path, class, ``training`` flag and attributes (numbers,
  strings, dtypes, configs, functions and hooks by their code, tensors by value), each
  parameter's and buffer's name, shape, dtype, device and ``requires_grad``;
- the example call (each tensor's shape, strides, dtype, device; every other argument's value),
  the ``dynamic`` spec and the grad mode.
An attribute whose value has no stable token (an object printed by address) makes the module
uncacheable, as does a source file that cannot be read. The lowered values that depend on
parameter or buffer values (a relative-position table gathered from a parameter) carry the
digest of each such tensor; a hit whose live tensors differ is a miss. Files are written
atomically (``runtime.cache.atomic_write``) and read under the artifact container's checks and
record allowlist (``format``): a damaged or foreign entry is a miss, never an error.
``DLCB_CAPTURE_CACHE=0`` (``Config.capture_cache``) turns the cache off.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import logging
import os
import pathlib
import sys
import sysconfig
import types
from typing import Any, Mapping

import torch
import torch.nn as nn

from ..errors import ArtifactError

__all__ = ["CACHE_FORMAT", "Origin", "Uncacheable", "key", "load", "open_entry", "store"]

CACHE_FORMAT = 2   # 2: the capture's derived axes
_log = logging.getLogger(__name__)
_DLCB_DIR = pathlib.Path(__file__).resolve().parent.parent
_INSTALLED = tuple({os.path.realpath(p) + os.sep for p in
                    (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                     os.path.dirname(torch.__file__), os.path.dirname(os.__file__))})
_MAX_DEPTH = 6


class Uncacheable(Exception):
    """Something the capture reads has no stable token: the compile traces and stores nothing."""


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where a lowered graph's constants come from: ``fqns``, the id of each constant tensor
    that is one of the module's parameters or buffers -> its name (the others are values the
    lowering computed); ``checks``, name -> digest of each parameter or buffer a computed value
    was read from. The program cache (``artifact.program``) binds by the one and checks the
    other."""

    fqns: dict[int, str]
    checks: dict[str, str]


# --- the key ----------------------------------------------------------------------------------

def key(module: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, dynamic: Any) -> str:
    """The entry name of this capture (``Uncacheable`` when some part has no stable token)."""
    t = _Tokens()
    try:
        parts = [f"format {CACHE_FORMAT}", f"dlcb {_dlcb_digest()}", f"torch {torch.__version__}",
                 f"python {sys.version}", f"grad {torch.is_grad_enabled()}",
                 f"dynamic {t.of(dynamic)}", f"args {t.of(tuple(args))}",
                 f"kwargs {t.of(dict(kwargs or {}))}", t.tree(module)]
    except Uncacheable:
        raise
    except Exception as err:   # an attribute that fails to print, say: no key, no cache
        raise Uncacheable(f"{type(err).__name__}: {err}") from None
    parts.append(f"code {sorted(t.code.items())} {sorted(t.globals_of.items())}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@functools.lru_cache(maxsize=None)
def _dlcb_digest() -> str:
    """DLCB's own source files (the lowering, the capture): a changed line misses every entry."""
    h = hashlib.sha256()
    for p in sorted(_DLCB_DIR.rglob("*.py")):
        h.update(str(p.relative_to(_DLCB_DIR)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _file_digest(path: str) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _tensor_digest(t: torch.Tensor) -> str:
    a = t.detach().to("cpu").contiguous()
    data = a.view(torch.uint8) if a.numel() and a.dtype != torch.bool else a.to(torch.uint8)
    return hashlib.blake2b(data.numpy().tobytes() if a.numel() else b"", digest_size=16).hexdigest()


class _Tokens:
    """Stable text for the values a capture reads; ``code``: module name -> its token, for every
    Python module whose code the key covers."""

    def __init__(self):
        self.code: dict[str, str] = {}
        self.globals_of: dict[str, str] = {}
        self.values = False   # tensors by value (module attributes), else by metadata (the call)
        self._seen: dict[int, str] = {}

    def tree(self, module: nn.Module) -> str:
        out, self.values = [], True
        for path, m in module.named_modules(remove_duplicate=False):
            self._class(type(m))
            attrs = {k: v for k, v in vars(m).items()
                     if k not in ("_parameters", "_buffers", "_modules")}
            out.append(f"{path}: {self._cls_name(type(m))} {self.of(attrs, path or '<root>')}")
            for name, p in list(m._parameters.items()) + list(m._buffers.items()):
                out.append(f"  {name}: " + ("None" if p is None else
                                            f"{tuple(p.shape)} {p.dtype} {p.device} "
                                            f"{p.requires_grad}"))
        for hooks in (nn.modules.module._global_forward_hooks,
                      nn.modules.module._global_forward_pre_hooks):
            out.append(self.of(dict(hooks)))
        return "\n".join(out)

    def of(self, v: Any, where: str = "", depth: int = 0) -> str:
        if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
            return repr(v)
        if isinstance(v, (torch.dtype, torch.device, torch.Size, torch.layout,
                          torch.memory_format, enum.Enum)):
            return repr(v)
        if isinstance(v, torch.Tensor):
            if v.layout is not torch.strided:
                raise Uncacheable(f"{where}: a {v.layout} tensor")
            body = f"{tuple(v.shape)} {v.stride()} {v.dtype} {v.device}"
            return f"tensor({body} {_tensor_digest(v)})" if self.values else f"tensor({body})"
        if depth > _MAX_DEPTH:
            raise Uncacheable(f"{where}: nested deeper than {_MAX_DEPTH}")
        if isinstance(v, (tuple, list)):
            return f"{type(v).__name__}({', '.join(self.of(x, where, depth + 1) for x in v)})"
        if isinstance(v, (set, frozenset)):
            return f"set({', '.join(sorted(self.of(x, where, depth + 1) for x in v))})"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.of(k, where, depth + 1)}: "
                                   f"{self.of(x, where, depth + 1)}" for k, x in v.items()) + "}"
        if id(v) in self._seen:
            return self._seen[id(v)]
        if isinstance(v, nn.Module):
            return self._note(v, f"module({self._class(type(v))})")
        if isinstance(v, type):
            return self._note(v, f"class({self._class(v)})")
        if isinstance(v, functools.partial):
            return self._note(v, f"partial({self.of(v.func, where, depth + 1)}, "
                                 f"{self.of(v.args, where, depth + 1)}, "
                                 f"{self.of(v.keywords, where, depth + 1)})")
        if isinstance(v, types.MethodType):
            return self._note(v, f"method({self.of(v.__func__, where, depth + 1)} of "
                                 f"{type(v.__self__).__qualname__})")
        if isinstance(v, (types.FunctionType, types.BuiltinFunctionType)) or callable(v) and \
                hasattr(v, "__qualname__") and hasattr(v, "__module__") and \
                not hasattr(v, "__dict__"):
            self._module_code(getattr(v, "__module__", None), where)
            closure = getattr(v, "__closure__", None) or ()
            cells = [self.of(c.cell_contents, where, depth + 1) for c in closure]
            defaults = self.of(getattr(v, "__defaults__", None), where, depth + 1)
            code = getattr(v, "__code__", None)   # two lambdas of one file differ here
            return self._note(v, f"fn({v.__module__}.{v.__qualname__} {defaults} {cells} "
                                 f"{_code_token(code) if code is not None else ''} "
                                 f"{_simple_globals(v)})")
        if hasattr(v, "to_dict") and callable(v.to_dict):   # configs (transformers)
            self._class(type(v))
            return self._note(v, f"{self._cls_name(type(v))}"
                                 f"({self.of(v.to_dict(), where, depth + 1)})")
        if hasattr(v, "__dict__") and not isinstance(v, types.ModuleType):
            self._class(type(v))
            self._seen[id(v)] = f"<cycle {self._cls_name(type(v))}>"
            return self._note(v, f"{self._cls_name(type(v))}"
                                 f"({self.of(dict(vars(v)), where, depth + 1)})")
        if isinstance(v, types.ModuleType):
            self._module_code(v.__name__, where)
            return f"pymodule({v.__name__})"
        text = repr(v)
        if " at 0x" in text or " object at " in text:
            raise Uncacheable(f"{where}: {type(v).__name__} has no stable token")
        return f"{type(v).__qualname__}({text})"

    def _note(self, v: Any, token: str) -> str:
        self._seen[id(v)] = token
        return token

    @staticmethod
    def _cls_name(c: type) -> str:
        return f"{c.__module__}.{c.__qualname__}"

    def _class(self, c: type) -> str:
        for base in c.__mro__:
            if base is nn.Module or base is object:
                break
            self._module_code(base.__module__, self._cls_name(base))
            if base.__module__ not in self.globals_of:   # module-level values its methods read
                self.globals_of[base.__module__] = ""
            self.globals_of[base.__module__] += "".join(
                _simple_globals(f) for f in vars(base).values()
                if isinstance(f, types.FunctionType))
        return self._cls_name(c)

    def _module_code(self, name: str | None, where: str) -> None:
        """Cover Python module ``name``'s code: an installed package by its version, another
        module by its file's digest, and then the local modules it references."""
        top = (name or "").split(".")[0]
        if name is None or name in self.code or name == "builtins" or top == _DLCB_DIR.name:
            return   # DLCB's own modules: the key's DLCB digest (however many are imported)
        top_path = getattr(sys.modules.get(top), "__file__", None)
        if top_path is not None and os.path.realpath(top_path).startswith(_INSTALLED):
            self.code[name] = _package_version(top, os.path.realpath(top_path))
            return   # an installed package (its extension modules too): its version
        path = getattr(sys.modules.get(name), "__file__", None)
        if path is None:
            raise Uncacheable(f"{where}: the source of module {name!r} cannot be located")
        real = os.path.realpath(path)
        try:
            self.code[name] = _file_digest(real)
        except OSError as err:
            raise Uncacheable(f"{where}: {err}") from None
        for v in list(vars(sys.modules[name]).values()):   # local modules this one uses
            other = v.__name__ if isinstance(v, types.ModuleType) else \
                getattr(v, "__module__", None) if isinstance(v, (type, types.FunctionType)) \
                else None
            if isinstance(other, str) and other != name and other in sys.modules:
                f = getattr(sys.modules[other], "__file__", None)
                if f is not None and not os.path.realpath(f).startswith(_INSTALLED):
                    self._module_code(other, where)


def _simple_globals(fn: Any) -> str:
    """The module-level numbers and strings ``fn`` reads (rebinding one at run time changes no
    file)."""
    code, glob = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or glob is None:
        return ""
    return repr([(n, glob[n]) for n in code.co_names if n in glob and
                 isinstance(glob[n], (bool, int, float, str, bytes, type(None)))])


def _code_token(code: types.CodeType) -> str:
    """A function's code: its bytecode, constants (nested functions' code too), names, place."""
    consts = [_code_token(c) if isinstance(c, types.CodeType) else repr(c)
              for c in code.co_consts]
    return hashlib.sha256(repr((code.co_code, consts, code.co_names, code.co_filename,
                                code.co_firstlineno)).encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=None)
def _package_version(top: str, path: str) -> str:
    """An installed package's version (the distribution's, else its ``__version__``); a package
    without one counts by its file's digest."""
    if top == "torch":
        return f"torch {torch.__version__}"
    try:
        return f"{top} {importlib.metadata.version(top)}"
    except importlib.metadata.PackageNotFoundError:
        pass
    v = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(v, str):
        return f"{top} {v}"
    return _file_digest(path)


# --- entries ----------------------------------------------------------------------------------

def _path(k: str) -> pathlib.Path:
    from ..runtime.cache import cache_dir

    return cache_dir("capture") / f"{k}.dlcb"


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    out = dict(module.named_parameters(remove_duplicate=False))
    out.update(module.named_buffers(remove_duplicate=False))
    return out


def load(k: str, module: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None):
    """``(Captured, Graph, Origin)`` of entry ``k`` bound to ``module``'s tensors and this
    call's inputs, or None (no entry, a damaged one, or lowered values of other parameter
    values)."""
    from .format import load_records
    from .signature import signature_of
    from ..bridge.capture import Auto, Captured

    path = _path(k)
    try:
        opened = open_entry(path, "capture", module)
        if opened is None:
            return None
        r, tensor = opened
        m = r.manifest
        tensors = [tensor(ref) for ref in m["refs"]]
        rec = load_records(r.member("records.pkl"), tensors.__getitem__, str(path))
        c = rec["capture"]
        signature = signature_of(m["signature"])
        examples = signature.bind(tuple(args), dict(kwargs or {}))
        auto = None if c["auto"] is None else Auto(*c["auto"])
        cap = Captured(None, c["names"], tuple(examples), c["spec"], c["pins"], c["widened"],
                       c["oblivious"], c["declared"], signature, c["ties"], c["symbols"], auto,
                       c["path"], c["derived"])
        fqns = {id(t): ref[1] for t, ref in zip(tensors, m["refs"]) if ref[0] == "state"}
        return cap, rec["graph"], Origin(fqns, dict(m["checks"]))
    except (ArtifactError, KeyError, IndexError, TypeError, ValueError) as err:
        _log.info("capture cache entry %s not used: %s", path.name, err)
        return None


def open_entry(path: pathlib.Path, kind: str, module: nn.Module):
    """Cache entry ``path`` of ``kind`` read and checked (the artifact container's checks): its
    reader and the resolver of its tensor references (``["state", name]``: ``module``'s live
    parameter or buffer; ``["value", i, device]``: a stored value); None when there is no entry
    or a parameter a stored value was computed from differs (its digest, ``checks``). A damaged
    entry raises (``ArtifactError``, ``KeyError``, ...)."""
    from .format import Reader, TensorTable

    if not path.exists():
        return None
    r = Reader(path)
    m = r.manifest
    if m.get("kind") != kind:
        raise ArtifactError(f"{path.name}: a {m.get('kind')!r} entry, not {kind!r}")
    state = _state(module)
    if any(_tensor_digest(state[fqn]) != d for fqn, d in m["checks"].items()):
        return None
    values = TensorTable.from_bytes(r.member("tensors.pt"), str(path))

    def tensor(ref: list) -> torch.Tensor:
        return state[ref[1]] if ref[0] == "state" else values.get(ref[1]).to(ref[2])

    return r, tensor


def store(k: str, module: nn.Module, cap, g) -> Origin | None:
    """Write entry ``k``: ``g`` (just lowered, before the passes) and ``cap``'s records; a graph
    or signature the records cannot hold is not stored (the next compile traces again: None).
    Returns where ``g``'s constants come from."""
    from torch.export.graph_signature import InputKind

    from .format import TensorTable, Writer, dump_records
    from .signature import signature_json

    ep = cap.program
    lifted = {**ep.constants, **ep.state_dict}   # non-persistent buffers are in constants
    targets = {id(lifted[s.target]): s.target for s in ep.graph_signature.input_specs
               if s.kind in (InputKind.PARAMETER, InputKind.BUFFER) and s.target in lifted}
    state = _state(module)
    auto = None if cap.auto_spec is None else (dict(cap.auto_spec.names), cap.auto_spec.fixed)
    c = {"names": cap.names, "spec": cap.spec, "pins": cap.pins, "widened": cap.widened,
         "oblivious": cap.oblivious, "declared": cap.declared, "ties": cap.ties,
         "derived": cap.derived,
         "symbols": cap.symbols, "auto": auto, "path": cap.path}
    table = TensorTable()
    try:
        data = dump_records({"capture": c, "graph": g}, table, check=False)
        signature = signature_json(cap.signature)
    except ArtifactError as err:
        _log.info("capture not cached: %s", err)
        return None
    refs, values = [], []
    for t in table.tensors:
        fqn = targets.get(id(t))
        if fqn is not None and fqn in state and state[fqn].shape == t.shape and \
                state[fqn].dtype == t.dtype:
            refs.append(["state", fqn])
        else:
            refs.append(["value", len(values), str(t.device)])
            values.append(t)
    checks = {fqn: _tensor_digest(state[fqn]) for fqn in _folded_sources(cap, g)
              if fqn in state}
    w = Writer()
    w.add("records.pkl", data)
    w.add("tensors.pt", TensorTable(values).to_bytes())
    w.write(_path(k), {"kind": "capture", "refs": refs, "checks": checks,
                       "signature": signature})
    return Origin({id(t): ref[1] for t, ref in zip(table.tensors, refs) if ref[0] == "state"},
                  checks)


def _folded_sources(cap, g) -> set[str]:
    """The parameters and buffers whose values the lowering read into a constant of ``g`` (a
    folded mask or table): a hit must see the same values."""
    from torch.export.graph_signature import InputKind

    ep = cap.program
    placeholders = {s.arg.name: s.target for s in ep.graph_signature.input_specs
                    if s.kind in (InputKind.PARAMETER, InputKind.BUFFER)}
    nodes = {n.name: n for n in cap.graph.nodes}
    out: set[str] = set()
    todo = [nodes[v.name] for v, _ in g.constants
            if v.name in nodes and nodes[v.name].op != "placeholder"]
    seen = set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder" and n.name in placeholders:
            out.add(placeholders[n.name])
        todo.extend(n.all_input_nodes)
    return out
