"""What every lowering uses: the lowering context (graph, fx node name, source line) and argument
checks that follow torch's rules (axis wrapping, reduction axes, tensor and scalar operands)."""

from __future__ import annotations

from typing import Any

import torch

from ..dims import Expr, Lit, as_expr
from ..errors import DTypeError, ShapeError, UnsupportedOp
from ..ir.graph import Graph, Value
from ..ir.ops import Ops, OpDef


class Cx:
    """What a lowering sees: the graph and the fx node's name and source line."""

    def __init__(self, g: Graph, name: str, where: str):
        self.g, self.name, self.where = g, name, where
        self.n = 0

    def apply(self, op: OpDef, *inputs: Any, **attrs: Any) -> Value:
        """Append IR op ``op`` (an ``ir.ops.O`` constant); the first op of a lowering carries the fx node's name, further
        ones ``<name>_2``, ``<name>_3``..."""
        self.n += 1
        return self.g.apply(op, *inputs, name=f"{self.name}" if self.n == 1 else
                            f"{self.name}_{self.n}", where=self.where, **attrs)

    def param(self, t: torch.Tensor | None, what: str) -> Value | None:
        """A module parameter or buffer as a graph constant (None stays None)."""
        if t is None:
            return None
        if not isinstance(t, torch.Tensor):
            raise UnsupportedOp(f"{what} is a {type(t).__name__}, not a tensor")
        return self.g.constant(f"{self.name}.{what}", t)

    def cast(self, x: Value, dtype: torch.dtype) -> Value:
        return x if x.dtype == dtype else self.apply(Ops.to, x, dtype=dtype)


def wrap_axis(a: Any, rank: int, what: str = "dim") -> int:
    """torch's axis wrapping: ``-rank <= a < rank`` (a 0-d tensor admits -1 and 0)."""
    r = max(rank, 1)
    if isinstance(a, Lit):
        a = a.value
    if isinstance(a, bool) or not isinstance(a, int):
        raise ShapeError(f"{what} {a!r} is not an integer")
    if not -r <= a < r:
        raise ShapeError(f"{what} {a} out of range for a rank-{rank} tensor (expected in "
                         f"[{-r}, {r - 1}])")
    return a % r


def axes_arg(dims: Any, rank: int) -> tuple[int, ...]:
    """Reduction axes: None or an empty list mean every axis; duplicates are an error."""
    if dims is None:
        return tuple(range(rank))
    if not isinstance(dims, (tuple, list)):
        dims = (dims,)
    if not dims:
        return tuple(range(rank))
    out = [wrap_axis(d, rank) for d in dims]
    for a in out:
        if out.count(a) > 1:
            raise ShapeError(f"dim {a} appears multiple times in the list of dims {list(dims)}")
    return tuple(sorted(out)) if rank else ()


def tensor_arg(x: Any, what: str = "input") -> Value:
    if not isinstance(x, Value):
        raise UnsupportedOp(f"{what} {x!r} is not a tensor")
    return x


def operand(x: Any) -> Value | bool | int | float:
    """A tensor operand or a Python number; a literal dimension is a number, a symbolic one is not
    supported as a tensor value."""
    if isinstance(x, Lit):
        return x.value
    if isinstance(x, Expr):
        raise UnsupportedOp(f"dimension {x!r} used as a tensor value (only literal sizes can be)")
    if isinstance(x, (Value, bool, int, float)):
        return x
    raise UnsupportedOp(f"operand {x!r} is neither a tensor nor a Python number")


def dim_arg(x: Any, what: str) -> Expr:
    """A size argument (slice bound, pad width, section size): a Python int or a dimension
    expression; a tensor (a data-dependent size) or anything else is ``UnsupportedOp``."""
    if isinstance(x, Value):
        raise UnsupportedOp(f"{what} is a tensor (a data-dependent size); only Python ints and "
                            f"sizes of tensors are supported")
    if isinstance(x, bool) or not isinstance(x, (int, Expr)):
        raise UnsupportedOp(f"{what} {x!r} is not an integer")
    return as_expr(x)


def constant_int(cx: Cx, x: Value, what: str) -> int:
    """The value of a 0-d integer tensor that is a graph constant (a module buffer or parameter,
    read at trace time); a program input or a computed tensor is a data-dependent size
    (``UnsupportedOp``)."""
    t = next((c for v, c in cx.g.constants if v is x), None)
    if t is None:
        raise UnsupportedOp(f"{what} is the tensor '{x.name}', an input or a computed value (a "
                            f"data-dependent size); only constant tensors (module buffers and "
                            f"parameters) are read at trace time")
    if t.dim() != 0 or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype is torch.bool:
        raise DTypeError(f"{what} must be a 0-d integer tensor, got a {t.dim()}-d "
                         f"{str(t.dtype).removeprefix('torch.')} tensor (torch rejects it)")
    return int(t)


def pair(v: Any, what: str) -> tuple[int, int]:
    """An int or a pair of ints (a kernel size, stride, padding or dilation) as a pair."""
    v = (v, v) if isinstance(v, int) else tuple(v)
    if len(v) == 1:
        v = (v[0], v[0])
    if len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise UnsupportedOp(f"{what}={v!r}: expected an int or a pair of ints")
    return v


def channel_bias(cx: Cx, y: Value, bias: Any, axis: int) -> Value:
    """``y + bias`` with a 1-D ``bias`` along ``axis`` of ``y``."""
    if bias is None:
        return y
    b = tensor_arg(bias, "bias")
    trailing = y.rank - axis - 1
    if trailing:
        b = cx.apply(Ops.reshape, b, shape=(*cx.g.dims(b), *[1] * trailing))
    return cx.apply(Ops.add, y, b)


def number(x: Any, what: str) -> bool | int | float:
    """A Python number argument (a literal size is one; a symbolic size or a tensor is not)."""
    if isinstance(x, Lit):
        return x.value
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, Expr):
        raise UnsupportedOp(f"{what} is the symbolic size {x!r}; only Python numbers are "
                            f"supported here")
    raise UnsupportedOp(f"{what} {x!r} is not a Python number")


def probe(*xs: Any) -> list:
    """Operands as torch sees them for type promotion: one-element tensors and Python scalars."""
    return [torch.zeros((1,) * x.rank, dtype=x.dtype) if isinstance(x, Value) else x for x in xs]


def result_type(*xs: Any) -> torch.dtype:
    """torch's promoted dtype of the operands (``DTypeError`` where torch rejects them)."""
    try:
        return torch.result_type(*probe(*xs))
    except (RuntimeError, TypeError) as err:
        raise DTypeError(f"torch rejects the operand dtypes: {str(err).splitlines()[0]}") \
            from None


def row_major(memory_format: Any) -> None:
    """Outputs are row-major: ``preserve_format`` and ``contiguous_format`` give the same values
    and strides as eager for the contiguous tensors the thunk works on; others are refused."""
    if memory_format not in (torch.preserve_format, torch.contiguous_format):
        raise UnsupportedOp(f"memory_format={memory_format} unsupported (outputs are row-major)")


def refuse(**kw: Any) -> None:
    """Refuse arguments the lowering does not support (value differs from the default)."""
    for k, (v, default) in kw.items():
        if v is not default and v != default:
            raise UnsupportedOp(f"{k}={v!r} unsupported")


def shape_arg(shape: tuple, kwargs: dict, key: str) -> tuple:
    """``view(2, 3)``, ``view((2, 3))`` and ``view(size=(2, 3))`` alike."""
    if key in kwargs and not shape:
        shape = (kwargs.pop(key),)
    if kwargs:
        raise UnsupportedOp(f"unexpected arguments {kwargs}")
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)




class Unavailable:
    """A result a lowering does not compute (the indices of ``max(x, dim)``, whose values it
    does): the bridge refuses any node that uses it, by name (``NoFallback``)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self) -> str:
        return f"<{self.what}: not computed>"



def find(args, cls: type) -> Any:
    """The first instance of ``cls`` in ``args`` (nested lists and tuples searched), or None."""
    if isinstance(args, cls):
        return args
    if isinstance(args, (list, tuple)):
        return next((u for u in (find(a, cls) for a in args) if u is not None), None)
    return None


class NoFallback(UnsupportedOp):
    """A refusal no eager fallback can mend: the node uses a value only the lowering holds (an
    ``Unavailable`` result, a ratio of sizes), which no eager op can be given."""


class NoDimForm(UnsupportedOp):
    """A size export derived that has no dim expression (``floor(0.7 * H)``, ``ceil(W / 0.5)``):
    ``symbols`` names export's size symbols in it. Under ``dynamic="auto"`` the compile makes
    the input axes they size static and tries again."""

    def __init__(self, msg: str, symbols: frozenset[str] = frozenset(), **kw):
        super().__init__(msg, **kw)
        self.symbols = symbols


class DimPredicate:
    """A comparison of sizes (``h == 224``) traced by fx, for ``torch._assert``."""

    _NEG = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}

    def __init__(self, op: str, lhs: Expr, rhs: Expr):
        self.op, self.lhs, self.rhs = op, lhs, rhs

    @staticmethod
    def of(op: str, lhs: Any, rhs: Any) -> "DimPredicate | bool":
        if not isinstance(lhs, Expr) and not isinstance(rhs, Expr):
            return {"==": lhs == rhs, "!=": lhs != rhs, "<": lhs < rhs, "<=": lhs <= rhs,
                    ">": lhs > rhs, ">=": lhs >= rhs}[op]
        return DimPredicate(op, as_expr(lhs), as_expr(rhs))

    @staticmethod
    def either(p: "DimPredicate | bool", q: "DimPredicate | bool") -> "DimPredicate | bool":
        """``p | q`` (``operator.or_`` on size predicates, as export's broadcast assertions
        write ``Eq(s0, u0) | Eq(u0, 1)``): a disjunction of equalities is one equality, the
        product of the differences being 0."""
        if p is True or q is True:
            return True
        if p is False or q is False:
            return q if p is False else p
        if p.op in ("==", "==0") and q.op in ("==", "==0"):
            return DimPredicate("==0", (p.lhs - p.rhs) * (q.lhs - q.rhs), as_expr(0))
        raise UnsupportedOp(f"size predicate ({p!r}) | ({q!r}): only a disjunction of equalities")

    @staticmethod
    def both(p: "DimPredicate | bool", q: "DimPredicate | bool") -> "DimPredicate | bool":
        """``p & q``: both imposed."""
        if p is False or q is False:
            return False
        if p is True or q is True:
            return q if p is True else p
        return DimPredicate("&", p, q)

    def negate(self) -> "DimPredicate":
        """``not p`` for a comparison."""
        if self.op not in self._NEG:
            raise UnsupportedOp(f"size predicate not ({self!r})")
        return DimPredicate(self._NEG[self.op], self.lhs, self.rhs)

    def impose(self, cx: Cx, detail: str) -> None:
        """Add the predicate to the graph: a constraint (``==``) or a requirement (an inequality;
        a disjunction of equalities ``d == 0`` as ``-d*d >= 0``, checked on the host)."""
        a, b = self.lhs, self.rhs
        if self.op == "&":
            a.impose(cx, detail)
            b.impose(cx, detail)
            return
        if self.op == "==0":
            cx.g.require(-(a * a), "_assert", detail, cx.where)
            return
        if self.op == "==":
            cx.g.constrain(a, b, "_assert", detail, cx.where)
            return
        gap = {"<": b - a - 1, "<=": b - a, ">": a - b - 1, ">=": a - b}.get(self.op)
        if gap is None:
            raise UnsupportedOp(f"size predicate {a!r} {self.op} {b!r}")
        cx.g.require(gap, "_assert", detail, cx.where)

    def __bool__(self) -> bool:
        raise UnsupportedOp(f"size predicate {self!r} used as a Python bool (control flow on a "
                            f"symbolic size)")

    def __repr__(self) -> str:
        if self.op == "&":
            return f"({self.lhs!r}) & ({self.rhs!r})"
        return f"{self.lhs!r} == 0" if self.op == "==0" else f"{self.lhs!r} {self.op} {self.rhs!r}"
