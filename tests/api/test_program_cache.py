"""The program cache (artifact.program): a compile of the same module on the same call, under the
same settings, loads the finished program (no capture, passes, kgen or build); the constants the
passes derived (a batch norm folded into the convolution, merged q/k/v weights) are recomputed
from the live module, so new weights give what a fresh compile gives, bit for bit; a constant
index out of range, other settings, a damaged entry are misses; another process hits it."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import dlcb_lab as dl
from dlcb_lab.artifact import program


class Net(nn.Module):
    """A folded batch norm (kxk convolution: scaled weights), three linears of one input (one
    merged GEMM), and a constant index buffer read against a literal extent (checked at compile
    time)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.register_buffer("idx", torch.tensor([0, 2, 1, 7]))

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))).mean((2, 3))
        return (self.q(y) * self.k(y) + self.v(y))[:, self.idx]


SHAPES = [(2, 3, 8, 8), (5, 3, 12, 7), (1, 3, 8, 8)]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DLCB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DLCB_PROGRAM_CACHE", "1")   # the suite's default is off (conftest)
    return tmp_path / "cache"


def _net() -> Net:
    torch.manual_seed(0)
    m = Net().eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


def _x(shape=SHAPES[0]) -> torch.Tensor:
    return torch.randn(*shape)


def _compile(m, **kw):
    cm = dl.compile(m, (_x(),), backend="cpu", **kw)
    program.wait()
    return cm


def test_a_second_compile_loads_the_program_and_equals_eager(cache_dir):
    program.wait()   # no write of an earlier test lands in this folder
    m = _net()
    cold = _compile(m)
    assert cold.stats()["program"] == "miss" and {"passes", "kgen", "build"} <= set(
        cold.pipeline.timings)
    assert len(list((cache_dir / "program").glob("*.dlcb"))) == 1
    warm = _compile(m)
    st = warm.stats()
    assert (st["program"], st["capture"], st["kernel_builds"]) == ("hit", "hit", 0)
    assert set(warm.pipeline.timings) == {"capture", "load"}
    assert [d.how for d in warm.pipeline.graph.derived] == \
        [d.how for d in cold.pipeline.graph.derived]
    with torch.no_grad():
        for s in SHAPES:
            x = _x(s)
            torch.testing.assert_close(warm(x), m(x), rtol=1e-5, atol=1e-5)
            assert torch.equal(warm(x), cold(x))


def test_new_weights_give_what_a_fresh_compile_gives(cache_dir):
    m = _net()
    cold = _compile(m)
    hows = {getattr(d.how, "name", d.how) for d in cold.pipeline.graph.derived}
    assert {"scale_out_channels", "cat"} <= hows   # the folded conv, the merged linears
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p))
        m.bn.running_var.uniform_(0.5, 2.0)
        m.idx.copy_(torch.tensor([7, 6, 0, 1]))
    warm = _compile(m)
    fresh = _compile(m, config={"program_cache": False})
    assert warm.stats()["program"] == "hit" and fresh.stats()["program"] == "off"
    with torch.no_grad():
        for s in SHAPES:
            x = _x(s)
            assert torch.equal(warm(x), fresh(x))
            torch.testing.assert_close(warm(x), m(x), rtol=1e-4, atol=1e-4)


def test_a_constant_index_out_of_range_misses_and_is_refused(cache_dir):
    m = _net()
    assert _compile(m, dynamic=False).pipeline.launch_plan.constant_indices
    with torch.no_grad():
        m.idx.copy_(torch.tensor([0, 9, 1, 2]))
    with pytest.raises(dl.ShapeError, match=r"values outside \[0, 8\)"):
        _compile(m, dynamic=False)


def test_other_settings_are_other_programs(cache_dir):
    m = _net()
    _compile(m)
    for kw in ({"config": {"channels_last": False}}, {"strict": False}, {"fallback": False},
               {"dynamic": False}):
        assert _compile(m, **kw).stats()["program"] == "miss", kw
    assert _compile(m, config={"numba_workers": 1}).stats()["program"] == "hit"
    assert len(list((cache_dir / "program").glob("*.dlcb"))) == 5


def test_a_damaged_entry_is_a_miss_and_is_rewritten(cache_dir):
    m = _net()
    _compile(m)
    (entry,) = (cache_dir / "program").glob("*.dlcb")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    again = _compile(m)
    assert again.stats()["program"] == "miss"
    with torch.no_grad():
        x = _x(SHAPES[1])
        torch.testing.assert_close(again(x), m(x), rtol=1e-5, atol=1e-5)
    assert _compile(m).stats()["program"] == "hit"


def test_off_switches(cache_dir, monkeypatch):
    m = _net()
    _compile(m)
    assert _compile(m, config={"program_cache": False}).stats()["program"] == "off"
    assert _compile(m, config={"capture_cache": False}).stats()["program"] == "off"
    monkeypatch.setenv("DLCB_PROGRAM_CACHE", "0")
    assert _compile(m).stats()["program"] == "off"


SCRIPT = textwrap.dedent("""
    import sys, torch
    import dlcb_lab as dl
    sys.path.insert(0, {tests!r})
    from api.test_program_cache import _net, _x, SHAPES
    m = _net()
    cm = dl.compile(m, (_x(),), backend="cpu")
    with torch.no_grad():
        x = _x(SHAPES[1])
        err = (cm(x) - m(x)).abs().max().item()
    print(cm.stats()["program"], cm.stats()["kernel_builds"], err < 1e-5)
""")


def test_another_process_loads_the_program(cache_dir):
    """A restarted service: the second process compiles nothing."""
    script = SCRIPT.format(tests=os.path.dirname(os.path.dirname(__file__)))
    env = {**os.environ, "DLCB_CACHE_DIR": str(cache_dir)}

    def run() -> str:
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.split("\n")[-2]

    assert run().split()[0] == "miss"
    assert run() == "hit 0 True"


@pytest.mark.gpu
def test_cuda_program_loads_its_cubins(cache_dir):
    m = _net().cuda()
    x = torch.randn(2, 3, 8, 8, device="cuda")
    dl.compile(m, (x,))
    program.wait()
    warm = dl.compile(m, (x,))
    assert warm.stats()["program"] == "hit" and warm.stats()["kernel_builds"] == 0
    with torch.no_grad():
        for s in SHAPES:
            xx = torch.randn(*s, device="cuda")
            torch.testing.assert_close(warm(xx), m(xx), rtol=1e-4, atol=1e-4)
