"""PyTorch bridge, capture (paper §2.1): a module and example inputs -> an ATen graph, by
``torch.export`` (non-strict), the graph capture PyTorch maintains for ahead-of-time use.

Export resolves the module's Python the way PyTorch does (control flow, ``len``, ``finfo``, shape
arithmetic, branches on sizes), traces through helpers (``torch.fx.wrap`` leaves included) and
lifts parameters, buffers and tensor constants to graph inputs. The graph is export's default
IR: ATen operators before dispatch, CompositeImplicit ops kept (``aten.linear``, ``aten.conv2d``,
``aten.layer_norm``), so the lowering table (``bridge.aten``) is keyed by one documented opset.

Dims: every axis the ``dynamic`` spec names (``"auto"``: every axis) is exported as ``Dim.AUTO``:
export keeps it symbolic where the code admits it and specializes it where the code guards on its
value, without raising. Every named axis is a dim variable in the IR; those export specialized are
pinned to their example size after lowering, so the solver's provenance says what fixed a dim (a
weight shape, a literal view) before falling back to "export specialized it". An example axis of
size 1 is traced at 2 (its values are never read: export runs on fake tensors), size-obliviously
(``backed_size_oblivious``: no size is assumed >= 2, a broadcast is assumed not to meet a 1), so
the graph is the general one and a symbol's range is what the code's own guards imply (``if
x.size(0) > 3``); the ranges become host checks. Where that trace fails, the examples are traced
as given with export's 0/1 specialization (ranges from 2). A call where a dynamic dim is 1 and the
general program refuses it (a broadcast, a squeeze, a range) runs a variant compiled for it
(``CompiledModule.variants``).
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn as nn

from ..dims import Expr, lit, var
from ..errors import DLError, DTypeError, ShapeError, SpecError, UnsupportedOp

DynamicSpec = Mapping[int | str, Mapping[int, str]]
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep   # the bridge; dlcb_lab.demo is user code
_API = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "api.py")
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
_DTYPE_WORDS = re.compile(r"dtype|[Pp]romotion|\bcast\b|be cast|safely cast|result type|"
                          r"ScalarType|not implemented for '|[Bb]oolean|bool tensor")


@dataclass
class Captured:
    """What capture hands the lowering: the exported program, the user inputs' names and example
    tensors, the dynamic spec ({input: {axis: dim name}}: the axes that are dim variables in the
    IR), the spec's axes export specialized (``(input, axis, size)``: the lowering pins them,
    after the graph's own constraints, so the solver names what fixed them first), and whether
    the spec was ``dynamic="auto"`` (every axis proposed)."""

    program: Any                      # torch.export.ExportedProgram
    names: tuple[str, ...]
    examples: tuple[torch.Tensor, ...]
    spec: dict[int, dict[int, str]]
    pins: tuple[tuple[int, int, int], ...] = ()
    auto: bool = False
    widened: bool = False             # a size-1 example axis was traced at 2
    oblivious: bool = False           # traced size-obliviously (else with 0/1 specialization)

    @property
    def graph(self):
        return self.program.graph_module.graph


def _signature_names(module: Any) -> list[str]:
    try:
        return list(inspect.signature(getattr(module, "forward", module)).parameters)
    except (TypeError, ValueError):
        return []


def _group_var_positional(shapes: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Export's form of per-input specs for a ``forward(a, *xs)``: the inputs past the named ones
    (``xs_0``, ``xs_1``... here) as one tuple under the ``*args`` name."""
    if all(k in names for k in shapes):
        return shapes
    var = next(n for k, n in zip(shapes, names) if k != n)
    head = {k: v for k, v in shapes.items() if k in names}
    return {**head, var: tuple(v for k, v in shapes.items() if k not in names)}


def _parameters(module: Any, n: int) -> list[tuple[str, bool]]:
    """(name, keyword-only) of ``forward``'s first ``n`` parameters; ``SpecError`` when ``n``
    examples cannot bind them."""
    try:
        ps = list(inspect.signature(getattr(module, "forward", module)).parameters.values())
    except (TypeError, ValueError):
        return [(f"input{i}", False) for i in range(n)]
    var = next((p for p in ps if p.kind is p.VAR_POSITIONAL), None)
    if var is not None:   # the named positionals, then *args as export names them: xs_0, xs_1...
        head = [p.name for p in ps[:ps.index(var)]][:n]
        return [(name, False) for name in head] + \
            [(f"{var.name}_{j}", False) for j in range(n - len(head))]
    ps = [p for p in ps if p.kind is not p.VAR_KEYWORD]
    required = [p for p in ps if p.default is p.empty]
    if not len(required) <= n <= len(ps):
        raise SpecError(f"module takes {len(ps)} inputs ({', '.join(p.name for p in ps)}), "
                        f"{len(required)} without a default; {n} examples given")
    return [(p.name, p.kind is p.KEYWORD_ONLY) for p in ps[:n]]


def capture(module: nn.Module, examples: Sequence[Any], dynamic: Any) -> Captured:
    """Export ``module`` on ``examples`` with the axes of ``dynamic`` symbolic (``"auto"``: every
    axis; export keeps those the code admits); export's refusals (data-dependent control flow,
    unsupported Python) become ``UnsupportedOp``. Sizes are traced size-obliviously (a size-1
    example stays symbolic, a broadcast is assumed not to hit a 1), unless that fails; then with
    export's 0/1 specialization."""
    if not isinstance(module, nn.Module):
        raise SpecError(f"expected a torch.nn.Module, got {type(module).__name__}")
    params = _parameters(module, len(examples))
    names = [name for name, _ in params]
    for i, ex in enumerate(examples):
        if not isinstance(ex, torch.Tensor):
            raise SpecError(f"example input {i} '{names[i]}' is {type(ex).__name__}, expected a "
                            f"torch.Tensor")
        if ex.layout is not torch.strided:
            raise UnsupportedOp(f"input {i} '{names[i]}': layout {ex.layout} unsupported (strided "
                                f"tensors only)")
    auto = isinstance(dynamic, str) and dynamic == "auto"
    spec = {i: {k: f"{names[i]}_{k}" for k in range(ex.dim())} for i, ex in enumerate(examples)} \
        if auto else normalize_dynamic(dynamic, names, [ex.dim() for ex in examples])
    widen = {(i, k) for i, axes in spec.items() for k in axes if examples[i].shape[k] == 1}
    oblivious = True
    try:   # size-oblivious: the general program; its ranges are the code's own guards
        ep, symbolic = _export(module, examples, params, spec, widen, oblivious=True)
        if any(k not in symbolic[i] for i, k in widen):   # the code fixes a widened axis
            raise SpecError("a widened axis was specialized")
    except DLError:   # traced as given, with export's 0/1 specialization (ranges from 2)
        widen, oblivious = set(), False
        ep, symbolic = _export(module, examples, params, spec, widen, oblivious=False)
    users = _user_inputs(ep)
    if auto:   # one name per export symbol: axes export found equal share their dim
        named: dict[Any, str] = {}
        for i, n in enumerate(users):
            for k, sz in enumerate(n.meta["val"].shape):
                if k in symbolic[i]:
                    spec[i][k] = named.setdefault(str(sz), spec[i][k])
    pins = tuple((i, k, int(examples[i].shape[k])) for i, axes in spec.items() for k in axes
                 if k not in symbolic[i])
    return Captured(ep, tuple(names), tuple(examples), spec, pins, auto, bool(widen), oblivious)


def _export(module: nn.Module, examples: Sequence[torch.Tensor], params, spec: dict,
            widen: set, oblivious: bool):
    """``torch.export`` with the ``spec`` axes ``Dim.AUTO`` and the ``widen`` axes traced at 2
    (keyword-only inputs passed by name), ``oblivious``: with ``backed_size_oblivious`` (a size
    is not assumed >= 2, so a symbol's range is what the code's guards imply); the program and,
    per user input, the axes export kept symbolic."""
    import torch.fx.experimental._config as fx_config
    from torch.export import Dim, export

    args, kwargs, shapes = [], {}, {}
    home = next((t.device for t in (*module.parameters(), *module.buffers())), None) \
        if isinstance(module, nn.Module) else None
    for i, ((name, kw_only), ex) in enumerate(zip(params, examples)):
        shape = [2 if (i, k) in widen else int(n) for k, n in enumerate(ex.shape)]
        t = ex.detach() if list(ex.shape) == shape else ex.new_zeros(shape)
        if home is not None and t.device != home:   # traced where the parameters are: the
            t = t.new_zeros(t.shape, device=home)   # compiled module keeps its own copies
        (kwargs.__setitem__(name, t) if kw_only else args.append(t))
        shapes[name] = {k: Dim.AUTO for k in spec.get(i, {})} or None
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)   # an op's error is raised below, not also logged
    try:
        shapes = _group_var_positional(shapes, _signature_names(module))
        with fx_config.patch(backed_size_oblivious=oblivious):
            ep = export(module, tuple(args), kwargs or None, dynamic_shapes=shapes,
                        strict=False)
    except Exception as err:   # export raises many types: sort them into dl errors
        raise _refusal(module, err) from None
    finally:
        fake_log.setLevel(level)
    symbolic = tuple(frozenset(k for k, sz in enumerate(n.meta["val"].shape) if is_symbolic(sz))
                     for n in _user_inputs(ep))
    return ep, symbolic


def is_symbolic(size: Any) -> bool:
    """A size export left symbolic (a specialized one may be a SymInt of known value)."""
    return isinstance(size, torch.SymInt) and size.node.maybe_as_int() is None


def _user_inputs(ep) -> list:
    """The exported graph's placeholders of the user inputs, in order."""
    from torch.export.graph_signature import InputKind

    names = {s.arg.name for s in ep.graph_signature.input_specs if s.kind is InputKind.USER_INPUT}
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in names]


def _refusal(module: nn.Module, err: Exception) -> DLError:
    """A dl error for an exception export raised. Capture's own limits (data-dependent control
    flow, untraceable Python) are ``UnsupportedOp``; an error a torch op raised while tracing is
    the program's own (eager raises it too): ``DTypeError`` or ``ShapeError`` with torch's
    message, located at the innermost user frame."""
    from torch._dynamo.exc import Unsupported, UserError
    from torch.fx.experimental import symbolic_shapes as ss

    if isinstance(err, DLError):
        return err
    first = next((ln for ln in str(err).splitlines() if ln.strip()), "")
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith((TORCH_DIR, _OWN_DIR, _STDLIB_DIR, _API))]
    where = f"{source_file(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}: " \
        f"{(frames[-1].line or '').strip()}" if frames else ""
    what = f"{type(err).__name__}: {first}"
    limits = (Unsupported, UserError, ss.GuardOnDataDependentSymNode,
              getattr(ss, "PendingUnbackedSymbolNotFound", Unsupported))
    if isinstance(err, limits) or "data-dependent" in first or not isinstance(
            err, (RuntimeError, IndexError, ValueError, TypeError, NotImplementedError)):
        out: DLError = UnsupportedOp(f"torch.export cannot capture {type(module).__name__}: "
                                     f"{what} (torch.compile(model, backend='dlcb') breaks the "
                                     f"graph there and compiles the pieces)")
    elif _DTYPE_WORDS.search(first):
        out = DTypeError(f"torch rejects the program: {what}")
    else:
        out = ShapeError(f"torch rejects the program: {what}")
    return out.locate("capture", "", where) if where else out


# --- the dynamic spec ------------------------------------------------------------------------------

_FORM = ("expected dynamic=False or {input: {axis: dim name}} with input a position or a name, "
         "e.g. {0: {0: 'N'}} or {'x': {0: 'N', 2: 'H'}}")


def normalize_dynamic(dynamic: Any, names: Sequence[str], ranks: Sequence[int]
                      ) -> dict[int, dict[int, str]]:
    """``dynamic`` as {input position: {non-negative axis: dim name}}, or ``SpecError``."""
    if dynamic is False or dynamic is None:
        return {}
    if dynamic is True:
        raise SpecError(f"dynamic=True needs dim names: {_FORM}")
    if not isinstance(dynamic, Mapping):
        raise SpecError(f"dynamic={dynamic!r}: {_FORM}")
    out: dict[int, dict[int, str]] = {}
    for key, axes in dynamic.items():
        if isinstance(key, str) and key in names:
            i = names.index(key)
        elif isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(names):
            i = key
        else:
            raise SpecError(f"dynamic: {key!r} is not an input (inputs: "
                            f"{', '.join(f'{j} {n!r}' for j, n in enumerate(names))}); {_FORM}")
        if i in out:
            raise SpecError(f"dynamic: input {i} '{names[i]}' given twice")
        if not isinstance(axes, Mapping):
            raise SpecError(f"dynamic[{key!r}] = {axes!r}: {_FORM}")
        spec: dict[int, str] = {}
        for ax, name in axes.items():
            r = ranks[i]
            if isinstance(ax, bool) or not isinstance(ax, int) or not -r <= ax < r:
                raise SpecError(f"input {i} '{names[i]}': axis {ax!r} is not an axis of rank {r}")
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
                raise SpecError(f"input {i} '{names[i]}' axis {ax}: dim name {name!r} must be an "
                                f"identifier not starting with '_'")
            if ax % r in spec:
                raise SpecError(f"input {i} '{names[i]}': axis {ax} named twice")
            spec[ax % r] = name
        out[i] = spec
    return out


def input_dims(example: torch.Tensor, spec: Mapping[int, str]) -> list[Expr]:
    return [var(spec[k], 1) if k in spec else lit(int(n)) for k, n in enumerate(example.shape)]


# --- source locations -----------------------------------------------------------------------------

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (.+)$')


def user_frame(stack_trace: str | None) -> str | None:
    """The innermost frame of an export node's ``stack_trace`` outside torch, dlcb_lab and the
    standard library, as ``file:line in fn: code`` (a torchvision model's own file is user
    code)."""
    if not stack_trace:
        return None
    frames = []
    for line in stack_trace.splitlines():
        m = _FRAME.match(line)
        if m:
            frames.append([m.group(1), m.group(2), m.group(3), ""])
        elif frames and not frames[-1][3] and line.strip():
            frames[-1][3] = line.strip()
    for filename, line, fn, code in reversed(frames):
        if not filename.startswith((TORCH_DIR, _OWN_DIR, _STDLIB_DIR)):
            return f"{source_file(filename)}:{line} in {fn}: {code}"
    return None


def source_file(filename: str, cells: Mapping[str, int] | None = None) -> str:
    """The file part of a source location: a notebook cell as IPython names it (``In[3]``;
    IPython's compiler maps each cell's file name, e.g. ``ipykernel_<pid>/<hash>.py``, to its
    execution count), else the basename. ``cells`` maps file names to execution counts; by
    default the running IPython's map (none outside IPython)."""
    if cells is None:
        cell = _ipython_cell(filename)
    else:
        cell = f"In[{cells[filename]}]" if filename in cells else None
    return cell or os.path.basename(filename)


def _ipython_cell(filename: str) -> str | None:
    """IPython's name for the cell compiled to ``filename`` (None outside IPython; IPython is
    never imported here)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    fmt = getattr(getattr(shell, "compile", None), "format_code_name", None)
    named = fmt(filename) if fmt is not None else None
    return named[1] if named else None
