"""The op registry. Each op declares (1) its shape constraints (``infer``), (2) its reverse
coordinate transform (``reverse``: output coordinates -> each tensor input's coordinates, used by
kgen), (3) its reference semantics (``reference``: a torch call) and, for elementwise ops, (4) its
scalar code in CUDA C++ and Python (``cuda``/``py``: format strings over operand expressions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..dims import Expr, Shape, ShapeError, lit, prod, shape

if TYPE_CHECKING:
    from .graph import Graph, Node

Coords = list[Expr]


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str                      # "elementwise" | "reshape" | "permute" | "reduce"
    infer: Callable[["Graph", "Node"], Shape]
    reverse: Callable[..., list[Coords | None]]
    reference: Callable[..., torch.Tensor]
    cuda: dict[str, str] = field(default_factory=dict)   # dtype tag -> format string
    py: str = ""

    def __repr__(self) -> str:
        return f"OpDef({self.name}, {self.kind})"


OPS: dict[str, OpDef] = {}


def _register(op: OpDef) -> None:
    OPS[op.name] = op


# --- elementwise with broadcasting ---------------------------------------------------------------

def _infer_broadcast(g: "Graph", node: "Node") -> Shape:
    tensors = [(i, x) for i, x in enumerate(node.inputs) if not _is_scalar(x)]
    rank = max(x.rank for _, x in tensors)
    out: list[Expr] = []
    for ax in range(rank):
        cur: Expr | None = None
        src = None
        for i, x in tensors:
            k = ax - (rank - x.rank)
            if k < 0:
                continue
            d = g.solver.resolve(x.shape[k])
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
    return shape(out)


def _reverse_broadcast(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords | None]:
    out_dims = g.dims(node.out)
    res: list[Coords | None] = []
    for x in node.inputs:
        if _is_scalar(x):
            res.append(None)
            continue
        off = len(coords) - x.rank
        dims = g.dims(x)
        res.append([lit(0) if (dims[k] is lit(1) and out_dims[k + off] is not lit(1))
                    else coords[k + off] for k in range(x.rank)])
    return res


def _is_scalar(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _elementwise(name: str, ref, cuda32: str, cuda64: str, py: str) -> None:
    _register(OpDef(name, "elementwise", _infer_broadcast, _reverse_broadcast, ref,
                    {"f32": cuda32, "f64": cuda64}, py))


# name, reference, CUDA float, CUDA double, Python/numba. NaN semantics follow torch.
_elementwise("relu", torch.relu, "({0} < 0.0f ? 0.0f : {0})", "({0} < 0.0 ? 0.0 : {0})",
             "(0.0 if {0} < 0.0 else {0})")
_elementwise("neg", torch.neg, "(-{0})", "(-{0})", "(-{0})")
_elementwise("exp", torch.exp, "expf({0})", "exp({0})", "math.exp({0})")
_elementwise("sigmoid", torch.sigmoid, "(1.0f / (1.0f + expf(-{0})))",
             "(1.0 / (1.0 + exp(-{0})))", "_sigmoid({0})")
_elementwise("tanh", torch.tanh, "tanhf({0})", "tanh({0})", "math.tanh({0})")
_elementwise("abs", torch.abs, "fabsf({0})", "fabs({0})", "abs({0})")
_elementwise("add", torch.add, "({0} + {1})", "({0} + {1})", "({0} + {1})")
_elementwise("sub", torch.sub, "({0} - {1})", "({0} - {1})", "({0} - {1})")
_elementwise("mul", torch.mul, "({0} * {1})", "({0} * {1})", "({0} * {1})")
_elementwise("div", torch.div, "({0} / {1})", "({0} / {1})", "_div({0}, {1})")
_elementwise("maximum", torch.maximum, "(({0} > {1} || {0} != {0}) ? {0} : {1})",
             "(({0} > {1} || {0} != {0}) ? {0} : {1})", "_max({0}, {1})")
_elementwise("minimum", torch.minimum, "(({0} < {1} || {0} != {0}) ? {0} : {1})",
             "(({0} < {1} || {0} != {0}) ? {0} : {1})", "_min({0}, {1})")


# --- reshape ---------------------------------------------------------------------------------

def _infer_reshape(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    target = list(node.attrs["shape"])
    holes = [i for i, d in enumerate(target) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ShapeError(f"reshape '{node.out.name}': more than one -1 in {target}")
    for i, d in enumerate(target):
        if isinstance(d, int) and d < -1:
            raise ShapeError(f"reshape '{node.out.name}': invalid size {d} at axis {i}")
    if holes:
        target[holes[0]] = g.fresh_var("r")
    out = shape(target)
    g.constrain(prod(g.dims(x)), out.numel(), node,
                f"numel of input {list(g.dims(x))} == numel of output {list(out)}")
    return shape(g.solver.resolve(d) for d in out)


def _reverse_reshape(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords | None]:
    (x,) = node.inputs
    flat = linear_index(coords, g.dims(node.out))
    in_dims = g.dims(x)
    out: Coords = []
    stride: Expr = lit(1)
    for k in reversed(range(len(in_dims))):
        q = flat // stride
        out.append(q if k == 0 else q % in_dims[k])
        stride = stride * in_dims[k]
    return [out[::-1]]


def linear_index(coords: Sequence[Expr], dims: Sequence[Expr]) -> Expr:
    """Row-major flat index of ``coords`` in a contiguous tensor of shape ``dims``."""
    idx: Expr = lit(0)
    for c, d in zip(coords, dims):
        idx = idx * d + c
    return idx


_register(OpDef("reshape", "reshape", _infer_reshape, _reverse_reshape,
                lambda x, shape: torch.reshape(x, [int(s) for s in shape])))


# --- permute --------------------------------------------------------------------------------

def _infer_permute(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    perm = node.attrs["dims"]
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"permute '{node.out.name}': {list(perm)} is not a permutation of "
                         f"the {x.rank} axes of {list(g.dims(x))}")
    return shape(x.shape[p] for p in perm)


def _reverse_permute(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords | None]:
    perm = node.attrs["dims"]
    out: Coords = [lit(0)] * len(perm)
    for i, p in enumerate(perm):
        out[p] = coords[i]
    return [out]


_register(OpDef("permute", "permute", _infer_permute, _reverse_permute,
                lambda x, dims: x.permute(*dims)))


# --- reductions -------------------------------------------------------------------------------

def _infer_reduce(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    axes, keep = node.attrs["dims"], node.attrs["keepdim"]
    for a in axes:
        if not 0 <= a < x.rank:
            raise ShapeError(f"{node.op.name} '{node.out.name}': axis {a} out of range for rank "
                             f"{x.rank}")
    return shape(lit(1) if a in axes else d for a, d in enumerate(x.shape) if keep or a not in axes)


def _reverse_reduce(g: "Graph", node: "Node", coords: Coords, *, loops: Coords = (), **_
                    ) -> list[Coords | None]:
    (x,) = node.inputs
    axes, keep = node.attrs["dims"], node.attrs["keepdim"]
    it = iter(loops)
    out: Coords = []
    j = 0
    for a in range(x.rank):
        if a in axes:
            out.append(next(it))
            j += keep
        else:
            out.append(coords[j])
            j += 1
    return [out]


@dataclass(frozen=True)
class Reduction:
    """Scalar semantics of a reduction: ``combine`` is ``"sum"`` (accumulated in double, from 0)
    or ``"max"`` (NaN-propagating, from -inf, in the dtype); ``mean`` divides by the count."""

    combine: str
    mean: bool = False


REDUCTIONS = {"sum": Reduction("sum"), "mean": Reduction("sum", mean=True),
              "amax": Reduction("max")}
for _name, _torch_fn in (("sum", torch.sum), ("mean", torch.mean), ("amax", torch.amax)):
    _register(OpDef(_name, "reduce", _infer_reduce, _reverse_reduce,
                    lambda x, dims, keepdim, _f=_torch_fn: _f(x, dim=dims, keepdim=keepdim)))


def reduced_extents(g: "Graph", node: "Node") -> list[Expr]:
    (x,) = node.inputs
    dims = g.dims(x)
    return [dims[a] for a in node.attrs["dims"]]


def scalar_literal(v: float, tag: str) -> tuple[str, str]:
    """(CUDA, Python) spelling of a scalar operand in a kernel of dtype ``tag``."""
    if math.isinf(v) or math.isnan(v):
        c = {"inf": "INFINITY", "-inf": "(-INFINITY)"}.get(repr(float(v)), "NAN")
        py = {"inf": "np.inf", "-inf": "(-np.inf)"}.get(repr(float(v)), "np.nan")
        return (c if tag == "f64" else f"((float){c})"), py
    r = repr(float(v))
    return (r + "f" if tag == "f32" else r), r
