"""Fig. 2 and Fig. 3 from benchmark CSVs (``bench.figures``, ``dlcb-lab figures``, notebooks 05
and 06): the data they read, the numbers they show, the files they write, the images the
notebooks display."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dlcb_lab import cli
from dlcb_lab.bench import figures
from dlcb_lab.bench import models as bm

ROOT = Path(__file__).resolve().parents[1]
DATA = sorted((ROOT / "data" / "bench").glob("*/models.csv"))


def _rows(model, system, batch, ms, **extra):
    seq = 8 if model in bm.TEXT else None
    res = None if seq else 32
    out = [bm._row(model, system, (batch, seq, res), "ms", ms)]
    out += [bm._row(model, system, (batch, seq, res), k, v) for k, v in extra.items()]
    return out


def test_load_later_file_wins_and_speedups(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    bm.frame(_rows("resnet18", "eager", 1, 4.0) + _rows("resnet18", "dlcb-dynamic", 1, 2.0)
             ).to_csv(a, index=False)
    bm.frame(_rows("resnet18", "dlcb-dynamic", 1, 1.0) + _rows("bert", "eager", 2, 3.0) +
             _rows("bert", "dlcb-dynamic", 2, 1.5, compile_s=0.5)).to_csv(b, index=False)
    df = figures.load([a, b])
    sp = figures.speedups(df).set_index(["model", "system"]).speedup
    assert sp[("resnet18", "dlcb-dynamic")] == 4.0 and sp[("bert", "dlcb-dynamic")] == 2.0
    h = figures.headline(df).set_index("system")
    assert h.loc["dlcb-dynamic", "speedup_images"] == 4.0
    assert h.loc["dlcb-dynamic", "paper_speedup"] == 0.92
    assert h.loc["dlcb-dynamic", "median_compile_s"] == 0.5
    assert math.isclose(figures._geomean([2.0, 8.0]), 4.0)
    with pytest.raises(ValueError, match="no results"):
        figures.load([])


def test_write_every_figure(tmp_path):
    df = figures.load(DATA)
    files = figures.write(df, tmp_path)
    names = {p.name for p in files}
    assert names == {f"{f}.{e}" for f in ("fig2_throughput", "fig2_transformers",
                                           "fig3_compile_time") for e in ("png", "svg")}
    assert all(p.stat().st_size > 10_000 for p in files)
    assert (tmp_path / "fig2_throughput.png").read_bytes()[:4] == b"\x89PNG"
    only_images = df[~df.model.isin(bm.TEXT)]   # a figure without rows is left out
    assert "fig2_transformers.png" not in {p.name for p in figures.write(only_images,
                                                                          tmp_path / "i")}


def test_cli_figures(tmp_path, capsys):
    assert cli.main(["figures", *map(str, DATA), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fig3_compile_time.svg" in out and "dlcb-dynamic" in out
    assert len(list(tmp_path.iterdir())) == 6


@pytest.mark.parametrize("name", ["05_fig2_throughput", "06_fig3_compile_time"])
def test_notebook_draws_its_figures(name):
    nbformat = pytest.importorskip("nbformat")   # a dev dependency (the device image lacks it)
    NotebookClient = pytest.importorskip("nbclient").NotebookClient
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", 4)
    NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(ROOT / "notebooks")}}
                   ).execute()
    drawn = [c for c in nb.cells if c.cell_type == "code" and "figures.fig" in c.source]
    assert drawn and all(any("image/png" in o.get("data", {}) for o in c.outputs)
                         for c in drawn), name
    tables = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if "text/html" in o.get("data", {})]
    assert tables   # the headline / phase tables render as HTML
