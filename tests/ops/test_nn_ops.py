"""The TorchVision vocabulary (``bridge/nn.py``) against torch eager on the CPU backend. Each module
is compiled once with dynamic dims and called at the example shape and at two or three others
(batch size, resolution, sequence length). Refusals are ``dl`` errors: a lowering's refusal
(``fallback=False``; by default the op runs as an ``eager`` step) and bad axes at compile time,
naming the op; what torch itself rejects while export traces, a ``ShapeError`` with torch's
message at the user's line; run-time shapes that break a compiled requirement (a slice, window
or chunk on a symbolic axis) ``ShapeMismatch`` naming the dim, before any output is allocated or
kernel launched."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlcb_lab as dl
from dlcb_lab.ir.ops import Ops

from harness import Spy, as_tuple
from models import ConvBN

HERE = "test_nn_ops.py"
NCHW = {0: {0: "N", 2: "H", 3: "W"}}
NSE = {0: {0: "N", 1: "S"}}


class Fn(nn.Module):
    """A module around a function of its inputs (export traces through the lambda); ``mods``:
    the modules the function calls (registered, so their parameters are lifted as constants)."""

    def __init__(self, fn, *mods):
        super().__init__()
        self.fn = fn
        self.mods = nn.ModuleList(mods)

    def forward(self, x):
        return self.fn(x)


class Fn2(Fn):
    def forward(self, x, y):
        return self.fn(x, y)


class Fn3(Fn):
    def forward(self, x, y, z):
        return self.fn(x, y, z)


def _fn(fn, n_inputs):
    return (Fn, Fn2, Fn3)[n_inputs - 1](fn)


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def run(m, ins, dynamic, calls=(), tol=1e-5):
    """Compile ``m`` once for ``ins`` and compare with eager on ``ins`` and on each input tuple of
    ``calls``, all served by that one compile (no variant); returns the compiled module. A bare
    ``torch.nn`` layer is wrapped in a Sequential (as the fx tracer needed; kept so the cases
    compile the same module structure)."""
    if type(m).__module__.startswith("torch.nn"):
        m = nn.Sequential(m)
    m = m.eval()
    cm = dl.compile(m, ins, dynamic=dynamic, backend="cpu")
    for args in (ins, *calls):
        with torch.no_grad():
            got, want = as_tuple(cm(*args)), as_tuple(m(*args))
        assert len(got) == len(want)
        for k, (a, b) in enumerate(zip(got, want)):
            ctx = f"output {k} at input shapes {[tuple(t.shape) for t in args]}"
            assert a.shape == b.shape and a.dtype == b.dtype, (ctx, a.shape, b.shape)
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, equal_nan=True,
                                       msg=lambda s: f"{ctx}: {s}")
    stats = cm.stats()
    assert (stats["compiles"], stats["variants"]) == (1, 0), stats
    return cm


def nchw(c, *hw_list, seed=0):
    """One input tuple per (n, h, w)."""
    return [(rand(n, c, h, w, seed=seed + i),) for i, (n, h, w) in enumerate(hw_list)]


# --- convolution ---------------------------------------------------------------------------------

CONVS = {
    "stride-pad-bias": lambda: nn.Conv2d(3, 8, 3, stride=2, padding=1),
    "rect-dilated-grouped": lambda: nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0),
                                              dilation=(1, 2), groups=2, bias=False),
    "depthwise-same": lambda: nn.Conv2d(4, 4, 3, padding="same", groups=4),
    "even-kernel-same-dilated": lambda: nn.Conv2d(3, 5, (2, 3), padding="same", dilation=2),
    "valid-1x1": lambda: nn.Conv2d(3, 4, 1, padding="valid"),
    "depthwise-multiplier": lambda: nn.Conv2d(2, 6, 3, stride=2, groups=2, bias=False),
}


@pytest.mark.parametrize("name", CONVS)
def test_conv2d_module(name):
    torch.manual_seed(0)
    conv = CONVS[name]()
    c = conv.in_channels
    x, *calls = nchw(c, (2, 11, 9), (1, 7, 8), (3, 16, 5), (0, 9, 9))
    run(conv, x, NCHW, calls)


def test_conv2d_functional_weight_input():
    """Weight and bias as module inputs (static shapes), stride and padding as ints."""
    m = Fn3(lambda x, w, b: F.conv2d(x, w, b, 2, 1))
    w, b = rand(6, 3, 3, 3, seed=1), rand(6, seed=2)
    run(m, (rand(2, 3, 8, 8), w, b), NCHW, [(rand(1, 3, 5, 12), w, b), (rand(4, 3, 9, 6), w, b)])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       p=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       d=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       groups=st.sampled_from([1, 2]), bias=st.booleans())
def test_conv2d_random_params(k, s, p, d, groups, bias):
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 4, k, s, p, d, groups, bias)
    sizes = [(2, 7, 8), (1, 9, 7), (3, 12, 10)]
    x, *calls = nchw(2, *sizes)
    run(conv, x, NCHW, calls)


# --- linear and matrix products ------------------------------------------------------------------

@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("rank", [2, 3])
def test_linear(bias, rank):
    torch.manual_seed(0)
    lin = nn.Linear(5, 4, bias=bias)
    if rank == 2:
        run(lin, (rand(3, 5),), {0: {0: "N"}}, [(rand(1, 5),), (rand(8, 5),), (rand(0, 5),)])
    else:
        run(lin, (rand(2, 3, 5),), NSE, [(rand(1, 7, 5),), (rand(4, 1, 5),)])


MATMULS = {   # name: (fn, example shapes, dynamic spec, call shapes)
    "broadcast-batch": (torch.matmul, [(2, 1, 3, 5), (4, 5, 2)], {0: {0: "N", 2: "M"}},
                        [[(1, 1, 6, 5), (4, 5, 2)], [(3, 1, 1, 5), (4, 5, 2)]]),
    "vec-mat": (torch.matmul, [(5,), (2, 5, 3)], {1: {0: "N", 2: "P"}},
                [[(5,), (4, 5, 1)], [(5,), (1, 5, 7)]]),
    "mat-vec": (lambda a, b: a @ b, [(2, 3, 5), (5,)], {0: {0: "N", 1: "M"}},
                [[(1, 7, 5), (5,)], [(6, 1, 5), (5,)]]),
    "vec-vec": (torch.matmul, [(5,), (5,)], {0: {0: "K"}, 1: {0: "K"}},
                [[(9,), (9,)], [(1,), (1,)]]),
    "bmm": (torch.bmm, [(2, 3, 5), (2, 5, 4)], {0: {0: "N", 1: "M"}, 1: {0: "N"}},
            [[(1, 6, 5), (1, 5, 4)], [(5, 1, 5), (5, 5, 4)]]),
    "mm": (lambda a, b: a.mm(b), [(3, 5), (5, 4)], {0: {0: "M"}, 1: {1: "P"}},
           [[(1, 5), (5, 9)], [(7, 5), (5, 1)]]),
}


@pytest.mark.parametrize("name", MATMULS)
def test_matmul(name):
    fn, shapes, spec, calls = MATMULS[name]
    run(Fn2(fn), tuple(rand(*s, seed=i) for i, s in enumerate(shapes)), spec,
        [tuple(rand(*s, seed=10 + i) for i, s in enumerate(c)) for c in calls])


def test_addmm_alpha_beta():
    m = Fn3(lambda c, a, b: (torch.addmm(c, a, b, beta=0.5, alpha=-2.0), torch.addmm(c, a, b)))
    run(m, (rand(4, seed=1), rand(3, 5, seed=2), rand(5, 4, seed=3)), {1: {0: "M"}},
        [(rand(4), rand(1, 5), rand(5, 4)), (rand(4), rand(9, 5), rand(5, 4))])


def test_addmm_beta_zero_ignores_input():
    """torch: with beta=0 the input's NaNs do not propagate; it must still broadcast."""
    m = Fn3(lambda c, a, b: torch.addmm(c, a, b, beta=0))
    nan = torch.full((3, 4), float("nan"))
    run(m, (nan, rand(3, 5), rand(5, 4)), {1: {1: "K"}, 2: {0: "K"}},
        [(nan, rand(3, 2), rand(2, 4))])
    with pytest.raises(dl.ShapeError, match="addmm"):
        dl.compile(m, (rand(2, 4), rand(3, 5), rand(5, 4)), backend="cpu", dynamic=False)


def test_matmul_contraction_mismatch_is_a_shape_error():
    """torch rejects both while export traces: its message, at the wrapper's line."""
    where = rf"capture at {HERE}:\d+ in forward: return self.fn\(x, y\): torch rejects"
    with pytest.raises(dl.ShapeError, match=rf"{where}.*same reduction dim, but got \[2, 3\] X "
                                            r"\[4, 5\]"):
        dl.compile(Fn2(torch.matmul), (rand(2, 3), rand(4, 5)), dynamic=False, backend="cpu")
    with pytest.raises(dl.ShapeError, match=rf"{where}.*batch1 must be a 3D tensor"):
        dl.compile(Fn2(torch.bmm), (rand(2, 3), rand(3, 5)), backend="cpu", dynamic=False)


# --- normalization -------------------------------------------------------------------------------

class ConvFunctionalBN(ConvBN):
    def forward(self, x):
        bn = self.bn
        return F.batch_norm(self.conv(x), bn.running_mean, bn.running_var, bn.weight, bn.bias,
                            False, 0.1, bn.eps)


@pytest.mark.parametrize("cls", [ConvBN, ConvFunctionalBN], ids=["module", "functional"])
@pytest.mark.parametrize("bias", [True, False], ids=["conv-bias", "no-conv-bias"])
def test_batch_norm_eval_folds_into_conv(cls, bias):
    torch.manual_seed(0)
    x, *calls = nchw(3, (2, 8, 9), (1, 5, 5), (3, 12, 7), (0, 4, 4))
    cm = run(cls(bias), x, NCHW, calls, tol=1e-4)
    g = cm.pipeline.graph
    convs = [n for n in g.nodes if n.op is Ops.conv2d]
    assert len(convs) == 1
    for n in g.nodes:   # nothing scales the convolution's result
        assert not (n.op is Ops.mul and convs[0].out in n.tensor_inputs()), n
    if not bias:   # the BN scale is in the weight (a conv bias between them blocks the fold)
        assert not any(n.op is Ops.mul for n in g.nodes)
        assert any("scaled by" in c for r in cm.pipeline.passes for c in r.changes)


@pytest.mark.parametrize("rank", [2, 3])
def test_batch_norm1d_eval(rank):
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(4)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    shape = (3, 4) if rank == 2 else (3, 4, 5)
    spec = {0: {0: "N"}} if rank == 2 else {0: {0: "N", 2: "L"}}
    calls = [(rand(1, 4),), (rand(6, 4),)] if rank == 2 else [(rand(1, 4, 2),), (rand(6, 4, 9),)]
    run(bn, (rand(*shape),), spec, calls)


def test_batch_norm_training_is_refused():
    """The module in training mode updates its running statistics (an in-place op on a lifted
    buffer): refused with or without fallback. Batch statistics alone are a lowering's refusal;
    with fallback they run as an ``eager`` step, equal to eager."""
    x = rand(2, 3, 4, 4)
    bn = nn.BatchNorm2d(3).train()
    with pytest.raises(dl.UnsupportedOp, match=r"aten\.add_\.Tensor .*in-place op mutates graph "
                                               r"input '0\.num_batches_tracked'"):
        dl.compile(nn.Sequential(bn), (x,), backend="cpu", dynamic=False)
    untracked = nn.Sequential(nn.BatchNorm2d(3, track_running_stats=False).train())
    with pytest.raises(dl.UnsupportedOp, match=r"aten\.batch_norm.*batch statistics"):
        dl.compile(untracked, (x,), backend="cpu", fallback=False, dynamic=False)
    m = Fn(lambda x: F.batch_norm(x, None, None, training=True))
    with pytest.raises(dl.UnsupportedOp, match=rf"batch_norm.*{HERE}.*training mode"):
        dl.compile(m, (x,), backend="cpu", fallback=False, dynamic=False)
    cm = dl.compile(m, (x,), backend="cpu", dynamic=False)
    assert [n.op.name for n in cm.pipeline.graph.nodes].count("eager") == 1
    torch.testing.assert_close(cm(x), m(x))


@pytest.mark.parametrize("shape", [(5,), (4, 5)], ids=["last-axis", "two-axes"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_layer_norm(shape, affine):
    torch.manual_seed(0)
    ln = nn.LayerNorm(shape, elementwise_affine=affine, eps=1e-4)
    if affine:
        with torch.no_grad():
            ln.weight.uniform_(0.5, 1.5)
            ln.bias.uniform_(-1, 1)
    run(ln, (rand(2, 3, *shape),), NSE, [(rand(1, 1, *shape),), (rand(5, 7, *shape),)])


def test_layer_norm_functional_shape_mismatch():
    m = Fn(lambda x: F.layer_norm(x, (4,)))
    with pytest.raises(dl.ShapeError, match=rf"{HERE}:\d+ in <lambda>: .*F\.layer_norm.*torch "
                                            r"rejects.*Given normalized_shape=\[4\], expected "
                                            r"input with shape \[4\]"):
        dl.compile(m, (rand(2, 5),), backend="cpu", dynamic=False)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_softmax_log_softmax(dim):
    m = Fn(lambda x: (torch.softmax(x, dim), F.log_softmax(x, dim=dim), x.softmax(dim)))
    run(m, (rand(3, 4, 5) * 4,), {0: {0: "N", 2: "L"}},
        [(rand(1, 4, 1) * 4,), (rand(7, 4, 9) * 4,), (rand(0, 4, 3),)])


def test_softmax_modules_and_dtype():
    m = nn.Sequential(nn.Softmax(dim=-1))
    run(m, (rand(2, 6),), {0: {0: "N"}}, [(rand(5, 6),)])
    run(Fn(lambda x: torch.softmax(x, 1, dtype=torch.float64)), (rand(2, 6),), {0: {0: "N"}},
        [(rand(5, 6),)])


# --- activations ---------------------------------------------------------------------------------

ACTIVATIONS = {
    "relu6": F.relu6, "hardtanh": F.hardtanh,
    "hardtanh(-2,0.5)": lambda x: F.hardtanh(x, -2.0, 0.5),
    "gelu": F.gelu, "gelu-tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
    "clamp": lambda x: torch.clamp(x, -1.5, 2.0), "clamp-min": lambda x: x.clamp(min=0.5),
    "clamp-max": lambda x: torch.clip(x, max=-0.25), "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.1), "log": lambda x: torch.log(x.abs() + 0.1),
    "erf": torch.erf, "dropout-eval": lambda x: F.dropout(x, 0.5, training=False),
    "nn.ReLU6": nn.ReLU6(), "nn.GELU-tanh": nn.GELU(approximate="tanh"), "nn.SiLU": nn.SiLU(),
    "nn.Hardswish": nn.Hardswish(), "nn.Hardsigmoid": nn.Hardsigmoid(),
    "nn.Hardtanh": nn.Hardtanh(-3.0, 3.0), "nn.Dropout": nn.Dropout(0.3).eval(),
}


def test_activations():
    """Every activation on values around its breakpoints, one compile (one output each)."""
    fns = list(ACTIVATIONS.values())
    m = Fn(lambda x: tuple(f(x) for f in fns), *[f for f in fns if isinstance(f, nn.Module)])
    run(m, (rand(2, 7) * 4,), {0: {0: "N"}},
        [(torch.linspace(-7, 7, 57).reshape(3, 19)[:, :7].contiguous(),), (rand(5, 7) * 4,)])


def test_activation_refusals():
    """gelu's unknown form is torch's rejection; training dropout a lowering's refusal that
    fallback runs eagerly (each element dropped or scaled by 1 / (1 - p))."""
    with pytest.raises(dl.ShapeError, match=r"approximate argument must be either none or tanh"):
        dl.compile(Fn(lambda x: F.gelu(x, approximate="erf")), (rand(2, 3),), backend="cpu", dynamic=False)
    drop = Fn(lambda x: F.dropout(x, 0.2))
    with pytest.raises(dl.UnsupportedOp, match=rf"aten\.dropout.* at {HERE}:.*dropout in training "
                                               r"mode"):
        dl.compile(drop, (rand(2, 3),), backend="cpu", fallback=False, dynamic=False)
    x = rand(40, 50) + 5
    cm = dl.compile(drop, (x,), backend="cpu", dynamic=False)
    assert [n.op.name for n in cm.pipeline.graph.nodes] == ["eager"]
    y = cm(x)
    assert ((y == 0) | torch.isclose(y, x / 0.8)).all() and 0 < (y == 0).sum() < x.numel()


def test_clamp_tensor_bounds():
    m = Fn3(lambda x, lo, hi: torch.clamp(x, lo, hi))
    run(m, (rand(3, 4), rand(4, seed=1) - 1, rand(3, 1, seed=2) + 1), {0: {0: "N"}, 2: {0: "N"}},
        [(rand(6, 4), rand(4) - 1, rand(6, 1) + 1)])


# --- pooling -------------------------------------------------------------------------------------

MAX_POOLS = [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2),
             dict(kernel_size=3, stride=2, ceil_mode=True),
             dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
             dict(kernel_size=3, stride=3, padding=1, ceil_mode=True)]   # a last window dropped
AVG_POOLS = [dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
             dict(kernel_size=3, stride=2, padding=1, count_include_pad=True),
             dict(kernel_size=2, divisor_override=3), dict(kernel_size=(2, 3), stride=1),
             dict(kernel_size=3, stride=1, padding=1, ceil_mode=True, count_include_pad=False),
             dict(kernel_size=(4, 3), stride=(2, 2), padding=(2, 1), ceil_mode=True),
             dict(kernel_size=(2, 3), stride=3, padding=1, ceil_mode=True)]


def test_max_pool2d():
    pools = [nn.MaxPool2d(**kw) for kw in MAX_POOLS]
    m = Fn(lambda x: tuple(p(x) for p in pools) + (F.max_pool2d(x, 2, 1, 1),), *pools)
    x, *calls = nchw(2, (2, 9, 8), (1, 5, 6), (3, 12, 7), (0, 6, 6))
    run(m, x, NCHW, calls)


def test_avg_pool2d():
    pools = [nn.AvgPool2d(**kw) for kw in AVG_POOLS]
    m = Fn(lambda x: tuple(p(x) for p in pools) + (F.avg_pool2d(x, 2),), *pools)
    x, *calls = nchw(2, (2, 9, 8), (1, 5, 6), (3, 12, 7))
    run(m, x, NCHW, calls)


def test_pools_static():
    """Static shapes: window guards that provably hold (no padding) are dropped."""
    pools = [nn.MaxPool2d(3, 3), nn.MaxPool2d(2), nn.AvgPool2d(3, 3), nn.AvgPool2d(1),
             nn.AvgPool2d(2, count_include_pad=False)]
    run(Fn(lambda x: tuple(p(x) for p in pools), *pools), (rand(1, 3, 9, 9),), False)


@pytest.mark.parametrize("size", [(1, 1), (7, 7), (3, 5), 2], ids=str)
def test_adaptive_avg_pool2d(size):
    m = nn.AdaptiveAvgPool2d(size)
    x, *calls = nchw(3, (2, 10, 13), (1, 9, 11), (3, 16, 16), (1, 5, 3))
    run(m, x, NCHW, calls)


def test_adaptive_avg_pool2d_rank3_and_none():
    run(nn.AdaptiveAvgPool2d((None, 2)), (rand(3, 6, 5),), {0: {2: "W"}}, [(rand(3, 6, 9),)])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       s=st.tuples(st.integers(1, 3), st.integers(1, 3)), data=st.data(),
       ceil=st.booleans(), avg=st.booleans())
def test_pool2d_random_params(k, s, data, ceil, avg):
    """Random windows vs eager, ceil_mode included (on symbolic extents torch drops a last
    window that would start in the right padding: a floor-division expression)."""
    p = tuple(data.draw(st.integers(0, ki // 2)) for ki in k)
    d = (1, 1) if avg else tuple(data.draw(st.integers(1, 2)) for _ in k)
    if avg:
        pad = data.draw(st.booleans())
        pool = nn.AvgPool2d(k, s, p, ceil, count_include_pad=pad)
    else:
        pool = nn.MaxPool2d(k, s, p, d, ceil_mode=ceil)
    x, *calls = nchw(2, (2, 8, 9), (1, 6, 7), (2, 11, 10))
    run(pool, x, NCHW, calls)


# --- concatenation, splitting, slicing ------------------------------------------------------------

def pieces(parts, n):
    """The first ``n`` results of a split (as many as the case uses)."""
    return tuple(parts[i] for i in range(n))


SHAPE_OPS = {   # name: (fn, n inputs, example shapes, dynamic, call shapes)
    "cat-neg": (lambda x, y: torch.cat((x, y, x), -1), 2, [(2, 3, 4), (2, 3, 1)],
                {0: {0: "N"}, 1: {0: "N", 2: "K"}}, [[(1, 3, 4), (1, 3, 5)]]),
    "cat-dyn-axis": (lambda x, y: torch.cat([x, y], dim=0), 2, [(2, 3), (4, 3)],
                     {0: {0: "N"}, 1: {0: "M"}}, [[(1, 3), (1, 3)], [(5, 3), (0, 3)]]),
    "stack-neg": (lambda x, y: (torch.stack((x, y), -1), torch.stack([x, y], dim=-3)), 2,
                  [(2, 4), (2, 4)], {0: {0: "N"}, 1: {0: "N"}}, [[(5, 4), (5, 4)]]),
    "split": (lambda x: pieces(x.split([1, 3], 1), 2) + pieces(torch.split(x, 2, dim=-1), 3) +
              pieces(x.split(3, 1), 2), 1, [(2, 4, 5)], {0: {0: "N"}}, [[(3, 4, 5)]]),
    "split-dyn-sections": (lambda x: x.split([2, x.shape[1] - 2], 1), 1, [(2, 5)],
                           {0: {1: "L"}}, [[(2, 3)], [(2, 9)]]),
    "chunk": (lambda x: pieces(x.chunk(2, -1), 2) + pieces(torch.chunk(x, 3, 1), 2) +
              pieces(x.chunk(3, 0), 3), 1, [(6, 5, 4)], {0: {0: "N"}},
              [[(3, 5, 4)], [(7, 5, 4)], [(8, 5, 4)]]),
    "unbind": (lambda x: pieces(x.unbind(1), 3) + pieces(torch.unbind(x, -1), 2), 1,
               [(2, 3, 2)], {0: {0: "N"}}, [[(4, 3, 2)]]),
    "narrow": (lambda x: (x.narrow(1, 1, 2), torch.narrow(x, -1, 2, 3), x.narrow(0, -2, 2)), 1,
               [(3, 4, 6)], {0: {0: "N", 2: "W"}}, [[(2, 4, 5)], [(5, 4, 9)]]),
    "getitem": (lambda x: (x[:, 1:3], x[..., ::2], x[1], x[:, -1], x[None, :, None, 2:],
                           x[..., -3:-1, 1::3], x[-1, ..., 0], x[:, :, :-1]), 1, [(3, 4, 6)],
                {0: {0: "N", 2: "W"}}, [[(2, 4, 5)], [(5, 4, 9)]]),
    "pad": (lambda x: (F.pad(x, (1, 2)), F.pad(x, (0, 1, 2, 0), value=-1.5),
                       F.pad(x, [1, 1, 1, 1, 1, 1], "constant", 0.25), F.pad(x, (-1, 2, 0, -1))),
            1, [(2, 3, 4)], {0: {0: "N", 2: "W"}}, [[(1, 3, 2)], [(4, 3, 7)]]),
    "pad-modes": (lambda x: (F.pad(x, (2, 1), "reflect"), F.pad(x, (1, 2, 2, 0), "replicate"),
                             F.pad(x, (-1, 3), mode="replicate"), F.pad(x, (3, -1), "reflect"),
                             F.pad(x, (1, 4), "circular"), F.pad(x, (-1, 2, 1, 1), "circular"),
                             F.pad(x[None], (1, 1, 2, 2), "reflect"), F.pad(x, (0, 0, 1, 0),
                                                                             "circular")),
                  1, [(2, 3, 4)], {0: {0: "N", 2: "W"}}, [[(1, 3, 5)], [(4, 3, 9)]]),
    "expand": (lambda x, y: (x.expand(2, -1, 4), x.expand_as(y), x.expand(x.shape[0], 4)), 2,
               [(3, 1), (3, 4)], {0: {0: "N"}, 1: {0: "N"}}, [[(5, 1), (5, 4)]]),
    "roll": (lambda x: (torch.roll(x, 1, 0), x.roll((2, -1), (1, -1)), torch.roll(x, 3)), 1,
             [(3, 4, 5)], {0: {0: "N", 2: "W"}}, [[(1, 4, 2)], [(6, 4, 9)]]),
    "unsqueeze-squeeze": (lambda x: (x.unsqueeze(0), torch.unsqueeze(x, -1), x.squeeze(1),
                                     torch.squeeze(x), x.squeeze(-2), x.squeeze((1, 3))),
                          1, [(3, 1, 4, 1)], {0: {0: "N", 2: "W"}},
                          [[(2, 1, 2, 1)], [(6, 1, 9, 1)]]),
    "t": (lambda x: (x.t(), torch.t(x[0])), 1, [(3, 4)], {0: {0: "N", 1: "M"}},
          [[(1, 7)], [(5, 1)]]),
}


@pytest.mark.parametrize("name", SHAPE_OPS)
def test_shape_ops(name):
    fn, n_in, shapes, spec, calls = SHAPE_OPS[name]
    run(_fn(fn, n_in), tuple(rand(*s, seed=i) for i, s in enumerate(shapes)), spec,
        [tuple(rand(*s, seed=10 + i) for i, s in enumerate(c)) for c in calls])


AXIS_ERRORS = {   # name: (fn, expected message)
    "cat": (lambda x: torch.cat((x, x), 2), r"cat.*dim 2 out of range for a rank-2"),
    "stack": (lambda x: torch.stack((x, x), -4), r"stack.*dim -4 out of range"),
    "split": (lambda x: x.split(1, 3), r"split.*dim 3 out of range"),
    "chunk": (lambda x: x.chunk(2, -3), r"chunk.*dim -3 out of range"),
    "unbind": (lambda x: x.unbind(2), r"unbind.*dim 2 out of range"),
    "narrow": (lambda x: x.narrow(2, 0, 1), r"narrow.*dim 2 out of range"),
    "narrow-range": (lambda x: x.narrow(1, 2, 2), r"narrow.*within axis 1 of extent 3"),
    "softmax": (lambda x: torch.softmax(x, 2), r"softmax.*dim 2 out of range"),
    "log_softmax": (lambda x: F.log_softmax(x, -3), r"log_softmax.*dim -3 out of range"),
    "unsqueeze": (lambda x: x.unsqueeze(3), r"unsqueeze.*dim 3 out of range"),
    "squeeze": (lambda x: x.squeeze(-3), r"squeeze.*dim -3 out of range"),
    "roll": (lambda x: torch.roll(x, 1, 2), r"roll.*dim 2 out of range"),
    "getitem": (lambda x: x[0, 0, 0], r"getitem.*too many indices"),
    "getitem-bound": (lambda x: x[:, 3], r"getitem.*index 3 is out of bounds for axis 1"),
    "t": (lambda x: x[None].t(), r"t\(\) expects a tensor with <= 2 dimensions, but self is 3D"),
    "pad-mode": (lambda x: F.pad(x, (1, 1), mode="zeros"), r"Unrecognised padding mode zeros"),
    "pad-reflect-value": (lambda x: F.pad(x, (1, 1), mode="reflect", value=1.0),
                          r"Padding mode \"reflect\" doesn't take in value argument"),
    "pad": (lambda x: F.pad(x, (1, 1, 1, 1, 1, 1)), r"pad.*for a rank-2 tensor"),
    "split-sections": (lambda x: x.split([1, 1], 1), r"split.*sections.*sum to axis 1"),
    "split-negative": (lambda x: x.split([4, -1], 1), r"split.*section -1 is not negative"),
    "avg-pool-divisor": (lambda x: F.avg_pool2d(x[None], 1, divisor_override=0),
                         r"avg_pool2d.*divisor_override=0"),
    "pool-stride": (lambda x: F.max_pool2d(x[None], 1, 0), r"max_pool2d.*stride 0"),
}


@pytest.mark.parametrize("name", AXIS_ERRORS)
def test_bad_axis_is_a_shape_error_naming_the_op(name):
    fn, msg = AXIS_ERRORS[name]
    with pytest.raises(dl.ShapeError, match=msg) as ei:
        dl.compile(Fn(fn), (rand(2, 3),), dynamic={0: {0: "N"}}, backend="cpu")
    assert HERE in str(ei.value)


UNSUPPORTED = {   # fallback=False
    "narrow-tensor": (lambda x: x.narrow(1, x[0, 0].long(), 1),
                      r"torch\.export cannot capture Fn"),
    "split-symbolic": (lambda x: x.split(2, 0), r"split of symbolic axis 0 \(N\)"),
    "tril": (lambda x: torch.tril(x), rf"1 ATen node not supported by DLCB IR "
                                      rf"\(fallback=False\):\n  'tril': "
                                      rf"aten\.tril\.default at {HERE}:\d+ in forward"),
    "sdpa-dropout": (lambda x: F.scaled_dot_product_attention(x, x, x, dropout_p=0.1),
                     r"dropout_p=0.1"),
}


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_unsupported_is_refused_at_compile_time(name):
    fn, msg = UNSUPPORTED[name]
    with pytest.raises(dl.UnsupportedOp, match=msg):
        dl.compile(Fn(fn), (rand(4, 3),), dynamic={0: {0: "N"}}, backend="cpu", fallback=False)


def test_unbind_of_a_dynamic_axis_is_specialized_by_export():
    """``unbind`` returns one tensor per element of the axis: export fixes its size, so a dim
    declared there is refused, naming export's specialization."""
    with pytest.raises(dl.ShapeError, match=r"dim N .* fixes it to 4: .*torch.export"):
        dl.compile(Fn(lambda x: x.unbind(0)[0]), (rand(4, 3),), dynamic={0: {0: "N"}},
                   backend="cpu")


def test_op_without_lowering_runs_eagerly():
    """With fallback (the default) an op DLCB does not lower is an ``eager`` step in the plan."""
    cm = run(Fn(lambda x: torch.tril(x) * 2), (rand(4, 3),), {0: {0: "N"}}, [(rand(7, 3),)])
    assert [n.op.name for n in cm.pipeline.graph.nodes].count("eager") == 1


def test_advanced_index_and_conv1d():
    """Lowered through ATen (``aten.index``, ``aten.conv1d``); an index past a run-time extent is
    a ``ShapeMismatch`` before launch (eager: an IndexError)."""
    cm = run(Fn(lambda x: x[[0, 1]] * 2), (rand(4, 3),), {0: {0: "N"}}, [(rand(2, 3),)])
    with pytest.raises(dl.ShapeMismatch, match=r"index values .* outside \[0, 1\)"):
        cm(rand(1, 3))
    conv = nn.Conv1d(3, 2, 3, padding=1)
    run(conv, (rand(2, 3, 5),), {0: {0: "N", 2: "L"}}, [(rand(4, 3, 9),), (rand(3, 3, 3),)])


# --- attention -----------------------------------------------------------------------------------

@pytest.mark.parametrize("batch_first", [True, False], ids=["batch-first", "seq-first"])
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_multihead_attention(batch_first, cross):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first).eval()
    n, s = (0, 1) if batch_first else (1, 0)

    def shape(b, t):
        return (b, t, 8) if batch_first else (t, b, 8)

    if cross:
        m = Fn2(lambda q, kv: mha(q, kv, kv, need_weights=False)[0], mha)
        spec = {0: {n: "N", s: "L"}, 1: {n: "N", s: "S"}}
        ins = (rand(*shape(2, 3)), rand(*shape(2, 5), seed=1))
        calls = [(rand(*shape(1, 4)), rand(*shape(1, 1))), (rand(*shape(3, 1)), rand(*shape(3, 6)))]
    else:
        m = Fn(lambda x: mha(x, x, x, need_weights=False)[0], mha)
        spec = {0: {n: "N", s: "L"}}
        ins, calls = (rand(*shape(2, 3)),), [(rand(*shape(1, 6)),), (rand(*shape(4, 1)),)]
    cm = run(m, ins, spec, calls, tol=1e-4)
    linears = [n for n in cm.pipeline.graph.nodes if n.op is Ops.linear]
    assert len(linears) == (3 if cross else 2)   # q, packed kv (self: packed qkv); out_proj


def _causal(n):
    """True above the diagonal (MultiheadAttention: not allowed to attend)."""
    return torch.ones(n, n).triu(1).bool()


@pytest.mark.parametrize("kind", ["bool", "float", "float-3d", "causal-hint"])
def test_multihead_attention_mask(kind):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    causal = kind == "causal-hint"
    m = Fn2(lambda x, mask: mha(x, x, x, attn_mask=mask, need_weights=False,
                                is_causal=causal)[0], mha)

    def mask(n, length, seed):
        if kind == "float":
            return rand(length, length, seed=seed)
        if kind == "float-3d":
            return rand(n * 2, length, length, seed=seed)
        return _causal(length)

    spec = {0: {0: "N", 1: "L"}, 1: {0: "L", 1: "L"}} if kind != "float-3d" else \
        {0: {1: "L"}, 1: {1: "L", 2: "L"}}
    sizes = [(2, 3), (1, 5), (3, 1)] if kind != "float-3d" else [(2, 3), (2, 5), (2, 1)]
    (x, mk), *calls = [(rand(n, t, 8, seed=i), mask(n, t, i)) for i, (n, t) in enumerate(sizes)]
    run(m, (x, mk), spec, calls, tol=1e-4)


def test_sdpa_bool_mask():
    """sdpa's boolean mask: True takes part in attention (the opposite of MultiheadAttention)."""
    spec = {0: {0: "N", 2: "L"}, 1: {0: "N", 2: "L"}, 2: {0: "L", 1: "L"}}
    run(Fn3(lambda q, kv, m: F.scaled_dot_product_attention(q, kv, kv, attn_mask=m)),
        (rand(2, 2, 4, 8), rand(2, 2, 4, 8, seed=1), ~_causal(4)), spec,
        [(rand(1, 2, 6, 8), rand(1, 2, 6, 8, seed=1), ~_causal(6))])


@pytest.mark.parametrize("average", [True, False], ids=["averaged", "per-head"])
def test_multihead_attention_need_weights(average):
    """export decomposes the module into ATen ops: the attention weights are an output too."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    m = Fn(lambda x: mha(x, x, x, average_attn_weights=average), mha)
    run(m, (rand(2, 3, 8),), {0: {0: "N", 1: "L"}}, [(rand(3, 5, 8),), (rand(4, 2, 8),)],
        tol=1e-4)


def test_sdpa_causal_and_scale():
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True), \
            F.scaled_dot_product_attention(q, k, v, scale=0.3)
    spec = {0: {0: "N", 2: "L"}, 1: {0: "N", 2: "S"}, 2: {0: "N", 2: "S"}}
    q, k, v = rand(2, 2, 4, 8), rand(2, 2, 6, 8, seed=1), rand(2, 2, 6, 8, seed=2)
    run(Fn3(fn), (q, k, v), spec, [(rand(1, 2, 3, 8), rand(1, 2, 7, 8), rand(1, 2, 7, 8)),
                                   (rand(3, 2, 1, 8), rand(3, 2, 2, 8), rand(3, 2, 2, 8))])


def test_sdpa_grouped_query_attention():
    """enable_gqa: 6 query heads over 2 key/value heads (literal counts), batch and sequences
    dynamic; a symbolic head count is tied to the key's instead (a host-checked constraint)."""
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True), \
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    spec = {0: {0: "N", 2: "L"}, 1: {0: "N", 2: "S"}, 2: {0: "N", 2: "S"}}
    q, k, v = rand(2, 6, 4, 8), rand(2, 2, 5, 8, seed=1), rand(2, 2, 5, 8, seed=2)
    run(Fn3(fn), (q, k, v), spec, [(rand(1, 6, 3, 8), rand(1, 2, 7, 8), rand(1, 2, 7, 8))])
    cm = run(Fn3(fn), (rand(2, 3, 4, 8),) * 3, {0: {1: "H"}, 1: {1: "H"}, 2: {1: "H"}},
             [(rand(2, 5, 4, 8),) * 3])
    with pytest.raises(dl.ShapeMismatch):
        cm(rand(2, 4, 4, 8), rand(2, 2, 4, 8), rand(2, 2, 4, 8))
    with pytest.raises(dl.ShapeError, match=r"torch rejects the program: RuntimeError: Number of "
                                            r"heads in key and value must divide"):
        dl.compile(Fn3(fn), (rand(1, 6, 2, 8), rand(1, 4, 2, 8), rand(1, 4, 2, 8)),
                   backend="cpu", dynamic=False)


class MaskedAttention(nn.Module):
    def forward(self, q, kv, mask):
        return F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask)


def test_sdpa_float_mask():
    spec = {0: {0: "N", 2: "L"}, 1: {0: "N", 2: "S"}, 2: {0: "L", 1: "S"}}
    ins = (rand(2, 2, 4, 8), rand(2, 2, 6, 8, seed=1), rand(4, 6, seed=2))
    run(MaskedAttention(), ins, spec, [(rand(1, 2, 3, 8), rand(1, 2, 5, 8), rand(3, 5)),
                                      (rand(3, 2, 1, 8), rand(3, 2, 2, 8), rand(1, 2))])


# --- run-time requirements: ShapeMismatch before any launch ---------------------------------------

REQUIREMENTS = {   # name: (module, example, dynamic, violating input, message)
    "slice": (Fn(lambda x: x[:, 2:5] * 2), rand(2, 6), {0: {1: "W"}}, rand(2, 3),
              r"slice.*needs.*W = input 0 'x' axis 1"),
    "index": (Fn(lambda x: x[:, 4] + 1), rand(2, 6), {0: {1: "W"}}, rand(2, 4),
              r"slice.*needs.*W = input 0 'x' axis 1"),
    "negative-start": (Fn(lambda x: x[:, -3:] * 2), rand(2, 6), {0: {1: "W"}}, rand(2, 2),
                       r"slice start W - 3 within axis 1.*needs W - 3 >= 0"),
    "negative-index": (Fn(lambda x: x[:, -4] * 2), rand(2, 6), {0: {1: "W"}}, rand(2, 3),
                       r"slice start W - 4 within axis 1.*needs W - 4 >= 0"),
    "narrow": (Fn(lambda x: x.narrow(1, 1, 3) * 2), rand(2, 6), {0: {1: "W"}}, rand(2, 3),
               r"narrow.*needs.*W = input 0 'x' axis 1"),
    "max-pool-window": (nn.MaxPool2d(3), rand(1, 2, 6, 6), NCHW, rand(1, 2, 2, 6),
                        r"max_pool2d.*axis 2 \(H\).*window.*H = input 0 '\w+' axis 2"),
    "avg-pool-window": (nn.AvgPool2d((2, 4)), rand(1, 2, 6, 6), NCHW, rand(1, 2, 6, 3),
                        r"avg_pool2d.*axis 3 \(W\).*window.*W = input 0 '\w+' axis 3"),
    "conv-window": (nn.Conv2d(2, 3, 5), rand(1, 2, 6, 6), NCHW, rand(1, 2, 4, 6),
                    r"conv2d.*axis 2 \(H\).*window.*H = input 0 '\w+' axis 2"),
    "chunk-count": (Fn(lambda x: x.chunk(3, 1)[2] * 2), rand(2, 6), {0: {1: "W"}}, rand(2, 4),
                    r"chunk.*3 non-empty chunks.*W = input 0 'x' axis 1"),
    "pad-crop": (Fn(lambda x: F.pad(x, (-2, -2))), rand(2, 6), {0: {1: "W"}}, rand(2, 3),
                 r"pad.*crops axis 1.*W = input 0 'x' axis 1"),
    "pad-reflect": (Fn(lambda x: F.pad(x, (3, 0), "reflect")), rand(2, 6), {0: {1: "W"}},
                    rand(2, 3), r"pad_axis.*reflect pad before \(3\) < extent W of axis 1.*"
                                r"needs W - 4 >= 0.*W = input 0 'x' axis 1"),
    "pad-circular": (Fn(lambda x: F.pad(x, (0, 4), "circular")), rand(2, 6), {0: {1: "W"}},
                     rand(2, 3), r"pad_axis.*circular pad after \(4\) <= extent W of axis 1"),
    "pad-replicate-empty": (Fn(lambda x: F.pad(x, (1, 1), "replicate")), rand(2, 6),
                            {0: {0: "N", 1: "W"}}, rand(2, 0),
                            r"replicate pad: axis 1 \(W\) is not empty.*W = input 0 .x. axis 1"),
}


@pytest.mark.parametrize("name", REQUIREMENTS)
def test_requirement_violation_is_caught_before_launch(name, monkeypatch):
    m, x, spec, bad, msg = REQUIREMENTS[name]
    cm = run(m, (x,), spec)
    spy = Spy(cm, monkeypatch)
    with pytest.raises(dl.ShapeMismatch, match=msg):
        cm(bad)
    spy.assert_untouched()


def test_squeeze_of_a_dim_that_is_one_at_run_time_is_a_variant():
    """The general program requires N >= 2 where torch's squeeze would drop N; a call with N = 1
    runs the variant traced at 1 (torch's result, rank 1), compiled once."""
    m = Fn(lambda x: x.squeeze() + 1)
    cm = run(m, (rand(3, 1, 4),), {0: {0: "N"}}, [(rand(5, 1, 4),)])
    x = rand(1, 1, 4)
    torch.testing.assert_close(cm(x), m(x))
    assert cm(x).shape == (4,) and cm.stats()["variants"] == 1


@pytest.mark.parametrize("n", [2, 1])
def test_static_shape_violation_names_the_axis(n, monkeypatch):
    """A static axis of the wrong size is refused at any N, also at a size-1 N (no variant is
    compiled for a shape outside the compiled signature)."""
    cm = run(nn.Conv2d(2, 3, 3), (rand(1, 2, 6, 6),), {0: {0: "N"}})
    spy = Spy(cm, monkeypatch)
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 '\w+' axis 2: size 7 != 6"):
        cm(rand(n, 2, 7, 6))
    spy.assert_untouched()
    assert cm.stats()["variants"] == 0


@pytest.mark.parametrize("fn,w", [(lambda x: x[..., 1:] * 2, 1),
                                  (lambda x: torch.softmax(x, 1), 0)], ids=["slice", "softmax"])
def test_inner_dim_zero_at_run_time(fn, w):
    """The last axis is 0 at run time (after the slice): eager returns an empty tensor."""
    run(Fn(fn), (rand(2, 4, 5),), {0: {2: "W"}}, [(rand(2, 4, w),)])



# --- lowered refusals: pad modes, unbatched conv, pool indices, tensor narrow start ------------

PAD_WIDTHS = (-4, -1, 0, 1, 4)
"""Widths on a 5-wide axis for the regular run: a side cropped to one element, cropped by one,
none, one, and the most reflect takes (the extent less one); circular meets its limit (a width
equal to the cropped extent: (4, -1), (1, -4)) and passes it ((4, -4)). ``-m slow``: every width
from -4 to 4."""


def test_pad_modes_match_torch_edge_cases():
    """Each mode against eager on every pair of ``PAD_WIDTHS`` torch accepts (the slow test below:
    every pair of widths from -4 to 4)."""
    check_pad_modes(PAD_WIDTHS)


@pytest.mark.slow
def test_pad_modes_match_torch_every_width():
    check_pad_modes(range(-4, 5))


def check_pad_modes(widths):
    """Each mode against eager on every width pattern of ``widths`` torch accepts on a 5-wide axis:
    widths up to the extent, negative widths (reflect and replicate index the uncropped axis;
    circular wraps the cropped one). Circular widths beyond the cropped extent, where torch reads
    memory it has not written (or raises), are refused."""
    cases = [(w0, w1) for w0 in widths for w1 in widths]
    x = rand(2, 3, 5)
    for mode in ("reflect", "replicate", "circular"):
        fns = []
        for pad in cases:
            if mode == "circular" and max(pad) > 5 + sum(min(w, 0) for w in pad):
                with pytest.raises(dl.ShapeError, match=r"circular pad .* <= extent"):
                    dl.compile(Fn(lambda t, pad=pad: F.pad(t, pad, mode="circular")), (x,),
                               backend="cpu", dynamic=False)
                continue
            try:
                F.pad(x, pad, mode=mode)
            except RuntimeError:
                continue
            fns.append(pad)
        assert len(fns) > 20, (mode, len(fns))
        m = Fn(lambda t, fns=fns, mode=mode: tuple(F.pad(t, p, mode=mode) for p in fns))
        run(m, (x,), False)


def test_pad_mode_refusals_name_the_constraint():
    """Both are torch's own limits, raised while export traces."""
    with pytest.raises(dl.ShapeError, match=r"Padding size should be less than the corresponding "
                                            r"input dimension, but got: padding \(0, 5\) at "
                                            r"dimension 2"):
        dl.compile(Fn(lambda t: F.pad(t, (0, 5), "reflect")), (rand(2, 3, 5),), backend="cpu", dynamic=False)
    with pytest.raises(dl.ShapeError, match=r"Padding size 2 is not supported for 4D input"):
        dl.compile(Fn(lambda t: F.pad(t, (1, 1), "reflect")), (rand(1, 2, 3, 5),),
                   backend="cpu", dynamic=False)


def test_conv2d_unbatched():
    """A rank-3 input: a batch axis of 1 around the library call, as torch adds it."""
    conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
    m = Fn(lambda x: (conv(x), F.conv2d(x, conv.weight, None, 1, "same", 1, 1)), conv)
    run(m, (rand(3, 9, 8),), {0: {1: "H", 2: "W"}}, [(rand(3, 5, 6),), (rand(3, 12, 7),)])
    run(nn.Conv2d(4, 6, 1, groups=2), (rand(4, 3, 5),), False)


def test_unfold_edge_cases():
    """torch's unfold (the ``window`` transform): keyword and negative axes, a step past the
    size, a dynamic axis, zero-size and non-contiguous inputs, a 0-d tensor (one window of
    size 1); a window larger than its axis is a ShapeError (at run time a ShapeMismatch, as
    torch raises), an axis out of range too."""
    m = Fn(lambda x: (x.unfold(dimension=-1, size=3, step=2), x.unfold(0, 1, 1),
                      x.transpose(0, 1).unfold(0, 2, 5)))
    run(m, (rand(4, 7),), {0: {0: "N", 1: "W"}},
        [(rand(1, 9),), (rand(6, 3),), (rand(8, 10)[::2, 1:8],)])
    run(Fn(lambda x: x.unfold(1, 2, 1) + 1), (rand(3, 5),), {0: {0: "N"}}, [(rand(0, 5),)])
    zero_d = Fn(lambda x: x.unfold(0, 1, 3) * 2)
    run(zero_d, (torch.tensor(3.0),), False)
    with pytest.raises(dl.ShapeError, match=r"Maximum size for tensor at dimension 0 is 1"):
        dl.compile(Fn(lambda x: x.unfold(0, 2, 1)), (torch.tensor(3.0),), backend="cpu", dynamic=False)
    with pytest.raises(dl.ShapeError):
        dl.compile(Fn(lambda x: x.unfold(1, 8, 1)), (rand(2, 7),), backend="cpu", dynamic=False)
    with pytest.raises(dl.ShapeError):
        dl.compile(Fn(lambda x: x.unfold(2, 1, 1)), (rand(2, 7),), backend="cpu", dynamic=False)
    cm = dl.compile(Fn(lambda x: x.unfold(1, 3, 1)), (rand(2, 7),), dynamic={0: {1: "W"}},
                    backend="cpu")
    with pytest.raises(dl.ShapeMismatch, match=r"holds a window \(3\)"):
        cm(rand(2, 2))   # W = 2 cannot hold a window of 3: refused before any launch


def test_max_pool2d_indices():
    """Indices as torch computes them (int64, flat into the input's H*W plane; with NaNs the
    last NaN), beside the generated values, for 3-D and 4-D inputs."""
    pools = [nn.MaxPool2d(3, 2, 1, return_indices=True),
             nn.MaxPool2d((3, 2), (2, 1), (1, 0), (1, 2), return_indices=True)]
    m = Fn(lambda x: pieces(pools[0](x), 2) + pieces(pools[1](x), 2) +
           pieces(F.max_pool2d_with_indices(x[0], 2), 2) +
           pieces(F.max_pool2d(x, 2, 1, 1, return_indices=True), 2), *pools)
    x, *calls = nchw(2, (2, 9, 8), (1, 5, 6), (3, 12, 7))
    calls[0][0][0, 1, 2, 3] = calls[0][0][0, 1, 2, 4] = float("nan")
    cm = run(m, x, NCHW, calls)
    assert [v.dtype for v in cm.pipeline.graph.outputs][1::2] == [torch.int64] * 4


def test_adaptive_avg_pool2d_none_on_symbolic_axis():
    run(nn.AdaptiveAvgPool2d((None, 3)), nchw(2, (2, 7, 8))[0], NCHW,
        nchw(2, (1, 4, 5), (3, 9, 3), seed=3))


class NarrowByBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("start", torch.tensor(2))

    def forward(self, x):
        return x.narrow(1, self.start, 3) * 2, torch.narrow(x, -1, self.start, 1)


def test_narrow_tensor_start_is_refused():
    """A tensor start, a buffer's or a computed one, is a data-dependent size export cannot
    capture (it traces ``.item()`` of it)."""
    with pytest.raises(dl.UnsupportedOp, match=rf"capture at {HERE}:\d+ in forward: return "
                                               r"x\.narrow\(1, self\.start, 3\).*torch\.export "
                                               r"cannot capture NarrowByBuffer"):
        dl.compile(NarrowByBuffer(), (rand(2, 6, 4),), dynamic={0: {1: "W", 2: "V"}}, backend="cpu")
    with pytest.raises(dl.UnsupportedOp, match=r"torch\.export cannot capture"):
        dl.compile(Fn(lambda x: x.narrow(1, x[0, 0].long(), 1)), (rand(4, 3),), backend="cpu", dynamic=False)


def test_avg_pool2d_ceil_mode_counts_the_clipped_window():
    """ceil_mode with count_include_pad: the window ceil_mode adds is clipped at the padded
    extent and divides by what is left, as torch does (``F.avg_pool2d(x, (4, 4), (2, 2), (2,),
    True, True, None)``), on symbolic and literal extents."""
    m = Fn(lambda x: (F.avg_pool2d(x, (4, 4), (2, 2), (2,), True, True, None),
                      F.avg_pool2d(x, (3, 2), (2, 2), (1, 0), True, True)))
    x, *calls = nchw(2, (1, 9, 8), (2, 10, 11), (1, 7, 6), (3, 13, 4))
    run(m, x, NCHW, calls)
    run(m, x, False)


def _failing_window(monkeypatch):
    """avg_pool2d whose window kgen refuses (fault injection: no op raises in kgen today)."""
    from dataclasses import replace

    from dlcb_lab.ir.ops import OPS

    def window(g, node, coords):
        raise dl.UnsupportedOp("window refused")
    monkeypatch.setitem(OPS, "avg_pool2d", replace(Ops.avg_pool2d, window=window))


class PoolRelu(nn.Module):
    def forward(self, x):
        return F.avg_pool2d(x, 2).relu()


def test_refusal_raised_in_kgen_names_op_node_and_line(monkeypatch):
    """A refusal raised while kgen infers a kernel names the op, its IR value and the user's
    source line (export's frame of ``forward``), as a refusal raised while lowering does."""
    _failing_window(monkeypatch)
    pool = PoolRelu()
    with pytest.raises(dl.UnsupportedOp) as ei:
        dl.compile(pool, (rand(1, 2, 9, 9),), backend="cpu", dynamic=False)
    err = ei.value
    assert (err.op, err.node) == ("avg_pool2d", "avg_pool2d")
    assert err.where.startswith(f"{HERE}:") and "F.avg_pool2d(x, 2).relu()" in err.where
    assert str(err).startswith(f"avg_pool2d 'avg_pool2d' at {HERE}:")
    assert str(err).endswith(": window refused")


def test_refusal_in_kgen_located_from_the_ir_node(monkeypatch):
    """Without the bridge: an IR graph built directly, its refusal located at the IR node (the
    node's op, value name and ``where``), not at the kernel that reads it."""
    from dlcb_lab.ir.graph import Graph
    from dlcb_lab.kgen.infer import infer_kernels

    _failing_window(monkeypatch)
    g = Graph()
    x = g.input("x", [1, 2, 9, 9], torch.float32)
    p = g.apply(Ops.avg_pool2d, x, name="pooled", where="model.py:7", kernel_size=(2, 2),
                stride=(2, 2), padding=(0, 0), ceil_mode=False, count_include_pad=True,
                divisor_override=None)
    g.set_outputs([g.apply(Ops.relu, p, name="act", where="model.py:8")])
    with pytest.raises(dl.UnsupportedOp) as ei:
        infer_kernels(g)
    assert (ei.value.op, ei.value.node, ei.value.where) == ("avg_pool2d", "pooled", "model.py:7")
