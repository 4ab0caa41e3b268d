"""Library lowerings: convolution, GEMMs, attention and upsampling become library IR ops
(``ir/ops/library.py``: ATen, cuDNN, cuBLAS at run time); a bias, a scale or a mask around them is
generated code, fused into its reader."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

import torch

from ...dims import Expr, Lit, lit
from ...errors import DTypeError, ShapeError, UnsupportedOp
from ...ir.graph import Value
from ...ir.ops import Ops
from ...ir.ops.library import UPSAMPLE, upsample_aten
from ..common import (Cx, channel_bias, number, operand, pair, refuse, tensor_arg,
                      wrap_axis)
from ..registry import NOT_FUZZED, aten, register
from .factory import sizes_arg
from .shape import unsqueeze_axis



@register(aten.conv2d, ir=(Ops.conv2d, Ops.reshape, Ops.add), opinfo=("nn.functional.conv2d",),
          fuzz=("conv2d",))
def conv2d(cx, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """An unbatched (rank-3) input gets a batch axis of 1 around the library call, as in torch."""
    x, w = tensor_arg(input), tensor_arg(weight, "weight")
    if x.rank == 3 and w.rank == 4:
        if isinstance(groups, int) and not isinstance(groups, bool):
            # the channel constraint first, so the batch view's shape holds the solved channels
            cx.g.constrain(cx.g.dims(x)[0], cx.g.dims(w)[1] * groups, "conv2d",
                           f"input channels (axis 0) == weight axis 1 x groups {groups}",
                           cx.where)
        y = conv2d(cx, unsqueeze_axis(cx, x, 0), w, bias, stride, padding, dilation, groups)
        return cx.apply(Ops.reshape, y, shape=cx.g.dims(y)[1:])
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise UnsupportedOp(f"padding={padding!r}")
        padding = (0, 0) if padding == "valid" else padding
    else:
        padding = pair(padding, "padding")
    stride, dilation = pair(stride, "stride"), pair(dilation, "dilation")
    if min(stride) < 1 or min(dilation) < 1 or padding != "same" and min(padding) < 0 or \
            isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"conv2d: stride {stride} and dilation {dilation} must be positive, "
                         f"padding {padding} non-negative, groups {groups!r} a positive int")
    y = cx.apply(Ops.conv2d, x, w, stride=stride, padding=padding, dilation=dilation,
                 groups=groups)
    return channel_bias(cx, y, bias, 1)


@register(aten.linear, ir=(Ops.linear, Ops.add), opinfo=("nn.functional.linear",),
          fuzz=("linear", "gated_linear"))
def linear(cx, input, weight, bias=None):
    y = cx.apply(Ops.linear, tensor_arg(input), tensor_arg(weight, "weight"))
    return y if bias is None else cx.apply(Ops.add, y, tensor_arg(bias, "bias"))


@register(aten.matmul, ir=(Ops.matmul,), opinfo=("matmul",), fuzz=("matmul",))
def matmul(cx, input, other, *, out=None):
    refuse(out=(out, None))
    return cx.apply(Ops.matmul, tensor_arg(input), tensor_arg(other, "other"))


def _ranked(rank: int) -> Callable:
    def lowering(cx, input, mat2, *, out=None):
        a, b = tensor_arg(input), tensor_arg(mat2, "mat2")
        if a.rank != rank or b.rank != rank:
            raise ShapeError(f"expected rank-{rank} operands, got ranks {a.rank}, {b.rank}")
        return matmul(cx, a, b, out=out)
    return lowering


register(aten.bmm, ir=(Ops.matmul,), opinfo=("bmm",), fuzz=("bmm",))(_ranked(3))
register(aten.mm, ir=(Ops.matmul,), opinfo=("mm",), no_fuzz=NOT_FUZZED)(_ranked(2))


@register(aten.addmm, ir=(Ops.matmul, Ops.mul, Ops.add, Ops.expand), opinfo=("addmm",), no_fuzz=NOT_FUZZED)
def addmm(cx, input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * (mat1 @ mat2)``; with ``beta == 0`` the input is not read (its
    NaNs do not propagate, as in torch) but must still broadcast to the product."""
    y = _ranked(2)(cx, mat1, mat2, out=out)
    if alpha != 1:
        y = cx.apply(Ops.mul, y, alpha)
    c = operand(input)
    if isinstance(c, Value) and c.rank > 2:
        raise ShapeError(f"addmm input of rank {c.rank} does not broadcast to the rank-2 product")
    if beta == 0:
        if isinstance(c, Value):   # the broadcast check alone; the value is dead
            cx.apply(Ops.expand, c, sizes=tuple(cx.g.dims(y)))
        return y
    if beta != 1:
        c = cx.apply(Ops.mul, c, beta) if isinstance(c, Value) else c * beta
    return cx.apply(Ops.add, c, y)


@register(aten.baddbmm, ir=(Ops.baddbmm, Ops.matmul, Ops.mul, Ops.add), opinfo=("baddbmm",), slow=True,
          no_fuzz=NOT_FUZZED)
def baddbmm(cx, input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` (rank-3 operands). In float32 and float64
    the product is a library call, the scaling and addition fused into its reader; otherwise
    ATen's baddbmm does it all (the ``baddbmm`` library op): eager rounds a 16-bit sum once,
    where a 16-bit product and an add would round twice, and integer operands are its CPU
    kernel's (cuBLAS takes floats). ``beta == 0`` does not read ``input`` (its NaNs are ignored,
    as torch)."""
    x, a, b = tensor_arg(input), tensor_arg(batch1, "batch1"), tensor_arg(batch2, "batch2")
    if a.rank != 3 or b.rank != 3:
        raise ShapeError(f"baddbmm needs rank-3 batch1 and batch2, got ranks {a.rank}, {b.rank}")
    alpha, beta = number(alpha, "alpha"), number(beta, "beta")
    if a.dtype not in (torch.float32, torch.float64):
        return cx.apply(Ops.baddbmm, x, a, b, beta=beta, alpha=alpha)
    y = cx.apply(Ops.matmul, a, b)
    if alpha != 1:
        y = cx.apply(Ops.mul, y, alpha)
    if beta == 0:
        return y
    return cx.apply(Ops.add, x if beta == 1 else cx.apply(Ops.mul, x, beta), y)


@register(aten.cumprod, ir=(Ops.cumprod,), opinfo=("cumprod",), fuzz=("cumprod",))
def cumprod(cx, input, dim, *, dtype=None):
    """ATen's cumprod (the ``cumprod`` library op, ``dtype`` passed on); integers and bool give
    int64, as torch."""
    x = tensor_arg(input)
    if x.dtype.is_complex or dtype is not None and dtype.is_complex:
        raise DTypeError("cumprod of complex tensors unsupported")
    return cx.apply(Ops.cumprod, x, dim=wrap_axis(dim, x.rank), dtype=dtype)


@register(aten.scaled_dot_product_attention, ir=(Ops.sdpa, Ops.where, Ops.to),
          opinfo=("nn.functional.scaled_dot_product_attention",), fuzz=("sdpa",))
def sdpa(cx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
            enable_gqa=False):
    """A boolean ``attn_mask`` (True: attend) becomes the additive mask ``0 / -inf``;
    ``enable_gqa``: k and v heads (axis -3) may divide q's (an attribute only when set)."""
    refuse(dropout_p=(dropout_p, 0.0))
    if is_causal and attn_mask is not None:
        raise ShapeError("attn_mask and is_causal=True together (torch rejects them)")
    ins = [tensor_arg(query, "query"), tensor_arg(key, "key"), tensor_arg(value, "value")]
    if attn_mask is not None:
        ins.append(_additive_mask(cx, tensor_arg(attn_mask, "attn_mask"), ins[0].dtype, True))
    gqa = {"enable_gqa": True} if enable_gqa else {}
    return cx.apply(Ops.sdpa, *ins, is_causal=bool(is_causal), scale=scale, **gqa)


def _additive_mask(cx: Cx, mask: Value, dtype: torch.dtype, attend: bool) -> Value:
    """A boolean mask as an additive one in ``dtype``: 0 where the mask is ``attend``, -inf
    elsewhere; a floating mask unchanged."""
    if mask.dtype is not torch.bool:
        return mask
    inf = float("-inf")
    return cx.cast(cx.apply(Ops.where, mask, *((0.0, inf) if attend else (inf, 0.0))), dtype)


def _one(v: Any, what: str) -> int:
    if isinstance(v, (list, tuple)):
        if len(v) != 1:
            raise UnsupportedOp(f"conv1d {what}={list(v)!r}: expected one int")
        v = v[0]
    if isinstance(v, bool) or not isinstance(v, int):
        raise UnsupportedOp(f"conv1d {what}={v!r}: expected an int")
    return v


@register(aten.conv1d, ir=(Ops.conv2d, Ops.reshape, Ops.add), opinfo=("nn.functional.conv1d",), slow=True,
          no_fuzz=NOT_FUZZED)
def conv1d(cx, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """conv1d as conv2d over [N, C, 1, L] with a [O, C/g, 1, K] weight (the same library call);
    an unbatched [C, L] input gets a batch axis of 1, as torch."""
    x, w = tensor_arg(input), tensor_arg(weight, "weight")
    if x.rank not in (2, 3) or w.rank != 3:
        raise ShapeError(f"conv1d needs a rank-2 or rank-3 input and a rank-3 weight, got ranks "
                         f"{x.rank}, {w.rank}")
    batched = x.rank == 3
    xd = cx.g.dims(x)
    x4 = cx.apply(Ops.reshape, x, shape=(*xd[:-1], 1, xd[-1]) if batched else (1, xd[0], 1, xd[1]))
    wd = cx.g.dims(w)
    w4 = cx.apply(Ops.reshape, w, shape=(wd[0], wd[1], 1, wd[2]))
    if isinstance(padding, str):
        pad: Any = padding
    else:
        pad = (0, _one(padding, "padding"))
    y = conv2d(cx, x4, w4, bias, (1, _one(stride, "stride")), pad,
                     (1, _one(dilation, "dilation")), groups)
    yd = cx.g.dims(y)
    return cx.apply(Ops.reshape, y, shape=(yd[0], yd[1], yd[3]) if batched else (yd[1], yd[3]))


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


def _upsample_size(cx: Cx, x: Value, k: int, output_size: Any, scales: tuple | None
                   ) -> tuple[Expr, ...]:
    """The output's ``k`` spatial extents: ``output_size``, else ``floor(d * scale)`` per axis."""
    axes = "DHW"[3 - k:]
    if x.rank != k + 2:
        raise ShapeError(f"upsample over {k} spatial axes needs a rank-{k + 2} input "
                         f"[N, C, {', '.join(axes)}], got rank {x.rank}")
    if output_size is not None:
        size = sizes_arg(output_size)
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
    return tuple(None if s is None else float(number(s, "upsample scale")) for s in given)


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
        return cx.apply(Ops.upsample, x, size=size, scales=sc, mode=mode, align_corners=align,
                        **({"antialias": True} if antialias else {}))
    lowering.__doc__ = f"``{upsample_aten(mode, k, antialias)}`` (``.vec`` and default)."
    return lowering


def _no_corners():
    raise UnsupportedOp("upsample: the linear and cubic modes need align_corners")


def _register_upsample() -> None:
    """One registration per ATen upsample packet (mode, spatial axes; the antialiased forms
    F.interpolate's antialias=True calls)."""
    by = "``nn.functional.interpolate``'s samples reach it (named on the nearest 2-D packet)"
    for (m, k), op in UPSAMPLE.items():
        first = (m, k) == ("nearest", 2)
        tested = dict(opinfo=("nn.functional.interpolate",), slow=True, fuzz=("upsample",)) \
            if first else dict(no_opinfo=by, no_fuzz="the ``upsample`` entry (nearest, bilinear)")
        register(getattr(aten, op), ir=(Ops.upsample,), **tested)(_upsample(m, k))
        if m in ("linear", "cubic") and k == 2:
            register(getattr(aten, f"_{op}_aa"), ir=(Ops.upsample,), no_opinfo=by,
                     no_fuzz=tested.get("no_fuzz", ""))(_upsample(m, k, True))


_register_upsample()
