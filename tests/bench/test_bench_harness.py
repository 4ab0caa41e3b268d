"""The sweep harness (``dl.bench.run``, ``dlcb-lab bench``) on CPU: cells over models x systems
x resolutions in parallel child processes, the long-form CSV written as cells finish, resume
(nothing re-measured; another configuration refused), a killed cell recorded and run again with
``retry_failed``, a sweep stopped by SIGTERM taking its cell process with it, Ray tasks on a
local instance, and the console script: every option's default in ``--help``, what ``--tiny``
resolves to, and one line per untimed cell saying why."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
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


def _options(help_text: str) -> dict[str, str]:
    """``--help``'s option entries, each on one line, by option name."""
    body = help_text.split("options:", 1)[1]
    return {b.split()[0].rstrip(","): " ".join(b.split())
            for b in re.split(r"\n  (?=-)", body) if b.strip()}


@pytest.mark.parametrize("entry", [lambda: cli.main(["bench", "--help"]),
                                   lambda: bm.main(["--help"])], ids=["cli", "bench.models"])
def test_help_shows_every_default(entry, capsys):
    with pytest.raises(SystemExit) as stop:
        entry()
    assert stop.value.code == 0
    opts = _options(capsys.readouterr().out)
    assert {"--models", "--batches", "--tiny", "--reps", "--res", "--out", "--timeout"} <= set(opts)
    for name, text in opts.items():
        if name != "-h":
            assert "(default: " in text and "None" not in text, text
    csv = lambda v: ",".join(map(str, v))   # noqa: E731
    f, t = bm.FULL, bm.TINY
    assert f"(default: {csv(f['batches'])}; --tiny: {csv(t['batches'])})" in opts["--batches"]
    assert f"(default: {csv(f['seqs'])}; --tiny: {csv(t['seqs'])})" in opts["--seqs"]
    assert f"(default: {f['res']}; --tiny: {t['res']})" in opts["--res"]
    assert f"(default: {f['reps']}; --tiny: {t['reps']})" in opts["--reps"]
    assert f"(default: {f['warmup']}; --tiny: {t['warmup']})" in opts["--warmup"]
    assert "(default: 3600.0)" in opts["--timeout"] and "(default: off)" in opts["--tiny"]
    assert "(default: float32)" in opts["--dtype"]
    assert f"(default: {', '.join(bm.DEFAULT_MODELS)})" in opts["--models"]


def test_tiny_resolves_to_a_small_sweep(tmp_path):
    """``--tiny``: 64x64 images at batches 1 and 2, text 1-2 x 8-16, 10 timed calls; an option
    the command names wins. Run through the CLI with a system the CPU skips (no process), so
    the rows show the shapes the cells would have measured."""
    assert cli.main(["bench", "--tiny", "--device", "cpu", "--models", "resnet18,bert",
                     "--systems", "eager-cudagraph", "--out", str(tmp_path / "a")]) == 0
    cfg = json.loads((tmp_path / "a" / "env.json").read_text())["config"]
    assert (cfg["tiny"], cfg["batches"], cfg["seqs"], cfg["reps"], cfg["warmup"]) == \
        (True, [1, 2], [8, 16], 10, 2)
    df = pd.read_csv(tmp_path / "a" / "models.csv")
    shapes = lambda m, k: sorted((int(b), int(v)) for b, v in   # noqa: E731
                                 df[df.model == m][["batch", k]].itertuples(index=False))
    assert shapes("resnet18", "res") == [(1, 64), (2, 64)]
    assert shapes("bert", "seq") == [(1, 8), (1, 16), (2, 8), (2, 16)]
    assert cli.main(["bench", "--tiny", "--device", "cpu", "--models", "resnet18",
                     "--systems", "eager-cudagraph", "--batches", "3", "--res", "48",
                     "--reps", "4", "--out", str(tmp_path / "b")]) == 0
    cfg = json.loads((tmp_path / "b" / "env.json").read_text())["config"]
    assert (cfg["batches"], cfg["reps"], cfg["warmup"]) == ([3], 4, 2)
    assert list(pd.read_csv(tmp_path / "b" / "models.csv").res) == [48]
    full = bm.shape_defaults(False, batches=None, seqs=None, res=None, reps=None, warmup=None)
    assert full == bm.FULL and bm.FULL["res"] == 224 and bm.FULL["batches"] == (1, 8, 32)


def test_untimed_cells_say_why_one_line_each(tmp_path, capsys):
    """A system this device lacks and a cell whose process hits the timeout: one console line
    each, with the reason; the timed summary still prints."""
    rc = cli.main(["bench", "--tiny", "--device", "cpu", "--models", "resnet18",
                   "--systems", "eager,eager-cudagraph", "--timeout", "0.5", "--workers", "1",
                   "--out", str(tmp_path)])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    notes = [ln for ln in lines if ln.startswith(("skipped ", "failed "))]
    assert len(notes) == 2, lines
    assert "skipped resnet18 eager-cudagraph 64px: eager-cudagraph needs CUDA (CUDA graphs); " \
           "device is cpu" in notes
    (failed,) = [ln for ln in notes if ln.startswith("failed ")]
    assert failed.startswith("failed resnet18 eager 64px (2 of 2 shapes): process killed after "
                             "the 0.5 s timeout")
    assert "(no timed cell)" in lines and "no eager times: no speedup summary" in lines
