"""Index lowerings (paper §4.3): an input coordinate read from an index tensor
(``index_select``, ``gather``, ``embedding``, advanced indexing ``index.Tensor``)."""

from __future__ import annotations

from typing import Any

import torch

from ...dims import Expr, Lit, lit, prod
from ...errors import DTypeError, ShapeError, UnsupportedOp
from ...ir.graph import Value
from ...ir.ops import Ops
from ..common import Cx, refuse, tensor_arg, wrap_axis
from ..registry import NOT_FUZZED, UNLISTED, aten, register
from .factory import size_value
from .shape import slice_axis



@register(aten.embedding, ir=(Ops.embedding,), opinfo=("nn.functional.embedding",), fuzz=("embedding",))
def embedding(cx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight`` at ``indices`` (``padding_idx`` matters to the gradient only)."""
    return cx.apply(Ops.embedding, tensor_arg(indices), tensor_arg(weight, "weight"))


@register(aten.index_select, ir=(Ops.index_select, Ops.reshape), opinfo=("index_select",),
          fuzz=("index_select",))
def index_select(cx, input, dim, index, *, out=None):
    """A 0-d input is indexed as a 1-element vector (its index: one element, 0) and stays 0-d."""
    refuse(out=(out, None))
    x, idx = tensor_arg(input), tensor_arg(index, "index")
    a = wrap_axis(dim, x.rank)
    if x.rank == 0:
        if idx.rank:
            cx.g.constrain(cx.g.dims(idx)[0], lit(1), "index_select",
                           "the index of a 0-d input has one element", cx.where)
        y = cx.apply(Ops.index_select, _vector(cx, x), _vector(cx, idx), dim=0)
        return cx.apply(Ops.reshape, y, shape=())
    return cx.apply(Ops.index_select, x, idx, dim=a)


def _vector(cx, x: Value) -> Value:
    """A 0-d tensor as a 1-element vector (others unchanged)."""
    return x if x.rank else cx.apply(Ops.reshape, x, shape=(1,))


def _empty_like_index(cx, x: Value, dims) -> Value:
    """An empty value of ``x``'s dtype and shape ``dims`` (numel 0): ``x`` flattened, sliced
    to nothing, reshaped."""
    flat = cx.apply(Ops.reshape, x, shape=(prod(cx.g.dims(x)),))
    return cx.apply(Ops.reshape, slice_axis(cx, flat, 0, 0, 0, 1), shape=tuple(dims))


@register(aten.gather, ir=(Ops.gather, Ops.reshape), opinfo=("gather",), no_fuzz=NOT_FUZZED)
def gather(cx, input, dim, index, *, sparse_grad=False, out=None):
    """torch's rules: a 0-d input or index acts as a 1-element vector (the result has the
    index's shape); an empty index is not checked at all (any dtype and rank: an empty
    result)."""
    refuse(out=(out, None))
    x, idx = tensor_arg(input), tensor_arg(index, "index")
    a = wrap_axis(dim, x.rank)
    di = cx.g.dims(idx)
    if any(d is lit(0) for d in di):
        return _empty_like_index(cx, x, di)
    if x.rank and idx.rank:
        return cx.apply(Ops.gather, x, idx, dim=a)
    y = cx.apply(Ops.gather, _vector(cx, x), _vector(cx, idx), dim=a)
    return y if idx.rank else cx.apply(Ops.reshape, y, shape=())


def _extent(cx: Cx, d: Expr) -> Any:
    """A size as an elementwise operand: a Python int, or counted in a kernel."""
    return d.value if isinstance(d, Lit) else size_value(cx, d, "an indexed axis' extent")


@register(aten.index, ir=(Ops.index_select, Ops.where, Ops.lt, Ops.ge, Ops.add, Ops.mul, Ops.logical_and,
                          Ops.reshape, Ops.permute), no_opinfo=UNLISTED, no_fuzz=NOT_FUZZED)
def index(cx, input, indices):
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
        i = cx.apply(Ops.where, cx.apply(Ops.lt, i, 0), cx.apply(Ops.add, i, d), i)
        inside = cx.apply(Ops.logical_and, cx.apply(Ops.ge, i, 0), cx.apply(Ops.lt, i, d))
        ok = inside if ok is None else cx.apply(Ops.logical_and, ok, inside)
        lin = i if lin is None else cx.apply(Ops.add, cx.apply(Ops.mul, lin, d), i)
    lin = cx.apply(Ops.where, ok, lin, -1)
    bshape = cx.g.dims(lin)
    xp = x if pos + rest == list(range(x.rank)) else \
        cx.apply(Ops.permute, x, dims=tuple(pos + rest))
    xf = cx.apply(Ops.reshape, xp, shape=(prod([dims[a] for a in pos]), *(dims[a] for a in rest)))
    flat = cx.apply(Ops.reshape, lin, shape=(prod(bshape),))
    y = cx.apply(Ops.index_select, xf, flat, dim=0)
    y = cx.apply(Ops.reshape, y, shape=(*bshape, *(dims[a] for a in rest)))
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    if adjacent and pos[0] > 0:   # the broadcast axes go where the indexed ones were
        k, b = pos[0], len(bshape)
        perm = (*range(b, b + k), *range(b), *range(b + k, y.rank))
        y = cx.apply(Ops.permute, y, dims=perm)
    return y
