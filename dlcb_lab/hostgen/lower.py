"""Lower a solved graph and its kernels to a host program and a launch plan.

The host program checks ranks, binds each named dim from the first input axis that carries it,
checks every other input axis against its solved expression, checks the residual constraints and
that every ``amax`` reduces a non-empty range, then computes the launch slots. Messages speak in
user dims, each tied to the input axis it is read from."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

import torch

from ..dims import Constraint, Expr, Lit, Var, prod
from ..errors import DLError
from ..ir.graph import Graph, Value
from ..ir.ops import REDUCTIONS, Combine, OpKind, reduced_extents
from ..kgen.kir import KernelBody
from .program import HostBuilder, HostProgram, escape


class Src(enum.Enum):
    INPUT = "in"     # a graph input (user input or constant), by position
    BUFFER = "buf"   # a buffer the thunk allocates, by position in ``LaunchPlan.buffers``


@dataclass(frozen=True)
class Operand:
    src: Src
    index: int


@dataclass(frozen=True)
class BufferPlan:
    value: str
    dtype: torch.dtype
    shape_regs: tuple[int, ...]


@dataclass(frozen=True)
class VariantLaunch:
    """One compiled variant of a kernel: its buffer operands and the registers of its int params."""

    operands: tuple[Operand, ...]
    params: tuple[int, ...]


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel's launch: output buffer, registers of the thread count, of the reduced extent
    (reductions only, read by the variant choice) and of the index bound (the 32-bit entry point
    is taken when it fits); variant 0 is one thread per output, 1 (if any) one block per output."""

    out: int
    numel: int
    variants: tuple[VariantLaunch, ...]
    extent: int | None
    index_bound: int


@dataclass(frozen=True)
class LaunchPlan:
    """Which registers hold what: buffer shapes, kernel launches, and the outputs."""

    buffers: tuple[BufferPlan, ...]
    kernels: tuple[KernelLaunch, ...]
    outputs: tuple[Operand, ...]


def dim_origins(g: Graph) -> dict[Var, str]:
    """Each user dim -> the first input axis declaring it (``input 0 'x' axis 0``)."""
    out: dict[Var, str] = {}
    for i, v in enumerate(g.inputs):
        for k, d in enumerate(v.shape.items):
            if isinstance(d, Var):
                out.setdefault(d, f"input {i} '{v.name}' axis {k}")
    return out


def describe(exprs: Sequence[Expr], origins: dict[Var, str]) -> str:
    """``; N = input 0 'x' axis 0, ...`` for the user dims in ``exprs``."""
    names = sorted({n for e in exprs for n in e.free_vars})
    where = [f"{v.name} = {o}" for v, o in origins.items() if v.name in names]
    return f"; {', '.join(where)}" if where else ""


def _axis_message(g: Graph, i: int, v: Value, k: int, declared: Expr, e: Expr) -> str:
    why = ""
    if isinstance(declared, Lit):
        why = " (static axis: not declared dynamic)"
    else:
        src = g.solver.binding_source.get(declared) if isinstance(declared, Var) else None
        if src is not None:
            why = f" because {declared!r} := {e!r} by #{src.id} {src.lhs!r} == {src.rhs!r} " \
                  f"from {escape(str(src.provenance))}"
    want = f"{e!r}" if isinstance(e, Lit) else f"{e!r} = {{want}}"
    return f"input {i} '{v.name}' axis {k}: size {{got}} != {want}{why}"


def _residual_message(c: Constraint, lhs: Expr, rhs: Expr, origins: dict[Var, str]) -> str:
    return (f"residual constraint #{c.id} violated: {lhs!r} == {rhs!r} (got {{got}} != "
            f"{{want}}) from {escape(str(c.provenance))}{describe((lhs, rhs), origins)}")


def lower(g: Graph, buffers: Sequence[Value], kernels: Sequence[KernelBody]
          ) -> tuple[HostProgram, LaunchPlan]:
    """The host program and launch plan for ``kernels``, which fill ``buffers`` (every
    materialized value; those of literal size 0 have no kernel)."""
    hb = HostBuilder(len(g.inputs))
    origins = dim_origins(g)
    resolved = [g.dims(v) for v in g.inputs]
    for i, v in enumerate(g.inputs):
        hb.guard("rank", f"input {i} '{v.name}': rank {{got}} != {v.rank}", i, v.rank)
    loaded: dict[tuple[int, int], int] = {}
    for i, dims in enumerate(resolved):           # bind named dims from bare axes
        for k, e in enumerate(dims):
            if isinstance(e, Var) and e not in hb.env:
                loaded[i, k] = hb.load(i, k)
                hb.bind(e, loaded[i, k])
    try:
        for i, dims in enumerate(resolved):           # check every other axis
            for k, e in enumerate(dims):
                r = loaded.get((i, k))
                if r is not None and hb.env.get(e) == r:
                    continue
                got = hb.load(i, k)
                hb.guard("check", _axis_message(g, i, g.inputs[i], k, g.inputs[i].shape[k], e),
                         got, hb.expr(e))
        for c in g.solver.residuals:
            lhs, rhs = g.solver.resolve(c.lhs), g.solver.resolve(c.rhs)
            hb.guard("check", _residual_message(c, lhs, rhs, origins), hb.expr(lhs), hb.expr(rhs))
        for n in g.nodes:
            if n.op.kind is OpKind.REDUCE and REDUCTIONS[n.op.name].combine is Combine.MAX:
                ext = reduced_extents(g, n)
                e = prod(ext)
                if isinstance(e, Lit) and e.value > 0:
                    continue
                hb.guard("positive", f"{n.op.name} '{n.out.name}' at {escape(n.where)}: reduces "
                         f"an empty range ({e!r} = {{got}} elements; eager raises)"
                         f"{describe(ext, origins)}", hb.expr(e))
    except DLError as err:
        raise err.locate("host program", "", "") from None
    buf_index = {v.id: j for j, v in enumerate(buffers)}
    plan_bufs = tuple(BufferPlan(v.name, v.dtype, tuple(hb.slot(f"{v.name}.shape[{d}]", e)
                                                        for d, e in enumerate(g.dims(v))))
                      for v in buffers)
    in_index = {v.id: i for i, v in enumerate(g.inputs)}

    def operand(x: Value) -> Operand:
        return Operand(Src.INPUT, in_index[x.id]) if x.id in in_index else \
            Operand(Src.BUFFER, buf_index[x.id])

    launches = []
    for kb in kernels:
        variants = tuple(VariantLaunch(tuple(operand(x) for x in v.inputs),
                                       tuple(hb.slot(f"{v.name}.{n}", e) for n, e in v.params))
                         for v in kb.variants())
        extent = None if kb.reduce_extent is None else hb.slot(f"{kb.name}.extent",
                                                               kb.reduce_extent)
        bound = hb.maximum([b for v in kb.variants() for b in v.index_bounds])
        hb.slots[f"{kb.name}.index_bound"] = bound
        launches.append(KernelLaunch(buf_index[kb.out.id], hb.slot(f"{kb.name}.numel", kb.numel),
                                     variants, extent, bound))
    outputs = tuple(Operand(Src.BUFFER, buf_index[v.id]) for v in g.outputs)
    return hb.build(), LaunchPlan(plan_bufs, tuple(launches), outputs)

