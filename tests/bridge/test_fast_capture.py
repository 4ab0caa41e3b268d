"""The fast capture path (bridge.fast): a module no Python line of which reads a size is exported
statically and generalized by the solver; it gives the dims and results of the torch.export path
at every shape; a module that reads or branches on a size takes torch.export and keeps its
guards."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import dlcb_lab as dl
from dlcb_lab.bridge import fast


@pytest.fixture(autouse=True)
def no_capture_cache(monkeypatch):
    monkeypatch.setenv("DLCB_CAPTURE_CACHE", "0")   # each compile traces


def _dims(cm):
    g = cm.pipeline.graph
    return [[str(g.solver.resolve(d)) for d in v.shape.items]
            for v in g.inputs[:len(cm.signature.inputs)]]


class Head(nn.Module):
    """Certified constructs: leaves, functions, methods, torchvision's wrapped stochastic_depth,
    a second input broadcast against the first's batch."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x, y):
        h = F.hardswish(self.bn(self.conv(x)))
        h = torch.cat([h, h * torch.sigmoid(h)], 1).permute(0, 2, 3, 1).contiguous()
        h = torchvision.ops.stochastic_depth(h.permute(0, 3, 1, 2), 0.2, "row", self.training)
        return self.fc(torch.flatten(self.pool(h), 1)) + y


HEAD_SHAPES = [((2, 3, 16, 16), (2, 5)), ((3, 3, 20, 12), (3, 5)), ((1, 3, 16, 16), (1, 5)),
               ((4, 3, 9, 31), (1, 5))]


def _head_inputs(shapes):
    return tuple(torch.randn(*s) for s in shapes)


def test_the_fast_path_and_export_give_the_same_dims_and_results(monkeypatch):
    torch.manual_seed(0)
    m = Head().eval()
    fast_cm = dl.compile(m, _head_inputs(HEAD_SHAPES[0]), backend="cpu")
    assert fast_cm.stats()["capture_path"] == "fast"
    monkeypatch.setattr(fast, "certify", lambda module: "forced by the test")
    export_cm = dl.compile(m, _head_inputs(HEAD_SHAPES[0]), backend="cpu")
    assert export_cm.stats()["capture_path"] == "export: forced by the test"
    assert _dims(fast_cm) == _dims(export_cm)
    with torch.no_grad():
        for shapes in HEAD_SHAPES:
            xs = _head_inputs(shapes)
            torch.testing.assert_close(fast_cm(*xs), m(*xs), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(export_cm(*xs), m(*xs), rtol=1e-4, atol=1e-4)
    assert fast_cm.stats()["compiles"] == export_cm.stats()["compiles"]


@pytest.mark.parametrize("name", ["resnet18", "squeezenet1_1"])
def test_zoo_models_take_the_fast_path_with_exports_dims(monkeypatch, name):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(2, 3, 32, 32)
    cm = dl.compile(m, (x,), backend="cpu")
    assert cm.stats()["capture_path"] == "fast"
    monkeypatch.setattr(fast, "certify", lambda module: "forced")
    assert _dims(cm) == _dims(dl.compile(m, (x,), backend="cpu"))
    with torch.no_grad():
        for shape in [(2, 3, 32, 32), (3, 3, 40, 24), (1, 3, 32, 32)]:
            xx = torch.randn(*shape)
            torch.testing.assert_close(cm(xx), m(xx), rtol=1e-4, atol=1e-4)


class Padded(nn.Module):   # a branch on a size (Swin's padding): symbolic_trace refuses it
    def forward(self, x):
        if x.shape[-1] % 4:
            x = F.pad(x, (0, 4 - x.shape[-1] % 4))
        return x * 2


class ReadsSize(nn.Module):   # a size read into arithmetic: a static trace would bake D
    def forward(self, x):
        return x * x.size(-1)


class Upsampled(nn.Module):   # interpolate computes its output size in Python
    def __init__(self):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2)

    def forward(self, x):
        return self.up(x)


@pytest.mark.parametrize("module, why", [
    (Padded(), "symbolic_trace"), (ReadsSize(), "method .size()"),
    (Upsampled(), "leaf module Upsample"), (torchvision.models.swin_t().eval(), "call of _get_relative_position_bias"),
    (torchvision.models.vit_b_16().eval(), "getattr"),
])
def test_modules_that_read_sizes_are_not_certified(module, why):
    assert why in fast.certify(module)


@pytest.mark.parametrize("m, shapes", [
    (Padded(), [(2, 8), (2, 6), (3, 4), (1, 7)]),
    (ReadsSize(), [(2, 8), (2, 5), (3, 16)]),
    (Upsampled(), [(1, 2, 4, 4), (2, 2, 5, 3)]),
])
def test_modules_that_read_sizes_keep_their_guards_and_equal_eager(m, shapes):
    cm = dl.compile(m, (torch.randn(*shapes[0]),), backend="cpu")
    assert cm.stats()["capture_path"].startswith("export: ")
    for s in shapes:
        x = torch.randn(*s)
        torch.testing.assert_close(cm(x), m(x))
