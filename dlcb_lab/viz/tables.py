"""Tabular renderings: the dims classification, the host program and its trace, the launch plan and
what a call launches, thunks, the partition, pass records, the pipeline summary and the compiled
module. Registers are shown as ``r5`` with the dimension expression they hold (``24*N``); dims are
coloured by kind (literal, named, residual) through the stylesheet's CSS variables."""

from __future__ import annotations

from typing import Sequence

from ..api import CompiledModule, DimTable, Pipeline
from ..dims import DimKind
from ..hostgen.lower import KernelLaunch, LaunchPlan, LibraryCall, Operand, Reg, Src
from ..hostgen.program import HostProgram, HostTrace, Instr
from ..passes import Partition, PassRecord
from ..runtime.thunks import LaunchTrace, Thunk
from .render import Rendering, render, renders
from .style import badge, block, details, esc, folded_table, table

ROWS = 200   # rows shown before a table folds the rest under "N hidden"


# -- shared pieces -------------------------------------------------------------------------------
def _reg(k: int, names: Sequence[str]) -> str:
    """``r5`` and, when known, the expression it holds."""
    name = names[k] if k < len(names) else ""
    hint = f' <span class="muted">{esc(name)}</span>' if name else ""
    return f"<code>r{k}</code>{hint}"


def plural(k: int, what: str) -> str:
    """``1 check``, ``7 checks``."""
    return f"{k} {what}{'' if k == 1 else 's'}"


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
    return f'<code class="dl-{kind.value}" title="{kind.value}">{esc(repr(expr))}</code>'


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
            + folded_table(["value", "shape", "kinds"], rows, ROWS, raw=True))
    return Rendering(block(html), title="Dims")


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
            + folded_table(["slot", "register"], _slot_rows(p), ROWS, raw=True))
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
    return html


@renders(HostTrace)
def host_trace(t: HostTrace) -> Rendering:
    return Rendering(block(_trace_html(t)), title="Host trace")


# -- launch plan and launches --------------------------------------------------------------------
def _plan_step(i: int, st, frees: Sequence[int], plan: LaunchPlan) -> tuple:
    free = ", ".join(f"%{plan.buffers[j].value}" for j in frees)
    if isinstance(st, LibraryCall):
        ins = []
        for o, views in st.operands:
            v = "".join(f".{w.op.name}({_kv((k, _attr(a)) for k, a in w.attrs)})" for w in views)
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
    return (i, badge("kernel", "generated"), f"<code>{esc(var.name)}</code>",
            esc(f"%{plan.buffers[st.out].value}"), ops,
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
            + folded_table(["#", "value", "dtype", "shape (registers)"], bufs, ROWS, raw=True))


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
            var = "block per output" if s.variant else "thread per output"
            how = (f"{badge('kernel', 'generated')} {s.numel} elements, {var}, {width} index"
                   + ((f", {s.grid} prange iterations" if t.device == "cpu" else
                       f", grid {s.grid} &times; block {s.block}") if s.numel else
                      " (not launched: no elements)"))
            params = _kv(s.params)
            if s.extent is not None:
                params += f"{', ' if params else ''}reduced extent {s.extent}"
        rows.append((s.index, f"<code>{esc(s.name)}</code>", how,
                     f"<code>%{esc(s.out)}</code> {list(s.shape)}", params,
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
    rows = [(s.index, badge(s.kind, s.kind), f"<code>%{esc(s.value)}</code>", len(s.ops),
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
        ("constraints", f"{plural(len(p.constraints), 'constraint')}, {len(p.residuals)} residual"),
        ("solver trace", plural(len(p.solver_trace), "rule application")),
        ("dims", _counts(p.dims.counts())),
        ("passes", ", ".join(f"{esc(r.name)} ({len(r.changes)})" for r in p.passes)),
        ("partition", _counts(c)),
        ("kernels", ", ".join(f"<code>{esc(k.name)}</code>" for k in p.kernels[:12])
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
    return Rendering(block("<div><b>Pipeline</b></div>" + _pipeline_html(p)), title="Pipeline")


def module_html(cm: CompiledModule) -> str:
    """The compiled module's signature (dims coloured by kind), stats and pipeline summary."""
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
            + _pipeline_html(p))


@renders(CompiledModule)
def compiled_module(cm: CompiledModule) -> Rendering:
    return Rendering(block(module_html(cm)), title="CompiledModule")
