"""``python -m dlcb_lab.bench.models`` on CPU: a tiny ResNet-18 and a tiny BERT under eager,
dlcb-dynamic and dlcb-static (real models, real compiles, fresh caches), the long-form CSV's
columns and metrics, errors against eager, one DLCB compile for every shape, skipped CUDA-only
systems, failures as rows and as one console line per cell, the environment JSON, the CLI
through its per-process path, the geometric means of ``summary`` and the min / median / max of
``spread`` against the timed calls themselves."""

from __future__ import annotations

import json
import math
import platform
import statistics

import pandas as pd
import pytest
import torch

from dlcb_lab.bench import models as bm
from dlcb_lab.bench import zoo

CFG = bm.Config(device="cpu", batches=(1, 2), text_shapes=((1, 8), (2, 16)), res=32, tiny=True,
                reps=2, warmup=1)
SYSTEMS = ("eager", "dlcb-dynamic", "dlcb-static")
SHAPES = {"resnet18": [(1, None, 32), (2, None, 32)], "bert": [(1, 8, None), (2, 16, None)]}
DLCB_COUNTS = {"recompiles", "variants", "jit_builds", "kernel_builds", "capture_hits",
               "capture_fast", "program_hits"}
DLCB_PHASES = ("capture", "lower", "generalize", "passes", "kgen", "hostgen", "build")


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    return bm.run(["resnet18", "bert"], SYSTEMS, CFG, isolate=False)


def _cells(df: pd.DataFrame):
    for (model, system, b, s, r), g in df.groupby(["model", "system", "batch", "seq", "res"],
                                                  dropna=False):
        yield model, system, (int(b), None if pd.isna(s) else int(s),
                              None if pd.isna(r) else int(r)), g


def test_columns_shapes_and_metrics(df):
    assert list(df.columns) == bm.COLUMNS
    assert (df["error"] == "").all(), df[df["error"] != ""].to_string()
    assert df["value"].notna().all()
    for model, shapes in SHAPES.items():
        for system in SYSTEMS:
            got = df[(df.model == model) & (df.system == system) & (df.metric == "ms")]
            assert [(int(b), None if pd.isna(s) else int(s), None if pd.isna(r) else int(r))
                    for b, s, r in zip(got.batch, got.seq, got.res)] == shapes
    for _, system, shape, g in _cells(df):
        first = shape in (SHAPES["resnet18"][0], SHAPES["bert"][0])
        want = {"ms", "ms_min", "ms_max", "first_call_ms", "max_rel_err",
                "first_call_cold_ms",   # the reference's
                "compile_s" if first else "recompile_s"}
        if system.startswith("dlcb"):
            want |= DLCB_COUNTS
            if first or system == "dlcb-static":   # the shapes that compiled
                want |= {f"phase_{k}_s" for k in DLCB_PHASES}
        assert set(g.metric) == want, (system, shape)   # no peak_mb on cpu
        assert len(g) == len(want)
    t = df[df.metric.isin(["ms", "ms_min", "ms_max", "compile_s", "recompile_s",
                           "first_call_ms", "first_call_cold_ms"])]
    assert (t.value > 0).all()
    sp = bm.spread(df)
    assert len(sp) == len(SYSTEMS) * 4   # every cell timed
    assert ((sp.min_ms <= sp.median_ms) & (sp.median_ms <= sp.max_ms)).all(), sp.to_string()
    phases = df[df.metric.str.startswith("phase_")].pivot_table(
        "value", ["model", "system", "batch"], "metric")
    compile_s = df[df.metric.isin(["compile_s", "recompile_s"]) & df.system.str.startswith(
        "dlcb")].set_index(["model", "system", "batch"]).value
    total = phases.sum(axis=1)   # the steps lie inside the setup-to-first-result window
    assert (total > 0).all() and (total <= compile_s.loc[total.index] + 1e-3).all()


def test_every_row_checked_against_eager(df):
    err = df[df.metric == "max_rel_err"]
    assert len(err) == len(SYSTEMS) * 4
    assert (err.value <= 1e-4).all(), err.to_string()
    assert (err[err.system == "eager"].value == 0).all()   # a second seed-0 copy: same weights


def test_dlcb_dynamic_one_compile_for_every_shape(df):
    dyn = df[df.system == "dlcb-dynamic"]
    for metric in ("recompiles", "variants", "jit_builds"):
        assert (dyn[dyn.metric == metric].value == 0).all(), metric
    for model in SHAPES:
        d = dyn[dyn.model == model]
        builds = d[d.metric == "kernel_builds"].value
        assert builds.nunique() == 1 and builds.iloc[0] > 0   # no kernel built after compile
        (cold,) = d[d.metric == "compile_s"].value
        (later,) = d[d.metric == "recompile_s"].value
        assert later < cold / 2, (model, cold, later)
        st = df[(df.system == "dlcb-static") & (df.model == model) & (df.metric == "recompiles")]
        assert list(st.value) == [0, 1]   # one dl.compile per shape


def test_cuda_only_system_on_cpu_is_a_skipped_row_with_its_reason():
    rows = bm.run_one("resnet18", "eager-cudagraph", CFG)
    assert [(r["batch"], r["metric"]) for r in rows] == [(1, "ms"), (2, "ms")]
    for r in rows:
        assert math.isnan(r["value"])
        assert r["error"].startswith("skipped: eager-cudagraph needs CUDA")
    (r,) = bm.run_one("bert", "torch.compile-cudagraphs", bm.Config(device="cpu", tiny=True,
                                                                     text_shapes=((1, 8),)))
    assert "reduce-overhead" in r["error"] and math.isnan(r["value"])


def test_failure_is_rows_with_the_error_not_a_crash():
    """BERT's position table has 512 entries: a 600-token call fails in eager already."""
    cfg = bm.Config(device="cpu", tiny=True, text_shapes=((1, 600), (2, 600)), reps=1, warmup=0)
    rows = bm.run_one("bert", "dlcb-dynamic", cfg)
    assert [(r["seq"], r["metric"]) for r in rows] == [(600, "ms"), (600, "ms")]
    assert all(math.isnan(r["value"]) for r in rows)
    assert all(r["error"].startswith("eager reference: ") for r in rows), rows[0]["error"]


ENV_KEYS = {"python", "torch", "cuda", "cudnn", "torchvision", "transformers", "pandas",
            "dlcb_lab", "gpu", "gpu_count", "driver", "cpu", "cpu_count", "torch_threads", "os",
            "commit", "dirty", "utc", "fp32_math", "models", "systems", "config"}


def test_environment_json():
    env = bm.environment(CFG, ["resnet18"], ["eager"])
    assert ENV_KEYS <= set(env)
    assert env["config"]["device"] == "cpu" and env["models"] == ["resnet18"]
    assert bm.Config.from_dict(json.loads(json.dumps(env["config"]))) == CFG   # what --one gets
    assert env["commit"] is None or len(env["commit"]) == 40
    text = json.dumps(env)
    host = platform.node()
    assert not host or host not in text


def test_cli_runs_each_system_in_its_own_process(tmp_path, capsys):
    rc = bm.main(["--device", "cpu", "--tiny", "--models", "resnet18",
                  "--systems", "eager,eager-cudagraph", "--batches", "1", "--res", "32",
                  "--reps", "2", "--warmup", "1", "--out", str(tmp_path), "--markdown"])
    assert rc == 0
    df = pd.read_csv(tmp_path / "models.csv", keep_default_na=False, na_values={"value": [""]})
    assert list(df.columns) == bm.COLUMNS
    eager = df[df.system == "eager"].set_index("metric").value
    assert {"ms", "ms_min", "ms_max", "compile_s", "first_call_ms", "first_call_cold_ms",
            "max_rel_err"} == set(eager.index)
    assert eager["max_rel_err"] == 0 and 0 < eager["ms_min"] <= eager["ms"] <= eager["ms_max"]
    (skip,) = df[df.system == "eager-cudagraph"].itertuples()
    assert skip.metric == "ms" and skip.error.startswith("skipped:")
    assert ENV_KEYS <= set(json.loads((tmp_path / "env.json").read_text()))
    got = capsys.readouterr()
    assert "skipped resnet18 eager-cudagraph: eager-cudagraph needs CUDA" in got.err
    lines = got.out.splitlines()   # the spread of eager's calls, then the speedups
    i = lines.index("| model | batch | seq | res | system | min_ms | median_ms | max_ms |")
    assert lines[i + 2] == (f"| resnet18 | 1 |  | 32 | eager | {eager['ms_min']:.3g} | "
                            f"{eager['ms']:.3g} | {eager['ms_max']:.3g} |")
    i = lines.index("| model | batch | seq | res | eager-cudagraph |")   # untimed: blank
    assert lines[i + 2] == "| resnet18 | 1 |  | 32 |  |" and lines[i + 3].startswith("| geomean |")


def test_spread_is_min_median_max_of_the_timed_calls():
    """Two cells' real timed calls (one with a slow call) through ``timing_rows``: ``spread``'s
    columns are the calls' min, median and max, and the text report prints them."""
    work = iter([0, 0, 2_000_000, 0, 0, 0, 0, 0])   # the warm-up call, then 7: the 2nd slow
    times = bm.time_calls(lambda: sum(range(next(work))), reps=7, warmup=1, cuda=False)
    assert len(times) == 7 and max(times) == times[1] > statistics.median(times) > 0
    other = bm.time_calls(lambda: sum(range(1000)), reps=3, warmup=0, cuda=False)
    rows = bm.timing_rows("m", "eager", (1, None, 32), times) + \
        bm.timing_rows("m", "dlcb-dynamic", (1, None, 32), other)
    rows.append(dict(model="m", system="x", batch=1, seq=None, res=32, metric="ms",
                     value=math.nan, error="skipped: x needs CUDA"))   # untimed: no row
    sp = bm.spread(bm.frame(rows))
    assert list(sp.columns) == ["model", "batch", "seq", "res", "system", *bm.SPREAD]
    assert list(sp.system) == ["eager", "dlcb-dynamic"]
    for (_, r), t in zip(sp.iterrows(), (times, other)):
        assert (r.min_ms, r.median_ms, r.max_ms) == (min(t), statistics.median(t), max(t))
    text = bm.report(bm.frame(rows))
    assert "min / median / max" in text and f"{max(times):.4g}" in text
    old = bm.frame([r for r in rows if r["metric"] == "ms"])   # rows before ms_min, ms_max
    assert bm.spread(old).min_ms.isna().all() and bm.spread(old).median_ms.notna().all()


def test_untimed_cell_is_one_line_with_its_reason():
    skipped = bm.run_one("resnet18", "eager-cudagraph", CFG)
    assert bm.untimed("resnet18 eager-cudagraph", skipped) == \
        "skipped resnet18 eager-cudagraph: eager-cudagraph needs CUDA (CUDA graphs); device is cpu"
    cfg = bm.Config(device="cpu", tiny=True, text_shapes=((1, 8), (2, 600)), reps=1, warmup=0)
    line = bm.untimed("bert eager", bm.run_one("bert", "eager", cfg))
    assert line.startswith("failed bert eager (2 of 2 shapes): eager reference: ")
    assert "\n" not in line and len(line) <= 240
    timed = bm.run_one("bert", "eager", bm.Config(device="cpu", tiny=True,
                                                  text_shapes=((1, 8),), reps=1, warmup=0))
    assert bm.untimed("bert eager", timed) == ""
    late = [*timed, bm._row("bert", "eager", (2, 16, None), "ms", None, "timing 2x16: boom")]
    assert bm.untimed("bert eager", late) == "failed bert eager (1 of 2 shapes): timing 2x16: boom"


def test_summary_geomean_by_hand():
    rows = []
    for model, b, s, r, times in [("a", 1, None, 32, {"eager": 2.0, "x": 1.0, "y": 4.0}),
                                  ("a", 8, None, 32, {"eager": 4.0, "x": 1.0}),
                                  ("t", 1, 16, None, {"eager": 3.0, "x": 3.0, "y": 1.0})]:
        for system, ms in times.items():
            rows.append(dict(model=model, system=system, batch=b, seq=s, res=r, metric="ms",
                             value=ms, error=""))
            rows.append(dict(model=model, system=system, batch=b, seq=s, res=r,
                             metric="compile_s", value=99.0, error=""))
    rows.append(dict(model="t", system="y", batch=8, seq=16, res=None, metric="ms",
                     value=math.nan, error="skipped: no eager, no time"))
    s = bm.summary(bm.frame(rows))
    assert list(s.columns) == ["model", "batch", "seq", "res", "x", "y"]
    assert list(s.model) == ["a", "a", "t", "geomean"]
    assert list(s.x[:3]) == [2.0, 4.0, 1.0] and s.y[1] != s.y[1] and list(s.y[[0, 2]]) == [0.5, 3]
    assert s.x.iloc[-1] == pytest.approx(8 ** (1 / 3))   # (2 * 4 * 1) ** (1/3)
    assert s.y.iloc[-1] == pytest.approx(1.5 ** 0.5)     # over its two timed cells
    assert pd.isna(s.seq[0]) and s.seq[2] == 16 and pd.isna(s.res[2])
    md = zoo.to_markdown(s)
    assert md.splitlines()[0] == "| model | batch | seq | res | x | y |"
    assert len(md.splitlines()) == 2 + len(s)


def test_paired_times_dynamic_against_a_static_compile_in_turn():
    from dataclasses import replace

    cfg = replace(CFG, batches=(1, 2), paired=True, reps=1, warmup=0)
    rows = bm.run_one("resnet18", "dlcb-dynamic", cfg)
    got = {(r["batch"], r["metric"]): r for r in rows if r["metric"].startswith("paired")}
    assert set(got) == {(b, m) for b in (1, 2) for m in ("paired_ms", "paired_static_ms")}
    assert all(r["value"] > 0 and r["error"] == "" for r in got.values())
    assert not any(r["metric"].startswith("paired") for r in
                   bm.run_one("resnet18", "eager", cfg))   # dlcb-dynamic's alone


def test_warm_reruns_the_cell_over_its_caches(monkeypatch):
    """``--warm``: a second process over the first one's caches gives ``warm_compile_s`` and
    the phases of its first shape; DLCB's kernels come from the cache (its build phase is the
    loading, no numba compile: far under the cold one's), its program from the program cache
    (no trace, lowering, passes or build: the entry loaded)."""
    monkeypatch.setenv("DLCB_PROGRAM_CACHE", "1")   # the suite's default is off (conftest)
    cfg = bm.Config(device="cpu", batches=(1,), res=32, tiny=True, reps=1, warmup=0, warm=True)
    rows = bm.run_process("resnet18", "dlcb-dynamic", cfg, timeout=600)
    got = {r["metric"]: r["value"] for r in rows if not r["error"]}
    for p in DLCB_PHASES:
        assert got[f"phase_{p}_s"] >= 0, p
    assert {m for m in got if m.startswith("warm_phase_")} == \
        {"warm_phase_capture_s", "warm_phase_load_s"}   # the key; the program loaded
    assert (got["capture_hits"], got["program_hits"]) == (0, 0)
    assert (got["warm_capture_hits"], got["warm_program_hits"]) == (1, 1)
    assert got["warm_phase_capture_s"] < got["phase_capture_s"] / 5, got
    assert got["warm_compile_s"] > 0 and got["ms"] > 0
    assert got["warm_phase_load_s"] < got["phase_build_s"], got


@pytest.mark.slow
def test_torch_compile_phases_from_dynamo():
    """torch.compile's cells report Dynamo, AOTAutograd and Inductor time at the shape that
    compiled, and none at a shape served by the same graph."""
    cfg = bm.Config(device="cpu", text_shapes=((2, 8), (3, 8)), tiny=True, reps=1, warmup=0)
    rows = bm.run(["bert"], ["torch.compile-dynamic"], cfg, isolate=False).to_dict("records")
    first, second = ({r["metric"]: r["value"] for r in rows if r["batch"] == b} for b in (2, 3))
    assert {f"phase_{k}_s" for k in bm.TORCH_PHASES} <= set(first), first
    assert first["phase_inductor_s"] > 0 and first["phase_dynamo_s"] > 0
    assert first["compile_s"] >= sum(first[f"phase_{k}_s"] for k in bm.TORCH_PHASES)
    assert second["recompiles"] > 0 or not [k for k in second if k.startswith("phase_")], second


def test_a_model_runs_at_least_at_its_smallest_resolution():
    """The CPU zoo run asks 64x64; inception_v3 cannot go below 75 (eager refuses a 3x3 kernel
    over its 2x2 map), so it runs at 75; the others at what was asked."""
    cfg = bm.Config(device="cpu", batches=(1, 8), res=64)
    assert cfg.shapes("inception_v3") == [(1, None, 75), (8, None, 75)]
    assert cfg.shapes("resnet18") == [(1, None, 64), (8, None, 64)]
    assert bm.Config(device="cpu", batches=(1,), res=299).shapes("inception_v3") == \
        [(1, None, 299)]
    m = zoo.MODELS["inception_v3"].build()
    with torch.no_grad():
        assert m(torch.randn(1, 3, 75, 75)).shape == (1, 1000)

