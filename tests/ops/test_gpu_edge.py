"""The edge cases of ``test_edge_cases`` on the ``cuda`` backend (both reduction variants), and the
fused intermediate past 2**31 elements that the 32-bit entry point would get wrong. Skipped without
CUDA."""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn.functional as F

import dlcb_lab as dl

from harness import Recorder, Spy, eager_or_refused, force_launch
from test_edge_cases import (INT_PAIRS, Fn, Fn2, ScalarAdd, ScalarCmp, ScalarDiv, ScalarPow,
                             ScalarRem, int_mix,
                             run, scalar_16bit_inputs)
from models import HOSTILE, Overflow, WorkedSum

pytestmark = pytest.mark.gpu
DEV = "cuda"


@pytest.fixture(params=["thread", "block", "warp"])
def variant(request, monkeypatch):
    """Force the reduction kernels' thread-, block- or warp-per-output entry points."""
    force_launch(monkeypatch, request.param)
    return request.param


def test_fused_intermediate_past_int32():
    """(x + y).reshape(-1, 65536).sum(1) reads a never-materialized 2.1e9-element intermediate:
    the sum kernel must take the 64-bit entry point although every buffer fits in int32."""
    x = torch.randn(43692, 1, dtype=torch.float64, device=DEV)
    y = torch.randn(1, 49152, dtype=torch.float64, device=DEV)
    m = Overflow()
    cm = dl.compile(m, (x[:4], torch.randn(1, 65536, dtype=torch.float64, device=DEV)),
                    dynamic={0: {0: "N"}, 1: {1: "M"}}, backend="cuda")
    thunk, log = cm.pipeline.thunks[0], []
    thunk.launchers = [Recorder(f, log) for f in thunk.launchers]   # each launch's index width
    got = cm(x, y)
    want = m(x, y)
    torch.cuda.synchronize()
    assert [e[3] for e in log] == [False, True], log   # sum: 64-bit; x * 2: 32-bit
    torch.testing.assert_close(got[0], want[0], rtol=1e-9, atol=1e-6)
    torch.testing.assert_close(got[1], want[1])
    del want
    torch.cuda.empty_cache()


@pytest.mark.parametrize("dx,dy", INT_PAIRS, ids=[f"{a}-{b}".replace("torch.", "")
                                                   for a, b in INT_PAIRS])
def test_integer_dtypes_cuda(dx, dy, variant):
    g = torch.Generator().manual_seed(1)
    lo = 0 if torch.uint8 in (dx, dy) else -9
    mk = lambda n: (torch.randint(lo, 9, (n, 5), generator=g, dtype=dx),   # noqa: E731
                    torch.randint(lo, 9, (n, 5), generator=g, dtype=dy))
    run(Fn2(int_mix), mk(3), {0: {0: "N"}, 1: {0: "N"}}, [mk(1), mk(700)], device=DEV)


def test_bool_reductions_cuda(variant):
    m = Fn(lambda x: (x.sum(0), x.amax(0), x.sum(), x.to(torch.int8).amax(1), ~x))
    mk = lambda n: (torch.rand(n, 300) > 0.5,)   # noqa: E731
    run(m, mk(3), {0: {0: "N"}}, [mk(1), mk(2000)], device=DEV)


@pytest.mark.parametrize("fn,shape", [
    (torch.exp, (1, 0, 3)), (lambda x: x + 1, (2, 0)), (lambda x: x.sum(1), (3, 0)),
    (lambda x: x.mean(1), (3, 0)), (lambda x: x.sum(0), (3, 0)),
], ids=["exp", "add", "sum-empty-axis", "mean-empty-axis", "sum-to-empty"])
def test_zero_size_static_cuda(fn, shape, variant):
    run(Fn(fn), (torch.randn(*shape),), device=DEV)


def test_zero_size_at_run_time_cuda(monkeypatch):
    m = Fn(lambda x: (torch.relu(x) * 2, x.sum(0), x.mean(0), x.amax(1)))
    cm = run(m, (torch.randn(3, 4),), {0: {0: "N"}}, [(torch.randn(5, 4),)], device=DEV)
    spy = Spy(cm, monkeypatch)
    got = cm(torch.randn(0, 4, device=DEV))
    assert [tuple(t.shape) for t in got] == [(0, 4), (4,), (4,), (0,)]
    torch.testing.assert_close(got[1], torch.zeros(4, device=DEV))
    assert got[2].isnan().all() and spy.launches == 2
    cm = dl.compile(Fn(lambda x: x.amax(1)), (torch.randn(3, 4, device=DEV),), dynamic={0: {1: "K"}},
                    backend="cuda")
    with pytest.raises(dl.ShapeMismatch, match=r"amax 'amax' at .*empty range.*K = input 0"):
        cm(torch.randn(3, 0, device=DEV))


@pytest.mark.parametrize("fn", [
    lambda x: torch.sum(x, dim=()), lambda x: torch.amax(x, dim=[]), lambda x: x.mean(()),
], ids=["sum()", "amax[]", "mean()"])
def test_empty_dim_list_cuda(fn, variant):
    run(Fn(fn), (torch.randn(2, 3),), {0: {0: "N"}}, [(torch.randn(900, 3),)], device=DEV)


def test_zero_dim_cuda():
    run(Fn(lambda x: (x.sum(0), x.transpose(0, 0) * 2, x.amax(-1))), (torch.tensor(1.5),),
        device=DEV)


def test_hostile_names_cuda():
    for name in HOSTILE:
        cm = dl.compile(WorkedSum(), (torch.randn(2, 4, 6, device=DEV),
                                   torch.randn(1, 4, 1, device=DEV)), dynamic={0: {0: name}},
                        backend="cuda")
        x, y = torch.randn(5, 4, 6, device=DEV), torch.randn(1, 4, 1, device=DEV)
        torch.testing.assert_close(cm(x, y), WorkedSum()(x, y), rtol=1e-5, atol=1e-5)


def test_pickle_cuda():
    cm = dl.compile(WorkedSum(), (torch.randn(2, 4, 6, device=DEV), torch.randn(1, 4, 1, device=DEV)),
                    dynamic={0: {0: "N"}}, backend="cuda")
    cm2 = pickle.loads(pickle.dumps(cm))
    x, y = torch.randn(9, 4, 6, device=DEV), torch.randn(1, 4, 1, device=DEV)
    torch.testing.assert_close(cm2(x, y), cm(x, y))


class Affine(torch.nn.Module):   # per-element: a vector load of x, scalar loads of s and b
    def forward(self, x, s, b):
        return torch.relu(x * s + b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_vectorized_entry_point(dtype, monkeypatch):
    """The vectorized entry point where numel divides by its width and every vector access is
    aligned; the scalar one otherwise (an odd numel, an input 1 element off its allocation):
    the right values either way, and the launch trace says which ran."""
    s = torch.randn(1, 6, 1, 1, device=DEV, dtype=dtype)
    b = torch.randn(1, 6, 1, 1, device=DEV, dtype=dtype)
    cm = dl.compile(Affine(), (torch.randn(2, 6, 5, 8, device=DEV, dtype=dtype), s, b),
                    dynamic={0: {0: "N", 3: "W"}}, backend="cuda")
    th, log = cm._thunk, []
    monkeypatch.setattr(th, "graphs", None)   # a replay reads its own (aligned) input copies
    monkeypatch.setattr(th, "launchers", [Recorder(f, log) for f in th.launchers])
    w = 16 // torch.tensor([], dtype=dtype).element_size()
    big = torch.randn(4 * 6 * 5 * 8 + 1, device=DEV, dtype=dtype)
    cases = [(big[:4 * 6 * 5 * 8].view(4, 6, 5, 8), w),      # aligned, numel % w == 0
             (big[1:].view(4, 6, 5, 8), 1),                   # 1 element off: scalar
             (torch.randn(3, 6, 5, 7, device=DEV, dtype=dtype), 1)]   # 630 elements
    for x, want_w in cases:
        log.clear()
        torch.testing.assert_close(cm(x, s, b), Affine()(x, s, b))
        assert [e[-1] for e in log] == [want_w], (x.shape, log)
    t = cm.trace(cases[0][0], s, b)
    assert [(st.name.endswith("_v"), st.width) for st in t.steps] == [(True, w)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mod", [ScalarCmp, ScalarRem, ScalarPow, ScalarAdd, ScalarDiv])
def test_16bit_op_with_a_scalar_cuda(mod, dtype):
    """A Python float beside a 16-bit tensor, as CUDA eager takes it (rounded to the dtype in
    comparisons, remainder and pow; kept as float in add and mul; a divisor as its reciprocal,
    in float): equal bit for bit (in float32 a fused multiply-add rounds once where eager's
    two kernels round twice)."""
    for x in scalar_16bit_inputs(dtype, DEV):
        cm = dl.compile(mod(), (x,), dynamic={0: {0: "N"}}, backend="cuda")
        assert torch.equal(cm(x), mod()(x)), mod.__name__


@pytest.mark.parametrize("op", ["max", "avg"])
@pytest.mark.parametrize("k,s,p", [(2, 3, 0), (3, 2, 0), (3, 2, 1), (5, 4, 2)])
def test_ceil_mode_pools_down_to_an_input_shorter_than_the_window_cuda(op, k, s, p):
    """``test_codegen``'s ceil-mode pools on the ``cuda`` backend: one dynamic compile matches
    eager at every H, W eager takes (the overhang window's clamped taps and clipped count,
    computed with a floor division where the full windows' count may be 0) and refuses the
    rest before any launch."""
    pool = F.max_pool2d if op == "max" else F.avg_pool2d
    m = Fn(lambda x: pool(torch.relu(x), k, s, p, ceil_mode=True))
    cm = dl.compile(m, torch.randn(2, 3, 9, 8, device=DEV), dynamic={0: {2: "H", 3: "W"}},
                    backend="cuda")
    eager_or_refused(cm, m, [torch.randn(2, 3, h, h + 1, device=DEV) for h in range(1, 10)],
                     "reaches the window")
