"""The solver stepper: trace replay (every state, the last one equal to the solution of real
compiles and of hand-written and random systems), per-rule times, the rewrite highlight (tree
diff), the static renderings (well-formed, self-contained) and the widget driven like a user
(slider, prev/next, rule filter), including a contradiction's failing step.

Variable names are global per process, so examples take fresh ``tv_*`` names from a counter.
"""

from __future__ import annotations

import html as _html
import itertools
import json
import os
import pickle
import re
import shutil
import subprocess

import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import dlcb_lab as dl
from dlcb_lab.dims import (Contradiction, Expr, FloorDiv, Mod, Prod, Provenance, Shape, Solver,
                           Sum, Var, lit, prod, shape, solve, var)
from dlcb_lab.dims.solver import Bind, Fail, Replace, SolverState, SolverTrace, TraceRecord
from dlcb_lab.display import Rich
import dlcb_lab.viz as viz
from dlcb_lab.viz import solve as S
from dlcb_lab.viz.render import render, write_html
from htmlcheck import check_html

from models import Worked

_counter = itertools.count()

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


def fresh(prefix: str, rank: int = 1) -> Var:
    return var(f"tv_{prefix}{next(_counter)}", rank)


# --- helpers ---------------------------------------------------------------------------------------

def text_of(h: str) -> str:
    """Visible text: tags removed, entities decoded, <style> bodies dropped."""
    h = re.sub(r"<style>.*?</style>", "", h, flags=re.S)
    return _html.unescape(re.sub(r"<[^>]+>", "", h))


def marked(h: str) -> list[str]:
    """Texts of the highlights (``<mark>``) in ``h``."""
    return [_html.unescape(re.sub(r"<[^>]+>", "", m))
            for m in re.findall(r'<mark class="dl-hl[^"]*">(.*?)</mark>', h, re.S)]


def graft(e: Expr, repl: dict, path: tuple = ()) -> Expr:
    """``e`` with the subtree at each path of ``repl`` replaced (re-canonicalized)."""
    if path in repl:
        return repl[path]
    if not any(p[:len(path)] == path for p in repl):
        return e
    kids = [graft(k, repl, path + (i,)) for i, k in enumerate(e.children())]
    if isinstance(e, Prod):
        return prod(kids)
    if isinstance(e, Sum):
        return sum((c * k for (_, c), k in zip(e.terms, kids)), lit(e.const))
    if isinstance(e, FloorDiv):
        return kids[0] // kids[1]
    if isinstance(e, Mod):
        return kids[0] % kids[1]
    assert isinstance(e, Shape)
    return shape(kids)


def check_replay(trace: SolverTrace, subst, residuals) -> list[SolverState]:
    """Replay ``trace``: one state per step, each the step's, the next step's constraint at the
    head of the work list, the last equal to (``subst``, ``residuals``)."""
    states = list(trace.replay(initial=True))
    assert len(states) == len(trace) + 1 and states[0].step == -1 and states[0].record is None
    for k, (b, a) in enumerate(zip(states, states[1:])):
        rec = trace[k]
        assert a.step == k and a.record is rec
        assert b.pending and b.pending[0].id == rec.constraint_id
        assert (b.pending[0].lhs, b.pending[0].rhs) == rec.eq
        assert rec.constraint_id not in a.live                  # a step consumes its equation
        if isinstance(rec.outcome, Bind) and a.failed is None:
            assert rec.outcome.v in a.subst and rec.outcome.v not in b.subst
        if isinstance(rec.outcome, Replace):                    # its rewrites are live, new
            new = [c for c in a.live.values() if c.parent == rec.constraint_id]
            assert [(c.lhs, c.rhs) for c in new] == list(rec.outcome.eqs)
            assert not any(c.id in b.live for c in new)
    assert [s.step for s in trace.replay()] == list(range(len(trace)))
    last = states[-1]
    assert dict(last.subst) == dict(subst)
    assert list(last.subst) == list(subst)                       # binding order too
    assert [c.id for c in last.residuals] == [c.id for c in residuals]
    assert [(c.lhs, c.rhs) for c in last.residuals] == [(c.lhs, c.rhs) for c in residuals]
    assert last.pending == ()
    return states


# --- models ----------------------------------------------------------------------------------------

class TwoBranch(nn.Module):
    """A strided conv and a 1x1 conv + max pool, added: their heights ``(H - 3) // 2 + 1`` and
    ``H // 2`` differ for even H, so the broadcast leaves residual (host-checked) constraints."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2)
        self.proj = nn.Conv2d(3, 4, 1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.pool(self.proj(x))


class Clash(nn.Module):
    def forward(self, x, y):
        return x.reshape(x.size(0), 2, -1) + y


@pytest.fixture(scope="module")
def worked():
    g = torch.Generator().manual_seed(0)
    return dl.compile(Worked(), (torch.randn(3, 4, 6, generator=g),
                                 torch.randn(1, 4, 1, generator=g)),
                      dynamic={0: {0: "N"}}, backend="cpu")


@pytest.fixture(scope="module")
def two_branch():
    torch.manual_seed(0)
    return dl.compile(TwoBranch().eval(), (torch.randn(2, 3, 9, 7),),
                      dynamic={0: {0: "N", 2: "H", 3: "W"}}, backend="cpu")


@pytest.fixture(scope="module")
def clash():
    """A real compile's contradiction. torch.export rejects a program whose example breaks a
    broadcast, so the clash is in the spec: one dim N on y's axes 1 and 2, which the broadcast
    with ``x.reshape(N, 2, -1)`` [N, 2, 3] fixes to 2 and to 3."""
    with pytest.raises(Contradiction) as info:
        dl.compile(Clash(), (torch.randn(2, 6), torch.randn(2, 2, 3)),
                   dynamic={0: {0: "N"}, 1: {1: "N", 2: "N"}}, backend="cpu")
    return info.value


def hand_system():
    """Unpack, trivial, solve, substitute, cancel, a host-checked division and a residual."""
    n, h, m, k = fresh("N"), fresh("H"), fresh("M", 0), fresh("K")
    eqs = [(shape([n, h]), shape([n, 4])), (n * h * 5, m * 6), (h // 2, n // 3),
           (shape([k, m // 2 + n]), shape([n, 7]))]
    return eqs, solve(eqs)


# --- replay ----------------------------------------------------------------------------------------

def test_replay_hand_written_system():
    eqs, sol = hand_system()
    assert sol.residuals and sol.subst                 # both kinds of result to reproduce
    states = check_replay(sol.trace, sol.subst, sol.residuals)
    # the state shares tables it did not change: a step that binds nothing keeps the mapping
    for b, a in zip(states, states[1:]):
        if not isinstance(a.record.outcome, Bind):
            assert a.subst is b.subst
    # user constraints no rule rewrites are residual in the state of the step before the next
    assert [c.id for c in sol.trace.constraints] == [c.id for c in sol.constraints]
    assert sol.trace.constraint(sol.derived[0].id) is sol.derived[0]


def test_replay_real_compile_equals_solution(worked):
    p = worked.pipeline
    s = p.graph.solver
    assert p.solver_trace and s.subst                  # the worked example binds M := N
    check_replay(p.solver_trace, s.subst, p.residuals)
    assert [c.id for c in p.solver_trace.constraints] == [c.id for c in p.constraints]


def test_replay_conv_pool_residuals(two_branch):
    p = two_branch.pipeline
    assert len(p.residuals) == 2 and all("//" in repr(c.lhs) for c in p.residuals)
    states = check_replay(p.solver_trace, p.graph.solver.subst, p.residuals)
    # a residual comes up in the step that produced it and stays to the end
    for r in p.residuals:
        first = next(s for s in states if r.id in s.live)
        assert first.record.constraint_id == r.parent
        assert all(r.id in s.live for s in states[states.index(first):])


def test_replay_pickled_trace_and_bad_trace():
    _, sol = hand_system()
    back = pickle.loads(pickle.dumps(sol.trace))
    assert type(back) is SolverTrace and back == sol.trace
    assert [c.id for c in back.constraints] == [c.id for c in sol.constraints]
    check_replay(back, sol.subst, sol.residuals)
    with pytest.raises(ValueError, match="does not replay"):
        list(SolverTrace(sol.trace, constraints=()).replay())
    with pytest.raises(ValueError, match="does not replay"):
        list(SolverTrace(sol.trace[1:], sol.trace.constraints).replay())


@st.composite
def linear_systems(draw):
    """Random linear equations over a few user dims and rank-0 dims (a reshape's ``-1``),
    sides as sums or lists; solvable or not."""
    vs = [fresh("a"), fresh("b"), fresh("c"), fresh("m", 0), fresh("r", 0)]

    def side():
        terms = draw(st.lists(st.tuples(st.sampled_from(vs), st.integers(1, 6)), max_size=3))
        return sum((c * v for v, c in terms), lit(draw(st.integers(0, 12))))

    eqs = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            eqs.append((side(), side()))
        else:
            k = draw(st.integers(1, 3))
            eqs.append((shape([side() for _ in range(k)]), shape([side() for _ in range(k)])))
    return eqs


@SETTINGS
@given(linear_systems())
def test_replay_random_systems(eqs):
    """Replaying the trace of any sequence of adds (contradictions included: the solver raises
    and the next add goes on) reproduces the solver's substitution and residuals."""
    s = Solver()
    failed = []
    for i, (a, b) in enumerate(eqs):
        try:
            s.add(a, b, Provenance("eq", detail=f"equation {i}"))
        except Contradiction as err:
            failed.append(err)
            assert isinstance(err.trace[-1].outcome, (Fail, Bind))   # a Bind: a divisor := 0
            assert err.trace[:-1] == s.solution().trace[:len(err.trace) - 1]
    sol = s.solution()
    states = check_replay(sol.trace, s.subst, s.residuals)
    assert sum(st_.failed is not None for st_ in states) == len(failed)


def test_rule_frame_counts_and_times(two_branch, worked):
    for trace in (two_branch.pipeline.solver_trace, worked.pipeline.solver_trace,
                  hand_system()[1].trace):
        df = trace.rule_frame()
        assert dict(df["count"]) == trace.rule_counts()
        for rule, row in df.iterrows():
            ns = [t.dt_ns for t in trace if t.rule == rule]
            assert row["total_us"] == pytest.approx(sum(ns) / 1e3)
            assert row["mean_us"] == pytest.approx(sum(ns) / len(ns) / 1e3)
        assert df["share"].sum() == pytest.approx(1.0)
        assert all(t.dt_ns > 0 for t in trace)
        fr = trace.to_frame()
        assert list(fr.columns) == ["step", "rule", "constraint_id", "parent_id", "before",
                                    "after", "t_us", "dt_us"]
        # one unit: the frame's step times add up to the rule table's totals, both in µs
        assert fr.groupby("rule")["dt_us"].sum().to_dict() == pytest.approx(
            df["total_us"].to_dict())
        assert fr["t_us"].is_monotonic_increasing and fr["t_us"].iloc[0] == pytest.approx(
            fr["dt_us"].iloc[0])
        # the rendered per-rule table shows the same µs figures
        h = S.rules_html(trace)
        for rule, row in df.iterrows():
            assert re.search(rf"{rule}</code></td><td[^>]*>[^<]*</td><td>{int(row['count'])}</td>"
                             rf"<td>{row['total_us']:.1f}</td>", h)


# --- highlight -------------------------------------------------------------------------------------

def test_highlight_marks_exactly_the_substituted_variable():
    """``[N, M // 2 + 3] == [N, 5]`` after ``M := K + 1``: only ``M`` (path lhs, item 1, the
    floor division's numerator... ) is rewritten; the after side marks its replacement."""
    n, k, m = fresh("N"), fresh("K"), fresh("M", 0)
    s = Solver()
    s.add(m, k + 1, Provenance("reshape"))
    s.add(shape([n, m // 2 + 3]), shape([n, 5]), Provenance("add", node="y"))
    rec = next(t for t in s.solution().trace if t.rule == "substitute")
    assert rec.eq == (shape([n, m // 2 + 3]), shape([n, 5]))
    before, after = S.rewritten(rec.eq, rec.outcome)
    assert before == [(0, 1, 0, 0)]
    assert S.subtree(rec.eq, before[0]) is m
    assert S.highlight_nodes(rec) == [m]
    (x, _), = rec.outcome.eqs
    assert [S.subtree(x, p[1:]) for p in after[0]] == [k + 1]
    bh, ah = S.before_html(rec), S.after_html(rec)
    assert marked(bh) == [m.name] and text_of(bh) == rec.before
    assert marked(ah) == [f"({k!r} + 1)"] and text_of(ah) == rec.after


def test_highlight_binding_and_whole_rewrites():
    a, r = fresh("a"), fresh("r", 0)
    sol = solve([(a * 6, r * 3)])
    rec = sol.trace[-1]
    assert rec.rule == "solve" and isinstance(rec.outcome, Bind) and rec.outcome.v is r
    assert r in S.highlight_nodes(rec)
    assert text_of(S.before_html(rec)) == rec.before and text_of(S.after_html(rec)) == rec.after
    with pytest.raises(Contradiction) as info:
        solve([(shape([a]), shape([a, 1]))])
    rec, = info.value.trace
    assert isinstance(rec.outcome, Fail)
    assert S.rewritten(rec.eq, rec.outcome) == ([(0,), (1,)], [])
    assert marked(S.before_html(rec)) == [repr(rec.eq[0]), repr(rec.eq[1])]


ATOMS = None


def _atoms():
    global ATOMS
    if ATOMS is None:
        ATOMS = [fresh("p"), fresh("q"), fresh("s"), fresh("t", 0)]
    return ATOMS


def exprs(depth: int = 3):
    leaf = st.one_of(st.integers(0, 5).map(lit), st.integers(0, 3).map(lambda i: _atoms()[i]))
    return st.recursive(leaf, lambda ch: st.one_of(
        st.tuples(ch, ch).map(lambda t: t[0] + t[1]),
        st.tuples(ch, ch).map(lambda t: t[0] - t[1]),
        st.tuples(ch, ch).map(lambda t: t[0] * t[1]),
        st.tuples(ch, st.integers(2, 4)).map(lambda t: t[0] // t[1]),
        st.tuples(ch, st.integers(2, 4)).map(lambda t: t[0] % t[1]),
        st.tuples(ch, st.integers(0, 3)).map(lambda t: t[0] // (_atoms()[t[1]] + 1)),
    ), max_leaves=8)


@SETTINGS
@given(exprs(), st.integers(0, 3), exprs())
def test_diff_is_minimal_and_complete(a, i, e):
    """``b = a`` with a variable substituted: grafting ``b``'s subtrees at the differing paths of
    ``a`` rebuilds ``b`` exactly, and no pair is the same node (the highlight is exact)."""
    v = _atoms()[i]
    try:
        b = a.subs({v: e})
    except ZeroDivisionError:          # e.g. 1 // (v + 1) with v := -1: no such b
        assume(False)
    pairs = S.diff(a, b)
    assert (pairs == []) == (a is b)
    assert graft(a, {pa: S.subtree(b, pb) for pa, pb in pairs}) is b
    for pa, pb in pairs:
        assert S.subtree(a, pa) is not S.subtree(b, pb)


@SETTINGS
@given(exprs(), st.data())
def test_marked_printing_keeps_the_text(e, data):
    """The HTML of an expression reads as its ``repr`` with any set of subtrees marked; each
    mark holds exactly its subtree's text."""
    paths, stack = [], [((), e)]
    while stack:
        p, x = stack.pop()
        paths.append(p)
        stack += [(p + (k,), c) for k, c in enumerate(x.children())]
    marks = S._prune(data.draw(st.lists(st.sampled_from(paths), max_size=3)))
    h = S.expr_html(e, marks)
    assert text_of(h) == repr(e)
    got = marked(h)
    assert len(got) == len(marks)
    for txt, p in zip(got, marks):
        assert txt in {S.subtree(e, p).pretty(k) for k in range(4)}


# --- static renderings -----------------------------------------------------------------------------

def test_static_trace_html(two_branch, worked, tmp_path):
    for cm in (worked, two_branch):
        trace = cm.pipeline.solver_trace
        assert isinstance(trace, Rich) and isinstance(trace[0], Rich)
        b = trace._repr_mimebundle_()
        check_html(b["text/html"])
        assert b["text/plain"] == repr(trace)
        assert 'class="dl-stepper"' in b["text/html"]          # displays as the HTML stepper
        h = S.trace_html(trace, trivial=True)
        check_html(h)
        steps = re.findall(r'<tr data-step="(\d+)"', h)
        assert steps == [str(t.step) for t in trace]            # every step, in order
        txt = text_of(h)
        for t in trace:
            assert t.before in txt and t.after in txt and t.rule in txt
        for rule, n in trace.rule_counts().items():
            assert re.search(rf"{rule}</code></td><td[^>]*>[^<]*</td><td>{n}</td>", h)
        page = trace.to_html(tmp_path / "trace.html").read_text()
        check_html(page)
        check_html(page)
    # provenance of a derived step (an axis of the broadcast) and its user-added origin
    trace = two_branch.pipeline.solver_trace
    rec = next(t for t in trace if t.rule == "collect")
    c = trace.constraint(rec.constraint_id)
    row = re.search(rf'<tr data-step="{rec.step}">.*?</tr>', S.trace_html(trace)).group(0)
    assert _html.escape(str(c.provenance)) in row and "broadcast" in row


def test_static_trace_hides_and_groups_trivial_steps(two_branch):
    tr = two_branch.pipeline.solver_trace
    triv = [t for t in tr if S.is_trivial(t)]
    assert triv and len(triv) < len(tr)
    h = S.trace_html(tr)
    check_html(h)
    assert re.findall(r'<tr data-step="(\d+)"', h) == [str(t.step) for t in tr
                                                        if not S.is_trivial(t)]
    assert f"{len(triv)} trivial steps hidden" in text_of(h)
    groups = S._trivial_groups(tr)
    assert sum(n for _, _, n, _ in groups) == len(triv)
    for op, detail, n, ex in groups:
        mine = [t for t in triv if (tr.constraint(t.constraint_id).provenance.op,
                                    tr.constraint(t.constraint_id).provenance.detail)
                == (op, detail)]
        assert n == len(mine) and ex == mine[0].before
        assert re.search(rf"<td><code>{re.escape(_html.escape(op))}</code></td><td>"
                         rf"{re.escape(_html.escape(detail))}</td><td>{n}</td>", h)
    # the trace's own display: the counts, the groups and the stepper, no static step list
    d = render(tr).html
    assert f"({len(triv)} trivial: the equation already holds)" in text_of(d)
    assert 'class="dl-stepper"' in d and not re.search(r'<tr data-step="', d)


def test_static_rendering_folds_long_traces():
    vs = [fresh("f") for _ in range(S.FOLD + 20)]
    sol = solve([(v, lit(k + 1)) for k, v in enumerate(vs)])
    h = S.trace_html(sol.trace)
    check_html(h)
    assert len(re.findall(r"<tr data-step=", h)) == len(sol.trace)
    assert f"{len(sol.trace) - S.FOLD} more steps hidden" in text_of(h)


def test_record_and_state_renderings():
    eqs, sol = hand_system()
    rec = next(t for t in sol.trace if t.rule == "substitute")
    r = render(rec)
    check_html(r.html)
    check_html(r.html)
    assert f'data-step="{rec.step}"' in r.html and rec.rule in text_of(r.html)
    assert r.svg is not None and "<svg" in r.svg and "<svg" in r.html   # the equation's DAG
    assert rec.before in text_of(r.html) and rec.after in text_of(r.html)
    st_ = list(sol.trace.replay())[-1]
    h = render(st_).html
    check_html(h)
    assert set(re.findall(r'data-cid="(\d+)"', h)) == {str(c.id) for c in sol.residuals}
    assert re.findall(r'data-var="([^"]+)"', h) == [v.name for v in sol.subst]


def test_contradiction_trace_shows_the_failing_step(clash):
    trace = clash.trace
    last = trace[-1]
    assert isinstance(last.outcome, Fail) and last.rule == "literal"
    c = trace.constraint(last.constraint_id)
    assert "broadcast" in c.provenance.detail and c.provenance.where
    h = S.trace_html(trace)
    check_html(h)
    row = re.search(rf'<tr data-step="{last.step}" class="dl-failed">.*?</tr>', h, re.S).group(0)
    assert _html.escape(str(c.provenance)) in row and last.outcome.why in text_of(row)
    assert "1 contradiction" in text_of(h)
    states = list(trace.replay())
    assert states[-1].failed is not None and states[-1].failed.id == last.constraint_id
    w = viz.stepper(trace)
    w.slider.value = len(trace) - 1
    assert w.current is last
    assert "contradiction: " + last.outcome.why in text_of(w.step_html.value)
    assert str(c.provenance) in text_of(w.step_html.value)
    assert re.search(rf'<tr data-cid="{c.id}" class="dl-failed">', w.state_html.value)


def contradictions():
    """``a == 3``, then ``[a] == [4]`` (fails two rewrites below the user constraint), then
    ``[3, b] == [4, b + 1]`` (fails on axis 0 with axis 1 still pending)."""
    a, b = fresh("a", 0), fresh("b")
    s = Solver()
    s.add(a, lit(3), Provenance("eq", detail="first"))
    for lhs, rhs, node in ((shape([a]), shape([4]), "y"), (shape([3, b]), shape([4, b + 1]), "z")):
        with pytest.raises(Contradiction):
            s.add(lhs, rhs, Provenance("add", node=node, detail="broadcast", where="m.py:7"))
    return s.solution().trace


def test_failed_state_shows_the_failed_constraint(clash):
    """A replayed failed state lists the constraint it failed on (marked failed, with the reason
    and provenance) in the HTML, not only in its text; with the state before, a contradiction's
    dropped work is marked dropped."""
    trace = contradictions()
    states = list(trace.replay(initial=True))
    fails = [(b, a) for b, a in zip(states, states[1:]) if a.failed is not None]
    assert len(fails) == 2
    for before, after in fails:
        c, why = after.failed, after.record.outcome.why
        for h, status in ((render(after).html, "failed"), (S.state_html(after, before),
                                                            "pending → failed")):
            check_html(h)
            row = re.search(rf'<tr data-cid="{c.id}" class="dl-failed">.*?</tr>', h, re.S)
            assert row, h
            txt = text_of(row.group(0))
            assert f"{c.lhs!r} == {c.rhs!r}" in txt and f"{status} ({why})" in txt
            assert str(c.provenance) in txt and "m.py:7" in txt
            assert "1 failed)" in text_of(h)
    _, after = fails[1]
    dropped = next(c for c in fails[1][0].live.values() if c.id != after.failed.id)
    row = re.search(rf'<tr data-cid="{dropped.id}">.*?</tr>', S.state_html(after, fails[1][0]))
    assert "pending → dropped" in text_of(row.group(0))
    # a real compile's contradiction: its failed state alone
    last = list(clash.trace.replay())[-1]
    h = render(last).html
    row = re.search(rf'<tr data-cid="{last.failed.id}" class="dl-failed">.*?</tr>', h, re.S)
    assert row and _html.escape(str(last.failed.provenance)) in row.group(0)


def test_lineage_names_the_root_only_when_not_the_parent():
    trace = contradictions()
    h = S.trace_html(trace, trivial=True)
    cells = {int(k): text_of(c) for k, c in re.findall(
        r'<tr data-step="(\d+)"[^>]*><td>\d+</td><td>.*?</td><td>(.*?)</td>', h, re.S)}
    assert len(cells) == len(trace)
    for rec in trace:
        root = rec.constraint_id
        while trace.constraint(root).parent is not None:
            root = trace.constraint(root).parent
        want = f"#{rec.constraint_id}"
        if rec.parent_id is not None:
            want += f" ← #{rec.parent_id}" + (f" ⇐ #{root}" if root != rec.parent_id else "")
        assert cells[rec.step] == want
    assert any("⇐" in c for c in cells.values())            # [a] == [4] -> 3 == 4 -> false
    assert "6 rule applications" in text_of(h) and "2 contradictions" in text_of(h)


def test_counts_are_pluralized():
    sol = solve([(fresh("one", 0), lit(2))])
    assert len(sol.trace) == 1 and "1 rule application over" in text_of(render(sol.trace).html)
    rows = ["<tr><td>x</td></tr>"] * (S.FOLD + 1)
    assert "1 more step hidden" in text_of(S._rows_table(("x",), rows, "step"))


# --- the widget ------------------------------------------------------------------------------------

def shown_step(w) -> int:
    steps = re.findall(r'<div data-step="(\d+)"', w.step_html.value)
    assert len(steps) == 1
    return int(steps[0])


def check_shown(w, rec: TraceRecord) -> None:
    """The widget shows ``rec``: its step, rule, before/after with the highlight, the state the
    step leaves (from replay) and the DAG of the state it started from."""
    assert w.current is rec and shown_step(w) == rec.step
    txt = text_of(w.step_html.value)
    assert rec.rule in txt and rec.before in txt and rec.after in txt
    assert marked(w.step_html.value) == marked(S.before_html(rec)) + marked(S.after_html(rec))
    assert marked(S.before_html(rec))                            # every step marks something
    after = w.states[rec.step + 1]
    cids = {int(x) for x in re.findall(r'data-cid="(\d+)"', w.state_html.value)}
    assert cids == set(after.live) | set(w.states[rec.step].live)
    assert re.findall(r'data-var="([^"]+)"', w.state_html.value) == [v.name for v in after.subst]
    assert f"after step {rec.step}" in text_of(w.state_html.value)


def test_stepper_visits_every_step(two_branch, worked):
    for cm in (worked, two_branch):
        trace = cm.pipeline.solver_trace
        w = S.stepper(trace, dag=False, trivial=True)
        assert w.visible == list(range(len(trace)))
        seen = []
        for _ in range(len(trace) + 2):            # next past the end stays on the last step
            check_shown(w, w.current)
            seen.append(w.current.step)
            w.next.click()
        assert seen[:len(trace)] == list(range(len(trace))) and seen[len(trace):] == [
            len(trace) - 1] * 2
        back = []
        for _ in range(len(trace)):
            back.append(w.current.step)
            w.prev.click()
        assert back == list(range(len(trace)))[::-1] and w.current is trace[0]
        for k in reversed(range(len(trace))):       # the slider directly
            w.slider.value = k
            check_shown(w, trace[k])
        # at the last step the bindings shown are the compile's solution
        w.slider.value = len(trace) - 1
        shown = dict(re.findall(r'<tr data-var="([^"]+)"[^>]*><td class="dl-eq">[^<]*</td>'
                                r'<td class="dl-eq">([^<]*)</td>', w.state_html.value))
        assert shown == {v.name: _html.escape(repr(e)) for v, e in
                         cm.pipeline.graph.solver.subst.items()}


def test_stepper_rule_filter(two_branch):
    trace = two_branch.pipeline.solver_trace
    _, sol = hand_system()
    for tr in (trace, sol.trace):
        w = S.stepper(tr, trivial=True)
        w.show_dag.value = False
        counts = tr.rule_counts()
        assert set(w.rules.options) == set(counts)
        for rule, n in counts.items():
            w.rules.value = (rule,)
            w.slider.value = 0
            visited = []
            for _ in range(n + 1):
                visited.append(w.current.step)
                assert w.current.rule == rule
                check_shown(w, w.current)
                w.next.click()
            assert visited[:n] == [t.step for t in tr if t.rule == rule]
            assert visited[n] == visited[n - 1]     # the last one of that rule
        two = tuple(sorted(counts)[:2])
        w.rules.value = two
        assert w.visible == [t.step for t in tr if t.rule in two]
        w.rules.value = ()
        assert w.current is None and "no step matches" in w.step_html.value
        w.rules.value = tuple(counts)
        assert w.visible == list(range(len(tr)))


def test_stepper_hides_trivial_steps_by_default(two_branch):
    tr = two_branch.pipeline.solver_trace
    triv = [t.step for t in tr if S.is_trivial(t)]
    assert triv and all(isinstance(tr[k].outcome, S.Drop) for k in triv)
    w = viz.stepper(tr)
    assert w.visible == [t.step for t in tr if t.step not in triv]
    assert w.trivial.description == f"trivial ({len(triv)})"
    w.go(triv[0])                                   # going to a trivial step shows them
    assert w.trivial.value and w.current is tr[triv[0]]
    w.trivial.value = False
    assert w.visible == [t.step for t in tr if t.step not in triv]
    assert w.current.step > triv[0]


def test_stepper_filter_keeps_position():
    _, sol = hand_system()
    tr = sol.trace
    w = S.stepper(tr, dag=False)
    k = next(t.step for t in tr if t.rule == "cancel_common_factor")
    w.go(k)
    w.rules.value = ("substitute", "cancel_common_factor")
    assert w.current is tr[k]                       # still visible: stays
    w.rules.value = ("substitute",)
    assert w.current.step == next(t.step for t in tr if t.rule == "substitute" and t.step > k)


def dag_nodes_shown(svg: str) -> tuple[dict[str, str], set[str]]:
    """The DAG's nodes (node id -> expression, the first line of its hover text) and the
    expressions drawn emphasized (bold outline)."""
    nodes, bold = {}, set()
    for nid, title, body in re.findall(r'<g id="(x\d+)" class="node">\s*<title>(.*?)</title>(.*?)'
                                       r"</g>", svg, re.S):
        e = _html.unescape(title).split("\n")[0]
        nodes[nid] = e
        if 'stroke-width="3"' in body:
            bold.add(e)
    return nodes, bold


def test_stepper_dag(worked):
    """At every step the DAG is the one of the equations the step started from (one dashed
    ``#id`` edge per live constraint, every node of their sides) with exactly the rewritten
    subexpressions emphasized."""
    _, sol = hand_system()
    for trace in (worked.pipeline.solver_trace, sol.trace):
        w = S.stepper(trace, trivial=True)
        for k, rec in enumerate(trace):
            w.slider.value = k
            svg = w.dag_html.value
            assert "<svg" in svg and "</svg>" in svg, text_of(svg)
            check_html(svg)
            nodes, bold = dag_nodes_shown(svg)
            assert bold == {repr(n) for n in S.highlight_nodes(rec)}
            live = w.states[rec.step].live
            assert set(re.findall(r'<g id="k(\d+)" class="edge">', svg)) == {str(i) for i in live}
            assert {repr(c.lhs) for c in live.values()} <= set(nodes.values())
        w.show_dag.value = False
        assert w.dag_html.value == ""
        w.show_dag.value = True
        assert "<svg" in w.dag_html.value


def test_stepper_mimebundle_has_static_fallback(worked):
    trace = worked.pipeline.solver_trace
    w = viz.stepper(trace)
    b = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in b
    uid = lambda h: re.sub(r"dl-st-[0-9a-f]{12}", "ID", h)
    assert uid(b["text/html"]) == uid(render(trace).html)       # the HTML stepper
    assert 'class="dl-stepper"' in b["text/html"] and "<script>" in b["text/html"]
    check_html(b["text/html"])
    check_html(b["text/html"])


def test_empty_trace():
    sol = solve([])
    assert len(sol.trace) == 0 and list(sol.trace.replay()) == []
    init, = sol.trace.replay(initial=True)
    assert init.step == -1 and not init.live and not init.subst
    check_html(render(sol.trace).html)
    w = S.stepper(sol.trace, dag=False)
    assert w.current is None and "no rule applications" in w.step_html.value


# --- the HTML stepper (no kernel) in headless Chromium ---------------------------------------------

def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)


def _dump_dom(url: str, *flags: str) -> str:
    args = [_chromium(), "--headless", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", *flags]
    if os.geteuid() == 0:
        args.append("--no-sandbox")
    r = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert r.stdout, r.stderr[-2000:]
    return r.stdout


chromium = pytest.mark.skipif(_chromium() is None,
                              reason="chromium not installed (make chromium, as root)")

DRIVE = """<script>(function () {
  var root = document.querySelector(".dl-stepper"), out = [];
  var n = JSON.parse(root.querySelector("script.dl-st-data").textContent).n;
  function cells(sel, key) {
    var m = [];
    root.querySelectorAll(sel).forEach(function (tr) { m.push([tr.getAttribute(key),
                                                               tr.textContent]); });
    return m;
  }
  for (var k = 0; k < n; k++) {
    root.dlcbGo(k);
    var rec = root.querySelector(".dl-st-rec div[data-step]");
    out.push({shown: root.getAttribute("data-shown-step"), step: rec.getAttribute("data-step"),
              rule: rec.getAttribute("data-rule"), rec: rec.textContent,
              rows: cells(".dl-st-eqs tr[data-cid]", "data-cid"),
              binds: cells(".dl-st-binds tr[data-var]", "data-var"),
              heads: Array.from(root.querySelectorAll(".dl-st-eqs h4, .dl-st-binds h4"))
                .map(function (h) { return h.textContent; })});
  }
  var pre = document.createElement("pre");
  pre.id = "dl-test-out"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();</script></body>"""


def _rows(h: str, key: str) -> list[list[str]]:
    return [[_html.unescape(k), text_of(r)] for k, r in
            re.findall(rf'<tr {key}="([^"]+)"[^>]*>(.*?)</tr>', h, re.S)]


def _heads(h: str) -> list[str]:
    return [text_of(x) for x in re.findall(r"<h4>(.*?)</h4>", h, re.S)]


@chromium
def test_html_stepper_every_step_equals_replay(two_branch, clash, tmp_path):
    """Driven step by step in Chromium, the HTML stepper shows each step's record and exactly
    the equations (id, status, provenance) and bindings of ``trace.replay()`` around it, as the
    Python ``record_html``/``state_html`` render them; contradictions included."""
    _, sol = hand_system()
    for i, trace in enumerate((sol.trace, two_branch.pipeline.solver_trace, contradictions(),
                               clash.trace)):
        page = tmp_path / f"t{i}.html"
        write_html(trace, page)
        page.write_text(page.read_text(encoding="utf-8").replace("</body>", DRIVE),
                        encoding="utf-8")
        dom = _dump_dom(page.as_uri())
        got = json.loads(_html.unescape(re.search(r'<pre id="dl-test-out">(.*?)</pre>', dom,
                                                  re.S).group(1)))
        states = list(trace.replay(initial=True))
        assert len(got) == len(trace)
        for rec, g in zip(trace, got):
            before, after = states[rec.step], states[rec.step + 1]
            assert g["shown"] == g["step"] == str(rec.step) and g["rule"] == rec.rule
            assert g["rec"] == text_of(S.record_html(rec, trace))
            want = S.state_html(after, before)
            assert g["rows"] == _rows(want, "data-cid")
            assert {int(c) for c, _ in g["rows"]} == set(before.live) | set(after.live) | (
                {after.failed.id} if after.failed is not None else set())
            assert [v for v, _ in g["binds"]] == [v.name for v in after.subst]
            assert g["binds"] == _rows(want, "data-var")
            assert g["heads"] == _heads(want)
        fails = [r["step"] for r in got if any("→ failed (" in t for _, t in r["rows"])]
        assert fails == [str(t.step) for t in trace if isinstance(t.outcome, Fail)]
        assert bool(fails) == (i >= 2)


@chromium
def test_html_stepper_hash_filter_and_fallback(tmp_path):
    """``#step=K`` selects step K (a trivial one ticks "show trivial steps"); trivial steps are
    hidden by default with a visible count; prev/next and the rule filter move over the visible
    steps; with scripts off the page shows the final state and says so."""
    _, sol = hand_system()
    trace = sol.trace
    triv = [t.step for t in trace if S.is_trivial(t)]
    plain = [t.step for t in trace if not S.is_trivial(t)]
    assert triv and plain
    page = write_html(trace, tmp_path / "trace.html")

    def shown(dom: str) -> tuple[int, str]:
        k = int(re.search(r'class="dl-stepper"[^>]*data-shown-step="(\d+)"', dom).group(1))
        rule = re.search(r'<div data-step="(\d+)" data-rule="([^"]+)"', dom)
        assert int(rule.group(1)) == k
        return k, rule.group(2)

    dom = _dump_dom(page.as_uri())
    assert shown(dom) == (plain[0], trace[plain[0]].rule)           # first non-trivial step
    assert f"{len(triv)} trivial step{'s' if len(triv) > 1 else ''} hidden" in text_of(dom)
    assert "Static view" not in text_of(dom)
    for k in (triv[0], plain[-1], len(trace) - 1):
        dom = _dump_dom(page.as_uri() + f"#step={k}")
        assert shown(dom) == (k, trace[k].rule)
        assert f"step {k}: {trace[k].rule}" in text_of(dom)
    # next/prev and the rule filter, clicked by an injected script
    rule = trace[plain[0]].rule
    others = [k for k in plain if trace[k].rule != rule]
    drive = ("<script>(function () { var r = document.querySelector('.dl-stepper');"
             "var nx = r.querySelector('.dl-st-next'), pv = r.querySelector('.dl-st-prev');"
             "nx.click(); nx.click(); pv.click();"
             "document.body.setAttribute('data-after-clicks', r.getAttribute('data-shown-step'));"
             f"var b = r.querySelector('input.dl-st-rule[value=\"{rule}\"]'); b.checked = false;"
             "b.dispatchEvent(new Event('change'));"
             "var rng = r.querySelector('.dl-st-range');"
             "document.body.setAttribute('data-range-max', rng.max);"
             "rng.value = 0; rng.dispatchEvent(new Event('input'));"
             "})();</script></body>")
    p2 = tmp_path / "drive.html"
    p2.write_text(page.read_text(encoding="utf-8").replace("</body>", drive), encoding="utf-8")
    dom = _dump_dom(p2.as_uri())
    assert re.search(r'data-after-clicks="(\d+)"', dom).group(1) == str(plain[1])
    assert re.search(r'data-range-max="(\d+)"', dom).group(1) == str(len(others) - 1)
    assert shown(dom)[0] == others[0]
    # scripts off (the page as served: the script removes the static view, shows the live one)
    dom = page.read_text(encoding="utf-8")
    assert '<div class="dl-st-live" style="display:none">' in dom
    dom = re.sub(r'<div class="dl-st-live".*', "", dom, flags=re.S)
    txt = text_of(dom)
    assert f"Static view: the state after the last of {len(trace)} steps" in txt
    final = list(trace.replay())[-1]
    assert re.findall(r'<tr data-var="([^"]+)"', dom) == [v.name for v in final.subst]
    assert {int(c) for c in re.findall(r'<tr data-cid="(\d+)"', dom)} == set(final.live)


def test_html_stepper_is_compact_and_self_contained():
    """Every state is embedded once, as differences: the payload grows with the steps, not
    with steps x equations; no external script; the HTML is balanced."""
    vs = [fresh("c") for _ in range(400)]
    eqs = [(v, lit(k % 7 + 1)) for k, v in enumerate(vs)] + [(lit(3), lit(3))] * 50
    sol = solve(eqs)
    h = S.stepper_html(sol.trace)
    check_html(h)
    data = S.stepper_data(sol.trace)
    assert len(data["D"]) == len(sol.trace) + 1 and len(data["T"]) == len(sol.trace)
    assert sum(len(d[0]) + len(d[2]) for d in data["D"]) <= 4 * len(sol.trace)
    assert len(h) < 400 * len(sol.trace)
    assert sum(t[6] for t in data["T"]) == 50          # the 3 == 3 steps are trivial
    assert "<script src" not in h and 'id="dl-st-' in h


@chromium
def test_nbconvert_export_of_the_widget_keeps_a_working_stepper(worked, tmp_path):
    """A notebook output of the live widget, exported by nbconvert without widget state (as
    ``--ExecutePreprocessor.store_widget_state=False`` leaves it): the export carries the HTML
    stepper, and stepping works in it offline."""
    nbformat = pytest.importorskip("nbformat")
    nbconvert = pytest.importorskip("nbconvert")
    trace = worked.pipeline.solver_trace
    bundle = S.stepper(trace)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("viz.stepper(trace)")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    nb.cells = [cell]
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    page = tmp_path / "nb.html"
    page.write_text(body, encoding="utf-8")
    assert body.count('class="dl-stepper"') == 1
    last = len(trace) - 1
    dom = _dump_dom(page.as_uri() + f"#step={last}")
    assert re.search(rf'class="dl-stepper"[^>]*data-shown-step="{last}"', dom)
    assert f"step {last}: {trace[last].rule}" in text_of(dom)
