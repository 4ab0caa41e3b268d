"""The op registry. Each op declares (1) its shape constraints (``infer``), (2) its reverse
coordinate transform (``reverse``: output coordinates -> each tensor input's coordinates, used by
kgen), (3) its reference semantics (``reference``: a torch call, also the source of its dtype rule:
it is run on one-element tensors) and, for elementwise ops, (4) its scalar code in CUDA C++ and Python
(``cuda``/``py``: format strings over operand spellings ``{0}, {1}, ...`` and ``{z}``, zero in the
compute dtype). An ``OpDef`` pickles by name, so graphs pickle.
"""

from __future__ import annotations

import enum
import functools
import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from ..dims import Expr, Lit, Shape, lit, prod, shape
from ..errors import DTypeError, ShapeError

if TYPE_CHECKING:
    from .graph import Graph, Node

Coords = list[Expr]
Scalar = bool | int | float


class OpKind(enum.Enum):
    ELEMENTWISE = "elementwise"   # broadcasting map over operands; scalar code in cuda/py
    RESHAPE = "reshape"           # pure coordinate transform (row-major re-indexing)
    PERMUTE = "permute"           # pure coordinate transform (axis reordering)
    REDUCE = "reduce"             # a loop over the reduced axes; materialized


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: OpKind
    infer: Callable[["Graph", "Node"], Shape]
    reverse: Callable[..., list[Coords | None]]
    reference: Callable[..., torch.Tensor]
    cuda: str = ""
    py: str = ""

    @property
    def arity(self) -> int:
        """Operand count: the numbered fields of the scalar code (1 for non-elementwise ops)."""
        fields = {f for _, f, _, _ in string.Formatter().parse(self.cuda) if f and f.isdigit()}
        return len(fields) or 1

    def __repr__(self) -> str:
        return f"OpDef({self.name}, {self.kind.value})"

    def __reduce__(self):
        return (op_def, (self.name,))


OPS: dict[str, OpDef] = {}


def op_def(name: str) -> OpDef:
    return OPS[name]


def _register(op: OpDef) -> None:
    OPS[op.name] = op


def is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float))


# --- dtype rule: the reference on one-element tensors -------------------------------------------------

def infer_dtypes(node: "Node") -> tuple[torch.dtype, torch.dtype]:
    """(output dtype, compute dtype) of ``node``, by running its reference on one-element CPU
    tensors of the operands' ranks and dtypes (so torch's type promotion, 0-d and Python-scalar
    rules apply; meta tensors would import torch._dynamo, seconds on first use).
    Elementwise ops compute in the output dtype, except predicates (bool output), which compare in
    the operands' promoted dtype; coordinate transforms keep their input's dtype. ``DTypeError``
    when torch rejects the dtypes."""
    if node.op.kind in (OpKind.RESHAPE, OpKind.PERMUTE):
        return node.inputs[0].dtype, node.inputs[0].dtype
    args = [x if is_scalar(x) else torch.zeros((1,) * x.rank, dtype=x.dtype)
            for x in node.inputs]
    try:
        out = node.op.reference(*args, **node.attrs).dtype
    except (RuntimeError, TypeError, NotImplementedError) as err:
        dts = ", ".join(str(x.dtype).removeprefix("torch.") for x in node.tensor_inputs())
        raise DTypeError(f"torch rejects operand dtypes ({dts}): {str(err).splitlines()[0]}") \
            from None
    compute = out
    if out is torch.bool and node.op.kind is OpKind.ELEMENTWISE:
        compute = args[0].dtype if len(args) == 1 else torch.result_type(*args[:2])
    return out, compute


# --- elementwise with broadcasting ---------------------------------------------------------------

def _infer_broadcast(g: "Graph", node: "Node") -> Shape:
    tensors = [(i, x) for i, x in enumerate(node.inputs) if not is_scalar(x)]
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
        if is_scalar(x):
            res.append(None)
            continue
        off = len(coords) - x.rank
        dims = g.dims(x)
        res.append([lit(0) if (dims[k] is lit(1) and out_dims[k + off] is not lit(1))
                    else coords[k + off] for k in range(x.rank)])
    return res


def _elementwise(name: str, reference: Callable, cuda: str, py: str) -> None:
    _register(OpDef(name, OpKind.ELEMENTWISE, _infer_broadcast, _reverse_broadcast, reference,
                    cuda, py))


def _ref_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype)


# name, reference, CUDA, Python/numba. NaN semantics follow torch. Operands arrive cast to the
# compute dtype; the result is cast to the output dtype.
for _name, _ref, _cuda, _py in (
    ("relu", torch.relu, "({0} < {z} ? {z} : {0})", "({z} if {0} < {z} else {0})"),
    ("neg", torch.neg, "(-{0})", "(-{0})"),
    ("abs", torch.abs, "dlcb_abs({0})", "abs({0})"),
    ("exp", torch.exp, "dlcb_exp({0})", "math.exp({0})"),
    ("sigmoid", torch.sigmoid, "dlcb_sigmoid({0})", "_sigmoid({0})"),
    ("tanh", torch.tanh, "dlcb_tanh({0})", "math.tanh({0})"),
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
    _elementwise(_name, _ref, _cuda, _py)


# --- reshape ---------------------------------------------------------------------------------

def _infer_reshape(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    target: list = [d.value if isinstance(d, Lit) else d for d in node.attrs["shape"]]
    holes = [i for i, d in enumerate(target) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ShapeError(f"more than one -1 in {list(node.attrs['shape'])}")
    for i, d in enumerate(target):
        if isinstance(d, bool) or not isinstance(d, (int, Expr)) or (isinstance(d, int)
                                                                      and d < -1):
            raise ShapeError(f"invalid size {d!r} at axis {i} of {list(node.attrs['shape'])}")
    hole = g.fresh_var("r") if holes else None
    if hole is not None:
        target[holes[0]] = hole
    out = shape(target)
    g.constrain(prod(g.dims(x)), out.numel(), node,
                f"numel of input {list(g.dims(x))} == numel of output "
                f"[{', '.join('-1' if d is hole else repr(d) for d in out)}]"
                + (f"; {hole!r} is the -1" if hole is not None else ""))
    dims = [g.solver.resolve(d) for d in out]
    unsolved = {v for d in dims for v in d.free_vars if v.startswith("_")}
    if unsolved:
        where = f"the -1 (axis {holes[0]})" if hole is not None else "a size"
        raise ShapeError(f"cannot derive {where} of {list(node.attrs['shape'])} from input shape "
                         f"{list(g.dims(x))}: it stays {dims[holes[0] if holes else 0]!r}")
    return shape(dims)


def linear_index(coords: Sequence[Expr], dims: Sequence[Expr]) -> Expr:
    """Row-major flat index of ``coords`` in a contiguous tensor of shape ``dims``."""
    idx: Expr = lit(0)
    for c, d in zip(coords, dims):
        idx = idx * d + c
    return idx


def delinearize(flat: Expr, dims: Sequence[Expr]) -> list[Expr]:
    """Row-major coordinates of flat index ``flat`` in shape ``dims`` (the outermost one is not
    reduced modulo its extent: ``flat`` is assumed in range)."""
    out: list[Expr] = []
    stride: Expr = lit(1)
    for k in reversed(range(len(dims))):
        q = flat // stride
        out.append(q % dims[k] if k else q)
        stride = stride * dims[k]
    return out[::-1]


def _reverse_reshape(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords | None]:
    (x,) = node.inputs
    return [delinearize(linear_index(coords, g.dims(node.out)), g.dims(x))]


def _ref_reshape(x: torch.Tensor, shape: Sequence[Any]) -> torch.Tensor:
    return torch.reshape(x, [int(s) for s in shape])


_register(OpDef("reshape", OpKind.RESHAPE, _infer_reshape, _reverse_reshape, _ref_reshape))


# --- permute --------------------------------------------------------------------------------

def _infer_permute(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    perm = node.attrs["dims"]
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"{list(perm)} is not a permutation of the {x.rank} axes of "
                         f"{list(g.dims(x))}")
    return shape(x.shape[p] for p in perm)


def _reverse_permute(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords | None]:
    perm = node.attrs["dims"]
    out: Coords = [lit(0)] * len(perm)
    for i, p in enumerate(perm):
        out[p] = coords[i]
    return [out]


def _ref_permute(x: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    return x.permute(*dims)


_register(OpDef("permute", OpKind.PERMUTE, _infer_permute, _reverse_permute, _ref_permute))


# --- reductions -------------------------------------------------------------------------------

def _infer_reduce(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    axes, keep = node.attrs["dims"], node.attrs["keepdim"]
    if len(set(axes)) != len(axes) or not all(0 <= a < x.rank for a in axes):
        raise ShapeError(f"axes {list(axes)} are not distinct axes of rank {x.rank}")
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


class Combine(enum.Enum):
    SUM = "sum"   # accumulated in double (floats) or int64 (integers), from 0
    MAX = "max"   # NaN-propagating, from the lowest value; an empty extent is an error (as eager)


@dataclass(frozen=True)
class Reduction:
    """Scalar semantics of a reduction; ``mean`` divides the sum by the count."""

    combine: Combine
    mean: bool = False


REDUCTIONS = {"sum": Reduction(Combine.SUM), "mean": Reduction(Combine.SUM, mean=True),
              "amax": Reduction(Combine.MAX)}


def _ref_reduce(fn: Callable, x: torch.Tensor, dims: Sequence[int], keepdim: bool) -> torch.Tensor:
    if not dims:   # IR: reduce over no axis (torch's dim=() would mean every axis)
        return fn(x.unsqueeze(0), dim=0)
    return fn(x, dim=tuple(dims), keepdim=keepdim)


for _name, _fn in (("sum", torch.sum), ("mean", torch.mean), ("amax", torch.amax)):
    _register(OpDef(_name, OpKind.REDUCE, _infer_reduce, _reverse_reduce,
                    functools.partial(_ref_reduce, _fn)))


def reduced_extents(g: "Graph", node: "Node") -> list[Expr]:
    (x,) = node.inputs
    dims = g.dims(x)
    return [dims[a] for a in node.attrs["dims"]]
