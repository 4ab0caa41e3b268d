"""``bench.scenarios`` on CPU: the per-kernel profile (operators counted per call, systems side
by side, a real DLCB compile against eager), a new shape's first calls (the cold compile at the
first shape only, the first call's host operators, eager copies beside), the CLI, and the index
of scenarios: every command parses, every sweep metric it names is documented."""

from __future__ import annotations

import importlib
import json

import pytest
import torch

from dlcb_lab import cli
from dlcb_lab.bench import models as bm
from dlcb_lab.bench import scenarios as sc


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3)
        self.b = torch.nn.Conv2d(8, 8, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x))).sigmoid()


def test_kernel_times_counts_each_operator_per_call():
    m, x = _Net().eval(), torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        k = sc.kernel_times(lambda: m(x), reps=4, warmup=1, cuda=False).set_index("kernel")
    assert k.loc["aten::conv2d", "calls"] == 2 and k.loc["aten::relu", "calls"] == 1
    assert k.loc["aten::sigmoid", "calls"] == 1
    assert (k.us >= 0).all() and k.us.is_monotonic_decreasing
    assert k.us.max() > 0


@pytest.fixture(scope="module")
def kernels():
    return sc.kernels("resnet18", ("eager", "dlcb-dynamic"), batches=(1, 2), res=32,
                      device="cpu", tiny=True, reps=2, warmup=1)


def test_kernels_scenario_runs_each_system_at_each_shape(kernels):
    df = kernels
    assert list(df.columns) == ["model", "batch", "seq", "res", "system", "kernel", "us", "calls"]
    assert [tuple(r) for r in df[["system", "batch"]].drop_duplicates().itertuples(index=False)] \
        == [("eager", 1), ("eager", 2), ("dlcb-dynamic", 1), ("dlcb-dynamic", 2)]
    assert (df.res == 32).all() and df.seq.isna().all()
    eager = df[df.system == "eager"].set_index(["batch", "kernel"])
    assert eager.loc[(1, "aten::conv2d"), "calls"] == 20   # resnet18: 17 convs + 3 downsamples
    dyn = df[df.system == "dlcb-dynamic"].set_index(["batch", "kernel"])
    for b in (1, 2):   # the convolutions are library calls; the rest is generated (numba,
        assert dyn.loc[(b, "aten::conv2d"), "calls"] == 20   # which the profiler cannot see)
        names = dyn.loc[b].index
        for op in ("batch_norm", "relu", "max_pool2d", "add_"):
            assert eager.loc[b].index.str.contains(op).any(), op
            assert not names.str.contains(op).any(), op


def test_side_by_side_puts_the_largest_differences_first(kernels):
    t = sc.side_by_side(kernels, top=5)
    assert list(t.columns) == ["model", "batch", "seq", "res", "kernel", "eager us", "eager n",
                               "dlcb-dynamic us", "dlcb-dynamic n"]
    assert list(t.groupby("batch").size()) == [5, 5]
    for _, g in t.groupby("batch"):
        diff = (g["eager us"].fillna(0) - g["dlcb-dynamic us"].fillna(0)).abs()
        assert diff.is_monotonic_decreasing


def test_first_call_compiles_at_the_first_shape_only():
    times, ops = sc.first_call("resnet18", "dlcb-dynamic", batches=(1, 2), res=32, tiny=True,
                               device="cpu", top=4)
    steps = ["setup", "call 1", "call 2", "call 3"]
    for b in (1, 2):
        t = times[times.batch == b]
        assert [tuple(r) for r in t[["system", "step"]].itertuples(index=False)] == \
            [("dlcb-dynamic", s) for s in steps] + \
            [(e, f"call {n}") for e in ("eager-copy", "eager-channels-last") for n in (1, 2)]
        assert (t.ms > 0).all()
    setup = times[times.step == "setup"].set_index("batch").ms
    assert setup[2] < setup[1] / 100   # the cold compile at batch 1; batch 2 reuses it
    assert list(ops.groupby("batch").size()) == [4, 4]
    for _, g in ops.groupby("batch"):
        assert g.self_cpu_ms.is_monotonic_decreasing and (g.calls >= 1).all()
    text, _ = sc.first_call("bert", "eager", text_shapes=((1, 8),), tiny=True, device="cpu")
    assert set(text.system) == {"eager", "eager-copy"}   # no channels-last copy for text


def test_cli_writes_the_tables(tmp_path, capsys):
    assert sc.main(["kernels", "resnet18", "--tiny", "--device", "cpu", "--systems", "eager",
                    "--batches", "1", "--reps", "2", "--warmup", "0", "--top", "3",
                    "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["model", "batch", "seq", "res", "kernel", "eager", "us", "eager",
                              "n"]
    assert len(out) == 1 + 3
    import pandas as pd

    df = pd.read_csv(tmp_path / "kernels.csv")
    assert set(df.system) == {"eager"} and (df.res == bm.TINY["res"]).all()
    env = json.loads((tmp_path / "env.json").read_text())
    assert env["scenario"]["scenario"] == "kernels" and env["models"] == ["resnet18"]
    with pytest.raises(SystemExit):
        sc.main(["kernels", "resnet18", "--device", "cpu", "--systems", "eager-cudagraph"])
    assert "eager-cudagraph needs CUDA" in capsys.readouterr().err


def test_every_scenario_command_parses_and_its_metrics_are_documented(capsys):
    for name, s in sc.SCENARIOS.items():
        words = [w.replace("MODEL", "resnet18") for w in s.command.split()]
        if words[0] == "dlcb-lab":
            main, argv = cli.main, words[1:]
        else:
            assert words[:2] == ["python", "-m"], s.command
            main, argv = importlib.import_module(words[2]).main, words[3:]
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--help"])
        assert stop.value.code == 0, name
        for metric in s.metrics:
            assert metric in bm.__doc__, (name, metric)
    sc.main(["list"])
    listed = capsys.readouterr().out
    assert all(name in listed for name in sc.SCENARIOS)


def test_data_index_lists_every_scenario_with_its_command():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "data" / "README.md").read_text()
    methods = text.split("\n## Methods\n", 1)[1].split("\n## ", 1)[0]
    rows = {c[0]: c[1].strip("`") for c in
            ([x.strip() for x in ln.strip().strip("|").split(" | ")]
             for ln in methods.splitlines() if ln.startswith("| ") and "---" not in ln)
            if c[0] != "scenario"}
    assert rows == {name: s.command for name, s in sc.SCENARIOS.items()}
