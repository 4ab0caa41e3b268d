"""Symbolic-size arithmetic of the lowering: export's nodes that compute on sizes, not tensors
(``sym_size``, size arithmetic, comparisons and logic, ratios and their rounding, export's
assertions), their values (dimension expressions, ``SizeRatio``, ``ScaledSize``,
``DimPredicate``), one spelling per size value (``Spellings``), and export's sympy sizes as graph
dims (``to_dim``)."""

from __future__ import annotations

import math
import operator
from typing import Any, Mapping

import torch
import torch.fx as fx

from ..dims import Expr, Lit, Var, as_expr, lit
from ..dims.expr import flat_quotients, rounded_up
from ..errors import ShapeError, UnsupportedOp
from ..ir.graph import Graph, Value
from .capture import is_symbolic
from .common import Cx, DimPredicate, NoDimForm, NoFallback, find, tensor_arg, wrap_axis
from .nodes import describe, show, where
from .ops.library import scaled_size


NO_OPS = {"_assert_tensor_metadata", "sym_constrain_range_for_size", "sym_constrain_range",
           "_assert_async"}
"""ATen nodes that compute nothing the compiled program needs (export's metadata checks)."""

_SIZE_FNS = {"sym_size", "sym_numel"}
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
    until ``math.trunc`` or ``math.floor`` makes it a size again (``scaled_size``: the
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
        return scaled_size(cx, self.size, scale, "a size times a float, rounded to a size")

    def __repr__(self) -> str:
        return f"float({self.size!r})" + ("" if self.scale is None else f" * {self.scale!r}")


_SCALED_USES = {operator.mul, math.trunc, math.floor}
"""What a ``ScaledSize`` lowers under (``mul`` once)."""


_SIZE_CMP = {operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=",
             operator.gt: ">", operator.ge: ">="}
_SIZE_LOGIC = {operator.or_: DimPredicate.either, operator.and_: DimPredicate.both,
               torch.sym_not: lambda p: p.negate() if isinstance(p, DimPredicate) else not p}
"""Logic on size predicates (export's runtime assertions on unbacked sizes)."""


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


TENSORS = object()
"""``on_sizes``: the node computes on tensors (a lowering's job)."""

SIZE_TARGETS = {operator.truediv, operator.pow, *_SIZE_ARITH, *_SIZE_CMP, *_SIZE_LOGIC,
                 *_SIZE_ROUND, *_SCALED_USES, torch.sym_float}
SIZE_PACKETS = {*NO_OPS, *_SIZE_FNS, "_assert_scalar", "sym_storage_offset"}
"""The Python targets and ATen packets ``on_sizes`` computes (on sizes; the arithmetic, the
comparisons and the logic on tensors go to the lowerings)."""


def on_sizes(g: Graph, n: fx.Node, t, name: str, args: tuple, kwargs: dict,
              spell: Spellings) -> Any:
    """The value of ``n`` where it computes on sizes, not tensors (size arithmetic, comparisons
    and logic, ratios and their rounding, ``sym_size``/``sym_numel``, export's assertions and
    metadata checks: None), else ``TENSORS``."""
    if t not in _SIZE_ROUND and find((args, tuple(kwargs.values())), SizeRatio) is not None:
        raise NoFallback(f"'{n.name}' at {where(n)}: {describe(n)} of a ratio of sizes "
                         f"{show(args, {})} (a ratio of sizes lowers only under math.ceil or "
                         f"math.floor; no eager op takes it from the host program)")
    scaled = find((args, tuple(kwargs.values())), ScaledSize)
    if scaled is not None and (t not in _SCALED_USES or any(isinstance(a, Value) for a in args)):
        raise NoFallback(f"'{n.name}' at {where(n)}: {describe(n)} of a size as a float "
                         f"{show(args, {})} (it lowers only times a Python number under "
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
    if name in NO_OPS:
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
    return TENSORS


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
    raise NoFallback(f"'{n.name}' at {where(n)}: {describe(n)} {show((base, exp), {})}: a "
                     f"power of a size lowers only with a literal exponent >= 0 (a product)")


def _size_extremum(g: Graph, n: fx.Node, args: tuple) -> Any:
    """``sym_min``/``sym_max`` of sizes, one of them symbolic (GPT-Neo's local attention window:
    ``min(window, seq)``): the operand the example takes, its order against the other checked on
    the host before any launch, as a branch the trace took is (dims have no min/max)."""
    try:
        a, b = (as_expr(x).evaluate(g.examples) for x in args)   # the example's sizes
    except (KeyError, ValueError):
        raise UnsupportedOp(f"'{n.name}' at {where(n)}: {describe(n)} of sizes "
                            f"{show(args, {})} without example values") from None
    low = n.target is torch.sym_min
    k = 0 if (a <= b) == low else 1
    keep, other = as_expr(args[k]), as_expr(args[1 - k])
    g.require(other - keep if low else keep - other, n.name,
              f"{'min' if low else 'max'}({args[0]}, {args[1]}) is {keep} as traced "
              f"(torch.{n.target.__name__}: {keep} {'<=' if low else '>='} {other})", where(n))
    return keep


def to_dim(size: Any, symbols: dict, what: str) -> Any:
    """A size export derived (an int, or a SymInt over the inputs' symbols) as a graph dim."""
    if not is_symbolic(size):
        return lit(int(size))
    return sym_dim(size.node.expr, symbols, f"{what}: result size {size}")


def sym_dim(e: Any, symbols: dict, what: str, hint: Mapping | None = None,
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
