"""The notebook layer's tables and pipeline report, and the host-program trace they show.

The trace is checked differentially against the real thunk: register values against the compiled
host program, output shapes and launches (variant, element count, int params, index width) against
an actual call, and on refused shapes the recorded message against the ``ShapeMismatch`` the call
raises. Renderings are parsed: well-formed, self-contained, and showing the stage's content. The
standalone report is screenshotted with headless Chromium when it is installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from html import unescape
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import dlcb_lab as dl
from dlcb_lab.hostgen.lower import Src
from dlcb_lab.kgen.abi import magic
from dlcb_lab.viz.render import render
from dlcb_lab.records import Report
from dlcb_lab.viz.style import FOLD_ROWS
from htmlcheck import (Parsed, check_html, check_listing, chromium, contrast, png_spread, probe,
                       run_chromium)

from harness import Recorder
from models import Worked


class ConvNet(nn.Module):
    """A library call (conv) with a fused epilogue, a reduction, a flatten of residual size
    ``4*H*W``, module constants, and a second input tied to the batch dim."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x, y):   # x [N, 3, H, W], y [N, 4]
        h = torch.relu(self.conv(x))
        return h.mean((2, 3)) + y, h.flatten(1)


DYNAMIC = {0: {0: "N", 2: "H", 3: "W"}, 1: {0: "N"}}


def _inputs(n, h, w, ny=None):
    g = torch.Generator().manual_seed(n * 100 + h)
    return torch.randn(n, 3, h, w, generator=g), torch.randn(n if ny is None else ny, 4, generator=g)


@pytest.fixture(scope="module")
def cm():
    torch.manual_seed(0)
    return dl.compile(ConvNet().eval(), _inputs(2, 8, 8), dynamic=DYNAMIC, backend="cpu")


def _shapes(cm, *tensors):
    return cm._shapes(tensors)


def text_of(obj) -> Parsed:
    r = render(obj)
    assert r.html.startswith('<div class="dlcb"><style>')   # carries its own stylesheet
    return check_html(r.html)


# -- the core stays free of the notebook layer ---------------------------------------------------
def test_core_never_imports_viz():
    code = textwrap.dedent("""
        import sys, torch
        import dlcb_lab as dl
        from models import Worked
        cm = dl.compile(Worked(), (torch.randn(3, 4, 6), torch.randn(1, 4, 1)),
                        dynamic={0: {0: "N"}}, backend="cpu")
        cm(torch.randn(5, 4, 6), torch.randn(1, 4, 1))
        repr(cm.pipeline); repr(cm.trace((5, 4, 6), (1, 4, 1)))
        cm.pipeline.host_program.trace([(5, 4, 7), (1, 4, 1)])
        bad = ("dlcb_lab.viz", "graphviz", "ipywidgets", "matplotlib", "pygments")
        print(sorted(m for m in sys.modules if m.split(".")[0] in bad or m.startswith(bad[0])))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1] / "tools"),
                                                        str(Path(__file__).parents[2])]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


# -- the host-program trace against the real thunk -----------------------------------------------
@pytest.mark.parametrize("n,h,w", [(2, 8, 8), (1, 5, 7), (4, 1, 3), (0, 6, 6)])
def test_trace_equals_the_call(cm, monkeypatch, n, h, w):
    x, y = _inputs(n, h, w)
    host, plan = cm.pipeline.host_program, cm.pipeline.launch_plan
    shapes = _shapes(cm, x, y)
    t = host.trace(shapes)
    assert t.ok and t.error is None and len(t.steps) == len(host.instrs)
    assert all(s.failure is None for s in t.steps)
    regs = host.compile()(shapes)
    for ins in host.instrs:
        if not ins.is_check:
            assert t.registers[ins.dst] == regs[ins.dst], ins
    assert {k: regs[r] for k, r in host.slots.items()} == t.slots
    for s in t.steps:   # operand values are the registers' values when read
        assert all(regs[k] == v for k, v in s.reads)

    thunk = cm.pipeline.thunks[0]
    log: list = []
    monkeypatch.setattr(thunk, "launchers", [Recorder(f, log) for f in thunk.launchers])
    outs = cm(x, y)
    for o, got in zip(plan.outputs, outs):
        assert o.src is Src.BUFFER
        assert [t.registers[k] for k in plan.buffers[o.index].shape_regs] == list(got.shape)
    assert t.slots["flatten.shape[1]"] == 4 * h * w and t.slots["conv2d_nhwc.shape[0]"] == n

    lt = cm.trace(x, y)
    assert lt.ok and lt.host.registers == t.registers
    kernels = [s for s in lt.steps if s.kind == "kernel" and s.numel]
    assert [(s.variant, s.numel, tuple(v for _, v in s.params), s.narrow, s.width)
            for s in kernels] == log
    by_out = {s.out: s for s in lt.steps}
    assert [list(by_out[plan.buffers[o.index].value].shape) for o in plan.outputs] == \
        [list(g.shape) for g in outs]
    lib = [s for s in lt.steps if s.kind == "library"]
    assert [s.name for s in lib] == ["conv2d"] and dict(lib[0].params)["padding"] == (1, 1)
    flat = by_out["flatten"]
    body = next(k.body for k in cm.pipeline.kernels if k.name == flat.kernel)
    assert flat.numel == n * 4 * h * w and dict(flat.params) == {
        "d_H": h, "d_W": w, **{dv: magic(e.evaluate({"H": h, "W": w})) for dv, e in body.divisors}}


BAD = {
    "static axis": ((2, 5, 8, 8), (2, 4)),
    "tied batch": ((2, 3, 8, 8), (3, 4)),
    "conv window": ((2, 3, 0, 8), (2, 4)),
}


@pytest.mark.parametrize("which", list(BAD))
def test_trace_records_the_thunks_error(cm, which):
    xs, ys = BAD[which]
    x, y = torch.randn(*xs), torch.randn(*ys)
    with pytest.raises(dl.ShapeMismatch) as err:
        cm(x, y)
    t = cm.pipeline.host_program.trace(_shapes(cm, x, y))
    # the call's error is the failed check's message; where torch.export tied the axis, with why
    # (on the fast path the solver tied them, by the broadcast the check names)
    tied = "(torch.export tied input 1 'y' axis 0 to input 0 'x' axis 0" in str(err.value)
    fast = cm.stats()["capture_path"] == "fast"
    assert not t.ok and str(err.value).startswith(t.error)
    assert tied == (which == "tied batch" and not fast)
    assert (str(err.value) == t.error) != tied
    last = t.steps[-1]
    assert last.instr.is_check and last.failure == t.error
    assert all(s.failure is None for s in t.steps[:-1])
    assert len(t.steps) < len(cm.pipeline.host_program.instrs)
    lt = cm.trace(x, y)
    assert lt.error == t.error and lt.steps == ()
    text = text_of(lt).text
    assert t.error in text and "ShapeMismatch" in text


def test_trace_of_another_rank_records_the_main_thunks_refusal(cm):
    """A call of another rank is no ShapeMismatch: it is compiled on first use (JIT). Here that
    compile fails as eager does (an unbatched conv input with 2 channels), and the failure is
    kept, so a second call raises it again; the trace of the compiled signature's host program
    still records its rank check."""
    x, y = torch.randn(2, 3, 8), torch.randn(2, 4)
    with pytest.raises(RuntimeError, match="to have 3 channels"):
        ConvNet()(x, y)
    with pytest.raises(dl.ShapeError, match=r"test_viz_report.py:\d+ in forward: h = torch.relu"
                       r"\(self.conv\(x\)\): torch rejects the program: .*to have 3 channels"):
        cm(x, y)
    (kept,) = cm.jit.values()
    assert isinstance(kept, dl.ShapeError) and "to have 3 channels" in str(kept)
    with pytest.raises(dl.ShapeError, match="to have 3 channels"):
        cm(x, y)
    assert len(cm.jit) == 1 and cm.stats()["compiles"] == 1
    t = cm.pipeline.host_program.trace(_shapes(cm, x, y))
    assert not t.ok and t.error == "input 0 'x': rank 3 != 4"
    assert t.steps[-1].instr.is_check and t.steps[-1].failure == t.error
    assert cm.trace(x, y).error == t.error


def test_trace_messages_name_the_dim():
    cmw = dl.compile(Worked(), (torch.randn(3, 4, 6), torch.randn(1, 4, 1)),
                     dynamic={0: {0: "N"}}, backend="cpu")
    t = cmw.pipeline.host_program.trace([(3, 4, 6), (1, 5, 1)])
    assert t.error.startswith("input 1 'y' axis 1: size 5 != 4 (a static axis: ")
    assert "dynamic={'y': {1: 'D'}}" in t.error      # how to make it free
    short = cmw.pipeline.host_program.trace([(3, 4, 6)])   # arity: recorded, not raised
    assert short.error == "expected 2 inputs, got 1" and short.steps == ()
    assert "FAILED" in repr(short)


# -- renderings ----------------------------------------------------------------------------------
def test_dim_table(cm):
    p = text_of(cm.pipeline.dims)
    html = render(cm.pipeline.dims).html
    counts = cm.pipeline.dims.counts()
    for kind, n in counts.items():
        assert f"{kind} {n}" in p.text
    for name in ("N", "H", "W"):
        assert f'<code class="dl-named" title="named">{name}</code>' in html
    assert '<code class="dl-residual" title="residual">4*H*W</code>' in html
    assert '<code class="dl-literal" title="literal">3</code>' in html
    assert "var(--dl-residual)" in html   # kinds coloured through the CSS variables
    for v in {r.value for r in cm.pipeline.dims.rows}:
        assert f"%{v}" in p.text


def test_host_program_listing(cm):
    host = cm.pipeline.host_program
    p = text_of(host)
    assert host.args[:2] == ("x", "y")
    assert "r0 = %x.shape[0]" in p.text and "fail if rank(%x) != 4" in p.text
    for ins in host.instrs:
        if ins.is_check:   # each check's message (template) is listed
            assert host.messages[ins.dst].replace("{{", "{").replace("}}", "}") in p.text
    for slot in host.slots:
        assert slot in p.text
    assert "4*H*W" in p.text   # registers named by the expression they hold
    rows = [tag for tag, _ in p.tags if tag == "tr"]
    heads = [tag for tag, _ in p.tags if tag == "thead"]
    assert len(rows) - len(heads) == len(host.instrs) + len(host.slots)   # one row each
    if len(host.instrs) > FOLD_ROWS:   # the rest folded under a visible marker
        assert f"{len(host.instrs) - FOLD_ROWS} more rows" in p.text


def test_host_trace_rendering(cm):
    t = cm.pipeline.host_program.trace(_shapes(cm, *_inputs(3, 5, 7)))
    p = text_of(t)
    n_checks = sum(1 for i in cm.pipeline.host_program.instrs if i.is_check)
    assert f"all {n_checks} checks pass" in p.text and "%x: [3, 3, 5, 7]" in p.text
    row = re.search(r"<code>flatten\.shape\[1\]</code></td><td>(.*?)</td><td>(.*?)</td>",
                    render(t).html)
    k = cm.pipeline.host_program.slots["flatten.shape[1]"]
    assert row and f"<code>r{k}</code>" in row[1] and row[2] == f"<code>{4 * 5 * 7}</code>"
    bad = cm.pipeline.host_program.trace(_shapes(cm, torch.randn(2, 3, 8, 8), torch.randn(3, 4)))
    pb = text_of(bad)
    assert "input 1 'y' axis 0: size 3 != N = 2" in pb.text and "FAIL" in pb.text
    assert "not evaluated after the failure" in pb.text


def test_launch_plan_partition_passes(cm):
    pl = cm.pipeline
    p = text_of(pl.launch_plan)
    for k in pl.kernels:
        assert k.name in p.text
    assert "conv2d" in p.text and "padding=(1, 1)" in p.text
    for b in pl.launch_plan.buffers:
        assert f"%{b.value}" in p.text
    freed = {pl.launch_plan.buffers[j].value for f in pl.launch_plan.frees for j in f}
    assert freed and all(f"%{v}" in p.text for v in freed)

    pp = text_of(pl.partition)
    c = pl.partition.counts()
    assert f"library {c['library']}" in pp.text and f"generated {c['generated']}" in pp.text
    for s in pl.partition.steps:
        assert " ".join(s.ops) in pp.text

    for r in pl.passes:
        pr = text_of(r)
        assert r.name in pr.text and all(ch in pr.text for ch in r.changes)

    th = text_of(pl.thunks[0])
    assert "DynamicAOTThunk" in th.text and "conv.weight" in th.text


def test_fold_rows():
    """Tables over ``FOLD_ROWS`` rows show that many and fold the rest under a visible, closed
    "N more rows"; shorter tables are left alone."""
    from dlcb_lab.viz.style import fold_rows, folded_table

    rows = [(i, f"r{i}") for i in range(FOLD_ROWS + 7)]
    shown, rest = fold_rows(rows)
    assert list(shown) == rows[:FOLD_ROWS] and list(rest) == rows[FOLD_ROWS:]
    assert fold_rows(rows[:FOLD_ROWS]) == (rows[:FOLD_ROWS], [])
    p = check_html(folded_table(["#", "name"], rows))
    assert "7 more rows" in p.text and f"r{FOLD_ROWS + 6}" in p.text
    details = [a for tag, a in p.tags if tag == "details"]
    assert len(details) == 1 and "open" not in details[0]
    assert "more row" not in folded_table(["#", "name"], rows[:FOLD_ROWS])
    assert "1 more row<" in folded_table(["#", "name"], rows[:FOLD_ROWS + 1])


def test_pipeline_and_module(cm):
    pp = text_of(cm.pipeline)
    for stage in cm.pipeline.timings:
        assert stage in pp.text
    assert f"{len(cm.pipeline.host_program.instrs)} instructions" in pp.text
    pm = text_of(cm)
    assert "%x: [N, 3, H, W] float32" in pm.text and "%flatten: [N, 4*H*W] float32" in pm.text
    assert "CompiledModule" in pm.text
    bundle = cm._repr_mimebundle_()
    assert bundle["text/plain"] == repr(cm) and bundle["text/html"] == render(cm).html


# -- the report ----------------------------------------------------------------------------------
def test_report_standalone(cm, tmp_path):
    rep = cm.report(*_inputs(2, 8, 8))
    assert isinstance(rep, Report)
    html = render(rep).html
    p = check_html(html)
    h3 = [t for tag, t in p.headings if tag == "stage"]
    assert h3 == list(Report.TABS)   # one tab per stage, the call trace included
    radios = [a for tag, a in p.tags if tag == "input" and a.get("type") == "radio"]
    assert len(radios) == len(h3) and sum("checked" in a for a in radios) == 1
    assert len({a["name"] for a in radios}) == 1
    # the tabs need no script (radio inputs); inline scripts (the solver stepper) have no src
    assert all("src" not in a for tag, a in p.tags if tag == "script")
    for k in cm.pipeline.kernels:
        assert k.name in p.text
    assert "input 1 'y' axis 0: size {got} != N = {want}" in p.text   # host program tab
    path = rep.to_html(tmp_path / "report.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<title>dlcb_lab pipeline report</title>" in page
    check_html(page)


def test_explore():
    x, y = torch.randn(3, 4, 6), torch.randn(1, 4, 1)
    rep = dl.explore(Worked(), (x, y), dynamic={0: {0: "N"}}, backend="cpu")
    assert rep.trace.ok and rep.trace.host.shapes == ((3, 4, 6), (1, 4, 1))
    p = check_html(render(rep).html)
    assert "Call trace" in [t for _, t in p.headings]
    assert "dlcb_k0_reshape" in p.text and "72 elements" in p.text
    no_inputs = rep.module.report()
    assert "Call trace" not in [t for _, t in check_html(render(no_inputs).html).headings]
    assert no_inputs.trace is None and "Call trace" not in no_inputs.tabs
    assert rep.tabs == Report.TABS and repr(no_inputs).endswith(
        "tabs: Summary, Graph, Constraints, Solver trace, Dims, Kernels, Host program, "
        "Launch plan, Passes)")


def _cuda_kernels_tab(p) -> None:
    """The Kernels tab of pipeline ``p`` (CUDA backend): each distinct code once, as CUDA C++
    after one listing of the prelude that each links to; each load's CUDA line in the coordinate
    map; no numba listing, a line naming where it is."""
    from dlcb_lab.kgen.emit import CUDA_PRELUDE
    from dlcb_lab.runtime.build import distinct
    from dlcb_lab.viz.code import PRELUDE_ID
    from dlcb_lab.viz.report import kernels_html

    kernels = p.kernels
    html = kernels_html(p)
    got = check_html(html)
    first = distinct([k.body for k in kernels], "cuda")
    head = (CUDA_PRELUDE + "\n").count("\n")
    listed = [line for i, k in enumerate(kernels) if first[i] == i
              for line in k.cuda_source.split("\n")[head:]]
    assert set(got.src) == {"cuda"}
    assert got.src["cuda"] == (CUDA_PRELUDE + "\n").split("\n")[:head] + listed
    assert html.count(f'id="{PRELUDE_ID}"') == 1
    assert html.count(f'href="#{PRELUDE_ID}"') == len(set(first))
    assert html.count("<th>CUDA</th>") == len(set(first)) and "its numba form" in html


def test_report_of_the_cuda_backend_lists_cuda(cm):
    """The Kernels tab of the same pipeline on the CUDA backend (the records, with the backend
    the CUDA compile records): the listings follow the backend (``_cuda_kernels_tab``)."""
    from dataclasses import replace

    p = cm.pipeline
    _cuda_kernels_tab(replace(p, kernels=tuple(replace(k, backend="cuda", launcher=None)
                                               for k in p.kernels)))


@pytest.mark.gpu
def test_report_of_a_cuda_compile_lists_its_cuda():
    """A CUDA compile's report: the Kernels tab lists the CUDA C++ that NVRTC compiled
    (``_cuda_kernels_tab``), and the page holds up."""
    torch.manual_seed(0)
    x, y = (t.cuda() for t in _inputs(2, 8, 8))
    m = ConvNet().eval().cuda()
    cmc = dl.compile(m, (x, y), dynamic=DYNAMIC, backend="cuda")
    assert cmc.pipeline.kernels and all(k.backend == "cuda" for k in cmc.pipeline.kernels)
    _cuda_kernels_tab(cmc.pipeline)
    check_html(render(cmc.report(x, y)).html)
    with torch.no_grad():
        torch.testing.assert_close(cmc(x, y), m(x, y), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_densenet121_report_stays_under_6_mb(tmp_path):
    """DenseNet-121 at 1x3x64x64 (CPU, ``dynamic="auto"``; 790 ops, 125 kernels of 67 distinct
    codes, 4,000 host instructions) writes a standalone report of at most 6 MB with every stage:
    every kernel has its anchored section (a kernel of an earlier one's code links there), each
    distinct code is listed once, the dense blocks fold behind "N ops hidden" markers, each
    stylesheet is carried once. Measured at this commit: 5.5 MB (11.9 MB before: both languages
    for every kernel, the graph drawn whole, a stylesheet per embedded rendering); some 30 s
    with numba's cache warm, minutes cold."""
    torchvision = pytest.importorskip("torchvision")
    from dlcb_lab.runtime.build import distinct

    torch.manual_seed(0)
    model = torchvision.models.densenet121(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    cm = dl.compile(model, (x,), dynamic="auto", backend="cpu")
    kernels = cm.pipeline.kernels
    path = cm.report(x).to_html(tmp_path / "densenet121.html")
    page = path.read_text(encoding="utf-8")
    assert len(page.encode()) <= 6_000_000, len(page.encode()) / 1e6
    p = check_html(page)
    assert [t for tag, t in p.headings if tag == "stage"] == list(Report.TABS)
    anchors = re.findall(r'<details id="dlcb-kernel-([^"]+)" class="dl-kernel">', page)
    assert anchors == [k.name for k in kernels] and len(kernels) > 100
    first = distinct([k.body for k in kernels], "cpu")
    assert page.count('<table class="dl-code" data-lang="python">') == len(set(first))
    assert page.count('<div class="dl-same">') == len(kernels) - len(set(first))
    hidden = [int(n) for n in re.findall(r"… (\d+) ops hidden", page)]
    assert sum(hidden) > len(cm.pipeline.graph.nodes) // 2
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    assert len(styles) == len(set(styles))
    x2 = torch.randn(2, 3, 80, 72)
    with torch.no_grad():
        torch.testing.assert_close(cm(x2), model(x2), rtol=1e-4, atol=1e-4)


# -- headless Chromium ---------------------------------------------------------------------------
_chromium, _run_chromium, _png_spread = chromium, run_chromium, png_spread   # names other tests import


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed (make chromium, as root)")
def test_report_in_chromium(cm, tmp_path):
    page = cm.report(*_inputs(2, 8, 8)).to_html(tmp_path / "report.html")
    shot = tmp_path / "report.png"
    r = _run_chromium(f"--screenshot={shot}", "--window-size=1200,900", page.as_uri())
    assert shot.exists(), r.stderr[-2000:]
    size, spread = _png_spread(shot)
    assert size == (1200, 900)
    assert spread > 10, "the screenshot is blank"

    dom = _run_chromium("--dump-dom", page.as_uri()).stdout
    p = Parsed(dom)
    heads = [t for _, t in p.headings]
    assert "dlcb_lab pipeline report" in heads and all(t in heads for t in Report.TABS)
    assert "%x: [N, 3, H, W] float32" in p.text


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed (make chromium, as root)")
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_report_follows_the_colour_scheme(cm, tmp_path, scheme):
    """The standalone report follows ``prefers-color-scheme`` (Chromium's ``--force-dark-mode``):
    page and text colours swap, and the literal / named / residual colours and the graph's inline
    SVG text stay legible on the background they are drawn on."""
    page = cm.report(*_inputs(2, 8, 8)).to_html(tmp_path / "report.html")
    got = probe(page, *(["--force-dark-mode"] if scheme == "dark" else []))
    fg, bg = got["page"]
    dark = contrast(bg, "rgb(0, 0, 0)") < contrast(bg, "rgb(255, 255, 255)")
    assert dark == (scheme == "dark") and contrast(fg, bg) >= 7, got["page"]
    kinds = {c["cls"] for c in got["colors"]}
    assert {"dl-literal", "dl-named", "dl-residual", "dl-library"} <= kinds, kinds
    for c in got["colors"]:
        assert contrast(c["color"], c["bg"]) >= 4.5, c
    assert got["svg"]
    for t in got["svg"]:
        if t["text"].strip():
            assert contrast(t["fill"], t["bg"]) >= 4.5, t
    for listing in got["listings"]:
        check_listing(listing["rows"], f"report ({scheme})")


LINK_PROBE = """<script>window.addEventListener("load", () => {
  const t = document.querySelector(":target"), out = {target: t ? t.id : null};
  if (t) {
    const panel = t.closest(".dl-panel");
    out.panels = Array.from(document.querySelectorAll(".dl-tabs > .dl-panel"))
      .map(p => [p.querySelector("h3").textContent, p === panel, getComputedStyle(p).display]);
    out.height = t.getBoundingClientRect().height;
    const inner = t.querySelector("table").getBoundingClientRect();
    out.content = [inner.width, inner.height];
  }
  const pre = document.createElement("pre");
  pre.id = "dlcb-probe"; pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});</script>"""


def _hrefs_resolve(html: str) -> set[str]:
    """Every in-page link target of ``html`` (``href``, ``xlink:href``) names an element id."""
    p = Parsed(html)
    ids = {a["id"] for _, a in p.tags if "id" in a}
    hrefs = {a[k][1:] for _, a in p.tags for k in ("href", "xlink:href")
             if (a.get(k) or "").startswith("#")}
    assert hrefs and hrefs <= ids, sorted(hrefs - ids)[:5]
    return hrefs


def test_report_links_and_anchors(cm):
    """Each kernel section has the anchor ``dlcb-kernel-<name>``, closed; the kernel list, the
    graph's generated clusters and the source-line index link there; no link dangles."""
    p = cm.pipeline
    html = render(cm.report()).html
    hrefs = _hrefs_resolve(html)
    names = [k.name for k in p.kernels]
    assert {f"dlcb-kernel-{n}" for n in names} <= hrefs
    sections = re.findall(r'<details id="dlcb-kernel-([^"]+)"([^>]*)>', html)
    assert [n for n, _ in sections] == names and all("open" not in a for _, a in sections)
    graph = render(p.graph).html       # generated clusters link to their kernel
    generated = [s for s in p.partition.steps if s.kind == "generated"]
    links = re.findall(r'xlink:href="#dlcb-kernel-([^"]+)"', graph)
    assert sorted(links) == sorted(names) and len(links) == len(generated)
    # the source-line index: each model line of ConvNet.forward -> the kernels computing it
    index = re.search(r"<h4>Source lines → kernels</h4>(.*?)</table>", html, re.S)[1]
    rows = re.findall(r"<tr><td><code>([^<]*)</code></td><td>(.*?)</td><td>(.*?)</td></tr>",
                      index)
    by_line = {unescape(w).split(": ", 1)[1]: (re.findall(r'href="#dlcb-kernel-([^"]+)"', ks),
                                              lib) for w, ks, lib in rows}
    kernel_of = {k.body.out.name: k.name for k in p.kernels}
    computing = {op: {kernel_of[s.value] for s in generated if op in s.ops}
                 for op in ("relu", "mean", "add", "flatten")}
    relu = by_line["h = torch.relu(self.conv(x))"]
    assert relu[1] == "conv2d" and set(relu[0]) == computing["relu"] and len(relu[0]) == 2
    ret = by_line["return h.mean((2, 3)) + y, h.flatten(1)"]
    assert set(ret[0]) == computing["mean"] | computing["add"] | computing["flatten"]


def test_kernels_tab_names_the_build_a_twin_kernel_launches():
    """Two blocks of one code: the Kernels tab counts the distinct codes and the second block's
    kernel links to the first's as the build it launches; the first has none."""
    from dlcb_lab.viz.report import kernels_html

    class Twice(nn.Module):
        def forward(self, x, y):
            return torch.tanh(x) + 1, torch.tanh(y) + 1

    cm2 = dl.compile(Twice(), (torch.randn(2, 8), torch.randn(3, 8)),
                     dynamic={0: {0: "N"}, 1: {0: "M"}}, backend="cpu")
    names = [k.name for k in cm2.pipeline.kernels]
    assert len(names) == 2 and cm2.stats()["kernel_builds"] == 1
    html = kernels_html(cm2.pipeline)
    assert "2 generated kernels: 1 distinct code, each built once" in unescape(html)
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)[1:3]
    built_as = [re.findall(r'href="#dlcb-kernel-([^"]+)"', r)[1:] for r in rows]
    assert built_as == [[], [names[0]]]
    x, y = torch.randn(5, 8), torch.randn(1, 8)
    for got, want in zip(cm2(x, y), Twice()(x, y)):
        torch.testing.assert_close(got, want)


@pytest.mark.skipif(_chromium() is None, reason="chromium not installed (make chromium, as root)")
def test_kernel_link_shows_its_section_in_chromium(cm, tmp_path):
    """Following ``#dlcb-kernel-<name>`` shows the Kernels tab instead of the checked one, and
    the kernel's section with its content, without a script in the report."""
    page = cm.report().to_html(tmp_path / "report.html")
    probed = tmp_path / "probed.html"
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", LINK_PROBE + "</body>"),
                      encoding="utf-8")
    name = cm.pipeline.kernels[-1].name
    r = run_chromium("--virtual-time-budget=3000", "--dump-dom",
                     f"{probed.as_uri()}#dlcb-kernel-{name}")
    m = re.search(r'<pre id="dlcb-probe">(.*?)</pre>', r.stdout, re.S)
    assert m, r.stderr[-2000:]
    got = json.loads(unescape(m[1]))
    assert got["target"] == f"dlcb-kernel-{name}"
    shown = [(label, mine) for label, mine, display in got["panels"] if display != "none"]
    assert shown == [("Kernels", True)]
    assert got["height"] > 0 and min(got["content"]) > 0
