"""Lowerings of tensor basics (elementwise, casts, views, reductions, sizes), each with torch's
signature after the lowering context: ``bridge.aten`` binds an ATen node's arguments to them.
Axes follow torch's wrapping rules and are checked."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..dims import prod
from ..errors import DTypeError, ShapeError, UnsupportedOp
from ..ir.graph import Value
from .common import axes_arg, operand, refuse, tensor_arg, wrap_axis


# --- lowerings (torch's signatures) ------------------------------------------------------------------

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


def row_major(memory_format: Any) -> None:
    """Outputs are row-major: ``preserve_format`` and ``contiguous_format`` give the same values
    and strides as eager for the contiguous tensors the thunk works on; others are refused."""
    if memory_format not in (torch.preserve_format, torch.contiguous_format):
        raise UnsupportedOp(f"memory_format={memory_format} unsupported (outputs are row-major)")


def _l_type_as(cx, input, other):
    return cx.cast(tensor_arg(input), tensor_arg(other, "other").dtype)


def _l_reshape(cx, input, shape):
    return cx.apply("reshape", tensor_arg(input), shape=tuple(shape))


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


LOWERINGS: dict[str, Callable] = {
    "contiguous": _l_contiguous, "relu": _l_relu,
    **{op: _unary(op) for op in ("neg", "abs", "exp", "sigmoid", "tanh", "logical_not", "log",
                                 "sqrt", "rsqrt", "erf", "trunc")},
    **{op: _binary(op) for op in ("mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
                                  "logical_and", "logical_or")},
    "add": _additive("add"), "sub": _additive("sub"), "div": _l_div, "where": _l_where,
    "bitwise_not": _boolean("logical_not"), "bitwise_and": _boolean("logical_and"),
    "bitwise_or": _boolean("logical_or"), "type_as": _l_type_as,
    "reshape": _l_reshape, "flatten": _l_flatten, "permute": _l_permute,
    "transpose": _l_transpose,
    "sum": _reduction("sum", None), "mean": _reduction("mean", None),
    "amax": _reduction("amax", ()),
}
"""Lowering name -> function with torch's signature (after the context argument)."""
