"""Index ops (paper §4.3): the input coordinate along one axis is a value read from an index
tensor, so the reverse transform is index-dependent. ``reverse(g, node, coords, index=fn)`` calls
``fn(index_value, index_coords, extent)``, which returns a coordinate variable bounded by
``extent`` holding the loaded index. Indices outside ``[0, extent)`` are refused by the host before
the kernel that reads them is launched (a ``ShapeMismatch``; eager raises too)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F

from ...dims import Shape, lit, shape
from ...errors import DTypeError, ShapeError
from .core import Coords, OpDef, OpKind, register

if TYPE_CHECKING:
    from ..graph import Graph, Node, Value

IndexFn = Callable[["Value", Coords, object], object]


def data_and_index(node: "Node") -> tuple["Value", "Value"]:
    """(the tensor read, the index tensor) of an index op."""
    if node.op.name == "embedding":
        idx, data = node.inputs
    else:
        data, idx = node.inputs
    return data, idx


def _check_index_dtype(idx: "Value") -> None:
    if idx.dtype not in (torch.int64, torch.int32):
        raise DTypeError(f"index tensor of dtype {idx.dtype} (int64 or int32 expected)")


def _rng(n: int) -> torch.Generator:
    return torch.Generator().manual_seed(n)


# --- index_select(x, dim, index): out[..., i, ...] = x[..., index[i], ...] ----------------------

def _infer_index_select(g: "Graph", node: "Node") -> Shape:
    x, idx = node.inputs
    a = node.attrs["dim"]
    _check_index_dtype(idx)
    if idx.rank > 1 or not 0 <= a < x.rank:
        raise ShapeError(f"index_select: index of rank {idx.rank} (at most 1) along axis {a} of "
                         f"a rank-{x.rank} tensor (0-d inputs unsupported)")
    dims = list(g.dims(x))
    dims[a] = g.dims(idx)[0] if idx.rank else lit(1)
    return shape(dims)


def _reverse_index_select(g: "Graph", node: "Node", coords: Coords, *, index: IndexFn, **_
                          ) -> list:
    x, idx = node.inputs
    a = node.attrs["dim"]
    out = list(coords)
    out[a] = index(idx, [coords[a]] if idx.rank else [], g.dims(x)[a])
    return [out, None]


def _ref_index_select(x, index, dim):
    return torch.index_select(x, dim, index)


def _sample_index_select(n: int):
    g = _rng(n)
    return ((torch.randn(n, 5, 3, generator=g), torch.randint(0, 5, (7,), generator=g)),
            {"dim": 1})


# --- embedding(index, weight): out[*j, d] = weight[index[*j], d] ------------------------------------

def _infer_embedding(g: "Graph", node: "Node") -> Shape:
    idx, w = node.inputs
    _check_index_dtype(idx)
    if w.rank != 2:
        raise ShapeError(f"embedding weight must have rank 2, got {w.rank}")
    return shape([*g.dims(idx), g.dims(w)[1]])


def _reverse_embedding(g: "Graph", node: "Node", coords: Coords, *, index: IndexFn, **_) -> list:
    idx, w = node.inputs
    return [None, [index(idx, list(coords[:-1]), g.dims(w)[0]), coords[-1]]]


def _ref_embedding(index, weight):
    return F.embedding(index, weight)


def _sample_embedding(n: int):
    g = _rng(n)
    return ((torch.randint(0, 6, (n, 4), generator=g), torch.randn(6, 3, generator=g)), {})


# --- gather(x, dim, index): out[c] = x[c with c[dim] = index[c]] ------------------------------------

def _infer_gather(g: "Graph", node: "Node") -> Shape:
    x, idx = node.inputs
    a = node.attrs["dim"]
    _check_index_dtype(idx)
    if idx.rank != x.rank or not 0 <= a < x.rank:
        raise ShapeError(f"gather: index rank {idx.rank} != input rank {x.rank} or axis {a} "
                         f"out of range (0-d inputs unsupported)")
    dx, di = g.dims(x), g.dims(idx)
    for k in range(x.rank):
        if k != a:   # torch: index.size(k) <= input.size(k)
            g.require(dx[k] - di[k], node, f"index axis {k} ({di[k]!r}) within input axis {k} "
                                           f"({dx[k]!r})")
    return shape(di)


def _reverse_gather(g: "Graph", node: "Node", coords: Coords, *, index: IndexFn, **_) -> list:
    x, idx = node.inputs
    a = node.attrs["dim"]
    out = list(coords)
    out[a] = index(idx, list(coords), g.dims(x)[a])
    return [out, None]


def _ref_gather(x, index, dim):
    return torch.gather(x, dim, index)


def _sample_gather(n: int):
    g = _rng(n)
    return ((torch.randn(n, 5, 4, generator=g), torch.randint(0, 5, (n, 3, 4), generator=g)),
            {"dim": 1})


for _name, _infer, _rev, _ref, _sample in (
    ("index_select", _infer_index_select, _reverse_index_select, _ref_index_select,
     _sample_index_select),
    ("embedding", _infer_embedding, _reverse_embedding, _ref_embedding, _sample_embedding),
    ("gather", _infer_gather, _reverse_gather, _ref_gather, _sample_gather),
):
    register(OpDef(_name, OpKind.GATHER, _infer, _rev, _ref, sample=_sample))
