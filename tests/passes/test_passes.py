"""Graph passes, the memory plan, and capture through ``torch.fx.wrap`` leaves, size branches and
``torch._assert``, checked against eager and against the invariants each pass states."""

from __future__ import annotations

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import dlcb_lab as dl
import models
from dlcb_lab.hostgen.lower import LibraryCall, Src
from dlcb_lab.ir.ops import Ops
from dlcb_lab.passes import PIPELINE
from dlcb_lab.passes.rewrite import holds_exactly

CNN = {0: {0: "N", 2: "H", 3: "W"}}


class ConvBN(models.ConvBN):
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
    (back,) = [n.out for n in g.nodes if convs[0].out in n.tensor_inputs()]   # NHWC -> NCHW
    assert back.producer.op.name == "permute"
    epilogue = [n.op.name for n in g.nodes if back in n.tensor_inputs()]
    assert epilogue == ["add"], epilogue   # bias and BN shift merged into one constant
    if bias:
        assert {c.split(":")[0] for c in rewrite.changes} >= {"shift_scale", "shift_shift"}
    for n, h, w in ((1, 9, 10), (3, 16, 7), (2, 5, 5)):
        _close(cm, m, torch.randn(n, 3, h, w))


class PointwiseConvBN(nn.Module):
    """A 1x1 convolution, batch norm and relu (ResNet's bottleneck ends, MobileNet's expansions)."""

    def __init__(self, k: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(8, 6, k, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(6)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("k, nhwc, folds", [(1, "1", False), (3, "1", True), (3, "0", False)],
                         ids=["1x1", "3x3", "3x3-nchw"])
def test_batch_norm_scale_folds_only_into_a_weight_copied_anyway(monkeypatch, k, nhwc, folds):
    """A 1x1 kernel's NHWC and NCHW orders coincide (and NCHW convolutions read the weight as
    given): the convolution reads the module's own weight storage, and the scale is a multiply in
    the epilogue, not a second copy of the weight."""
    monkeypatch.setenv("DLCB_CHANNELS_LAST", nhwc)
    m = PointwiseConvBN(k).eval()
    cm = dl.compile(m, (torch.randn(2, 8, 5, 6),), dynamic=CNN, backend="cpu")
    rewrite = cm.pipeline.passes[[r.name for r in cm.pipeline.passes].index("rewrite")]
    assert any(c.startswith("conv_scale") for c in rewrite.changes) == folds, rewrite
    own = m.conv.weight.untyped_storage().data_ptr()
    shares = any(c.untyped_storage().data_ptr() == own for c in cm._constants)
    assert shares == (not folds)
    if not folds:   # the scale and shift: one epilogue kernel after the library call
        assert [type(st).__name__ for st in cm._thunk.plan.steps] == ["LibraryCall",
                                                                     "KernelLaunch"]
    for n, h, w in ((1, 5, 6), (3, 7, 4), (2, 1, 9)):
        _close(cm, m, torch.randn(n, 8, h, w))


class Returned(nn.Module):
    """A convolution's and a linear's results returned and also read by a batch norm and a
    bias add, which the rewrites would fold into them."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
        self.lin, self.b = nn.Linear(5, 5), nn.Parameter(torch.randn(5))
        with torch.no_grad():
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x, t):
        c, a = self.conv(x), self.lin(t)
        return self.bn(c).relu(), c, a + self.b, a


def test_a_returned_value_keeps_its_value_through_the_rewrites():
    """``conv_scale``, ``shift_shift`` and ``linear_bias`` rewrite a value's only reader; a
    returned value has another (the caller): the scale stayed in the weight of the returned
    convolution, and the returned ``linear + bias`` lost its node (a KeyError in the plan)."""
    m = Returned().eval()
    cm = dl.compile(m, (torch.randn(2, 3, 8, 8), torch.randn(3, 5)),
                    dynamic={0: {0: "N"}, 1: {0: "M"}}, backend="cpu")
    for n in (1, 3):
        x, t = torch.randn(n, 3, 8, 8), torch.randn(n + 1, 5)
        with torch.no_grad():
            for got, want in zip(cm(x, t), m(x, t)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


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
    # bias (folded BN shift) + relu: the epilogue, read and written channels-last
    assert part.steps[1].ops == ("permute", "add", "relu", "permute")
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



class Twice(nn.Module):
    """The same subexpression written three times, and two that only look alike: ``where`` with
    0.0 and with -0.0 (eager keeps the sign: 1 / -0.0 is -inf), ``x + 1`` and ``x + 1.5``."""

    def forward(self, x, m):
        a, b, c = (x * 2).exp(), (x * 2).exp(), (x * 2).exp().sum(-1, keepdim=True)
        pos, neg = torch.where(m, 0.0, x), torch.where(m, -0.0, x)
        return a + b + c, 1 / pos, 1 / neg, (x + 1) * (x + 1.5)


def test_common_subexpressions_computed_once():
    m = Twice()
    x, mask = torch.randn(2, 6), torch.rand(2, 6) > 0.5
    cm = dl.compile(m, (x, mask), dynamic={0: {0: "N", 1: "L"}, 1: {0: "N", 1: "L"}},
                    backend="cpu")
    rec = next(r for r in cm.pipeline.passes if r.name == "eliminate_common")
    assert len(rec.changes) == 4, rec.changes   # two muls and two exps of the three
    ops = [n.op.name for n in cm.pipeline.graph.nodes]
    assert ops.count("exp") == 1 and ops.count("where") == 2 and ops.count("add") == 4, ops
    for n, L in ((1, 1), (3, 5), (4, 0)):
        x, mask = torch.randn(n, L), torch.rand(n, L) > 0.5
        for got, want in zip(cm(x, mask), m(x, mask)):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
            assert torch.equal(torch.signbit(got), torch.signbit(want))


def test_eager_steps_are_not_merged():
    """Two eager calls of a random op stay two draws."""

    class Noise(nn.Module):
        def forward(self, x):
            return torch.rand_like(x) - torch.rand_like(x)

    cm = dl.compile(Noise(), (torch.randn(64),), backend="cpu")
    assert [n.op.name for n in cm.pipeline.graph.nodes].count("eager") == 2
    assert cm(torch.randn(64)).abs().max() > 0


class WrittenSoftmax(nn.Module):
    def __init__(self, axis=-1, sum_axis=None):
        super().__init__()
        self.axis, self.sum_axis = axis, axis if sum_axis is None else sum_axis

    def forward(self, x):
        e = torch.exp(x - x.amax(self.axis, keepdim=True))
        return e / e.sum(self.sum_axis, keepdim=True)


def test_written_out_softmax_is_one_row_kernel():
    m = WrittenSoftmax()
    cm = dl.compile(m, (torch.randn(2, 3, 7),), dynamic={0: {0: "N", 2: "L"}}, backend="cpu")
    steps = cm.pipeline.partition.steps
    assert [s.ops for s in steps] == [("softmax",)], steps
    for n, L in ((1, 1), (3, 5), (2, 33)):
        x = torch.randn(n, 3, L) * 4
        x[0, 0, 0] = -float("inf")   # a row of one -inf: NaN, as eager
        torch.testing.assert_close(cm(x), m(x), rtol=1e-6, atol=1e-7, equal_nan=True)
    with pytest.raises(dl.ShapeMismatch, match=r"amax 'amax' \(reduces a non-empty row.*L - 1 >= 0"):
        cm(torch.randn(2, 3, 0))
    with pytest.raises(IndexError):   # eager refuses it too
        m(torch.randn(2, 3, 0))


def test_softmax_pattern_needs_one_axis_for_both_reductions():
    m = WrittenSoftmax(axis=-1, sum_axis=1)
    cm = dl.compile(m, (torch.randn(2, 3, 7),), dynamic={0: {0: "N", 2: "L"}}, backend="cpu")
    assert not any("softmax" in s.ops for s in cm.pipeline.partition.steps)
    x = torch.randn(4, 3, 5)
    torch.testing.assert_close(cm(x), m(x), rtol=1e-6, atol=1e-7)

class NormAffine(torch.nn.Module):
    """layer_norm without affine, then an elementwise scale and shift broadcast against it."""

    def __init__(self, shift=True, twice=False):
        super().__init__()
        self.shift, self.twice = shift, twice

    def forward(self, x, s, b):
        y = torch.nn.functional.layer_norm(x, x.shape[-2:])
        z = y * s + b if self.shift else s * y
        return (z, y) if self.twice else z


@pytest.mark.parametrize("shift", [True, False])
def test_norm_affine_epilogue_is_the_row_kernel(shift):
    """layer_norm(x) * s + b with per-channel s, b (and DiT's per-sample modulation, s of shape
    [N, C, 1, 1]): one row kernel, on several shapes of one compile, NaN rows as eager."""
    m = NormAffine(shift)
    for sshape in ((1, 3, 1, 1), (2, 3, 1, 1)):
        s, b = torch.randn(sshape), torch.randn(sshape)
        dyn = {0: {2: "H", 3: "W"}} if sshape[0] == 2 else {0: {0: "N", 2: "H", 3: "W"}}
        cm = dl.compile(m, (torch.randn(2, 3, 5, 4), s, b), dynamic=dyn, backend="cpu")
        assert [st.ops for st in cm.pipeline.partition.steps] == [("layer_norm",)]
        assert any(c.startswith("norm_affine") for r in cm.pipeline.passes for c in r.changes)
        for h, w in ((5, 4), (1, 7), (9, 9), (0, 3)):   # (0, 3): empty rows
            x = torch.randn(2, 3, h, w) * 3 + 1
            if h:
                x[1, 2, 0, 0] = float("inf")   # that row NaN, as eager's
            torch.testing.assert_close(cm(x, s, b), m(x, s, b), rtol=1e-5, atol=1e-6,
                                       equal_nan=True)
        if sshape[0] == 1:   # no rows at all
            x = torch.randn(0, 3, 4, 4)
            assert cm(x, s, b).shape == m(x, s, b).shape == (0, 3, 4, 4)


def test_norm_affine_stays_apart_where_eager_rounds_or_reads_the_norm():
    x, s = torch.randn(2, 3, 5, 4), torch.randn(1, 3, 1, 1)
    # the normalized tensor is also an output: its own buffer, the epilogue its own kernel
    cm = dl.compile(NormAffine(twice=True), (x, s, s), backend="cpu")
    assert len(cm.pipeline.partition.steps) == 2
    # 16-bit: eager rounds after the norm, the scale and the shift
    h = (x.to(torch.bfloat16), s.to(torch.bfloat16), s.to(torch.bfloat16))
    cm = dl.compile(NormAffine(), h, backend="cpu")
    assert len(cm.pipeline.partition.steps) == 2
    torch.testing.assert_close(cm(*h), NormAffine()(*h), rtol=0, atol=0)


# --- channels_last: convolutions and pools in NHWC, as permutes in the IR -----------------------

def _layer1():
    import torchvision
    torch.manual_seed(0)
    return torchvision.models.resnet18().layer1.eval()


def _nhwc(cm):
    return [n for n in cm.pipeline.graph.nodes if n.op.name == "conv2d"]


def test_channels_last_residual_stream_one_buffer():
    """ResNet's layer1: every conv reads and writes [N, H, W, C] buffers; a block output read by
    the next conv and by the next residual add is one NHWC buffer (its other reader goes through
    the inverse permute), and every epilogue kernel reads the conv output at its own index."""
    m = _layer1()
    cm = dl.compile(m, (torch.randn(2, 64, 8, 8),), dynamic=CNN, backend="cpu")
    g = cm.pipeline.graph
    convs = _nhwc(cm)
    assert len(convs) == 4 and all(n.attrs["layout"] == "NHWC" for n in convs)
    for n in convs:   # [N, H, W, C] in and out, a [O, kh, kw, C] constant weight
        x, w = n.inputs
        assert g.dims(x)[3].is_lit(64) and g.dims(n.out)[3].is_lit(64)
        assert [d.value for d in g.dims(w)] == [64, 3, 3, 64]
    record = next(r for r in cm.pipeline.passes if r.name == "channels_last")
    shared = [c for c in record.changes if "other readers" in c]
    assert len(shared) == 1, record   # block 1's output: conv of block 2 and its residual add
    mats = {v.name for v in g.materialized()}
    assert sum(1 for v in mats if v.endswith("_nhwc")) == 3 + 4   # 3 conv operands, 4 results
    outs = {v.name for v in g.outputs}
    for k in cm.pipeline.kernels:   # but the last: it writes the NCHW output, a transposition
        if k.body.out.name in outs:
            continue
        src = k.cuda_source
        assert "/ p" not in src and "% p" not in src, k.name   # no division by a runtime dim
        assert "in0[t]" in src, k.name   # the conv result read at the kernel's own index
    for n, h, w in ((1, 8, 8), (3, 5, 7), (2, 12, 6)):
        _close(cm, m, torch.randn(n, 64, h, w))


def test_channels_last_off_and_float64(monkeypatch):
    m = ConvBN().eval()
    x = torch.randn(2, 3, 9, 10)
    monkeypatch.setenv("DLCB_CHANNELS_LAST", "0")
    off = dl.compile(m, (x,), dynamic=CNN, backend="cpu")
    assert [n.attrs.get("layout", "NCHW") for n in _nhwc(off)] == ["NCHW"] * 2
    assert not any(n.op.name == "permute" for n in off.pipeline.graph.nodes)
    monkeypatch.delenv("DLCB_CHANNELS_LAST")
    m64 = ConvBN().eval().double()   # cuDNN has no NHWC float64 kernels: left NCHW
    f64 = dl.compile(m64, (x.double(),), dynamic=CNN, backend="cpu")
    assert [n.attrs.get("layout", "NCHW") for n in _nhwc(f64)] == ["NCHW"] * 2
    on = dl.compile(m, (x,), dynamic=CNN, backend="cpu")
    assert [n.attrs["layout"] for n in _nhwc(on)] == ["NHWC"] * 2
    for n, h, w in ((1, 9, 10), (3, 4, 17)):
        xx = torch.randn(n, 3, h, w)
        torch.testing.assert_close(on(xx), off(xx), rtol=1e-5, atol=1e-5)
        _close(f64, m64, xx.double())


class ConvPools(nn.Module):
    """Pools between convolutions run NHWC; a pooled value that is also an output stays NCHW."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = F.max_pool2d(self.c1(x).relu(), 3, 2, 1, ceil_mode=True)
        z = F.avg_pool2d(self.c2(y), 2, ceil_mode=True, count_include_pad=False)
        return F.adaptive_avg_pool2d(z, (3, 2)), y


def test_channels_last_pools():
    m = ConvPools().eval()
    cm = dl.compile(m, (torch.randn(2, 3, 11, 9),), dynamic=CNN, backend="cpu")
    pools = [n for n in cm.pipeline.graph.nodes if n.op.name.endswith("pool2d")]
    assert sorted(n.op.name for n in pools) == ["adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"]
    assert all(n.attrs["layout"] == "NHWC" for n in pools)
    for n, h, w in ((1, 11, 9), (3, 6, 13), (2, 17, 5)):
        _close(cm, m, torch.randn(n, 3, h, w))


class Depthwise(nn.Module):
    """MobileNet-style: 1x1 conv, BN, hardswish, then depthwise convolutions of every kind."""

    def __init__(self, k: int, stride: int, padding, dilation: int):
        super().__init__()
        self.pw = nn.Conv2d(3, 8, 1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, k, stride, padding, dilation, groups=8)
        self.dw2 = nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False)

    def forward(self, x):
        y = F.hardswish(self.bn(self.pw(x)))
        return self.dw2(self.dw(y)) + y.mean()


@pytest.mark.parametrize("k,stride,padding,dilation",
                         [(3, 1, 1, 1), (3, 2, 1, 1), (5, 2, 2, 1), (3, 1, "same", 2),
                          (4, 1, "same", 1), (7, 1, 3, 1), (3, 1, 0, 1)])
def test_generated_depthwise(monkeypatch, k, stride, padding, dilation):
    """A float32 depthwise convolution is sum(window(window(pad(x))) * taps), one generated
    kernel per convolution (no library call), for any padding, stride and dilation; a float64
    one, or any under ``DLCB_DEPTHWISE=library``, stays a library call."""
    monkeypatch.delenv("DLCB_DEPTHWISE", raising=False)
    torch.manual_seed(0)
    m = Depthwise(k, stride, padding, dilation).eval()
    m.bn.running_mean.normal_()
    cm = dl.compile(m, (torch.randn(2, 3, 13, 11),), dynamic=CNN, backend="cpu")
    calls = [n.attrs.get("groups") for n in cm.pipeline.graph.nodes if n.op.name == "conv2d"]
    assert calls == [1], calls   # the 1x1 conv only
    assert sum(n.op.name == "window" for n in cm.pipeline.graph.nodes) == 4
    log = next(p.changes for p in cm.pipeline.passes if p.name == "channels_last")
    assert any("materialized in NHWC (1 other readers" in c for c in log), log   # the hardswish
    for n, h, w in ((1, 13, 11), (3, 9, 17), (2, 24, 7)):
        _close(cm, m, torch.randn(n, 3, h, w))
    m64 = m.double()
    f64 = dl.compile(m64, (torch.randn(2, 3, 13, 11, dtype=torch.float64),), dynamic=CNN,
                     backend="cpu")
    assert [n.attrs.get("groups") for n in f64.pipeline.graph.nodes if n.op.name == "conv2d"] \
        == [1, 8, 8]
    _close(f64, m64, torch.randn(3, 3, 9, 17, dtype=torch.float64))
    if (k, stride) == (3, 1):
        monkeypatch.setenv("DLCB_DEPTHWISE", "library")
        lib = dl.compile(m.float(), (torch.randn(2, 3, 13, 11),), dynamic=CNN, backend="cpu")
        assert [n.attrs.get("groups") for n in lib.pipeline.graph.nodes
                if n.op.name == "conv2d"] == [1, 8, 8]


# --- library operands: one strided view per view chain; attention without copies ---------------

class ViewedMatmul(nn.Module):
    """A library call on a view of an input (``w`` an input too: a matmul by a constant would
    become a linear, and the views could move past it)."""

    def __init__(self, view):
        super().__init__()
        self.view = view

    def forward(self, x, w):
        return torch.matmul(self.view(x), w)


VIEW_CHAINS = {   # name: (view of x [N, 3, 4, 8], its last extent, one strided view?)
    "permute": (lambda x: x.permute(0, 2, 1, 3), 8, True),
    "slice_step": (lambda x: x[:, 1:, ::2], 8, True),
    "split": (lambda x: x.reshape(x.shape[0], 3, 2, 2, 8), 8, True),
    "expand": (lambda x: x[:, :1].expand(-1, 5, -1, -1), 8, True),
    "heads": (lambda x: x.reshape(x.shape[0], 12, 2, 4)[:, :, 1].transpose(1, 2), 12, True),
    "merge_after_permute": (lambda x: x.permute(0, 2, 1, 3).reshape(x.shape[0], 4, 24), 24,
                            False),
}


@pytest.mark.parametrize("name", sorted(VIEW_CHAINS))
def test_library_operand_strided_view(name):
    """A view chain whose composed index map is affine reaches the library as one
    ``as_strided`` view of its base (never a copy); else torch applies the chain."""
    view, k, strided = VIEW_CHAINS[name]
    torch.manual_seed(0)
    m, w = ViewedMatmul(view), torch.randn(k, 3)
    cm = dl.compile(m, (torch.randn(2, 3, 4, 8), w), dynamic={0: {0: "N"}}, backend="cpu")
    (call,) = [st for st in cm._thunk.plan.steps if isinstance(st, LibraryCall)]
    views = [v.name for v in call.operands[0][1]]
    assert (views == ["as_strided"]) == strided, views
    for n in (1, 3, 0):
        _close(cm, m, torch.randn(n, 3, 4, 8), w)
    _close(cm, m, torch.randn(5, 3, 4, 8)[2:], w)   # an input that starts inside its storage


class MHA(nn.Module):
    """ViT's attention: batch-first tokens through nn.MultiheadAttention (export decomposes it:
    in-projection, heads split by reshape/permute/slice, sdpa, heads merged, out-projection)."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def test_attention_operands_are_views():
    """q, k, v reach sdpa as strided views of the in-projection; sdpa runs as [N, L, H, D] (the
    CUDA kernels' memory order) and the out-projection reads that buffer through a view: no
    copy of any operand, whatever N and L."""
    torch.manual_seed(0)
    m = MHA().eval()
    cm = dl.compile(m, (torch.randn(2, 5, 16),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    calls = [st for st in cm._thunk.plan.steps if isinstance(st, LibraryCall)]
    assert [st.op.name for st in calls] == ["linear", "sdpa", "linear"]
    assert dict(calls[1].attrs)["layout"] == "NLHD"
    for st in calls:
        for _, views in st.operands:
            assert [v.name for v in views] in ([], ["as_strided"]), (st.op.name, views)
    changes = {c.split(":")[0] for p in cm.pipeline.passes if p.name == "rewrite"
               for c in p.changes}
    assert {"sdpa_heads_inner", "linear_of_row_merge", "reshape_of_permute",
            "linear_of_permute"} <= changes
    for n, L in ((1, 5), (3, 7), (2, 1)):
        _close(cm, m, torch.randn(n, L, 16))


class Heads(nn.Module):
    """BERT's self-attention: q, k, v linears with bias, viewed into heads for sdpa; and a
    GPT-2-style Conv1D (``addmm`` by a [in, out] weight) whose result only a matmul reads."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(16, 16) for _ in range(3))
        self.w, self.b = nn.Parameter(torch.randn(16, 8)), nn.Parameter(torch.randn(8))

    def forward(self, x):
        n, L, _ = x.shape
        q, k, v = (f(x).view(n, L, 4, 4).transpose(1, 2) for f in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, L, 16)
        c = torch.addmm(self.b, a.reshape(-1, 16), self.w)
        return c @ c.t()


def test_linear_bias_in_the_library_call():
    """A bias whose sum only library calls read goes into the linear (cuBLAS adds it): no
    kernel of its own. The matmul by a constant weight becomes a linear to take its bias."""
    torch.manual_seed(0)
    m = Heads().eval()
    cm = dl.compile(m, (torch.randn(2, 5, 16),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    calls = [st for st in cm._thunk.plan.steps if isinstance(st, LibraryCall)]
    assert [(st.op.name, len(st.operands)) for st in calls] == \
        [("linear", 3), ("sdpa", 3), ("linear", 3), ("matmul", 2)]   # q, k, v: one GEMM
    assert not any(s.kind == "generated" for s in cm.pipeline.partition.steps), \
        cm.pipeline.partition   # every add is in a GEMM, every view a strided operand
    changes = [c.split(":")[0] for p in cm.pipeline.passes if p.name == "rewrite"
               for c in p.changes]
    assert changes.count("linear_bias") == 4 and changes.count("matmul_of_weight") == 1
    assert changes.count("merge_linears") == 1
    (w, views) = calls[2].operands[1]   # the Conv1D weight reaches cuBLAS as a transposed view
    assert w.src is Src.INPUT and [v.name for v in views] == ["as_strided"]
    assert cm._constants[w.index - 1].data_ptr() == m.w.data_ptr()   # of itself: no copy
    for n, L in ((1, 5), (3, 7), (2, 1)):
        _close(cm, m, torch.randn(n, L, 16))


class CachedHeads(nn.Module):
    """GPT-2's attention with an empty KV cache: one q/k/v linear split into heads, k and v each
    concatenated to a legacy 1-D empty past (torch skips it), then sdpa."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        n, L, _ = x.shape
        q, k, v = (t.view(n, L, 4, 4).transpose(1, 2) for t in self.qkv(x).split(16, dim=2))
        past = x.new_empty(0)
        k, v = torch.cat([past, k], dim=-2), torch.cat([past, v], dim=-2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_cat_of_one_operand_is_the_operand():
    """The cat of k (or v) with a skipped empty past is k itself: sdpa reads views of the GEMM,
    which adds the bias, and no kernel copies anything."""
    torch.manual_seed(0)
    m = CachedHeads().eval()
    cm = dl.compile(m, (torch.randn(2, 5, 16),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    assert not any(n.op.name == "cat" for n in cm.pipeline.graph.nodes)
    changes = [c for p in cm.pipeline.passes if p.name == "rewrite" for c in p.changes]
    assert sum(c.startswith("identity") and "= cat(" in c for c in changes) == 2, changes
    calls = [st for st in cm._thunk.plan.steps if isinstance(st, LibraryCall)]
    assert [st.op.name for st in calls] == ["linear", "sdpa"]
    for n, L in ((1, 5), (3, 7), (2, 1)):
        _close(cm, m, torch.randn(n, L, 16))


class GatedMLP(nn.Module):
    """A SwiGLU feed-forward (gate and up read x) beside a linear of another input and one of x
    with its bias in a kernel: only the two alike are merged."""

    def __init__(self):
        super().__init__()
        self.gate, self.up = nn.Linear(8, 12, bias=False), nn.Linear(8, 12, bias=False)
        self.other, self.down = nn.Linear(8, 12, bias=False), nn.Linear(12, 8, bias=False)
        self.w = nn.Parameter(torch.randn(4, 8))

    def forward(self, x, y):
        h = self.down(F.silu(self.gate(x)) * self.up(x)) + self.other(y)[..., :8]
        return h, F.linear(x, self.w) + 1.0


def test_linears_of_one_input_are_one_gemm():
    """gate(x) and up(x) become one GEMM and two slices the SwiGLU kernel reads; the linear of
    y stays; F.linear(x, w) + 1 (its bias left to a kernel: three operands against two) joins
    the merge too, as a weight-only linear of x."""
    torch.manual_seed(0)
    m = GatedMLP().eval()
    ex = (torch.randn(2, 5, 8), torch.randn(2, 5, 8))
    cm = dl.compile(m, ex, dynamic={0: {0: "N", 1: "L"}, 1: {0: "N", 1: "L"}}, backend="cpu")
    calls = [st for st in cm._thunk.plan.steps if isinstance(st, LibraryCall)]
    assert [st.op.name for st in calls] == ["linear"] * 3, calls
    merged = [c for p in cm.pipeline.passes for c in p.changes if c.startswith("merge_linears")]
    assert len(merged) == 1 and "3 linears of %x" in merged[0], merged
    for n, L in ((1, 5), (3, 7), (2, 1), (0, 3)):
        x, y = torch.randn(n, L, 8), torch.randn(n, L, 8)
        for got, want in zip(cm(x, y), m(x, y)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


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
    compiled program is right inside the range, and a call outside it (where it must not run the
    ``x * 2`` branch) runs a variant traced at its size."""
    m = Branchy()
    cm = dl.compile(m, (torch.randn(4, 3),), dynamic={0: {0: "N"}}, backend="cpu")
    for n in (4, 9, 2, 3):
        _close(cm, m, torch.randn(n, 3))
    assert cm.stats()["variants"] == 1, cm.stats()


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


class _SlicedFills(nn.Module):
    """Swin's shifted-window mask: nine slice fills of one zero buffer at a dynamic size. Each
    fill reads the buffer on both sides of its select, so inlined nine deep the softmax kernel
    computes the first buffer 2^9 times (before ``TREE_REUSE``: a kernel whose numba build was
    killed for memory)."""

    def forward(self, x):
        m = x.new_zeros(x.shape[-2:])
        for c, (h, w) in enumerate((h, w) for h in ((0, -4), (-4, -2), (-2, None))
                                   for w in ((0, -4), (-4, -2), (-2, None))):
            m[h[0]:h[1], w[0]:w[1]] = c
        return (x + m).softmax(-1)


def test_a_value_one_kernel_reads_many_times_is_materialized():
    m = _SlicedFills()
    cm = dl.compile(m, (torch.randn(2, 9, 8),), dynamic={0: {0: "N", 1: "H", 2: "W"}},
                    backend="cpu")
    fuse = next(r for r in cm.pipeline.passes if r.name == "fuse")
    assert any("times by one kernel" in c for c in fuse.changes), fuse.changes
    assert max(len(k.source.splitlines()) for k in cm.pipeline.kernels) < 400
    for shape in ((3, 9, 8), (1, 12, 15), (2, 4, 4)):
        _close(cm, m, torch.randn(*shape))


class CastRoundTrips(nn.Module):
    """Casts out and back: exact through a wider dtype (gone), rounding through a narrower one
    (kept), and an integer through float32, exact for int16 only."""

    def forward(self, h, x, i, j):
        return (h.float().half() * 2, x.half().float() * 2, i.float().to(torch.int16) + 1,
                j.float().to(torch.int32) + 1, x.bool().float().bool())


@pytest.mark.parametrize("wide,narrow,exact", [
    (torch.float32, torch.float16, True), (torch.float32, torch.bfloat16, True),
    (torch.bfloat16, torch.float16, False), (torch.float16, torch.bfloat16, False),
    (torch.float16, torch.float32, False), (torch.float64, torch.float32, True),
    (torch.float32, torch.int16, True), (torch.float32, torch.int32, False),
    (torch.float64, torch.int32, True), (torch.float16, torch.uint8, True),
    (torch.int8, torch.uint8, False),   # exact through torch's wrapping casts; not claimed
    (torch.int64, torch.int32, True),
    (torch.int32, torch.int64, False), (torch.float16, torch.bool, True),
    (torch.bool, torch.int8, False)])
def test_holds_exactly_agrees_with_torch(wide, narrow, exact):
    """The rule's dtype test, and where it claims exactness, torch's own round trip over every
    value of ``narrow`` (its whole range for 8/16-bit dtypes, the edges and specials otherwise)."""
    if narrow.is_floating_point:
        bits = torch.finfo(narrow).bits
        if bits == 16:
            v = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(narrow)
        else:
            f = torch.finfo(narrow)
            v = torch.tensor([0.0, -0.0, f.tiny, f.max, -f.max, f.eps, 1 / 3, float("inf"),
                              float("-inf"), f.tiny / 2 ** 10], dtype=narrow)
    elif narrow is torch.bool:
        v = torch.tensor([True, False])
    else:
        r = torch.iinfo(narrow)
        v = torch.arange(r.min, r.max + 1) if r.bits <= 16 else \
            torch.tensor([r.min, r.max, 0, -1, 2 ** 24 + 1, r.max - 1])
        v = v.to(narrow)
    back = v.to(wide).to(narrow)
    assert holds_exactly(wide, narrow) == exact
    if exact:   # value for value (a NaN stays a NaN; its payload is not a value)
        assert torch.equal(back.isnan(), v.isnan()) if v.is_floating_point() else True
        assert torch.equal(back[~v.isnan()] if v.is_floating_point() else back,
                           v[~v.isnan()] if v.is_floating_point() else v), (wide, narrow)


def test_cast_round_trips_through_a_wider_dtype_are_removed():
    m = CastRoundTrips()
    ins = (torch.randn(2, 3).half(), torch.randn(2, 3), torch.randint(-300, 300, (2, 3),
           dtype=torch.int16), torch.randint(-300, 300, (2, 3), dtype=torch.int32))
    cm = dl.compile(m, ins, backend="cpu")
    changes = [c for p in cm.pipeline.passes if p.name == "rewrite" for c in p.changes]
    trips = [c for c in changes if c.startswith("cast_round_trip")]
    assert len(trips) == 3, changes   # f16 via f32, int16 via f32, bool via f32
    casts = [(n.inputs[0].dtype, n.out.dtype) for n in cm.pipeline.graph.nodes if n.op is Ops.to]
    assert casts == [(torch.float32, torch.float16), (torch.float16, torch.float32),
                     (torch.int32, torch.float32), (torch.float32, torch.int32),
                     (torch.float32, torch.bool)], cm.pipeline.graph   # the rounding trips stay
    for b, n in ((1, 3), (4, 5)):
        call = (torch.randn(b, n).half(), torch.randn(b, n) * 1e4,
                torch.randint(-2 ** 15, 2 ** 15, (b, n), dtype=torch.int16),
                torch.randint(2 ** 24, 2 ** 30, (b, n), dtype=torch.int32))
        for got, want in zip(cm(*call), m(*call)):
            assert torch.equal(got, want)
