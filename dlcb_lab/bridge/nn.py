"""Lowerings of the neural-network vocabulary (``torch.nn.functional`` and the shape ops the
TorchVision models use): convolution, linear and attention become library ops; normalizations,
activations, pooling, concatenation, slicing and padding become generated IR ops. Each lowering
has torch's signature after the lowering context; ``bridge.aten`` binds ATen nodes to them.

Inference semantics: dropout and stochastic depth are identities unless ``training``; batch norm
uses the running statistics. Where torch's result depends on a run-time size in a way the graph
cannot express, a symbolic axis is instead required to hold the static reading (a host check,
``ShapeMismatch`` before any launch): a slice torch would clamp must lie in the axis, a chunk count
must not shrink, an axis ``squeeze`` may drop must not be 1.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..dims import Expr, Lit, as_expr, lit, prod
from ..errors import DTypeError, ShapeError, UnsupportedOp
from ..ir.graph import Value
from ..ir.ops.shape import PAD_MODES
from .common import Cx, axes_arg, constant_int, dim_arg, operand, refuse, tensor_arg, wrap_axis


def _pair(v: Any, what: str) -> tuple[int, int]:
    v = (v, v) if isinstance(v, int) else tuple(v)
    if len(v) == 1:
        v = (v[0], v[0])
    if len(v) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise UnsupportedOp(f"{what}={v!r}: expected an int or a pair of ints")
    return v


def _channel_bias(cx: Cx, y: Value, bias: Any, axis: int) -> Value:
    """``y + bias`` with a 1-D ``bias`` along ``axis`` of ``y``."""
    if bias is None:
        return y
    b = tensor_arg(bias, "bias")
    trailing = y.rank - axis - 1
    if trailing:
        b = cx.apply("reshape", b, shape=(*cx.g.dims(b), *[1] * trailing))
    return cx.apply("add", y, b)


# --- library ops ----------------------------------------------------------------------------------

def _l_conv2d(cx, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """An unbatched (rank-3) input gets a batch axis of 1 around the library call, as in torch."""
    x, w = tensor_arg(input), tensor_arg(weight, "weight")
    if x.rank == 3 and w.rank == 4:
        if isinstance(groups, int) and not isinstance(groups, bool):
            # the channel constraint first, so the batch view's shape holds the solved channels
            cx.g.constrain(cx.g.dims(x)[0], cx.g.dims(w)[1] * groups, "conv2d",
                           f"input channels (axis 0) == weight axis 1 x groups {groups}",
                           cx.where)
        y = _l_conv2d(cx, _unsqueeze(cx, x, 0), w, bias, stride, padding, dilation, groups)
        return cx.apply("reshape", y, shape=cx.g.dims(y)[1:])
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise UnsupportedOp(f"padding={padding!r}")
        padding = (0, 0) if padding == "valid" else padding
    else:
        padding = _pair(padding, "padding")
    stride, dilation = _pair(stride, "stride"), _pair(dilation, "dilation")
    if min(stride) < 1 or min(dilation) < 1 or padding != "same" and min(padding) < 0 or \
            isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"conv2d: stride {stride} and dilation {dilation} must be positive, "
                         f"padding {padding} non-negative, groups {groups!r} a positive int")
    y = cx.apply("conv2d", x, w, stride=stride, padding=padding, dilation=dilation,
                 groups=groups)
    return _channel_bias(cx, y, bias, 1)


def _l_linear(cx, input, weight, bias=None):
    y = cx.apply("linear", tensor_arg(input), tensor_arg(weight, "weight"))
    return y if bias is None else cx.apply("add", y, tensor_arg(bias, "bias"))


def _l_matmul(cx, input, other, *, out=None):
    refuse(out=(out, None))
    return cx.apply("matmul", tensor_arg(input), tensor_arg(other, "other"))


def _ranked(rank: int) -> Callable:
    def lowering(cx, input, mat2, *, out=None):
        a, b = tensor_arg(input), tensor_arg(mat2, "mat2")
        if a.rank != rank or b.rank != rank:
            raise ShapeError(f"expected rank-{rank} operands, got ranks {a.rank}, {b.rank}")
        return _l_matmul(cx, a, b, out=out)
    return lowering


def _l_addmm(cx, input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """``beta * input + alpha * (mat1 @ mat2)``; with ``beta == 0`` the input is not read (its
    NaNs do not propagate, as in torch) but must still broadcast to the product."""
    y = _ranked(2)(cx, mat1, mat2, out=out)
    if alpha != 1:
        y = cx.apply("mul", y, alpha)
    c = operand(input)
    if isinstance(c, Value) and c.rank > 2:
        raise ShapeError(f"addmm input of rank {c.rank} does not broadcast to the rank-2 product")
    if beta == 0:
        if isinstance(c, Value):   # the broadcast check alone; the value is dead
            cx.apply("expand", c, sizes=tuple(cx.g.dims(y)))
        return y
    if beta != 1:
        c = cx.apply("mul", c, beta) if isinstance(c, Value) else c * beta
    return cx.apply("add", c, y)


def _l_sdpa(cx, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
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
    return cx.apply("sdpa", *ins, is_causal=bool(is_causal), scale=scale, **gqa)


def _additive_mask(cx: Cx, mask: Value, dtype: torch.dtype, attend: bool) -> Value:
    """A boolean mask as an additive one in ``dtype``: 0 where the mask is ``attend``, -inf
    elsewhere; a floating mask unchanged."""
    if mask.dtype is not torch.bool:
        return mask
    inf = float("-inf")
    return cx.cast(cx.apply("where", mask, *((0.0, inf) if attend else (inf, 0.0))), dtype)


# --- normalization ----------------------------------------------------------------------------------

def _l_batch_norm(cx, input, running_mean, running_var, weight=None, bias=None, training=False,
                  momentum=0.1, eps=1e-5):
    """Eval batch norm as ``x * scale + shift`` per channel; ``scale``/``shift`` are computed from
    the constants (folded at compile time, then into a preceding convolution)."""
    if training or running_mean is None or running_var is None:
        raise UnsupportedOp("batch_norm with batch statistics (training mode)")
    x = tensor_arg(input)
    scale = cx.apply("rsqrt", cx.apply("add", tensor_arg(running_var, "running_var"), eps))
    if weight is not None:
        scale = cx.apply("mul", scale, tensor_arg(weight, "weight"))
    shift = cx.apply("neg", cx.apply("mul", tensor_arg(running_mean, "running_mean"), scale))
    if bias is not None:
        shift = cx.apply("add", shift, tensor_arg(bias, "bias"))
    return _channel_bias(cx, _channel_scale(cx, x, scale), shift, 1)


def _channel_scale(cx: Cx, x: Value, scale: Value) -> Value:
    trailing = x.rank - 2
    s = cx.apply("reshape", scale, shape=(*cx.g.dims(scale), *[1] * trailing)) if trailing \
        else scale
    return cx.apply("mul", x, s)


def _l_layer_norm(cx, input, normalized_shape, weight=None, bias=None, eps=1e-5):
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
    y = cx.apply("layer_norm", x, *affine, axes=axes, eps=float(eps))
    return y if bias is None else cx.apply("add", y, tensor_arg(bias, "bias"))


def _softmax(log: bool) -> Callable:
    def lowering(cx, input, dim=None, _stacklevel=3, dtype=None):
        x = tensor_arg(input)
        if dim is None:
            raise UnsupportedOp("softmax without dim (torch's implicit-dim legacy form)")
        if dtype is not None:
            x = cx.cast(x, dtype)
        if not x.dtype.is_floating_point:
            raise UnsupportedOp(f"softmax of {x.dtype}")
        a = wrap_axis(dim, x.rank)
        if x.rank:   # one kernel: two passes over each row
            return cx.apply("log_softmax" if log else "softmax", x, axes=(a,))
        xm = cx.apply("sub", x, x)   # a 0-d row of one element: softmax 1, log_softmax 0
        return xm if log else cx.apply("exp", xm)
    return lowering


# --- activations ------------------------------------------------------------------------------------

def _act(op: str) -> Callable:
    def lowering(cx, input, inplace=False):
        return cx.apply(op, tensor_arg(input))
    return lowering


def _l_hardtanh(cx, input, min_val=-1.0, max_val=1.0, inplace=False):
    """``clamp`` keeping the input's dtype: on integers torch truncates the bounds to ints."""
    x = tensor_arg(input)
    if x.dtype is torch.bool:
        raise DTypeError("hardtanh of bool (torch rejects it)")
    if not x.dtype.is_floating_point:
        min_val, max_val = int(min_val), int(max_val)
    return cx.apply("clamp", x, min_val, max_val)


def _l_relu6(cx, input, inplace=False):
    return _l_hardtanh(cx, input, 0.0, 6.0)


def _l_gelu(cx, input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise UnsupportedOp(f"approximate={approximate!r}")
    return cx.apply("gelu" if approximate == "none" else "gelu_tanh", tensor_arg(input))


def _l_clamp(cx, input, min=None, max=None, *, out=None):
    refuse(out=(out, None))
    x = tensor_arg(input)
    lo, hi = (None if b is None else operand(b) for b in (min, max))
    if lo is None and hi is None:
        raise UnsupportedOp("clamp needs min or max")
    if lo is not None and hi is not None and not isinstance(lo, Value) and \
            not isinstance(hi, Value):
        return cx.apply("clamp", x, lo, hi)
    # the open side of a one-sided scalar clamp: the extreme of x's dtype, so no promotion
    top, bottom = (float("inf"), float("-inf")) if x.dtype.is_floating_point else \
        (torch.iinfo(x.dtype).max, torch.iinfo(x.dtype).min) if x.dtype != torch.bool else (1, 0)
    if lo is not None:
        x = cx.apply("maximum", x, lo) if isinstance(lo, Value) else cx.apply("clamp", x, lo, top)
    if hi is not None:
        x = cx.apply("minimum", x, hi) if isinstance(hi, Value) else cx.apply("clamp", x, bottom,
                                                                              hi)
    return x


def _l_dropout(cx, input, p=0.5, training=True, inplace=False):
    if training and p:
        raise UnsupportedOp("dropout in training mode (random)")
    return tensor_arg(input)


# --- pooling ----------------------------------------------------------------------------------------

def _pool_stride(stride: Any, k: tuple[int, int]) -> tuple[int, int]:
    """torch's default stride (None or empty): the kernel size."""
    return k if stride is None or isinstance(stride, (tuple, list)) and not stride else \
        _pair(stride, "stride")


def _l_max_pool2d_with_indices(cx, input, kernel_size, stride=None, padding=0, dilation=1,
                               ceil_mode=False, return_indices=False):
    return _l_max_pool2d(cx, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _l_max_pool2d(cx, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                  return_indices=False):
    """With ``return_indices``, (values, indices): the values a generated reduction, the int64
    indices (flat into the input's H*W plane) ATen's ``max_pool2d_with_indices``."""
    k = _pair(kernel_size, "kernel_size")
    x = tensor_arg(input)
    attrs = dict(kernel_size=k, stride=_pool_stride(stride, k), padding=_pair(padding, "padding"),
                 dilation=_pair(dilation, "dilation"), ceil_mode=bool(ceil_mode))
    y = cx.apply("max_pool2d", x, **attrs)
    return (y, cx.apply("max_pool2d_indices", x, **attrs)) if return_indices else y


def _l_avg_pool2d(cx, input, kernel_size, stride=None, padding=0, ceil_mode=False,
                  count_include_pad=True, divisor_override=None):
    if divisor_override is not None and (isinstance(divisor_override, bool) or not isinstance(
            divisor_override, int) or divisor_override == 0):
        raise ShapeError(f"divisor_override={divisor_override!r}: a non-zero int")
    k = _pair(kernel_size, "kernel_size")
    return cx.apply("avg_pool2d", tensor_arg(input), kernel_size=k,
                    stride=_pool_stride(stride, k),
                    padding=_pair(padding, "padding"), ceil_mode=bool(ceil_mode),
                    count_include_pad=bool(count_include_pad), divisor_override=divisor_override)


def _l_adaptive_avg_pool2d(cx, input, output_size):
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
        return cx.apply("mean", x, dims=(x.rank - 2, x.rank - 1), keepdim=True)
    return cx.apply("adaptive_avg_pool2d", x, output_size=tuple(out))


# --- slicing, concatenation, padding ----------------------------------------------------------------

_HUGE = 1 << 62


def slice_axis(cx: Cx, x: Value, axis: int, start: Any, stop: Any, step: Any) -> Value:
    """``x[..., start:stop:step, ...]`` on ``axis`` with torch's rules; on a symbolic axis, each
    bound is taken as its example value falls (``_piece``), the rest host-checked."""
    d = cx.g.dims(x)[axis]
    step = 1 if step is None else step
    if not isinstance(step, int) or step < 1:
        raise UnsupportedOp(f"slice step {step!r} (positive integers only)")
    if isinstance(d, Lit) and all(b is None or isinstance(b, (int, Lit)) for b in (start, stop)):
        ints = [b.value if isinstance(b, Lit) else b for b in (start, stop)]
        s, e, _ = slice(*ints, step).indices(d.value)
        s_e, n_e = lit(s), lit(len(range(s, e, step)))
    else:
        def bound(b, default):
            if b is None or (isinstance(b, int) and b >= _HUGE):
                return default
            return _piece(cx, dim_arg(b, "slice bound"), d, axis)
        s_e, e_e = bound(start, lit(0)), bound(stop, d)
        cx.g.require(s_e, "slice", f"slice start {s_e!r} within axis {axis} (extent {d!r})",
                     cx.where)
        cx.g.require(e_e - s_e, "slice", f"slice [{s_e!r}:{e_e!r}] of axis {axis} (extent {d!r}) "
                     f"is not empty-reversed", cx.where)
        n_e = (e_e - s_e + step - 1) // step
    if s_e is lit(0) and n_e is d and step == 1:
        return x
    return cx.apply("slice", x, dim=axis, start=s_e, length=n_e, step=step)


def _piece(cx: Cx, b: Expr, d: Expr, axis: int) -> Expr:
    """A slice bound ``b`` on a symbolic axis of extent ``d`` as torch takes it: a negative one
    counts from the end, then the bound is clamped to ``[0, d]`` (Mistral's sliding-window cache
    keeps ``[-4095:]`` of L positions: all of them while L <= 4095). Dims have no min or max:
    the piece the example inputs fall in is compiled, and the host checks before any launch that
    a call falls in it too."""
    try:
        v, n = b.evaluate(cx.g.examples), d.evaluate(cx.g.examples)
    except KeyError:   # a dim without an example value: the bound must lie in the axis
        return d + b if isinstance(b, Lit) and b.value < 0 else b
    what = f"slice bound {b!r} on axis {axis} (extent {d!r})"
    if 0 <= v <= n:
        return b
    if v > n:
        cx.g.require(b - d, "slice", f"{what}: past the end as traced, clamped", cx.where)
        return d
    cx.g.require(-b - 1, "slice", f"{what}: negative as traced, counts from the end", cx.where)
    if v + n >= 0:
        return d + b
    cx.g.require(-(d + b), "slice", f"{what}: before the start as traced, clamped", cx.where)
    return lit(0)


def _l_getitem(cx, input, idx):
    x = tensor_arg(input)
    items = list(idx) if isinstance(idx, tuple) else [idx]
    if any(isinstance(i, (Value, torch.Tensor, list)) for i in items):
        raise UnsupportedOp("indexing with a tensor or list (advanced indexing)")
    n_real = sum(1 for i in items if i is not None and i is not Ellipsis)
    if items.count(Ellipsis) > 1:
        raise ShapeError("an index can only have a single ellipsis")
    if n_real > x.rank:
        raise ShapeError(f"too many indices ({n_real}) for a rank-{x.rank} tensor")
    k = items.index(Ellipsis) if Ellipsis in items else len(items)
    items[k:k + 1] = [slice(None)] * (x.rank - n_real)
    out_dims: list[Any] = []
    axis = 0
    y = x
    for it in items:
        if it is None:
            out_dims.append(1)
            continue
        if isinstance(it, slice):
            y = slice_axis(cx, y, axis, it.start, it.stop, it.step)
            out_dims.append(cx.g.dims(y)[axis])
        else:   # an integer index: a length-1 slice, dropped below
            if isinstance(it, bool) or not isinstance(it, (int, Expr)):
                raise UnsupportedOp(f"index {it!r}")
            d = cx.g.dims(y)[axis]
            if isinstance(it, int) and isinstance(d, Lit) and not -d.value <= it < d.value:
                raise ShapeError(f"index {it} is out of bounds for axis {axis} with size {d!r}")
            s = d + it if isinstance(it, int) and it < 0 else as_expr(it)
            y = slice_axis(cx, y, axis, s, s + 1, 1)
        axis += 1
    if [*out_dims] != list(cx.g.dims(y)):
        y = cx.apply("reshape", y, shape=tuple(out_dims))
    return y


def _l_narrow(cx, input, dim, start, length):
    """``x[..., start : start + length, ...]``; unlike a slice, torch does not clamp: the range
    must lie in the axis (checked now on a literal axis, by the host on a symbolic one). A tensor
    ``start`` is read at trace time when it is a constant (a module buffer or parameter; a later
    change to it is not seen)."""
    x = tensor_arg(input)
    a = wrap_axis(dim, x.rank)
    d = cx.g.dims(x)[a]
    if isinstance(start, Value):   # torch's Tensor start: a 0-d integer tensor
        start = constant_int(cx, start, "narrow start")
    s, n = dim_arg(start, "narrow start"), dim_arg(length, "narrow length")
    if isinstance(s, Lit) and s.value < 0:
        s = d + s
    cx.g.require(s, "narrow", f"start {start!r} within axis {a} of extent {d!r}", cx.where)
    cx.g.require(n, "narrow", f"length {length!r} is not negative", cx.where)
    cx.g.require(d - s - n, "narrow", f"start {start!r} + length {length!r} within axis {a} of "
                 f"extent {d!r}", cx.where)
    return slice_axis(cx, x, a, s, s + n, 1)


def _l_cat(cx, tensors, dim=0, *, out=None):
    """torch's legacy rule: 1-D tensors of (literal) size 0 are skipped."""
    refuse(out=(out, None))
    xs = [tensor_arg(t, "tensors") for t in tensors]
    if not xs:
        raise ShapeError("cat of no tensors")
    kept = [x for x in xs if not (x.rank == 1 and cx.g.dims(x)[0] is lit(0))]
    if not kept:
        return xs[0]
    xs = kept
    a = wrap_axis(dim, xs[0].rank)
    return cx.apply("cat", *xs, dim=a)


def _l_stack(cx, tensors, dim=0, *, out=None):
    xs = [tensor_arg(t, "tensors") for t in tensors]
    if not xs:
        raise ShapeError("stack of no tensors")
    a = wrap_axis(dim, xs[0].rank + 1)
    return _l_cat(cx, [_unsqueeze(cx, x, a) for x in xs], a, out=out)


def _unsqueeze(cx: Cx, x: Value, a: int) -> Value:
    dims = list(cx.g.dims(x))
    return cx.apply("reshape", x, shape=tuple(dims[:a] + [lit(1)] + dims[a:]))


def _l_unsqueeze(cx, input, dim):
    x = tensor_arg(input)
    return _unsqueeze(cx, x, wrap_axis(dim, x.rank + 1))


def _l_squeeze(cx, input, dim=None):
    """Drops the named (default: all) axes of extent 1. torch decides per call, so a symbolic
    axis among them is required to stay >= 2 (else the output rank would vary; a host check)."""
    x = tensor_arg(input)
    dims = list(cx.g.dims(x))
    if isinstance(dim, (tuple, list)) and not dim:   # squeeze(()) squeezes nothing
        return x
    axes = range(x.rank) if dim is None else axes_arg(dim, x.rank)
    for a in axes:
        if not isinstance(dims[a], Lit):
            cx.g.require(dims[a] - 2, "squeeze", f"axis {a} ({dims[a]!r}) is not 1 (torch would "
                         f"drop it: the output rank would vary)", cx.where)
    drop = {a for a in axes if dims[a] is lit(1)}
    if not drop:
        return x
    return cx.apply("reshape", x, shape=tuple(d for a, d in enumerate(dims) if a not in drop))


def _l_split(cx, tensor, split_size_or_sections, dim=0):
    """Pieces of an int size (the last one shorter; a literal axis, or a symbolic one the size
    divides: the piece count must not vary), or a list of sections summing to the axis."""
    x = tensor_arg(tensor)
    a = wrap_axis(dim, x.rank)
    d = cx.g.dims(x)[a]
    if not isinstance(split_size_or_sections, (tuple, list)):
        size = dim_arg(split_size_or_sections, "split_size")
        if isinstance(size, Lit) and size.value < 1 and not (size.value == 0 and d is lit(0)):
            raise ShapeError(f"split_size {size.value} must be positive (axis {a} of extent "
                             f"{d!r})")
        if isinstance(d, Lit) and isinstance(size, Lit):
            sizes = [min(size.value, d.value - s) for s in range(0, d.value, size.value)] or [0]
        else:
            raise UnsupportedOp(f"split of symbolic axis {a} ({d!r}) into pieces of {size!r}: "
                                f"the piece count would vary with the axis; use sections")
    else:
        sizes = [dim_arg(s, "split section") for s in split_size_or_sections]
        for s in sizes:
            cx.g.require(s, "split", f"section {s!r} is not negative", cx.where)
        total = sum(sizes[1:], sizes[0]) if sizes else lit(0)
        cx.g.constrain(total, d, "split", f"sections {sizes} sum to axis {a}", cx.where)
    out, off = [], lit(0)
    for s in sizes:
        out.append(slice_axis(cx, x, a, off, off + s, 1))
        off = off + s
    return tuple(out)


def _l_split_with_sizes(cx, input, split_sizes, dim=0):
    if not isinstance(split_sizes, (tuple, list)):
        raise UnsupportedOp(f"split_sizes {split_sizes!r} is not a list of sizes")
    return _l_split(cx, input, split_sizes, dim)


def _l_chunk(cx, input, chunks, dim=0):
    """torch's rule: pieces of ``ceil(D / chunks)``, the last one shorter, possibly fewer than
    ``chunks`` pieces. On a symbolic axis the count is fixed at ``chunks``: the last piece
    ``D - (chunks - 1) * ceil(D / chunks)`` must not be empty (a host check)."""
    x = tensor_arg(input)
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise ShapeError(f"chunks {chunks!r} must be a positive integer")
    a = wrap_axis(dim, x.rank)
    d = cx.g.dims(x)[a]
    if isinstance(d, Lit):
        size = -(-d.value // chunks)
        return _l_split(cx, x, size, a) if d.value else (x,)
    size = (d + chunks - 1) // chunks
    last = d - (chunks - 1) * size
    cx.g.require(last - 1, "chunk", f"axis {a} ({d!r}) splits into {chunks} non-empty chunks "
                 f"of ceil({d!r}/{chunks}) (the last shorter)", cx.where)
    return _l_split(cx, x, [size] * (chunks - 1) + [last], a)


def _l_unbind(cx, input, dim=0):
    x = tensor_arg(input)
    a = wrap_axis(dim, x.rank)
    d = cx.g.dims(x)[a]
    if not isinstance(d, Lit):
        raise UnsupportedOp(f"unbind of symbolic axis {a} ({d!r}): the output count would vary "
                            f"with the axis")
    return tuple(_l_getitem(cx, x, (slice(None),) * a + (i,)) for i in range(d.value))


def _l_pad(cx, input, pad, mode="constant", value=None):
    x = tensor_arg(input)
    if mode not in ("constant", *PAD_MODES):
        raise UnsupportedOp(f"pad mode {mode!r} (constant, reflect, replicate, circular)")
    pad = [dim_arg(p, "pad width") for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.rank:
        raise ShapeError(f"pad {pad} for a rank-{x.rank} tensor")
    if mode != "constant":
        return _pad_mode(cx, x, pad, mode, value)
    before, after = [lit(0)] * x.rank, [lit(0)] * x.rank
    for i in range(len(pad) // 2):
        a = x.rank - 1 - i
        x, before[a], after[a] = _crop(cx, x, a, pad[2 * i], pad[2 * i + 1])
    if all(p is lit(0) for p in before + after):
        return x
    return cx.apply("pad", x, before=tuple(before), after=tuple(after),
                    value=0.0 if value is None else value)


def _pad_mode(cx: Cx, x: Value, pad: list[Expr], mode: str, value: Any) -> Value:
    """Reflect, replicate or circular padding: one ``pad_axis`` per padded axis (the index maps
    are separable). torch's rules: 1 to 3 padded axes after one or two leading axes, every axis
    but a leading batch axis non-empty (reflect, replicate), no ``value``. Circular crops
    negative widths first and wraps the cropped axis, as torch does."""
    if value is not None:
        raise UnsupportedOp(f"pad mode {mode!r} takes no value (torch rejects value={value!r})")
    k = len(pad) // 2
    if not 1 <= k <= 3 or x.rank not in (k + 1, k + 2):
        raise ShapeError(f"{mode} pad of {k} axes needs a rank-{k + 1} or rank-{k + 2} input, "
                         f"got rank {x.rank} (torch's rule)")
    dims = cx.g.dims(x)
    if mode != "circular":
        for a in range(1 if x.rank == k + 2 else 0, x.rank):
            cx.g.require(dims[a] - 1, "pad", f"{mode} pad: axis {a} ({dims[a]!r}) is not empty "
                         f"(torch's rule for non-batch axes)", cx.where)
    for i in range(k):
        a = x.rank - 1 - i
        b, e = pad[2 * i], pad[2 * i + 1]
        if b is lit(0) and e is lit(0):
            continue
        if mode == "circular":
            x, b, e = _crop(cx, x, a, b, e)
            if b is lit(0) and e is lit(0):
                continue
        x = cx.apply("pad_axis", x, dim=a - x.rank, before=b, after=e, mode=mode)
    return x


def _crop(cx: Cx, x: Value, a: int, b: Expr, e: Expr) -> tuple[Value, Expr, Expr]:
    """Negative pad widths on axis ``a`` as a slice (the cropped axis must stay non-negative);
    returns the sliced value and the widths left (negative ones 0)."""
    neg = [isinstance(w, Lit) and w.value < 0 for w in (b, e)]
    if not any(neg):
        return x, b, e
    d = cx.g.dims(x)[a]
    lo = -b if neg[0] else lit(0)
    hi = d + e if neg[1] else d
    cx.g.require(hi - lo, "pad", f"negative pad ({b!r}, {e!r}) crops axis {a} of extent {d!r} "
                 f"to a non-negative size", cx.where)
    return slice_axis(cx, x, a, lo, hi, 1), *(lit(0) if n else w for n, w in zip(neg, (b, e)))


def _l_expand(cx, input, *sizes, **kwargs):
    x = tensor_arg(input)
    if "size" in kwargs:
        sizes = (kwargs.pop("size"),)
    kwargs.pop("implicit", None)
    if kwargs:
        raise UnsupportedOp(f"unexpected arguments {kwargs}")
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    sizes = tuple(s.value if isinstance(s, Lit) else s for s in sizes)
    if list(sizes) == list(cx.g.dims(x)) or all(isinstance(s, int) and s == -1 for s in sizes) \
            and len(sizes) == x.rank:
        return x
    return cx.apply("expand", x, sizes=sizes)


def _l_expand_as(cx, input, other):
    return _l_expand(cx, input, tuple(cx.g.dims(tensor_arg(other, "other"))))


def _l_roll(cx, input, shifts, dims=None):
    """Without ``dims``, a roll of the flattened tensor (reshaped back)."""
    x = tensor_arg(input)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in shifts):
        raise UnsupportedOp(f"roll shifts {shifts!r}: Python ints only")
    if dims is None:
        if len(shifts) != 1:
            raise ShapeError(f"roll without dims takes one shift, got {list(shifts)}")
        dims_x = cx.g.dims(x)
        flat = cx.apply("reshape", x, shape=(prod(dims_x),))
        return cx.apply("reshape", cx.apply("roll", flat, shifts=shifts, dims=(0,)),
                        shape=tuple(dims_x))
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"roll shifts {list(shifts)} and dims {list(dims)} differ in length")
    return cx.apply("roll", x, shifts=shifts, dims=tuple(wrap_axis(d, x.rank) for d in dims))


def _l_t(cx, input):
    x = tensor_arg(input)
    if x.rank > 2:
        raise ShapeError(f"t() of a rank-{x.rank} tensor")
    return x if x.rank < 2 else cx.apply("permute", x, dims=(1, 0))


def _l_unfold(cx, input, dimension, size, step):
    x = tensor_arg(input)
    for v, what in ((size, "size"), (step, "step")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ShapeError(f"unfold {what} {v!r}: a positive int")
    a = wrap_axis(dimension, x.rank)
    if x.rank == 0:   # torch: a 0-d tensor is one window of size 1
        if size != 1:
            raise ShapeError(f"unfold size {size} of a 0-d tensor (its one element: size 1)")
        return cx.apply("reshape", x, shape=(1,))
    return cx.apply("window", x, dim=a, size=size, step=step, dilation=1)


LOWERINGS: dict[str, Callable] = {
    "conv2d": _l_conv2d, "linear": _l_linear, "matmul": _l_matmul, "bmm": _ranked(3),
    "mm": _ranked(2), "addmm": _l_addmm, "sdpa": _l_sdpa,
    "batch_norm": _l_batch_norm, "layer_norm": _l_layer_norm,
    "softmax": _softmax(False), "log_softmax": _softmax(True),
    **{op: _act(op) for op in ("silu", "hardswish", "hardsigmoid")},
    "relu6": _l_relu6, "hardtanh": _l_hardtanh, "gelu": _l_gelu, "clamp": _l_clamp,
    "dropout": _l_dropout,
    "max_pool2d": _l_max_pool2d, "max_pool2d_with_indices": _l_max_pool2d_with_indices,
    "avg_pool2d": _l_avg_pool2d, "adaptive_avg_pool2d": _l_adaptive_avg_pool2d,
    "getitem": _l_getitem, "narrow": _l_narrow, "cat": _l_cat, "stack": _l_stack,
    "unsqueeze": _l_unsqueeze, "squeeze": _l_squeeze, "split": _l_split,
    "split_with_sizes": _l_split_with_sizes, "chunk": _l_chunk, "unbind": _l_unbind,
    "pad": _l_pad, "expand": _l_expand, "expand_as": _l_expand_as, "roll": _l_roll, "t": _l_t,
    "unfold": _l_unfold,
}
