"""The solve, step by step: renderings of ``SolverTrace``, ``TraceRecord`` and ``SolverState``, an
HTML stepper that needs no kernel (``stepper_html(trace)``: what a trace displays as, in notebooks,
exports and the report) and an ipywidgets stepper for a live kernel (``stepper(trace)``, also
``dlcb_lab.viz.stepper``; its ``text/html`` is the HTML stepper, so an export keeps stepping).

HTML stepper. Every state of ``trace.replay()`` is embedded once, as the difference from the state
before (``stepper_data``: constraints' status changes and re-bound variables, each HTML string
stored once), so a trace of thousands of steps stays a few hundred kB; inline script and CSS only.
A range input with prev/next buttons and a rule filter walks the steps; trivial steps (the equation
already holds, ``is_trivial``) are hidden until asked for, with a visible count; ``#step=K`` in
the page address selects step K. Without JavaScript the final state shows, with a note saying so.

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
import json
import uuid
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
FOLD = 50   # rows shown before the rest of a table folds under "N more ... hidden"

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
            f"<td>{x.total_us:.1f}</td><td>{x.mean_us:.2f}</td></tr>"
            for r, x in df.iterrows()]
    return _rows_table(("rule", "rewrite", "count", "total µs", "mean µs"), rows, "rule")


def _trace_head(trace: SolverTrace) -> str:
    n_fail = sum(isinstance(t.outcome, Fail) for t in trace)
    n_triv = sum(is_trivial(t) for t in trace)
    return (f"<h3>Solver trace</h3><p>{plural(len(trace), 'rule application')} over "
            f"{len(trace.constraints)} user-added and {len(trace.derived)} derived constraints"
            + (f" ({n_triv} trivial: the equation already holds)" if n_triv else "")
            + (f', <span class="dl-fail">{plural(n_fail, "contradiction")}</span>' if n_fail
               else "")
            + "</p>")


def trace_html(trace: SolverTrace, trivial: bool = False) -> str:
    """The static list of a trace: a per-rule summary, then every step (rule, constraint and
    its lineage ``#id ← #parent ⇐ #user-added``, the last part only when it is not the parent;
    provenance, before → after highlighted). Trivial steps (``is_trivial``) are listed only with
    ``trivial``; otherwise they are counted per (op, detail) under "N trivial steps hidden"."""
    head = _trace_head(trace)
    if not len(trace):
        return head
    rows = [_step_row(t, trace) for t in trace if trivial or not is_trivial(t)]
    html = head + rules_html(trace) + _rows_table(STEP_HEAD, rows, "step")
    n_triv = len(trace) - len(rows)
    if n_triv:
        html += details(f"{plural(n_triv, 'trivial step')} hidden (a == a, 3 == 3), by op",
                        trivial_html(trace))
    return html


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
        svg = constraint_dag(constraints, resolved=resolve, highlight=highlight,
                             show_trivial=True)   # a trivial step's own equation is drawn
    except Exception as err:    # graphviz failures: keep the stepper usable
        msg = str(err).strip().splitlines()
        return None, f'<p class="dl-fail">no DAG: {esc(msg[0] if msg else type(err).__name__)}</p>'
    return svg, f"<div>{DAG_LEGEND}</div>{svg_html(svg)}"


def trace_stepper_html(trace: SolverTrace) -> str:
    """What a trace displays as: its counts, the per-rule summary, the trivial steps grouped by
    op, and the HTML stepper (``stepper_html``). Not wrapped in a ``.dlcb`` block: embed it in
    one (``render(trace).html`` is)."""
    html = _trace_head(trace)
    if len(trace):
        html += rules_html(trace)
        triv = trivial_html(trace)
        if triv:
            html += details(f"trivial steps by op ({sum(map(is_trivial, trace))})", triv)
    return html + stepper_html(trace)


@renders(SolverTrace)
def _render_trace(trace: SolverTrace) -> Rendering:
    return Rendering(_block(trace_stepper_html(trace)), title="Solver trace")


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


# --- the HTML stepper (no kernel needed) -----------------------------------------------------------

def is_trivial(rec: TraceRecord) -> bool:
    """A step that finds its equation already holds (``a == a``, ``3 == 3``): it binds nothing
    and leaves nothing; steppers hide these by default."""
    return isinstance(rec.outcome, Drop)


def _statuses(s: SolverState) -> dict[int, str]:
    out = {c.id: "r" for c in s.residuals}
    out.update((c.id, "p") for c in s.pending)
    return out


def _stepper_parts(trace: SolverTrace) -> tuple[dict, SolverState | None]:
    """``stepper_data`` and the last replayed state (None without one)."""
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        k = strings.get(s)
        if k is None:
            k = strings[s] = len(strings)
        return k

    provs: dict[Provenance, int] = {}

    def pid(pv: Provenance | None) -> int:
        """Index into ``P``: provenance as (op 'node', detail, where), each part stored once."""
        if pv is None:
            pv = Provenance("")
        k = provs.get(pv)
        if k is None:
            name = pv.op + (f" '{pv.node}'" if pv.node else "")
            k = provs[pv] = len(provs)
            parts.append([sid(esc(name)), sid(esc(pv.detail)), sid(esc(pv.where))])
        return k

    parts: list[list[int]] = []
    eqs: dict[int, list] = {}

    def known(c: Constraint) -> None:
        if c.id not in eqs:
            eqs[c.id] = [c.id, sid(eq_html((c.lhs, c.rhs))), c.parent, pid(c.provenance)]

    counts = trace.rule_counts()
    names = [n for n, _, _ in RULES if n in counts] + sorted(counts.keys() - set(RULE_DOC))
    index = {n: k for k, n in enumerate(names)}
    steps = []
    for rec in trace:
        who, _ = _who(rec, trace)
        c = _constraint(trace, rec.constraint_id)
        fail = ""
        out = rec.outcome
        if isinstance(out, Fail):
            fail = f'<p class="dl-fail">contradiction: {esc(out.why)}'
            if out.used:
                fail += " (after substituting " + ", ".join(
                    esc(v) for v in sorted(out.used, key=repr)) + ")"
            fail += "</p>"
        steps.append([index[rec.rule], sid(who), -1 if c is None else pid(c.provenance),
                      sid(before_html(rec)),
                      sid(after_html(rec)), sid(fail), int(is_trivial(rec)), rec.constraint_id,
                      sid(out.why if isinstance(out, Fail) else "")])
    diffs = []
    prev: dict[int, str] = {}
    prev_subst: dict = {}
    subst_obj = None
    by_id = {c.id: c for c in (*trace.constraints, *trace.derived)}
    last = None
    for s in trace.replay(initial=True):
        last = s
        now = _statuses(s)
        changes = [[cid, st] for cid, st in now.items() if prev.get(cid) != st]
        changes += [[cid, 0] for cid in prev if cid not in now]
        for cid, st in changes:
            if st:
                known(by_id.get(cid) or next(c for c in (*s.pending, *s.residuals)
                                             if c.id == cid))
        if s.failed is not None:
            known(s.failed)
        binds = []
        if s.subst is not subst_obj:
            subst_obj = s.subst
            binds = [[v.name, sid(esc(e))] for v, e in s.subst.items() if prev_subst.get(v) is not e]
            prev_subst = dict(s.subst)
        diffs.append([changes, None if s.failed is None else s.failed.id, binds])
        prev = now
    rules = [[n, sid(_rule_cell(n)), sid(esc(RULE_DOC.get(n, ""))), counts[n]] for n in names]
    return {"n": len(trace), "S": list(strings), "P": parts, "E": sorted(eqs.values()),
            "T": steps, "D": diffs, "R": rules}, last


def stepper_data(trace: SolverTrace) -> dict:
    """The precomputed states of ``trace.replay(initial=True)`` as the HTML stepper embeds them:
    ``S`` a table of distinct HTML strings (the other fields index it); ``P`` provenances as
    ``[op 'node', detail, where]`` (``str(Provenance)`` rebuilt from its parts, each stored once);
    ``E`` per constraint ``[id, equation, parent, provenance (P)]``; ``T`` per step ``[rule,
    constraint cell, provenance (P; -1: unknown), before, after, contradiction, trivial,
    constraint id, reason of a failure (text)]``; ``D``
    per state (the initial one, then after each step) its difference from the previous one:
    ``[[[id, "p" pending | "r" residual | 0 gone]..], failed id | None, [[variable, value]..]
    (bindings new or re-bound)]``; ``R`` per rule that applied ``[name, rule cell, rewrite,
    count]``."""
    return _stepper_parts(trace)[0]


STEPPER_CSS = """
.dlcb .dl-st-bar { display: flex; flex-wrap: wrap; align-items: center; gap: 6px; margin: 4px 0; }
.dlcb .dl-st-bar input[type=range] { width: min(480px, 60vw); }
.dlcb .dl-st-bar button { font: inherit; padding: 0 8px; }
.dlcb .dl-st-rules label { margin-right: 10px; white-space: nowrap; }
.dlcb .dl-st-note { color: var(--dl-muted); }
"""

STEPPER_JS = r"""
(function () {
  var me = document.currentScript;
  function find() {          // a notebook may run this before the output is in the document
    return (me && me.closest && me.closest(".dl-stepper")) || document.getElementById("%UID%");
  }
  var found = find();
  if (found) return init(found);
  var tries = 0, timer = setInterval(function () {
    var r = find();
    if (r || ++tries > 50) { clearInterval(timer); if (r) init(r); }
  }, 100);
function init(root) {
  if (root.getAttribute("data-ready")) return;
  root.setAttribute("data-ready", "1");
  var D = JSON.parse(root.querySelector("script.dl-st-data").textContent);
  var S = D.S, E = {}, n = D.n, FOLD = %FOLD%;
  D.E.forEach(function (e) { E[e[0]] = e; });
  function q(c) { return root.querySelector("." + c); }
  function prov(i) {         // str(Provenance): op 'node' (detail) at where
    var p = D.P[i];
    return S[p[0]] + (S[p[1]] ? " (" + S[p[1]] + ")" : "") + (S[p[2]] ? " at " + S[p[2]] : "");
  }
  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;")
    .replace(/>/g, "&gt;").replace(/"/g, "&quot;"); }
  var st = q("dl-st-static"); if (st) st.parentNode.removeChild(st);
  var live = q("dl-st-live"); live.style.display = "";
  var range = q("dl-st-range"), label = q("dl-st-label"), recEl = q("dl-st-rec"),
      eqEl = q("dl-st-eqs"), bindEl = q("dl-st-binds"), triv = q("dl-st-triv"),
      note = q("dl-st-note"), boxes = root.querySelectorAll("input.dl-st-rule");
  var visible = [], cur = -1, L, B, F;
  function reset() { cur = -1; L = new Map(); B = new Map(); F = null; }
  function at(j) {               // the state after j diffs (0: before step 0)
    if (j < cur) reset();
    while (cur < j) {
      cur++;
      var d = D.D[cur];
      d[0].forEach(function (x) { if (x[1] === 0) L.delete(x[0]); else L.set(x[0], x[1]); });
      F = d[1];
      d[2].forEach(function (x) { B.set(x[0], x[1]); });
    }
    return {L: new Map(L), B: new Map(B), F: F};
  }
  reset();
  var WORD = {p: "pending", r: "residual"};
  function fold(head, rows, what) {
    var t = function (rs) { return "<table><thead><tr>" + head.map(function (h) {
      return "<th>" + h + "</th>"; }).join("") + "</tr></thead><tbody>" + rs.join("") +
      "</tbody></table>"; };
    if (rows.length <= FOLD) return t(rows.map(function (r) { return r[1]; }));
    var shown = [], rest = [], room = FOLD - rows.filter(function (r) { return r[0]; }).length;
    rows.forEach(function (r) { if (r[0] || room-- > 0) shown.push(r[1]); else rest.push(r[1]); });
    return t(shown) + (rest.length ? "<details><summary>" + rest.length + " more " + what +
      (rest.length === 1 ? "" : "s") + " (unchanged by this step)</summary>" + t(rest) +
      "</details>" : "");
  }
  function stateHtml(k, cid, why, last) {
    var a = last ? at(D.D.length - 1) : at(k + 1), b = last ? a : at(k);
    var ids = new Set(b.L.keys()); a.L.forEach(function (_, i) { ids.add(i); });
    if (a.F !== null) ids.add(a.F);
    var rows = Array.from(ids).sort(function (x, y) { return x - y; }).map(function (i) {
      var e = E[i], sb = b.L.has(i) ? WORD[b.L.get(i)] : "";
      var sa = i === a.F ? "failed" : a.L.has(i) ? WORD[a.L.get(i)] : i === cid ? "rewritten"
        : "dropped";
      var s = !sb ? "new \u2192 " + sa : sb !== sa ? sb + " \u2192 " + sa : sa;
      if (i === a.F && why) s += " (" + why + ")";
      var cls = sa === "failed" ? "dl-failed" : i === cid ? "dl-cur" : !sb ? "dl-added" : "";
      return [cls !== "" || sb !== sa, '<tr data-cid="' + i + '"' + (cls ? ' class="' + cls +
        '"' : "") + "><td>#" + i + "</td><td>" + (e[2] === null ? "" : "#" + e[2]) +
        '</td><td class="dl-eq">' + S[e[1]] + "</td><td>" + esc(s) + "</td><td>" + prov(e[3]) +
        "</td></tr>"];
    });
    var np = 0, nr = 0; a.L.forEach(function (v) { if (v === "p") np++; else nr++; });
    var brows = [];
    a.B.forEach(function (vi, v) {
      var ch = !b.B.has(v) ? "new" : b.B.get(v) !== vi ? "updated" : "";
      brows.push([ch !== "", '<tr data-var="' + esc(v) + '"' + (ch ? ' class="dl-added"' : "") +
        '><td class="dl-eq">' + esc(v) + '</td><td class="dl-eq">' + S[vi] + "</td><td>" + ch +
        "</td></tr>"]);
    });
    var where = !last ? "after step " + k : n ? "after step " + (n - 1) : "before any step";
    eqEl.innerHTML = "<h4>equations " + where + " (" + np + " pending, " + nr + " residual" +
      (a.F === null ? "" : ", 1 failed") + ")</h4>" +
      fold(["id", "from", "equation", "status", "provenance"], rows, "equation");
    bindEl.innerHTML = "<h4>bindings " + where + " (" + a.B.size + ")</h4>" +
      fold(["variable", "value", ""], brows, "binding");
  }
  function refilter() {
    var keep = {}, old = visible.length ? visible[+range.value] : null;
    boxes.forEach(function (b) { keep[b.value] = b.checked; });
    visible = [];
    var hidden = 0;
    D.T.forEach(function (t, k) {
      if (!keep[D.R[t[0]][0]]) return;
      if (t[6] && !triv.checked) { hidden++; return; }
      visible.push(k);
    });
    note.textContent = hidden ? hidden + " trivial step" + (hidden === 1 ? "" : "s") +
      " hidden (a == a, 3 == 3)" : "";
    var pos = 0;
    if (old !== null) {
      pos = visible.findIndex(function (s) { return s >= old; });
      if (pos < 0) pos = Math.max(visible.length - 1, 0);
    }
    range.max = Math.max(visible.length - 1, 0);
    range.value = pos;
    range.disabled = !visible.length;
    show();
  }
  function show() {
    if (!visible.length) {
      label.textContent = "0 of " + n + " steps selected";
      var nt = D.T.filter(function (t) { return t[6]; }).length;
      recEl.innerHTML = !n ? "<p>no rule applications</p>" : nt === n && !triv.checked ?
        "<p>every step is trivial (the equation already held): nothing was solved; tick " +
        "\u201cshow trivial steps\u201d to step through them</p>" :
        "<p>no step matches the filter</p>";
      root.setAttribute("data-shown-step", "");
      stateHtml(0, null, "", true);
      return;
    }
    var i = +range.value, k = visible[i], t = D.T[k], r = D.R[t[0]];
    label.textContent = "step " + k + " of " + n + " (" + (i + 1) + " / " + visible.length +
      " shown)";
    root.setAttribute("data-shown-step", k);
    recEl.innerHTML = '<div data-step="' + k + '" data-rule="' + esc(r[0]) + '"><h4>step ' + k +
      ": " + S[r[1]] + ' <span class="muted dl-eq">' + S[r[2]] + "</span></h4><p>constraint " +
      S[t[1]] + (t[2] >= 0 ? " from " + prov(t[2]) : "") + "</p><table><tr><th>before</th><td>" +
      S[t[3]] + "</td></tr><tr><th>after</th><td>" + S[t[4]] + "</td></tr></table>" + S[t[5]] +
      "</div>";
    stateHtml(k, t[7], S[t[8]], false);
  }
  function go(step) {
    var t = D.T[step]; if (!t) return false;
    if (t[6] && !triv.checked) triv.checked = true;
    boxes.forEach(function (b) { if (b.value === D.R[t[0]][0]) b.checked = true; });
    refilter();
    range.value = visible.indexOf(step);
    show();
    return true;
  }
  function move(d) {
    if (!visible.length) return;
    range.value = Math.max(0, Math.min(visible.length - 1, +range.value + d)); show();
  }
  q("dl-st-prev").addEventListener("click", function () { move(-1); });
  q("dl-st-next").addEventListener("click", function () { move(1); });
  range.addEventListener("input", show);
  triv.addEventListener("change", refilter);
  boxes.forEach(function (b) { b.addEventListener("change", refilter); });
  function fromHash() {
    var m = /(?:^#|[&;])step=(\d+)/.exec(location.hash || "");
    return m ? go(+m[1]) : false;
  }
  root.dlcbGo = go;
  window.addEventListener("hashchange", fromHash);
  refilter();
  fromHash();
}
})();
"""


def _trivial_groups(trace: SolverTrace) -> list[tuple[str, str, int, str]]:
    """Trivial steps grouped by their constraint's (op, detail): (op, detail, count, an
    example equation), most frequent first."""
    groups: dict[tuple[str, str], list] = {}
    for rec in trace:
        if not is_trivial(rec):
            continue
        c = _constraint(trace, rec.constraint_id)
        key = (c.provenance.op, c.provenance.detail) if c is not None else (rec.rule, "")
        g = groups.setdefault(key, [0, rec.before])
        g[0] += 1
    return sorted(((op, d, n, ex) for (op, d), (n, ex) in groups.items()),
                  key=lambda g: (-g[2], g[0], g[1]))


def trivial_html(trace: SolverTrace) -> str:
    """The trivial steps (``is_trivial``) as one row per (op, detail) with a count."""
    groups = _trivial_groups(trace)
    if not groups:
        return ""
    rows = [f"<tr><td><code>{esc(op)}</code></td><td>{esc(d)}</td><td>{n}</td>"
            f'<td class="dl-eq">{esc(ex)}</td></tr>' for op, d, n, ex in groups]
    return _rows_table(("op", "operand / axis", "steps", "example"), rows, "group")


def stepper_html(trace: SolverTrace) -> str:
    """A self-contained HTML stepper over ``trace`` (no kernel, no external script): a range
    input with prev/next buttons over the steps that pass the rule filter (trivial steps hidden
    until "show trivial steps" is ticked), the step's record (rule, constraint, provenance,
    before → after highlighted) and the equations and bindings it leaves, as ``state_html``
    shows them. Every state is embedded once as differences (``stepper_data``); the page's
    ``#step=K`` selects step K. Without JavaScript it shows the final state, and says so."""
    uid = f"dl-st-{uuid.uuid4().hex[:12]}"
    data, final = _stepper_parts(trace)
    payload = (json.dumps(data, separators=(",", ":"), ensure_ascii=False)
               .replace("</", "<\\/").replace("<!--", "\\u003c!--"))
    n_triv = sum(t[6] for t in data["T"])
    boxes = "".join(f'<label title="{data["S"][doc]}"><input type="checkbox" class="dl-st-rule" '
                    f'value="{esc(name)}" checked> {esc(name)} ({count})</label>'
                    for name, _, doc, count in data["R"])
    n = len(trace)
    static = ('<div class="dl-st-static"><p class="muted">Static view: the state after the last '
              f"of {plural(n, 'step')}. Stepping needs JavaScript (scripts are off here).</p>"
              f"{state_html(final)}</div>") if final is not None else ""
    live = ('<div class="dl-st-live" style="display:none"><div class="dl-st-bar">'
            '<button type="button" class="dl-st-prev">◀ prev</button>'
            f'<input type="range" class="dl-st-range" min="0" max="{max(n - 1, 0)}" value="0" '
            'aria-label="step">'
            '<button type="button" class="dl-st-next">next ▶</button>'
            '<span class="dl-st-label"></span></div>'
            f'<div class="dl-st-rules">rules: {boxes} <label><input type="checkbox" '
            f'class="dl-st-triv"> show trivial steps ({n_triv})</label> '
            '<span class="dl-st-note"></span></div>'
            '<div class="dl-st-rec"></div><div class="dl-st-eqs"></div>'
            '<div class="dl-st-binds"></div></div>')
    js = STEPPER_JS.replace("%UID%", uid).replace("%FOLD%", str(FOLD))
    return (f'<style>{STEPPER_CSS}</style><div class="dl-stepper" id="{uid}">{static}{live}'
            f'<script type="application/json" class="dl-st-data">{payload}</script>'
            f"<script>{js}</script></div>")


# --- the widget ----------------------------------------------------------------------------------

def stepper(trace: SolverTrace, dag: bool = True, trivial: bool = False):
    """An ipywidgets stepper over ``trace``: a slider with prev/next buttons over the steps
    whose rule is selected in the rule filter (trivial steps, ``is_trivial``, only with
    ``trivial`` or its "trivial" box ticked); for the current step its before → after
    (highlighted), the equations and bindings it leaves (from ``trace.replay()``) and, with
    ``dag``, the constraint DAG it started from with the rewritten expression highlighted.
    Without a live kernel (an nbconvert export, a saved page) its ``text/html`` is the HTML
    stepper (``stepper_html``), which steps without a kernel."""
    return _stepper_class()(trace, dag, trivial)


@functools.cache
def _stepper_class():
    import ipywidgets as w

    class Stepper(w.VBox):
        """The stepper widget (see ``stepper``). ``visible``: the step numbers the slider
        visits, ``current``: the record shown; ``states[k]``: the state before step ``k``
        (``states[-1]`` the final one)."""

        def __init__(self, trace: SolverTrace, dag: bool = True, trivial: bool = False) -> None:
            self.trace = trace
            self.states = list(trace.replay(initial=True))
            present = {t.rule for t in trace}
            names = [n for n, _, _ in RULES if n in present] + sorted(
                present - {n for n, _, _ in RULES})
            self.rules = w.SelectMultiple(options=names, value=tuple(names), description="rules",
                                          rows=max(1, min(len(names), len(RULES))))
            self.slider = w.IntSlider(min=0, max=0, value=0,
                                      description="", continuous_update=False,
                                      readout=False, disabled=not len(trace))
            self.prev = w.Button(description="◀ prev", layout=w.Layout(width="80px"))
            self.next = w.Button(description="next ▶", layout=w.Layout(width="80px"))
            self.show_dag = w.Checkbox(value=dag, description="DAG", indent=False,
                                       layout=w.Layout(width="70px"))
            n_triv = sum(map(is_trivial, trace))
            self.trivial = w.Checkbox(value=trivial, description=f"trivial ({n_triv})",
                                      indent=False, layout=w.Layout(width="110px"))
            self.label = w.HTML()
            self.step_html = w.HTML()
            self.state_html = w.HTML()
            self.dag_html = w.HTML()
            self.visible: list[int] = [t.step for t in trace if trivial or not is_trivial(t)]
            self.slider.max = max(len(self.visible) - 1, 0)
            self.slider.disabled = not self.visible
            self._dags: dict[int, str] = {}
            self._busy = False
            self.prev.on_click(lambda _: self._move(-1))
            self.next.on_click(lambda _: self._move(1))
            self.slider.observe(lambda _: self._show(), names="value")
            self.rules.observe(lambda _: self._filter(), names="value")
            self.show_dag.observe(lambda _: self._show(), names="value")
            self.trivial.observe(lambda _: self._filter(), names="value")
            super().__init__([
                w.HBox([self.prev, self.slider, self.next, self.label, self.show_dag,
                        self.trivial]),
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
            """Show trace step ``step`` (its rule must pass the rule filter; a trivial step
            ticks the "trivial" box)."""
            if is_trivial(self.trace[step]) and not self.trivial.value:
                self.trivial.value = True
            self.slider.value = self.visible.index(step)

        def _move(self, d: int) -> None:
            if self.visible:
                self.slider.value = max(0, min(len(self.visible) - 1, self.slider.value + d))

        def _filter(self) -> None:
            keep = set(self.rules.value)
            cur = self.current
            triv = self.trivial.value
            self.visible = [t.step for t in self.trace if t.rule in keep
                            and (triv or not is_trivial(t))]
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

