"""Elementwise ops: a broadcasting map over tensor operands and Python scalars. Shapes follow
torch's broadcasting (each pair of non-1 extents is constrained equal); the reverse transform maps
a broadcast axis to coordinate 0. Scalar code is written once per language; NaN semantics follow
torch. Operands arrive cast to the compute dtype; the result is cast to the output dtype."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Sequence

import torch
import torch.nn.functional as F

from ...dims import Expr, Shape, lit, shape
from .core import Coords, OpDef, OpKind, is_scalar, register

if TYPE_CHECKING:
    from ..graph import Graph, Node


def broadcast_dims(g: "Graph", node: "Node", operands: Sequence[tuple[int, Sequence[Expr]]]
                   ) -> list[Expr]:
    """torch's broadcast of the shapes ``operands`` ((operand index, dims) pairs, axes
    right-aligned): every pair of non-1 extents on one axis is constrained equal."""
    rank = max((len(d) for _, d in operands), default=0)
    out: list[Expr] = []
    for ax in range(rank):
        cur: Expr | None = None
        src = None
        for i, dims in operands:
            k = ax - (rank - len(dims))
            if k < 0:
                continue
            d = g.solver.resolve(dims[k])
            if d is lit(1):
                cur = cur or d
                continue
            if cur is None or cur is lit(1):
                cur, src = d, (i, k)
            elif d is not cur:
                g.constrain(cur, d, node, f"broadcast operand {src[0]} axis {src[1]} with "
                                         f"operand {i} axis {k}")
                cur = g.solver.resolve(cur)
        out.append(cur if cur is not None else lit(1))
    return out


def infer_broadcast(g: "Graph", node: "Node") -> Shape:
    return shape(broadcast_dims(g, node, [(i, x.shape.items) for i, x in enumerate(node.inputs)
                                          if not is_scalar(x)]))


def broadcast_coords(g: "Graph", x, out_dims, coords: Coords) -> Coords:
    """Coordinates in ``x`` of output ``coords`` (axes right-aligned; a size-1 axis of ``x``
    against a non-1 output axis reads coordinate 0)."""
    off = len(coords) - x.rank
    dims = g.dims(x)
    return [lit(0) if (dims[k] is lit(1) and out_dims[k + off] is not lit(1)) else coords[k + off]
            for k in range(x.rank)]


def _reverse_broadcast(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords | None]:
    out_dims = g.dims(node.out)
    return [None if is_scalar(x) else broadcast_coords(g, x, out_dims, coords)
            for x in node.inputs]


def _elementwise(name: str, reference: Callable, cuda: str, py: str, sample=None) -> None:
    register(OpDef(name, OpKind.ELEMENTWISE, infer_broadcast, _reverse_broadcast, reference,
                   cuda, py, sample=sample))


def _ref_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype)


def _positive(n: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(n)
    return (torch.rand(n, 3, 5, generator=g) + 0.1,), {}


def _clamp_sample(n: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(n)
    return (torch.randn(n, 3, 5, generator=g) * 4, -0.5, 1.5), {}


# name, reference, CUDA, Python/numba (, sample operands)
for _name, _ref, _cuda, _py, *_sample in (
    ("relu", torch.relu, "({0} < {z} ? {z} : {0})", "({z} if {0} < {z} else {0})"),
    ("neg", torch.neg, "(-{0})", "(-{0})"),
    ("abs", torch.abs, "dlcb_abs({0})", "abs({0})"),
    ("exp", torch.exp, "dlcb_exp({0})", "math.exp({0})"),
    ("log", torch.log, "dlcb_log({0})", "_log({0})", _positive),
    ("sqrt", torch.sqrt, "dlcb_sqrt({0})", "_sqrt({0})", _positive),
    ("rsqrt", torch.rsqrt, "dlcb_rsqrt({0})", "_rsqrt({0})", _positive),
    ("erf", torch.erf, "dlcb_erf({0})", "math.erf({0})"),
    ("sigmoid", torch.sigmoid, "dlcb_sigmoid({0})", "_sigmoid({0})"),
    ("tanh", torch.tanh, "dlcb_tanh({0})", "math.tanh({0})"),
    ("silu", F.silu, "dlcb_silu({0})", "_silu({0})"),
    ("gelu", F.gelu, "dlcb_gelu({0})", "_gelu({0})"),
    ("gelu_tanh", functools.partial(F.gelu, approximate="tanh"), "dlcb_gelu_tanh({0})",
     "_gelu_tanh({0})"),
    ("hardsigmoid", F.hardsigmoid, "dlcb_hardsigmoid({0})", "_hardsigmoid({0})"),
    ("hardswish", F.hardswish, "dlcb_hardswish({0})", "_hardswish({0})"),
    ("clamp", torch.clamp, "dlcb_min(dlcb_max({0}, {1}), {2})", "_min(_max({0}, {1}), {2})",
     _clamp_sample),
    ("add", torch.add, "({0} + {1})", "({0} + {1})"),
    ("sub", torch.sub, "({0} - {1})", "({0} - {1})"),
    ("mul", torch.mul, "({0} * {1})", "({0} * {1})"),
    ("div", torch.div, "({0} / {1})", "_div({0}, {1})"),
    ("maximum", torch.maximum, "dlcb_max({0}, {1})", "_max({0}, {1})"),
    ("minimum", torch.minimum, "dlcb_min({0}, {1})", "_min({0}, {1})"),
    ("eq", torch.eq, "({0} == {1})", "({0} == {1})"),
    ("ne", torch.ne, "({0} != {1})", "({0} != {1})"),
    ("lt", torch.lt, "({0} < {1})", "({0} < {1})"),
    ("le", torch.le, "({0} <= {1})", "({0} <= {1})"),
    ("gt", torch.gt, "({0} > {1})", "({0} > {1})"),
    ("ge", torch.ge, "({0} >= {1})", "({0} >= {1})"),
    ("logical_not", torch.logical_not, "(!{0})", "(not {0})"),
    ("logical_and", torch.logical_and, "({0} && {1})", "(bool({0}) and bool({1}))"),
    ("logical_or", torch.logical_or, "({0} || {1})", "(bool({0}) or bool({1}))"),
    ("where", torch.where, "({0} ? {1} : {2})", "({1} if {0} else {2})"),
    ("to", _ref_to, "{0}", "{0}"),
):
    _elementwise(_name, _ref, _cuda, _py, *_sample)
