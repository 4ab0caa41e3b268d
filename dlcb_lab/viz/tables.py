"""Tabular renderings: the dims classification, the host program and its trace, the launch plan and
what a call launches, thunks, the partition, pass records, the pipeline summary and the compiled
module. Registers are shown as ``r5`` with the dimension expression they hold (``24*N``); dims are
coloured by kind (literal, named, residual) through the stylesheet's CSS variables."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Sequence

from ..api import CompiledModule
from ..records import DimTable, Pipeline
from ..dims import Constraint, DimKind, Expr, Lit, Var
from ..ir.graph import Graph
from ..hostgen.lower import KernelLaunch, LaunchPlan, LibraryCall, Operand, Reg, Src
from ..hostgen.program import HostProgram, HostTrace, Instr
from ..passes import Partition, PassRecord
from ..runtime.thunks import LaunchTrace, Thunk
from .render import Rendering, render, renders
from .style import FOLD_ROWS, badge, block, details, esc, folded_table, kernel_link, table

ROWS = FOLD_ROWS   # rows shown before a table folds the rest under "N more rows"


# -- dim aliases ---------------------------------------------------------------------------------
_ALIASES: ContextVar[dict[str, str] | None] = ContextVar("dlcb_dim_aliases", default=None)


def dim_aliases(g: Graph) -> dict[Expr, str]:
    """The graph drawing's short names for long dims (``H₁`` for ``((H+1)//2+1)//2``, see
    ``diagrams._Aliases``), numbered in the order the drawing meets them (its value edges, folded
    blocks skipped), then the dims only folded blocks hold. Empty without graphviz (the drawing,
    and so its names, need it)."""
    try:
        from .diagrams import FOLD_AT, _Aliases, drawn_edges, fold_units, graph_units
    except ImportError:
        return {}
    names = _Aliases()
    fold = len(g.nodes) > FOLD_AT
    units = graph_units(g)
    rep: dict[int, str] = {n.out.id: f"n{n.out.id}" for n in g.nodes}
    for fi, f in enumerate(fold_units(g, units) if fold else []):
        for u in f.hidden:
            for n in units[u].nodes:
                rep[n.out.id] = f"fold{fi}"
    consts = {v.id for v, _ in g.constants}
    for _, _, vals in drawn_edges(g, rep, not fold):   # the drawing's edge labels, in order
        names.shape(g.dims(vals[0]))
    for v in g.outputs:
        if not (v.producer is None and v.id in consts and fold):
            names.shape(g.dims(v))
    for v in (*g.inputs, *(n.out for n in g.nodes)):      # dims the drawing does not show
        names.shape(g.dims(v))
    return dict(names.names)


@contextmanager
def graph_aliases(g: Graph) -> Iterator[dict[Expr, str]]:
    """Within this context the tables (host program, launch plan, dims, launches) name long dims
    by ``g``'s aliases (``dim_aliases``), each with its expression as hover text and a legend
    under the table, as the graph drawing does."""
    names = dim_aliases(g)
    token = _ALIASES.set({repr(e): a for e, a in names.items()})
    try:
        yield names
    finally:
        _ALIASES.reset(token)


def dim_alias(text: str) -> str | None:
    """The alias of the dim spelled ``text`` (its ``repr``) inside ``graph_aliases``, else None."""
    names = _ALIASES.get()
    return None if names is None else names.get(text)


def alias_legend(texts: Sequence[str]) -> str:
    """A legend ``H₁ = ((H+1)//2+1)//2`` for the aliased dims among ``texts`` (expression
    reprs), in alias order; empty outside ``graph_aliases`` or when none is aliased."""
    names = _ALIASES.get() or {}
    used = {names[t]: t for t in texts if t in names}
    if not used:
        return ""
    items = sorted(used.items(), key=lambda kv: (kv[0][0], len(kv[0]), kv[0]))
    return ('<div class="muted dl-aliases">' + "; ".join(
        f"<code>{esc(a)}</code> = <code>{esc(t)}</code>" for a, t in items) + "</div>")


# -- shared pieces -------------------------------------------------------------------------------
def _reg(k: int, names: Sequence[str]) -> str:
    """``r5`` and, when known, the expression it holds (its alias, inside ``graph_aliases``)."""
    name = names[k] if k < len(names) else ""
    a = dim_alias(name) if name else None
    hint = (f' <span class="muted" title="{esc(name)}">{esc(a)}</span>' if a else
            f' <span class="muted">{esc(name)}</span>' if name else "")
    return f"<code>r{k}</code>{hint}"


def plural(k: int, what: str) -> str:
    """``1 check``, ``7 checks``, ``2 launches``."""
    return f"{k} {what}{'' if k == 1 else 'es' if what.endswith(('ch', 'sh', 's', 'x')) else 's'}"


def _arg(i: int, args: Sequence[str]) -> str:
    return f"%{args[i]}" if i < len(args) else f"input {i}"


def _instr_text(ins: Instr, args: Sequence[str]) -> str:
    """The instruction in words: loads and rank checks name the input they read."""
    if ins.op == "load":
        return f"r{ins.dst} = {_arg(ins.a, args)}.shape[{ins.b}]"
    if ins.op == "rank":
        return f"fail if rank({_arg(ins.a, args)}) != {ins.b}"
    return ins.text()


def _template(message: str) -> str:
    """A check's message template as text (``{got}``/``{want}`` stay placeholders)."""
    return message.replace("{{", "{").replace("}}", "}")


def _dim(expr: object, kind: DimKind) -> str:
    text = repr(expr)
    a = dim_alias(text)
    if a:
        return f'<code class="dl-{kind.value}" title="{kind.value}: {esc(text)}">{esc(a)}</code>'
    return f'<code class="dl-{kind.value}" title="{kind.value}">{esc(text)}</code>'


def embed(obj: object) -> str:
    """Another object's rendering inside this one (its HTML, and its SVG unless already inline);
    a note where no renderer is registered for its type."""
    try:
        r = render(obj)
    except TypeError as err:
        if not str(err).startswith("no rendering for"):
            raise
        return f'<p class="muted">{esc(err)}</p>'
    svg = r.svg[r.svg.find("<svg"):] if r.svg and "<svg" not in r.html else ""
    return r.html + svg


def _kernel_name(i: int, value: str) -> str:
    """The kernel of partition step ``i`` (materializing ``value``), as ``kgen.infer`` names it."""
    return f"dlcb_k{i}_" + "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in value)


def _operand(o: Operand, plan: LaunchPlan) -> str:
    if o.src is Src.INPUT:
        return _arg(o.index, plan.inputs)
    return f"%{plan.buffers[o.index].value}"


def _kv(items) -> str:
    return ", ".join(f"{esc(k)}={esc(v)}" for k, v in items)


def _attr(a: object) -> str:
    """An attribute template as text: a register-computed value is ``r5``."""
    if isinstance(a, Reg):
        return f"r{a.r}"
    if isinstance(a, (tuple, list)):
        inner = ", ".join(_attr(x) for x in a)
        return f"({inner}{',' if len(a) == 1 else ''})" if isinstance(a, tuple) else f"[{inner}]"
    return repr(a)


def _counts(c: dict[str, int]) -> str:
    return " ".join(badge(f"{k} {n}", k) for k, n in c.items())


# -- dims ----------------------------------------------------------------------------------------
@renders(DimTable)
def dim_table(t: DimTable) -> Rendering:
    by: dict[str, list] = {}
    for r in t.rows:
        by.setdefault(r.value, []).append(r)
    rows = [(f"<code>%{esc(v)}</code>",
             "[" + ", ".join(_dim(r.expr, r.kind) for r in rs) + "]",
             " ".join(badge(r.kind.value[0].upper(), r.kind.value) for r in rs))
            for v, rs in by.items()]
    html = (f"<div><b>Dims</b> after the solve: {_counts(t.counts())} "
            '<span class="muted">(literal: in the code; named: a kernel parameter; residual: '
            "computed and checked by the host program)</span></div>"
            + folded_table(["value", "shape", "kinds"], rows, ROWS, raw=True)
            + alias_legend([repr(r.expr) for r in t.rows]))
    return Rendering(block(html), title="Dims")


# -- what the solve found ------------------------------------------------------------------------
def trivial_constraint(c: Constraint) -> bool:
    """``a == a`` (interned: the same object on both sides) or ``3 == 3``: holds as built."""
    return c.lhs is c.rhs or (isinstance(c.lhs, Lit) and isinstance(c.rhs, Lit)
                              and c.lhs.value == c.rhs.value)


def trivial_groups(cs) -> list[tuple[str, str, int, str, tuple[int, ...]]]:
    """The trivial constraints of ``cs`` grouped by provenance (op, detail): (op, detail,
    count, an example ``64 == 64``, ids), most frequent first."""
    by: dict[tuple[str, str], list[Constraint]] = {}
    for c in cs:
        if trivial_constraint(c):
            by.setdefault((c.provenance.op, c.provenance.detail), []).append(c)
    out = [(op, d, len(g), f"{g[0].lhs!r} == {g[0].rhs!r}", tuple(c.id for c in g))
           for (op, d), g in by.items()]
    return sorted(out, key=lambda r: (-r[2], r[0], r[1]))


def _ids(ids: Sequence[int], k: int = 8) -> str:
    return ", ".join(f"#{i}" for i in ids[:k]) + (f" … {len(ids) - k} more" if len(ids) > k else "")


def trivial_constraints_html(cs) -> str:
    """One row per (op, detail) of the trivial constraints of ``cs``, with their count."""
    rows = [(f"<code>{esc(op)}</code>", esc(d), n, f"<code>{esc(ex)}</code>", esc(_ids(ids)))
            for op, d, n, ex, ids in trivial_groups(cs)]
    if not rows:
        return ""
    n = sum(r[2] for r in rows)
    return (f"<div>{plural(n, 'trivial constraint')} (<code>a == a</code>: checked when built, "
            f"nothing left to solve), by op and operand</div>"
            + folded_table(["op", "operand / axis", "count", "example", "ids"], rows, ROWS,
                           raw=True))


def _origin(solver, c: Constraint) -> Constraint:
    try:
        return solver.origin(c)
    except (AttributeError, KeyError):
        return c


def _cref(c: Constraint, solver=None) -> str:
    """``#12 reshape 'r' (numel …) at m.py:3``, the user-added origin named when derived."""
    root = _origin(solver, c) if solver is not None else c
    via = f" ⇐ #{root.id}" if root is not c else ""
    return f"<code>#{c.id}</code>{esc(via)} {esc(root.provenance)}"


def derived_dims(g: Graph) -> list[tuple[Expr, str, str, tuple[Constraint, ...], int]]:
    """Each distinct derived dim of ``g``'s values (after the solve: not a literal and not an
    input's own variable), first-seen order: (expression, the first value it is an axis of, the
    op that produced that value as ``op 'node' at where``, the constraints whose bindings it
    rests on (``Solver.bindings_behind`` of the variables in it, or of the variable solved to
    it, like a reshape's ``-1``), how many value axes have it)."""
    solver = g.solver
    solved = {v.name: v for v in solver.subst}
    bound_to: dict[Expr, Var] = {}
    for v, e in solver.subst.items():
        bound_to.setdefault(e, v)
    ins = {e for v in g.inputs for e in g.dims(v) if isinstance(e, Var)}
    out: dict[Expr, list] = {}
    for n in g.nodes:
        v = n.out
        for raw, e in zip(v.shape.items, g.dims(v)):
            if isinstance(e, Lit) or e in ins:
                continue
            row = out.get(e)
            if row is None:
                behind: tuple[Constraint, ...] = ()
                vs = [solved[x] for x in sorted(raw.free_vars) if x in solved]
                if not vs and e in bound_to:     # shapes are stored solved: the variable
                    vs = [bound_to[e]]           # bound to this very expression
                for sv in vs:
                    behind += tuple(c for c in solver.bindings_behind(sv) if c not in behind)
                where = f" at {n.where}" if n.where else ""
                row = out[e] = [e, v.name, f"{n.op.name} '{v.name}'{where}", behind, 0]
            row[4] += 1
    return [tuple(r) for r in out.values()]


def literal_pins(g: Graph) -> list[tuple[Var, int, Constraint]]:
    """The variables the solve pinned to a literal: (variable, value, the constraint that bound
    it, ``Solver.binding_source``), in binding order."""
    s = g.solver
    return [(v, e.value, s.binding_source[v]) for v, e in s.subst.items()
            if isinstance(e, Lit) and v in s.binding_source]


def solve_html(p: Pipeline) -> str:
    """What the solve found, for a researcher: each derived dim (alias ``H₁``, its expression)
    with the op and the constraints that produced it, the residual constraints the host program
    checks, the variables pinned to literals and the constraint that pinned each, and the
    trivial constraints grouped by op."""
    g = p.graph
    solver = g.solver
    kinds = {repr(r.expr): r.kind for r in p.dims.rows}
    rows = []
    derived = derived_dims(g)
    for e, _value, op, behind, n in derived:
        text = repr(e)
        a = dim_alias(text)
        kind = kinds.get(text, DimKind.RESIDUAL)
        rows.append((f"<code>{esc(a)}</code>" if a else "", _dim(e, kind) if not a else
                     f'<code class="dl-{kind.value}">{esc(text)}</code>',
                     badge(kind.value, kind.value), esc(op),
                     "<br>".join(_cref(c, solver) for c in behind) or
                     '<span class="muted">the op\'s shape rule</span>', n))
    html = (f"<h4>Derived dims ({len(rows)})</h4>"
            + (folded_table(["alias", "dim", "kind", "first produced by", "via constraints",
                             "axes"], rows, ROWS, raw=True) if rows else
               '<div class="muted">none: every dim is a literal or an input\'s own variable'
               "</div>"))
    res = [(f"<code>#{c.id}</code>", f'<code class="dl-residual">{esc(c.lhs)} == {esc(c.rhs)}'
            "</code>", _cref(_origin(solver, c)) if c.parent is not None else esc(c.provenance))
           for c in p.residuals]
    html += (f"<h4>Residual checks ({len(res)})</h4>"
             + (folded_table(["id", "checked on the host", "from"], res, ROWS, raw=True) if res
                else '<div class="muted">none: every constraint reduced at compile time</div>'))
    pins = [(f"<code>{esc(v)}</code>", f'<code class="dl-literal">{k}</code>', _cref(c, solver))
            for v, k, c in literal_pins(g)]
    if pins:
        html += (f"<h4>Literals pinned by a constraint ({len(pins)})</h4>"
                 + folded_table(["variable", "value", "pinned by"], pins, ROWS, raw=True))
    triv = trivial_constraints_html(p.constraints)
    if triv:
        html += "<h4>Trivial constraints</h4>" + triv
    return html + alias_legend([repr(e) for e, *_ in derived])


# -- host program --------------------------------------------------------------------------------
def _host_rows(p: HostProgram) -> list[tuple]:
    rows = []
    for i, ins in enumerate(p.instrs):
        holds = "" if ins.is_check else _reg(ins.dst, p.regs)
        msg = esc(_template(p.messages[ins.dst])) if ins.is_check else ""
        rows.append((i, f"<code>{ins.op}</code>", f"<code>{esc(_instr_text(ins, p.args))}</code>",
                     holds, msg))
    return rows


def _slot_rows(p: HostProgram, values: dict[str, int] | None = None) -> list[tuple]:
    return [(f"<code>{esc(name)}</code>", _reg(k, p.regs))
            + ((esc(values.get(name, "")),) if values is not None else ())
            for name, k in p.slots.items()]


@renders(HostProgram)
def host_program(p: HostProgram) -> Rendering:
    n_checks = sum(1 for i in p.instrs if i.is_check)
    args = ", ".join(f"%{a}" for a in p.args) or f"{p.n_args} inputs"
    html = (f"<div><b>Host program</b>: {plural(len(p.instrs), 'instruction')} "
            f"({plural(n_checks, 'check')}), {plural(p.n_regs, 'register')}, shapes of {esc(args)}</div>"
            + folded_table(["#", "op", "instruction", "stores", "fails with"], _host_rows(p), ROWS,
                           raw=True)
            + "<h4>Launch slots</h4>"
            + folded_table(["slot", "register"], _slot_rows(p), ROWS, raw=True)
            + alias_legend(p.regs))
    return Rendering(block(html), title="Host program")


def _trace_html(t: HostTrace) -> str:
    p = t.program
    rows = []
    for s in t.steps:
        reads = ", ".join(f"r{k}={v}" for k, v in s.reads)
        if s.instr.is_check:
            status = badge("ok", "ok") if s.failure is None else badge("FAIL", "fail")
            result = status if s.failure is None else f"{status} {esc(s.failure)}"
        else:
            result = f"<code>{s.value}</code>" if s.failure is None else \
                f"{badge('FAIL', 'fail')} {esc(s.failure)}"
        rows.append((s.index, f"<code>{esc(_instr_text(s.instr, p.args))}</code>",
                     "" if s.instr.is_check else _reg(s.instr.dst, p.regs),
                     f"<code>{esc(reads)}</code>", result))
    shapes = ", ".join(f"%{a}: {list(s)}" if i < len(p.args) else str(list(s))
                       for i, (a, s) in enumerate(zip(list(p.args) + [""] * len(t.shapes),
                                                      t.shapes)))
    n_checks = sum(1 for s in t.steps if s.instr.is_check)
    status = (f"{badge('ok', 'ok')} all {n_checks} checks pass" if t.ok else
              f'<div class="dl-error">{badge("ShapeMismatch", "fail")} {esc(t.error)}</div>')
    skipped = len(p.instrs) - len(t.steps)
    html = (f"<div><b>Host trace</b> for {esc(shapes)}: {len(t.steps)} of {len(p.instrs)} "
            f"instructions evaluated. {status}</div>"
            + folded_table(["#", "instruction", "stores", "reads", "result"], rows, ROWS,
                           raw=True))
    if skipped:
        html += f'<div class="muted">{skipped} instructions not evaluated after the failure</div>'
    if t.slots:
        vals = [(f"<code>{esc(n)}</code>", _reg(p.slots[n], p.regs), f"<code>{v}</code>")
                for n, v in t.slots.items()]
        html += "<h4>Launch slots</h4>" + folded_table(["slot", "register", "value"], vals, ROWS,
                                                       raw=True)
    return html + alias_legend(p.regs)


@renders(HostTrace)
def host_trace(t: HostTrace) -> Rendering:
    return Rendering(block(_trace_html(t)), title="Host trace")


# -- launch plan and launches --------------------------------------------------------------------
def _plan_step(i: int, st, frees: Sequence[int], plan: LaunchPlan) -> tuple:
    free = ", ".join(f"%{plan.buffers[j].value}" for j in frees)
    if isinstance(st, LibraryCall):
        ins = []
        for o, views in st.operands:
            v = "".join(f".{w.name}({_kv((k, _attr(a)) for k, a in w.attrs)})" for w in views)
            ins.append(f"{esc(_operand(o, plan))}{v}")
        attrs = _kv((k, _attr(a)) for k, a in st.attrs)
        return (i, badge("library", "library"), f"<code>{esc(st.op.name)}</code>",
                esc(f"%{plan.buffers[st.out].value}"), ", ".join(ins), attrs, esc(free))
    assert isinstance(st, KernelLaunch)
    var = st.variants[0]
    params = "<br>".join(f"{esc(n)} = {_reg(k, plan.regs)}"
                         for n, k in zip(var.param_names, var.params))
    extra = [f"numel {_reg(st.numel, plan.regs)}", f"index bound {_reg(st.index_bound, plan.regs)}"]
    if st.extent is not None:
        extra.append(f"reduced extent {_reg(st.extent, plan.regs)}")
    if len(st.variants) > 1:
        extra.append(f"block-per-output variant <code>{esc(st.variants[1].name)}</code>")
    extra += [f"checks {esc(_operand(o, plan))} in range ({esc(w)})"
              for o, _, w in st.index_checks]
    ops = ", ".join(esc(_operand(o, plan)) for o in var.operands)
    over = "" if st.in_place is None else f" (over %{plan.buffers[st.in_place].value})"
    return (i, badge("kernel", "generated"), kernel_link(var.name),
            esc(f"%{plan.buffers[st.out].value}{over}"), ops,
            (params + "<br>" if params else "") + "<br>".join(extra), esc(free))


def _plan_html(plan: LaunchPlan) -> str:
    bufs = [(j, f"<code>%{esc(b.value)}</code>", esc(str(b.dtype).replace("torch.", "")),
             "[" + ", ".join(_reg(k, plan.regs) for k in b.shape_regs) + "]")
            for j, b in enumerate(plan.buffers)]
    steps = [_plan_step(i, st, f, plan) for i, (st, f) in enumerate(zip(plan.steps, plan.frees))]
    n_k = len(plan.kernels)
    outs = ", ".join(_operand(o, plan) for o in plan.outputs)
    return (f"<div><b>Launch plan</b>: {plural(n_k, 'kernel launch')}, "
            f"{plural(len(plan.steps) - n_k, 'library call')}, {plural(len(plan.buffers), 'buffer')}; "
            f"outputs {esc(outs)}</div>"
            + folded_table(["#", "kind", "kernel / op", "writes", "reads", "params", "then frees"],
                           steps, ROWS, raw=True)
            + "<h4>Buffers</h4>"
            + folded_table(["#", "value", "dtype", "shape (registers)"], bufs, ROWS, raw=True)
            + alias_legend(plan.regs))


@renders(LaunchPlan)
def launch_plan(plan: LaunchPlan) -> Rendering:
    return Rendering(block(_plan_html(plan)), title="Launch plan")


@renders(LaunchTrace)
def launch_trace(t: LaunchTrace) -> Rendering:
    rows = []
    for s in t.steps:
        if s.kind == "library":
            how, params = badge("library", "library"), _kv(s.params)
        else:
            width = "32-bit" if s.narrow else "64-bit"
            wide = (s.width or 1) > 1
            var = (f"warp per output ({s.width} per block)" if wide else "block per output") \
                if s.variant else \
                f"{s.width} outputs per thread (vectorized)" if wide else "thread per output"
            how = (f"{badge('kernel', 'generated')} {s.numel} elements, {var}, {width} index"
                   + ((f", {s.grid} prange iterations" if t.device == "cpu" else
                       f", grid {s.grid} &times; block {s.block}") if s.numel else
                      " (not launched: no elements)"))
            params = _kv(s.params)
            if s.extent is not None:
                params += f"{', ' if params else ''}reduced extent {s.extent}"
        name = f"<code>{esc(s.name)}</code>" if s.kind == "library" else \
            kernel_link(s.kernel, s.name)
        rows.append((s.index, name, how,
                     f"<code>%{esc(s.out)}</code> {list(s.shape)}"
                     + (f" over <code>%{esc(s.in_place)}</code>" if s.in_place else ""), params,
                     esc(", ".join(f"%{f}" for f in s.frees))))
    head = (f"<div><b>Launches</b> of a {esc(t.thunk_kind)} thunk on {esc(t.device)}: "
            + (f"{len(t.steps)} steps" if t.ok else
               f'none: <div class="dl-error">{badge("ShapeMismatch", "fail")} {esc(t.error)}</div>')
            + "</div>")
    html = head
    if rows:
        html += folded_table(["#", "entry point / op", "launch", "writes", "params", "then frees"],
                             rows, ROWS, raw=True)
    html += "<h4>Host program trace</h4>" + _trace_html(t.host)
    return Rendering(block(html), title="Launches")


# -- thunk, partition, passes --------------------------------------------------------------------
@renders(Thunk)
def thunk(th: Thunk) -> Rendering:
    ins = [(i, f"<code>%{esc(n)}</code>", esc(str(d).replace("torch.", "")),
            "input" if i < th.n_user else "constant (module parameter/buffer)")
           for i, (n, d) in enumerate(zip(th.in_names, th.in_dtypes))]
    n_lib = len(th.plan.steps) - len(th.launchers)
    html = (f"<div><b>{esc(type(th).__name__)}</b> ({esc(th.kind)}) on {esc(th.device)}: "
            f"{plural(len(th.launchers), 'kernel')}, {plural(n_lib, 'library call')}, "
            f"{plural(len(th.host.instrs), 'host instruction')}, {plural(th.calls, 'call')} so far</div>"
            + folded_table(["#", "input", "dtype", "role"], ins, ROWS, raw=True)
            + details("launch plan", _plan_html(th.plan)))
    return Rendering(block(html), title=type(th).__name__)


@renders(Partition)
def partition(p: Partition) -> Rendering:
    rows = [(s.index, badge(s.kind, s.kind),
             kernel_link(_kernel_name(s.index, s.value), f"%{s.value}") if s.kind == "generated"
             else f"<code>%{esc(s.value)}</code>", len(s.ops),
             f"<code>{esc(' '.join(s.ops))}</code>", esc(", ".join(f"%{r}" for r in s.reads)),
             s.launches) for s in p.steps]
    c = p.counts()
    html = (f"<div><b>Partition</b>: {_counts(c)} "
            f"{sum(s.launches for s in p.steps)} launches per call</div>"
            + folded_table(["step", "kind", "value", "ops", "computes", "reads", "launches"],
                           rows, ROWS, raw=True))
    return Rendering(block(html), title="Partition")


def _pass_html(r: PassRecord) -> str:
    head = f"<b>{esc(r.name)}</b>: {plural(len(r.changes), 'change')}, {r.seconds * 1e3:.2f} ms"
    if not r.changes:
        return f"<div>{head}</div>"
    lst = "".join(f"<li><code>{esc(c)}</code></li>" for c in r.changes[:20])
    html = f"<div>{head}<ul>{lst}</ul>"
    if len(r.changes) > 20:
        rest = "".join(f"<li><code>{esc(c)}</code></li>" for c in r.changes[20:])
        html += details(f"{len(r.changes) - 20} more changes hidden", f"<ul>{rest}</ul>")
    return html + "</div>"


@renders(PassRecord)
def pass_record(r: PassRecord) -> Rendering:
    return Rendering(block(_pass_html(r)), title=f"pass {r.name}")


def passes_html(records: Sequence[PassRecord]) -> str:
    """The pass records of one compile, in order (a tuple has no renderer of its own)."""
    rows = [(i, f"<code>{esc(r.name)}</code>", len(r.changes), f"{r.seconds * 1e3:.2f}")
            for i, r in enumerate(records)]
    return (table(["#", "pass", "changes", "ms"], rows, raw=True)
            + "".join(_pass_html(r) for r in records))


# -- pipeline and compiled module ----------------------------------------------------------------
def _timings(timings) -> str:
    if not timings:
        return ""
    top = max(timings.values()) or 1.0
    rows = [(esc(k), f"{v * 1e3:.1f}",
             f'<span class="dl-bar" style="width:{max(1, round(160 * v / top))}px"></span>')
            for k, v in timings.items()]
    rows.append(("<b>total</b>", f"<b>{sum(timings.values()) * 1e3:.1f}</b>", ""))
    return table(["stage", "ms", ""], rows, raw=True)


def _pipeline_html(p: Pipeline) -> str:
    c = p.partition.counts() if p.partition is not None else {"library": 0, "generated": 0}
    rows = [
        ("graph", f"{plural(len(p.graph.nodes), 'op')}, {plural(len(p.graph.inputs), 'input')} "
                  f"({plural(len(p.graph.constants), 'constant')}), "
                  f"{plural(len(p.graph.outputs), 'output')}"),
        ("constraints", f"{plural(len(p.constraints), 'constraint')}, "
                        f"{len(p.residuals)} residual (host-checked)"),
        ("solver trace", plural(len(p.solver_trace), "rule application")),
        ("dims", _counts(p.dims.counts()) + " <span class=\"muted\">(distinct dims; axes: "
                 + ", ".join(f"{k} {n}" for k, n in p.dims.axis_counts().items()) + ")</span>"),
        ("passes", ", ".join(f"{esc(r.name)} ({len(r.changes)})" for r in p.passes)),
        ("partition", _counts(c) + "".join(
            f"<br>step {st.index} runs eagerly: {esc(st.why)}"
            for st in (p.partition.steps if p.partition is not None else ()) if st.why)),
        ("kernels", ", ".join(kernel_link(k.name) for k in p.kernels[:12])
         + (f" and {len(p.kernels) - 12} more" if len(p.kernels) > 12 else "")),
        ("host program", f"{plural(len(p.host_program.instrs), 'instruction')}, "
                         f"{plural(sum(1 for i in p.host_program.instrs if i.is_check), 'check')}"),
        ("launch plan", f"{plural(len(p.launch_plan.steps), 'step')}, "
                        f"{plural(len(p.launch_plan.buffers), 'buffer')}"),
        ("thunks", ", ".join(esc(th.kind) for th in p.thunks) or "none (not built)"),
    ]
    return ("<h4>Stages</h4>" + table(["stage", "result"], rows, raw=True)
            + "<h4>Compile time</h4>" + _timings(p.timings))


@renders(Pipeline)
def pipeline(p: Pipeline) -> Rendering:
    with graph_aliases(p.graph):
        html = ("<div><b>Pipeline</b></div>" + _pipeline_html(p) + "<h4>The solve</h4>"
                + solve_html(p))
    return Rendering(block(html), title="Pipeline")


def module_html(cm: CompiledModule) -> str:
    """The compiled module's signature (dims coloured by kind, long ones by the graph's aliases),
    stats, pipeline summary and what the solve found (``solve_html``)."""
    with graph_aliases(cm.pipeline.graph):
        return _module_html(cm)


def _module_html(cm: CompiledModule) -> str:
    p = cm.pipeline
    g = p.graph
    consts = {v.id for v, _ in g.constants}

    def sig(v) -> str:
        kinds = {r.axis: r.kind for r in p.dims.of(v.name)}
        dims = ", ".join(_dim(e, kinds.get(k, DimKind.RESIDUAL)) for k, e in enumerate(g.dims(v)))
        return f"<code>%{esc(v.name)}</code>: [{dims}] {esc(str(v.dtype).replace('torch.', ''))}"

    ins = [sig(v) for v in g.inputs if v.id not in consts]
    outs = [sig(v) for v in g.outputs]
    s = cm.stats()
    stats = [(esc(k), esc(f"{v:.3f}" if isinstance(v, float) else v)) for k, v in s.items()]
    backend = p.kernels[0].backend if p.kernels else ""
    return (f"<div><b>CompiledModule</b>: {esc(s['thunk'])} thunk"
            + (f", backend {esc(backend)}" if backend else "")
            + f", {plural(len(consts), 'constant')} (parameters and buffers)</div>"
            + table(["", "values"], [("inputs", "<br>".join(ins)), ("outputs", "<br>".join(outs))],
                    raw=True)
            + details("stats", table(["stat", "value"], stats, raw=True))
            + _pipeline_html(p) + "<h4>The solve</h4>" + solve_html(p))


@renders(CompiledModule)
def compiled_module(cm: CompiledModule) -> Rendering:
    return Rendering(block(module_html(cm)), title="CompiledModule")
