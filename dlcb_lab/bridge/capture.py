"""PyTorch bridge, capture (paper §2.1): a module and example inputs -> an ATen graph, by
``torch.export`` (non-strict), the graph capture PyTorch maintains for ahead-of-time use.

Export resolves the module's Python the way PyTorch does (control flow, ``len``, ``finfo``, shape
arithmetic, branches on sizes), traces through helpers (``torch.fx.wrap`` leaves included) and
lifts parameters, buffers and tensor constants to graph inputs. The graph is export's default
IR: ATen operators before dispatch, CompositeImplicit ops kept (``aten.linear``, ``aten.conv2d``,
``aten.layer_norm``), so the lowering registry (``bridge.registry``) is keyed by one documented opset.

The example call is the user's: ``module(*args, **kwargs)``, bound to ``forward`` as Python binds
it (``bridge.signature``); tensors are the inputs, other arguments constants of the trace; the
output keeps its pytree structure.

Dims: every axis the ``dynamic`` spec names (``"auto"``, the default: every axis) is exported as
``Dim.AUTO``: export keeps it symbolic where the code admits it and specializes it where the code
guards on its value, without raising. Export runs without duck sizing: axes of equal example size
are separate symbols until a guard of the code ties them (one symbol, one dim; a call where they
differ runs a variant traced at its sizes). Automatic dims are named in the words of the input's
kind (``N, C, H, W``; ``batch, seq``), one name per export symbol. Every named axis is a dim variable in the IR; those export specialized are
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

import contextlib
import inspect
import io
import logging
import os
import re
import sys
import traceback
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import torch
import torch.nn as nn

from ..dims import Expr, lit, var
from ..errors import ArgumentError, DLError, DTypeError, ShapeError, SpecError, UnsupportedOp
from .signature import SIMPLE, CallSignature, bind_slots, params_of

_P = inspect.Parameter

DynamicSpec = Mapping[int | str, Mapping[int, str]]
TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep   # the bridge; dlcb_lab.demo is user code
_API = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "api.py")
_STDLIB_DIR = os.path.dirname(os.__file__) + os.sep
_DTYPE_WORDS = re.compile(r"dtype|[Pp]romotion|\bcast\b|be cast|safely cast|result type|"
                          r"ScalarType|scalar types?\b|not implemented for '|[Bb]oolean|"
                          r"bool tensor")


@dataclass(frozen=True)
class Auto:
    """``dynamic=dl.auto(...)``: every input axis proposed free, as with ``dynamic="auto"``
    (export keeps those the program admits, the lowering pins the rest); ``names``
    ({input: {axis: dim name}}, inputs by position or name) names some axes and declares them:
    an axis named here that the program fixes is a ``ShapeError``, as in an explicit spec."""

    names: Mapping[int | str, Mapping[int, str]] = field(default_factory=dict)
    fixed: frozenset[tuple[int, int]] = frozenset()
    """(input, axis) pairs kept at their example size: axes a size of the program has no dim
    form for (the compile fills this in and traces again)."""


def auto(names: Mapping[int | str, Mapping[int, str]] | None = None, /,
         **by_input: Mapping[int, str]) -> Auto:
    """``dynamic=dl.auto({"x": {0: "B"}})`` or ``dl.auto(x={0: "B"})``: the named axes are the
    dims given, every other axis is chosen automatically (``dynamic="auto"``)."""
    return Auto({**dict(names or {}), **by_input})


@dataclass
class Captured:
    """What capture hands the lowering: the exported program, the user inputs' names and example
    tensors, the dynamic spec ({input: {axis: dim name}}: the axes that are dim variables in the
    IR), the spec's axes export specialized (``(input, axis, size)``: the lowering pins them,
    after the graph's own constraints, so the solver names what fixed them first), which dim
    names were declared (checked by ``check_generalization``; every name of an explicit spec),
    the call signature, and the pairs of input axes export tied (``((i, k), (j, l))``: one symbol, from a guard of the code: a call
    where they differ runs a variant traced at its sizes)."""

    program: Any                      # torch.export.ExportedProgram
    names: tuple[str, ...]
    examples: tuple[torch.Tensor, ...]
    spec: dict[int, dict[int, str]]
    pins: tuple[tuple[int, int, int], ...] = ()
    widened: bool = False             # a size-1 example axis was traced at 2
    oblivious: bool = False           # traced size-obliviously (else with 0/1 specialization)
    declared: frozenset[str] = frozenset()
    signature: CallSignature | None = None
    ties: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = ()
    symbols: dict[str, tuple[int, int]] = field(default_factory=dict)   # export symbol -> the
    auto_spec: Auto | None = None   # first input axis it sizes; the automatic spec (else None)
    path: str = "export"   # "fast" (a static export, bridge.fast), else "export: <why>"
    derived: tuple = ()    # ((input, axis), export's expression of its size, ((symbol, (input,
    #   axis)), ...)): axes export derived from others (a mask of past + new tokens); a call where
    #   one differs runs a variant traced at its sizes (``derived_apart``)

    def fixing(self, symbols: frozenset[str]) -> Auto | None:
        """The automatic spec again with the input axes of export's ``symbols`` (and those tied
        to them) kept at their example sizes; None when that fixes nothing new (or the spec
        was not automatic)."""
        if self.auto_spec is None:
            return None
        heads = {self.symbols[s] for s in symbols if s in self.symbols}
        tied = {b for a, b in self.ties if a in heads} | heads
        new = tied - self.auto_spec.fixed
        return replace(self.auto_spec, fixed=self.auto_spec.fixed | new) if new else None

    @property
    def graph(self):
        return self.program.graph_module.graph


def capture(module: nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any] | None,
            dynamic: Any, fast: bool = True) -> Captured:
    """Export ``module`` on the example call ``module(*args, **kwargs)`` with the axes of
    ``dynamic`` symbolic (``"auto"``, ``True`` or ``dl.auto(...)``: every axis; export keeps
    those the code admits); export's refusals (data-dependent control flow, unsupported Python)
    become ``UnsupportedOp``. Tensor arguments are the traced inputs; ``None``, bools, ints,
    floats and strings are constants of the trace. Sizes are traced size-obliviously (a size-1
    example stays symbolic, a broadcast is assumed not to hit a 1), unless that fails; then with
    export's 0/1 specialization. A module ``bridge.fast`` certifies (no Python line of its
    forward reads a size) is exported statically instead, unless ``fast`` is off
    (``Config.fast_capture``)."""
    if not isinstance(module, nn.Module):
        raise SpecError(f"expected a torch.nn.Module, got {type(module).__name__}")
    params = params_of(getattr(module, "forward", module))
    try:
        slots = bind_slots(params, tuple(args), dict(kwargs or {}))
    except ArgumentError as err:
        raise SpecError(f"the example call does not bind to {type(module).__name__}.forward: "
                        f"{err}") from None
    names, examples, consts = [], [], []
    for name, ex in slots.items():
        if isinstance(ex, torch.Tensor):
            if ex.layout is not torch.strided:
                raise UnsupportedOp(f"input {len(names)} '{name}': layout {ex.layout} "
                                    f"unsupported (strided tensors only)")
            names.append(name)
            examples.append(ex)
        elif isinstance(ex, SIMPLE):
            consts.append((name, ex))
        else:
            raise SpecError(f"example argument '{name}' is {type(ex).__name__}: tensors, and "
                            f"None, bool, int, float or str as constants of the trace")
    ranks = [ex.dim() for ex in examples]
    auto_ = dynamic is True or isinstance(dynamic, Auto) or \
        (isinstance(dynamic, str) and dynamic == "auto")
    if auto_:
        declared = normalize_dynamic(dynamic.names if isinstance(dynamic, Auto) else {},
                                     names, ranks)
        fixed = dynamic.fixed if isinstance(dynamic, Auto) else frozenset()
        spec = {i: dict.fromkeys((k for k in range(r) if (i, k) not in fixed), "")
                for i, r in enumerate(ranks)}   # named below
        declared_names = frozenset(n for axes in declared.values() for n in axes.values())
    else:
        spec = normalize_dynamic(dynamic, names, ranks)
        declared_names = frozenset(n for axes in spec.values() for n in axes.values())
    widen = {(i, k) for i, axes in spec.items() for k in axes if examples[i].shape[k] == 1}
    call = (params, slots, len(args), names)
    oblivious = True
    path = _fast(module, examples, call, spec, widen) if fast else "export: fast path off"
    if isinstance(path, tuple):   # certified: exported statically, the solver generalizes
        ep, path = path
        symbolic = tuple(frozenset(spec.get(i, {})) for i in range(len(examples)))
    else:
        try:   # size-oblivious: the general program; its ranges are the code's own guards
            ep, symbolic = _export(module, examples, call, spec, widen, oblivious=True)
            if any(k not in symbolic[i] for i, k in widen):   # the code fixes a widened axis
                raise SpecError("a widened axis was specialized")
            if widen and _branches_apart(ep, examples):   # the example's own sizes take the
                try:   # other side of a branch the widened ones took: traced as they are
                    ep, symbolic = _export(module, examples, call, spec, set(), oblivious=True)
                    widen = set()
                except DLError:   # the widened program stands; the example runs a variant
                    pass
        except DLError:   # traced as given, with export's 0/1 specialization (ranges from 2)
            widen, oblivious = set(), False
            ep, symbolic = _export(module, examples, call, spec, widen, oblivious=False)
    sizes = [n.meta["val"].shape for n in _user_inputs(ep)]
    first: dict[str, tuple[int, int]] = {}   # export symbol -> the first input axis it sizes
    ties, derived = [], []
    for i, shape in enumerate(sizes):
        for k in sorted(symbolic[i]) if path != "fast" else ():   # static: no symbols
            j = first.setdefault(str(shape[k]), (i, k))
            if j != (i, k):
                ties.append((j, (i, k)))
            elif not shape[k].node.expr.is_Symbol:
                derived.append(((i, k), shape[k].node.expr))
    derived = [(ax, str(e), tuple((str(s), first[str(s)]) for s in sorted(e.free_symbols, key=str)))
               for ax, e in derived if all(str(s) in first for s in e.free_symbols)]
    if auto_:
        groups = {(i, k): first.get(str(sizes[i][k]), (i, k)) if k in symbolic[i] else (i, k)
                  for i, r in enumerate(ranks) for k in range(r)}
        spec = {i: {k: n for k, n in axes.items() if k in spec[i]}
                for i, axes in _auto_names(names, examples, declared, groups).items()}
    pins = tuple((i, k, int(examples[i].shape[k])) for i, axes in spec.items() for k in axes
                 if k not in symbolic[i])
    signature = CallSignature(params, tuple(slots), tuple(consts), len(args),
                              _out_spec(ep))
    return Captured(ep, tuple(names), tuple(examples), spec, pins, bool(widen), oblivious,
                    declared_names, signature, tuple(ties), first,
                    dynamic if isinstance(dynamic, Auto) else Auto() if auto_ else None, path,
                    tuple(derived))


def derived_apart(derived: tuple, shapes: Sequence[Sequence[int]]) -> frozenset:
    """The entries of ``Captured.derived`` whose axis differs from export's expression at these
    input ``shapes``: the call is on another side of the code than the trace."""
    import sympy

    out = []
    for (i, k), expr, syms in derived:
        value = sympy.sympify(expr).xreplace({sympy.Symbol(s): shapes[j][m]
                                              for s, (j, m) in syms})
        if value.is_Integer and int(value) != shapes[i][k]:
            out.append(((i, k), expr, syms))
    return frozenset(out)


def _fast(module: nn.Module, examples: Sequence[torch.Tensor], call: tuple, spec: dict,
          widen: set) -> tuple[Any, str] | str:
    """``(static export, "fast")`` where ``bridge.fast`` certifies the module (no Python line
    of its forward reads a size, so DLCB's solver generalizes a static trace soundly); else
    ``"export: <why not>"``."""
    from . import fast

    if not any(spec.values()):
        return "export: static"
    why = fast.certify(module)
    if why is None:
        try:
            ep, _ = _export(module, examples, call, {}, widen, oblivious=True)
        except DLError as err:
            return f"export: the static export failed ({type(err).__name__})"
        why = fast.check_graph(ep)
        if why is None:
            return ep, "fast"
    return f"export: {why}"


_TEXT_INPUT = re.compile(r"(^|_)(input_ids|ids|attention_mask|mask|token_type_ids|position_ids|"
                         r"labels)$")
_AXES = {1: ("L",), 2: ("N", "F"), 3: ("N", "C", "L"), 4: ("N", "C", "H", "W"),
         5: ("N", "C", "D", "H", "W")}


def _axis_words(name: str, ex: torch.Tensor) -> list[str]:
    """Readable dim names for an input's axes, in the words its kind of model uses: token ids
    and masks ``batch, seq`` (``decoder_seq`` for a decoder's), embeddings ``batch, seq,
    hidden``, images and other arrays torch's layout letters (``N, C, H, W``; ``N, C, L``;
    ``N, C, D, H, W``); past rank 5, ``{input}_{axis}``."""
    r = ex.dim()
    seq = "decoder_seq" if name.startswith("decoder_") else "seq"
    if r == 2 and (not ex.is_floating_point() or _TEXT_INPUT.search(name)):
        return ["batch", seq]
    if r == 3 and name.endswith(("embeds", "hidden_states")):
        return ["batch", seq, "hidden"]
    return list(_AXES.get(r, [f"{name}_{k}" for k in range(r)]))


def _auto_names(names: Sequence[str], examples: Sequence[torch.Tensor],
                declared: Mapping[int, Mapping[int, str]],
                groups: Mapping[tuple[int, int], tuple[int, int]]) -> dict[int, dict[int, str]]:
    """Every input axis named. ``groups`` maps an axis to the first axis of its export symbol
    (axes export tied by a guard of the code: one dim, one name); a group takes a declared name
    of one of its axes, else its first axis's ``_axis_words``, made unique (a word already
    taken becomes ``{word}_{input}``), so only the program's constraints tie two groups."""
    named: dict[tuple[int, int], str] = {}
    for i, axes in declared.items():
        for k, n in axes.items():
            named.setdefault(groups[i, k], n)
    taken = set(named.values())
    spec: dict[int, dict[int, str]] = {i: {} for i in range(len(names))}
    for i, (name, ex) in enumerate(zip(names, examples)):
        for k, word in enumerate(_axis_words(name, ex)):
            head = groups[i, k]
            if head not in named:
                candidate = next((c for c in (word, f"{word}_{name}", f"{name}_{k}")
                                  if c not in taken and c.isidentifier() and
                                  not c.startswith("_")), f"d{i}_{k}")
                named[head] = candidate
                taken.add(candidate)
            spec[i][k] = declared.get(i, {}).get(k, named[head])
    return spec


def _out_spec(ep) -> Any:
    """The output's pytree spec; None for one tensor."""
    from torch.utils._pytree import LeafSpec

    spec = ep.call_spec.out_spec
    return None if spec is None or isinstance(spec, LeafSpec) or \
        getattr(spec, "type", object) is None else spec


def _export(module: nn.Module, examples: Sequence[torch.Tensor], call: tuple, spec: dict,
            widen: set, oblivious: bool):
    """``torch.export`` of the example call ``call`` (``(params, slots, number passed by
    position, tensor slot names)``) with the ``spec`` axes ``Dim.AUTO`` and the ``widen`` axes
    traced at 2, without duck sizing (axes of equal example size are not assumed equal: only the
    code's guards tie them); ``oblivious``: with ``backed_size_oblivious`` (a size is not
    assumed >= 2, so a symbol's range is what the code's guards imply). Export's own logging is
    held back and kept on the error it raises. The program and, per user input, the axes export
    kept symbolic."""
    import torch.fx.experimental._config as fx_config
    from torch.export import Dim, export

    params, slots, n_pos, tensor_names = call
    home = next((t.device for t in (*module.parameters(), *module.buffers())), None) \
        if isinstance(module, nn.Module) else None
    values, shapes = dict(slots), {}
    for i, (name, ex) in enumerate(zip(tensor_names, examples)):
        shape = [2 if (i, k) in widen else int(n) for k, n in enumerate(ex.shape)]
        t = ex.detach() if list(ex.shape) == shape else ex.new_zeros(shape)
        if home is not None and t.device != home:   # traced where the parameters are: the
            t = t.new_zeros(t.shape, device=home)   # compiled module keeps its own copies
        values[name] = t
        shapes[name] = {k: Dim.AUTO for k in spec.get(i, {})} or None
    order = list(slots)
    args = tuple(values[n] for n in order[:n_pos])
    kwargs = {n: values[n] for n in order[n_pos:]}
    try:
        with _quiet() as said, fx_config.patch(backed_size_oblivious=oblivious,
                                               use_duck_shape=False):
            ep = export(module, args, kwargs or None,
                        dynamic_shapes=_export_shapes(params, order, n_pos, shapes),
                        strict=False)
    except Exception as err:   # export raises many types: sort them into dl errors
        raise _refusal(module, err, said.getvalue()) from None
    symbolic = tuple(frozenset(k for k, sz in enumerate(n.meta["val"].shape) if is_symbolic(sz))
                     for n in _user_inputs(ep))
    return ep, symbolic


def _export_shapes(params, order: Sequence[str], n_pos: int, shapes: Mapping[str, Any]) -> Any:
    """Export's ``dynamic_shapes`` for the example call: by parameter name, a ``*args``
    parameter's as one tuple and a ``**kwargs`` parameter's as one dict (a tuple by position for a
    module whose parameters cannot be read)."""
    if params is None:
        return tuple(shapes.get(n) for n in order)
    named = {p.name for p in params if p.kind not in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD)}
    var = next((p.name for p in params if p.kind == _P.VAR_POSITIONAL), None)
    var_kw = next((p.name for p in params if p.kind == _P.VAR_KEYWORD), None)
    out: dict[str, Any] = {}
    for j, n in enumerate(order):
        if n in named:
            out[n] = shapes.get(n)
        elif j < n_pos:
            out[var] = (*out.get(var, ()), shapes.get(n))
        else:
            out.setdefault(var_kw, {})[n] = shapes.get(n)
    return out


@contextlib.contextmanager
def _quiet():
    """Export's log records and prints while tracing, held in a buffer (kept on a refusal)
    instead of the console."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(levelname).1s %(name)s: %(message)s"))
    loggers = [logging.getLogger(n) for n in ("torch", "torch._subclasses.fake_tensor")]
    saved = [(lg, lg.handlers[:], lg.propagate, lg.level) for lg in loggers]
    try:
        for lg in loggers:
            lg.handlers, lg.propagate = [handler], False
        loggers[1].setLevel(logging.CRITICAL)   # an op's error is raised, not also logged
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            yield buf
    finally:
        for lg, handlers, propagate, level in saved:
            lg.handlers, lg.propagate = handlers, propagate
            lg.setLevel(level)


def is_symbolic(size: Any) -> bool:
    """A size export left symbolic (a specialized one may be a SymInt of known value)."""
    return isinstance(size, torch.SymInt) and size.node.maybe_as_int() is None


def _branches_apart(ep, examples: Sequence[torch.Tensor]) -> bool:
    """Whether a guard of the module's own code (not torch's) that the trace recorded is false at
    the examples' own sizes: a size-1 axis traced at 2 took a branch the example does not (a
    decode step's one new token traced as two makes ``new + past > mask length`` true and pads
    the mask; at 1 it is false)."""
    import sympy

    sizes: dict = {}
    for n, ex in zip(_user_inputs(ep), examples):
        for sz, actual in zip(n.meta["val"].shape, ex.shape):
            if is_symbolic(sz) and isinstance(sz.node.expr, sympy.Symbol):
                sizes[sz.node.expr] = int(actual)
    env = next((sz.node.shape_env for n in _user_inputs(ep)
                for sz in n.meta["val"].shape if isinstance(sz, torch.SymInt)), None)
    if env is None:
        return False
    for guard in env.guards:
        at = getattr(getattr(guard, "sloc", None), "framework_loc", None)
        if not hasattr(at, "filename") or at.filename.startswith(TORCH_DIR):
            continue
        if env.replace(guard.expr).xreplace(sizes) is sympy.false:
            return True
    return False


def _user_inputs(ep) -> list:
    """The exported graph's placeholders of the user's tensor inputs, in order."""
    from torch.export.graph_signature import InputKind, TensorArgument

    names = {s.arg.name for s in ep.graph_signature.input_specs
             if s.kind is InputKind.USER_INPUT and isinstance(s.arg, TensorArgument)}
    return [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in names]


def _refusal(module: nn.Module, err: Exception, said: str = "") -> DLError:
    """A dl error for an exception export raised. Capture's own limits (data-dependent control
    flow, untraceable Python) are ``UnsupportedOp``; an error a torch op raised while tracing is
    the program's own (eager raises it too): ``DTypeError`` or ``ShapeError`` with torch's
    message, located at the innermost user frame. ``said``: what export logged and printed
    while tracing, kept as the error's ``export_log``."""
    from torch._dynamo.exc import Unsupported, UserError
    from torch.fx.experimental import symbolic_shapes as ss

    if isinstance(err, DLError):
        err.export_log = said
        return err
    first = next((ln for ln in str(err).splitlines() if ln.strip()), "")
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith((TORCH_DIR, _OWN_DIR, _STDLIB_DIR, _API)) and
              f.filename != "<string>"]   # code generated by exec (torch's pytree lambdas)
    where = f"{source_file(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}: " \
        f"{(frames[-1].line or '').strip()}" if frames else ""
    what = f"{type(err).__name__}: {first}"
    limits = (Unsupported, UserError, ss.GuardOnDataDependentSymNode,
              getattr(ss, "PendingUnbackedSymbolNotFound", Unsupported))
    if "which is not a known type" in first:   # a container export cannot flatten
        what = first.split(". If this type")[0]
        out: DLError = UnsupportedOp(f"torch.export cannot capture {type(module).__name__}'s "
                                     f"inputs or outputs: {what} (a transformers model returns "
                                     f"its cache with use_cache=True: pass use_cache=False)")
    elif isinstance(err, limits) or "data-dependent" in first or not isinstance(
            err, (RuntimeError, IndexError, ValueError, TypeError, NotImplementedError)):
        out = UnsupportedOp(f"torch.export cannot capture {type(module).__name__}: "
                                     f"{what} (torch.compile(model, backend='dlcb') breaks the "
                                     f"graph there and compiles the pieces)")
    elif _DTYPE_WORDS.search(first):
        out = DTypeError(f"torch rejects the program: {what}")
    else:
        out = ShapeError(f"torch rejects the program: {what}")
    out.export_log = said
    return out.locate("capture", "", where) if where else out


# --- the dynamic spec ------------------------------------------------------------------------------

_FORM = ("expected dynamic='auto' (the default; True is the same), False (static), "
         "{input: {axis: dim name}} with input a position or a name, e.g. {0: {0: 'N'}} or "
         "{'x': {0: 'N', 2: 'H'}}, or dl.auto({'x': {0: 'N'}}) (those named, the rest 'auto')")


def normalize_dynamic(dynamic: Any, names: Sequence[str], ranks: Sequence[int]
                      ) -> dict[int, dict[int, str]]:
    """``dynamic`` as {input position: {non-negative axis: dim name}}, or ``SpecError``."""
    if dynamic is False or dynamic is None:
        return {}
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
