"""Elementwise lowerings: maths, comparisons, logic, activations and casts (each one or a few
elementwise IR ops, fused by kgen into their readers)."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ...errors import DTypeError, ShapeError, UnsupportedOp
from ...ir.graph import Value
from ...ir.ops import Ops
from ..common import number, operand, probe, refuse, result_type, row_major, tensor_arg
from ..registry import NOT_FUZZED, UNLISTED, Fuzz, aten, register
from .factory import filled

BOOL_OR_INT = "bool or integer operands; the fuzzer draws floating tensors"


def _unary(op) -> Callable:
    def lowering(cx, input, *, out=None):
        refuse(out=(out, None))
        return cx.apply(op, tensor_arg(input))
    lowering.__doc__ = f"``{op.name}`` (one elementwise op)."
    return lowering


def _binary(op) -> Callable:
    def lowering(cx, input, other, *, out=None):
        refuse(out=(out, None))
        return cx.apply(op, operand(input), operand(other))
    return lowering


def _unary_map(name: str, fn: Callable) -> Fuzz:
    return Fuzz(name, fn, 1)


def _binary_map(name: str, fn: Callable) -> Fuzz:
    return Fuzz(name, fn, 2)


_UNARY = (  # packet, IR op, OpInfo names, slow, fuzz entries (no entry: why)
    (aten.neg, Ops.neg, ("neg",), False, (_unary_map("neg", torch.neg),)),
    (aten.abs, Ops.abs, ("abs",), False, (_unary_map("abs", torch.abs),)),
    (aten.exp, Ops.exp, ("exp",), False, (_unary_map("expneg", lambda h: torch.exp(-h.abs())),)),
    (aten.sigmoid, Ops.sigmoid, ("sigmoid",), False, (_unary_map("sigmoid", torch.sigmoid),)),
    (aten.tanh, Ops.tanh, ("tanh",), False, (_unary_map("tanh", torch.tanh),)),
    (aten.logical_not, Ops.logical_not, ("logical_not",), False, BOOL_OR_INT),
    (aten.log, Ops.log, ("log",), False, NOT_FUZZED),
    (aten.sqrt, Ops.sqrt, ("sqrt",), False, (_unary_map("sqrt_abs", lambda h: torch.sqrt(h.abs())),)),
    (aten.rsqrt, Ops.rsqrt, ("rsqrt",), False,
     (_unary_map("rsqrt", lambda h: torch.rsqrt(h.abs() + 1)),)),
    (aten.erf, Ops.erf, ("erf",), False, (_unary_map("erf", torch.erf),)),
    (aten.trunc, Ops.trunc, ("trunc",), False, (_unary_map("trunc", torch.trunc),)),
    (aten.sin, Ops.sin, ("sin",), True, (_unary_map("sin", torch.sin),)),
    (aten.cos, Ops.cos, ("cos",), True, (_unary_map("cos", torch.cos),)),
    (aten.log1p, Ops.log1p, ("log1p",), True,
     (_unary_map("log1p_abs", lambda h: torch.log1p(h.abs())),)),
    (aten.expm1, Ops.expm1, ("expm1",), True,
     (_unary_map("expm1_neg", lambda h: torch.expm1(-h.abs())),)),
    (aten.sign, Ops.sign, ("sign",), True, (_unary_map("sign", torch.sign),)),
    (aten.atan, Ops.atan, ("atan",), False, (_unary_map("atan", torch.atan),)),
    (aten.silu, Ops.silu, ("nn.functional.silu",), False, (_unary_map("silu", F.silu),)),
    (aten.hardswish, Ops.hardswish, ("nn.functional.hardswish",), False,
     (_unary_map("hardswish", F.hardswish),)),
    (aten.hardsigmoid, Ops.hardsigmoid, ("nn.functional.hardsigmoid",), False,
     (_unary_map("hardsigmoid", F.hardsigmoid),)),
)
"""One elementwise IR op of one tensor: adding such an op is a row here (and the IR op's row in
``ir/ops/elementwise.py``)."""

_BINARY = (
    (aten.mul, Ops.mul, ("mul",), (_binary_map("mul", torch.mul),
                                 _unary_map("square", lambda h: h * h),
                                 _unary_map("mul_s", lambda h: h * -0.5))),
    (aten.maximum, Ops.maximum, ("maximum",), (_binary_map("maximum", torch.maximum),)),
    (aten.minimum, Ops.minimum, ("minimum",), (_binary_map("minimum", torch.minimum),)),
    *((p, op, (op.name,), BOOL_OR_INT) for p, op in (
        (aten.eq, Ops.eq), (aten.ne, Ops.ne), (aten.lt, Ops.lt), (aten.le, Ops.le), (aten.gt, Ops.gt),
        (aten.ge, Ops.ge), (aten.logical_and, Ops.logical_and), (aten.logical_or, Ops.logical_or))),
)


def _register_table() -> None:
    for packet, op, names, slow, fuzz in _UNARY:
        tested = dict(fuzz=fuzz) if isinstance(fuzz, tuple) else dict(no_fuzz=fuzz)
        register(packet, ir=(op,), opinfo=names, slow=slow, no_opinfo="" if names else UNLISTED,
                 **tested)(_unary(op))
    for packet, op, names, fuzz in _BINARY:
        tested = dict(fuzz=fuzz) if isinstance(fuzz, tuple) else dict(no_fuzz=fuzz)
        register(packet, ir=(op,), opinfo=names, **tested)(_binary(op))


_register_table()


@register(aten.relu, ir=(Ops.relu,), opinfo=("nn.functional.relu",),
          fuzz=(_unary_map("relu", torch.relu),))
def relu(cx, input, inplace=False):
    return cx.apply(Ops.relu, tensor_arg(input))


def _additive(op) -> Callable:
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
            other = cx.apply(Ops.mul, other, alpha) if isinstance(other, Value) else other * alpha
        return cx.apply(op, input, other)
    return lowering


add = register(aten.add, ir=(Ops.add, Ops.mul), opinfo=("add",),
               fuzz=(_binary_map("add", torch.add), _unary_map("add_s", lambda h: h + 1.5)))(
    _additive(Ops.add))
sub = register(aten.sub, ir=(Ops.sub, Ops.mul), opinfo=("sub",),
               fuzz=(_binary_map("sub", torch.sub),))(_additive(Ops.sub))


@register(aten.rsub, ir=(Ops.sub, Ops.mul), opinfo=("rsub",),
          fuzz=(_unary_map("rsub_s", lambda h: 2.0 - h),))
def rsub(cx, input, other, alpha=1):
    """``other - alpha * input`` (``2.0 - x``)."""
    return sub(cx, other, input, alpha=alpha)


@register(aten.div, aten.true_divide, ir=(Ops.div, Ops.trunc, Ops.div_floor, Ops.div_floor_f16,
                                           Ops.div_floor_bf16, Ops.div_trunc_int, Ops.div_floor_int),
          opinfo=("div", "true_divide"),
          fuzz=(_binary_map("div", lambda a, b: a / (b.abs() + 1.0)),))
def div(cx, input, other, *, rounding_mode=None, out=None):
    """``rounding_mode`` 'trunc' / 'floor': floating operands round the quotient as torch does;
    integral ones divide exactly (C truncation, floor division) by a non-zero Python int. An
    integral tensor divisor is refused: eager raises on a zero divisor, a kernel cannot."""
    refuse(out=(out, None))
    a, b = operand(input), operand(other)
    if rounding_mode is None or not any(isinstance(x, Value) for x in (a, b)):
        return cx.apply(Ops.div, a, b)
    if rounding_mode not in ("trunc", "floor"):
        raise UnsupportedOp(f"rounding_mode={rounding_mode!r} (torch takes None, 'trunc' or "
                            f"'floor')")
    dtype = torch.result_type(*probe(a, b))
    if dtype.is_floating_point:   # 16-bit floor: every step rounded, as eager computes it
        if rounding_mode == "trunc":
            return cx.apply(Ops.trunc, cx.apply(Ops.div, a, b))
        return cx.apply({torch.float16: Ops.div_floor_f16, torch.bfloat16: Ops.div_floor_bf16}.get(
            dtype, Ops.div_floor), a, b)
    if isinstance(b, Value):
        raise UnsupportedOp(f"integer division (rounding_mode={rounding_mode!r}) by a tensor: "
                            f"eager raises on a zero divisor, a generated kernel cannot check "
                            f"it; divide by a Python int or in a floating dtype")
    if b == 0:
        raise UnsupportedOp("integer division by zero (eager raises ZeroDivisionError)")
    return cx.apply(Ops.div_trunc_int if rounding_mode == "trunc" else Ops.div_floor_int, a, b)


@register(aten.reciprocal, ir=(Ops.div,), opinfo=("reciprocal",),
          fuzz=(_unary_map("recip", lambda h: 1.0 / (1.0 + h.abs())),))
def reciprocal(cx, input):
    """``1 / x`` (``1.0 / x``; integers promote to the default float dtype, as torch does)."""
    return div(cx, 1.0, input)


def _boolean(op) -> Callable:
    """``~``, ``&``, ``|``: logical on bool tensors; bitwise integer ops are unsupported."""
    def lowering(cx, input, *others):
        xs = [operand(a) for a in (input, *others)]
        if any(not (x.dtype is torch.bool if isinstance(x, Value) else isinstance(x, bool))
               for x in xs):
            raise UnsupportedOp("bitwise ops are supported on bool operands only")
        return cx.apply(op, *xs)
    return lowering


register(aten.bitwise_not, ir=(Ops.logical_not,), opinfo=("bitwise_not",),
         no_fuzz=BOOL_OR_INT)(_boolean(Ops.logical_not))
register(aten.bitwise_and, aten.__and__, ir=(Ops.logical_and,), opinfo=("bitwise_and",),
         no_fuzz=BOOL_OR_INT)(_boolean(Ops.logical_and))
register(aten.bitwise_or, aten.__or__, ir=(Ops.logical_or,), opinfo=("bitwise_or",),
         no_fuzz=BOOL_OR_INT)(_boolean(Ops.logical_or))


@register(aten.where, ir=(Ops.where,), opinfo=("where",),
          fuzz=(_binary_map("where", lambda a, b: torch.where(a > 0, a, b)),
                _unary_map("cmp_where", lambda h: torch.where(h > 0.3, h, -h * 0.5))))
def where(cx, condition, input, other, *, out=None):
    refuse(out=(out, None))
    return cx.apply(Ops.where, tensor_arg(condition, "condition"), operand(input), operand(other))


# --- casts ---------------------------------------------------------------------------------------

@register(aten.to, ir=(Ops.to,), opinfo=("to", "float", "double", "half", "bfloat16", "long",
                                        "int", "bool", "byte", "char", "short"),
          fuzz=("cast",))
def to(cx, input, *args, dtype=None, layout=None, device=None, pin_memory=None,
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
    row_major(memory_format or torch.preserve_format)
    dtype = dtype or x.dtype
    return cx.apply(Ops.to, x, dtype=dtype) if copy else cx.cast(x, dtype)


@register(aten._to_copy, ir=(Ops.to,), no_opinfo="the ``to`` samples reach it (export's copy)",
          no_fuzz="the ``cast`` entry reaches it")
def to_copy(cx, input, *, dtype=None, layout=None, device=None, pin_memory=None,
            non_blocking=False, memory_format=None):
    return to(cx, input, dtype=dtype, layout=layout, device=device, copy=True,
              memory_format=memory_format)


@register(aten.type_as, ir=(Ops.to,), no_opinfo=UNLISTED, no_fuzz=NOT_FUZZED)
def type_as(cx, input, other):
    return cx.cast(tensor_arg(input), tensor_arg(other, "other").dtype)


# --- activations ---------------------------------------------------------------------------------

@register(aten.hardtanh, ir=(Ops.clamp,), opinfo=("nn.functional.hardtanh",), no_fuzz=NOT_FUZZED)
def hardtanh(cx, input, min_val=-1.0, max_val=1.0, inplace=False):
    """``clamp`` keeping the input's dtype: on integers torch truncates the bounds to ints."""
    x = tensor_arg(input)
    if x.dtype is torch.bool:
        raise DTypeError("hardtanh of bool (torch rejects it)")
    if not x.dtype.is_floating_point:
        min_val, max_val = int(min_val), int(max_val)
    return cx.apply(Ops.clamp, x, min_val, max_val)


@register(aten.relu6, ir=(Ops.clamp,), opinfo=("nn.functional.relu6",), no_fuzz=NOT_FUZZED)
def relu6(cx, input, inplace=False):
    return hardtanh(cx, input, 0.0, 6.0)


@register(aten.gelu, ir=(Ops.gelu, Ops.gelu_tanh), opinfo=("nn.functional.gelu",),
          fuzz=(_unary_map("gelu", F.gelu),))
def gelu(cx, input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise UnsupportedOp(f"approximate={approximate!r}")
    return cx.apply(Ops.gelu if approximate == "none" else Ops.gelu_tanh, tensor_arg(input))


@register(aten.clamp, aten.clip, ir=(Ops.clamp, Ops.maximum, Ops.minimum), opinfo=("clamp",),
          fuzz=(_unary_map("clamp", lambda h: h.clamp(-0.5, 0.75)),))
def clamp(cx, input, min=None, max=None, *, out=None):
    refuse(out=(out, None))
    x = tensor_arg(input)
    lo, hi = (None if b is None else operand(b) for b in (min, max))
    if lo is None and hi is None:
        raise UnsupportedOp("clamp needs min or max")
    if lo is not None and hi is not None and not isinstance(lo, Value) and \
            not isinstance(hi, Value):
        return cx.apply(Ops.clamp, x, lo, hi)
    # the open side of a one-sided scalar clamp: the extreme of x's dtype, so no promotion
    top, bottom = (float("inf"), float("-inf")) if x.dtype.is_floating_point else \
        (torch.iinfo(x.dtype).max, torch.iinfo(x.dtype).min) if x.dtype != torch.bool else (1, 0)
    if lo is not None:
        x = cx.apply(Ops.maximum, x, lo) if isinstance(lo, Value) else cx.apply(Ops.clamp, x, lo, top)
    if hi is not None:
        x = cx.apply(Ops.minimum, x, hi) if isinstance(hi, Value) else cx.apply(Ops.clamp, x, bottom,
                                                                              hi)
    return x


@register(aten.leaky_relu, ir=(Ops.where, Ops.gt, Ops.mul), opinfo=("nn.functional.leaky_relu",),
          slow=True, no_fuzz=NOT_FUZZED)
def leaky_relu(cx, input, negative_slope=0.01):
    """``where(x > 0, x, x * slope)``: one product rounded, as eager's kernel rounds its one
    (floats only, as torch)."""
    x = tensor_arg(input)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"leaky_relu of {x.dtype} (torch takes floating inputs only)")
    return cx.apply(Ops.where, cx.apply(Ops.gt, x, 0), x,
                    cx.apply(Ops.mul, x, number(negative_slope, "negative_slope")))


# --- pow -----------------------------------------------------------------------------------------

def _special_pow(cx, x: Value, e: float, dtype: torch.dtype) -> Value | None:
    """Eager's CPU ``pow(tensor, scalar)`` special cases for a floating result (PyTorch's
    ``pow_tensor_scalar_optimized_kernel``): 2 and 3 multiply, 0.5 is sqrt, -0.5 ``1 / sqrt``, -1 a
    reciprocal, -2 the reciprocal of the square; None for the general case."""
    x = cx.cast(x, dtype)
    if e == 2:
        return cx.apply(Ops.mul, x, x)
    if e == 3:
        return cx.apply(Ops.mul, cx.apply(Ops.mul, x, x), x)
    if e == 0.5:
        return cx.apply(Ops.sqrt, x)
    if e == -0.5:   # eager's CPU rsqrt is 1 / sqrt (the rsqrt op's CUDA spelling approximates)
        return cx.apply(Ops.div, 1.0, cx.apply(Ops.sqrt, x))
    if e == -1:
        return cx.apply(Ops.div, 1.0, x)
    if e == -2:
        return cx.apply(Ops.div, 1.0, cx.apply(Ops.mul, x, x))
    return None


def _int_power(cx, x: Value, k: int) -> Value:
    """``x ** k`` for a literal ``k >= 1`` by repeated squaring (integer multiplication wraps as
    eager's does, and is associative, so the result is eager's bit for bit)."""
    out, sq = None, x
    while k:
        if k & 1:
            out = sq if out is None else cx.apply(Ops.mul, out, sq)
        k >>= 1
        if k:
            sq = cx.apply(Ops.mul, sq, sq)
    return out


@register(aten.pow, ir=(Ops.pow, Ops.mul, Ops.sqrt, Ops.div), opinfo=("pow",), slow=True,
          fuzz=(_unary_map("pow", lambda h: h.abs() ** 1.5),))
def power(cx, input, exponent):
    """``pow.Tensor_Tensor``, ``pow.Tensor_Scalar``, ``pow.Scalar`` as eager computes them:
    floats by std::pow, eager's special scalar exponents (2, 3, +-0.5, -1, -2) as its CPU kernel
    computes them, 1 the input, 0 ones; integers to a literal exponent by multiplications. An
    integer tensor exponent of an integer result is refused (no generated integer pow), and so
    is a negative literal one (eager raises)."""
    a, b = operand(input), operand(exponent)
    dtype = result_type(a, b)
    if dtype is torch.bool or dtype.is_complex:
        raise DTypeError(f"pow in {dtype} unsupported")
    if isinstance(a, Value) and not isinstance(b, Value):
        b = int(b) if isinstance(b, bool) else b
        if b == 0:
            return filled(cx, cx.g.dims(a), 1, dtype)
        if b == 1:
            return cx.cast(a, dtype)
        if dtype.is_floating_point:
            y = _special_pow(cx, a, b, dtype)
            if y is not None:
                return y
        elif b < 0:
            raise DTypeError(f"integer tensor to the negative power {b} (torch rejects it)")
        else:
            return _int_power(cx, cx.cast(a, dtype), int(b))
    if not dtype.is_floating_point:
        raise UnsupportedOp("integer pow with a tensor exponent unsupported (integer powers "
                            "by a Python int are supported)")
    return cx.apply(Ops.pow, a, b)


@register(aten.float_power, ir=(Ops.pow, Ops.to), opinfo=("float_power",), no_fuzz=NOT_FUZZED)
def float_power(cx, input, exponent):
    """``float_power``: pow in float64."""
    a, b = operand(input), operand(exponent)
    a = cx.cast(a, torch.float64) if isinstance(a, Value) else float(a)
    b = cx.cast(b, torch.float64) if isinstance(b, Value) else float(b)
    return power(cx, a, b)


# --- rounding, remainder, logic ------------------------------------------------------------------

def _rounding(op) -> Callable:
    def lowering(cx, input):
        x = tensor_arg(input)
        return cx.apply(op, x) if x.dtype.is_floating_point else x   # integers: themselves
    lowering.__doc__ = f"``{op.name}``; integer inputs are returned unchanged, as torch does."
    return lowering


register(aten.floor, ir=(Ops.floor,), opinfo=("floor",), slow=True,
         fuzz=(_unary_map("floor", torch.floor),))(_rounding(Ops.floor))
register(aten.ceil, ir=(Ops.ceil,), opinfo=("ceil",), slow=True,
         fuzz=(_unary_map("ceil", torch.ceil),))(_rounding(Ops.ceil))


@register(aten.round, ir=(Ops.round,), opinfo=("round",), slow=True,
          fuzz=(_unary_map("round", torch.round),))
def round_half_even(cx, input, *, decimals=0):
    """Half to even (torch.round); integer inputs unchanged; ``decimals`` != 0 is refused."""
    if decimals != 0:
        raise UnsupportedOp(f"round(decimals={decimals!r}) unsupported (decimals=0 only)")
    return _rounding(Ops.round)(cx, input)


@register(aten.masked_fill, ir=(Ops.where, Ops.to), opinfo=("masked_fill",), slow=True,
          no_fuzz=NOT_FUZZED)
def masked_fill(cx, input, mask, value):
    """``where(mask, value, input)`` in the input's dtype (``masked_fill.Scalar``; ``.Tensor``
    with a 0-d value tensor). The mask must be bool (as torch requires) and broadcast to the
    input's shape, which the result keeps."""
    x, m = tensor_arg(input), tensor_arg(mask, "mask")
    if m.dtype is not torch.bool:
        raise DTypeError(f"masked_fill: mask of dtype {m.dtype}, expected torch.bool")
    if isinstance(value, Value):
        if value.rank != 0:
            raise ShapeError(f"masked_fill: value tensor of rank {value.rank}; torch takes a "
                             f"0-d value")
        v: Any = cx.cast(value, x.dtype)
    else:
        v = number(value, "value")   # torch converts the value to the input's dtype
        if x.dtype is torch.bool:
            v = bool(v)
        elif not x.dtype.is_floating_point:
            if isinstance(v, float) and not math.isfinite(v):
                raise DTypeError(f"masked_fill: value {v} cannot be converted to {x.dtype}")
            v = int(v)
        else:
            v = float(v)
    y = cx.apply(Ops.where, m, v, x)
    if cx.g.dims(y) != cx.g.dims(x):
        raise ShapeError(f"masked_fill: mask of shape {list(cx.g.dims(m))} does not broadcast to "
                         f"the input's shape {list(cx.g.dims(x))}")
    return cx.cast(y, x.dtype)


@register(aten.bitwise_xor, aten.__xor__, ir=(Ops.ne, Ops.bitwise_xor_int), opinfo=("bitwise_xor",),
          slow=True, no_fuzz=BOOL_OR_INT)
def bitwise_xor(cx, input, other):
    """``bitwise_xor`` / ``^``: ``!=`` on bools, bitwise on integers."""
    a, b = operand(input), operand(other)
    dtype = result_type(a, b)
    if dtype.is_floating_point or dtype.is_complex:
        raise DTypeError(f"bitwise xor of {dtype} operands (torch rejects it)")
    return cx.apply(Ops.ne if dtype is torch.bool else Ops.bitwise_xor_int, a, b)


@register(aten.remainder, ir=(Ops.remainder, Ops.remainder_int), opinfo=("remainder",), slow=True,
          fuzz=(_unary_map("rem_s", lambda h: torch.remainder(h, 0.7)),))
def remainder(cx, input, other):
    """``remainder.Tensor`` / ``.Scalar`` / ``.Scalar_Tensor`` (Python's ``%``): floats as
    eager's fmod-based kernel; integers by a non-zero Python int (a tensor divisor is refused:
    eager raises on a zero one, a kernel cannot)."""
    a, b = operand(input), operand(other)
    dtype = result_type(a, b)
    if dtype.is_floating_point:
        return cx.apply(Ops.remainder, a, b)
    if dtype is torch.bool or dtype.is_complex:
        raise DTypeError(f"remainder in {dtype} (torch rejects it)")
    if isinstance(b, Value):
        raise UnsupportedOp("integer remainder by a tensor: eager raises on a zero divisor, a "
                            "generated kernel cannot check it; divide by a Python int")
    if b == 0:
        raise UnsupportedOp("integer remainder by zero (eager raises ZeroDivisionError)")
    return cx.apply(Ops.remainder_int, a, b)


@register(aten.logical_xor, ir=(Ops.ne,), opinfo=("logical_xor",), no_fuzz=BOOL_OR_INT)
def logical_xor(cx, input, other):
    """``(input != 0) != (other != 0)`` as bool."""
    def truth(x):
        x = operand(x)
        if isinstance(x, Value):
            return x if x.dtype is torch.bool else cx.apply(Ops.ne, x, 0)
        return bool(x)
    return cx.apply(Ops.ne, truth(input), truth(other))


@register(aten.addcmul, ir=(Ops.mul, Ops.add), opinfo=("addcmul",), slow=True, no_fuzz=NOT_FUZZED)
def addcmul(cx, input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2`` (eager's order: the product, scaled, then added)."""
    x, t1, t2 = tensor_arg(input), tensor_arg(tensor1, "tensor1"), tensor_arg(tensor2, "tensor2")
    p = cx.apply(Ops.mul, t1, t2)
    if value != 1:
        p = cx.apply(Ops.mul, p, number(value, "value"))
    return cx.apply(Ops.add, x, p)


@register(aten.addcdiv, ir=(Ops.div, Ops.mul, Ops.add), opinfo=("addcdiv",), slow=True,
          no_fuzz=NOT_FUZZED)
def addcdiv(cx, input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2``; integer operands are refused (as torch does)."""
    x, t1, t2 = tensor_arg(input), tensor_arg(tensor1, "tensor1"), tensor_arg(tensor2, "tensor2")
    if not result_type(t1, t2).is_floating_point:
        raise DTypeError("addcdiv of integer tensors (torch rejects it)")
    q = cx.apply(Ops.div, t1, t2)
    if value != 1:
        q = cx.apply(Ops.mul, q, number(value, "value"))
    return cx.apply(Ops.add, x, q)
