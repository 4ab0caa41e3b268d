"""The solver stepper: renderings of ``SolverTrace``, ``TraceRecord`` and ``SolverState``, and an
ipywidgets stepper over a trace (``stepper(trace)``, ``trace.stepper()``).

Highlight. A step rewrites equation ``before`` into ``after``; the highlighted parts of ``before``
are its smallest subtrees that differ from ``after`` on the expression trees (``diff``): two nodes
that are the same object match; two nodes of one kind with the same non-child data (a sum's
constant and coefficients, a list's length) are compared child by child, a sum's or product's
common terms or factors paired first; any other pair differs as a whole. A single rewritten
equation is compared both ways round (``collect`` may swap sides) and the smaller highlight is
kept; a binding ``v := e`` also marks ``v``'s occurrences; a list unpacked, a dropped or failed
equation is rewritten as a whole.

ipywidgets is imported by ``stepper`` only, so the static renderings work without it.
"""

from __future__ import annotations

import functools
from typing import Iterable, Sequence

from ..dims.constraints import Constraint, Provenance
from ..dims.expr import Expr, FloorDiv, Lit, Mod, Prod, Shape, Sum, Var, lit
from ..dims.solver import (RULES, Bind, Drop, Fail, Replace, SolverState, SolverTrace,
                           TraceRecord)
from .render import Rendering, renders
from .style import block, details, esc
from .tables import plural

Path = tuple[int, ...]
"""Child indices from a root (``Expr.children()`` order); in an equation, the first index picks
the side (0: lhs, 1: rhs)."""

RULE_DOC = {name: doc for name, doc, _ in RULES}
FOLD = 200   # rows shown before the rest of a table folds under "N more ... hidden"

CSS = """
.dlcb mark.dl-hl { background: rgba(212,167,44,.38); color: inherit; border-radius: 2px;
  padding: 0 1px; }
.dlcb mark.dl-hl.dl-new { background: rgba(26,127,55,.25); }
.dlcb .dl-eq { font-family: var(--jp-code-font-family, ui-monospace, monospace);
  white-space: pre-wrap; }
.dlcb .dl-fail { color: var(--dl-fail); }
.dlcb tr.dl-failed td { background: rgba(207,34,46,.14); }
.dlcb tr.dl-cur td { background: rgba(212,167,44,.12); }
.dlcb tr.dl-added td { background: rgba(26,127,55,.08); }
"""


def _block(html: str) -> str:
    return block(f"<style>{CSS}</style>{html}")


# --- tree diff -----------------------------------------------------------------------------------

def _pair_common(a: Sequence, b: Sequence, same) -> list[tuple[int, int]] | None:
    """Index pairs of ``a`` and ``b`` after removing the items they share (equal: nodes by
    identity): the rest paired in order among items ``same`` admits; None when the rest cannot
    be paired one to one."""
    left = list(range(len(b)))
    rest_a = []
    for i, x in enumerate(a):
        for k, j in enumerate(left):
            if b[j] == x:
                del left[k]
                break
        else:
            rest_a.append(i)
    if len(rest_a) != len(left):
        return None
    pairs = []
    for i in rest_a:
        for k, j in enumerate(left):
            if same(a[i], b[j]):
                pairs.append((i, j))
                del left[k]
                break
        else:
            return None
    return pairs


def _align(a: Expr, b: Expr) -> list[tuple[int, int]] | None:
    """The child pairs to compare when ``a`` and ``b`` agree at the root, else None."""
    if type(a) is not type(b) or isinstance(a, (Lit, Var)):
        return None
    if isinstance(a, (FloorDiv, Mod)):
        return [(0, 0), (1, 1)]
    if isinstance(a, Shape):
        return [(i, i) for i in range(len(a))] if len(a) == len(b) else None
    if isinstance(a, Prod):
        return _pair_common(a.factors, b.factors, lambda x, y: True)
    if isinstance(a, Sum):
        if a.const != b.const:
            return None
        return _pair_common(a.terms, b.terms, lambda x, y: x[1] == y[1])
    return None  # pragma: no cover


def diff(a: Expr, b: Expr, pa: Path = (), pb: Path = ()) -> list[tuple[Path, Path]]:
    """The smallest subtrees where ``a`` and ``b`` differ, as (path in ``a``, path in ``b``)
    pairs (prefixed by ``pa``/``pb``); empty when ``a is b``."""
    if a is b:
        return []
    pairs = _align(a, b)
    if pairs is None:
        return [(pa, pb)]
    ca, cb = a.children(), b.children()
    out: list[tuple[Path, Path]] = []
    for i, j in pairs:
        out += diff(ca[i], cb[j], pa + (i,), pb + (j,))
    return out


def subtree(e: Expr | tuple[Expr, ...], path: Path) -> Expr:
    """The node at ``path`` under ``e`` (an expression, or an equation as a pair)."""
    for i in path:
        e = e[i] if isinstance(e, tuple) else e.children()[i]
    return e


def _occurrences(e: Expr, v: Var, path: Path) -> list[Path]:
    if e is v:
        return [path]
    if v.name not in e.free_vars:
        return []
    return [p for i, c in enumerate(e.children()) for p in _occurrences(c, v, path + (i,))]


def _size(e: Expr) -> int:
    return 1 + sum(_size(c) for c in e.children())


def _prune(paths: Iterable[Path]) -> list[Path]:
    """``paths`` without duplicates and without those under another one."""
    out: list[Path] = []
    for p in sorted(set(paths), key=len):
        if not any(p[:len(q)] == q for q in out):
            out.append(p)
    return sorted(out)


def after_eqs(outcome) -> tuple[tuple[Expr, Expr], ...]:
    """The equations a step leaves: a rewrite's, a binding ``v == e`` and its host checks
    ``s == 0``; none for a dropped or failed equation."""
    if isinstance(outcome, Replace):
        return outcome.eqs
    if isinstance(outcome, Bind):
        return ((outcome.v, outcome.e), *((s, lit(0)) for s in outcome.side))
    return ()


def rewritten(eq: tuple[Expr, Expr], outcome) -> tuple[list[Path], list[list[Path]]]:
    """Highlight of a step (see the module docstring): paths into ``eq`` (the rewritten
    subexpressions), and per equation of ``after_eqs(outcome)`` the paths of what replaced them."""
    after = after_eqs(outcome)
    marks_after: list[list[Path]] = [[] for _ in after]
    single = (isinstance(outcome, Replace) and len(after) == 1) or isinstance(outcome, Bind)
    if not single:
        return [(0,), (1,)], marks_after
    x, y = after[0]
    best = None
    for sides in ((x, y), (y, x)):
        d = diff(eq[0], sides[0], (0,), (0,)) + diff(eq[1], sides[1], (1,), (1,))
        cost = sum(_size(subtree(eq, pa)) for pa, _ in d)
        if best is None or cost < best[0]:
            swap = sides[0] is not x
            best = (cost, d, swap)
    _, d, swap = best
    marks = [pa for pa, _ in d]
    marks_after[0] = [((1 - pb[0]) if swap else pb[0],) + pb[1:] for _, pb in d]
    if isinstance(outcome, Bind):
        marks += _occurrences(eq[0], outcome.v, (0,)) + _occurrences(eq[1], outcome.v, (1,))
    return _prune(marks), [_prune(m) for m in marks_after]


def highlight_nodes(rec: TraceRecord) -> list[Expr]:
    """The rewritten subexpressions of ``rec.eq`` (distinct nodes, in path order)."""
    out: list[Expr] = []
    for p in rewritten(rec.eq, rec.outcome)[0]:
        n = subtree(rec.eq, p)
        if not any(n is m for m in out):
            out.append(n)
    return out


# --- printing with marks -------------------------------------------------------------------------

def _pp(e: Expr, prec: int, marks: frozenset[Path], cls: str) -> tuple[str, str]:
    """(text, html) of ``e.pretty(prec)``, subtrees at ``marks`` (relative paths) wrapped in
    ``<mark>``. Mirrors the ``pretty`` methods of ``dims.expr``."""
    text = e.pretty(prec)
    if () in marks:
        return text, f'<mark class="{cls}">{esc(text)}</mark>'
    if not marks:
        return text, esc(text)

    def child(i: int, x: Expr, p: int) -> tuple[str, str]:
        return _pp(x, p, frozenset(m[1:] for m in marks if m[0] == i), cls)

    if isinstance(e, Prod):
        parts = [child(i, f, 2) for i, f in enumerate(e.factors)]
        h = "*".join(p[1] for p in parts)
        return text, f"({h})" if prec > 2 else h
    if isinstance(e, Sum):
        parts = []
        for i, (m, c) in enumerate(e.terms):
            t, h = child(i, m, 2)
            pre = "" if c == 1 else "-" if c == -1 else f"{c}*"
            parts.append((pre + t, esc(pre) + h))
        if e.const:
            parts.append((str(e.const), esc(e.const)))
        h = parts[0][1]
        for t, ph in parts[1:]:
            h += f" - {ph[1:]}" if t.startswith("-") else f" + {ph}"
        wrap = ((prec > 0 and len(parts) > 1) or prec > 2
                or (prec > 1 and parts[0][0].startswith("-")))
        return text, f"({h})" if wrap else h
    if isinstance(e, (FloorDiv, Mod)):
        h = f"{child(0, e.num, 3)[1]} {esc(e._sym)} {child(1, e.den, 3)[1]}"
        return text, f"({h})" if prec > 1 else h
    if isinstance(e, Shape):
        return text, "[" + ", ".join(child(i, x, 0)[1] for i, x in enumerate(e.items)) + "]"
    return text, esc(text)


def expr_html(e: Expr, marks: Iterable[Path] = (), new: bool = False) -> str:
    """``repr(e)`` as HTML, the subtrees at ``marks`` highlighted (``new``: as replacements)."""
    return _pp(e, 0, frozenset(marks), "dl-hl dl-new" if new else "dl-hl")[1]


def eq_html(eq: tuple[Expr, Expr], marks: Iterable[Path] = (), new: bool = False) -> str:
    """``lhs == rhs`` as HTML with ``marks`` (paths into the pair)."""
    marks = list(marks)
    side = lambda k: expr_html(eq[k], [m[1:] for m in marks if m[0] == k], new)
    return f"{side(0)} == {side(1)}"


def before_html(rec: TraceRecord) -> str:
    return f'<span class="dl-eq">{eq_html(rec.eq, rewritten(rec.eq, rec.outcome)[0])}</span>'


def after_html(rec: TraceRecord) -> str:
    """The outcome as ``TraceRecord.after`` prints it, the replacements highlighted."""
    out = rec.outcome
    marks = rewritten(rec.eq, out)[1]
    if isinstance(out, Drop):
        h = "true"
    elif isinstance(out, Fail):
        h = f'<span class="dl-fail">false</span> <span class="muted">({esc(out.why)})</span>'
    elif isinstance(out, Replace):
        h = ", ".join(eq_html(q, m, True) for q, m in zip(out.eqs, marks))
    else:
        m = marks[0]
        h = (expr_html(out.v, [p[1:] for p in m if p[0] == 0], True) + " := "
             + expr_html(out.e, [p[1:] for p in m if p[0] == 1], True))
        if out.side:
            h += "; host-check " + ", ".join(eq_html(q, mk, True)
                                             for q, mk in zip(after_eqs(out)[1:], marks[1:]))
    return f'<span class="dl-eq">{h}</span>'


# --- static renderings ---------------------------------------------------------------------------

def _constraint(trace: SolverTrace | None, cid: int) -> Constraint | None:
    if trace is None:
        return None
    try:
        return trace.constraint(cid)
    except KeyError:
        return None


def _origin(trace: SolverTrace, c: Constraint) -> Constraint:
    while c.parent is not None:
        p = _constraint(trace, c.parent)
        if p is None:
            break
        c = p
    return c


def _who(rec: TraceRecord, trace: SolverTrace | None) -> tuple[str, str]:
    """(constraint cell, provenance cell) of a step."""
    cell = f"#{rec.constraint_id}" + ("" if rec.parent_id is None else f" ← #{rec.parent_id}")
    c = _constraint(trace, rec.constraint_id)
    if c is None:
        return esc(cell), ""
    root = _origin(trace, c)
    if root is not c and root.id != rec.parent_id:
        cell += f" ⇐ #{root.id}"
    return esc(cell), esc(c.provenance)


def _rule_cell(rule: str) -> str:
    return f'<code title="{esc(RULE_DOC.get(rule, ""))}">{esc(rule)}</code>'


def _step_row(rec: TraceRecord, trace: SolverTrace | None) -> str:
    who, prov = _who(rec, trace)
    cls = ' class="dl-failed"' if isinstance(rec.outcome, Fail) else ""
    cells = (str(rec.step), _rule_cell(rec.rule), who, prov, before_html(rec), after_html(rec))
    return (f'<tr data-step="{rec.step}"{cls}>'
            + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")


STEP_HEAD = ("step", "rule", "constraint", "provenance", "before", "after")


def _rows_table(headers: Sequence[str], rows: Sequence[str], what: str) -> str:
    """A table of pre-built ``<tr>`` rows; past ``FOLD`` rows the rest fold (``what``: the
    singular noun for a row)."""
    head = "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>"
    tab = lambda rs: f"<table>{head}<tbody>{''.join(rs)}</tbody></table>"
    if len(rows) <= FOLD:
        return tab(rows)
    more = plural(len(rows) - FOLD, f"more {what}")
    return tab(rows[:FOLD]) + details(f"{more} hidden", tab(rows[FOLD:]))


def rules_html(trace: SolverTrace) -> str:
    """Per-rule count and time (``trace.rule_frame()``) with each rule's one-line comment."""
    if not len(trace):
        return ""
    df = trace.rule_frame()
    rows = [f"<tr><td>{_rule_cell(r)}</td>"
            f'<td class="dl-eq">{esc(RULE_DOC.get(r, ""))}</td><td>{int(x["count"])}</td>'
            f"<td>{x.total_ns / 1e3:.1f}</td><td>{x.mean_ns / 1e3:.2f}</td></tr>"
            for r, x in df.iterrows()]
    return _rows_table(("rule", "rewrite", "count", "total µs", "mean µs"), rows, "rule")


def trace_html(trace: SolverTrace) -> str:
    """The static list of a trace: a per-rule summary, then every step (rule, constraint and
    its lineage ``#id ← #parent ⇐ #user-added``, the last part only when it is not the parent;
    provenance, before → after highlighted)."""
    n_fail = sum(isinstance(t.outcome, Fail) for t in trace)
    head = (f"<h3>Solver trace</h3><p>{plural(len(trace), 'rule application')} over "
            f"{len(trace.constraints)} user-added and {len(trace.derived)} derived constraints"
            + (f', <span class="dl-fail">{plural(n_fail, "contradiction")}</span>' if n_fail
               else "")
            + "</p>")
    if not len(trace):
        return head
    rows = [_step_row(t, trace) for t in trace]
    return head + rules_html(trace) + _rows_table(STEP_HEAD, rows, "step")


def record_html(rec: TraceRecord, trace: SolverTrace | None = None) -> str:
    """One step: rule and its rewrite, the constraint and its provenance, before → after."""
    who, prov = _who(rec, trace)
    out = rec.outcome
    html = (f'<div data-step="{rec.step}"><h4>step {rec.step}: {_rule_cell(rec.rule)} '
            f'<span class="muted dl-eq">{esc(RULE_DOC.get(rec.rule, ""))}</span></h4>'
            f"<p>constraint {who}" + (f" from {prov}" if prov else "") + "</p>"
            f'<table><tr><th>before</th><td>{before_html(rec)}</td></tr>'
            f'<tr><th>after</th><td>{after_html(rec)}</td></tr></table>')
    if isinstance(out, Fail):
        html += f'<p class="dl-fail">contradiction: {esc(out.why)}'
        if out.used:
            html += " (after substituting " + ", ".join(esc(v) for v in
                                                      sorted(out.used, key=repr)) + ")"
        html += "</p>"
    return html + "</div>"


def _dag(constraints: Sequence[Constraint], subst, highlight: Sequence[Expr]
         ) -> tuple[str | None, str]:
    """(SVG, inline HTML with the colour legend) of the constraint DAG
    (``diagrams.constraint_dag``), nodes classified under ``subst`` (None: as built) and
    ``highlight`` emphasized; a failed drawing is (None, a visible note), so the step itself
    still shows."""
    from .diagrams import DAG_LEGEND, constraint_dag, svg_html

    resolve = None if subst is None else (lambda e: e.subs(subst))
    try:
        svg = constraint_dag(constraints, resolved=resolve, highlight=highlight)
    except Exception as err:    # graphviz failures: keep the stepper usable
        msg = str(err).strip().splitlines()
        return None, f'<p class="dl-fail">no DAG: {esc(msg[0] if msg else type(err).__name__)}</p>'
    return svg, f"<div>{DAG_LEGEND}</div>{svg_html(svg)}"


@renders(SolverTrace)
def _render_trace(trace: SolverTrace) -> Rendering:
    return Rendering(_block(trace_html(trace)), title="Solver trace")


@renders(TraceRecord)
def _render_record(rec: TraceRecord) -> Rendering:
    c = Constraint(rec.constraint_id, rec.eq[0], rec.eq[1], Provenance(rec.rule), rec.parent_id)
    svg, inline = _dag([c], None, highlight_nodes(rec))
    return Rendering(_block(record_html(rec) + inline), svg=svg, title=f"step {rec.step}")


def _status(c: Constraint, s: SolverState) -> str:
    return "pending" if any(c is p for p in s.pending) else "residual"


def state_html(after: SolverState, before: SolverState | None = None) -> str:
    """The equations (pending and residual) and bindings of ``after``, and the constraint it
    failed on, if any (with the reason); with ``before`` (the state the step started from), also
    what the step removed, added and re-bound, and what a contradiction dropped."""
    rows = []
    b_live = before.live if before is not None else {}
    a_live = after.live
    failed = after.failed
    cur = after.record.constraint_id if after.record is not None else None
    fid = failed.id if failed is not None else None
    for cid in sorted(b_live.keys() | a_live.keys() | ({fid} if fid is not None else set())):
        c = a_live.get(cid) or b_live.get(cid) or failed
        sb = _status(c, before) if cid in b_live else ""
        sa = ("failed" if cid == fid else _status(c, after) if cid in a_live
              else "rewritten" if cid == cur else "dropped")
        status = (f"new → {sa}" if before is not None and not sb
                  else f"{sb} → {sa}" if sb and sb != sa else sa)
        if cid == fid and isinstance(after.record.outcome, Fail):
            status += f" ({after.record.outcome.why})"
        cls = (" dl-failed" if sa == "failed" else " dl-cur" if cid == cur and before is not None
               else " dl-added" if before is not None and not sb else "")
        cls = f' class="{cls.strip()}"' if cls else ""
        rows.append(f'<tr data-cid="{cid}"{cls}><td>#{cid}</td>'
                    f"<td>{'' if c.parent is None else f'#{c.parent}'}</td>"
                    f'<td class="dl-eq">{eq_html((c.lhs, c.rhs))}</td><td>{esc(status)}</td>'
                    f"<td>{esc(c.provenance)}</td></tr>")
    eqs = _rows_table(("id", "from", "equation", "status", "provenance"), rows, "equation")
    brows = []
    old = before.subst if before is not None else {}
    for v, e in after.subst.items():
        ch = "" if before is None else ("new" if v not in old else
                                        "" if old[v] is e else "updated")
        added = ' class="dl-added"' if ch else ""
        brows.append(f'<tr data-var="{esc(v)}"{added}>'
                     f'<td class="dl-eq">{esc(v)}</td><td class="dl-eq">{esc(e)}</td>'
                     f"<td>{ch}</td></tr>")
    binds = _rows_table(("variable", "value", ""), brows, "binding")
    where = "before any step" if after.step < 0 else f"after step {after.step}"
    return (f"<h4>equations {where} ({len(after.pending)} pending, {len(after.residuals)} "
            f"residual{'' if fid is None else ', 1 failed'})</h4>{eqs}"
            f"<h4>bindings {where} ({len(after.subst)})</h4>{binds}")


@renders(SolverState)
def _render_state(s: SolverState) -> Rendering:
    return Rendering(_block(state_html(s)), title=f"solver state after step {s.step}")


# --- the widget ----------------------------------------------------------------------------------

def stepper(trace: SolverTrace, dag: bool = True):
    """An ipywidgets stepper over ``trace``: a slider with prev/next buttons over the steps
    whose rule is selected in the rule filter; for the current step its before → after
    (highlighted), the equations and bindings it leaves (from ``trace.replay()``) and, with
    ``dag``, the constraint DAG it started from with the rewritten expression highlighted.
    Without a live kernel (static HTML export) it displays as the static list of steps."""
    return _stepper_class()(trace, dag)


@functools.cache
def _stepper_class():
    import ipywidgets as w

    class Stepper(w.VBox):
        """The stepper widget (see ``stepper``). ``visible``: the step numbers the slider
        visits, ``current``: the record shown; ``states[k]``: the state before step ``k``
        (``states[-1]`` the final one)."""

        def __init__(self, trace: SolverTrace, dag: bool = True) -> None:
            self.trace = trace
            self.states = list(trace.replay(initial=True))
            present = {t.rule for t in trace}
            names = [n for n, _, _ in RULES if n in present] + sorted(
                present - {n for n, _, _ in RULES})
            self.rules = w.SelectMultiple(options=names, value=tuple(names), description="rules",
                                          rows=max(1, min(len(names), len(RULES))))
            self.slider = w.IntSlider(min=0, max=max(len(trace) - 1, 0), value=0,
                                      description="", continuous_update=False,
                                      readout=False, disabled=not len(trace))
            self.prev = w.Button(description="◀ prev", layout=w.Layout(width="80px"))
            self.next = w.Button(description="next ▶", layout=w.Layout(width="80px"))
            self.show_dag = w.Checkbox(value=dag, description="DAG", indent=False,
                                       layout=w.Layout(width="70px"))
            self.label = w.HTML()
            self.step_html = w.HTML()
            self.state_html = w.HTML()
            self.dag_html = w.HTML()
            self.visible: list[int] = list(range(len(trace)))
            self._dags: dict[int, str] = {}
            self._busy = False
            self.prev.on_click(lambda _: self._move(-1))
            self.next.on_click(lambda _: self._move(1))
            self.slider.observe(lambda _: self._show(), names="value")
            self.rules.observe(lambda _: self._filter(), names="value")
            self.show_dag.observe(lambda _: self._show(), names="value")
            super().__init__([
                w.HBox([self.prev, self.slider, self.next, self.label, self.show_dag]),
                self.rules, self.step_html,
                w.HBox([self.state_html, self.dag_html],
                       layout=w.Layout(flex_flow="row wrap", align_items="flex-start"))])
            self._show()

        @property
        def current(self) -> TraceRecord | None:
            if not self.visible:
                return None
            return self.trace[self.visible[min(self.slider.value, len(self.visible) - 1)]]

        def go(self, step: int) -> None:
            """Show trace step ``step`` (it must pass the rule filter)."""
            self.slider.value = self.visible.index(step)

        def _move(self, d: int) -> None:
            if self.visible:
                self.slider.value = max(0, min(len(self.visible) - 1, self.slider.value + d))

        def _filter(self) -> None:
            keep = set(self.rules.value)
            cur = self.current
            self.visible = [t.step for t in self.trace if t.rule in keep]
            pos = 0
            if cur is not None:   # stay on the current step, else the next one that passes
                pos = next((k for k, s in enumerate(self.visible) if s >= cur.step),
                           max(len(self.visible) - 1, 0))
            self._busy = True
            try:
                self.slider.max = max(len(self.visible) - 1, 0)
                self.slider.value = pos
                self.slider.disabled = not self.visible
            finally:
                self._busy = False
            self._show()

        def _show(self) -> None:
            if self._busy:
                return
            rec = self.current
            n = len(self.trace)
            if rec is None:
                self.label.value = f"0 of {n} steps selected"
                self.step_html.value = _block("<p>no step matches the rule filter</p>"
                                              if n else "<p>no rule applications</p>")
                self.state_html.value = _block(state_html(self.states[-1]))
                self.dag_html.value = ""
                return
            self.label.value = (f"step {rec.step} of {n} ({self.slider.value + 1} / "
                                f"{len(self.visible)} shown)")
            self.step_html.value = _block(record_html(rec, self.trace))
            before, after = self.states[rec.step], self.states[rec.step + 1]
            self.state_html.value = _block(state_html(after, before))
            self.dag_html.value = self._dag(rec, before) if self.show_dag.value else ""

        def _dag(self, rec: TraceRecord, before: SolverState) -> str:
            h = self._dags.get(rec.step)
            if h is None:
                h = self._dags[rec.step] = _block(_dag(tuple(before.live.values()), before.subst,
                                                       highlight_nodes(rec))[1])
            return h

        def _repr_mimebundle_(self, **kwargs):
            data = super()._repr_mimebundle_(**kwargs) or {}
            data["text/html"] = _render_trace(self.trace).html
            return data

    return Stepper

