"""``torch.compile(model, backend="dlcb")`` (``dlcb_lab.bridge.dynamo``): the entry-point
registration, one DLCB compile per Dynamo graph across batch changes (``dynamic=True`` and the
default automatic dynamic shapes), graph breaks, and the eager fallbacks with their reasons."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

from dlcb_lab.bridge import dynamo

BATCHES = (2, 4, 8)


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    dynamo.clear_log()
    yield
    torch._dynamo.reset()
    dynamo.clear_log()


class MLP(nn.Module):
    """Reads its batch size (a SymInt placeholder under dynamic shapes)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 6)

    def forward(self, x):
        return torch.nn.functional.gelu(self.b(torch.relu(self.a(x)))).view(x.shape[0], 3, 2)


def _check_batches(model, make, dynamic, batches=BATCHES, rtol=1e-5, atol=1e-6):
    """Run the compiled ``model`` at each batch against eager; the log after each call."""
    f = torch.compile(model, backend="dlcb", dynamic=dynamic)
    logs = []
    with torch.no_grad():
        for b in batches:
            x = make(b)
            torch.testing.assert_close(f(x), model(x), rtol=rtol, atol=atol)
            logs.append(dynamo.records())
    return logs


def _assert_one_compile_per_graph(logs, dynamic):
    """Every graph ran compiled; ``dynamic=True``: one graph for all batches; automatic
    dynamic: a static graph at the first batch, one dynamic graph for the rest."""
    last = logs[-1]
    assert all(r.compiled for r in last), last
    assert dynamo.compiles() == len(last)
    assert all(r.module.stats()["compiles"] == 1 for r in last)
    if dynamic:
        assert len(last) == 1 and last[0].calls == len(BATCHES)
        assert "s" in next(iter(last[0].dims.values()))[0]   # the batch axis is a named dim
    else:
        assert [len(lg) for lg in logs] == [1, 2, 2]
        static, dyn = last
        assert static.dims == {} and static.calls == 1
        assert dyn.dims and dyn.calls == len(BATCHES) - 1


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
def test_mlp_batch_change_compiles_once(dynamic):
    torch.manual_seed(0)
    logs = _check_batches(MLP().eval(), lambda b: torch.randn(b, 8), dynamic)
    _assert_one_compile_per_graph(logs, dynamic)
    rec = logs[-1][-1]
    assert rec.dropped, "x.shape[0] should reach the graph as an int argument, dropped for DLCB"
    (axes,) = rec.dims.values()
    assert list(axes) == [0]


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
def test_resnet18_batch_change_compiles_once(dynamic):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    logs = _check_batches(model, lambda b: torch.randn(b, 3, 32, 32), dynamic, atol=1e-5)
    _assert_one_compile_per_graph(logs, dynamic)
    rec = logs[-1][-1]
    if dynamic:   # dynamic=True: batch and the (equal) spatial dims, BN's eps/momentum baked in
        (axes,) = rec.dims.values()
        assert sorted(axes) == [0, 2, 3] and axes[2] == axes[3] != axes[0]
        assert rec.module.stats()["compiles"] == 1


class Branchy(nn.Module):
    """A data-dependent branch and an explicit break: Dynamo splits it into several graphs."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.a(x))
        if x.sum() > 0:
            y = y * 2
        else:
            y = torch.tanh(y) - 1
        torch._dynamo.graph_break()
        return self.b(y).softmax(-1)


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
def test_graph_break_pieces_compile(dynamic):
    torch.manual_seed(0)
    model = Branchy().eval()
    f = torch.compile(model, backend="dlcb", dynamic=dynamic)
    with torch.no_grad():
        for b in BATCHES:
            x = torch.randn(b, 8).abs() + 0.1
            for inp in (x, -x):   # both branches
                torch.testing.assert_close(f(inp), model(inp), rtol=1e-5, atol=1e-6)
    log = dynamo.records()
    assert len(log) >= 4, log   # head, each branch, tail
    assert all(r.compiled for r in log), log
    if dynamic:
        assert len(log) == 4 and all(r.calls == 2 * len(BATCHES) or r.calls == len(BATCHES)
                                     for r in log), log


def test_entry_point_registered_without_import():
    """``"dlcb"`` is listed by Dynamo and usable before anything imports dlcb_lab."""
    code = (
        "import sys, torch, torch._dynamo\n"
        "assert 'dlcb' in torch._dynamo.list_backends(), torch._dynamo.list_backends()\n"
        "assert 'dlcb_lab' not in sys.modules\n"
        "f = torch.compile(lambda x: torch.relu(x) * 2, backend='dlcb')\n"
        "x = torch.randn(3, 5)\n"
        "assert torch.equal(f(x), torch.relu(x) * 2)\n"
        "from dlcb_lab.bridge import dynamo\n"
        "assert dynamo.compiles() == 1, dynamo.records()\n"
        "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.abspath(__file__)), timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def _complex(x):   # a dtype DLCB does not take: the graph, not an op, runs eagerly
    return torch.view_as_real(x.to(torch.complex64) * 2).sum(-1) + 1


def test_unsupported_op_runs_eager_with_reason():
    fn = _complex

    f = torch.compile(fn, backend="dlcb")
    x = torch.randn(4, 7)
    torch.testing.assert_close(f(x), fn(x))
    (rec,) = dynamo.records()
    assert not rec.compiled and rec.module is None
    assert rec.reason.startswith("UnsupportedOp") and "complex64" in rec.reason, rec.reason
    assert dynamo.compiles() == 0 and rec.calls == 1


def test_unsupported_op_raises_without_fallback():
    from dlcb_lab.errors import UnsupportedOp

    f = torch.compile(_complex, backend="dlcb", options={"fallback": False})
    with pytest.raises(Exception) as info:
        f(torch.randn(4, 7))
    err = info.value
    assert isinstance(getattr(err, "inner_exception", err), UnsupportedOp), repr(err)


def test_unknown_option_is_a_spec_error():
    from dlcb_lab.errors import SpecError

    f = torch.compile(torch.relu, backend="dlcb", options={"fallbak": False})
    with pytest.raises(Exception) as info:
        f(torch.randn(3))
    err = getattr(info.value, "inner_exception", info.value)
    assert isinstance(err, SpecError) and "fallbak" in str(err)


def test_int_argument_not_a_size_runs_eager():
    """An int Dynamo keeps symbolic that no tensor axis carries cannot be re-derived."""
    def fn(x, n):
        return x * n + 1

    f = torch.compile(fn, backend="dlcb", dynamic=True)
    for n in (3, 5):
        x = torch.randn(4, 2)
        torch.testing.assert_close(f(x, n), fn(x, n))
    (rec,) = dynamo.records()
    assert not rec.compiled and "not the size of any tensor input" in rec.reason, rec.reason
    assert rec.calls == 2


def test_grad_mode_runs_eager_and_backpropagates():
    torch.manual_seed(0)
    model = MLP()
    f = torch.compile(model, backend="dlcb")
    x = torch.randn(4, 8)
    f(x).sum().backward()
    (rec,) = dynamo.records()
    assert not rec.compiled and "grad" in rec.reason
    assert model.a.weight.grad is not None and model.a.weight.grad.abs().sum() > 0


def test_changed_unspecialized_scalar_runs_eager():
    """Under ``dynamic=True`` a float argument is an unguarded 0-d tensor input read by
    ``.item()``; DLCB bakes its example value, and a call with another value runs eagerly."""
    def fn(x, alpha):
        return torch.relu(x) * alpha + 1

    f = torch.compile(fn, backend="dlcb", dynamic=True)
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(f(x, 0.5), fn(x, 0.5))
        (rec,) = dynamo.records()
        assert rec.compiled and rec.eager_calls == 0 and rec.dropped, rec
        torch.testing.assert_close(f(x, 2.5), fn(x, 2.5))
        torch.testing.assert_close(f(x, 0.5), fn(x, 0.5))
    assert len(dynamo.records()) == 1, dynamo.records()
    assert rec.calls == 3 and rec.eager_calls == 1 and "2.5" in rec.last_mismatch


def test_module_float_attribute_change():
    """BN's ``eps`` (a float attribute) changed after the compile: the result follows it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    with torch.no_grad():
        model[1].running_var.uniform_(0.5, 2.0)
    f = torch.compile(model, backend="dlcb", dynamic=True)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(f(x), model(x), rtol=1e-5, atol=1e-6)
        model[1].eps = 0.5
        torch.testing.assert_close(f(x), model(x), rtol=1e-5, atol=1e-6)
    assert dynamo.records()[0].compiled


def _conv_bn():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    with torch.no_grad():
        model[1].running_var.uniform_(0.5, 2.0)
        model[1].running_mean.uniform_(-1.0, 1.0)
    return model


@pytest.mark.parametrize("freeze", [False, True], ids=["inputs", "frozen"])
def test_parameters_inputs_or_frozen(freeze):
    """Parameters are DLCB inputs (a second instance reuses the graph, compiled) or, frozen,
    constants (a second instance, whose tensors differ, runs eagerly)."""
    torch.manual_seed(0)
    m1, m2 = _conv_bn(), _conv_bn()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        for m in (m1, m2):
            f = torch.compile(m, backend="dlcb", options={"freeze": freeze})
            torch.testing.assert_close(f(x), m(x), rtol=1e-5, atol=1e-6)
    (rec,) = dynamo.records()
    consts = len(rec.module._constants)
    assert rec.compiled and rec.calls == 2
    # frozen: six tensors in (conv weight, bias; BN's four), two constants out: BN folded
    assert (consts, rec.eager_calls) == ((2, 1) if freeze else (0, 0)), (consts, rec)
    assert len(rec.dropped) == (6 if freeze else 0)


def test_tuple_output_structure():
    def fn(x, y):
        return x + y, (x * y).sum(-1)

    f = torch.compile(fn, backend="dlcb")
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    with torch.no_grad():
        got = f(x, y)
    assert isinstance(got, tuple) and len(got) == 2
    for g, e in zip(got, fn(x, y)):
        torch.testing.assert_close(g, e)
    assert dynamo.compiles() == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
def test_mlp_cuda_batch_change_compiles_once(dynamic):
    """CUDA inputs pick the cuda backend (the callable, not the entry point: a GPU machine may
    run the tests without the package installed)."""
    torch.manual_seed(0)
    model = MLP().eval().cuda()
    f = torch.compile(model, backend=dynamo.dlcb, dynamic=dynamic)
    logs = []
    with torch.no_grad():
        for b in BATCHES:
            x = torch.randn(b, 8, device="cuda")
            torch.testing.assert_close(f(x), model(x), rtol=1e-5, atol=1e-5)
            logs.append(dynamo.records())
    _assert_one_compile_per_graph(logs, dynamic)
    assert all(r.backend == "cuda" for r in logs[-1])
