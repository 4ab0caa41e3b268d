"""Neural-network lowerings: normalizations (batch norm in inference: a per-channel affine;
layer and group norm: the row kernel), softmax and log-softmax (the row kernel), dropout (an
identity unless training) and pooling (max, average, adaptive average)."""

from __future__ import annotations

from typing import Any, Callable

from ...dims import Expr, Lit, as_expr, prod
from ...errors import DTypeError, ShapeError, UnsupportedOp
from ...ir.graph import Value
from ...ir.ops import Ops
from ..common import Cx, channel_bias, pair, tensor_arg, wrap_axis
from ..registry import NOT_FUZZED, aten, register



def _batch_norm_eval(cx, input, running_mean, running_var, weight=None, bias=None, training=False,
                  momentum=0.1, eps=1e-5):
    """Eval batch norm as ``x * scale + shift`` per channel; ``scale``/``shift`` are computed from
    the constants (folded at compile time, then into a preceding convolution)."""
    if training or running_mean is None or running_var is None:
        raise UnsupportedOp("batch_norm with batch statistics (training mode)")
    x = tensor_arg(input)
    scale = cx.apply(Ops.rsqrt, cx.apply(Ops.add, tensor_arg(running_var, "running_var"), eps))
    if weight is not None:
        scale = cx.apply(Ops.mul, scale, tensor_arg(weight, "weight"))
    shift = cx.apply(Ops.neg, cx.apply(Ops.mul, tensor_arg(running_mean, "running_mean"), scale))
    if bias is not None:
        shift = cx.apply(Ops.add, shift, tensor_arg(bias, "bias"))
    return channel_bias(cx, _channel_scale(cx, x, scale), shift, 1)


def _channel_scale(cx: Cx, x: Value, scale: Value) -> Value:
    trailing = x.rank - 2
    s = cx.apply(Ops.reshape, scale, shape=(*cx.g.dims(scale), *[1] * trailing)) if trailing \
        else scale
    return cx.apply(Ops.mul, x, s)


@register(aten.batch_norm, ir=(Ops.rsqrt, Ops.add, Ops.mul, Ops.neg, Ops.reshape),
          opinfo=("nn.functional.batch_norm",), no_fuzz=NOT_FUZZED)
def batch_norm(cx, input, weight, bias, running_mean, running_var, training, momentum, eps,
                  cudnn_enabled=True):
    return _batch_norm_eval(cx, input, running_mean, running_var, weight, bias, training,
                            momentum, eps)


def _layer_norm(cx, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    x = tensor_arg(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, (int, Expr)) else \
        tuple(normalized_shape)
    k = len(shape)
    if not 0 < k <= x.rank:
        raise ShapeError(f"normalized_shape {list(shape)} for a rank-{x.rank} input")
    dims = cx.g.dims(x)
    for i, d in enumerate(shape):
        cx.g.constrain(dims[x.rank - k + i], as_expr(d), "layer_norm",
                       f"normalized_shape[{i}] with input axis {x.rank - k + i}", cx.where)
    axes = tuple(range(x.rank - k, x.rank))
    affine = [tensor_arg(weight, "weight")] if weight is not None else []
    if affine and bias is not None:   # one kernel: normalize, scale, shift
        affine.append(tensor_arg(bias, "bias"))
        bias = None
    y = cx.apply(Ops.layer_norm, x, *affine, axes=axes, eps=float(eps))
    return y if bias is None else cx.apply(Ops.add, y, tensor_arg(bias, "bias"))


@register(aten.layer_norm, ir=(Ops.layer_norm, Ops.add), opinfo=("nn.functional.layer_norm",),
          fuzz=("layer_norm", "layer_norm_affine"))
def layer_norm(cx, input, normalized_shape, weight=None, bias=None, eps=1e-5,
                  cudnn_enable=True):
    return _layer_norm(cx, input, normalized_shape, weight, bias, eps)


@register(aten.group_norm, ir=(Ops.layer_norm, Ops.reshape, Ops.mul, Ops.add),
          opinfo=("nn.functional.group_norm",), slow=True, no_fuzz=NOT_FUZZED)
def group_norm(cx, input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
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
    rows = cx.apply(Ops.reshape, x, shape=(dims[0], num_groups, (c.value // num_groups) *
                                         prod(dims[2:])))
    y = cx.apply(Ops.layer_norm, rows, axes=(2,), eps=float(eps))
    y = cx.apply(Ops.reshape, y, shape=dims)
    trailing = (1,) * (x.rank - 2)
    for p, op in ((weight, Ops.mul), (bias, Ops.add)):
        if p is not None:
            p = tensor_arg(p, "weight" if op is Ops.mul else "bias")
            what = "weight" if op is Ops.mul else "bias"
            if p.rank != 1:
                raise ShapeError(f"group_norm: {what} of rank {p.rank}, expected [C]")
            cx.g.constrain(cx.g.dims(p)[0], c, "group_norm",
                           f"{what} axis 0 with channels (input axis 1)", cx.where)
            y = cx.apply(op, y, cx.apply(Ops.reshape, p, shape=(c, *trailing)) if trailing else p)
    return y


def _softmax(log: bool) -> Callable:
    def lowering(cx, input, dim, dtype=None):
        x = tensor_arg(input)
        if dim is None:
            raise UnsupportedOp("softmax without dim (torch's implicit-dim legacy form)")
        if dtype is not None:
            x = cx.cast(x, dtype)
        if not x.dtype.is_floating_point:
            raise UnsupportedOp(f"softmax of {x.dtype}")
        a = wrap_axis(dim, x.rank)
        if x.rank:   # one kernel: two passes over each row
            return cx.apply(Ops.log_softmax if log else Ops.softmax, x, axes=(a,))
        xm = cx.apply(Ops.sub, x, x)   # a 0-d row of one element: softmax 1, log_softmax 0
        return xm if log else cx.apply(Ops.exp, xm)
    return lowering


register(aten.softmax, ir=(Ops.softmax, Ops.sub, Ops.exp), opinfo=("softmax",),
         fuzz=("softmax", "softmax_written"))(_softmax(False))
register(aten.log_softmax, ir=(Ops.log_softmax, Ops.sub), opinfo=("log_softmax",),
         fuzz=("log_softmax",))(_softmax(True))


@register(aten.dropout, ir=(), opinfo=("nn.functional.dropout",),
          no_fuzz="an identity in inference")
def dropout(cx, input, p, train):
    if train and p:
        raise UnsupportedOp("dropout in training mode (random)")
    return tensor_arg(input)


def _pool_stride(stride: Any, k: tuple[int, int]) -> tuple[int, int]:
    """torch's default stride (None or empty): the kernel size."""
    return k if stride is None or isinstance(stride, (tuple, list)) and not stride else \
        pair(stride, "stride")


@register(aten.max_pool2d, ir=(Ops.max_pool2d,), opinfo=("nn.functional.max_pool2d",),
          fuzz=("max_pool2d",))
def max_pool2d(cx, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                  return_indices=False):
    """With ``return_indices``, (values, indices): the values a generated reduction, the int64
    indices (flat into the input's H*W plane) ATen's ``max_pool2d_with_indices``."""
    k = pair(kernel_size, "kernel_size")
    x = tensor_arg(input)
    attrs = dict(kernel_size=k, stride=_pool_stride(stride, k), padding=pair(padding, "padding"),
                 dilation=pair(dilation, "dilation"), ceil_mode=bool(ceil_mode))
    y = cx.apply(Ops.max_pool2d, x, **attrs)
    return (y, cx.apply(Ops.max_pool2d_indices, x, **attrs)) if return_indices else y


@register(aten.max_pool2d_with_indices, ir=(Ops.max_pool2d, Ops.max_pool2d_indices),
          no_opinfo="``nn.functional.max_pool2d``'s samples with return_indices reach it",
          no_fuzz=NOT_FUZZED)
def max_pool2d_with_indices(cx, input, kernel_size, stride=None, padding=0, dilation=1,
                               ceil_mode=False, return_indices=False):
    return max_pool2d(cx, input, kernel_size, stride, padding, dilation, ceil_mode, True)


@register(aten.avg_pool2d, ir=(Ops.avg_pool2d,), opinfo=("nn.functional.avg_pool2d",),
          fuzz=("avg_pool2d",))
def avg_pool2d(cx, input, kernel_size, stride=None, padding=0, ceil_mode=False,
                  count_include_pad=True, divisor_override=None):
    if divisor_override is not None and (isinstance(divisor_override, bool) or not isinstance(
            divisor_override, int) or divisor_override == 0):
        raise ShapeError(f"divisor_override={divisor_override!r}: a non-zero int")
    k = pair(kernel_size, "kernel_size")
    return cx.apply(Ops.avg_pool2d, tensor_arg(input), kernel_size=k,
                    stride=_pool_stride(stride, k),
                    padding=pair(padding, "padding"), ceil_mode=bool(ceil_mode),
                    count_include_pad=bool(count_include_pad), divisor_override=divisor_override)


@register(aten.adaptive_avg_pool2d, ir=(Ops.adaptive_avg_pool2d, Ops.mean),
          opinfo=("nn.functional.adaptive_avg_pool2d",), fuzz=("adaptive_avg_pool2d",))
def adaptive_avg_pool2d(cx, input, output_size):
    x = tensor_arg(input)
    if x.rank not in (3, 4):
        raise ShapeError(f"adaptive_avg_pool2d needs rank 3 or 4, got {x.rank}")
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    dims = cx.g.dims(x)
    out = []
    for i, o in enumerate(size):
        d = dims[x.rank - 2 + i]
        if o is None or o is d:   # the input's extent (export spells None as the axis's size)
            out.append(d.value if isinstance(d, Lit) else None)
            continue
        if isinstance(o, Expr) and not isinstance(o, Lit):
            raise UnsupportedOp(f"adaptive_avg_pool2d output size {o!r} is symbolic (not the "
                                f"input's extent {d!r})")
        out.append(int(o.value if isinstance(o, Lit) else o))
    if out == [1, 1]:   # global pooling: a mean over both axes
        return cx.apply(Ops.mean, x, dims=(x.rank - 2, x.rank - 1), keepdim=True)
    return cx.apply(Ops.adaptive_avg_pool2d, x, output_size=tuple(out))
