"""Kernel IR: the language-neutral statement list one kernel runs per output element, and the
kernel's signature. Both emitters (CUDA C++, numba) walk the same statements.

Statements are typed nodes. Index arithmetic (``IdxSum``, ``IdxProd``, ``IdxDivMod``) works in the
index type (``long long``, or ``int`` in the 32-bit entry point); values (``Load``, ``Compute``,
reductions) carry their element ``DType``. Operands are names of earlier statements, kernel
parameters, or literals.

Identifiers. Generated code never spells a user's name: a dimension variable ``N`` becomes the
parameter ``d_N`` (``code_name``), buffers are ``out``, ``in0``, ``in1``... by position, and
temporaries come from a fixed set of prefixes (``i``, ``v``, ``x``, ``m``, ``j``, ``acc``, ``cnt``, ``p``,
``c``, ``l``).
User names appear only in comments.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

from ..dims import Expr, Var
from ..display import Rich
from ..ir.dtypes import F64, I64, DType
from ..ir.graph import Value
from ..ir.ops import Combine, Reduction, RowKind, Scalar


def code_name(v: Var) -> str:
    """The identifier of variable ``v`` in generated code. Kernel-internal variables (rank 2:
    ``_t``, ``_c0``, ``_l0``...) drop the underscore; dimension variables get the ``d_`` prefix
    (non-ASCII names are hex-escaped), so no user name can collide with a keyword, a builtin or a
    generated identifier of either language."""
    if v.rank == 2:
        return v.name[1:]
    name = v.name if v.name.isascii() else "".join(
        ch if ch.isascii() else f"u{ord(ch):x}" for ch in v.name)
    return f"d_{name}"


def acc_dtype(red: Reduction, out: DType) -> DType:
    """Accumulator type: sums in double (floats) or int64; max in the dtype's register type
    (floats) or int64."""
    if red.combine is Combine.SUM:
        return F64 if out.is_float else I64
    return out.reg if out.is_float else I64


# --- statements ---------------------------------------------------------------------------------

class DivMod(enum.Enum):
    FLOORDIV = "//"
    MOD = "%"


@dataclass(frozen=True)
class IdxSum:        # I name = const + sum(coeff * term)
    name: str
    const: int
    terms: tuple[tuple[int, str], ...]
    expr: Expr       # the dimension expression computed (for comments and renderings)


@dataclass(frozen=True)
class IdxProd:       # I name = f0 * f1 * ...
    name: str
    factors: tuple[str, ...]
    expr: Expr


@dataclass(frozen=True)
class IdxDivMod:     # I name = num // den  or  num % den  (floor semantics; ``floor``: num may be < 0)
    name: str
    op: DivMod
    num: str
    den: str
    floor: bool
    expr: Expr
    magic: str = ""  # divisor param holding ``abi.magic(den)`` (den a runtime value, num >= 0)


@dataclass(frozen=True)
class Ref:           # operand: a value computed earlier, of dtype ``dtype``
    name: str
    dtype: DType


@dataclass(frozen=True)
class Imm:           # operand: a Python scalar, spelled in the compute dtype
    value: Scalar


@dataclass(frozen=True)
class IdxCast:       # I name = (I) value   (an index read from an index tensor, host-checked in range)
    name: str
    value: str


@dataclass(frozen=True)
class IdxClamp:      # I name = min(max(value, 0), hi - 1)   (a max window's tap clamped into its input)
    name: str
    value: str
    hi: str


@dataclass(frozen=True)
class Pred:          # bool name = parent && lo <= e && e < hi && ...   (an input coordinate in range)
    name: str
    parent: str      # "" for none
    lower: tuple[tuple[str, str], ...]   # (e, lo): lo <= e
    upper: tuple[tuple[str, str], ...]   # (e, hi): e < hi


@dataclass(frozen=True)
class Load:          # T name = in<buf>[index]   (pred: pred ? in<buf>[index] : 0, no access if not)
    name: str
    dtype: DType
    buf: int
    index: str
    pred: str = ""


@dataclass(frozen=True)
class Select:        # T name = p0 ? v0 : p1 ? v1 : ... : default   (pad, cat)
    name: str
    dtype: DType
    alts: tuple[tuple[str, Ref], ...]
    default: Ref | Imm


@dataclass(frozen=True)
class Compute:       # T name = (T) op((C) args...)    (op: IR op name; C: compute dtype)
    name: str
    op: str
    args: tuple[Ref | Imm, ...]
    dtype: DType
    compute: DType


@dataclass(frozen=True)
class Loop:          # for (var = 0; var < extent; ++var) { body }
    var: str         # cooperative: the block's threads split the range (var = tid; var += blockDim)
    extent: str
    body: tuple["Stmt", ...]
    cooperative: bool = False


@dataclass(frozen=True)
class AccInit:       # A name = identity of the combine
    name: str
    red: Reduction
    acc: DType


@dataclass(frozen=True)
class Accumulate:    # name = combine(name, (A) value)   (pred: only where pred holds)
    name: str
    red: Reduction
    value: str
    acc: DType
    pred: str = ""


@dataclass(frozen=True)
class BlockReduce:   # name = combine over the block's threads (valid in thread 0)
    name: str
    red: Reduction
    acc: DType


@dataclass(frozen=True)
class Finish:        # T name = (T)(acc)   or, for mean, (T)(acc / count)
    name: str
    red: Reduction
    acc: str
    count: str
    dtype: DType


@dataclass(frozen=True)
class Store:         # out[t] = value   (cooperative kernels: thread 0 of the block only)
    value: str


# Row-wise normalizations (one row per thread, or per block in the cooperative variant). The
# accumulators have fixed names: softmax ``rm`` (running max), ``rs`` (sum of exp(x - rm)); norm
# ``rs1``, ``rs2`` (sum, sum of squares); stats ``rmean``, ``rrstd``, ``rlse``.

@dataclass(frozen=True)
class RowInit:       # declare and initialize the row accumulators, of type ``acc`` (CUDA)
    kind: RowKind
    acc: DType = F64
    """Norm: double (a sum of squares in float loses the variance to cancellation). Softmax of
    a float32 or 16-bit row: float, as eager's CUDA kernels; a double ``exp`` per element made
    the H200 kernel compute-bound (257 us for 103 MB, 15 % of the memory bandwidth). numba
    kernels compute in double either way."""


@dataclass(frozen=True)
class RowAccumulate:  # fold one element into the accumulators
    kind: RowKind
    value: str


@dataclass(frozen=True)
class RowCombine:    # combine the accumulators over the block; every thread gets the result
    kind: RowKind


@dataclass(frozen=True)
class RowStats:      # norm: rmean, rrstd from count and eps; log_softmax: rlse
    kind: RowKind
    count: str
    eps: float


@dataclass(frozen=True)
class RowOutput:     # T name = f(value) from the stats [* weight + bias]
    name: str
    kind: RowKind
    value: str
    dtype: DType
    weight: str = ""
    bias: str = ""


@dataclass(frozen=True)
class StoreAt:       # out[index] = value   (every thread stores)
    index: str
    value: str


Stmt = Union[IdxSum, IdxProd, IdxDivMod, IdxCast, IdxClamp, Pred, Load, Select, Compute, Loop, AccInit, Accumulate,
             BlockReduce, Finish, Store, RowInit, RowAccumulate, RowCombine, RowStats, RowOutput,
             StoreAt]


# --- kernels --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CoordMap(Rich):
    """For one kernel: output coordinates (as functions of the thread index ``_t``), loop extents,
    and for each load the value read and its coordinates as expressions of output coordinates and
    loop variables.

    Provenance, per load (parallel to ``loads``; empty when not recorded): ``via``, the reverse
    transforms that produced its coordinates, from the output inward, as (op name, transform:
    ``identity``, ``broadcast→0``, ``reshape (div/mod)``, ``permute``, ``reduce loop``,
    ``window``, ``gather``...); ``temps``, the name of its ``Load`` statement in the kernel."""

    out: str
    out_coords: tuple[tuple[str, Expr], ...]
    loops: tuple[tuple[str, Expr], ...]
    loads: tuple[tuple[str, tuple[Expr, ...]], ...]
    via: tuple[tuple[tuple[str, str], ...], ...] = ()
    temps: tuple[str, ...] = ()

    def __repr__(self) -> str:
        oc = ", ".join(n for n, _ in self.out_coords)
        lines = [f"CoordMap {self.out}[{oc}]"]
        lines += [f"  {n} = {e!r}" for n, e in self.out_coords]
        lines += [f"  loop {n} < {e!r}" for n, e in self.loops]
        via = self.via or ((),) * len(self.loads)
        lines += [f"  load {b}[{', '.join(map(repr, cs))}]" +
                  ("  <- " + ", ".join(f"{op}: {t}" for op, t in path) if path else "")
                  for (b, cs), path in zip(self.loads, via)]
        return "\n".join(lines)


@dataclass(frozen=True)
class KernelBody:
    """Everything an emitter needs. Parameters, in order: ``out``, ``in0..`` (``inputs``),
    ``numel``, then ``params`` (int parameters: code name and the expression the host evaluates),
    then ``divisors`` (code name and runtime divisor: the param holds ``abi.magic`` of it).
    ``index_bounds``: expressions of runtime dims bounding every index intermediate the kernel
    computes; the launcher takes the 32-bit entry point when their maximum fits."""

    name: str
    dtype: DType
    out: Value
    inputs: tuple[Value, ...]
    params: tuple[tuple[str, Expr], ...]
    numel: Expr
    stmts: tuple[Stmt, ...]
    coord_map: CoordMap
    index_bounds: tuple[Expr, ...]
    cooperative: bool = False                # one block per output element (reductions)
    reduce_extent: Expr | None = None        # elements reduced per output element (at most)
    variant: "KernelBody | None" = None      # cooperative alternative, chosen at launch
    divisors: tuple[tuple[str, Expr], ...] = ()

    def variants(self) -> tuple["KernelBody", ...]:
        """This kernel and its launch-time alternative, if any."""
        return (self,) if self.variant is None else (self, self.variant)
