"""Lower a solved graph and its kernels to a host program and a launch plan."""

from __future__ import annotations

from dataclasses import dataclass

from ..dims import Expr, Lit, Var
from ..ir.graph import Graph, Value
from ..kgen.coords import KernelBody
from .program import HostBuilder, HostProgram, escape, residual_message


class CompileError(RuntimeError):
    """The graph cannot be compiled as requested."""


@dataclass(frozen=True)
class BufferPlan:
    value: str
    dtype: object
    shape_regs: tuple[int, ...]


@dataclass(frozen=True)
class KernelLaunch:
    """One kernel's launch: output buffer, thread count register, and per variant (index 0 the
    thread-per-output kernel, 1 the cooperative one if any) its operands and int-param registers.
    Operands are ``("in", i)`` (graph input i) or ``("buf", j)`` (buffer j). ``extent`` is the
    register holding the reduced extent (reductions only), read by the variant choice."""

    out: int
    numel: int
    variants: tuple[tuple[tuple[tuple[str, int], ...], tuple[int, ...]], ...]
    extent: int | None


@dataclass(frozen=True)
class LaunchPlan:
    """Which registers hold what: buffer shapes, kernel launches, and the outputs."""

    buffers: tuple[BufferPlan, ...]
    kernels: tuple[KernelLaunch, ...]
    outputs: tuple[tuple[str, int], ...]


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


def lower(g: Graph, kernels: list[KernelBody]) -> tuple[HostProgram, LaunchPlan]:
    hb = HostBuilder(len(g.inputs))
    resolved = [g.dims(v) for v in g.inputs]
    for i, v in enumerate(g.inputs):
        hb.check_rank(i, v.rank, f"input {i} '{v.name}': rank {{got}} != {v.rank}")
    loaded: dict[tuple[int, int], int] = {}
    for i, dims in enumerate(resolved):           # bind named dims from bare axes
        for k, e in enumerate(dims):
            if isinstance(e, Var) and e not in hb.env:
                loaded[i, k] = hb.load(i, k)
                hb.bind(e, loaded[i, k])
    for i, dims in enumerate(resolved):           # check every other axis
        for k, e in enumerate(dims):
            r = loaded.get((i, k))
            if r is not None and hb.env.get(e) == r:
                continue
            got = hb.load(i, k)
            try:
                want = hb.expr(e)
            except KeyError as err:
                raise CompileError(f"input {i} '{g.inputs[i].name}' axis {k}: {err.args[0]}") \
                    from None
            hb.check(got, want, _axis_message(g, i, g.inputs[i], k, g.inputs[i].shape[k], e))
    for c in g.solver.residuals:
        hb.check(hb.expr(g.solver.resolve(c.lhs)), hb.expr(g.solver.resolve(c.rhs)),
                 residual_message(c))
    buf_index: dict[int, int] = {}
    buffers = []
    for kb in kernels:
        regs = tuple(hb.slot(f"{kb.out.name}.shape[{d}]", e) for d, e in enumerate(g.dims(kb.out)))
        buf_index[kb.out.id] = len(buffers)
        buffers.append(BufferPlan(kb.out.name, kb.out.dtype, regs))
    in_index = {v.id: i for i, v in enumerate(g.inputs)}
    plans = []
    for kb in kernels:
        variants = []
        for v in (kb,) if kb.variant is None else (kb, kb.variant):
            operands = tuple(("in", in_index[x.id]) if x.id in in_index else ("buf", buf_index[x.id])
                             for x in v.inputs)
            variants.append((operands, tuple(hb.slot(f"{v.name}.{n}", e) for n, e in v.params)))
        extent = None if kb.reduce_extent is None else hb.slot(f"{kb.name}.extent", kb.reduce_extent)
        plans.append(KernelLaunch(buf_index[kb.out.id], hb.slot(f"{kb.name}.numel", kb.numel),
                                  tuple(variants), extent))
    outputs = tuple(("buf", buf_index[v.id]) for v in g.outputs)
    return hb.build(), LaunchPlan(tuple(buffers), tuple(plans), outputs)
