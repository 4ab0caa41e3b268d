"""Lowerings of the index ops (``index_select``, ``embedding``/``nn.Embedding``, ``gather``): an
input coordinate read from an index tensor (paper §4.3)."""

from __future__ import annotations

from typing import Callable


from ..dims import lit, prod
from ..errors import UnsupportedOp
from ..ir.graph import Value
from .common import refuse, tensor_arg, wrap_axis
from .nn import slice_axis


def _l_index_select(cx, input, dim, index, *, out=None):
    """A 0-d input is indexed as a 1-element vector (its index: one element, 0) and stays 0-d."""
    refuse(out=(out, None))
    x, idx = tensor_arg(input), tensor_arg(index, "index")
    a = wrap_axis(dim, x.rank)
    if x.rank == 0:
        if idx.rank:
            cx.g.constrain(cx.g.dims(idx)[0], lit(1), "index_select",
                           "the index of a 0-d input has one element", cx.where)
        y = cx.apply("index_select", _vector(cx, x), _vector(cx, idx), dim=0)
        return cx.apply("reshape", y, shape=())
    return cx.apply("index_select", x, idx, dim=a)


def _vector(cx, x: Value) -> Value:
    """A 0-d tensor as a 1-element vector (others unchanged)."""
    return x if x.rank else cx.apply("reshape", x, shape=(1,))


def _empty_like_index(cx, x: Value, dims) -> Value:
    """An empty value of ``x``'s dtype and shape ``dims`` (numel 0): ``x`` flattened, sliced
    to nothing, reshaped."""
    flat = cx.apply("reshape", x, shape=(prod(cx.g.dims(x)),))
    return cx.apply("reshape", slice_axis(cx, flat, 0, 0, 0, 1), shape=tuple(dims))


def _l_embedding(cx, input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False):
    if max_norm is not None:   # renormalizes the weight in place
        raise UnsupportedOp("embedding with max_norm (mutates the weight)")
    return cx.apply("embedding", tensor_arg(input), tensor_arg(weight, "weight"))


def _l_gather(cx, input, dim, index, *, sparse_grad=False, out=None):
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
        return cx.apply("gather", x, idx, dim=a)
    y = cx.apply("gather", _vector(cx, x), _vector(cx, idx), dim=a)
    return y if idx.rank else cx.apply("reshape", y, shape=())


LOWERINGS: dict[str, Callable] = {"index_select": _l_index_select, "embedding": _l_embedding,
                                  "gather": _l_gather}
