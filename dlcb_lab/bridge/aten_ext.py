"""ATen lowerings beyond the TorchVision vocabulary, for transformers and timm (see ``bridge.aten``):
pow, the remaining unary maths, remainder, masked_fill, xor, addcmul/addcdiv, min/max/amin, diff;
advanced indexing (``index.Tensor``), flip, repeat, reshape_as, baddbmm; factories (arange,
full/ones/zeros and their ``new_``/``_like`` forms, scalar_tensor) with symbolic sizes; cumsum,
group_norm, conv1d, upsampling, vector norms, var/std.

Each lowering's parameters follow the ATen schema of every overload it serves (``self`` arrives as
``input``). Factories build no host tensor of the result's size: a fill is a one-element constant
expanded (a coordinate transform, fused into its readers); ``arange`` counts in a generated
``prefix_sum`` of the int64 constant 1 (so its values are computed in the kernel, from the output
coordinate). ``device`` is the backend's and ignored; other layouts and pinned memory are refused.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

import torch

from ..dims import Expr, Lit, as_expr, lit, prod
from ..errors import DTypeError, ShapeError, UnsupportedOp
from ..ir.graph import Value
from ..ir.ops.library import UPSAMPLE, upsample_aten
from . import nn as nn_lowerings
from . import tensor as tensor_lowerings
from .common import Cx, Unavailable, axes_arg, dim_arg, operand, tensor_arg, wrap_axis

_L = {**tensor_lowerings.LOWERINGS, **nn_lowerings.LOWERINGS}

PREFIX_SUM_MAX = 64
"""A float cumsum over a literal axis at most this long is generated (``prefix_sum``, fused
with its input chain); longer or symbolic axes call ATen's (``cumsum``, a library op). Integer
cumsums are always generated (library ops take floating operands)."""


# --- helpers ---------------------------------------------------------------------------------

def _probe(*xs: Any) -> list:
    """Operands as torch sees them for type promotion: one-element tensors and Python scalars."""
    return [torch.zeros((1,) * x.rank, dtype=x.dtype) if isinstance(x, Value) else x for x in xs]


def _result_type(*xs: Any) -> torch.dtype:
    try:
        return torch.result_type(*_probe(*xs))
    except (RuntimeError, TypeError) as err:
        raise DTypeError(f"torch rejects the operand dtypes: {str(err).splitlines()[0]}") \
            from None


def _number(x: Any, what: str) -> bool | int | float:
    if isinstance(x, Lit):
        return x.value
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, Expr):
        raise UnsupportedOp(f"{what} is the symbolic size {x!r}; only Python numbers are "
                            f"supported here")
    raise UnsupportedOp(f"{what} {x!r} is not a Python number")


def _factory_args(layout: Any, pin_memory: Any, memory_format: Any = None) -> None:
    if layout not in (None, torch.strided):
        raise UnsupportedOp(f"layout={layout} unsupported (strided tensors only)")
    if pin_memory not in (None, False):
        raise UnsupportedOp("pin_memory=True unsupported (outputs live on the backend's device)")
    if memory_format is not None:
        tensor_lowerings.row_major(memory_format)


def _sizes(size: Any) -> tuple[Expr, ...]:
    if isinstance(size, (int, Expr)) and not isinstance(size, bool):
        size = (size,)
    out = []
    for i, d in enumerate(size):
        e = dim_arg(d, f"size[{i}]")
        if isinstance(e, Lit) and e.value < 0:
            raise ShapeError(f"size[{i}] is {e.value}: negative dimension (torch rejects it)")
        out.append(e)
    return tuple(out)


def _fill(cx: Cx, sizes: tuple[Expr, ...], value: Any, dtype: torch.dtype) -> Value:
    """``value`` in ``dtype`` over ``sizes``: a one-element constant, expanded (no buffer)."""
    value = _number(value, "fill_value")
    try:
        t = torch.full((), value, dtype=dtype)
    except (RuntimeError, TypeError) as err:
        raise DTypeError(f"fill_value {value!r} as {dtype}: {str(err).splitlines()[0]}") from None
    c = cx.g.constant(f"{cx.name}.fill", t)
    return cx.apply("expand", c, sizes=sizes) if sizes else c


def size_value(cx: Cx, e: Expr, what: str) -> Value:
    """The dimension expression ``e`` as a 0-d int64 tensor, counted in a kernel: the sum of the
    constant 1 over ``e`` elements (a loop compilers reduce to ``e``). ``e`` must be
    non-negative (host-checked)."""
    cx.g.require(e, cx.name, f"{what} ({e!r}, used as a value) is non-negative", cx.where)
    one = cx.g.constant(f"{cx.name}.one", torch.ones((), dtype=torch.int64))
    return cx.apply("sum", cx.apply("expand", one, sizes=(e,)), dims=(0,), keepdim=False)


def _default_dtype(value: Any) -> torch.dtype:
    """torch.full's inference from the fill value: bool, int64, or the default float dtype."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, (int, Expr)):
        return torch.int64
    if isinstance(value, complex):
        raise DTypeError("complex fill values are unsupported")
    return torch.get_default_dtype()


# --- elementwise: pow, masked_fill, xor, addcmul / addcdiv -------------------------------------

def _special_pow(cx: Cx, x: Value, e: float, dtype: torch.dtype) -> Value | None:
    """Eager's CPU ``pow(tensor, scalar)`` special cases for a floating result (PyTorch's
    ``pow_tensor_scalar_optimized_kernel``): 2 and 3 multiply, 0.5 is sqrt, -0.5 ``1 / sqrt``, -1 a
    reciprocal, -2 the reciprocal of the square; None for the general case."""
    x = cx.cast(x, dtype)
    if e == 2:
        return cx.apply("mul", x, x)
    if e == 3:
        return cx.apply("mul", cx.apply("mul", x, x), x)
    if e == 0.5:
        return cx.apply("sqrt", x)
    if e == -0.5:   # eager's CPU rsqrt is 1 / sqrt (the rsqrt op's CUDA spelling approximates)
        return cx.apply("div", 1.0, cx.apply("sqrt", x))
    if e == -1:
        return cx.apply("div", 1.0, x)
    if e == -2:
        return cx.apply("div", 1.0, cx.apply("mul", x, x))
    return None


def _int_power(cx: Cx, x: Value, k: int) -> Value:
    """``x ** k`` for a literal ``k >= 1`` by repeated squaring (integer multiplication wraps as
    eager's does, and is associative, so the result is eager's bit for bit)."""
    out, sq = None, x
    while k:
        if k & 1:
            out = sq if out is None else cx.apply("mul", out, sq)
        k >>= 1
        if k:
            sq = cx.apply("mul", sq, sq)
    return out


def _l_pow(cx, input, exponent):
    """``pow.Tensor_Tensor``, ``pow.Tensor_Scalar``, ``pow.Scalar`` as eager computes them:
    floats by std::pow, eager's special scalar exponents (2, 3, +-0.5, -1, -2) as its CPU kernel
    computes them, 1 the input, 0 ones; integers to a literal exponent by multiplications. An
    integer tensor exponent of an integer result is refused (no generated integer pow), and so
    is a negative literal one (eager raises)."""
    a, b = operand(input), operand(exponent)
    dtype = _result_type(a, b)
    if dtype is torch.bool or dtype.is_complex:
        raise DTypeError(f"pow in {dtype} unsupported")
    if isinstance(a, Value) and not isinstance(b, Value):
        b = int(b) if isinstance(b, bool) else b
        if b == 0:
            return _fill(cx, cx.g.dims(a), 1, dtype)
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
    return cx.apply("pow", a, b)


def _l_float_pow(cx, input, exponent):
    """``float_power``: pow in float64."""
    a, b = operand(input), operand(exponent)
    a = cx.cast(a, torch.float64) if isinstance(a, Value) else float(a)
    b = cx.cast(b, torch.float64) if isinstance(b, Value) else float(b)
    return _l_pow(cx, a, b)


def _unary(op: str) -> Callable:
    def lowering(cx, input):
        return cx.apply(op, tensor_arg(input))
    lowering.__doc__ = f"``{op}`` (one elementwise op)."
    return lowering


def _l_leaky_relu(cx, input, negative_slope=0.01):
    """``where(x > 0, x, x * slope)``: one product rounded, as eager's kernel rounds its one
    (floats only, as torch)."""
    x = tensor_arg(input)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"leaky_relu of {x.dtype} (torch takes floating inputs only)")
    return cx.apply("where", cx.apply("gt", x, 0), x,
                    cx.apply("mul", x, _number(negative_slope, "negative_slope")))


def _rounding(op: str) -> Callable:
    def lowering(cx, input):
        x = tensor_arg(input)
        return cx.apply(op, x) if x.dtype.is_floating_point else x   # integers: themselves
    lowering.__doc__ = f"``{op}``; integer inputs are returned unchanged, as torch does."
    return lowering


def _l_round(cx, input, *, decimals=0):
    """Half to even (torch.round); integer inputs unchanged; ``decimals`` != 0 is refused."""
    if decimals != 0:
        raise UnsupportedOp(f"round(decimals={decimals!r}) unsupported (decimals=0 only)")
    return _rounding("round")(cx, input)


def _l_masked_fill(cx, input, mask, value):
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
        v = _number(value, "value")   # torch converts the value to the input's dtype
        if x.dtype is torch.bool:
            v = bool(v)
        elif not x.dtype.is_floating_point:
            if isinstance(v, float) and not math.isfinite(v):
                raise DTypeError(f"masked_fill: value {v} cannot be converted to {x.dtype}")
            v = int(v)
        else:
            v = float(v)
    y = cx.apply("where", m, v, x)
    if cx.g.dims(y) != cx.g.dims(x):
        raise ShapeError(f"masked_fill: mask of shape {list(cx.g.dims(m))} does not broadcast to "
                         f"the input's shape {list(cx.g.dims(x))}")
    return cx.cast(y, x.dtype)


def _l_xor(cx, input, other):
    """``bitwise_xor`` / ``^``: ``!=`` on bools, bitwise on integers."""
    a, b = operand(input), operand(other)
    dtype = _result_type(a, b)
    if dtype.is_floating_point or dtype.is_complex:
        raise DTypeError(f"bitwise xor of {dtype} operands (torch rejects it)")
    return cx.apply("ne" if dtype is torch.bool else "bitwise_xor_int", a, b)


def _l_remainder(cx, input, other):
    """``remainder.Tensor`` / ``.Scalar`` / ``.Scalar_Tensor`` (Python's ``%``): floats as
    eager's fmod-based kernel; integers by a non-zero Python int (a tensor divisor is refused:
    eager raises on a zero one, a kernel cannot)."""
    a, b = operand(input), operand(other)
    dtype = _result_type(a, b)
    if dtype.is_floating_point:
        return cx.apply("remainder", a, b)
    if dtype is torch.bool or dtype.is_complex:
        raise DTypeError(f"remainder in {dtype} (torch rejects it)")
    if isinstance(b, Value):
        raise UnsupportedOp("integer remainder by a tensor: eager raises on a zero divisor, a "
                            "generated kernel cannot check it; divide by a Python int")
    if b == 0:
        raise UnsupportedOp("integer remainder by zero (eager raises ZeroDivisionError)")
    return cx.apply("remainder_int", a, b)


def _l_flip(cx, input, dims):
    """``flip``: a coordinate transform (``D - 1 - c`` on each flipped axis)."""
    x = tensor_arg(input)
    axes = [wrap_axis(d, x.rank) for d in dims]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"flip: dims {list(dims)} repeat an axis")
    return cx.apply("flip", x, dims=tuple(sorted(axes))) if axes and x.rank else x


def _l_logical_xor(cx, input, other):
    """``(input != 0) != (other != 0)`` as bool."""
    def truth(x):
        x = operand(x)
        if isinstance(x, Value):
            return x if x.dtype is torch.bool else cx.apply("ne", x, 0)
        return bool(x)
    return cx.apply("ne", truth(input), truth(other))


def _l_addcmul(cx, input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2`` (eager's order: the product, scaled, then added)."""
    x, t1, t2 = tensor_arg(input), tensor_arg(tensor1, "tensor1"), tensor_arg(tensor2, "tensor2")
    p = cx.apply("mul", t1, t2)
    if value != 1:
        p = cx.apply("mul", p, _number(value, "value"))
    return cx.apply("add", x, p)


def _l_addcdiv(cx, input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2``; integer operands are refused (as torch does)."""
    x, t1, t2 = tensor_arg(input), tensor_arg(tensor1, "tensor1"), tensor_arg(tensor2, "tensor2")
    if not _result_type(t1, t2).is_floating_point:
        raise DTypeError("addcdiv of integer tensors (torch rejects it)")
    q = cx.apply("div", t1, t2)
    if value != 1:
        q = cx.apply("mul", q, _number(value, "value"))
    return cx.apply("add", x, q)


def _extremum(op: str) -> Callable:
    """``max``/``min``: ``.other`` (two tensors) the elementwise maximum/minimum, ``.default`` the
    reduction over every axis (min as ``-amax(-x)``: floats and bools); ``.dim`` its values over
    that axis (VOLO pools tokens by ``x.max(1)[0]``), its indices ``Unavailable``."""
    def lowering(cx, input, other=None, keepdim=False):
        x = tensor_arg(input)
        if isinstance(other, Value):
            return cx.apply("maximum" if op == "max" else "minimum", x, other)
        if other is None:
            return _amin_amax(cx, op, x, tuple(range(x.rank)), False)
        a = wrap_axis(other, x.rank)
        values = _amin_amax(cx, op, x, (a,), bool(keepdim)) if x.rank else x
        return values, Unavailable(f"the indices of {op}(dim={other!r}) (arg{op} is not lowered)")
    return lowering


def _amin_amax(cx: Cx, op: str, x: Value, axes: tuple[int, ...], keepdim: bool) -> Value:
    if op == "max":
        return cx.apply("amax", x, dims=axes, keepdim=keepdim)
    if x.dtype is torch.bool:   # min of bools: not any(not x)
        return cx.apply("logical_not", cx.apply("amax", cx.apply("logical_not", x), dims=axes,
                                                keepdim=keepdim))
    if not x.dtype.is_floating_point:   # -x wraps at the dtype's minimum
        raise UnsupportedOp(f"min / amin of {x.dtype} unsupported (floating and bool only)")
    return cx.apply("neg", cx.apply("amax", cx.apply("neg", x), dims=axes, keepdim=keepdim))


def _l_amin(cx, input, dim=(), keepdim=False):
    """``amin`` as ``-amax(-x)`` (negation is exact on floats, NaN propagates as in amax)."""
    x = tensor_arg(input)
    return _amin_amax(cx, "min", x, axes_arg(dim, x.rank), bool(keepdim))


def _l_diff(cx, input, n=1, dim=-1, prepend=None, append=None):
    """``x[..., 1:] - x[..., :-1]`` along ``dim``, ``n`` times (``!=`` on bools, as torch), after
    concatenating ``prepend`` / ``append``."""
    x = tensor_arg(input)
    if x.rank == 0:
        raise ShapeError("diff expects a tensor of at least one dimension")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ShapeError(f"diff: order n={n!r} must be a non-negative int")
    a = wrap_axis(dim, x.rank)
    if n == 0:   # torch returns the input, prepend and append unused
        return x
    parts = [tensor_arg(t, what) for t, what in ((prepend, "prepend"), (x, "input"),
                                                 (append, "append")) if t is not None]
    if len(parts) > 1:
        x = _L["cat"](cx, parts, a)
    for _ in range(n):
        d = cx.g.dims(x)[a]
        if isinstance(d, Lit) and d.value == 0:   # empty stays empty, however many more times
            break
        if not isinstance(d, Lit):   # torch's extent is max(d - n, 0): one form for d >= n
            cx.g.require(d - 1, cx.name, f"diff of order {n} along axis {a} needs the axis "
                                         f"(with prepend/append) to have at least {n} elements",
                         cx.where)
        hi = nn_lowerings.slice_axis(cx, x, a, 1, None, 1)
        lo = nn_lowerings.slice_axis(cx, x, a, 0, d - 1, 1)
        x = cx.apply("ne" if x.dtype is torch.bool else "sub", hi, lo)
    return x


def _extent(cx: Cx, d: Expr) -> Any:
    """A size as an elementwise operand: a Python int, or counted in a kernel."""
    return d.value if isinstance(d, Lit) else size_value(cx, d, "an indexed axis' extent")


def _l_index(cx, input, indices):
    """``index.Tensor``: advanced indexing by integer index tensors (None: a full slice), with
    torch's placement (adjacent indexed axes are replaced in place by the broadcast index shape,
    separated ones put it first). The indexed axes are flattened into one and read by
    ``index_select`` at the row-major combination of the (broadcast) indices; negative indices
    wrap as in torch, and an index out of its axis (in any component) becomes -1, which the
    host's range check of the index tensor refuses, as eager raises. Boolean masks (a
    data-dependent size) are refused."""
    x = tensor_arg(input)
    idx = list(indices)
    if len(idx) > x.rank:
        raise ShapeError(f"too many indices ({len(idx)}) for a rank-{x.rank} tensor")
    idx += [None] * (x.rank - len(idx))
    pos = [a for a, i in enumerate(idx) if i is not None]
    if not pos:
        return x
    for a in pos:
        t = tensor_arg(idx[a], f"index {a}")
        if t.dtype in (torch.bool, torch.uint8):
            raise UnsupportedOp(f"index {a}: a boolean mask (its result size is data-dependent)")
        if t.dtype.is_floating_point or t.dtype.is_complex:
            raise DTypeError(f"index {a} of dtype {t.dtype}: tensors used as indices must be "
                             f"integer, bool or byte")
    dims = cx.g.dims(x)
    rest = [a for a in range(x.rank) if a not in pos]
    lin: Any = None
    ok: Any = None
    for a in pos:
        d = _extent(cx, dims[a])
        i = cx.cast(idx[a], torch.int64)
        i = cx.apply("where", cx.apply("lt", i, 0), cx.apply("add", i, d), i)
        inside = cx.apply("logical_and", cx.apply("ge", i, 0), cx.apply("lt", i, d))
        ok = inside if ok is None else cx.apply("logical_and", ok, inside)
        lin = i if lin is None else cx.apply("add", cx.apply("mul", lin, d), i)
    lin = cx.apply("where", ok, lin, -1)
    bshape = cx.g.dims(lin)
    xp = x if pos + rest == list(range(x.rank)) else \
        cx.apply("permute", x, dims=tuple(pos + rest))
    xf = cx.apply("reshape", xp, shape=(prod([dims[a] for a in pos]), *(dims[a] for a in rest)))
    flat = cx.apply("reshape", lin, shape=(prod(bshape),))
    y = cx.apply("index_select", xf, flat, dim=0)
    y = cx.apply("reshape", y, shape=(*bshape, *(dims[a] for a in rest)))
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    if adjacent and pos[0] > 0:   # the broadcast axes go where the indexed ones were
        k, b = pos[0], len(bshape)
        perm = (*range(b, b + k), *range(b), *range(b + k, y.rank))
        y = cx.apply("permute", y, dims=perm)
    return y


def _l_repeat(cx, input, repeats):
    """``x.repeat(r0, r1, ...)`` as coordinate transforms: each axis ``d`` viewed as ``[1, d]``,
    expanded to ``[r, d]`` and merged to ``r * d`` (extra leading repeats are new axes)."""
    x = tensor_arg(input)
    reps = [dim_arg(r, f"repeats[{i}]") for i, r in enumerate(repeats)]
    if len(reps) < x.rank:
        raise ShapeError(f"repeat: {len(reps)} repeats for a rank-{x.rank} tensor (at least "
                         f"{x.rank} needed)")
    if any(isinstance(r, Lit) and r.value < 0 for r in reps):
        raise ShapeError(f"repeat: negative repeats {[repr(r) for r in reps]}")
    dims = [lit(1)] * (len(reps) - x.rank) + list(cx.g.dims(x))
    if all(r is lit(1) for r in reps):
        return x if len(reps) == x.rank else cx.apply("reshape", x, shape=tuple(dims))
    pairs = [e for d in dims for e in (lit(1), d)]
    y = cx.apply("reshape", x, shape=tuple(pairs))
    y = cx.apply("expand", y, sizes=tuple(e for r, d in zip(reps, dims) for e in (r, d)))
    return cx.apply("reshape", y, shape=tuple(r * d for r, d in zip(reps, dims)))


def _l_reshape_as(cx, input, other):
    return cx.apply("reshape", tensor_arg(input), shape=cx.g.dims(tensor_arg(other, "other")))


def _l_baddbmm(cx, input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` (rank-3 operands). In float32 and float64
    the product is a library call, the scaling and addition fused into its reader; otherwise
    ATen's baddbmm does it all (the ``baddbmm`` library op): eager rounds a 16-bit sum once,
    where a 16-bit product and an add would round twice, and integer operands are its CPU
    kernel's (cuBLAS takes floats). ``beta == 0`` does not read ``input`` (its NaNs are ignored,
    as torch)."""
    x, a, b = tensor_arg(input), tensor_arg(batch1, "batch1"), tensor_arg(batch2, "batch2")
    if a.rank != 3 or b.rank != 3:
        raise ShapeError(f"baddbmm needs rank-3 batch1 and batch2, got ranks {a.rank}, {b.rank}")
    alpha, beta = _number(alpha, "alpha"), _number(beta, "beta")
    if a.dtype not in (torch.float32, torch.float64):
        return cx.apply("baddbmm", x, a, b, beta=beta, alpha=alpha)
    y = cx.apply("matmul", a, b)
    if alpha != 1:
        y = cx.apply("mul", y, alpha)
    if beta == 0:
        return y
    return cx.apply("add", x if beta == 1 else cx.apply("mul", x, beta), y)


# --- factories ---------------------------------------------------------------------------------

def _l_full(cx, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    _factory_args(layout, pin_memory)
    return _fill(cx, _sizes(size), fill_value, dtype or _default_dtype(fill_value))


def _const_factory(value: int) -> Callable:
    def lowering(cx, size, *, dtype=None, layout=None, device=None, pin_memory=None):
        _factory_args(layout, pin_memory)
        return _fill(cx, _sizes(size), value, dtype or torch.get_default_dtype())
    lowering.__doc__ = f"``{'ones' if value else 'zeros'}(size)`` (default float dtype)."
    return lowering


def _new_factory(value: int | None) -> Callable:
    """``new_ones``/``new_zeros``/``new_empty``: ``size`` in the input's dtype (empty is zeros)."""
    def lowering(cx, input, size, *, dtype=None, layout=None, device=None, pin_memory=None):
        _factory_args(layout, pin_memory)
        return _fill(cx, _sizes(size), value or 0, dtype or tensor_arg(input).dtype)
    return lowering


def _l_new_full(cx, input, size, fill_value, *, dtype=None, layout=None, device=None,
                pin_memory=None):
    _factory_args(layout, pin_memory)
    return _fill(cx, _sizes(size), fill_value, dtype or tensor_arg(input).dtype)


def _like_factory(value: int | None) -> Callable:
    def lowering(cx, input, *, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None):
        _factory_args(layout, pin_memory, memory_format)
        x = tensor_arg(input)
        return _fill(cx, cx.g.dims(x), value or 0, dtype or x.dtype)
    return lowering


def _l_full_like(cx, input, fill_value, *, dtype=None, layout=None, device=None,
                 pin_memory=None, memory_format=None):
    _factory_args(layout, pin_memory, memory_format)
    x = tensor_arg(input)
    return _fill(cx, cx.g.dims(x), fill_value, dtype or x.dtype)


def _l_fill(cx, input, value):
    """``fill`` (``fill_`` writes it in place: a slice of a mask, say): ``value`` (a number or a
    0-d tensor) over ``input``'s shape in its dtype."""
    x = tensor_arg(input)
    if not isinstance(value, Value):
        return _fill(cx, cx.g.dims(x), value, x.dtype)
    if value.rank != 0:
        raise ShapeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                         f"{value.rank} dimensions")
    v = cx.apply("to", value, dtype=x.dtype) if value.dtype != x.dtype else value
    return cx.apply("expand", v, sizes=cx.g.dims(x)) if x.rank else v


def _l_scalar_tensor(cx, s, *, dtype=None, layout=None, device=None, pin_memory=None):
    _factory_args(layout, pin_memory)
    return _fill(cx, (), s, dtype or torch.get_default_dtype())


def _arange_count(start: Any, end: Any, step: Any) -> Expr:
    """torch's length ``ceil((end - start) / step)``; a symbolic bound needs integer ``start``
    and ``step`` (the length is then exact integer arithmetic, host-checked non-negative)."""
    if not any(isinstance(v, Expr) and not isinstance(v, Lit) for v in (start, end, step)):
        s, e, d = (_number(v, n) for v, n in ((start, "start"), (end, "end"), (step, "step")))
        if d == 0:
            raise ShapeError("arange: step must be nonzero")
        if (d > 0 and e < s) or (d < 0 and e > s):
            raise ShapeError(f"arange({s}, {e}, {d}): upper bound and larger bound inconsistent "
                             f"with step sign")
        return lit(math.ceil((float(e) - float(s)) / float(d)))
    for v, n in ((start, "start"), (step, "step")):
        if isinstance(v, float) and not v.is_integer():
            raise UnsupportedOp(f"arange with a symbolic bound and the fractional {n} {v!r} "
                                f"(its length is no integer expression)")
    if isinstance(step, Expr) and not isinstance(step, Lit):
        raise UnsupportedOp(f"arange with the symbolic step {step!r}")
    if isinstance(end, float) and not end.is_integer():
        raise UnsupportedOp(f"arange with a symbolic start and the fractional end {end!r}")
    d = int(_number(step, "step"))
    if d == 0:
        raise ShapeError("arange: step must be nonzero")
    s, e = as_expr(int(start) if isinstance(start, float) else start), \
        as_expr(int(end) if isinstance(end, float) else end)
    span = e - s if d > 0 else s - e
    return span if abs(d) == 1 else (span + abs(d) - 1) // abs(d)


def _l_arange(cx, start=None, end=None, step=1, *, dtype=None, layout=None, device=None,
              pin_memory=None):
    """``arange.default`` (end), ``.start`` (start, end), ``.start_step``: values
    ``start + step * i`` computed in the kernel from ``i``, a generated count (``prefix_sum`` of
    the int64 constant 1, minus 1); floating results as eager's CPU kernel computes them (in
    double; float for 16-bit dtypes), integers exactly. Bounds may be sizes (``arange(S)``,
    ``arange(2, S + 1)``, ``arange(S, 0, -1)``); a symbolic start is counted in a kernel
    (``size_value``)."""
    _factory_args(layout, pin_memory)
    if end is None:
        start, end = 0, start
    if start is None:
        start = 0
    for v, n in ((start, "start"), (end, "end"), (step, "step")):
        if isinstance(v, Value):
            raise UnsupportedOp(f"arange: {n} is a tensor (a data-dependent size)")
        if isinstance(v, bool) or not isinstance(v, (int, float, Expr)):
            raise UnsupportedOp(f"arange: {n} {v!r} is not a number")
    if dtype is None:
        floats = any(isinstance(v, float) for v in (start, end, step))
        dtype = torch.get_default_dtype() if floats else torch.int64
    if dtype is torch.bool or dtype.is_complex:
        raise DTypeError(f"arange in {dtype} unsupported")
    if not dtype.is_floating_point and any(isinstance(v, float) and not v.is_integer()
                                           for v in (start, end, step)):
        raise UnsupportedOp(f"arange in {dtype} with fractional bounds or step")
    n = _arange_count(start, end, step)
    d = _number(step, "step")
    s: Any = start.value if isinstance(start, Lit) else start
    if isinstance(s, Expr):   # a symbolic start: counted in a kernel (non-negative)
        s = size_value(cx, s, "arange's start")
    one = cx.g.constant(f"{cx.name}.one", torch.ones((), dtype=torch.int64))
    i = cx.apply("prefix_sum", cx.apply("expand", one, sizes=(n,)), dim=0)
    i = cx.apply("sub", i, 1)
    if not dtype.is_floating_point:
        if d != 1:
            i = cx.apply("mul", i, int(d))
        if isinstance(s, Value) or s != 0:
            i = cx.apply("add", i, s if isinstance(s, Value) else int(s))
        return cx.cast(i, dtype)
    acc = torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32
    v = cx.cast(i, acc)
    if d != 1:
        v = cx.apply("mul", v, float(d))
    if isinstance(s, Value) or s != 0:
        v = cx.apply("add", v, cx.cast(s, acc) if isinstance(s, Value) else float(s))
    return cx.cast(v, dtype)


# --- cumsum ---------------------------------------------------------------------------------

def _l_cumsum(cx, input, dim, *, dtype=None):
    """Integers (int64 result, as torch) and short literal axes: a generated ``prefix_sum``
    (accumulating in int64 / double, as eager's CPU kernel); long or symbolic float axes:
    ATen's cumsum (library)."""
    x = tensor_arg(input)
    if dtype is not None:
        x = cx.cast(x, dtype)
    a = wrap_axis(dim, x.rank)
    if x.dtype.is_complex:
        raise DTypeError("cumsum of complex tensors unsupported")
    d = cx.g.dims(x)[a] if x.rank else lit(1)
    if not x.dtype.is_floating_point or (isinstance(d, Lit) and d.value <= PREFIX_SUM_MAX):
        return cx.apply("prefix_sum", x, dim=a)
    return cx.apply("cumsum", x, dim=a)


# --- normalization and statistics --------------------------------------------------------------

def _l_group_norm(cx, input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    """[N, C, *] -> [N, G, C/G * prod(*)], normalized per row by the layer-norm kernel (one
    kernel: sum and sum of squares in double), back to [N, C, *], then the per-channel affine."""
    x = tensor_arg(input)
    if x.rank < 2:
        raise ShapeError(f"group_norm needs an input of rank >= 2 [N, C, *], got rank {x.rank}")
    if isinstance(num_groups, bool) or not isinstance(num_groups, int) or num_groups < 1:
        raise ShapeError(f"group_norm: num_groups {num_groups!r} is not a positive int")
    if not x.dtype.is_floating_point:
        raise DTypeError(f"group_norm of {x.dtype} (torch takes floating inputs)")
    dims = cx.g.dims(x)
    c = dims[1]
    if not isinstance(c, Lit):
        raise UnsupportedOp(f"group_norm over the symbolic channel count {c!r}")
    if c.value % num_groups:
        raise ShapeError(f"group_norm: {c.value} channels (input axis 1) not divisible by "
                         f"num_groups {num_groups}")
    rows = cx.apply("reshape", x, shape=(dims[0], num_groups, (c.value // num_groups) *
                                         prod(dims[2:])))
    y = cx.apply("layer_norm", rows, axes=(2,), eps=float(eps))
    y = cx.apply("reshape", y, shape=dims)
    trailing = (1,) * (x.rank - 2)
    for p, op in ((weight, "mul"), (bias, "add")):
        if p is not None:
            p = tensor_arg(p, "weight" if op == "mul" else "bias")
            what = "weight" if op == "mul" else "bias"
            if p.rank != 1:
                raise ShapeError(f"group_norm: {what} of rank {p.rank}, expected [C]")
            cx.g.constrain(cx.g.dims(p)[0], c, "group_norm",
                           f"{what} axis 0 with channels (input axis 1)", cx.where)
            y = cx.apply(op, y, cx.apply("reshape", p, shape=(c, *trailing)) if trailing else p)
    return y


def _correction(unbiased: Any, correction: Any) -> float:
    if correction is not None:
        return float(_number(correction, "correction"))
    return 1.0 if unbiased in (None, True) else 0.0


def _moments(cx: Cx, x: Value, dim: Any, keepdim: bool, corr: float) -> tuple[Value, Value]:
    """(var, mean) over ``dim``: ``sum((x - mean)^2) / max(n - correction, 0)`` (two passes, as
    eager; n <= correction gives inf or NaN, as torch). A symbolic n is counted in the kernel (a
    sum of ones over the reduced axes, in double)."""
    if not x.dtype.is_floating_point:
        raise DTypeError(f"var/std of {x.dtype} (torch takes floating inputs)")
    axes = axes_arg(dim, x.rank)
    mean = cx.apply("mean", x, dims=axes, keepdim=True)
    dev = cx.apply("sub", x, mean)
    ss = cx.apply("sum", cx.apply("mul", dev, dev), dims=axes, keepdim=bool(keepdim))
    n = prod([cx.g.dims(x)[a] for a in axes])
    if isinstance(n, Lit):
        var = cx.apply("div", ss, max(float(n.value) - corr, 0.0))
    else:
        count = cx.cast(size_value(cx, n, "the element count"), torch.float64)
        var = cx.apply("div", ss, cx.apply("relu", cx.apply("sub", count, corr)))
        var = cx.cast(var, ss.dtype)
    if not keepdim:
        mean = cx.apply("reshape", mean, shape=cx.g.dims(var))
    return var, mean


def _l_var(cx, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """``var.default`` (unbiased), ``.dim``, ``.correction``."""
    if isinstance(dim, bool):   # var.default(self, unbiased)
        dim, unbiased = None, dim
    return _moments(cx, tensor_arg(input), dim, keepdim, _correction(unbiased, correction))[0]


def _l_std(cx, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    x = tensor_arg(input)
    return cx.apply("sqrt", _moments(cx, x, dim, keepdim, _correction(unbiased, correction))[0])


def _l_var_mean(cx, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _moments(cx, tensor_arg(input), dim, keepdim, _correction(unbiased, correction))


def _l_std_mean(cx, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    v, m = _l_var_mean(cx, input, dim, unbiased, keepdim, correction=correction)
    return cx.apply("sqrt", v), m


def _vector_norm(cx: Cx, x: Value, ord: Any, dim: Any, keepdim: bool) -> Value:
    """``sum(|x|^ord)^(1/ord)`` over ``dim``; ord 2 as ``sqrt(sum(x*x))``, 1 as ``sum(|x|)``,
    inf / -inf as amax / -amax(-|x|), 0 as a count of non-zeros."""
    if not x.dtype.is_floating_point:
        raise DTypeError(f"vector norm of {x.dtype} (torch takes floating inputs)")
    ord = _number(ord, "ord")
    axes = axes_arg(dim, x.rank)
    keep = bool(keepdim)
    if ord == 2:
        return cx.apply("sqrt", cx.apply("sum", cx.apply("mul", x, x), dims=axes, keepdim=keep))
    a = cx.apply("abs", x)
    if ord == 1:
        return cx.apply("sum", a, dims=axes, keepdim=keep)
    if ord == math.inf:
        return cx.apply("amax", a, dims=axes, keepdim=keep)
    if ord == -math.inf:
        return cx.apply("neg", cx.apply("amax", cx.apply("neg", a), dims=axes, keepdim=keep))
    if ord == 0:
        return cx.apply("sum", cx.cast(cx.apply("ne", x, 0), x.dtype), dims=axes, keepdim=keep)
    s = cx.apply("sum", cx.apply("pow", a, float(ord)), dims=axes, keepdim=keep)
    return cx.apply("pow", s, 1.0 / float(ord))


def _l_linalg_vector_norm(cx, input, ord=2, dim=None, keepdim=False, *, dtype=None):
    x = tensor_arg(input)
    if dtype is not None:
        x = cx.cast(x, dtype)
    return _vector_norm(cx, x, ord, dim, keepdim)


def _l_norm(cx, input, p=2, dim=None, keepdim=False, *, dtype=None):
    """``norm.Scalar``, ``.ScalarOpt_dim``, ``.ScalarOpt_dim_dtype``: a vector norm (p None is
    2; 'fro' is 2, other strings are refused)."""
    if isinstance(p, str):
        if p != "fro":
            raise UnsupportedOp(f"norm(p={p!r}) unsupported")
        p = 2
    x = tensor_arg(input)
    if dtype is not None:
        x = cx.cast(x, dtype)
    return _vector_norm(cx, x, 2 if p is None else p, dim, keepdim)


# --- conv1d, upsampling --------------------------------------------------------------------

def _one(v: Any, what: str) -> int:
    if isinstance(v, (list, tuple)):
        if len(v) != 1:
            raise UnsupportedOp(f"conv1d {what}={list(v)!r}: expected one int")
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, int):
        raise UnsupportedOp(f"conv1d {what}={v!r}: expected an int")
    return v


def _l_conv1d(cx, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """conv1d as conv2d over [N, C, 1, L] with a [O, C/g, 1, K] weight (the same library call);
    an unbatched [C, L] input gets a batch axis of 1, as torch."""
    x, w = tensor_arg(input), tensor_arg(weight, "weight")
    if x.rank not in (2, 3) or w.rank != 3:
        raise ShapeError(f"conv1d needs a rank-2 or rank-3 input and a rank-3 weight, got ranks "
                         f"{x.rank}, {w.rank}")
    batched = x.rank == 3
    xd = cx.g.dims(x)
    x4 = cx.apply("reshape", x, shape=(*xd[:-1], 1, xd[-1]) if batched else (1, xd[0], 1, xd[1]))
    wd = cx.g.dims(w)
    w4 = cx.apply("reshape", w, shape=(wd[0], wd[1], 1, wd[2]))
    if isinstance(padding, str):
        pad: Any = padding
    else:
        pad = (0, _one(padding, "padding"))
    y = _L["conv2d"](cx, x4, w4, bias, (1, _one(stride, "stride")), pad,
                     (1, _one(dilation, "dilation")), groups)
    yd = cx.g.dims(y)
    return cx.apply("reshape", y, shape=(yd[0], yd[1], yd[3]) if batched else (yd[1], yd[3]))


def _short_fraction(s: float) -> Fraction | None:
    """The first convergent p / q (q <= 2^20) of ``s``'s continued fraction whose nearest double
    is ``s`` (1.7 -> 17 / 10), where ``s`` is not below it by a relative error of 2^-54 or more
    (``scaled_size``); else None (0.7: 90 * 0.7 is 62.99... in double)."""
    x, (h0, h1), (k0, k1) = Fraction(s), (0, 1), (1, 0)
    while True:
        a = math.floor(x)
        h0, h1, k0, k1 = h1, a * h1 + h0, k1, a * k1 + k0
        if k1 > 1 << 20:
            return None
        if h1 / k1 == s:   # int / int: correctly rounded
            f = Fraction(h1, k1)
            return None if (f - Fraction(s)) / f >= Fraction(1, 1 << 54) else f
        if x == a:
            return None
        x = 1 / (x - a)


def scaled_size(cx: Cx, d: Expr, scale: float, what: str) -> Expr:
    """``floor(d * scale)`` as torch computes it (the size in double times the scale, rounded
    once, floored: ATen's upsample output size, F.interpolate's recomputed one) as an exact integer
    expression of the size ``d``. A short binary fraction p / q: ``(d * p) // q`` (the product is
    exact). Else the short fraction p / q whose nearest double the scale is (``_short_fraction``):
    ``floor(fl(d * scale)) == (d * p) // q`` while ``d * scale < 2^52 / q - 1`` (a host check: the
    error d * |scale - p / q| is then under 1 / 2q and half a unit in the last place of the product
    under 1 / 2q, so no product crosses an integer it should not reach), provided that a scale
    below p / q is so by a relative error under 2^-54 (then an exact integer d * p / q, less
    that error, rounds back to itself; at 2^-54 or more the scale is refused)."""
    if not scale > 0:
        raise ShapeError(f"{what}: scale factor {scale!r} must be positive")
    if isinstance(d, Lit):
        return lit(math.floor(d.value * scale))
    p, q = float(scale).as_integer_ratio()
    if q <= 1 << 20:
        return d * p if q == 1 else (d * p) // q
    f = _short_fraction(scale)
    if f is None:
        raise UnsupportedOp(f"{what}: floor({d!r} * {scale!r}) of the symbolic size: the scale "
                            f"is no short fraction whose every multiple rounds as the exact one, "
                            f"so the product is no exact integer expression")
    p, q = f.numerator, f.denominator
    bound = math.floor((Fraction(1 << 52, q) - 1) / Fraction(scale)) - 1
    cx.g.require(lit(bound) - d, cx.name, f"{what}: {d!r} <= {bound} (floor({d!r} * {scale!r}) "
                                          f"is ({d!r} * {p}) // {q} exactly up to there)", cx.where)
    return (d * p) // q


_SCALE_NAMES = {1: ("scales",), 2: ("scales_h", "scales_w"), 3: ("scales_d", "scales_h", "scales_w")}
"""The default overloads' per-axis scale parameters, by spatial axes."""


def _upsample_size(cx: Cx, x: Value, k: int, output_size: Any, scales: tuple | None
                   ) -> tuple[Expr, ...]:
    """The output's ``k`` spatial extents: ``output_size``, else ``floor(d * scale)`` per axis."""
    axes = "DHW"[3 - k:]
    if x.rank != k + 2:
        raise ShapeError(f"upsample over {k} spatial axes needs a rank-{k + 2} input "
                         f"[N, C, {', '.join(axes)}], got rank {x.rank}")
    if output_size is not None:
        size = _sizes(output_size)
        if len(size) != k:
            raise ShapeError(f"upsample: output_size {list(size)} needs {k} entries")
        return size
    if scales is None or None in scales:
        raise ShapeError(f"upsample: give output_size or {k} scale factors")
    return tuple(scaled_size(cx, d, s, f"upsample of {a}")
                 for d, s, a in zip(cx.g.dims(x)[2:], scales, axes))


def _upsample_scales(k: int, rest: list, kwargs: dict) -> tuple | None:
    """Per-axis scale factors (float or None; None: none given) from ``.vec``'s
    ``scale_factors`` list or the default overload's ``scales``/``scales_h``/... parameters
    (positional after ``output_size`` [and ``align_corners``], or by name)."""
    names = _SCALE_NAMES[k]
    if "scale_factors" in kwargs or rest and isinstance(rest[0], (list, tuple)):
        sf = kwargs.pop("scale_factors") if "scale_factors" in kwargs else rest.pop(0)
        if sf is not None and len(sf) != k:
            raise ShapeError(f"upsample: scale_factors {list(sf)} needs {k} entries")
        given = tuple(sf) if sf is not None else None
    else:
        if len(rest) > k:
            raise UnsupportedOp(f"upsample over {k} spatial axes: {len(rest)} scale arguments")
        vals = dict(zip(names, rest))
        rest.clear()
        for n in names:
            if n in kwargs:
                vals[n] = kwargs.pop(n)
        given = tuple(vals.get(n) for n in names)
    if rest or kwargs:
        raise UnsupportedOp(f"upsample: unexpected arguments {rest + sorted(kwargs)}")
    if given is None or all(s is None for s in given):
        return None
    return tuple(None if s is None else float(_number(s, "upsample scale")) for s in given)


def _upsample(mode: str, k: int, antialias: bool = False) -> Callable:
    """The lowering of ATen's upsample op of ``mode`` over ``k`` spatial axes, its ``.vec``
    overload (output_size or scale_factors) and its default one (output_size, per-axis scales),
    to the ``upsample`` library op (ATen's kernel), sizes symbolic; ``align_corners`` follows
    ``output_size`` for the linear and cubic modes."""
    corners = mode in ("linear", "cubic")

    def lowering(cx, input, output_size, *args, **kwargs):
        x = tensor_arg(input)
        rest = list(args)
        align = None
        if corners:
            align = bool(kwargs.pop("align_corners") if "align_corners" in kwargs else
                         rest.pop(0) if rest else _no_corners())
        sc = _upsample_scales(k, rest, kwargs)
        size = _upsample_size(cx, x, k, output_size, sc)
        return cx.apply("upsample", x, size=size, scales=sc, mode=mode, align_corners=align,
                        **({"antialias": True} if antialias else {}))
    lowering.__doc__ = f"``{upsample_aten(mode, k, antialias)}`` (``.vec`` and default)."
    return lowering


def _no_corners():
    raise UnsupportedOp("upsample: the linear and cubic modes need align_corners")


ATEN: dict[str, Callable] = {
    "pow": _l_pow, "float_power": _l_float_pow,
    **{op: _unary(op) for op in ("sin", "cos", "log1p", "expm1", "sign")},
    "floor": _rounding("floor"), "ceil": _rounding("ceil"), "leaky_relu": _l_leaky_relu,
    "round": _l_round, "masked_fill": _l_masked_fill,
    "bitwise_xor": _l_xor, "__xor__": _l_xor, "logical_xor": _l_logical_xor,
    "addcmul": _l_addcmul, "addcdiv": _l_addcdiv,
    "max": _extremum("max"), "min": _extremum("min"), "amin": _l_amin, "diff": _l_diff,
    "index": _l_index, "remainder": _l_remainder, "flip": _l_flip, "repeat": _l_repeat,
    "reshape_as": _l_reshape_as, "view_as": _l_reshape_as, "baddbmm": _l_baddbmm,
    "arange": _l_arange, "full": _l_full, "ones": _const_factory(1), "zeros": _const_factory(0),
    "new_ones": _new_factory(1), "new_zeros": _new_factory(0), "new_empty": _new_factory(None),
    "new_full": _l_new_full, "ones_like": _like_factory(1), "zeros_like": _like_factory(0),
    "empty_like": _like_factory(None), "full_like": _l_full_like, "fill": _l_fill,
    "scalar_tensor": _l_scalar_tensor,
    "cumsum": _l_cumsum, "group_norm": _l_group_norm, "var": _l_var, "std": _l_std,
    "var_mean": _l_var_mean, "std_mean": _l_std_mean,
    "linalg_vector_norm": _l_linalg_vector_norm, "norm": _l_norm,
    "conv1d": _l_conv1d,
    **{op: _upsample(m, k) for (m, k), op in UPSAMPLE.items()},
    **{f"_{op}_aa": _upsample(m, k, True) for (m, k), op in UPSAMPLE.items()
       if m in ("linear", "cubic") and k == 2},   # F.interpolate's antialias=True
}
"""ATen overload packet name -> lowering; ``bridge.aten`` adds the entries its own table lacks."""
