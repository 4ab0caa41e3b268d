"""The sweep harness (``dl.bench.run``, ``dlcb-lab bench``) on CPU: cells over models x systems
x resolutions in parallel child processes, the long-form CSV written as cells finish, resume
(nothing re-measured; another configuration refused), a killed cell recorded and run again with
``retry_failed``, a sweep stopped by SIGTERM taking its cell process with it, Ray tasks on a
local instance, and the console script."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import dlcb_lab as dl
from dlcb_lab import cli
from dlcb_lab.bench import harness
from dlcb_lab.bench import models as bm

SMALL = dict(device="cpu", tiny=True, batches=(1, 2), text_shapes=[(1, 8), (2, 16)], reps=2,
             warmup=1, progress=False)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    df = dl.bench.run(models=["resnet18", "bert"], systems=["eager", "dlcb-dynamic"],
                      resolutions=(32, 40), out=out, workers=2, timeout=600, **SMALL)
    return out, df


def test_cells_columns_and_csv(sweep):
    out, df = sweep
    assert list(df.columns) == bm.COLUMNS
    ms = df[df.metric == "ms"]
    assert (ms.error == "").all() and ms.value.notna().all(), ms.to_string()
    cells = [(m, s, None if pd.isna(r) else int(r)) for m, s, r in
             ms[["model", "system", "res"]].drop_duplicates().itertuples(index=False)]
    assert cells == [("resnet18", "eager", 32), ("resnet18", "dlcb-dynamic", 32),
                     ("resnet18", "eager", 40), ("resnet18", "dlcb-dynamic", 40),
                     ("bert", "eager", None), ("bert", "dlcb-dynamic", None)]   # plan order
    assert len(ms) == 12   # two shapes per cell
    dyn = df[(df.system == "dlcb-dynamic") & (df.metric == "recompiles")]
    assert (dyn.value == 0).all()   # one compile per cell serves both batches
    saved = pd.read_csv(out / "models.csv")
    assert len(saved) == len(df) and list(saved.columns) == bm.COLUMNS
    env = json.loads((out / "env.json").read_text())
    assert env["config"]["dtype"] == "float32" and env["models"] == ["resnet18", "bert"]


def test_resume_measures_nothing_again(sweep, monkeypatch):
    out, df = sweep

    def no(*a, **k):
        raise AssertionError("a finished cell ran again")
    monkeypatch.setattr(bm, "run_process", no)
    again = dl.bench.run(models=["resnet18", "bert"], systems=["eager", "dlcb-dynamic"],
                         resolutions=(32, 40), out=out, workers=2, **SMALL)
    pd.testing.assert_frame_equal(again.reset_index(drop=True), df.reset_index(drop=True))
    with pytest.raises(ValueError, match="another configuration.*reps"):
        dl.bench.run(models=["bert"], systems=["eager"], out=out,
                     **{**SMALL, "reps": 3})


def test_killed_cell_is_recorded_then_retried(tmp_path):
    args = dict(models=["bert"], systems=["eager"], out=tmp_path, **SMALL)
    df = dl.bench.run(timeout=0.5, **args)   # the child cannot even import torch in time
    ms = df[df.metric == "ms"]
    assert len(ms) == 2 and ms.value.isna().all()
    assert ms.error.str.startswith("process killed after the 0.5 s timeout").all()
    kept = dl.bench.run(timeout=600, **args)   # resumed: the failure stays a result
    assert kept[kept.metric == "ms"].value.isna().all()
    done = dl.bench.run(timeout=600, retry_failed=True, **args)
    ms = done[done.metric == "ms"]
    assert len(ms) == 2 and ms.value.notna().all() and (ms.error == "").all()
    assert len(pd.read_csv(tmp_path / "models.csv")) == len(done)


def _cells_running(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line holds ``marker``."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmd and "--one" in cmd and state != "Z":
            pids.append(int(d.name))
    return pids


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
@pytest.mark.parametrize("entry", [["dlcb_lab.cli", "bench", "--workers", "1"],
                                   ["dlcb_lab.bench.models"]], ids=["cli", "bench.models"])
def test_sigterm_stops_the_sweep_and_its_cell_process(tmp_path, entry):
    reps = 987_653   # cells that would run for hours (the second one waiting), and the mark
    # of their command lines
    marker = f'"reps": {reps}'
    sweep = subprocess.Popen(
        [sys.executable, "-m", *entry, "--device", "cpu", "--tiny", "--models", "resnet18",
         "--systems", "eager,dlcb-dynamic", "--batches", "1", "--res", "32", "--reps", str(reps),
         "--warmup", "1", "--out", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (cells := _cells_running(marker)):
            assert sweep.poll() is None and time.monotonic() < deadline, "no cell started"
            time.sleep(0.2)
        sweep.send_signal(signal.SIGTERM)
        assert sweep.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _cells_running(marker):   # SIGKILLed; reaped by the sweep or by init
            assert time.monotonic() < deadline, f"cell processes {cells} outlived the sweep"
            time.sleep(0.1)
        assert not (tmp_path / "models.csv").exists()   # no finished cell, no half a result
    finally:
        sweep.kill()
        for pid in _cells_running(marker):
            os.killpg(pid, signal.SIGKILL)


def test_ray_local_instance(tmp_path):
    pytest.importorskip("ray")
    df = dl.bench.run(models=["bert"], systems=["eager", "torch.compile-cudagraphs"], ray="",
                      out=tmp_path, timeout=600, **SMALL)
    ms = df[df.metric == "ms"].set_index("system")
    assert ms.loc["eager"].value.notna().all() and (ms.loc["eager"].error == "").all()
    assert ms.loc["torch.compile-cudagraphs"].error.str.startswith("skipped").all()


def test_console_script(tmp_path, capsys):
    (ep,) = [e for e in md.entry_points(group="console_scripts") if e.name == "dlcb-lab"]
    assert ep.value == "dlcb_lab.cli:main"
    rc = cli.main(["bench", "--models", "resnet18", "--systems", "torch.compile-cudagraphs",
                   "--device", "cpu", "--tiny", "--batches", "1", "--out", str(tmp_path)])
    assert rc == 0 and "1 rows, 0 timed cells of 1" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["bench", "--models", "no_such_model", "--out", str(tmp_path / "x")])
    assert "unknown models ['no_such_model']" in capsys.readouterr().err


def test_plan_fixed_resolution_models_get_their_own():
    cells = harness.plan(["vit_b_16", "bert"], ["eager"], (32, 64), bm.Config())
    assert [str(c) for c in cells] == ["vit_b_16 eager 224px", "bert eager"]
