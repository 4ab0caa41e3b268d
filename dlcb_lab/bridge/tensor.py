"""PyTorch bridge, capture half (paper §2.1): trace a module with torch.fx and lower it to DLCB IR.

Inputs get symbolic shapes: an axis named in ``dynamic`` becomes a user dimension variable (rank 1),
every other axis the literal size of the example input. Size queries (``x.size(0)``, ``x.shape``,
``x.numel()``) become dimension expressions, so ``x.view(x.size(0), -1)`` stays symbolic.

Lowering is table-driven: each lowering function has torch's signature (names and defaults), and an
fx node's ``args``/``kwargs`` are bound against it, so keyword defaults spelled out
(``F.relu(x, inplace=False)``) and positional/keyword spellings lower alike; an argument outside the
signature, or a value the lowering does not support, raises ``UnsupportedOp``. Function, method
and module spellings map to one lowering (``_FUNCTIONS``, ``_METHODS``, ``_MODULES``). In-place
forms (``relu_``, ``+=``, ``inplace=True``) are functionalized: later uses of the mutated value, and
of its aliases, see the result. Axes follow torch's wrapping rules and are checked. Every compile
error names the fx node and the user's source line; unsupported nodes are all listed in one error.
"""

from __future__ import annotations

import inspect
import linecache
import operator
import os
import sys
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from ..dims import Expr, lit, prod, var
from ..errors import DLError, DTypeError, ShapeError, SpecError, UnsupportedOp
from ..ir.graph import Graph, Value
from ..ir.ops import OPS, OpKind
from . import indexing
from . import nn as nn_lowerings
from .proxy import run_opaque
from .common import Cx, DimPredicate, axes_arg, operand, refuse, shape_arg, tensor_arg, wrap_axis

DynamicSpec = Mapping[int | str, Mapping[int, str]]
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_OWN_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


# --- capture ---------------------------------------------------------------------------------------

class _Tracer(fx.Tracer):
    """fx tracer that records the user's source line of each node (``meta["dlcb_where"]``): the
    innermost frame outside torch and this bridge (a torchvision model's own file is user code).

    fx's own ``record_stack_traces`` symbolizes whole stacks (about 1.5 s on first use); one frame
    walk per node is enough to name the line an error should point at.
    """

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith((_TORCH_DIR, _OWN_DIR)):
            f = f.f_back
        if f is not None:
            code = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
            node.meta["dlcb_where"] = (f"{source_file(f.f_code.co_filename)}:{f.f_lineno} "
                                       f"in {f.f_code.co_name}: {code}")
        return node


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


def trace(module: nn.Module) -> fx.GraphModule:
    """Symbolically trace ``module``; fx's refusals (data-dependent control flow...) become
    ``UnsupportedOp``."""
    tracer = _Tracer()
    try:
        graph = tracer.trace(module)
    except (fx.proxy.TraceError, TypeError, RuntimeError, NotImplementedError) as err:
        raise UnsupportedOp(f"torch.fx cannot trace {type(module).__name__}: "
                            f"{str(err).splitlines()[0]}") from None
    return fx.GraphModule(tracer.root, graph)


def _where(node: fx.Node) -> str:
    return node.meta.get("dlcb_where", node.name)


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


# --- lowerings (torch's signatures) ------------------------------------------------------------------

def _l_identity(cx, input):
    return tensor_arg(input)


def _l_contiguous(cx, input, memory_format=torch.contiguous_format):
    refuse(memory_format=(memory_format, torch.contiguous_format))
    return tensor_arg(input)


def _unary(op: str) -> Callable:
    def lowering(cx, input, *, out=None):
        refuse(out=(out, None))
        return cx.apply(op, tensor_arg(input))
    return lowering


def _l_relu(cx, input, inplace=False):
    return cx.apply("relu", tensor_arg(input))


def _binary(op: str) -> Callable:
    def lowering(cx, input, other, *, out=None):
        refuse(out=(out, None))
        return cx.apply(op, operand(input), operand(other))
    return lowering


def _additive(op: str) -> Callable:
    def lowering(cx, input, other, *, alpha=1, out=None):
        refuse(out=(out, None))
        input, other = operand(input), operand(other)
        if alpha != 1:   # input + alpha * other (alpha=False on bools: input)
            if not isinstance(alpha, (bool, int, float)):
                raise UnsupportedOp(f"alpha={alpha!r} is not a Python number")
            if isinstance(alpha, bool) and not all(
                    isinstance(x, bool) or isinstance(x, Value) and x.dtype is torch.bool
                    for x in (input, other)):
                raise DTypeError(f"alpha={alpha!r} is a bool but the operands are not "
                                 f"(torch rejects it)")
            if isinstance(alpha, float) and not any(
                    isinstance(x, float) or isinstance(x, Value) and x.dtype.is_floating_point
                    for x in (input, other)):
                raise DTypeError(f"alpha={alpha!r} is a float but the operands are integral "
                                 f"(torch rejects it)")
            other = cx.apply("mul", other, alpha) if isinstance(other, Value) else other * alpha
        return cx.apply(op, input, other)
    return lowering


def _l_div(cx, input, other, *, rounding_mode=None, out=None):
    """``rounding_mode`` 'trunc' / 'floor': floating operands round the quotient as torch does;
    integral ones divide exactly (C truncation, floor division) by a non-zero Python int. An
    integral tensor divisor is refused: eager raises on a zero divisor, a kernel cannot."""
    refuse(out=(out, None))
    a, b = operand(input), operand(other)
    if rounding_mode is None or not any(isinstance(x, Value) for x in (a, b)):
        return cx.apply("div", a, b)
    if rounding_mode not in ("trunc", "floor"):
        raise UnsupportedOp(f"rounding_mode={rounding_mode!r} (torch takes None, 'trunc' or "
                            f"'floor')")
    probe = [torch.zeros((1,) * x.rank, dtype=x.dtype) if isinstance(x, Value) else x
             for x in (a, b)]
    dtype = torch.result_type(*probe)
    if dtype.is_floating_point:   # 16-bit floor: every step rounded, as eager computes it
        if rounding_mode == "trunc":
            return cx.apply("trunc", cx.apply("div", a, b))
        return cx.apply({torch.float16: "div_floor_f16", torch.bfloat16: "div_floor_bf16"}.get(
            dtype, "div_floor"), a, b)
    if isinstance(b, Value):
        raise UnsupportedOp(f"integer division (rounding_mode={rounding_mode!r}) by a tensor: "
                            f"eager raises on a zero divisor, a generated kernel cannot check "
                            f"it; divide by a Python int or in a floating dtype")
    if b == 0:
        raise UnsupportedOp("integer division by zero (eager raises ZeroDivisionError)")
    return cx.apply(f"div_{rounding_mode}_int", a, b)


def _boolean(op: str) -> Callable:
    """``~``, ``&``, ``|``: logical on bool tensors; bitwise integer ops are unsupported."""
    def lowering(cx, input, *others):
        xs = [operand(a) for a in (input, *others)]
        if any(not (x.dtype is torch.bool if isinstance(x, Value) else isinstance(x, bool))
               for x in xs):
            raise UnsupportedOp("bitwise ops are supported on bool operands only")
        return cx.apply(op, *xs)
    return lowering


def _l_where(cx, condition, input, other, *, out=None):
    refuse(out=(out, None))
    return cx.apply("where", tensor_arg(condition, "condition"), operand(input), operand(other))


def _row_major(memory_format: Any) -> None:
    """Outputs are row-major: ``preserve_format`` and ``contiguous_format`` give the same values
    and strides as eager for the contiguous tensors the thunk works on; others are refused."""
    if memory_format not in (torch.preserve_format, torch.contiguous_format):
        raise UnsupportedOp(f"memory_format={memory_format} unsupported (outputs are row-major)")


def _l_to(cx, input, *args, non_blocking=False, copy=False,
          memory_format=torch.preserve_format, **kwargs):
    """``x.to(dtype)``, ``x.to(other)``, ``x.to(dtype=...)`` with torch's trailing
    ``non_blocking, copy`` flags; device moves are unsupported. ``copy=True`` gives a new value
    even for the same dtype (so an in-place op on it does not reach ``x``)."""
    _row_major(memory_format)
    dtype = kwargs.pop("dtype", None)
    head, flags = list(args), []   # (dtype | other, [non_blocking, [copy]])
    while head and isinstance(head[-1], bool):
        flags.insert(0, head.pop())
    copy = flags[1] if len(flags) > 1 else copy
    for a in head:
        if isinstance(a, torch.dtype) and dtype is None:
            dtype = a
        elif isinstance(a, Value) and dtype is None:
            dtype = a.dtype
        else:
            raise UnsupportedOp(f"to({a!r}): only dtype conversions are supported")
    if kwargs or dtype is None:
        raise UnsupportedOp(f"to({_show(args, kwargs)}): only dtype conversions are supported")
    x = tensor_arg(input)
    return cx.apply("to", x, dtype=dtype) if copy else cx.cast(x, dtype)


def _cast_method(dtype: torch.dtype) -> Callable:
    def lowering(cx, input, memory_format=torch.preserve_format):
        _row_major(memory_format)
        return cx.cast(tensor_arg(input), dtype)
    return lowering


def _l_type_as(cx, input, other):
    return cx.cast(tensor_arg(input), tensor_arg(other, "other").dtype)


def _l_reshape(cx, input, shape):
    return cx.apply("reshape", tensor_arg(input), shape=tuple(shape))


def _l_view(cx, input, *shape, **kwargs):
    if len(shape) == 1 and isinstance(shape[0], torch.dtype) or "dtype" in kwargs:
        raise UnsupportedOp("view(dtype) (a bit cast) is unsupported")
    return _l_reshape(cx, input, shape_arg(shape, kwargs, "size"))


def _l_reshape_method(cx, input, *shape, **kwargs):
    return _l_reshape(cx, input, shape_arg(shape, kwargs, "shape"))


def _l_flatten(cx, input, start_dim=0, end_dim=-1):
    x = tensor_arg(input)
    s, e = wrap_axis(start_dim, x.rank, "start_dim"), wrap_axis(end_dim, x.rank, "end_dim")
    if s > e:
        raise ShapeError(f"start_dim {start_dim} comes after end_dim {end_dim}")
    if x.rank == 0:
        return cx.apply("reshape", x, shape=(1,))
    dims = cx.g.dims(x)
    return cx.apply("reshape", x, shape=(*dims[:s], prod(dims[s:e + 1]), *dims[e + 1:]))


def _l_permute(cx, input, dims):
    x = tensor_arg(input)
    dims = tuple(dims)
    if len(dims) != x.rank:
        raise ShapeError(f"permute needs {x.rank} axes, got {list(dims)}")
    perm = tuple(wrap_axis(p, x.rank) for p in dims)
    if len(set(perm)) != len(perm):
        raise ShapeError(f"axes {list(dims)} repeat an axis")
    return cx.apply("permute", x, dims=perm)


def _l_permute_method(cx, input, *dims, **kwargs):
    return _l_permute(cx, input, shape_arg(dims, kwargs, "dims"))


def _l_transpose(cx, input, dim0, dim1):
    x = tensor_arg(input)
    a, b = wrap_axis(dim0, x.rank, "dim0"), wrap_axis(dim1, x.rank, "dim1")
    if x.rank == 0 or a == b:
        return x
    perm = list(range(x.rank))
    perm[a], perm[b] = perm[b], perm[a]
    return cx.apply("permute", x, dims=tuple(perm))


def _reduction(op: str, default_dim: Any) -> Callable:
    def lowering(cx, input, dim=default_dim, keepdim=False, *, dtype=None, out=None):
        refuse(out=(out, None))
        x = tensor_arg(input)
        if dtype is not None:
            x = cx.cast(x, dtype)
        return cx.apply(op, x, dims=axes_arg(dim, x.rank), keepdim=bool(keepdim))
    return lowering


def _l_size(cx, input, dim=None):
    dims = cx.g.dims(tensor_arg(input))
    return dims if dim is None else dims[wrap_axis(dim, len(dims))]


def _l_dim(cx, input):
    return tensor_arg(input).rank


def _l_numel(cx, input):
    return prod(cx.g.dims(tensor_arg(input)))


def _l_assert(cx, condition, message=""):
    """``torch._assert`` on sizes: ``==`` becomes a constraint (it may pin a dim: its provenance
    names this line), an inequality a host-checked requirement; a false literal is an error."""
    if isinstance(condition, DimPredicate):
        condition.impose(cx, f"torch._assert: {message}")
    elif isinstance(condition, Value):
        raise UnsupportedOp("torch._assert on a tensor value (data-dependent)")
    elif not condition:
        raise ShapeError(f"torch._assert fails: {message}")


LOWERINGS: dict[str, Callable] = {
    "identity": _l_identity, "contiguous": _l_contiguous, "relu": _l_relu,
    **{op: _unary(op) for op in ("neg", "abs", "exp", "sigmoid", "tanh", "logical_not", "log",
                                 "sqrt", "rsqrt", "erf", "trunc")},
    **{op: _binary(op) for op in ("mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
                                  "logical_and", "logical_or")},
    "add": _additive("add"), "sub": _additive("sub"), "div": _l_div, "where": _l_where,
    "bitwise_not": _boolean("logical_not"), "bitwise_and": _boolean("logical_and"),
    "bitwise_or": _boolean("logical_or"),
    "to": _l_to, "type_as": _l_type_as,
    **{name: _cast_method(dt) for name, dt in (
        ("float", torch.float32), ("double", torch.float64), ("half", torch.float16),
        ("bfloat16", torch.bfloat16), ("long", torch.int64),
        ("int", torch.int32), ("short", torch.int16), ("char", torch.int8), ("byte", torch.uint8),
        ("bool", torch.bool))},
    "reshape": _l_reshape, "reshape_method": _l_reshape_method, "view": _l_view,
    "flatten": _l_flatten, "permute": _l_permute, "permute_method": _l_permute_method,
    "transpose": _l_transpose,
    "sum": _reduction("sum", None), "mean": _reduction("mean", None),
    "amax": _reduction("amax", ()),
    "size": _l_size, "dim": _l_dim, "numel": _l_numel, "assert": _l_assert,
    **nn_lowerings.LOWERINGS, **indexing.LOWERINGS,
}
"""Lowering name -> function with torch's signature (after the context argument)."""

_ELEMENTWISE = [n for n, op in OPS.items() if op.kind is OpKind.ELEMENTWISE and n != "to"
                and n in LOWERINGS and hasattr(torch, n)]
_FUNCTIONS: dict[Any, tuple[str, bool]] = {
    **{getattr(torch, n): (n, False) for n in _ELEMENTWISE},
    **{getattr(torch, n): (n, False) for n in ("reshape", "flatten", "permute", "transpose",
                                               "sum", "mean", "amax")},
    F.relu: ("relu", False), F.sigmoid: ("sigmoid", False), F.tanh: ("tanh", False),
    torch.relu_: ("relu", True), F.relu_: ("relu", True),
    operator.neg: ("neg", False), operator.abs: ("abs", False), operator.add: ("add", False),
    operator.sub: ("sub", False), operator.mul: ("mul", False), operator.truediv: ("div", False),
    operator.eq: ("eq", False), operator.ne: ("ne", False), operator.lt: ("lt", False),
    operator.le: ("le", False), operator.gt: ("gt", False), operator.ge: ("ge", False),
    operator.iadd: ("add", True), operator.isub: ("sub", True), operator.imul: ("mul", True),
    operator.itruediv: ("div", True), torch.true_divide: ("div", False), operator.invert: ("bitwise_not", False),
    operator.and_: ("bitwise_and", False), operator.or_: ("bitwise_or", False),
    torch.bitwise_not: ("bitwise_not", False), torch.bitwise_and: ("bitwise_and", False),
    torch.bitwise_or: ("bitwise_or", False), torch._assert: ("assert", False),
    **nn_lowerings.FUNCTIONS, **indexing.FUNCTIONS,
}
"""fx ``call_function`` target -> (lowering name, in place)."""

_METHODS: dict[str, tuple[str, bool]] = {
    **{n: (n, False) for n in _ELEMENTWISE if n != "where"},
    **{f"{n}_": (n, True) for n in ("relu", "neg", "abs", "exp", "sigmoid", "tanh", "add", "sub",
                                    "mul", "div", "logical_not")},
    **{n: (n, False) for n in ("contiguous", "to", "type_as", "float", "double", "half",
                               "bfloat16", "long", "int", "short", "char", "byte", "bool",
                               "view", "flatten", "transpose",
                               "sum", "mean", "amax", "size", "dim", "numel")},
    "reshape": ("reshape_method", False), "permute": ("permute_method", False),
    "bitwise_not": ("bitwise_not", False), "bitwise_and": ("bitwise_and", False),
    "bitwise_or": ("bitwise_or", False), "true_divide": ("div", False),
    **nn_lowerings.METHODS, **indexing.METHODS,
}
"""fx ``call_method`` name -> (lowering name, in place)."""

_MODULES: dict[type, tuple[str, tuple[str, ...]]] = {
    nn.ReLU: ("relu", ("inplace",)), nn.Sigmoid: ("sigmoid", ()), nn.Tanh: ("tanh", ()),
    nn.Flatten: ("flatten", ("start_dim", "end_dim")), nn.Identity: ("identity", ()),
    **nn_lowerings.MODULE_ATTRS,
}
"""leaf module type -> (lowering name, module attributes passed as keyword arguments)."""

_MODULE_FNS: dict[type, Callable] = {**nn_lowerings.MODULES, **indexing.MODULES}
"""leaf module type -> lowering ``fn(cx, module, *args, **kwargs)`` (modules with parameters)."""

_SIZE_ARITH = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
               operator.neg}
_SIZE_CMP = {operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=",
             operator.gt: ">", operator.ge: ">="}


# --- graph lowering --------------------------------------------------------------------------------

def _describe(n: fx.Node, gm: fx.GraphModule) -> str:
    if n.op == "call_module":
        mod = gm.get_submodule(n.target)
        return f"call_module '{n.target}' ({type(mod).__module__}.{type(mod).__qualname__})"
    t = n.target
    name = t if isinstance(t, str) else f"{getattr(t, '__module__', '') or ''}." \
                                        f"{getattr(t, '__qualname__', repr(t))}".lstrip(".")
    return f"{n.op} {name}"


def _lowering_of(n: fx.Node, gm: fx.GraphModule
                 ) -> tuple[str, Callable, tuple, bool, dict] | None:
    """(name, lowering, leading arguments after the context, in place, extra kwargs) of ``n``,
    or None when unsupported."""
    hit = _lowering_name(n, gm)
    if hit is None:
        if n.op == "call_module":
            mod = gm.get_submodule(n.target)
            fn = _MODULE_FNS.get(type(mod))
            return None if fn is None else (type(mod).__name__, fn, (mod,), False, {})
        return None
    name, inplace, kw = hit
    return name, LOWERINGS[name], (), inplace, kw


def _lowering_name(n: fx.Node, gm: fx.GraphModule) -> tuple[str, bool, dict] | None:
    if n.op == "call_function":
        hit = _FUNCTIONS.get(n.target)
        return None if hit is None else (*hit, {})
    if n.op == "call_method":
        hit = _METHODS.get(n.target)
        return None if hit is None else (*hit, {})
    if n.op == "call_module":
        mod = gm.get_submodule(n.target)
        hit = _MODULES.get(type(mod))
        if hit is None:
            return None
        name, attrs = hit
        kw = {a: getattr(mod, a) for a in attrs}
        return name, bool(kw.get("inplace")), kw
    return None


def unsupported_nodes(gm: fx.GraphModule) -> list[str]:
    """One line per fx node no lowering handles: the node, its target's type and source line."""
    out = []
    for n in gm.graph.nodes:
        if n.op not in ("call_function", "call_method", "call_module"):
            continue
        if n.op == "call_function" and n.target in (getattr, operator.getitem, *_SIZE_ARITH) or \
                _opaque(n):
            continue
        if _lowering_of(n, gm) is None:
            out.append(f"  '{n.name}': {_describe(n, gm)} at {_where(n)}")
    return out


def lower_to_ir(gm: fx.GraphModule, examples: Sequence[torch.Tensor], dynamic: Any) -> Graph:
    """Build a DLCB IR graph from a traced module (inputs in placeholder order)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    names = [str(n.target).lstrip("*") for n in placeholders]
    if len(placeholders) != len(examples):
        raise SpecError(f"module takes {len(placeholders)} inputs ({', '.join(names)}), "
                        f"{len(examples)} examples given")
    for i, ex in enumerate(examples):
        if not isinstance(ex, torch.Tensor):
            raise SpecError(f"example input {i} '{names[i]}' is {type(ex).__name__}, expected a "
                            f"torch.Tensor")
        if ex.layout is not torch.strided:
            raise UnsupportedOp(f"input {i} '{names[i]}': layout {ex.layout} unsupported (strided "
                                f"tensors only)")
    spec = normalize_dynamic(dynamic, names, [ex.dim() for ex in examples])
    bad = unsupported_nodes(gm)
    if bad:
        raise UnsupportedOp(f"{len(bad)} fx node{'s' * (len(bad) > 1)} not supported by DLCB IR:\n"
                            + "\n".join(bad))
    g = Graph()
    env: dict[fx.Node, Any] = {}
    for n, ex, name in zip(placeholders, examples, names):
        env[n] = g.input(name, input_dims(ex, spec.get(len(env), {})), ex.dtype)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        try:
            _lower_node(g, gm, n, env)
        except DLError as err:
            raise err.locate(_describe(n, gm), n.name, _where(n)) from None
    return g


def _lower_node(g: Graph, gm: fx.GraphModule, n: fx.Node, env: dict) -> None:
    args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: env[a])
    if n.op == "get_attr":   # parameters and buffers: constant inputs of static shape
        t = _fetch_attr(gm, n.target)
        if not isinstance(t, torch.Tensor):
            raise UnsupportedOp(f"attribute {n.target!r} is a {type(t).__name__}, not a tensor")
        env[n] = g.constant(n.name, t)
        return
    if n.op == "output":
        outs = args[0]
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        if not all(isinstance(o, Value) for o in outs):
            raise UnsupportedOp("module outputs must be tensors or a tuple/list of tensors, not "
                                f"{[type(o).__name__ for o in outs]}")
        g.set_outputs(outs)
        return
    if n.op == "call_function" and n.target is getattr:
        env[n] = _getattr(g, *args)
        return
    if n.op == "call_function" and n.target is operator.getitem and not isinstance(args[0], Value):
        env[n] = args[0][args[1]]
        return
    if n.op == "call_function" and not any(isinstance(a, Value) for a in args):
        if n.target in _SIZE_ARITH:
            env[n] = n.target(*args)   # size arithmetic on dimension expressions
            return
        if n.target in _SIZE_CMP:
            env[n] = DimPredicate.of(_SIZE_CMP[n.target], *args)
            return
    cx = Cx(g, n.name, _where(n))
    if n.target is operator.getitem:
        name, fn, lead, inplace, extra = "getitem", LOWERINGS["getitem"], (), False, {}
    elif _opaque(n):
        env[n] = run_opaque(cx, n.target, args, kwargs)
        return
    else:
        hit = _lowering_of(n, gm)
        if hit is None:   # e.g. size arithmetic (``%``, ``//``) applied to a tensor
            raise UnsupportedOp(f"{_describe(n, gm)} on a tensor is not supported")
        name, fn, lead, inplace, extra = hit
    out, bound = call_lowering(cx, name, fn, (*lead, *args), {**kwargs, **extra}, len(lead))
    if inplace or bound.arguments.get("inplace"):
        out = _functionalize(g, n, env, args[0], out)
    env[n] = out


def call_lowering(cx: Cx, name: str, fn: Callable, args: tuple, kwargs: dict, lead: int = 0):
    """``fn(cx, *args, **kwargs)`` with the arguments bound to its signature first (so a mismatch
    is an ``UnsupportedOp`` naming the lowering); returns (result, bound arguments)."""
    try:
        bound = inspect.signature(fn).bind(cx, *args, **kwargs)
    except TypeError as err:
        raise UnsupportedOp(f"arguments {_show(args[lead:], kwargs)} do not fit "
                            f"{name}{_signature(fn, lead)}: {err}") from None
    return fn(*bound.args, **bound.kwargs), bound


def lowering_for(func: Any, method: bool) -> tuple[str, Callable, bool] | None:
    """(name, lowering, in place) of a torch function or tensor method name, or None."""
    hit = _METHODS.get(func) if method else _FUNCTIONS.get(func)
    return None if hit is None else (hit[0], LOWERINGS[hit[0]], hit[1])


def _opaque(n: fx.Node) -> bool:
    """A Python function fx kept as a leaf (``torch.fx.wrap``), run on tensor proxies."""
    return n.op == "call_function" and inspect.isfunction(n.target) and \
        n.target not in _FUNCTIONS and n.target.__module__.split(".")[0] != "torch"


def _functionalize(g: Graph, n: fx.Node, env: dict, target: Any, out: Value) -> Value:
    """In-place op on ``target``: every fx node holding ``target`` now holds ``out`` (cast back to
    ``target``'s dtype, as torch does). Inputs, parameters and views are refused: their mutation
    would be visible outside the compiled graph or through another alias."""
    if not isinstance(target, Value):
        raise UnsupportedOp("in-place op on a non-tensor")
    if target.producer is None:
        raise UnsupportedOp(f"in-place op mutates graph input '{target.name}' (the caller's "
                            f"tensor); use the out-of-place form")
    if target.producer.op.kind.is_transform or any(
            target in m.inputs for m in g.nodes if m.op.kind.is_transform):
        raise UnsupportedOp(f"in-place op on '{target.name}', which shares storage with a view; "
                            f"use the out-of-place form")
    if out.dtype != target.dtype:
        if not torch.can_cast(out.dtype, target.dtype):
            raise DTypeError(f"result type {out.dtype} can't be cast to the in-place operand's "
                             f"dtype {target.dtype}")
        out = g.apply("to", out, dtype=target.dtype, name=f"{n.name}_cast", where=_where(n))
    for k, v in env.items():
        if v is target:
            env[k] = out
    return out


def _show(args: tuple, kwargs: dict) -> str:
    return ", ".join([*(f"%{a.name}" if isinstance(a, Value) else repr(a) for a in args),
                      *(f"{k}={v!r}" for k, v in kwargs.items())])


def _signature(fn: Callable, skip: int = 0) -> str:
    params = list(inspect.signature(fn).parameters.values())[1 + skip:]
    return "(" + ", ".join(str(p) for p in params) + ")"


def _fetch_attr(gm: fx.GraphModule, path: str):
    obj = gm
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _getattr(g: Graph, x: Any, attr: str) -> Any:
    if isinstance(x, Value):
        if attr == "shape":
            return g.dims(x)
        if attr == "dtype":
            return x.dtype
        if attr == "ndim":
            return x.rank
    raise UnsupportedOp(f"attribute {attr!r} of {x!r}")
