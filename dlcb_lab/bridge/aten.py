"""PyTorch bridge, lowering (paper §2.1): an exported ATen graph -> DLCB IR.

One table, ``ATEN``, keyed by ATen overload packet (``aten.add`` serves ``add.Tensor`` and
``add.Scalar``): the opset of ``torch.export``'s default IR, documented by PyTorch
(native_functions.yaml), instead of the open set of torch functions, methods, operators and
modules a tracer of Python meets. A node's ``args`` and ``kwargs`` are bound against the
lowering's signature, which follows the ATen schema (``self`` -> ``input``); a mismatch or a value
the lowering does not support raises ``UnsupportedOp``. In-place overloads (``relu_``,
``add_``) are functionalized: later uses of the mutated value, and of its aliases, see the
result. Sizes read with ``aten.sym_size`` are dimension expressions, so ``x.view(x.size(0), -1)``
stays symbolic. Every error names the node, its ATen target and the user's source line; every
unsupported node is listed in one error.
"""

from __future__ import annotations

import inspect
import math
import operator
import warnings
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx
from torch._higher_order_ops.wrap import wrap_with_autocast

from ..dims import Expr, Lit, Var, as_expr, lit
from ..dims.expr import flat_quotients, rounded_up
from ..errors import DLError, DTypeError, ShapeError, UnsupportedOp
from ..ir.graph import Graph, Value
from ..ir.ops.eager import Operand
from . import aten_ext
from . import indexing
from . import nn as nn_lowerings
from . import tensor as tensor_lowerings
from .capture import TORCH_DIR, Captured, input_dims, is_symbolic, source_file, user_frame
from .common import (Cx, DimPredicate, NoDimForm, NoFallback, Unavailable, find, tensor_arg,
                     wrap_axis)

_L = {**tensor_lowerings.LOWERINGS, **nn_lowerings.LOWERINGS, **indexing.LOWERINGS}


# --- ATen adapters: where an ATen schema differs from the torch signature a lowering follows --------

def _a_to(cx, input, *args, dtype=None, layout=None, device=None, pin_memory=None,
          non_blocking=False, copy=False, memory_format=None):
    """``to.dtype``, ``to.dtype_layout``, ``to.device`` (same device only), ``to.other``,
    ``_to_copy``: a dtype conversion."""
    rest = list(args)   # the device is the backend's: a device argument is not a conversion
    if rest and isinstance(rest[0], (torch.device, str)) and not isinstance(rest[0], bool):
        rest.pop(0)   # to.device(self, device, dtype, non_blocking, copy, memory_format)
    if rest and isinstance(rest[0], Value):
        dtype = rest.pop(0).dtype   # to.other
    elif rest and isinstance(rest[0], torch.dtype):
        dtype = rest.pop(0)
    flags = [a for a in rest if isinstance(a, bool)]
    copy = flags[1] if len(flags) > 1 else copy
    x = tensor_arg(input)
    if layout not in (None, torch.strided):
        raise UnsupportedOp(f"to(layout={layout}) (strided tensors only)")
    tensor_lowerings.row_major(memory_format or torch.preserve_format)
    dtype = dtype or x.dtype
    return cx.apply("to", x, dtype=dtype) if copy else cx.cast(x, dtype)


def _a_to_copy(cx, input, *, dtype=None, layout=None, device=None, pin_memory=None,
               non_blocking=False, memory_format=None):
    return _a_to(cx, input, dtype=dtype, layout=layout, device=device, copy=True,
                 memory_format=memory_format)


def _a_identity(cx, input, *args, **kwargs):
    """``clone``, ``alias``, ``detach``, ``lift_fresh_copy``: the value (values are immutable in
    the IR; an in-place op on it is functionalized)."""
    return tensor_arg(input)


def _a_expand(cx, input, size, *, implicit=False):
    return _L["expand"](cx, input, tuple(size))


def _a_view(cx, input, size):
    if isinstance(size, torch.dtype):
        raise UnsupportedOp("view(dtype) (a bit cast) is unsupported")
    return _L["reshape"](cx, input, size)


def _a_softmax(log: bool) -> Callable:
    def lowering(cx, input, dim, dtype=None):
        return _L["log_softmax" if log else "softmax"](cx, input, dim, dtype=dtype)
    return lowering


def _a_batch_norm(cx, input, weight, bias, running_mean, running_var, training, momentum, eps,
                  cudnn_enabled=True):
    return _L["batch_norm"](cx, input, running_mean, running_var, weight, bias, training,
                            momentum, eps)


def _a_layer_norm(cx, input, normalized_shape, weight=None, bias=None, eps=1e-5,
                  cudnn_enable=True):
    return _L["layer_norm"](cx, input, normalized_shape, weight, bias, eps)


def _a_embedding(cx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return _L["embedding"](cx, indices, weight, None if padding_idx == -1 else padding_idx)


def _a_slice(cx, input, dim=0, start=None, end=None, step=1):
    x = tensor_arg(input)
    return nn_lowerings.slice_axis(cx, x, wrap_axis(dim, x.rank), start, end, step)


def _a_select(cx, input, dim, index):
    x = tensor_arg(input)
    a = wrap_axis(dim, x.rank)
    return _L["getitem"](cx, x, (slice(None),) * a + (index,))


def _a_unflatten(cx, input, dim, sizes):
    """Axis ``dim`` split into ``sizes`` (one may be -1): a reshape."""
    x = tensor_arg(input)
    a = wrap_axis(dim, x.rank)
    dims = list(cx.g.dims(x))
    return _L["reshape"](cx, x, (*dims[:a], *sizes, *dims[a + 1:]))


def _a_constant_pad_nd(cx, input, pad, value=0):
    return _L["pad"](cx, input, pad, "constant", value)


def _a_split(cx, input, split_size, dim=0):
    return _L["split"](cx, input, split_size, dim)


def _a_sum(cx, input, dim=None, keepdim=False, *, dtype=None):
    return _L["sum"](cx, input, dim, keepdim, dtype=dtype)


def _a_mean(cx, input, dim=None, keepdim=False, *, dtype=None):
    return _L["mean"](cx, input, dim, keepdim, dtype=dtype)


def _a_dropout(cx, input, p, train):
    return _L["dropout"](cx, input, p, train)


def _a_rsub(cx, input, other, alpha=1):
    """``other - alpha * input`` (``2.0 - x``)."""
    return _L["sub"](cx, other, input, alpha=alpha)


def _a_reciprocal(cx, input):
    """``1 / x`` (``1.0 / x``; integers promote to the default float dtype, as torch does)."""
    return _L["div"](cx, 1.0, input)


def _same(*names: str) -> dict[str, Callable]:
    return {n: _L[n] for n in names}


ATEN: dict[str, Callable] = {
    **_same("relu", "neg", "abs", "exp", "sigmoid", "tanh", "logical_not", "log", "sqrt", "rsqrt",
            "erf", "trunc", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
            "logical_and", "logical_or", "add", "sub", "div", "where", "bitwise_not",
            "bitwise_and", "bitwise_or", "type_as", "reshape", "flatten", "permute",
            "transpose", "amax", "contiguous",
            "conv2d", "linear", "matmul", "bmm", "mm", "addmm",
            "silu", "hardswish", "hardsigmoid", "relu6", "hardtanh", "gelu", "clamp",
            "max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d",
            "narrow", "cat", "stack", "unsqueeze", "squeeze", "split_with_sizes", "chunk",
            "unbind", "pad", "expand_as", "roll", "t", "index_select", "gather", "unfold"),
    "true_divide": _L["div"], "clip": _L["clamp"], "concat": _L["cat"], "concatenate": _L["cat"],
    "__and__": _L["bitwise_and"], "__or__": _L["bitwise_or"], "__invert__": _L["bitwise_not"],
    "scaled_dot_product_attention": _L["sdpa"],
    "to": _a_to, "_to_copy": _a_to_copy, "expand": _a_expand, "view": _a_view,
    "_unsafe_view": _a_view, "softmax": _a_softmax(False), "log_softmax": _a_softmax(True),
    "batch_norm": _a_batch_norm, "layer_norm": _a_layer_norm, "embedding": _a_embedding,
    "slice": _a_slice, "select": _a_select, "unflatten": _a_unflatten, "constant_pad_nd": _a_constant_pad_nd,
    "rsub": _a_rsub, "reciprocal": _a_reciprocal, "split": _a_split, "sum": _a_sum, "mean": _a_mean, "dropout": _a_dropout,
    **{n: _a_identity for n in ("clone", "alias", "detach", "detach_", "lift_fresh_copy",
                                "lift_fresh")},
}
"""ATen overload packet name -> lowering ``fn(cx, *args, **kwargs)`` in the ATen schema's order."""

for _name, _fn in aten_ext.ATEN.items():
    ATEN.setdefault(_name, _fn)

_NO_OPS = {"_assert_tensor_metadata", "sym_constrain_range_for_size", "sym_constrain_range",
           "_assert_async"}
"""ATen nodes that compute nothing the compiled program needs (export's metadata checks)."""

_SIZE_FNS = {"sym_size", "sym_numel"}
_NEW_FACTORIES = {"new_zeros", "new_ones", "new_full", "new_empty"}
_SIZE_EXTREMA = {torch.sym_max, torch.sym_min}
_SIZE_ARITH = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
               operator.neg, *_SIZE_EXTREMA}
_SIZE_ROUND = {math.ceil: lambda r: -((-r.num) // r.den), math.floor: lambda r: r.num // r.den}
"""``ceil``/``floor`` of a size ratio (``SizeRatio``): a size again, by floor division."""


STORAGE_OFFSET = object()
"""``sym_storage_offset`` of a tensor: functional IR values have no storage offset; export's
runtime assertion that it is non-negative holds."""


class SizeRatio:
    """``a / b`` of sizes (``operator.truediv``, a SymFloat in export's graph), kept exact until
    ``math.ceil`` or ``math.floor`` makes it a size again (``ceil(H / p) * p``: MobileViT pads
    each side to a multiple of its patch); any other use is refused by name."""

    __slots__ = ("num", "den")

    def __init__(self, num, den):
        self.num, self.den = num, den

    def __repr__(self) -> str:
        return f"({self.num}) / ({self.den})"


class ScaledSize:
    """``float(d) * scale`` of a size ``d`` (``torch.sym_float``, a SymFloat in export's graph,
    then one multiplication by a Python number: F.interpolate's recomputed output size), kept
    until ``math.trunc`` or ``math.floor`` makes it a size again (``aten_ext.scaled_size``: the
    exact integer expression of torch's double product, floored); any other use is refused by
    name."""

    __slots__ = ("size", "scale")

    def __init__(self, size: Expr, scale: float | None = None):
        self.size, self.scale = size, scale

    def __mul__(self, other: Any) -> "ScaledSize":
        if self.scale is not None or isinstance(other, bool) or \
                not isinstance(other, (int, float)):
            raise UnsupportedOp(f"{self!r} times {other!r} (a size as a float lowers times one "
                                f"Python number, under math.trunc or math.floor)")
        return ScaledSize(self.size, float(other))

    __rmul__ = __mul__

    def rounded(self, cx: Cx) -> Expr:
        scale = 1.0 if self.scale is None else self.scale
        if not scale > 0:
            raise UnsupportedOp(f"{self!r} rounded to a size (a positive scale lowers)")
        return aten_ext.scaled_size(cx, self.size, scale, "a size times a float, rounded to a size")

    def __repr__(self) -> str:
        return f"float({self.size!r})" + ("" if self.scale is None else f" * {self.scale!r}")


_SCALED_USES = {operator.mul, math.trunc, math.floor}
"""What a ``ScaledSize`` lowers under (``mul`` once)."""


_SIZE_CMP = {operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=",
             operator.gt: ">", operator.ge: ">="}
_SIZE_LOGIC = {operator.or_: DimPredicate.either, operator.and_: DimPredicate.both,
               torch.sym_not: lambda p: p.negate() if isinstance(p, DimPredicate) else not p}
"""Logic on size predicates (export's runtime assertions on unbacked sizes)."""


# --- what a node is ---------------------------------------------------------------------------------

def _packet(n: fx.Node) -> str | None:
    """The ATen packet name of a node's target (None for a non-ATen target)."""
    t = n.target
    if isinstance(t, torch._ops.OpOverload) and t.namespace == "aten":
        return t.overloadpacket.__name__
    return None


def describe(n: fx.Node) -> str:
    t = n.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t.namespace}.{t._opname}.{t._overloadname}"
    return getattr(t, "__qualname__", None) or repr(t)


def where(n: fx.Node) -> str:
    """The user's source line of ``n`` (from export's stack trace), else the node's name."""
    return user_frame(n.meta.get("stack_trace")) or n.name


def lowering(n: fx.Node) -> tuple[Callable, bool] | None:
    """(lowering, in place) of an ATen node, or None when DLCB has none."""
    name = _packet(n)
    if name is None:
        return None
    if name in ATEN:
        return ATEN[name], False
    if name.endswith("_") and not name.startswith("_") and name[:-1] in ATEN:
        return ATEN[name[:-1]], True
    return None


def supported(n: fx.Node) -> bool:
    """Whether ``n`` lowers (size-level nodes, tuple access and autocast regions always do)."""
    if n.op != "call_function" or n.target in _SIZE_TARGETS or n.target is operator.getitem or \
            n.target is wrap_with_autocast:
        return True
    return _packet(n) in _SIZE_PACKETS or lowering(n) is not None


def unsupported_nodes(graph: fx.Graph, folded: set = frozenset()) -> list[str]:
    """One line per node no lowering handles (``folded`` ones aside): the node, its ATen target
    and source line."""
    return [f"  '{n.name}': {describe(n)} at {where(n)}" for n in graph.nodes
            if n not in folded and not supported(n)]


def _fold(graph: fx.Graph, tensors: dict, inputs: set) -> dict:
    """Nodes whose value depends on no user input, computed now by PyTorch on the parameters,
    buffers and constants (``tensors``): masks and tables built from literal sizes, in-place
    writes into them included (eager semantics, on tensors no caller sees). Not folded: random
    ops, and in-place ops on a parameter or buffer (the module's own tensor)."""
    live, out = set(inputs), {}
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        deps = list(n.all_input_nodes)
        stand_in = {}
        if _packet(n) in _NEW_FACTORIES and deps[:1] == [n.args[0]] and \
                n.args[0] not in deps[1:]:   # x.new_zeros(size): x gives only dtype and device
            val = n.args[0].meta.get("val")
            if isinstance(val, torch.Tensor):
                stand_in[n.args[0]] = torch.empty(0, dtype=val.dtype)
                deps = deps[1:]
        tags = getattr(n.target, "tags", ())
        mutates_param = _mutates(n) and isinstance(n.args[0], fx.Node) and n.args[0] in tensors
        if any(a in live or (a not in tensors and a not in out) for a in deps) or \
                torch.Tag.nondeterministic_seeded in tags or mutates_param or not deps and \
                not stand_in and _packet(n) is None:
            live.add(n)
            continue
        args, kwargs = fx.node.map_arg((n.args, n.kwargs),
                                       lambda a: stand_in.get(a, out.get(a, tensors.get(a))))
        with torch.no_grad():
            out[n] = n.target(*args, **kwargs)
    return out


# --- graph lowering --------------------------------------------------------------------------------

def lower_to_ir(cap: Captured, fallback: bool = False) -> Graph:
    """Build a DLCB IR graph from a captured module: the user inputs (named as ``forward``'s
    parameters, dims from the dynamic spec), then parameters, buffers and constants as graph
    constants of static shape, created when first used. ``fallback``: a node without a lowering
    (or whose lowering refuses its arguments) becomes an ``eager`` op, run by PyTorch; else one
    ``UnsupportedOp`` lists every such node."""
    from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

    ep = cap.program
    g = Graph()
    env: dict[fx.Node, Any] = {}
    symbols: dict[Any, Any] = {}   # export's size symbols -> graph dims
    nodes = {n.name: n for n in cap.graph.nodes if n.op == "placeholder"}
    consts: dict[fx.Node, tuple[str, torch.Tensor]] = {}
    user = 0
    for s in ep.graph_signature.input_specs:
        n = nodes.get(s.arg.name)
        if s.kind is InputKind.USER_INPUT and isinstance(s.arg, ConstantArgument):
            if n is not None:   # a non-tensor argument: a constant of the trace
                env[n] = s.arg.value
        elif s.kind is InputKind.USER_INPUT:
            ex = cap.examples[user]
            env[n] = g.input(cap.names[user], input_dims(ex, cap.spec.get(user, {})), ex.dtype)
            g.examples.update((d.name, int(size)) for d, size in zip(g.dims(env[n]), ex.shape)
                              if not isinstance(d, Lit))
            for s_, d in zip(n.meta["val"].shape, g.dims(env[n])):
                if is_symbolic(s_) and s_.node.expr.is_Symbol:
                    symbols.setdefault(s_.node.expr, d)
            user += 1
        elif s.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            t = ep.state_dict[s.target] if s.target in ep.state_dict else ep.constants[s.target]
            consts[n] = (s.target, t)
        else:
            raise UnsupportedOp(f"module input '{s.arg.name}' of kind {s.kind.name}")
    _input_relations(g, cap, env, symbols)
    for spec in ep.graph_signature.output_specs:
        if spec.kind is not OutputKind.USER_OUTPUT:
            raise UnsupportedOp(f"the module mutates {spec.kind.name.lower().replace('_', ' ')} "
                                f"'{spec.target}' (in training mode?): compiled modules are "
                                f"functional")
    folded = _fold(cap.graph, {n: t for n, (_, t) in consts.items()}, set(env))
    bad = unsupported_nodes(cap.graph, set(folded))
    if bad and not fallback:
        raise UnsupportedOp(f"{len(bad)} ATen node{'s' * (len(bad) > 1)} not supported by DLCB "
                            f"IR:\n" + "\n".join(bad))
    for n, val in folded.items():   # tensors: graph constants on first use
        if isinstance(val, torch.Tensor):
            consts[n] = (n.name, val)
        else:
            env[n] = val
    spell = Spellings(g)
    late = [p for p in cap.pins if p[2] > 1]   # pinned after the graph's own constraints
    _pin(g, cap, [p for p in cap.pins if p[2] <= 1])   # before: ops read a 0 or 1 as torch did
    for n in cap.graph.nodes:
        if n.op == "placeholder" or n in folded:
            continue
        if n.op == "get_attr" and isinstance(getattr(ep.graph_module, n.target, None),
                                             fx.GraphModule):
            env[n] = getattr(ep.graph_module, n.target)   # a region's graph (wrap_with_autocast)
            continue
        try:
            try:
                _lower_node(g, n, env, consts, spell)
            except UnsupportedOp as err:
                if not fallback or n.op != "call_function" or _mutates(n) or \
                        isinstance(err, NoFallback):
                    raise
                try:
                    if n.target is operator.getitem:   # an item the producer's lowering left
                        env[n] = _eager(g, n.args[0], env, consts, symbols, str(err.msg),
                                        only=n.args[1])
                    else:
                        env[n] = _eager(g, n, env, consts, symbols, str(err.msg))
                except NoDimForm as no:   # the lowering's refusal says more
                    raise NoDimForm(err.msg, no.symbols) from None
        except DLError as err:
            raise err.locate(describe(n), n.name, where(n)) from None
    _pin(g, cap, late)
    _ranges(g, cap, symbols)
    _guards(g, cap, symbols)
    return g


def _input_relations(g: Graph, cap: Captured, env: dict, symbols: dict) -> None:
    """What export knows of the inputs' sizes, as constraints: axes export found equal (one
    symbol) and axes it derived (``2*s0``). Their ranges: ``_ranges``."""
    where = "torch.export"
    for n in cap.graph.nodes:
        v = env.get(n)
        if n.op != "placeholder" or not isinstance(v, Value):
            continue
        for k, (sz, d) in enumerate(zip(n.meta["val"].shape, g.dims(v))):
            if not is_symbolic(sz) or symbols.get(sz.node.expr) is d:
                continue
            g.constrain(d, to_dim(sz, symbols, f"input '{v.name}' axis {k}"), where,
                        f"input '{v.name}' axis {k} is {sz} in the traced program")


GUARD_NOTE = "the traced program holds where this guard of the module's code holds"
"""In the message of a failed guard check: ``CompiledModule`` then compiles a variant traced at
the call's sizes (the guard's other side)."""


def _ranges(g: Graph, cap: Captured, symbols: dict) -> None:
    """Each export symbol's range as host checks, after the graph's own requirements (so a slice
    out of its axis is reported as the slice, not as the range it implies), where the trace had
    export's 0/1 specialization (ranges from 2). A size-oblivious trace's ranges also hold what
    torch's own shape functions guarded (the fake convolution's memory-format choice asks
    ``N > 1`` and ``H // 32 > 1``: ConvNeXt's range was N >= 2, H >= 64, and batch 1 compiled a
    variant); there the code's own guards are the ranges (``_guards``)."""
    from torch.utils._sympy.numbers import int_oo

    if cap.oblivious:
        return
    where = "torch.export"
    for sym, vr in cap.program.range_constraints.items():
        d = symbols.get(sym)
        if d is None:
            continue
        lo, hi = int(vr.lower), vr.upper
        if lo > 0:
            g.require(d - lo, where, f"{d!r} >= {lo} ({sym} in {vr}): {GUARD_NOTE}", "")
        if hi is not int_oo and hi != float("inf"):
            g.require(int(hi) - d, where, f"{d!r} <= {int(hi)} ({sym} in {vr}): {GUARD_NOTE}",
                      "")


def _pin(g: Graph, cap: Captured, pins) -> None:
    """The axes export specialized, fixed to their example sizes; a requirement the sizes now
    fail is a ``ShapeError`` here (the lowering recorded it while the axis was symbolic)."""
    for i, k, size in pins:
        g.constrain(g.dims(g.inputs[i])[k], lit(size), "torch.export",
                    f"input {i} '{cap.names[i]}' axis {k}: the traced code specializes it (a "
                    f"branch or check on its value)")
    for e, prov in g.requirements if pins else ():
        e = g.solver.resolve(e)
        if isinstance(e, Lit) and e.value < 0:
            raise ShapeError(f"{prov}: fails for the specialized sizes ({e.value} < 0)")


def _mutates(n: fx.Node) -> bool:
    """An in-place or out= overload: eager would write a buffer the compiled program owns."""
    schema = getattr(n.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _eager(g: Graph, n: fx.Node, env: dict, consts: dict, symbols: dict, reason: str,
           only: int | None = None) -> Any:
    """``n`` as an ``eager`` op: its tensor arguments operands (parameters and buffers too), the
    rest a template; its result shape export's, in graph dims. An op with several results is a
    tuple (or list) of eager ops, one per tensor result, each taking its ``item``; a
    nondeterministic one stays an ``UnsupportedOp`` (two calls would draw different values), as
    does a result whose size export could not derive from the inputs' (data-dependent:
    ``nonzero``) or that is no tensor. ``only``: just that result (one the node's lowering left
    uncomputed, such as the indices of ``max(x, dim)``)."""
    if not isinstance(n.target, torch._ops.OpOverload) or n.target.namespace != "aten":
        raise UnsupportedOp(f"{reason} (and no ATen operator to run eagerly in its place)")
    val = n.meta.get("val")
    several = isinstance(val, (tuple, list)) and bool(val) and \
        all(isinstance(x, torch.Tensor) or x is None for x in val)
    if not isinstance(val, torch.Tensor) and not several:
        raise UnsupportedOp(f"{describe(n)} has no lowering and returns "
                            f"{type(val).__name__}, not tensors: it cannot run eagerly "
                            f"between compiled ops ({reason})")
    if several and only is None and _random(n):
        raise UnsupportedOp(f"{describe(n)} has no lowering and returns several random "
                            f"tensors: it cannot run eagerly once per result ({reason})")
    operands: list[Value] = []

    def template(a: Any) -> Any:
        if isinstance(a, fx.Node):
            v = _value(g, env, consts, a) if a in env or a in consts else None
            if isinstance(v, Value):
                operands.append(v)
                return Operand(len(operands) - 1)
            return v
        if isinstance(a, (tuple, list)):
            return type(a)(template(x) for x in a)
        return a

    args = template(tuple(n.args))
    kwargs = tuple((k, template(v)) for k, v in n.kwargs.items())

    def one(t: torch.Tensor, item: int | None) -> Value:
        out_shape = tuple(to_dim(s, symbols, describe(n)) for s in t.shape)
        return g.apply("eager", *operands, name=n.name if item is None else f"{n.name}_{item}",
                       where=where(n), target=describe(n), args=args, kwargs=kwargs,
                       out_shape=out_shape, dtype=t.dtype, reason=reason.splitlines()[0],
                       **({} if item is None else {"item": item}))

    if not several:
        return one(val, None)
    if only is not None:
        return one(val[only], only)
    return type(val)(one(t, j) if isinstance(t, torch.Tensor) else None
                     for j, t in enumerate(val))


def _value(g: Graph, env: dict, consts: dict, a: fx.Node) -> Any:
    """``a``'s value in the graph; a parameter, buffer or constant becomes a graph constant on
    first use."""
    if a not in env and a in consts:
        env[a] = g.constant(*consts[a])
    return env[a]


def _random(n: fx.Node) -> bool:
    """A node whose results are random: a nondeterministic op (tagged so), unless its schema's
    ``train`` flag is False in this call (``lstm``'s dropout is off in inference)."""
    if torch.Tag.nondeterministic_seeded not in getattr(n.target, "tags", ()):
        return False
    schema = getattr(n.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    if "train" in names:
        i = names.index("train")
        train = n.kwargs.get("train", n.args[i] if i < len(n.args) else True)
        return train is not False
    return True


def to_dim(size: Any, symbols: dict, what: str) -> Any:
    """A size export derived (an int, or a SymInt over the inputs' symbols) as a graph dim."""
    if not is_symbolic(size):
        return lit(int(size))
    return _sym_dim(size.node.expr, symbols, f"{what}: result size {size}")


def _sym_dim(e: Any, symbols: dict, what: str, hint: Mapping | None = None,
             taken: list | None = None) -> Any:
    """A sympy size expression over export's symbols as a graph dim. With ``hint`` (each symbol's
    traced value) and ``taken``: ``Max``/``Min`` is the argument it took at the trace, the
    requirement that it still does appended to ``taken`` (``a - b``, to be >= 0)."""
    import sympy

    def conv(e):
        if e.is_Integer:
            return lit(int(e))
        if e.is_Symbol:
            if e in symbols:
                return symbols[e]
            raise UnsupportedOp(f"{what} is data-dependent (no input dim determines it)")
        if isinstance(e, sympy.Add):
            return sum((conv(a) for a in e.args[1:]), conv(e.args[0]))
        if isinstance(e, sympy.Mul):
            return math.prod((conv(a) for a in e.args[1:]), start=conv(e.args[0]))
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            return math.prod([conv(e.base)] * int(e.exp))
        name = type(e).__name__
        if name == "FloorDiv":
            return conv(e.args[0]) // conv(e.args[1])
        if name in ("Mod", "PythonMod"):
            return conv(e.args[0]) % conv(e.args[1])
        if name in ("CeilToInt", "FloorToInt") and type(e.args[0]).__name__ == "IntTrueDiv" \
                and e.args[0].args[1].is_Integer and e.args[0].args[1] > 0:   # math.ceil(a / b)
            num, den = e.args[0].args
            return (conv(num) + (int(den) - 1) * (name == "CeilToInt")) // int(den)
        if name in ("Max", "Min") and taken is not None:
            sign = 1 if name == "Max" else -1
            args = sorted(e.args, key=lambda a: -sign * int(a.xreplace(hint)))
            top = conv(args[0])
            taken.extend(sign * (top - conv(a)) for a in args[1:])
            return top
        raise NoDimForm(f"{what} ({name}) has no DLCB dim form",
                        frozenset(str(x) for x in e.free_symbols))
    return conv(e)


def _guards(g: Graph, cap: Captured, symbols: dict) -> None:
    """The code's own guards on sizes beyond ranges (``if h + (-h) % 7 <= 7``: torchvision Swin
    drops the shift when the padded size fits one window) as host checks: torch.export keeps such
    a guard nowhere in its program, so a call on the other side of the branch would compute the
    traced side. Guards raised inside torch (an op's meta function, a reference implementation,
    ``torch.nn.functional``) are left out: they concern an op of the graph, which the lowering
    constrains for every size itself. An ``Ne`` keeps the traced side (``a > b`` or ``a < b``).
    A guard with no dim form cannot be checked: a warning names each."""
    import sympy

    shape_env = next((sz.node.shape_env for n in cap.graph.nodes if n.op == "placeholder"
                      for sz in getattr(n.meta.get("val"), "shape", ())
                      if isinstance(sz, torch.SymInt)), None)
    if shape_env is None:
        return
    hint = shape_env.backed_var_to_val if hasattr(shape_env, "backed_var_to_val") else \
        shape_env.var_to_val   # older torch
    rel, unchecked = sympy.core.relational, []
    for guard in shape_env.guards:
        at = getattr(getattr(guard, "sloc", None), "framework_loc", None)
        if not hasattr(at, "filename") or at.filename.startswith(TORCH_DIR):
            continue   # an op's shape function: DLCB lowers the op for every size itself
        loc = f"{source_file(at.filename)}:{at.lineno}"
        expr = shape_env.replace(guard.expr)   # a symbol export unified with another: that one
        if isinstance(expr, sympy.Or):   # the side the trace took
            expr = next((a for a in expr.args if bool(a.xreplace(hint))), expr)
        for e in (expr.args if isinstance(expr, sympy.And) else (expr,)):
            if e in (sympy.true, sympy.false) or not isinstance(e, rel.Relational):
                if e is not sympy.true:
                    unchecked.append(f"{e} ({loc})")
                continue
            if len(e.free_symbols) == 1 and (e.lhs.is_Symbol or e.rhs.is_Symbol) and \
                    not isinstance(e, rel.Ne) and not cap.oblivious:   # a range: ``_ranges``
                continue
            taken: list = []
            try:
                d = _sym_dim(e.lhs - e.rhs, symbols, f"guard {e}", hint, taken)
            except UnsupportedOp:
                unchecked.append(f"{e} ({loc})")
                continue
            if isinstance(e, rel.Ne):
                above = (e.lhs - e.rhs).xreplace(hint) > 0
                checks = [d - 1] if above else [-d - 1]
            else:
                checks = {rel.Ge: [d], rel.Gt: [d - 1], rel.Le: [-d], rel.Lt: [-d - 1],
                          rel.Eq: [d, -d]}[type(e)]
            named = e.xreplace({s: sympy.Symbol(repr(symbols[s])) for s in e.free_symbols
                                if s in symbols})
            said = f"{named} ({e})" if str(named) != str(e) else str(e)
            for c in checks + taken:
                g.require(c, "torch.export", f"{said}: {GUARD_NOTE}", loc)
    if unchecked:
        warnings.warn(f"DLCB cannot check {len(unchecked)} of torch.export's guards on sizes (no "
                      f"dim form); a call where one fails computes the traced branch: "
                      f"{'; '.join(unchecked)}", stacklevel=2)


class Spellings:
    """One spelling per size value. Export's size arithmetic writes ``(H - 1) // 8 + 1`` where
    the layers' own size rules nest ``((((H + 1) // 2) + 1) // 2 + 1) // 2``: equal values, which
    no solver rule identifies, so a view by the first of a tensor shaped by the second left a
    residual check and kernels indexing both, whose quotients never cancel (ShuffleNet's channel
    shuffle: 90 floor divisions by runtime sizes). A size the arithmetic computes takes the
    spelling of an axis in the graph of equal ``flat_quotients`` key, the first one seen; a size
    padded to a multiple is spelt as the pad op spells it (``rounded_up``: Swin's windows)."""

    def __init__(self, g: Graph):
        self.g, self.by_key, self.inputs, self.nodes = g, {}, 0, 0

    def __call__(self, e: Any) -> Any:
        if not isinstance(e, Expr) or isinstance(e, (Lit, Var)):
            return e
        g = self.g
        new = g.inputs[self.inputs:] + [n.out for n in g.nodes[self.nodes:]]
        self.inputs, self.nodes = len(g.inputs), len(g.nodes)
        for v in new:
            for d in g.dims(v):
                if not isinstance(d, (Lit, Var)):
                    self.by_key.setdefault(flat_quotients(d), d)
        e = rounded_up(e)
        return self.by_key.get(flat_quotients(e), e)


def _lower_node(g: Graph, n: fx.Node, env: dict, consts: dict, spell: Spellings) -> None:
    args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: _value(g, env, consts, a))
    if n.target is operator.getitem:   # a tuple's item, computed or not (``Unavailable``)
        env[n] = args[0][args[1]]
        if isinstance(env[n], Unavailable) and n.users:   # eager computes it (lower_to_ir)
            raise UnsupportedOp(f"{env[n].what}: not computed by the lowering")
        return
    used = find((args, tuple(kwargs.values())), Unavailable)
    if used is not None and _packet(n) not in _NO_OPS:   # export's metadata checks compute nothing
        raise NoFallback(f"'{n.name}' at {where(n)}: uses {used.what}, which DLCB does not "
                         f"compute")
    if n.op == "output":
        outs = list(args[0])
        if not all(isinstance(o, Value) for o in outs):
            raise UnsupportedOp("module outputs must be tensors, not "
                                f"{[type(o).__name__ for o in outs]}")
        g.set_outputs(outs)
        return
    if n.op != "call_function":
        raise UnsupportedOp(f"{n.op} node {n.target!r}")
    t, name = n.target, _packet(n)
    if t is wrap_with_autocast:
        env[n] = _autocast_region(g, n, args, consts, spell)
        return
    size = _on_sizes(g, n, t, name, args, kwargs, spell)
    if size is not _TENSORS:
        env[n] = size
        return
    hit = lowering(n)
    if hit is None:
        raise UnsupportedOp(f"{describe(n)}: no DLCB lowering")
    fn, inplace = hit
    out = call_lowering(Cx(g, n.name, where(n)), name, fn, args, kwargs)
    if inplace:
        out = _functionalize(g, n, env, args[0], out)
    env[n] = out


_TENSORS = object()
"""``_on_sizes``: the node computes on tensors (a lowering's job)."""

_SIZE_TARGETS = {operator.truediv, operator.pow, *_SIZE_ARITH, *_SIZE_CMP, *_SIZE_LOGIC,
                 *_SIZE_ROUND, *_SCALED_USES, torch.sym_float}
_SIZE_PACKETS = {*_NO_OPS, *_SIZE_FNS, "_assert_scalar", "sym_storage_offset"}
"""The Python targets and ATen packets ``_on_sizes`` computes (on sizes; the arithmetic, the
comparisons and the logic on tensors go to the lowerings)."""


def _on_sizes(g: Graph, n: fx.Node, t, name: str, args: tuple, kwargs: dict,
              spell: Spellings) -> Any:
    """The value of ``n`` where it computes on sizes, not tensors (size arithmetic, comparisons
    and logic, ratios and their rounding, ``sym_size``/``sym_numel``, export's assertions and
    metadata checks: None), else ``_TENSORS``."""
    if t not in _SIZE_ROUND and find((args, tuple(kwargs.values())), SizeRatio) is not None:
        raise NoFallback(f"'{n.name}' at {where(n)}: {describe(n)} of a ratio of sizes "
                         f"{_show(args, {})} (a ratio of sizes lowers only under math.ceil or "
                         f"math.floor; no eager op takes it from the host program)")
    scaled = find((args, tuple(kwargs.values())), ScaledSize)
    if scaled is not None and (t not in _SCALED_USES or any(isinstance(a, Value) for a in args)):
        raise NoFallback(f"'{n.name}' at {where(n)}: {describe(n)} of a size as a float "
                         f"{_show(args, {})} (it lowers only times a Python number under "
                         f"math.trunc or math.floor; no eager op takes it from the host program)")
    if scaled is not None and t is not operator.mul:
        return scaled.rounded(Cx(g, n.name, where(n)))
    if t is torch.sym_float and isinstance(args[0], Expr):
        return ScaledSize(args[0])
    if t is torch.sym_float:
        return float(args[0])
    if t is math.trunc and isinstance(args[0], (int, float)):
        return math.trunc(args[0])
    if t is operator.truediv and not any(isinstance(a, Value) for a in args):
        return args[0] / args[1] if all(isinstance(a, (int, float)) for a in args) else \
            SizeRatio(*args)
    if t in _SIZE_ROUND:
        return _SIZE_ROUND[t](args[0]) if isinstance(args[0], SizeRatio) else t(args[0])
    if t in _SIZE_EXTREMA and any(isinstance(a, Expr) for a in args):
        return _size_extremum(g, n, args)
    if t in _SIZE_ARITH and not any(isinstance(a, Value) for a in args):
        return spell(t(*args))   # size arithmetic on dimension expressions, spelt as the graph
    if t is operator.pow and not any(isinstance(a, Value) for a in args):
        return _size_power(n, *args, spell)
    if name == "sym_storage_offset":   # read by export's deferred asserts (offset >= 0) only
        return STORAGE_OFFSET
    if STORAGE_OFFSET in args:
        if t is operator.ge and args == (STORAGE_OFFSET, 0):
            return True   # a functional tensor's offset: non-negative
        raise UnsupportedOp(f"'{n.name}' at {where(n)}: {describe(n)} of a storage offset (DLCB "
                            f"tensors have none; only export's 'offset >= 0' check lowers)")
    if t in _SIZE_CMP and not any(isinstance(a, Value) for a in args):
        return DimPredicate.of(_SIZE_CMP[t], *args)
    if t in _SIZE_LOGIC and not any(isinstance(a, Value) for a in args):
        return _SIZE_LOGIC[t](*args)
    if name in _NO_OPS:
        return None
    if name == "sym_size":
        dims = g.dims(tensor_arg(args[0]))
        return dims[wrap_axis(args[1], len(dims))]
    if name == "sym_numel":
        return math.prod(g.dims(tensor_arg(args[0])), start=lit(1))
    if name == "_assert_scalar":
        cond = args[0]
        if isinstance(cond, DimPredicate):
            cond.impose(Cx(g, n.name, where(n)), f"torch.export runtime assertion: {args[1]}")
        elif cond is False:
            raise ShapeError(f"assertion fails: {args[1]}")
        return None
    return _TENSORS


def _size_power(n: fx.Node, base: Any, exp: Any, spell: Spellings) -> Any:
    """``base ** exp`` on sizes: a product of the dim for a literal exponent ``>= 0``; numbers
    as Python computes them; another power of a dim has no dim expression (``NoFallback``)."""
    if not isinstance(base, Expr) and not isinstance(exp, Expr):
        return base ** exp
    if isinstance(base, Expr) and isinstance(exp, int) and not isinstance(exp, bool) and \
            exp >= 0:
        out: Expr = lit(1)
        for _ in range(exp):
            out = out * base
        return spell(out)
    raise NoFallback(f"'{n.name}' at {where(n)}: {describe(n)} {_show((base, exp), {})}: a "
                     f"power of a size lowers only with a literal exponent >= 0 (a product)")


def _autocast_region(g: Graph, n: fx.Node, args: tuple, consts: dict, spell: Spellings) -> Any:
    """``wrap_with_autocast`` (export's region for ``with torch.autocast(...)``) with autocast
    off (EfficientViT computes its linear attention so): the region's own graph, lowered in
    place on the operands; autocast on (ops cast to a lower precision) is refused by name."""
    device, dtype, enabled, _, region, *operands = args
    if enabled:
        raise UnsupportedOp(f"'{n.name}' at {where(n)}: an autocast region on {device} in "
                            f"{dtype} (regions with autocast off lower)")
    env = dict(zip([m for m in region.graph.nodes if m.op == "placeholder"], operands))
    for m in region.graph.nodes:
        if m.op == "output":
            return fx.node.map_arg(m.args[0], env.__getitem__)
        if m.op != "placeholder":
            _lower_node(g, m, env, consts, spell)
    raise UnsupportedOp(f"'{n.name}': an autocast region without an output")


def _size_extremum(g: Graph, n: fx.Node, args: tuple) -> Any:
    """``sym_min``/``sym_max`` of sizes, one of them symbolic (GPT-Neo's local attention window:
    ``min(window, seq)``): the operand the example takes, its order against the other checked on
    the host before any launch, as a branch the trace took is (dims have no min/max)."""
    try:
        a, b = (as_expr(x).evaluate(g.examples) for x in args)   # the example's sizes
    except (KeyError, ValueError):
        raise UnsupportedOp(f"'{n.name}' at {where(n)}: {describe(n)} of sizes "
                            f"{_show(args, {})} without example values") from None
    low = n.target is torch.sym_min
    k = 0 if (a <= b) == low else 1
    keep, other = as_expr(args[k]), as_expr(args[1 - k])
    g.require(other - keep if low else keep - other, n.name,
              f"{'min' if low else 'max'}({args[0]}, {args[1]}) is {keep} as traced "
              f"(torch.{n.target.__name__}: {keep} {'<=' if low else '>='} {other})", where(n))
    return keep


def call_lowering(cx: Cx, name: str, fn: Callable, args: tuple, kwargs: dict):
    """``fn(cx, *args, **kwargs)`` with the arguments bound to its signature first (so a mismatch
    is an ``UnsupportedOp`` naming the lowering)."""
    kwargs = {("input" if k == "self" else k): v for k, v in kwargs.items()}
    try:
        bound = inspect.signature(fn).bind(cx, *args, **kwargs)
    except TypeError as err:
        raise UnsupportedOp(f"arguments {_show(args, kwargs)} do not fit "
                            f"{name}{_signature(fn)}: {err}") from None
    return fn(*bound.args, **bound.kwargs)


def _functionalize(g: Graph, n: fx.Node, env: dict, target: Any, out: Value) -> Value:
    """In-place op on ``target``: every node holding ``target`` now holds ``out`` (cast back to
    ``target``'s dtype, as torch does). Refused where the write would be visible elsewhere: on a
    module input, parameter or buffer (a placeholder), on a view (its base would change), or on
    a tensor a view was taken of before the write (the view would change)."""
    if not isinstance(target, Value):
        raise UnsupportedOp("in-place op on a non-tensor")
    if out is target:   # an identity (dropout_ in eval): nothing is written
        return out
    src = n.args[0] if isinstance(n.args[0], fx.Node) else None
    if src is not None and src.op == "placeholder":
        raise UnsupportedOp(f"in-place op mutates graph input '{target.name}' (the caller's "
                            f"tensor, a parameter or a buffer); use the out-of-place form")
    if out.dtype != target.dtype:
        if not torch.can_cast(out.dtype, target.dtype):
            raise DTypeError(f"result type {out.dtype} can't be cast to the in-place operand's "
                             f"dtype {target.dtype}")
        out = g.apply("to", out, dtype=target.dtype, name=f"{n.name}_cast", where=where(n))
    if src is not None and _is_view(src):
        chain = _slice_chain(src, n)
        if chain is None:
            raise UnsupportedOp(f"in-place op on '{target.name}', a view (only a write into "
                                f"slices, step 1, of a tensor the program computes, with no other "
                                f"view of it used after the write, is functionalized); use the "
                                f"out-of-place form")
        return _write_through(g, n, env, chain, out)
    if src is not None and any(_is_view(u) and _used_after(u, n) for u in src.users
                               if u is not n and _before(u, n)):
        raise UnsupportedOp(f"in-place op on '{target.name}', which shares storage with a view "
                            f"used after the write; use the out-of-place form")
    _rebind(env, target, out)
    return out


def _rebind(env: dict, old: Value, new: Value) -> None:
    """Every node holding ``old`` now holds ``new`` (the value after an in-place write)."""
    for k, v in env.items():
        if v is old:
            env[k] = new


def _slice_chain(view: fx.Node, n: fx.Node) -> list[fx.Node] | None:
    """``view`` as ``slice(slice(... base))`` (innermost first), every slice of step 1, ``base``
    computed by the program (not a placeholder nor a view), and no view of ``base`` or of the
    chain other than the chain itself used after ``n``; else None."""
    chain, node = [], view
    while _is_view(node):
        step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
        if _packet(node) != "slice" or step != 1 or not isinstance(node.args[0], fx.Node):
            return None
        chain.append(node)
        node = node.args[0]
    if node.op == "placeholder":
        return None
    for x in (node, *chain[1:]):
        if any(_is_view(u) and u not in chain and _before(u, n) and _used_after(u, n)
               for u in x.users):
            return None
    return chain


_TO_THE_END = 1 << 62
"""A slice end at or past this is ``None`` (export writes ``x[a:]`` as end 2**63 - 1)."""


def _write_through(g: Graph, n: fx.Node, env: dict, chain: list[fx.Node], new: Value) -> Value:
    """A write of ``new`` into the slices ``chain`` (``_slice_chain``): each parent becomes the
    concatenation of its part before the slice, the written slice and its part after it, along
    the slice's axis (a guarded selection in the kernels), and the base's new value replaces the
    old one. The pieces' sizes are constrained to the parent's (a host check where symbolic)."""
    cx = Cx(g, n.name, where(n))
    for s in chain:
        parent = env[s.args[0]]
        given = list(fx.node.map_arg(tuple(s.args[1:4]), lambda a: env[a]))
        dim, start, end = given + [0, None, None][len(given):]
        axis = wrap_axis(dim, parent.rank)
        pieces = [new]
        if start is not None and not (isinstance(start, int) and start == 0):
            pieces.insert(0, _a_slice(cx, parent, axis, None, start))
        if end is not None and not (isinstance(end, int) and end >= _TO_THE_END):
            pieces.append(_a_slice(cx, parent, axis, end, None))
        if len(pieces) > 1:
            new = _L["cat"](cx, pieces, axis)
        gap = g.dims(new)[axis] - g.dims(parent)[axis]   # checked, never solved for
        for e in (gap, -gap):
            g.require(e, n.name, f"in-place write into a slice along axis {axis}: the pieces "
                                 f"make the axis", where(n))
    _rebind(env, env[chain[-1].args[0]], new)
    return new


def _used_after(v: fx.Node, n: fx.Node) -> bool:
    """Whether ``v`` or a view of it (transitively) is read by a node after ``n``."""
    for u in v.users:
        if u is n:
            continue
        if not _before(u, n) or (_is_view(u) and _used_after(u, n)):
            return True
    return False


def _is_view(n: fx.Node) -> bool:
    """A node whose traced result aliases one of its tensor inputs (``slice``, ``view``,
    ``expand``; ``to`` or ``reshape`` only where they returned a view)."""
    schema = getattr(n.target, "_schema", None)
    if schema is None or not schema.returns or schema.returns[0].alias_info is None or \
            schema.is_mutable:
        return False
    val = n.meta.get("val")
    ins = [a.meta.get("val") for a in n.all_input_nodes]
    return not isinstance(val, torch.Tensor) or any(
        isinstance(t, torch.Tensor) and torch._C._is_alias_of(val, t) for t in ins)


def _before(a: fx.Node, b: fx.Node) -> bool:
    """Whether ``a`` comes before ``b`` in the graph."""
    node = a.next
    while node is not None and node.op != "root":
        if node is b:
            return True
        node = node.next
    return False


def _show(args: Sequence, kwargs: dict) -> str:
    def one(a):
        return f"%{a.name}" if isinstance(a, Value) else repr(a)
    return ", ".join([*(one(a) for a in args), *(f"{k}={one(v)}" for k, v in kwargs.items())])


def _signature(fn: Callable) -> str:
    params = list(inspect.signature(fn).parameters.values())[1:]
    return "(" + ", ".join(str(p) for p in params) + ")"



def to_ir(module: torch.nn.Module, examples: Sequence[Any], dynamic: Any = False) -> Graph:
    """Capture and lower in one call (what ``dl.compile`` does before the passes)."""
    from .capture import capture

    examples = (examples,) if isinstance(examples, torch.Tensor) else tuple(examples)
    return lower_to_ir(capture(module, examples, None, dynamic))
