"""End to end on the ``cuda`` backend (NVRTC cubins launched on CUDA tensors): each model compiled
ONCE, called at many batch sizes, compared with torch eager on the GPU. Skipped without CUDA.

Run on the GPU machine: ``PYTHONPATH=. python3 -m pytest -q -m gpu tests/models/test_e2e_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlcb_lab as dl
from dlcb_lab.kgen import entries as entries_mod
from dlcb_lab.kgen.emit import entry_points
from dlcb_lab.kgen.entries import NARROW, ROW_CACHE, VECTOR, WARP
from dlcb_lab.runtime import nvrtc
from dlcb_lab.runtime.build import distinct
from dlcb_lab.runtime import launchers

from harness import Compiled, Spy, check_eager, check_nan_propagation, force_launch
from models import BY_NAME, CASES, CHAIN_OPS, Affine, Chain, Windows

pytestmark = pytest.mark.gpu

NS = (1, 2, 7, 64, 1000)
DEV = "cuda"


@pytest.fixture(scope="module")
def compiled():
    return Compiled(backend="cuda", device=DEV)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_matches_eager_dynamic_batch(compiled, case, n):
    cm = compiled.get(case)
    s0 = cm.stats()
    nvrtc.wait_background()   # the 64-bit entry points, compiled after the compile returned
    nv0 = nvrtc.nvrtc_compile_count()
    check_eager(case, cm, case.inputs(n, device=DEV))
    s = cm.stats()
    assert s["compiles"] == 1 and s["thunk"] == "dynamic"
    bodies = [k.body for k in cm.pipeline.kernels]
    built = [b for i, (b, r) in enumerate(zip(bodies, distinct(bodies))) if r == i]
    entries = len(entry_points(built, ("", NARROW, WARP, VECTOR)))
    assert s["kernel_builds"] == s0["kernel_builds"] == entries >= 2 * len(built)
    assert s["calls"] == s0["calls"] + 1
    assert nvrtc.nvrtc_compile_count() == nv0, "a call compiled CUDA"


@pytest.mark.parametrize("case", [c for c in CASES if c.dynamic2], ids=repr)
@pytest.mark.parametrize("n,m", [(1, 1), (2, 6), (7, 3), (64, 11), (1000, 17)])
def test_matches_eager_two_dynamic_dims(compiled, case, n, m):
    cm = compiled.get(case, "dynamic2")
    check_eager(case, cm, case.inputs(n, m, device=DEV))
    assert cm.stats()["compiles"] == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_16bit(compiled, case, dtype):
    """16-bit loads (cvt / bit shift), float math, rounding at each op, 16-bit stores."""
    cm = compiled.get(case, dtype=dtype)
    for n in (1, 7, 1000):
        check_eager(case, cm, case.inputs(n, device=DEV, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_windows_over_runtime_extents(dtype):
    """Window kernels (terms before their fold, the global mean one flat loop) from one dynamic
    compile against eager at several H, W."""
    m = Windows().to(DEV, dtype).eval()
    cm = dl.compile(m, torch.randn(2, 8, 9, 11, device=DEV, dtype=dtype),
                    dynamic={0: {0: "N", 2: "H", 3: "W"}})
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    for shape in ((2, 8, 9, 11), (1, 8, 3, 3), (3, 8, 14, 14), (1, 8, 56, 56), (8, 8, 7, 5)):
        x = torch.randn(shape, device=DEV, dtype=dtype)
        for a, b in zip(cm(x), m(x)):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    assert cm.stats()["compiles"] == 1


def test_float64(compiled):
    case = BY_NAME["softmax"]
    cm = compiled.get(case, dtype=torch.float64)
    for n in (1, 7, 1000):
        check_eager(case, cm, case.inputs(n, device=DEV, dtype=torch.float64))


def test_large_batch_grid_stride(compiled):
    """More elements than one grid covers (MAX_GRID * BLOCK): the grid-stride loop must reach all."""
    case = BY_NAME["unary"]
    n = entries_mod.MAX_GRID * entries_mod.BLOCK // 15 + 3      # 15 elements per batch row
    check_eager(case, compiled.get(case), case.inputs(n, device=DEV))


def test_nan_propagation():
    check_nan_propagation(backend="cuda", device=DEV)


def test_static_compile(compiled):
    case = BY_NAME["worked"]
    cm = compiled.get(case, "static")
    assert cm.stats()["thunk"] == "static"
    check_eager(case, cm, case.inputs(3, device=DEV))
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 'x' axis 0"):
        cm(*case.inputs(4, device=DEV))


def test_errors_before_launch(compiled, monkeypatch):
    case = BY_NAME["mixed"]
    cm = compiled.get(case)
    spy = Spy(cm, monkeypatch)
    x, y = case.inputs(5, device=DEV)
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 'x' axis 1: size 5 != 4"):
        cm(torch.randn(5, 5, 6, device=DEV), y)
    with pytest.raises(ValueError, match=r"input 0 'x': on cpu, expected cuda"):
        cm(x.cpu(), y)
    spy.assert_untouched()
    cm(x, y)
    assert spy.launches == len(spy.thunk.launchers) and spy.thunk.calls == spy.calls0 + 1
    # a new rank or dtype is no refusal: each is compiled once, on the device, on first use
    torch.testing.assert_close(cm(x, y[0]), case.module()(x, y[0]))
    assert cm.stats()["jit_builds"] == 1 and cm.stats()["thunks"]["jit"] == 1
    torch.testing.assert_close(cm(x.double(), y), case.module()(x.double(), y))
    assert cm.stats()["dtype_builds"] == 1 and cm.stats()["thunks"]["jit"] == 2


def test_residual_constraint_on_cuda():
    class R(torch.nn.Module):
        def forward(self, x):
            return x.reshape(-1, 4)

    cm = dl.compile(R(), (torch.randn(2, 6, device=DEV),), dynamic={0: {0: "N"}}, backend="cuda")
    x = torch.randn(4, 6, device=DEV)
    torch.testing.assert_close(cm(x), x.reshape(-1, 4), rtol=0, atol=0)
    with pytest.raises(dl.ShapeMismatch, match="residual constraint"):
        cm(torch.randn(3, 6, device=DEV))


@pytest.mark.parametrize("variant", ["thread", "block", "warp"])
@pytest.mark.parametrize("name", ["reductions", "softmax", "mixed"])
@pytest.mark.parametrize("n", [1, 7, 300, 5000])
def test_reduction_variants(compiled, monkeypatch, name, n, variant):
    """The reduction kernels' entry points (thread, block or warp per output) agree with eager,
    whatever the launch-time choice would have been."""
    case = BY_NAME[name]
    cm = compiled.get(case)
    assert any(k.body.variant is not None for k in cm.pipeline.kernels)
    force_launch(monkeypatch, variant)
    monkeypatch.setattr(cm._thunk, "graphs", None)   # a replay would keep its captured variant
    check_eager(case, cm, case.inputs(n, device=DEV))


class Rows(torch.nn.Module):
    def forward(self, x, w, b):
        return (torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b), torch.softmax(x, -1),
                torch.log_softmax(x, -1), x.sum(-1), x.amax(-1), x.mean(-1, keepdim=True))


@pytest.mark.parametrize("c", [31, 32, 49, 64, 96, 512, 513, 768, 1024, 1025])
def test_short_rows_take_a_warp_per_row(c):
    """Row reductions over contiguous rows of ``c`` elements: a group of lanes per row (``_w``:
    16 lanes and 16 rows a block up to ``entries.HALF_ROW_MAX``, else a warp and 8 rows) from
    ``launchers.WARP_MIN_ROWS`` to ``32 * entries.ROW_CACHE``, whatever the rows,
    the block or a thread per row elsewhere; equal to eager either way. The rows are literal, so
    the normalizations and softmaxes (``entries.warp_cache``) take a warp up to
    ``entries.WARP_ROW_MAX``; the sum, amax and mean up to ``32 * entries.ROW_CACHE``, and past it
    where the rows are ``launchers.WARPS_PER_SM`` per SM or more."""
    from dlcb_lab.kgen.entries import HALF_ROW_MAX, WARP_ROW_MAX

    lo = launchers.WARP_MIN_ROWS
    many = launchers.WARPS_PER_SM * torch.cuda.get_device_properties(DEV).multi_processor_count
    m = Rows()
    w, b = torch.randn(c, device=DEV), torch.randn(c, device=DEV)
    cm = dl.compile(m, (torch.randn(2, 3, c, device=DEV), w, b), dynamic={0: {0: "N"}},
                    backend="cuda")
    for n in (1, 7, 3000):
        x = torch.randn(n, 3, c, device=DEV)
        steps = [s for s in cm.trace(x, w, b).steps if s.kind == "kernel" and s.numel]
        assert len(steps) == 6
        for s in steps:
            row = "layer_norm" in s.name or "softmax" in s.name
            warp = lo <= c <= (WARP_ROW_MAX if row else 32 * ROW_CACHE) or \
                not row and lo <= c and s.numel >= many
            per = 256 // (16 if c <= HALF_ROW_MAX else 32)
            assert s.name.endswith("_blk_w") == warp and (s.width == per) == warp, s
            assert not warp or s.grid == -(-s.numel // per)
        for got, want in zip(cm(x, w, b), m(x, w, b)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.sampled_from(sorted(CHAIN_OPS)), min_size=1, max_size=8))
def test_random_chains_cuda(names):
    """Random op chains compiled once (NVRTC is cheap, so many more than on the CPU), checked at
    batch sizes that take both reduction variants."""
    m = Chain(names)
    g = torch.Generator().manual_seed(len(names))
    cm = dl.compile(m, (torch.randn(3, 4, 6, generator=g).to(DEV),), dynamic={0: {0: "N"}},
                    backend="cuda")
    for n in (1, 2, 9, 700, 5000):
        x = torch.randn(n, 4, 6, generator=g).to(DEV)
        got, want = cm(x), m(x)
        assert got.shape == want.shape, m.names
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5,
                                   msg=lambda s: f"{m.names} N={n}: {s}")
    assert cm.stats()["calls"] == 5 and cm.stats()["compiles"] == 1


def test_parameters_move_to_the_device():
    m = Affine()   # parameters on the CPU: the compiled module keeps device copies
    cm = dl.compile(m, torch.randn(2, 4, 6, device=DEV), dynamic={0: {0: "N"}}, backend="cuda")
    m = m.to(DEV)
    with torch.no_grad():
        for n in (1, 300):
            x = torch.randn(n, 4, 6, device=DEV)
            torch.testing.assert_close(cm(x), m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["binary", "worked", "permutes", "reductions", "softmax"])
def test_wide_index_entry_points(compiled, monkeypatch, name):
    """The 64-bit index entry points (used past 2**31 elements) agree with eager too."""
    monkeypatch.setattr(entries_mod, "NARROW_LIMIT", -1)
    case = BY_NAME[name]
    cm = compiled.get(case)
    monkeypatch.setattr(cm._thunk, "graphs", None)   # a replay would keep its captured width
    for n in (1, 7, 300):
        check_eager(case, cm, case.inputs(n, device=DEV))
