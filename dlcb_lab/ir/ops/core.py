"""``OpDef``, the one way to declare an op, and the registry. Each op declares (1) its shape
constraints (``infer``), (2) its reverse coordinate transform (``reverse``: output coordinates ->
each tensor input's coordinates, used by kgen), (3) its reference semantics (``reference``: a torch
call, also the source of its dtype rule, and what a library thunk calls at run time) and, for
elementwise ops, (4) its ``arity`` and (5) its spelling in each generated language (``cuda``,
``numba``: one expression template each, beside its semantics in its row; the preludes of
helpers they call, and the printers, stay in ``kgen``). Code names ops by the ``Ops`` constants
(``ir.ops.Ops.add``), never by strings; an ``OpDef`` pickles by name, so graphs pickle.

Op kinds and what kgen does with them:

- ``ELEMENTWISE``: a broadcasting map; inlined into the consuming kernel.
- ``RESHAPE``/``PERMUTE``/``TRANSFORM``: pure coordinate transforms (``reverse`` gives the one
  input's coordinates); inlined, no code of their own but index arithmetic.
- ``SELECT``: each tensor input valid on part of the output (``reverse`` gives ``Guarded``
  coordinates; pad, cat), or one input read in several regions (``reverse`` gives one
  ``Guarded`` per region; pad_axis): the first alternative whose guard holds, else
  ``attrs["value"]`` (without it, the last alternative).
- ``GATHER``: an input coordinate read from an index tensor (``reverse`` gets ``index=fn``).
- ``REDUCE``: a loop over a window (``window``) per output element; materialized.
- ``ROW``: a row-wise normalization (softmax, layer norm): two passes over each row in one
  kernel; materialized.
- ``LIBRARY``: computed by ``reference`` on materialized operands (a vendor library through ATen);
  materialized.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

import torch

from ...dims import Expr, Lit, lit
from ...errors import DTypeError

if TYPE_CHECKING:
    from ..graph import Graph, Node

Coords = list[Expr]
Scalar = bool | int | float


class OpKind(enum.Enum):
    ELEMENTWISE = "elementwise"   # broadcasting map over operands; spelled in kgen/spellings.py
    RESHAPE = "reshape"           # pure coordinate transform (row-major re-indexing)
    PERMUTE = "permute"           # pure coordinate transform (axis reordering)
    TRANSFORM = "transform"       # pure coordinate transform (slice, expand, roll)
    SELECT = "select"             # guarded choice among inputs or regions (pad, cat, pad_axis)
    GATHER = "gather"             # an input coordinate is a value of an index tensor
    REDUCE = "reduce"             # a loop over a window per output element; materialized
    ROW = "row"                   # two passes over each row (softmax, layer norm); materialized
    LIBRARY = "library"           # vendor library call through ATen; materialized

    @property
    def is_transform(self) -> bool:
        """A pure coordinate transform: the output is the input re-indexed (a view in torch)."""
        return self in (OpKind.RESHAPE, OpKind.PERMUTE, OpKind.TRANSFORM)

    @property
    def materialized(self) -> bool:
        """The op's result always gets a buffer."""
        return self in (OpKind.REDUCE, OpKind.ROW, OpKind.LIBRARY)


class Guard(NamedTuple):
    """``lo <= expr < hi`` (an input coordinate in range)."""

    expr: Expr
    lo: Expr
    hi: Expr


class Guarded(NamedTuple):
    """Input coordinates valid only where every guard holds."""

    coords: Coords
    guards: tuple[Guard, ...]


def in_bounds(coords: Sequence[Expr], dims: Sequence[Expr], axes: Sequence[int]) -> Guarded:
    """``coords`` guarded to ``0 <= coords[a] < dims[a]`` on ``axes``."""
    return Guarded(list(coords), tuple(Guard(coords[a], lit(0), dims[a]) for a in axes))


@dataclass(frozen=True)
class Window:
    """What a ``REDUCE`` node reduces for one output element: loop ``extents`` (expressions of the
    output coordinates and runtime dims), ``bounds`` (exclusive upper bounds of the loop variables
    in runtime dims alone) and the ``count`` a mean divides by (None: the elements whose guards
    hold, counted in the loop)."""

    extents: tuple[Expr, ...]
    bounds: tuple[Expr, ...]
    count: Expr | None


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: OpKind
    infer: Callable[["Graph", "Node"], Any]
    reverse: Callable[..., list] | None
    reference: Callable[..., torch.Tensor]
    arity: int = 1
    """Operand count of an elementwise op (tensors and Python scalars); 1 for other kinds."""
    window: Callable[["Graph", "Node", Coords], Window] | None = None
    sample: Callable[[int], tuple[tuple, dict]] | None = None
    """Operands and attributes for the registry test (``tests/ops/test_ops.py``) at batch size ``n``;
    None: the test derives them from the kind and arity."""
    floating: bool = False
    """The dtype rule is "the input's floating dtype" (ops whose reference cannot run on
    one-element tensors, e.g. a pooling window larger than 1)."""
    out_dtype: torch.dtype | None = None
    """A library op's fixed result dtype, where it is not its operands' (max_pool2d's int64
    indices); None: the operands' dtype."""
    integer_backends: tuple[str, ...] = ()
    """The backends whose ATen kernel for this library op takes integer operands (CPU's
    baddbmm; ``check_backend`` refuses them elsewhere); its dtype rule is then its reference's.
    Empty: floating operands only."""
    cuda: str = ""
    """An elementwise op's CUDA C++ spelling (``kgen/spellings.py`` derives ``CUDA_OPS``)."""
    numba: str = ""
    """An elementwise op's numba spelling (``kgen/spellings.py`` derives ``PY_OPS``)."""

    def __repr__(self) -> str:
        return f"OpDef({self.name}, {self.kind.value})"

    def __reduce__(self):
        return (op_def, (self.name,))


OPS: dict[str, OpDef] = {}


def op_def(name: str) -> OpDef:
    return OPS[name]


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def is_scalar(x: Any) -> bool:
    return isinstance(x, (bool, int, float))


# --- dtype rule: the reference on one-element tensors -------------------------------------------------

def infer_dtypes(node: "Node") -> tuple[torch.dtype, torch.dtype]:
    """(output dtype, compute dtype) of ``node``, by running its reference on one-element CPU
    tensors of the operands' ranks and dtypes (so torch's type promotion, 0-d and Python-scalar
    rules apply; meta tensors would import torch._dynamo, seconds on first use).
    Elementwise ops compute in the output dtype, except predicates (bool output), which compare in
    the operands' promoted dtype; coordinate transforms keep their input's dtype; library ops
    require one floating dtype (but for ``integer_backends``). ``DTypeError`` when torch rejects
    the dtypes."""
    kind = node.op.kind
    tensors = node.tensor_inputs()
    if kind.is_transform:
        return tensors[0].dtype, tensors[0].dtype
    if kind is OpKind.GATHER:   # the data operand's dtype
        data = tensors[1] if node.op.name == "embedding" else tensors[0]
        return data.dtype, data.dtype
    if kind is OpKind.SELECT:   # pad keeps its dtype; cat promotes as torch.cat does
        out = functools.reduce(torch.promote_types, [x.dtype for x in tensors])
        return out, out
    if node.op.name == "eager":   # the dtype torch.export derived
        return node.attrs["dtype"], node.attrs["dtype"]
    if (kind is OpKind.LIBRARY and not node.op.integer_backends) or node.op.floating:
        dts = {x.dtype for x in tensors}
        if len(dts) != 1 or not next(iter(dts)).is_floating_point:
            raise DTypeError(f"operands must share one floating dtype, got "
                             f"{', '.join(str(x.dtype).removeprefix('torch.') for x in tensors)}")
        out = node.op.out_dtype or tensors[0].dtype
        return out, out
    args = [x if is_scalar(x) else torch.zeros((1,) * x.rank, dtype=x.dtype)
            for x in node.inputs]
    try:
        out = node.op.reference(*args, **node.attrs).dtype
    except (RuntimeError, TypeError, NotImplementedError, IndexError) as err:
        dts = ", ".join(str(x.dtype).removeprefix("torch.") for x in tensors)
        raise DTypeError(f"torch rejects operand dtypes ({dts}): {str(err).splitlines()[0]}") \
            from None
    compute = out
    if out is torch.bool and kind is OpKind.ELEMENTWISE:
        compute = args[0].dtype if len(args) == 1 else torch.result_type(*args[:2])
    return out, compute


def check_backend(g: "Graph", backend: str) -> None:
    """``DTypeError`` for a library op with integer operands where its ATen kernel on
    ``backend`` takes floats only (``OpDef.integer_backends``): refused at compile time, as
    eager would refuse it at the call."""
    for n in g.nodes:
        if not n.op.integer_backends or backend in n.op.integer_backends:
            continue
        ints = [x.dtype for x in n.tensor_inputs() if not x.dtype.is_floating_point]
        if ints:
            raise DTypeError(f"{str(ints[0]).removeprefix('torch.')} operands on the {backend} "
                             f"backend: ATen's {backend} {n.op.name} takes floating operands only "
                             f"(the {' and '.join(n.op.integer_backends)} backend runs it)",
                             op=n.op.name, node=n.out.name, where=n.where)


# --- row-major index arithmetic -------------------------------------------------------------------

def linear_index(coords: Sequence[Expr], dims: Sequence[Expr]) -> Expr:
    """Row-major flat index of ``coords`` in a contiguous tensor of shape ``dims``."""
    idx: Expr = lit(0)
    for c, d in zip(coords, dims):
        idx = idx * d + c
    return idx


def delinearize(flat: Expr, dims: Sequence[Expr]) -> list[Expr]:
    """Row-major coordinates of flat index ``flat`` in shape ``dims`` (the outermost one is not
    reduced modulo its extent: ``flat`` is assumed in range). A shape with a literal 0 has no
    element to address: its coordinates are 0 (whatever reads it is guarded off, or has no
    elements itself)."""
    if any(isinstance(d, Lit) and d.value == 0 for d in dims):
        return [lit(0)] * len(dims)
    out: list[Expr] = []
    stride: Expr = lit(1)
    for k in reversed(range(len(dims))):
        q = flat // stride
        out.append(q % dims[k] if k else q)
        stride = stride * dims[k]
    return out[::-1]
