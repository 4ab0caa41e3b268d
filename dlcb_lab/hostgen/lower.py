"""Lower a solved graph and its kernels to a host program and a launch plan.

The host program checks ranks, executes the inputs' binding plan (``dims.bind``: each named dim
bound from the first bare input axis that carries it, else from an axis affine in it such as
``2*N + 1``, or an atom such as ``(H + 1) // 2`` bound itself; every other axis checked against its
solved expression), checks the graph's guards (``hostgen.guards``: residual constraints,
requirements, non-empty ``amax``), then computes the launch slots. Messages speak in user dims,
each tied to the input axis it is read from. Constants (parameters) are supplied by the compiled
module, so their shapes are not checked per call.

The launch plan is the step list and the memory plan. Its steps are the partition's
(``passes.partition.steps``, ``Graph.partition``: one per materialized value, in graph order), each
with launches a ``LibraryCall`` or a ``KernelLaunch`` whose slots follow the kernel's ABI
(``kgen.abi``); each step names the buffers whose last use it is, freed after it."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, replace
from typing import Any, Sequence, Union

import torch

from ..dims import Expr, Lit, Var, lit, simplify_bounded, var
from ..dims.bounds import nonneg
from ..dims.bind import BindPlan, Source, plan_binding
from ..display import Rich
from ..errors import BuildError, DLError, ShapeError
from ..ir.graph import Graph, Value
from ..ir.ops import Guarded, OpDef, Ops, linear_index
from ..kgen.abi import abi
from ..kgen.entries import in_place_inputs
from ..kgen.kir import KernelBody
from ..passes.partition import index_reads, steps as partition_steps
from .guards import Guard, describe, dim_origins, graph_guards
from .program import HostBuilder, HostProgram, escape

__all__ = ["lower", "input_binding", "dim_origins", "describe", "LaunchPlan"]


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
    """One compiled variant of a kernel: its buffer operands and the registers of its int params
    (``name``: the variant's entry point; ``param_names``: the params' names in its code)."""

    operands: tuple[Operand, ...]
    params: tuple[int, ...]
    name: str = ""
    param_names: tuple[str, ...] = ()


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
    index_checks: tuple[tuple[Operand, int, str], ...] = ()
    """Index tensors read as coordinates: (operand, register of the extent, what), checked in
    range before the launch."""
    step: int = -1
    """The partition step (``Graph.partition.steps``) this launch is."""
    in_place: int | None = None
    """A buffer the output is written into: an operand the kernel reads only at the output's
    own index (``entries.in_place_inputs``), of the output's dims and dtype, that dies at this
    launch (``_in_place``)."""


@dataclass(frozen=True)
class Reg:
    """An attribute value the host program computes (a symbolic size): register ``r``."""

    r: int


class _Attributes:
    """Keyword arguments of a call made at run time: built once when no attribute depends on the
    registers (a convolution's stride and padding), else filled per call."""

    attrs: tuple[tuple[str, Any], ...]

    @functools.cached_property
    def _static(self) -> dict[str, Any] | None:
        return None if _has_reg(self.attrs) else dict(self.attrs)

    def kwargs(self, r: Sequence[int]) -> dict[str, Any]:
        static = self._static
        return static if static is not None else {k: fill(a, r) for k, a in self.attrs}


def _has_reg(template: Any) -> bool:
    if isinstance(template, Reg):
        return True
    return isinstance(template, (tuple, list)) and any(_has_reg(t) for t in template)


@dataclass(frozen=True)
class View(_Attributes):
    """A coordinate transform applied to a library operand at call time (``op.reference`` with
    ``attrs``; ``Reg`` entries are filled from the registers): a view, or a copy torch makes.
    With ``op`` None, a whole view chain as one ``as_strided`` view of the base buffer
    (``attrs``: size, stride, storage_offset): never a copy (``strided_view``)."""

    op: OpDef | None
    attrs: tuple[tuple[str, Any], ...]

    @property
    def name(self) -> str:
        return self.op.name if self.op is not None else "as_strided"

    def apply(self, t: torch.Tensor, r: Sequence[int]) -> torch.Tensor:
        kw = self.kwargs(r)
        if self.op is None:
            return t.as_strided(kw["size"], kw["stride"],
                                t.storage_offset() + kw["storage_offset"])
        return self.op.reference(t, **kw)


@dataclass(frozen=True)
class LibraryCall(_Attributes):
    """``op.reference(*operands, **attrs)`` into buffer ``out`` (a vendor library via ATen)."""

    op: OpDef
    operands: tuple[tuple[Operand, tuple[View, ...]], ...]
    attrs: tuple[tuple[str, Any], ...]
    out: int
    step: int = -1
    """The partition step (``Graph.partition.steps``) this call is."""


Step = Union[KernelLaunch, LibraryCall]


@dataclass(frozen=True)
class LaunchPlan(Rich):
    """The one launch plan: which registers hold what, buffer shapes, the steps (one per
    partition step with launches, ``Graph.partition``, in its order; the thunks walk them with
    one walker, ``Thunk._walk``), the buffers each step frees (after their last use; outputs are
    never freed) and the outputs. ``inputs`` and ``regs`` (the graph
    input names, the expression each register holds: ``HostProgram.args``/``.regs``) are for
    display."""

    buffers: tuple[BufferPlan, ...]
    steps: tuple[Step, ...]
    frees: tuple[tuple[int, ...], ...]
    outputs: tuple[Operand, ...]
    inputs: tuple[str, ...] = ()
    regs: tuple[str, ...] = ()
    guards: tuple[Guard, ...] = ()
    """The graph's guards (``hostgen.guards``), compiled into the host program; direct kernel
    launches check the same list."""
    index_checks: tuple[tuple[Operand, int, str], ...] = ()
    """Index checks no launch makes: index inputs a value of literally no elements reads (eager
    refuses an out-of-range index there too), as ``KernelLaunch.index_checks``."""
    constant_indices: tuple[tuple[int, int], ...] = ()
    """``(value id, extent)`` per constant index tensor checked at compile time against a
    literal extent (its values in ``[0, extent)``): the one place a program depends on the
    values of constants, which the program cache checks again on new weights."""

    @property
    def kernels(self) -> tuple[KernelLaunch, ...]:
        return tuple(s for s in self.steps if isinstance(s, KernelLaunch))

    def __repr__(self) -> str:
        """A header (step, kernel launch, library call and buffer counts; outputs), then one line
        per step of the first 40: its kernel's entry point or library op, its output buffer and
        the buffers freed after it."""
        limit = 40
        n = lambda k, one, many=None: f"{k} {one if k == 1 else many or one + 's'}"
        bufs = [b.value for b in self.buffers]

        def name(o: Operand) -> str:
            names = self.inputs if o.src is Src.INPUT else bufs
            return f"%{names[o.index]}" if o.index < len(names) else f"{o.src.value}{o.index}"

        n_k = len(self.kernels)
        lines = [f"LaunchPlan: {n(len(self.steps), 'step')} "
                 f"({n(n_k, 'kernel launch', 'kernel launches')}, "
                 f"{n(len(self.steps) - n_k, 'library call')}), {n(len(bufs), 'buffer')}; "
                 f"outputs {', '.join(name(o) for o in self.outputs)}"]
        for i, (st, fr) in enumerate(zip(self.steps[:limit], self.frees)):
            if isinstance(st, KernelLaunch):
                more = len(st.variants) - 1
                what = f"kernel {st.variants[0].name if st.variants else '?'}" + (
                    f" (+{n(more, 'variant')})" if more > 0 else "")
            else:
                what = f"library {st.op.name}"
            free = ", ".join(name(Operand(Src.BUFFER, b)) for b in fr)
            over = getattr(st, "in_place", None)
            lines.append(f"  {i:>3} {what} -> {name(Operand(Src.BUFFER, st.out))}"
                         + (f" (over {name(Operand(Src.BUFFER, over))})" if over is not None
                            else "") + (f"; frees {free}" if free else ""))
        if len(self.steps) > limit:
            lines.append(f"  … {n(len(self.steps) - limit, 'more step')}")
        return "\n".join(lines)


def fill(template: Any, r: Sequence[int]) -> Any:
    """``template`` with every ``Reg`` replaced by its register's value."""
    if isinstance(template, Reg):
        return r[template.r]
    if isinstance(template, (tuple, list)):
        return type(template)(fill(t, r) for t in template)
    return template


def _attr_template(g: Graph, hb: "HostBuilder", value: Any) -> Any:
    """An attribute as the host computes it: expressions resolved through the solver (a dim
    bound after the op was built is read through its binding), literals inlined."""
    if isinstance(value, Expr):
        value = g.solver.resolve(value)
        return value.value if isinstance(value, Lit) else Reg(hb.expr(value))
    if isinstance(value, (tuple, list)):
        return type(value)(_attr_template(g, hb, v) for v in value)
    return value


def input_binding(g: Graph) -> tuple[BindPlan, list[tuple[int, Value, int, Expr]]]:
    """The binding plan over the axes of the graph's non-constant inputs (solved shapes), and per
    source ``(input position, input, axis, declared expression)``."""
    consts = {v.id for v, _ in g.constants}
    sources, axes = [], []
    for i, v in enumerate(g.inputs):
        if v.id in consts:
            continue
        for k, e in enumerate(g.dims(v)):
            sources.append(Source(f"input {i} '{v.name}' axis {k}", e, i, k))
            axes.append((i, v, k, v.shape[k]))
    return plan_binding(sources), axes


def _axis_message(g: Graph, i: int, v: Value, k: int, declared: Expr, e: Expr) -> str:
    why = ""
    if isinstance(declared, Lit):
        why = escape(f" (a static axis: the compile fixed it, by dynamic=False or a spec that "
                     f"does not name it; dynamic='auto' (the default) or naming it, e.g. "
                     f"dynamic={{{v.name!r}: {{{k}: 'D'}}}}, makes it free)")
    else:
        src = g.solver.binding_source.get(declared) if isinstance(declared, Var) else None
        if src is not None:
            why = f" because {declared!r} := {e!r} by #{src.id} {src.lhs!r} == {src.rhs!r} " \
                  f"from {escape(str(src.provenance))}"
    want = f"{e!r}" if isinstance(e, Lit) else f"{e!r} = {{want}}"
    return f"input {i} '{v.name}' axis {k}: size {{got}} != {want}{why}"


def lower(g: Graph, buffers: Sequence[Value], kernels: Sequence[KernelBody]
          ) -> tuple[HostProgram, LaunchPlan]:
    """The host program and launch plan for ``kernels`` and the graph's library calls, which
    fill ``buffers`` (every materialized value; those of literal size 0 have no kernel)."""
    hb = HostBuilder(len(g.inputs), [v.name for v in g.inputs])
    consts = {v.id for v, _ in g.constants}
    for i, v in enumerate(g.inputs):
        if v.id not in consts:
            hb.guard("rank", f"input {i} '{v.name}': rank {{got}} != {v.rank}", i, v.rank)
    plan, axes = input_binding(g)
    try:
        if plan.pending:
            raise ShapeError("; ".join(plan.undetermined(i) for i in plan.pending))
        hb.emit_binding(plan, lambda j: _axis_message(g, *axes[j], plan.sources[j].expr))
        guards = graph_guards(g)
        for gd in guards:
            hb.guard(gd.kind, gd.template, hb.expr(gd.lhs),
                     hb.expr(gd.rhs) if gd.rhs is not None else 0)
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

    by_out = {kb.out.id: kb for kb in kernels}
    by_id = {v.id: v for v in buffers}
    consts_t = {v.id: t for v, t in g.constants}
    mats = set(buf_index)
    steps: list[Step] = []
    checked: list[tuple[int, int]] = []
    empty_checks: list[tuple[Operand, int, str]] = []
    for ps in g.partition.steps if g.partition is not None else partition_steps(g):
        v = by_id[ps.value_id]
        if ps.kind == "library":
            steps.append(replace(_library_call(g, hb, v.producer, operand, buf_index[v.id]),
                                 step=ps.index))
            continue
        checks = _index_checks(hb, index_reads(g, v, mats), v.name, operand, consts_t, checked)
        if not ps.launches:
            empty_checks += checks
            continue
        kb = by_out.pop(v.id, None)
        if kb is None:
            raise BuildError(f"partition step {ps.index} (%{v.name}) has no kernel")
        steps.append(replace(_kernel_launch(hb, kb, operand, buf_index[v.id]),
                             step=ps.index, index_checks=tuple(checks)))
    if by_out:
        raise BuildError(f"kernels outside the partition's steps: "
                         f"{', '.join(kb.name for kb in by_out.values())}")
    outputs = tuple(Operand(Src.BUFFER, buf_index[v.id]) for v in g.outputs)
    host = hb.build()
    frees = _frees(steps, len(buffers), outputs)
    steps = _in_place(g, steps, frees, buffers, kernels)
    return host, LaunchPlan(plan_bufs, tuple(steps), frees, outputs,
                            host.args, host.regs, guards,
                            tuple(c for c in empty_checks if c[0].src is Src.INPUT),
                            tuple(checked))


def _kernel_launch(hb: HostBuilder, kb: KernelBody, operand, out: int
                   ) -> KernelLaunch:
    hb.lenient = True   # a kernel with elements never divides by a zero extent
    try:
        return _launch_slots(hb, kb, operand, out)
    finally:
        hb.lenient = False


def _launch_slots(hb: HostBuilder, kb: KernelBody, operand, out: int
                  ) -> KernelLaunch:
    abis = [abi(v) for v in kb.variants()]      # the slots the ABI's parameters take
    variants = tuple(VariantLaunch(tuple(operand(p.value) for p in a.inputs),
                                   tuple(hb.slot(f"{a.entry}.{p.name}", p.expr,
                                                 p.kind == "div") for p in a.int_params),
                                   a.entry, tuple(p.name for p in a.int_params))
                     for a in abis)
    extent = None if kb.reduce_extent is None else hb.slot(f"{kb.name}.extent", kb.reduce_extent)
    bound = hb.maximum([b for v in kb.variants() for b in v.index_bounds])
    hb.slots[f"{kb.name}.index_bound"] = bound
    numel = abis[0].ints[0]
    return KernelLaunch(out, hb.slot(f"{kb.name}.{numel.name}", numel.expr), variants, extent,
                        bound)


def _index_checks(hb: HostBuilder, reads: Sequence[tuple[Value, Expr]], reader: str, operand,
                  consts: dict, checked: list) -> list[tuple[Operand, int, str]]:
    """``(operand, extent register, what)`` per index tensor in ``reads`` (``(index value,
    extent)``) read by the value ``reader``; a constant against a literal extent is checked once,
    here (and listed in ``checked``)."""
    checks = []
    for idx, ext in reads:
        what = f"index tensor '{idx.name}' read by '{reader}'"
        t = consts.get(idx.id)
        if t is not None and isinstance(ext, Lit):
            if t.numel() and not (0 <= int(t.min()) and int(t.max()) < ext.value):
                raise ShapeError(f"{what}: values outside [0, {ext.value})")
            checked.append((idx.id, ext.value))
            continue
        checks.append((operand(idx), hb.slot(f"{reader}.{idx.name}.extent", ext), what))
    return checks


def strided_view(g: Graph, x: Value, base: Value, chain: Sequence) -> tuple | None:
    """``x``, the view ``chain`` (coordinate transforms) applied to the row-major ``base``, as
    ``(size, stride, storage_offset)`` of one strided view of ``base`` (dimension expressions),
    when the composed index map is affine in ``x``'s coordinates with non-negative strides: the
    reverse transforms composed and simplified against the coordinate bounds, as kgen does for a
    load. A reshape merging axes a permute separated is not (None): torch copies there. ViT's
    q/k/v (in-projection rows reshaped, permuted, sliced, reshaped into heads) are: three copies
    per layer fewer."""
    dims = g.dims(x)
    cs = [var(f"_v{k}", 2) for k in range(len(dims))]
    bounds = {c.name: d for c, d in zip(cs, dims)}
    coords: Any = cs
    for n in reversed(chain):
        (coords,) = n.op.reverse(g, n, coords)
        if isinstance(coords, Guarded):
            return None
        coords = [simplify_bounded(c, bounds) for c in coords]
    idx = simplify_bounded(linear_index(coords, g.dims(base)), bounds)
    zero = {c: lit(0) for c in cs}
    offset = idx.subs(zero)
    strides = [idx.subs({**zero, c: lit(1)}) - offset for c in cs]
    if offset + sum((s * c for s, c in zip(strides, cs)), lit(0)) is not idx or \
            any(not nonneg(s) for s in strides):
        return None
    return tuple(dims), tuple(strides), offset


def _library_call(g: Graph, hb: HostBuilder, node, operand, out: int) -> LibraryCall:
    ops = []
    for x in node.tensor_inputs():
        base, chain = g.view_chain(x)
        strided = strided_view(g, x, base, chain) if chain else None
        if strided is not None:
            views = (View(None, tuple((k, _attr_template(g, hb, a)) for k, a in
                                      zip(("size", "stride", "storage_offset"), strided))),)
        else:
            views = tuple(View(n.op, tuple((k, _attr_template(g, hb, a))
                                           for k, a in n.attrs.items())) for n in chain)
        ops.append((operand(base), views))
    attrs = tuple((k, _attr_template(g, hb, a)) for k, a in node.attrs.items())
    return LibraryCall(node.op, tuple(ops), attrs, out)


def _reads(step: Step) -> list[Operand]:
    if isinstance(step, LibraryCall):
        return [o for o, _ in step.operands]
    return [o for v in step.variants for o in v.operands] + [o for o, _, _ in step.index_checks]


def _in_place(g: Graph, steps: list[Step], frees: Sequence[tuple[int, ...]],
              buffers: Sequence[Value], kernels: Sequence[KernelBody]) -> list[Step]:
    """Each kernel launch writes its output into an operand buffer where that is safe and
    saves a buffer: the kernel reads the operand only at the output's own index
    (``entries.in_place_inputs``), the operand has the output's dims and dtype, dies at the launch
    (``frees``: never a graph output), and no other buffer may share its storage (a kernel's
    output, or a library call's other than an eager step's, which may return a view). Eager
    elementwise chains free their operand the same way (``relu_``, ``out += x``): a call's peak
    holds one buffer fewer at each such launch."""
    body = {kb.name: kb for kb in kernels}
    fresh = {st.out for st in steps if isinstance(st, KernelLaunch) or st.op is not Ops.eager}
    out = []
    for st, fr in zip(steps, frees):
        kb = body.get(st.variants[0].name) if isinstance(st, KernelLaunch) else None
        safe = set(in_place_inputs(kb)) if kb is not None else set()
        ops = st.variants[0].operands if safe else ()
        for i in sorted(safe):
            o = ops[i]
            if o.src is Src.BUFFER and o.index in fr and o.index in fresh and \
                    all(j in safe for j, p in enumerate(ops) if p == o) and \
                    buffers[o.index].dtype == buffers[st.out].dtype and \
                    g.dims(buffers[o.index]) == g.dims(buffers[st.out]):
                st = replace(st, in_place=o.index)
                break
        out.append(st)
    return out


def _frees(steps: Sequence[Step], n_buffers: int, outputs: Sequence[Operand]
           ) -> tuple[tuple[int, ...], ...]:
    """For each step, the buffers whose last use (read, or write if never read) it is."""
    last = {}
    for i, st in enumerate(steps):
        last[st.out] = max(last.get(st.out, i), i)
        for o in _reads(st):
            if o.src is Src.BUFFER:
                last[o.index] = i
    keep = {o.index for o in outputs if o.src is Src.BUFFER}
    out: list[list[int]] = [[] for _ in steps]
    for b, i in last.items():
        if b not in keep:
            out[i].append(b)
    return tuple(tuple(sorted(f)) for f in out)
