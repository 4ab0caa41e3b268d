"""Graph passes, the memory plan, and capture through ``torch.fx.wrap`` leaves, size branches and
``torch._assert``, checked against eager and against the invariants each pass states."""

from __future__ import annotations

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import dlcb_lab as dl
import test_nn_ops
from dlcb_lab.hostgen.lower import LibraryCall, Src
from dlcb_lab.passes import PIPELINE

CNN = {0: {0: "N", 2: "H", 3: "W"}}


class ConvBN(test_nn_ops.ConvBN):
    """conv -> batch norm with non-trivial statistics -> relu -> a 1x1 conv."""

    def __init__(self, bias: bool = False):
        super().__init__(bias=bias)
        self.conv2 = nn.Conv2d(6, 4, 1)

    def forward(self, x):
        return self.conv2(super().forward(x)) + x.mean()


def _close(cm, m, *ins):
    with torch.no_grad():
        torch.testing.assert_close(cm(*ins), m(*ins), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias", [False, True], ids=["no-conv-bias", "conv-bias"])
def test_batch_norm_folds_into_conv(bias):
    """Also through a convolution's bias: (conv + b) * s + t  ->  conv' + (b * s + t), one add."""
    m = ConvBN(bias).eval()
    cm = dl.compile(m, (torch.randn(2, 3, 9, 10),), dynamic=CNN, backend="cpu")
    g = cm.pipeline.graph
    convs = [n for n in g.nodes if n.op.name == "conv2d"]
    assert len(convs) == 2
    for n in g.nodes:   # nothing scales a convolution's result: the scale is in the weight
        assert not (n.op.name == "mul" and any(x.producer in convs for x in n.tensor_inputs()))
    assert not any(n.op.name in ("rsqrt", "sub") for n in g.nodes)   # folded to constants
    names = [r.name for r in cm.pipeline.passes]
    assert names == [p.__name__ for p in PIPELINE]
    rewrite = cm.pipeline.passes[names.index("rewrite")]
    assert any(c.startswith("conv_scale") for c in rewrite.changes), rewrite
    conv1 = convs[0].out
    epilogue = [n.op.name for n in g.nodes if conv1 in n.tensor_inputs()]
    assert epilogue == ["add"], epilogue   # bias and BN shift merged into one constant
    if bias:
        assert {c.split(":")[0] for c in rewrite.changes} >= {"shift_scale", "shift_shift"}
    for n, h, w in ((1, 9, 10), (3, 16, 7), (2, 5, 5)):
        _close(cm, m, torch.randn(n, 3, h, w))


class SeqFirstLinear(nn.Module):
    """ViT's attention in-projection: batch-first tokens transposed to sequence-first, then a
    linear (torch runs one small GEMM per sequence position on the permuted operand)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 12)

    def forward(self, x):
        y = self.proj(x.transpose(1, 0))
        return y.relu() * 2, y.permute(2, 0, 1).sum(0)


def test_linear_of_permute_runs_on_rows():
    m = SeqFirstLinear().eval()
    cm = dl.compile(m, (torch.randn(3, 5, 8),), dynamic={0: {0: "N", 1: "S"}}, backend="cpu")
    rewrite = cm.pipeline.passes[[r.name for r in cm.pipeline.passes].index("rewrite")]
    assert any(c.startswith("linear_of_permute") for c in rewrite.changes), rewrite
    calls = [st for st in cm._thunk.plan.steps if isinstance(st, LibraryCall)]
    assert [st.op.name for st in calls] == ["linear"]
    assert calls[0].operands[0] == (calls[0].operands[0][0], ())   # no view: x itself
    assert calls[0].operands[0][0].src is Src.INPUT
    for n, s in ((3, 5), (1, 7), (4, 1)):
        _close(cm, m, torch.randn(n, s, 8))


def test_partition_and_epilogue():
    m = ConvBN().eval()
    cm = dl.compile(m, (torch.randn(2, 3, 9, 10),), dynamic=CNN, backend="cpu")
    part = cm.pipeline.partition
    assert part.counts() == {"library": 2, "generated": 3}
    kinds = [s.kind for s in part.steps]
    assert kinds[0] == "library" and kinds[1] == "generated"
    assert part.steps[1].ops == ("add", "relu")   # bias (folded BN shift) + relu: the epilogue
    df = part.to_frame()
    assert list(df.columns) == ["step", "kind", "value", "n_ops", "ops", "launches", "why"]
    assert (df["why"] == "").all()   # why a step runs eagerly: none does here


def _plan_invariants(cm):
    """No buffer is read after the step that frees it; every intermediate is freed exactly once;
    outputs never are."""
    plan = cm.pipeline.launch_plan
    outs = {o.index for o in plan.outputs}
    freed: dict[int, int] = {}
    for i, (step, frees) in enumerate(zip(plan.steps, plan.frees)):
        reads = [o for o, _ in step.operands] if isinstance(step, LibraryCall) else \
            [o for v in step.variants for o in v.operands]
        for o in reads:
            assert not (o.src is Src.BUFFER and o.index in freed), (i, o)
        for b in frees:
            assert b not in freed and b not in outs
            freed[b] = i
    produced = {s.out for s in plan.steps}
    assert produced - outs == set(freed)


@pytest.mark.parametrize("model", ["convbn", "resblock"])
def test_memory_plan_frees_after_last_use(model):
    if model == "convbn":
        m, x = ConvBN().eval(), torch.randn(2, 3, 9, 10)
    else:
        import torchvision
        m, x = torchvision.models.resnet18().layer1.eval(), torch.randn(2, 64, 8, 8)
    cm = dl.compile(m, (x,), dynamic=CNN, backend="cpu")
    _plan_invariants(cm)
    _close(cm, m, x)


class Residual(nn.Module):
    """A residual stream read by three layer-norm kernels per block: recomputing it per kernel
    would grow with depth."""

    def __init__(self, depth=3):
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(16, 16) for _ in range(depth))
        self.lns = nn.ModuleList(nn.LayerNorm(16) for _ in range(depth))

    def forward(self, x):
        for lin, ln in zip(self.lins, self.lns):
            x = x + lin(ln(x)).relu()
        return x


def test_fuse_materializes_shared_residual_stream():
    m = Residual().eval()
    cm = dl.compile(m, (torch.randn(2, 5, 16),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    fuse = next(r for r in cm.pipeline.passes if r.name == "fuse")
    assert fuse.changes, "no shared value was materialized"
    longest = max(s.ops for s in cm.pipeline.partition.steps if s.kind == "generated")
    assert len(longest) <= 8, longest   # bounded, not growing with depth
    for n, L in ((1, 5), (3, 7)):
        _close(cm, m, torch.randn(n, L, 16))


# --- fx.wrap'd functions, branches and asserts on sizes ---------------------------------------------

@torch.fx.wrap
def _windowed(x: torch.Tensor, w: int) -> torch.Tensor:
    """Python control flow on literal sizes, a mask built with real torch ops, a symbolic batch."""
    b, h, c = x.shape
    pad = (w - h % w) % w
    if pad:
        x = F.pad(x, (0, 0, 0, pad))
    mask = x.new_zeros((x.shape[1],))
    mask[h:] = -1.0
    y = x.view(b, x.shape[1] // w, w, c).sum(2)
    return y + mask[::w].unsqueeze(-1)


class Opaque(nn.Module):
    def forward(self, x):
        return _windowed(x.relu(), 4) * 2


def test_wrapped_function_is_traced_through():
    """A ``torch.fx.wrap`` leaf (as Swin's ``shifted_window_attention``) is no leaf to export:
    its ops, the in-place mask write included, become IR; the batch stays symbolic."""
    m = Opaque()
    cm = dl.compile(m, (torch.randn(2, 10, 3),), dynamic={0: {0: "N"}}, backend="cpu",
                    fallback=False)
    assert cm.stats()["thunk"] == "dynamic"
    for n in (1, 4):
        _close(cm, m, torch.randn(n, 10, 3))


@torch.fx.wrap
def _branchy(x: torch.Tensor) -> torch.Tensor:
    return x * 2 if x.shape[0] > 3 else x


class Branchy(nn.Module):
    def forward(self, x):
        return _branchy(x)


def test_branch_on_symbolic_size_is_guarded():
    """Export takes the branch the example takes and records ``N >= 4`` as the dim's range: the
    compiled module is right inside the range and refuses a call outside it before any launch
    (it must not run the ``x * 2`` branch at N = 2)."""
    m = Branchy()
    cm = dl.compile(m, (torch.randn(4, 3),), dynamic={0: {0: "N"}}, backend="cpu")
    for n in (4, 9):
        _close(cm, m, torch.randn(n, 3))
    with pytest.raises(dl.ShapeMismatch, match="N"):
        cm(torch.randn(2, 3))


class Asserted(nn.Module):
    def forward(self, x):
        torch._assert(x.shape[1] == 8, "width must be 8")
        return x * 3


def test_assert_pins_a_dim():
    """``torch._assert`` on a size: export specializes the axis; a dim declared on it is a
    ``ShapeError`` naming the dim, its input axis and the literal."""
    cm = dl.compile(Asserted(), (torch.randn(2, 8),), dynamic={0: {0: "N"}}, backend="cpu")
    _close(cm, Asserted(), torch.randn(5, 8))
    with pytest.raises(dl.ShapeMismatch):
        cm(torch.randn(5, 7))
    with pytest.raises(dl.ShapeError) as ei:
        dl.compile(Asserted(), (torch.randn(2, 8),), dynamic={0: {0: "N", 1: "C"}},
                   backend="cpu")
    msg = str(ei.value)
    assert "dim C (input 0 'x' axis 1)" in msg and "fixes it to 8" in msg, msg
    assert "torch.export" in msg and "specializes it" in msg, msg
