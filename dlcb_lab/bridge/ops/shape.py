"""Shape lowerings: views (reshape, view, flatten, permute, transpose, expand, unsqueeze,
squeeze), slices and selections (slice, select, narrow, split, chunk, unbind), concatenation,
padding, rolls, windows (unfold), flips, repeats and diff: coordinate transforms and guarded
selections, fused into their readers.

Where torch's result depends on a run-time size in a way the graph cannot express, a symbolic axis
is instead required to hold the static reading (a host check, ``ShapeMismatch`` before any
launch): a slice torch would clamp must lie in the axis, a chunk count must not shrink, an axis
``squeeze`` may drop must not be 1.
"""

from __future__ import annotations

from typing import Any

import torch

from ...dims import Expr, Lit, as_expr, lit, prod
from ...errors import ShapeError, UnsupportedOp
from ...ir.graph import Value
from ...ir.ops import Ops
from ...ir.ops.shape import PAD_MODES
from ..common import Cx, axes_arg, constant_int, dim_arg, refuse, tensor_arg, wrap_axis
from ..registry import NOT_FUZZED, UNLISTED, aten, register

BY_GETITEM = "``__getitem__``'s samples reach it (named on ``aten.slice``)"


@register(aten.contiguous, ir=(), opinfo=("contiguous",), no_fuzz=NOT_FUZZED)
def contiguous(cx, input, memory_format=torch.contiguous_format):
    refuse(memory_format=(memory_format, torch.contiguous_format))
    return tensor_arg(input)


@register(aten.reshape, ir=(Ops.reshape,), opinfo=("reshape",), fuzz=("reshape",))
def reshape(cx, input, shape):
    return cx.apply(Ops.reshape, tensor_arg(input), shape=tuple(shape))


@register(aten.flatten, ir=(Ops.reshape,), opinfo=("flatten",), fuzz=("flatten",))
def flatten(cx, input, start_dim=0, end_dim=-1):
    x = tensor_arg(input)
    s, e = wrap_axis(start_dim, x.rank, "start_dim"), wrap_axis(end_dim, x.rank, "end_dim")
    if s > e:
        raise ShapeError(f"start_dim {start_dim} comes after end_dim {end_dim}")
    if x.rank == 0:
        return cx.apply(Ops.reshape, x, shape=(1,))
    dims = cx.g.dims(x)
    return cx.apply(Ops.reshape, x, shape=(*dims[:s], prod(dims[s:e + 1]), *dims[e + 1:]))


@register(aten.permute, ir=(Ops.permute,), opinfo=("permute",), fuzz=("permute",))
def permute(cx, input, dims):
    x = tensor_arg(input)
    dims = tuple(dims)
    if len(dims) != x.rank:
        raise ShapeError(f"permute needs {x.rank} axes, got {list(dims)}")
    perm = tuple(wrap_axis(p, x.rank) for p in dims)
    if len(set(perm)) != len(perm):
        raise ShapeError(f"axes {list(dims)} repeat an axis")
    return cx.apply(Ops.permute, x, dims=perm)


@register(aten.transpose, ir=(Ops.permute,), opinfo=("transpose",), fuzz=("transpose",))
def transpose(cx, input, dim0, dim1):
    x = tensor_arg(input)
    a, b = wrap_axis(dim0, x.rank, "dim0"), wrap_axis(dim1, x.rank, "dim1")
    if x.rank == 0 or a == b:
        return x
    perm = list(range(x.rank))
    perm[a], perm[b] = perm[b], perm[a]
    return cx.apply(Ops.permute, x, dims=tuple(perm))


@register(aten.clone, aten.alias, aten.detach, aten.detach_, aten.lift_fresh_copy,
          aten.lift_fresh, ir=(), no_opinfo=UNLISTED, no_fuzz="computes nothing")
def identity(cx, input, *args, **kwargs):
    """``clone``, ``alias``, ``detach``, ``lift_fresh_copy``: the value (values are immutable in
    the IR; an in-place op on it is functionalized)."""
    return tensor_arg(input)


@register(aten.expand, ir=(Ops.expand,), opinfo=("expand",), fuzz=("expand",))
def expand(cx, input, size, *, implicit=False):
    return _expand_to(cx, input, tuple(size))


@register(aten.view, aten._unsafe_view, ir=(Ops.reshape,), opinfo=("view",),
          no_fuzz="the ``reshape`` entry reaches it")
def view(cx, input, size):
    if isinstance(size, torch.dtype):
        raise UnsupportedOp("view(dtype) (a bit cast) is unsupported")
    return reshape(cx, input, size)


@register(aten.unflatten, ir=(Ops.reshape,), opinfo=("unflatten",), no_fuzz=NOT_FUZZED)
def unflatten(cx, input, dim, sizes):
    """Axis ``dim`` split into ``sizes`` (one may be -1): a reshape."""
    x = tensor_arg(input)
    a = wrap_axis(dim, x.rank)
    dims = list(cx.g.dims(x))
    return reshape(cx, x, (*dims[:a], *sizes, *dims[a + 1:]))


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
    return cx.apply(Ops.slice, x, dim=axis, start=s_e, length=n_e, step=step)


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


def getitem(cx, input, idx):
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
        y = cx.apply(Ops.reshape, y, shape=tuple(out_dims))
    return y


@register(aten.slice, ir=(Ops.slice,), opinfo=("__getitem__",),
          no_fuzz="the ``narrow`` entry reaches it")
def aten_slice(cx, input, dim=0, start=None, end=None, step=1):
    x = tensor_arg(input)
    return slice_axis(cx, x, wrap_axis(dim, x.rank), start, end, step)


@register(aten.select, ir=(Ops.slice, Ops.reshape), no_opinfo=BY_GETITEM, no_fuzz=NOT_FUZZED)
def select(cx, input, dim, index):
    x = tensor_arg(input)
    a = wrap_axis(dim, x.rank)
    return getitem(cx, x, (slice(None),) * a + (index,))


@register(aten.narrow, ir=(Ops.slice,), opinfo=("narrow",), fuzz=("narrow",))
def narrow(cx, input, dim, start, length):
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


@register(aten.cat, aten.concat, aten.concatenate, ir=(Ops.cat,), opinfo=("cat",),
          fuzz=("cat",))
def cat(cx, tensors, dim=0, *, out=None):
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
    return cx.apply(Ops.cat, *xs, dim=a)


@register(aten.stack, ir=(Ops.cat, Ops.reshape), opinfo=("stack",), no_fuzz=NOT_FUZZED)
def stack(cx, tensors, dim=0, *, out=None):
    xs = [tensor_arg(t, "tensors") for t in tensors]
    if not xs:
        raise ShapeError("stack of no tensors")
    a = wrap_axis(dim, xs[0].rank + 1)
    return cat(cx, [unsqueeze_axis(cx, x, a) for x in xs], a, out=out)


def unsqueeze_axis(cx: Cx, x: Value, a: int) -> Value:
    dims = list(cx.g.dims(x))
    return cx.apply(Ops.reshape, x, shape=tuple(dims[:a] + [lit(1)] + dims[a:]))


@register(aten.unsqueeze, ir=(Ops.reshape,), opinfo=("unsqueeze",), fuzz=("unsqueeze",))
def unsqueeze(cx, input, dim):
    x = tensor_arg(input)
    return unsqueeze_axis(cx, x, wrap_axis(dim, x.rank + 1))


@register(aten.squeeze, ir=(Ops.reshape,), opinfo=("squeeze",), fuzz=("squeeze",))
def squeeze(cx, input, dim=None):
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
    return cx.apply(Ops.reshape, x, shape=tuple(d for a, d in enumerate(dims) if a not in drop))


def split_sections(cx, tensor, split_size_or_sections, dim=0):
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


@register(aten.split, ir=(Ops.slice,), opinfo=("split",), no_fuzz=NOT_FUZZED)
def split(cx, input, split_size, dim=0):
    return split_sections(cx, input, split_size, dim)


@register(aten.split_with_sizes, ir=(Ops.slice,), opinfo=("split_with_sizes",),
          no_fuzz=NOT_FUZZED)
def split_with_sizes(cx, input, split_sizes, dim=0):
    if not isinstance(split_sizes, (tuple, list)):
        raise UnsupportedOp(f"split_sizes {split_sizes!r} is not a list of sizes")
    return split_sections(cx, input, split_sizes, dim)


@register(aten.chunk, ir=(Ops.slice,), opinfo=("chunk",), no_fuzz=NOT_FUZZED)
def chunk(cx, input, chunks, dim=0):
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
        return split_sections(cx, x, size, a) if d.value else (x,)
    size = (d + chunks - 1) // chunks
    last = d - (chunks - 1) * size
    cx.g.require(last - 1, "chunk", f"axis {a} ({d!r}) splits into {chunks} non-empty chunks "
                 f"of ceil({d!r}/{chunks}) (the last shorter)", cx.where)
    return split_sections(cx, x, [size] * (chunks - 1) + [last], a)


@register(aten.unbind, ir=(Ops.slice, Ops.reshape), opinfo=("unbind",), no_fuzz=NOT_FUZZED)
def unbind(cx, input, dim=0):
    x = tensor_arg(input)
    a = wrap_axis(dim, x.rank)
    d = cx.g.dims(x)[a]
    if not isinstance(d, Lit):
        raise UnsupportedOp(f"unbind of symbolic axis {a} ({d!r}): the output count would vary "
                            f"with the axis")
    return tuple(getitem(cx, x, (slice(None),) * a + (i,)) for i in range(d.value))


@register(aten.pad, ir=(Ops.pad, Ops.pad_axis, Ops.slice), opinfo=("nn.functional.pad",),
          fuzz=("pad",))
def pad(cx, input, pad, mode="constant", value=None):
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
    return cx.apply(Ops.pad, x, before=tuple(before), after=tuple(after),
                    value=0.0 if value is None else value)


@register(aten.constant_pad_nd, ir=(Ops.pad, Ops.slice),
          no_opinfo="``nn.functional.pad``'s samples reach it", no_fuzz="the ``pad`` entry reaches it")
def constant_pad_nd(cx, input, pad, value=0):
    return pad(cx, input, pad, "constant", value)


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
        x = cx.apply(Ops.pad_axis, x, dim=a - x.rank, before=b, after=e, mode=mode)
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


def _expand_to(cx, input, *sizes, **kwargs):
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
    return cx.apply(Ops.expand, x, sizes=sizes)


@register(aten.expand_as, ir=(Ops.expand,), opinfo=("expand_as",), no_fuzz=NOT_FUZZED)
def expand_as(cx, input, other):
    return _expand_to(cx, input, tuple(cx.g.dims(tensor_arg(other, "other"))))


@register(aten.reshape_as, aten.view_as, ir=(Ops.reshape,), opinfo=("reshape_as", "view_as"),
          slow=True, no_fuzz=NOT_FUZZED)
def reshape_as(cx, input, other):
    return cx.apply(Ops.reshape, tensor_arg(input), shape=cx.g.dims(tensor_arg(other, "other")))


@register(aten.roll, ir=(Ops.roll, Ops.reshape), opinfo=("roll",), fuzz=("roll",))
def roll(cx, input, shifts, dims=None):
    """Without ``dims``, a roll of the flattened tensor (reshaped back)."""
    x = tensor_arg(input)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in shifts):
        raise UnsupportedOp(f"roll shifts {shifts!r}: Python ints only")
    if dims is None:
        if len(shifts) != 1:
            raise ShapeError(f"roll without dims takes one shift, got {list(shifts)}")
        dims_x = cx.g.dims(x)
        flat = cx.apply(Ops.reshape, x, shape=(prod(dims_x),))
        return cx.apply(Ops.reshape, cx.apply(Ops.roll, flat, shifts=shifts, dims=(0,)),
                        shape=tuple(dims_x))
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"roll shifts {list(shifts)} and dims {list(dims)} differ in length")
    return cx.apply(Ops.roll, x, shifts=shifts, dims=tuple(wrap_axis(d, x.rank) for d in dims))


@register(aten.t, ir=(Ops.permute,), opinfo=("t",), no_fuzz=NOT_FUZZED)
def t(cx, input):
    x = tensor_arg(input)
    if x.rank > 2:
        raise ShapeError(f"t() of a rank-{x.rank} tensor")
    return x if x.rank < 2 else cx.apply(Ops.permute, x, dims=(1, 0))


@register(aten.unfold, ir=(Ops.window, Ops.reshape), opinfo=("unfold",), no_fuzz=NOT_FUZZED)
def unfold(cx, input, dimension, size, step):
    x = tensor_arg(input)
    for v, what in ((size, "size"), (step, "step")):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ShapeError(f"unfold {what} {v!r}: a positive int")
    a = wrap_axis(dimension, x.rank)
    if x.rank == 0:   # torch: a 0-d tensor is one window of size 1
        if size != 1:
            raise ShapeError(f"unfold size {size} of a 0-d tensor (its one element: size 1)")
        return cx.apply(Ops.reshape, x, shape=(1,))
    return cx.apply(Ops.window, x, dim=a, size=size, step=step, dilation=1)


@register(aten.flip, ir=(Ops.flip,), opinfo=("flip",), slow=True, fuzz=("flip",))
def flip(cx, input, dims):
    """``flip``: a coordinate transform (``D - 1 - c`` on each flipped axis)."""
    x = tensor_arg(input)
    axes = [wrap_axis(d, x.rank) for d in dims]
    if len(set(axes)) != len(axes):
        raise ShapeError(f"flip: dims {list(dims)} repeat an axis")
    return cx.apply(Ops.flip, x, dims=tuple(sorted(axes))) if axes and x.rank else x


@register(aten.repeat, ir=(Ops.reshape, Ops.expand), opinfo=("repeat",), slow=True,
          no_fuzz=NOT_FUZZED)
def repeat(cx, input, repeats):
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
        return x if len(reps) == x.rank else cx.apply(Ops.reshape, x, shape=tuple(dims))
    pairs = [e for d in dims for e in (lit(1), d)]
    y = cx.apply(Ops.reshape, x, shape=tuple(pairs))
    y = cx.apply(Ops.expand, y, sizes=tuple(e for r, d in zip(reps, dims) for e in (r, d)))
    return cx.apply(Ops.reshape, y, shape=tuple(r * d for r, d in zip(reps, dims)))


@register(aten.diff, ir=(Ops.slice, Ops.sub, Ops.ne, Ops.cat), opinfo=("diff",), slow=True,
          no_fuzz=NOT_FUZZED)
def diff(cx, input, n=1, dim=-1, prepend=None, append=None):
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
        x = cat(cx, parts, a)
    for _ in range(n):
        d = cx.g.dims(x)[a]
        if isinstance(d, Lit) and d.value == 0:   # empty stays empty, however many more times
            break
        if not isinstance(d, Lit):   # torch's extent is max(d - n, 0): one form for d >= n
            cx.g.require(d - 1, cx.name, f"diff of order {n} along axis {a} needs the axis "
                                         f"(with prepend/append) to have at least {n} elements",
                         cx.where)
        hi = slice_axis(cx, x, a, 1, None, 1)
        lo = slice_axis(cx, x, a, 0, d - 1, 1)
        x = cx.apply(Ops.ne if x.dtype is torch.bool else Ops.sub, hi, lo)
    return x
