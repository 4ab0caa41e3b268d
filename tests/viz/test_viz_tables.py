"""Tabular renderings: tables fold past ``ROWS`` rows behind a visible "N more rows"; long dims carry
the graph drawing's aliases (``H₁``) in the host program, launch plan, dims and launches; launch
steps, partition rows and the summary link to the kernels' sections; the solve overview leads
with derived dims (and what produced them), residual checks, literal pins, and groups trivial
``a == a`` constraints by op."""

from __future__ import annotations

import html as _html
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dlcb_lab as dl
from dlcb_lab.dims import Lit
from dlcb_lab.viz import tables as T
from dlcb_lab.viz.render import render
from dlcb_lab.viz.style import kernel_id
from htmlcheck import check_html

from models import Pools, Worked


class Reshape(nn.Module):
    def forward(self, x):
        return torch.relu(x).reshape(-1, 24)


@pytest.fixture(scope="module")
def pools():
    torch.manual_seed(0)
    return dl.compile(Pools().eval(), (torch.randn(2, 3, 64, 64),),
                      dynamic={0: {0: "N", 2: "H", 3: "W"}}, backend="cpu")


@pytest.fixture(scope="module")
def worked():
    return dl.compile(Worked(), (torch.randn(3, 4, 6), torch.randn(1, 4, 1)),
                      dynamic={0: {0: "N"}}, backend="cpu")


def text_of(h: str) -> str:
    h = re.sub(r"<(style|script)\b.*?</\1>", "", h, flags=re.S)
    return _html.unescape(re.sub(r"<[^>]+>", "", h))


def first_table_rows(h: str) -> int:
    return len(re.findall(r"<tr>", h.split("</table>")[0])) - 1     # minus the head row


# -- folding -----------------------------------------------------------------------------------------

def test_tables_fold_past_rows_with_a_visible_marker(pools):
    p = pools.pipeline.host_program
    n = len(p.instrs)
    assert n > T.ROWS == 50
    h = render(p).html
    check_html(h)
    assert first_table_rows(h) == T.ROWS
    assert f"{n - T.ROWS} more rows" in text_of(h)
    # every instruction is still there, behind the marker
    assert len(re.findall(r"<tr><td>\d+</td><td><code>", h)) == n
    small = render(dl.compile(Reshape(), (torch.randn(3, 4, 6),), dynamic=False, backend="cpu")
                   .pipeline.host_program).html
    assert "more rows" not in text_of(small)


# -- aliases -----------------------------------------------------------------------------------------

def test_aliases_match_the_graph_drawing(pools):
    pytest.importorskip("graphviz")
    from dlcb_lab.viz.diagrams import _graph, dim_text

    g = pools.pipeline.graph
    names = T.dim_aliases(g)
    _, legend = _graph(g, None)
    assert legend, "the drawing aliases no dim: the model is too shallow for this test"
    drawn = dict(line.split(" = ", 1) for line in legend)
    mine = {a: dim_text(e) for e, a in names.items()}
    assert {a: mine[a] for a in drawn} == drawn           # same alias, same dim, as drawn
    assert all(len(dim_text(e)) > 22 for e in names)       # only long dims are aliased


def test_aliases_in_host_program_plan_and_dims(pools):
    pytest.importorskip("graphviz")
    p = pools.pipeline
    g = p.graph
    with T.graph_aliases(g) as names:
        assert names
        by_text = {repr(e): a for e, a in names.items()}
        host = render(p.host_program).html
        plan = render(p.launch_plan).html
        dims = render(p.dims).html
    for h, texts in ((host, p.host_program.regs), (plan, p.launch_plan.regs),
                     (dims, [repr(r.expr) for r in p.dims.rows])):
        check_html(h)
        used = {t for t in texts if t in by_text}
        assert used
        for t in used:             # the alias is shown, the expression is its hover text
            a = by_text[t]
            assert re.search(rf'title="[^"]*{re.escape(_html.escape(t))}">{re.escape(a)}<', h), a
            assert f"{a} = {t}" in text_of(h)                  # and the legend spells it out
    # outside the context: full expressions, no legend
    h = render(p.host_program).html
    assert not any(a in text_of(h) for a in names.values())
    # the pipeline and module renderings use them on their own
    assert any(a in text_of(render(p).html) for a in names.values())
    assert any(a in text_of(render(pools).html) for a in names.values())


# -- links -------------------------------------------------------------------------------------------

def test_plan_partition_summary_and_launches_link_to_kernels(pools):
    p = pools.pipeline
    names = [k.name for k in p.kernels]
    assert names
    hrefs = lambda h: re.findall(r'<a href="#([^"]+)">', h)
    want = [kernel_id(n) for n in names]
    assert hrefs(render(p.launch_plan).html) == want
    assert hrefs(render(p.partition).html) == want
    assert hrefs(T._pipeline_html(p)) == want
    t = pools.trace(torch.randn(1, 3, 40, 48))
    assert [x for x in hrefs(render(t).html) if x.startswith("dlcb-kernel-")] == want


# -- the solve ---------------------------------------------------------------------------------------

def _section(h: str, title: str) -> str:
    m = re.search(rf"<h4>{title}.*?</h4>(.*?)(?=<h4>|$)", h, re.S)
    assert m, title
    return m.group(1)


def test_solve_overview_leads_with_derived_dims(pools):
    p = pools.pipeline
    rows = T.derived_dims(p.graph)
    exprs = [e for e, *_ in rows]
    assert len(set(exprs)) == len(exprs)
    h = T.solve_html(p)
    check_html(h)
    derived = _section(h, r"Derived dims \(\d+\)")
    values = {nd.out.name: nd.out for nd in p.graph.nodes}
    for e, value, op, behind, n in rows:
        assert not isinstance(e, Lit) and e in p.graph.dims(values[value])
        assert behind == ()            # computed by the ops' shape rules, no binding behind
        assert op.startswith(("conv2d", "max_pool2d", "relu", "add"))
        assert n == sum(1 for nd in p.graph.nodes for d in p.graph.dims(nd.out) if d is e)
    assert re.search(r"conv2d &#x27;conv2d_nhwc&#x27; at models.py:\d+ in forward: y = self.conv\(x\)",
                     derived)                                       # the first one: the conv's
    assert "(H + 1) // 2" in text_of(derived)
    assert "none: every constraint reduced" in text_of(_section(h, r"Residual checks \(0\)"))
    # every trivial constraint is in one (op, detail) group, counted
    groups = T.trivial_groups(p.constraints)
    triv = [c for c in p.constraints if T.trivial_constraint(c)]
    assert sum(g[2] for g in groups) == len(triv) > 0
    for op, detail, n, _, ids in groups:
        assert n == len(ids) == sum(1 for c in triv if (c.provenance.op, c.provenance.detail)
                                    == (op, detail))
    assert f"{len(triv)} trivial constraints" in text_of(_section(h, "Trivial constraints"))


def test_solve_overview_names_pins_and_residuals():
    # a static reshape pins its -1 to a literal: the pin names the reshape's constraint
    cm = dl.compile(Reshape(), (torch.randn(3, 4, 6),), dynamic=False, backend="cpu")
    pins = T.literal_pins(cm.pipeline.graph)
    assert pins and all(isinstance(k, int) for _, k, _ in pins)
    v, k, c = pins[0]
    assert k == 3 and c.provenance.op == "reshape"
    h = T.solve_html(cm.pipeline)
    sec = text_of(_section(h, r"Literals pinned by a constraint \(\d+\)"))
    assert f"{v!r}" in sec and "reshape" in sec and f"#{c.id}" in sec
    # a dim a binding produced: reshape(-1, 12) of [N, 4, 6] binds its -1 to 2*N
    class Halves(nn.Module):
        def forward(self, x):
            return torch.relu(x).reshape(-1, 12)

    cm = dl.compile(Halves(), (torch.randn(3, 4, 6),), dynamic={0: {0: "N"}}, backend="cpu")
    (e, value, op, behind, n), = T.derived_dims(cm.pipeline.graph)
    assert repr(e) == "2*N" and op.startswith("reshape") and n == 1
    assert behind and all(c.provenance.op == "reshape" for c in behind)
    sec = _section(T.solve_html(cm.pipeline), r"Derived dims \(1\)")
    assert all(f"#{c.id}" in sec for c in behind) and "2*N" in text_of(sec)
    # a residual: a strided conv and a pooled 1x1 conv, added (heights (H-3)//2+1 and H//2)
    class TwoBranch(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.proj = nn.Conv2d(3, 4, 3, stride=2), nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return torch.relu(self.conv(x)) + F.max_pool2d(self.proj(x), 2)

    cm = dl.compile(TwoBranch().eval(), (torch.randn(2, 3, 9, 7),),
                    dynamic={0: {0: "N", 2: "H", 3: "W"}}, backend="cpu")
    res = cm.pipeline.residuals
    assert len(res) == 2
    h = T.solve_html(cm.pipeline)
    sec = _section(h, r"Residual checks \(2\)")
    for c in res:
        root = cm.pipeline.graph.solver.origin(c)
        assert f"#{c.id}" in sec and _html.escape(f"{c.lhs!r} == {c.rhs!r}") in sec
        assert f"#{root.id}" in sec and _html.escape(str(root.provenance)) in sec
