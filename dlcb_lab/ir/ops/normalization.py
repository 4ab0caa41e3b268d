"""Row-wise normalizations, one kernel each (``OpKind.ROW``): a row is the set of elements that
share every coordinate outside ``axes``. A kernel makes two passes over each row: the first folds
the row into accumulators (softmax: running max and rescaled sum of exponentials, or, with the row
in registers, its max and then the sum; layer norm: sum and sum of squares, in double), the second
writes every element of the row (layer norm: times ``weight``, plus ``bias``; indexed by the row,
or broadcast against the input where ``affine="full"``, from ``rewrite.norm_affine``). So the
input (and any chain fused into it) is read twice, or once where the CUDA block-per-row kernel
holds the row in registers (``kgen.entries.ROW_CACHE``)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ...dims import Shape, lit, shape
from ...errors import ShapeError
from .core import Coords, OpDef, OpKind, register
from .elementwise import broadcast_coords

if TYPE_CHECKING:
    from ..graph import Graph, Node


class RowKind(enum.Enum):
    SOFTMAX = "softmax"           # exp(x - m) / s
    LOG_SOFTMAX = "log_softmax"   # x - m - log(s)
    NORM = "norm"                 # (x - mean) * rsqrt(var + eps) [* weight [+ bias]]


ROW_KINDS = {"softmax": RowKind.SOFTMAX, "log_softmax": RowKind.LOG_SOFTMAX,
             "layer_norm": RowKind.NORM}


def _infer_row(g: "Graph", node: "Node") -> Shape:
    x, *affine = node.inputs
    axes = node.attrs["axes"]
    if not axes or any(not 0 <= a < x.rank for a in axes) or len(set(axes)) != len(axes):
        raise ShapeError(f"row axes {list(axes)} of a rank-{x.rank} tensor")
    if not x.dtype.is_floating_point:
        raise ShapeError(f"{node.op.name} of {x.dtype}")
    dims = g.dims(x)
    full = node.attrs.get("affine") == "full"
    for i, p in enumerate(affine):
        if full:   # broadcast against the input, axes right-aligned
            if p.rank > x.rank:
                raise ShapeError(f"affine operand {i} has rank {p.rank}, the input {x.rank}")
            off = x.rank - p.rank
            pairs = [(k, k + off) for k in range(p.rank) if g.dims(p)[k] is not lit(1)]
        elif p.rank != len(axes):   # layer norm's own weight and bias: the row's shape
            raise ShapeError(f"affine operand {i} has rank {p.rank}, the row {len(axes)}")
        else:
            pairs = list(enumerate(axes))
        for k, a in pairs:
            g.constrain(g.dims(p)[k], dims[a], node, f"affine operand {i} axis {k} with input "
                                                     f"axis {a}")
    return shape(dims)


def reverse_row(g: "Graph", node: "Node", coords: Coords, *, loops: Coords) -> list[Coords]:
    """Input coordinates of row element ``loops`` (one variable per row axis) of the row at
    ``coords`` (the non-row coordinates; row axes ignored), and the affine operands': indexed by
    the row's coordinates, or (``affine="full"``) broadcast against the whole input."""
    axes = node.attrs["axes"]
    full = list(coords)
    for a, lv in zip(axes, loops):
        full[a] = lv
    if node.attrs.get("affine") == "full":
        dims = g.dims(node.out)
        return [full] + [broadcast_coords(g, p, dims, full) for p in node.inputs[1:]]
    return [full] + [list(loops) for _ in node.inputs[1:]]


def _ref_softmax(x, axes, log=False):
    return (F.log_softmax if log else F.softmax)(x, axes[0])


def _ref_layer_norm(x, weight=None, bias=None, *, axes, eps, affine="row"):
    if affine == "row":
        return F.layer_norm(x, [x.shape[a] for a in axes], weight, bias, eps)
    y = F.layer_norm(x, [x.shape[a] for a in axes], None, None, eps) * weight
    return y if bias is None else y + bias


def _sample_softmax(n: int):
    g = torch.Generator().manual_seed(n)
    return (torch.randn(n, 3, 5, generator=g) * 3,), {"axes": (1,)}


def _sample_layer_norm(n: int):
    g = torch.Generator().manual_seed(n)
    return ((torch.randn(n, 3, 5, generator=g) * 2 + 1, torch.randn(3, 5, generator=g),
             torch.randn(3, 5, generator=g)), {"axes": (1, 2), "eps": 1e-5})


register(OpDef("softmax", OpKind.ROW, _infer_row, reverse_row, _ref_softmax,
               sample=_sample_softmax, floating=True))
register(OpDef("log_softmax", OpKind.ROW, _infer_row, reverse_row,
               lambda x, axes: _ref_softmax(x, axes, log=True), sample=_sample_softmax,
               floating=True))
register(OpDef("layer_norm", OpKind.ROW, _infer_row, reverse_row, _ref_layer_norm,
               sample=_sample_layer_norm, floating=True))
