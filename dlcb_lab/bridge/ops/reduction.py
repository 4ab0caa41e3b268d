"""Reduction lowerings: sum, mean, amax, amin, max and min (elementwise or reductions), cumsum,
variance and standard deviation (two passes, as eager), vector norms."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ...dims import Lit, lit, prod
from ...errors import DTypeError, UnsupportedOp
from ...ir.graph import Value
from ...ir.ops import Ops
from ..common import Cx, Unavailable, axes_arg, number, refuse, tensor_arg, wrap_axis
from ..registry import NOT_FUZZED, UNLISTED, aten, register
from .factory import size_value

MOMENTS = (Ops.mean, Ops.sub, Ops.mul, Ops.sum, Ops.div, Ops.relu, Ops.to, Ops.reshape)
NORMS = (Ops.mul, Ops.sum, Ops.sqrt, Ops.abs, Ops.amax, Ops.neg, Ops.ne, Ops.to, Ops.pow)


def _reduction(op: str, default_dim: Any) -> Callable:
    def lowering(cx, input, dim=default_dim, keepdim=False, *, dtype=None, out=None):
        refuse(out=(out, None))
        x = tensor_arg(input)
        if dtype is not None:
            x = cx.cast(x, dtype)
        return cx.apply(op, x, dims=axes_arg(dim, x.rank), keepdim=bool(keepdim))
    return lowering


def _extremum(op: str) -> Callable:
    """``max``/``min``: ``.other`` (two tensors) the elementwise maximum/minimum, ``.default`` the
    reduction over every axis (min as ``-amax(-x)``: floats and bools); ``.dim`` its values over
    that axis (VOLO pools tokens by ``x.max(1)[0]``), its indices ``Unavailable``."""
    def lowering(cx, input, other=None, keepdim=False):
        x = tensor_arg(input)
        if isinstance(other, Value):
            return cx.apply(Ops.maximum if op == "max" else Ops.minimum, x, other)
        if other is None:
            return _amin_amax(cx, op, x, tuple(range(x.rank)), False)
        a = wrap_axis(other, x.rank)
        values = _amin_amax(cx, op, x, (a,), bool(keepdim)) if x.rank else x
        return values, Unavailable(f"the indices of {op}(dim={other!r}) (arg{op} is not lowered)")
    return lowering


def _amin_amax(cx: Cx, op: str, x: Value, axes: tuple[int, ...], keepdim: bool) -> Value:
    if op == "max":
        return cx.apply(Ops.amax, x, dims=axes, keepdim=keepdim)
    if x.dtype is torch.bool:   # min of bools: not any(not x)
        return cx.apply(Ops.logical_not, cx.apply(Ops.amax, cx.apply(Ops.logical_not, x), dims=axes,
                                                keepdim=keepdim))
    if not x.dtype.is_floating_point:   # -x wraps at the dtype's minimum
        raise UnsupportedOp(f"min / amin of {x.dtype} unsupported (floating and bool only)")
    return cx.apply(Ops.neg, cx.apply(Ops.amax, cx.apply(Ops.neg, x), dims=axes, keepdim=keepdim))


register(aten.sum, ir=(Ops.sum, Ops.to), opinfo=("sum",), fuzz=("sum",))(_reduction(Ops.sum, None))
register(aten.mean, ir=(Ops.mean, Ops.to), opinfo=("mean",), fuzz=("mean",))(_reduction(Ops.mean, None))
register(aten.amax, ir=(Ops.amax,), opinfo=("amax",), fuzz=("amax",))(_reduction(Ops.amax, ()))
register(aten.max, ir=(Ops.maximum, Ops.amax), no_opinfo=UNLISTED, no_fuzz=NOT_FUZZED)(_extremum("max"))
register(aten.min, ir=(Ops.minimum, Ops.amax, Ops.neg, Ops.logical_not), no_opinfo=UNLISTED,
         no_fuzz=NOT_FUZZED)(_extremum("min"))


@register(aten.amin, ir=(Ops.amax, Ops.neg, Ops.logical_not), opinfo=("amin",), slow=True,
          fuzz=("amin",))
def amin(cx, input, dim=(), keepdim=False):
    """``amin`` as ``-amax(-x)`` (negation is exact on floats, NaN propagates as in amax)."""
    x = tensor_arg(input)
    return _amin_amax(cx, "min", x, axes_arg(dim, x.rank), bool(keepdim))


PREFIX_SUM_MAX = 64


@register(aten.cumsum, ir=(Ops.prefix_sum, Ops.cumsum), opinfo=("cumsum",), slow=True,
          fuzz=("cumsum",))
def cumsum(cx, input, dim, *, dtype=None):
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
        return cx.apply(Ops.prefix_sum, x, dim=a)
    return cx.apply(Ops.cumsum, x, dim=a)


def _correction(unbiased: Any, correction: Any) -> float:
    if correction is not None:
        return float(number(correction, "correction"))
    return 1.0 if unbiased in (None, True) else 0.0


def _moments(cx: Cx, x: Value, dim: Any, keepdim: bool, corr: float) -> tuple[Value, Value]:
    """(var, mean) over ``dim``: ``sum((x - mean)^2) / max(n - correction, 0)`` (two passes, as
    eager; n <= correction gives inf or NaN, as torch). A symbolic n is counted in the kernel (a
    sum of ones over the reduced axes, in double)."""
    if not x.dtype.is_floating_point:
        raise DTypeError(f"var/std of {x.dtype} (torch takes floating inputs)")
    axes = axes_arg(dim, x.rank)
    mean = cx.apply(Ops.mean, x, dims=axes, keepdim=True)
    dev = cx.apply(Ops.sub, x, mean)
    ss = cx.apply(Ops.sum, cx.apply(Ops.mul, dev, dev), dims=axes, keepdim=bool(keepdim))
    n = prod([cx.g.dims(x)[a] for a in axes])
    if isinstance(n, Lit):
        var = cx.apply(Ops.div, ss, max(float(n.value) - corr, 0.0))
    else:
        count = cx.cast(size_value(cx, n, "the element count"), torch.float64)
        var = cx.apply(Ops.div, ss, cx.apply(Ops.relu, cx.apply(Ops.sub, count, corr)))
        var = cx.cast(var, ss.dtype)
    if not keepdim:
        mean = cx.apply(Ops.reshape, mean, shape=cx.g.dims(var))
    return var, mean


@register(aten.var, ir=MOMENTS, opinfo=("var",), slow=True, no_fuzz=NOT_FUZZED)
def var(cx, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """``var.default`` (unbiased), ``.dim``, ``.correction``."""
    if isinstance(dim, bool):   # var.default(self, unbiased)
        dim, unbiased = None, dim
    return _moments(cx, tensor_arg(input), dim, keepdim, _correction(unbiased, correction))[0]


@register(aten.std, ir=(*MOMENTS, Ops.sqrt), opinfo=("std",), slow=True, no_fuzz=NOT_FUZZED)
def std(cx, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    x = tensor_arg(input)
    return cx.apply(Ops.sqrt, _moments(cx, x, dim, keepdim, _correction(unbiased, correction))[0])


@register(aten.var_mean, ir=MOMENTS, opinfo=("var_mean", "var_mean.unbiased"), no_fuzz=NOT_FUZZED)
def var_mean(cx, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return _moments(cx, tensor_arg(input), dim, keepdim, _correction(unbiased, correction))


@register(aten.std_mean, ir=(*MOMENTS, Ops.sqrt), opinfo=("std_mean", "std_mean.unbiased"), no_fuzz=NOT_FUZZED)
def std_mean(cx, input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    v, m = var_mean(cx, input, dim, unbiased, keepdim, correction=correction)
    return cx.apply(Ops.sqrt, v), m


def _vector_norm(cx: Cx, x: Value, ord: Any, dim: Any, keepdim: bool) -> Value:
    """``sum(|x|^ord)^(1/ord)`` over ``dim``; ord 2 as ``sqrt(sum(x*x))``, 1 as ``sum(|x|)``,
    inf / -inf as amax / -amax(-|x|), 0 as a count of non-zeros."""
    if not x.dtype.is_floating_point:
        raise DTypeError(f"vector norm of {x.dtype} (torch takes floating inputs)")
    ord = number(ord, "ord")
    axes = axes_arg(dim, x.rank)
    keep = bool(keepdim)
    if ord == 2:
        return cx.apply(Ops.sqrt, cx.apply(Ops.sum, cx.apply(Ops.mul, x, x), dims=axes, keepdim=keep))
    a = cx.apply(Ops.abs, x)
    if ord == 1:
        return cx.apply(Ops.sum, a, dims=axes, keepdim=keep)
    if ord == math.inf:
        return cx.apply(Ops.amax, a, dims=axes, keepdim=keep)
    if ord == -math.inf:
        return cx.apply(Ops.neg, cx.apply(Ops.amax, cx.apply(Ops.neg, a), dims=axes, keepdim=keep))
    if ord == 0:
        return cx.apply(Ops.sum, cx.cast(cx.apply(Ops.ne, x, 0), x.dtype), dims=axes, keepdim=keep)
    s = cx.apply(Ops.sum, cx.apply(Ops.pow, a, float(ord)), dims=axes, keepdim=keep)
    return cx.apply(Ops.pow, s, 1.0 / float(ord))


@register(aten.linalg_vector_norm, ir=NORMS, opinfo=("linalg.vector_norm",), slow=True,
          no_fuzz=NOT_FUZZED)
def linalg_vector_norm(cx, input, ord=2, dim=None, keepdim=False, *, dtype=None):
    x = tensor_arg(input)
    if dtype is not None:
        x = cx.cast(x, dtype)
    return _vector_norm(cx, x, ord, dim, keepdim)


@register(aten.norm, ir=NORMS, opinfo=("norm",), slow=True, no_fuzz=NOT_FUZZED)
def norm(cx, input, p=2, dim=None, keepdim=False, *, dtype=None):
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
