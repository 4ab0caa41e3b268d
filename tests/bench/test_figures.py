"""Fig. 2 and Fig. 3 from benchmark CSVs (``bench.figures``, ``dlcb-lab figures``, notebooks 05
and 06): the data they read, the numbers they show, the files they write, the images the
notebooks display."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from dlcb_lab import cli
from dlcb_lab.bench import figures
from dlcb_lab.bench import models as bm

ROOT = Path(__file__).resolve().parents[2]
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


def test_targets_measured_on_the_rows(tmp_path):
    rows = []
    for b, eager, dyn, static in ((1, 1.0, 0.40, 0.39), (32, 4.0, 1.0, 0.80)):
        shape = dict(peak_mb=100.0, resident_mb=300.0) if b == 32 else {}
        rows += _rows("resnet18", "eager", b, eager, first_call_cold_ms=300.0 if b == 1 else 8.0,
                      **shape)
        rows += _rows("resnet18", "torch.compile-cudagraphs", b, eager / 2)
        rows += _rows("resnet18", "dlcb-static", b, static)
        first = dict(compile_s=0.3) if b == 1 else dict(recompile_s=0.0, first_call_ms=12.0)
        rows += _rows("resnet18", "dlcb-dynamic", b, dyn, recompiles=1, **first,
                      **(dict(peak_mb=130.0, resident_mb=300.0, paired_ms=0.9,
                              paired_static_ms=0.88) if b == 32 else {}))
    rows += _rows("bert", "eager", 2, 3.0) + _rows("bert", "dlcb-dynamic", 2, 1.0)
    rows += _rows("bert", "torch.compile-dynamic", 2, 1.5)
    rows += _rows("gpt2", "eager", 2, 3.0) + _rows("gpt2", "dlcb-dynamic", 2, 0.5)   # no
    # torch.compile-dynamic cell here: gpt2 stays out of that ratio
    bm.frame(rows).to_csv(tmp_path / "models.csv", index=False)
    t = figures.targets(figures.load([tmp_path / "models.csv"])).set_index("target")

    def row(start):
        (hit,) = [k for k in t.index if k.startswith(start)]
        return t.loc[hit]

    assert math.isclose(row("images: dynamic / reduce").measured, math.sqrt(2.5 * 4) / 2)
    assert math.isclose(row("images: dynamic over eager").measured, math.sqrt(2.5 * 4))
    assert row("images: slowest").measured == 2.5 and row("images: slowest").met
    worst = row("images: worst dynamic / static")
    # batch 32: 1.0 against 0.8 ms in cells apart, 0.9 against 0.88 timed in turn (these win)
    assert math.isclose(worst.measured, 0.40 / 0.39) and worst.met
    assert math.isclose(row("text: dynamic / torch.compile dynamic").measured, 1.5)
    assert math.isnan(row("text: dynamic / reduce").measured)
    assert row("text: dynamic / reduce").met is pd.NA
    assert row("new shape: worst first call (").measured == 12.0
    assert row("new shape: worst first call (").met
    vs_eager = row("new shape: worst first call /")   # at batch 32: 12 against eager's 8 ms
    assert vs_eager.measured == 1.5 and not vs_eager.met
    bm.frame([bm._row("resnet18", "dlcb-dynamic", (32, None, 32), "first_call_cold_ms", 24.0)]
             ).to_csv(tmp_path / "own.csv", index=False)   # eager's first call in DLCB's process
    t = figures.targets(figures.load([tmp_path / "models.csv", tmp_path / "own.csv"]))
    t = t.set_index("target")
    assert row("new shape: worst first call /").measured == 0.5   # 12 against 24 ms
    assert row("new shape: worst first call /").met
    assert row("cold compile: median").measured == 0.3
    assert row("recompiles").measured == 1 and not row("recompiles").met   # cumulative: once
    assert math.isclose(row("memory above").measured, 1.3) and not row("memory above").met
    total = row("memory at 32, weights")   # 130 + 300 against 100 + 300 MiB
    assert math.isclose(total.measured, 430 / 400) and total.met
