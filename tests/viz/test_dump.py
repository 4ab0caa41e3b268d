"""``dlcb_lab.viz.dump(pipeline, dir)``: the named files, each holding exactly its stage object (kernel sources
equal to ``Kernel.cuda_source``/``numba_source``, one CSV row per constraint, rule application and
axis), an index naming every file, a report page; and the same without graphviz and ipywidgets."""

from __future__ import annotations

import ast
import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.kgen.emit import CUDA_PRELUDE, PY_PRELUDE
import dlcb_lab.viz as viz
from dlcb_lab.viz.diagrams import NO_GRAPHVIZ
from dlcb_lab.viz.files import _aliases
from dlcb_lab.viz.solve import is_trivial
from htmlcheck import check_html

from models import Pools, Worked


@pytest.fixture(scope="module")
def pools():
    torch.manual_seed(0)
    return dl.compile(Pools().eval(), (torch.randn(2, 3, 64, 64),),
                      dynamic={0: {0: "N", 2: "H", 3: "W"}}, backend="cpu")


def rows(path: Path) -> list[dict]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_dump_writes_every_stage(pools, tmp_path):
    p = pools.pipeline
    out = viz.dump(p, tmp_path / "dump")
    assert out == tmp_path / "dump" and out.is_dir()
    files = sorted(f.name for f in out.iterdir())
    want = {"index.txt", "prelude.cuh", "constraints.csv", "solver_trace.csv", "dims.csv",
            "graph.txt", "host_program.txt", "launch_plan.txt", "report.html"}
    want |= {f"{k.name}{ext}" for k in p.kernels for ext in (".cu", ".py")}
    assert set(files) == want and len(p.kernels) >= 2
    # index: one line per file, each described
    index = (out / "index.txt").read_text(encoding="utf-8").splitlines()
    listed = {line.split()[0] for line in index[2:] if line.strip()}
    assert listed == want
    # kernels: the prelude once; each .cu is that prelude + its variants = Kernel.cuda_source
    assert (out / "prelude.cuh").read_text(encoding="utf-8") == CUDA_PRELUDE + "\n" * (
        not CUDA_PRELUDE.endswith("\n"))
    for k in p.kernels:
        cu = (out / f"{k.name}.cu").read_text(encoding="utf-8")
        head, body = cu.split("\n", 1)
        assert head == '#include "prelude.cuh"' and "__global__" in body
        assert (CUDA_PRELUDE + "\n" + body).rstrip("\n") == k.cuda_source.rstrip("\n")
        assert k.name in body and CUDA_PRELUDE.strip() not in body        # not repeated
        py = (out / f"{k.name}.py").read_text(encoding="utf-8")
        assert py.startswith(PY_PRELUDE) and k.numba_source.strip() in py
        tree = ast.parse(py)
        assert k.name in {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    # constraints: every user-added and derived one, once, with provenance and status
    tr = p.solver_trace
    cs = {c.id: c for c in (*p.constraints, *tr.constraints, *tr.derived)}
    got = rows(out / "constraints.csv")
    assert [int(r["id"]) for r in got] == sorted(cs)
    res = {c.id for c in p.residuals}
    for r in got:
        c = cs[int(r["id"])]
        assert (r["lhs"], r["rhs"]) == (repr(c.lhs), repr(c.rhs))
        assert (r["op"], r["node"], r["detail"], r["where"]) == (
            c.provenance.op, c.provenance.node, c.provenance.detail, c.provenance.where)
        assert r["parent"] == ("" if c.parent is None else str(c.parent))
        assert r["trivial"] == str(int(c.lhs is c.rhs or (r["lhs"] == r["rhs"]
                                                          and r["lhs"].isdigit())))
        assert r["residual"] == str(int(c.id in res))
    # the trace, in µs
    got = rows(out / "solver_trace.csv")
    assert [(int(r["step"]), r["rule"], r["before"], r["after"]) for r in got] == [
        (t.step, t.rule, t.before, t.after) for t in tr]
    assert [r["trivial"] for r in got] == [str(int(is_trivial(t))) for t in tr]
    assert [float(r["dt_us"]) for r in got] == pytest.approx([t.dt_ns / 1e3 for t in tr],
                                                             abs=1e-3)
    # dims, with the graph's aliases
    got = rows(out / "dims.csv")
    assert [(r["value"], int(r["axis"]), r["expr"], r["kind"]) for r in got] == [
        (d.value, d.axis, repr(d.expr), d.kind.value) for d in p.dims.rows]
    if _aliases(p):
        assert any(r["alias"] for r in got)
        host = (out / "host_program.txt").read_text(encoding="utf-8")
        assert "# aliases of long dims" in host
    # text forms
    assert (out / "graph.txt").read_text(encoding="utf-8").rstrip("\n") == repr(p.graph)
    assert (out / "host_program.txt").read_text(encoding="utf-8").startswith(
        repr(p.host_program))
    assert (out / "launch_plan.txt").read_text(encoding="utf-8").rstrip("\n") == repr(
        p.launch_plan)
    page = (out / "report.html").read_text(encoding="utf-8")
    check_html(page)
    assert "dlcb_lab pipeline report" in page and 'class="dl-stepper"' in page
    # a second dump into the same folder replaces the files
    assert viz.dump(p, out, report=False) == out and (out / "report.html").exists()


_NO_VIZ_DEPS = r"""
import sys
sys.modules["graphviz"] = None        # import graphviz / ipywidgets raise ImportError
sys.modules["ipywidgets"] = None
sys.path.insert(0, "tests/tools")
import torch, dlcb_lab as dl, dlcb_lab.viz as viz
from models import Worked
cm = dl.compile(Worked(), (torch.randn(3, 4, 6), torch.randn(1, 4, 1)), dynamic={0: {0: "N"}},
                backend="cpu")
out = viz.dump(cm.pipeline, sys.argv[1])
print(sorted(f.name for f in out.iterdir()))
"""


def test_dump_without_graphviz_or_ipywidgets(tmp_path):
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", _NO_VIZ_DEPS, str(tmp_path / "d")], cwd=root,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = tmp_path / "d"
    names = {f.name for f in out.iterdir()}
    assert {"report.html", "constraints.csv", "solver_trace.csv", "dims.csv", "index.txt",
            "dlcb_k0_reshape.cu", "dlcb_k0_reshape.py"} <= names
    page = (out / "report.html").read_text(encoding="utf-8")
    check_html(page)
    assert NO_GRAPHVIZ in page and "<b>Graph</b>" not in page    # text form, not the drawing
    assert 'class="dl-stepper"' in page and "Host program" in page and "<svg" not in page
    # the same compile with graphviz: the same data files
    cm = dl.compile(Worked(), (torch.randn(3, 4, 6), torch.randn(1, 4, 1)),
                    dynamic={0: {0: "N"}}, backend="cpu")
    full = viz.dump(cm.pipeline, tmp_path / "full", report=False)
    for name in ("constraints.csv", "dims.csv", "graph.txt", "host_program.txt",
                 "dlcb_k0_reshape.cu"):
        assert (full / name).read_text() == (out / name).read_text(), name


def test_dump_of_a_compiled_module_summarizes_it(pools, tmp_path):
    """Given the compiled module rather than its pipeline, the dump is the pipeline's files and
    the report's summary is the module's own (its calls so far), not one read off the pipeline."""
    pools(torch.randn(1, 3, 32, 40))
    calls = pools.stats()["calls"]
    assert calls >= 1
    a = viz.dump(pools, tmp_path / "module")
    b = viz.dump(pools.pipeline, tmp_path / "pipeline")
    for name in ("graph.txt", "dims.csv", "host_program.txt", "launch_plan.txt"):
        assert (a / name).read_text() == (b / name).read_text(), name
    summary = [re.search(r'<h3 class="dl-stage">Summary</h3>(.*?)<h3 class="dl-stage">',
                         (d / "report.html").read_text(encoding="utf-8"), re.S)[1]
               for d in (a, b)]
    stat = "<tr><td>{}</td><td>{}</td></tr>".format
    assert stat("compiles", 1) in summary[0] and stat("calls", calls) in summary[0]
    assert "<td>compiles</td>" not in summary[1]   # read off the pipeline: no compile count
