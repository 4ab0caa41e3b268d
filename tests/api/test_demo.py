"""``make demo`` (``python -m dlcb_lab.demo``), run once as ``main([...])``: the kernel listing it
prints is the code the backend ran (on the CPU, the source of the numba function the launcher
calls), the TorchVision model compiled once with the default ``dynamic`` equals eager at every
batch and resolution, and the report lands where asked (by default, in the working directory)."""

from __future__ import annotations

import contextlib
import inspect
import io
import re
from pathlib import Path

import pytest
import torch

from dlcb_lab import demo
from htmlcheck import check_html


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("torchvision")
    where = tmp_path_factory.mktemp("demo") / "reports"
    where.mkdir()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = demo.main(["--report", str(where / "demo.html")])
    return result, out.getvalue(), where


def test_prints_the_code_the_backend_ran(run):
    result, text, _ = run
    k = result.shown
    language, source = demo.listing(k)
    head = f"generated {language} for {k.name}, as the {k.backend} backend ran it:\n"
    assert head + source in text
    if k.backend == "cuda":
        assert language.startswith("CUDA C++") and "__global__" in source
        assert all(part in source for part in k.cuda_parts)
        assert k.cuda_source.endswith(source)   # the prelude, then exactly these entry points
    else:
        assert language == "numba (Python)" and source == k.numba_source
        assert "__global__" not in text and "threadIdx" not in text   # no CUDA on a CPU run
        ran = inspect.getsource(k.launcher.fn.py_func)   # the function the launcher calls
        assert ran.strip() in source and k.name in ran


def test_real_model_equals_eager_from_one_compile(run):
    result, text, _ = run
    cm, model = result.compiled, result.model
    s = cm.stats()
    assert s["compiles"] == 1 and s["thunk"] == "dynamic"
    assert [shape for shape, _ in result.calls] == [(2, 3, 64, 64), (5, 3, 64, 64),
                                                    (2, 3, 96, 80)]
    assert all(err <= 1e-4 for _, err in result.calls), result.calls
    assert text.count("against eager") == 3 and "stats: compiles 1, calls 3" in text
    dims = [r.kind.value for r in cm.pipeline.dims.of(cm.pipeline.graph.inputs[0].name)]
    assert dims == ["named", "literal", "named", "named"]    # batch, height, width free
    dev = next(model.parameters()).device
    x = torch.randn(3, 3, 72, 56, device=dev)   # a shape the demo did not run
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(cm(x), want, **demo.TOL)
    assert cm.stats()["compiles"] == 1


def test_report_is_written_where_asked(run):
    result, text, where = run
    assert result.report == where / "demo.html" and result.report.is_file()
    assert sorted(p.name for p in where.iterdir()) == ["demo.html"]
    page = result.report.read_text(encoding="utf-8")
    check_html(page)
    assert "dlcb_lab pipeline report" in page and ">Call trace</label>" in page
    assert all(k.name in page for k in result.compiled.pipeline.kernels)
    assert re.search(rf"pipeline report of resnet18 .*: {re.escape(str(result.report))}\n", text)


def test_default_report_is_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = demo.parser().parse_args([])
    assert Path(args.report).resolve() == tmp_path / "dlcb_demo_report.html"
    assert (args.model, args.size, args.backend) == ("resnet18", 64, "auto")
