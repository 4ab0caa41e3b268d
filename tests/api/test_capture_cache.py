"""The capture cache (artifact.capture): a second compile of the same module on the same example
call reads the lowered program back instead of tracing; anything the capture read that changed
(the module's source, a parameter's shape, a dtype, an attribute, torch's version, the spec, a
value the lowering folded) misses; a damaged entry is a miss; a hit computes what eager does
with the module's current weights."""

import importlib.util
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import dlcb_lab as dl
from dlcb_lab.artifact import capture as cache

SOURCE = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        self.scale = 2.0

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).flatten(1) * self.scale
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DLCB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DLCB_PROGRAM_CACHE", "0")   # each compile reads the capture cache
    return tmp_path / "cache"


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def netmod(tmp_path):
    path = tmp_path / "capture_cache_net.py"
    path.write_text(SOURCE)
    yield path, _load(path, "capture_cache_net")
    sys.modules.pop("capture_cache_net", None)


def _net(mod, **kw):
    torch.manual_seed(0)
    m = mod.Net(**kw).eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    return m


def _x(n=2, h=8, w=8):
    return torch.randn(n, 3, h, w)


def _check(cm, m, *shapes):
    with torch.no_grad():
        for s in shapes:
            x = _x(*s)
            torch.testing.assert_close(cm(x), m(x), rtol=1e-4, atol=1e-4)


def test_second_compile_hits_and_equals_eager(cache_dir, netmod):
    _, mod = netmod
    m = _net(mod)
    first = dl.compile(m, (_x(),), backend="cpu")
    assert first.stats()["capture"] == "miss"
    again = dl.compile(m, (_x(),), backend="cpu")
    assert again.stats()["capture"] == "hit"
    assert again.pipeline.timings["lower"] == 0   # read back lowered
    assert [str(d) for d in again.pipeline.graph.inputs[0].shape.items] == \
        [str(d) for d in first.pipeline.graph.inputs[0].shape.items]
    _check(again, m, (2, 8, 8), (5, 12, 7), (1, 8, 8))
    assert again.stats()["compiles"] == first.stats()["compiles"]


def test_a_hit_uses_the_modules_current_weights(cache_dir, netmod):
    _, mod = netmod
    m = _net(mod)
    dl.compile(m, (_x(),), backend="cpu")
    with torch.no_grad():   # same shapes, new values: the entry serves, the weights are live
        m.conv.weight.mul_(-3)
        m.bn.running_var.mul_(4)
    hit = dl.compile(m, (_x(),), backend="cpu")
    assert hit.stats()["capture"] == "hit"
    _check(hit, m, (3, 9, 9))


@pytest.mark.parametrize("change", ["source", "parameter shape", "dtype", "attribute",
                                    "torch version", "spec", "unread attribute",
                                    "example shape"])
def test_anything_the_capture_read_that_changed_misses(cache_dir, netmod, monkeypatch, change):
    path, mod = netmod
    m = _net(mod)
    x = _x()
    dl.compile(m, (x,), backend="cpu")
    kw = {}
    if change == "source":   # the same class name, one token of its forward changed
        path.write_text(SOURCE.replace("torch.relu(", "torch.sigmoid("))
        mod = _load(path, "capture_cache_net")
        m = _net(mod)
    elif change == "parameter shape":
        m = _net(mod, width=6)
    elif change == "dtype":
        m, x = m.double(), x.double()
    elif change == "attribute":
        m.scale = 3.0
    elif change == "torch version":
        monkeypatch.setattr(torch, "__version__", torch.__version__ + "+other")
    elif change == "spec":
        kw = {"dynamic": {"x": {0: "B"}}}
    elif change == "unread attribute":
        m.flatten_input = True   # an attribute forward never reads changes the key too
    elif change == "example shape":
        x = _x(3, 8, 8)   # another example shape: its own entry (pins, size-1 handling)
    cm = dl.compile(m, (x,), backend="cpu", **kw)
    assert cm.stats()["capture"] == "miss", change
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x), rtol=1e-4, atol=1e-4)


def test_two_lambdas_of_one_file_are_two_programs(cache_dir):
    class Apply(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)

    fns = [lambda x: x * 2, lambda x: x + 2]   # one qualname, two bodies
    x = torch.randn(3, 5)
    for fn in fns:
        cm = dl.compile(Apply(fn), (x,), backend="cpu")
        assert cm.stats()["capture"] == "miss"
        torch.testing.assert_close(cm(x), fn(x))


def test_a_folded_value_of_other_parameter_values_misses(cache_dir):
    class Table(nn.Module):   # a table gathered from a parameter by a buffer: folded
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(7, 4))
            self.register_buffer("index", torch.tensor([3, 1, 6, 0]))

        def forward(self, x):
            return x + self.table[self.index]

    m, x = Table(), torch.randn(5, 4, 4)
    dl.compile(m, (x,), backend="cpu")
    assert dl.compile(m, (x,), backend="cpu").stats()["capture"] == "hit"
    with torch.no_grad():
        m.table.add_(1.0)
    cm = dl.compile(m, (x,), backend="cpu")
    assert cm.stats()["capture"] == "miss"
    with torch.no_grad():
        torch.testing.assert_close(cm(x), m(x))


def test_a_damaged_entry_is_a_miss(cache_dir, netmod):
    _, mod = netmod
    m = _net(mod)
    dl.compile(m, (_x(),), backend="cpu")
    (entry,) = (cache_dir / "capture").glob("*.dlcb")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    cm = dl.compile(m, (_x(),), backend="cpu")
    assert cm.stats()["capture"] == "miss"
    _check(cm, m, (2, 8, 8))
    assert dl.compile(m, (_x(),), backend="cpu").stats()["capture"] == "hit"   # rewritten


def test_uncacheable_and_off_trace_every_time(cache_dir, monkeypatch):
    class Holder(nn.Module):
        def forward(self, x):
            return x * 2

    m, x = Holder(), torch.randn(4)
    m.thing = object()   # no state to walk, printed by its address: no stable token
    cm = dl.compile(m, (x,), backend="cpu")
    assert cm.stats()["capture"] == "uncacheable: <root>: object has no stable token"
    torch.testing.assert_close(cm(x), x * 2)
    monkeypatch.setenv("DLCB_CAPTURE_CACHE", "0")
    m.thing = 1
    assert dl.compile(m, (x,), backend="cpu").stats()["capture"] == "off"
    assert dl.compile(m, (x,), backend="cpu", config={"capture_cache": True}) \
        .stats()["capture"] == "miss"


def test_key_covers_local_helpers_of_the_models_file(tmp_path):
    """A helper the forward calls from another local file is part of the key."""
    (tmp_path / "cc_helper.py").write_text("def act(x):\n    return x * 2\n")
    (tmp_path / "cc_model.py").write_text(textwrap.dedent("""
        import torch.nn as nn
        from cc_helper import act

        class M(nn.Module):
            def forward(self, x):
                return act(x)
    """))
    sys.path.insert(0, str(tmp_path))
    try:
        helper = _load(tmp_path / "cc_helper.py", "cc_helper")
        model = _load(tmp_path / "cc_model.py", "cc_model")
        x = torch.randn(3)
        k1 = cache.key(model.M(), (x,), None, "auto")
        (tmp_path / "cc_helper.py").write_text("def act(x):\n    return x * 3\n")
        assert cache.key(model.M(), (x,), None, "auto") != k1
        assert helper.act is model.act
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("cc_helper", "cc_model"):
            sys.modules.pop(name, None)


SCALE = 2.0


class Scaled(nn.Module):
    def forward(self, x):
        return x * SCALE


def test_a_module_level_number_rebound_at_run_time_misses(cache_dir, monkeypatch):
    x = torch.randn(3, 4)
    assert dl.compile(Scaled(), (x,), backend="cpu").stats()["capture"] == "miss"
    assert dl.compile(Scaled(), (x,), backend="cpu").stats()["capture"] == "hit"
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 5.0)
    cm = dl.compile(Scaled(), (x,), backend="cpu")
    assert cm.stats()["capture"] == "miss"
    torch.testing.assert_close(cm(x), x * 5.0)
