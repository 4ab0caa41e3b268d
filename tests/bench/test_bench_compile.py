"""``python -m dlcb_lab.bench.compile`` (``dlcb-lab compile``): the per-(model, system) table
and the compile targets, computed by hand from synthetic long-form rows (GPU and CPU targets, a
failed cell, a recompile); the CLI's defaults and options as the run's configuration and shapes
(through systems the CPU skips: no process); the time budget, resume and plan order with the
cell process replaced (``bench.models`` and ``bench.harness`` tests run the real ones)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from dlcb_lab import cli
from dlcb_lab.bench import compile as bc
from dlcb_lab.bench import models as bm
from dlcb_lab.bench import zoo

IMG = [(1, None, 224), (8, None, 224), (32, None, 224)]
TXT = [(1, 32, None), (8, 128, None), (32, 128, None)]


def _cell(model, system, shapes, cold=None, later_ms=(), recompiles=(), warm=None, first_ms=None,
          phases=None, error=""):
    """A cell's rows as ``bench.models`` writes them: ``ms`` at every shape; at the first
    ``compile_s`` (``cold``), ``first_call_ms``, ``phase_<k>_s``; at the later ones
    ``recompile_s`` and ``first_call_ms`` (``later_ms``); ``recompiles`` cumulative per shape;
    ``warm_compile_s`` at the first shape."""
    rows = []
    for i, shape in enumerate(shapes):
        if error:
            rows.append(bm._row(model, system, shape, "ms", None, error))
            continue
        rows.append(bm._row(model, system, shape, "ms", 1.0))
        if i == 0:
            rows.append(bm._row(model, system, shape, "compile_s", cold))
            rows.append(bm._row(model, system, shape, "first_call_ms", first_ms))
            rows += [bm._row(model, system, shape, f"phase_{k}_s", v)
                     for k, v in (phases or {}).items()]
        else:
            rows.append(bm._row(model, system, shape, "recompile_s", later_ms[i - 1] / 1e3))
            rows.append(bm._row(model, system, shape, "first_call_ms", later_ms[i - 1]))
        if recompiles:
            rows.append(bm._row(model, system, shape, "recompiles", recompiles[i]))
    if warm is not None and not error:
        rows.append(bm._row(model, system, shapes[0], "warm_compile_s", warm))
    return rows


DLCB_PH = dict(capture=0.2, lower=0.01, generalize=0.001, passes=0.05, kgen=0.04, hostgen=0.01,
               build=0.1)
TORCH_PH = dict(dynamo=1.0, aot=2.0, inductor=15.0)


def _gpu_run() -> pd.DataFrame:
    rows = _cell("resnet18", "dlcb-dynamic", IMG, 0.5, (12.0, 18.0), (0, 0, 0), 0.1, 30.0,
                 DLCB_PH)
    rows += _cell("resnet18", "torch.compile", IMG, 20.0, (10_000.0, 5.0), (0, 1, 1), 5.0,
                  19_000.0, TORCH_PH)
    rows += _cell("resnet18", "torch.compile-cudagraphs", IMG, 8.0, (7_000.0, 6_000.0))
    rows += _cell("bert", "dlcb-dynamic", TXT, 2.5, (25.0, 9.0), (0, 1, 1), 0.2, 40.0, DLCB_PH)
    rows += _cell("bert", "torch.compile", TXT, 30.0, (9_000.0, 4.0), (0, 1, 1))
    rows += _cell("bert", "torch.compile-cudagraphs", TXT,
                  error="process exited with 1: RuntimeError: boom")
    rows += _cell("gpt2", "dlcb-dynamic", TXT, error="setup 1x32: ValueError: no capture")
    return bm.frame(rows)


def _target(t: pd.DataFrame, start: str) -> pd.Series:
    (hit,) = [k for k in t.target if k.startswith(start)]
    return t.set_index("target").loc[hit]


def test_table_one_row_per_model_and_system():
    table, _ = bc.compile_table(_gpu_run(), "cuda")
    assert list(zip(table.model, table.system)) == [
        ("resnet18", "dlcb-dynamic"), ("resnet18", "torch.compile"),
        ("resnet18", "torch.compile-cudagraphs"), ("bert", "dlcb-dynamic"),
        ("bert", "torch.compile"), ("bert", "torch.compile-cudagraphs"), ("gpt2", "dlcb-dynamic")]
    assert list(table.columns[:7]) == ["model", "system", "res", "compile_s", "warm_compile_s",
                                       "new_shape_first_call_ms", "recompiles"]
    t = table.set_index(["model", "system"])
    r = t.loc[("resnet18", "dlcb-dynamic")]
    assert (r.res, r.compile_s, r.warm_compile_s) == (224, 0.5, 0.1)
    assert r.new_shape_first_call_ms == 18.0 and r.recompiles == 0   # worst of batch 8 and 32
    assert all(r[f"{k}_s"] == v for k, v in DLCB_PH.items())
    assert math.isclose(r.first_call_s, 0.03) and math.isnan(r.inductor_s) and r.error == ""
    tc = t.loc[("resnet18", "torch.compile")]
    assert tc.new_shape_first_call_ms == 10_000.0 and tc.recompiles == 1   # the recompile
    assert (tc.dynamo_s, tc.aot_s, tc.inductor_s) == (1.0, 2.0, 15.0)
    assert math.isnan(tc.capture_s) and math.isclose(tc.first_call_s, 19.0)
    b = t.loc[("bert", "dlcb-dynamic")]
    assert pd.isna(b.res) and b.new_shape_first_call_ms == 25.0 and b.recompiles == 1
    bad = t.loc[("bert", "torch.compile-cudagraphs")]
    assert math.isnan(bad.compile_s) and bad.error == "process exited with 1: RuntimeError: boom"
    assert math.isnan(t.loc[("gpt2", "dlcb-dynamic")].compile_s)


def test_gpu_targets_by_hand():
    _, tg = bc.compile_table(_gpu_run(), "cuda")
    assert list(tg.columns) == ["target", "measured", "op", "bound", "met", "detail"]
    median = _target(tg, "cold compile: median")   # 0.5 and 2.5: gpt2 failed, left out
    assert median.measured == 1.5 and median.bound == 0.8 and not median.met
    worst = _target(tg, "cold compile: worst")
    assert (worst.measured, worst.detail, worst.met) == (2.5, "bert", True)
    default = _target(tg, "cold compile: torch.compile / DLCB")   # resnet18 40x, bert 12x
    assert (default.measured, default.detail, default.met) == (12.0, "bert", True)
    ro = _target(tg, "cold compile: torch.compile-cudagraphs / DLCB")   # bert's failed: 16x
    assert (ro.measured, ro.detail, ro.met) == (16.0, "resnet18", True)
    rc = _target(tg, "recompiles")
    assert (rc.measured, rc.detail, rc.met) == (1.0, "bert", False)
    warm = _target(tg, "warm compile: median")
    assert math.isclose(warm.measured, 0.15) and warm.met
    first = _target(tg, "new shape: worst first call")
    assert (first.measured, first.detail, first.met) == (25.0, "bert", False)
    failed = _target(tg, "cells without a cold compile")
    assert (failed.measured, failed.detail, failed.met) == (1.0, "gpt2", False)
    out = bc.report(bc.compile_table(_gpu_run(), "cuda"))
    assert "targets (DLCB dynamic)" in out and " met " in out and " missed " in out


def test_cpu_targets_by_hand():
    at64 = [(1, None, 64), (8, None, 64)]
    rows = _cell("resnet18", "dlcb-dynamic", at64, 0.8, (9.0,), (0, 0))
    rows += _cell("resnet18", "torch.compile", at64, 30.0, (8_000.0,))
    rows += _cell("mobilenet_v3_large", "dlcb-dynamic", at64, 2.4, (9.0,))
    rows += _cell("mobilenet_v3_large", "torch.compile", at64, 20.0, (8_000.0,))
    rows += _cell("vit_b_16", "dlcb-dynamic", IMG, 4.5, (9.0, 9.0))
    _, tg = bc.compile_table(bm.frame(rows), "cpu")
    assert [t.split(" (")[0] for t in tg.target] == [
        "cold compile: resnet18 at 64x64", "cold compile: mobilenet_v3_large",
        "cold compile: worst model", "cold compile: torch.compile / DLCB, worst model",
        "cells without a cold compile"]
    r18 = _target(tg, "cold compile: resnet18")
    assert (r18.measured, r18.detail, r18.met) == (0.8, "resnet18 64px", True)
    mb = _target(tg, "cold compile: mobilenet")
    assert (mb.measured, mb.met) == (2.4, False)
    worst = _target(tg, "cold compile: worst")
    assert (worst.measured, worst.detail, worst.met) == (4.5, "vit_b_16", True)
    ratio = _target(tg, "cold compile: torch.compile / DLCB")   # 37.5x and 8.33x
    assert math.isclose(ratio.measured, 20 / 2.4) and ratio.detail == "mobilenet_v3_large"
    assert not ratio.met
    # resnet18 at another side: its 64x64 target has no data, nothing is met or missed
    _, tg = bc.compile_table(bm.frame(_cell("resnet18", "dlcb-dynamic", IMG, 0.3, (9.0, 9.0))),
                             "cpu")
    r18 = _target(tg, "cold compile: resnet18")
    assert math.isnan(r18.measured) and r18.met is pd.NA
    assert "no data" in bc.report(bc.compile_table(bm.frame(rows[:2]), "cpu"))


def test_load_runs_reads_folders_and_flat_files(tmp_path):
    (tmp_path / "h100").mkdir()
    _gpu_run().to_csv(tmp_path / "h100" / "models.csv", index=False)
    (tmp_path / "h100" / "env.json").write_text(json.dumps({"config": {"device": "cuda"}}))
    bm.frame(_cell("resnet18", "dlcb-dynamic", IMG, 1.0, (9.0, 9.0))).to_csv(
        tmp_path / "cpu_old.csv", index=False)
    (tmp_path / "cpu_old.env.json").write_text(json.dumps({"gpu": None, "config": None}))
    runs = bc.load_runs(tmp_path)
    assert [(r.name, r.device, len(r.df)) for r in runs] == [
        ("h100", "cuda", len(_gpu_run())), ("cpu_old", "cpu", 9)]
    assert bc.compile_table(runs[0].df, runs[0].device).table.equals(
        bc.compile_table(_gpu_run(), "cuda").table)


def _config(out) -> dict:
    return json.loads((out / "env.json").read_text())


def _shapes(df: pd.DataFrame, model: str) -> list[tuple]:
    d = df[(df.model == model) & (df.metric == "ms")]
    return [tuple(None if pd.isna(v) else int(v) for v in r)
            for r in d[["batch", "seq", "res"]].itertuples(index=False)]


def test_cli_defaults_and_options(tmp_path, capsys):
    """A system the CPU skips (no process): the rows show the shapes the cells would measure,
    env.json the configuration."""
    assert bc.default_systems("cuda") == bc.SYSTEMS
    assert bc.default_systems("cpu") == ("dlcb-dynamic", "torch.compile")
    out = tmp_path / "a"
    assert bc.main(["--device", "cpu", "--models", "resnet18,bert,vit_b_16",
                    "--systems", "torch.compile-cudagraphs", "--out", str(out)]) == 0
    env = _config(out)
    cfg = env["config"]
    assert (cfg["batches"], cfg["text_shapes"], cfg["reps"], cfg["warmup"], cfg["warm"]) == \
        ([1, 8, 32], [[1, 32], [8, 128], [32, 128]], 3, 1, True)
    assert env["compile"]["res"] == 64 and env["models"] == ["resnet18", "bert", "vit_b_16"]
    df = pd.read_csv(out / "models.csv")
    assert _shapes(df, "resnet18") == [(1, None, 64), (8, None, 64), (32, None, 64)]
    assert _shapes(df, "vit_b_16") == IMG   # its native side
    assert _shapes(df, "bert") == TXT
    assert df.error.str.startswith("skipped: torch.compile-cudagraphs needs CUDA").all()
    text = capsys.readouterr().out
    assert "torch.compile-cudagraphs" in text and "targets (DLCB dynamic)" in text
    # the same through dlcb-lab compile, with every shape option named
    out = tmp_path / "b"
    assert cli.main(["compile", "--device", "cpu", "--models", "resnet18,gpt2", "--systems",
                     "torch.compile-cudagraphs", "--batches", "2,4", "--text-shapes", "2x16",
                     "--res", "48", "--reps", "5", "--warmup", "0", "--no-warm",
                     "--out", str(out)]) == 0
    cfg = _config(out)["config"]
    assert (cfg["batches"], cfg["text_shapes"], cfg["reps"], cfg["warmup"], cfg["warm"]) == \
        ([2, 4], [[2, 16]], 5, 0, False)
    df = pd.read_csv(out / "models.csv")
    assert _shapes(df, "resnet18") == [(2, None, 48), (4, None, 48)]
    assert _shapes(df, "gpt2") == [(2, 16, None)]
    with pytest.raises(SystemExit):   # a folder holds one configuration
        bc.main(["--device", "cpu", "--models", "resnet18", "--systems",
                 "torch.compile-cudagraphs", "--reps", "4", "--out", str(out)])
    assert "another configuration" in capsys.readouterr().err
    out = tmp_path / "zoo"
    assert bc.main(["--device", "cpu", "--zoo", "--tiny", "--systems", "eager-cudagraph",
                    "--out", str(out)]) == 0
    env = _config(out)
    assert env["models"] == list(zoo.MODELS) and env["config"]["tiny"]
    assert env["config"]["batches"] == [1, 2] and env["compile"]["res"] == bm.TINY_RES


def test_budget_stops_between_cells_and_the_rerun_resumes(tmp_path, monkeypatch, capsys):
    ran = []

    def fake(model, system, cfg, timeout, env=None):
        ran.append((model, system))
        return [r for i, s in enumerate(cfg.shapes(model))
                for r in (bm._row(model, system, s, "ms", 1.0),
                          bm._row(model, system, s, "compile_s" if i == 0 else "recompile_s",
                                  0.5 if i == 0 else 0.0))]
    monkeypatch.setattr(bm, "run_process", fake)
    args = ["--device", "cpu", "--models", "resnet18,bert", "--systems",
            "dlcb-dynamic,torch.compile", "--out", str(tmp_path)]
    assert bc.main([*args, "--budget", "0"]) == bc.BUDGET_EXIT   # the first cell, then stop
    assert ran == [("resnet18", "dlcb-dynamic")]
    assert "3 of 4 cells left" in capsys.readouterr().err
    assert _config(tmp_path)["compile"]["cells_left"] == 3
    assert bc.main(args) == 0
    assert ran == [("resnet18", "dlcb-dynamic"), ("resnet18", "torch.compile"),
                   ("bert", "dlcb-dynamic"), ("bert", "torch.compile")]   # none twice
    df = pd.read_csv(tmp_path / "models.csv")
    assert list(dict.fromkeys(zip(df.model, df.system))) == ran   # plan order
    table = bc.compile_table(df, "cpu").table
    assert list(table.compile_s) == [0.5] * 4
    assert bc.main(args) == 0 and len(ran) == 4   # all there: nothing measured
