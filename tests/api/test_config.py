"""One configuration (``dl.Config``): environment defaults read when a compile starts, overrides per
``dl.compile`` call, recorded in the pipeline, kept by modules compiled later, saved in artifacts,
shown in the report."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

import dlcb_lab as dl
from dlcb_lab.config import SWITCHES, Config
from dlcb_lab.kgen.entries import VECTOR
from dlcb_lab.runtime.cache import cache_dir

DYN = {0: {0: "N"}}


class ConvAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 2.0 + 1.0


def _x(n=2, dtype=torch.float32):
    return torch.randn(n, 3, 6, 5, dtype=dtype)


def _layouts(cm) -> list[str]:
    return [n.attrs.get("layout", "NCHW") for n in cm.pipeline.graph.nodes
            if n.op.name == "conv2d"]


def _check(cm, m, x):
    torch.testing.assert_close(cm(x), m(x), rtol=1e-4, atol=1e-4)


@pytest.fixture()
def model():
    torch.manual_seed(0)
    return ConvAdd().eval()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for s in SWITCHES[1:]:   # the cache folder stays the tests' (conftest)
        monkeypatch.delenv(s.env, raising=False)


def test_env_default_and_call_override(monkeypatch, model):
    """The environment gives the defaults, read as the compile starts; a call's mapping
    overrides them; the pipeline records both and where each came from."""
    monkeypatch.setenv("DLCB_CHANNELS_LAST", "0")
    off = dl.compile(model, (_x(),), dynamic=DYN, backend="cpu")
    assert _layouts(off) == ["NCHW"] and off.pipeline.config.channels_last is False
    assert off.pipeline.config.source("channels_last") == "env"
    log = next(p.changes for p in off.pipeline.passes if p.name == "channels_last")
    assert log == ("off (config channels_last=False)",)
    assert "config: channels_last=False (env)" in repr(off.pipeline)
    on = dl.compile(model, (_x(),), dynamic=DYN, backend="cpu", config={"channels_last": True})
    assert _layouts(on) == ["NHWC"] and on.pipeline.config.source("channels_last") == "call"
    monkeypatch.delenv("DLCB_CHANNELS_LAST")
    dflt = dl.compile(model, (_x(),), dynamic=DYN, backend="cpu")
    assert _layouts(dflt) == ["NHWC"] and dflt.pipeline.config == Config()
    assert "config:" not in repr(dflt.pipeline)   # nothing off its default
    call = dl.compile(model, (_x(),), dynamic=DYN, backend="cpu",
                      config=dl.Config(channels_last=False, depthwise="library"))
    assert _layouts(call) == ["NCHW"]
    assert [r[3] for r in call.pipeline.config.rows()][1:] == \
        ["default", "default", "default", "call", "call", "default", "default", "default",
         "default"]
    for cm in (off, on, dflt, call):
        _check(cm, model, _x(3))


def test_vectorize_and_numba_parallel_change_what_is_built(model):
    """``vectorize=False``: no vectorized entry point in the CUDA parts; ``numba_parallel``: the
    numba functions' ``parallel``."""
    cm = dl.compile(model, (_x(),), dynamic=DYN, backend="cpu")
    k = cm.pipeline.kernels[-1]
    entry = re.compile(r'extern "C" __global__[^(]*\b(\w+)\(')
    on = {n for part in k.cuda_parts for n in entry.findall(part)}
    assert any(n.endswith(VECTOR) for n in on), on
    no_v = dl.compile(model, (_x(),), dynamic=DYN, backend="cpu", config={"vectorize": False})
    off = {n for part in no_v.pipeline.kernels[-1].cuda_parts for n in entry.findall(part)}
    assert off == {n for n in on if not n.endswith(VECTOR)}
    assert "parallel=False" in k.numba_source
    par = Config.from_env(numba_parallel=True)
    assert "parallel=True" in type(k)(k.body, "cpu", k.signatures, config=par).numba_source


def test_saved_and_restored(tmp_path, model):
    """An artifact holds the config; the loaded module runs with it."""
    cfg = {"channels_last": False, "vectorize": False, "cuda_graphs": 3}
    cm = dl.compile(model, (_x(),), dynamic=DYN, backend="cpu", config=cfg)
    loaded = dl.load(cm.save(tmp_path / "m.dlcb"))
    got = loaded.pipeline.config
    assert got == cm.pipeline.config and got.changed() == cfg
    assert all(got.source(k) == "call" for k in cfg)
    assert _layouts(loaded) == ["NCHW"]
    assert all(k.config == got for k in loaded.pipeline.kernels)
    _check(loaded, model, _x(4))


def test_later_compiles_keep_the_config(monkeypatch):
    """A module compiled later (another dtype) uses the first compile's config, not the
    environment of the moment."""
    class F(nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0 + 1.0

    f = F()
    cm = dl.compile(f, (_x(),), dynamic=DYN, backend="cpu", config={"vectorize": False})
    monkeypatch.setenv("DLCB_VECTORIZE", "1")
    monkeypatch.setenv("DLCB_CHANNELS_LAST", "0")
    x = _x(3, torch.float64)
    torch.testing.assert_close(cm(x), f(x))   # another dtype: compiled now
    (jit,) = cm.jit.values()
    assert jit.pipeline.config == cm.pipeline.config == Config(vectorize=False)
    assert jit.pipeline.config.source("vectorize") == "call"


def test_refusals(monkeypatch, model):
    with pytest.raises(dl.SpecError, match="no switch 'vectorise'"):
        dl.compile(model, (_x(),), backend="cpu", config={"vectorise": False})
    with pytest.raises(dl.SpecError, match=r"cache_dir is process-wide: set \$DLCB_CACHE_DIR"):
        Config.from_env(cache_dir="/tmp/x")
    with pytest.raises(dl.SpecError, match="Config.depthwise must be 'generated' or 'library'"):
        Config(depthwise="cudnn")
    with pytest.raises(dl.SpecError, match="Config.cuda_graphs must be a graph count"):
        dl.compile(model, (_x(),), backend="cpu", config={"cuda_graphs": -1})
    with pytest.raises(dl.SpecError, match="config must be a dl.Config or a mapping"):
        dl.compile(model, (_x(),), backend="cpu", config=["vectorize"])
    monkeypatch.setenv("DLCB_CUDA_GRAPHS", "many")
    with pytest.raises(ValueError, match="DLCB_CUDA_GRAPHS='many'"):
        dl.compile(model, (_x(),), backend="cpu")


def test_cache_dir_is_the_process_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DLCB_CACHE_DIR", str(tmp_path / "c"))
    cfg = Config()
    assert cfg.cache_dir == str(tmp_path / "c") and cfg.source("cache_dir") == "env"
    assert cache_dir("cubin") == tmp_path / "c" / "cubin"


def test_report_table(model):
    from dlcb_lab.viz.report import sections

    cm = dl.compile(model, (_x(),), dynamic=DYN, backend="cpu", config={"vectorize": False})
    summary = dict(sections(cm.report()))["Summary"]
    assert "<h4>Configuration</h4>" in summary
    assert "<td>vectorize</td><td>False</td><td>True</td><td>call</td>" in summary
