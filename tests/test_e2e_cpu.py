"""End to end on the ``cpu`` backend (numba): compile each model ONCE with dynamic dims, then call it
at many shapes and compare with torch eager. This is the product promise: one compile, every shape.

Compiled modules are cached per module (``compiled``), so each model's kernels are built once.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dlcb_lab as dl
from dlcb_lab.kgen.emit import numba_module
from dlcb_lab.runtime.numba_cpu import load_numba_module

from harness import TOL, Compiled, check_eager, check_nan_propagation
from models import BY_NAME, CASES, CHAIN_OPS, Affine, Chain

NS = (1, 2, 7, 64)


def dispatchers(cm):
    """The numba dispatchers behind ``cm`` (its generated module is already loaded: a cache hit)."""
    mod, new = load_numba_module(numba_module([k.body for k in cm.pipeline.kernels]))
    assert not new, "the generated numba module should already be loaded by dl.compile"
    return [getattr(mod, k.name) for k in cm.pipeline.kernels]


@pytest.fixture(scope="module")
def compiled():
    return Compiled(backend="cpu", device="cpu")


# --- one compile, many batch sizes -----------------------------------------------------------------

@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("case", CASES, ids=repr)
def test_matches_eager_dynamic_batch(compiled, case, n):
    cm = compiled.get(case)
    builds = cm.stats()["kernel_builds"]
    calls = cm.stats()["calls"]
    check_eager(case, cm, case.inputs(n))
    s = cm.stats()
    assert s["compiles"] == 1 and s["thunk"] == "dynamic"
    assert s["kernel_builds"] == builds == s["kernels"] == len(cm.pipeline.kernels)
    assert s["calls"] == calls + 1


@pytest.mark.parametrize("case", [c for c in CASES if c.dynamic2], ids=repr)
@pytest.mark.parametrize("n,m", [(1, 1), (2, 6), (7, 3), (64, 11)])
def test_matches_eager_two_dynamic_dims(compiled, case, n, m):
    cm = compiled.get(case, "dynamic2")
    check_eager(case, cm, case.inputs(n, m))
    assert cm.stats()["compiles"] == 1
    names = {r.expr.name for r in cm.pipeline.dims.rows if r.kind.value == "named"
             and hasattr(r.expr, "name")}
    assert set().union(*(d.values() for d in case.dynamic2.values())) <= names


@pytest.mark.parametrize("name", ["worked", "unary", "binary"])
def test_empty_batch(compiled, name):
    case = BY_NAME[name]
    check_eager(case, compiled.get(case), case.inputs(0))


def test_float64(compiled):
    case = BY_NAME["softmax"]
    cm = compiled.get(case, dtype=torch.float64)
    for n in (1, 5):
        ins = case.inputs(n, dtype=torch.float64)
        check_eager(case, cm, ins)
    assert all(k.body.dtype.tag == "f64" for k in cm.pipeline.kernels)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", [BY_NAME[n] for n in ("softmax", "mixed", "reductions")], ids=repr)
def test_16bit(compiled, case, dtype):
    """16-bit buffers, float registers, each op rounded: eager's values up to accumulator width."""
    cm = compiled.get(case, dtype=dtype)
    for n in (1, 5, 33):
        check_eager(case, cm, case.inputs(n, dtype=dtype))
    assert all(k.body.dtype.reduced for k in cm.pipeline.kernels)


def test_noncontiguous_input(compiled):
    case = BY_NAME["worked"]
    cm = compiled.get(case)
    x, y = case.inputs(5)
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)   # same values, non-contiguous
    assert not xt.is_contiguous()
    torch.testing.assert_close(cm(xt, y), case.module()(x, y), **TOL)


def test_nan_propagation():
    """maximum/minimum/relu/amax propagate NaN like torch; a NaN scalar operand works."""
    check_nan_propagation(backend="cpu", device="cpu")


def test_stats_and_no_rebuilds(compiled):
    """Calls never build kernels: kernel_builds stays put and each numba dispatcher keeps exactly
    its one eagerly compiled signature whatever the shape."""
    case = BY_NAME["mixed"]
    cm = compiled.get(case)
    ds = dispatchers(cm)
    before = cm.stats()
    assert before["compiles"] == 1 and before["kernels"] == 4 == before["kernel_builds"]
    sigs = [len(d.signatures) for d in ds]
    assert sigs == [1] * len(ds)
    for i, n in enumerate((1, 2, 7, 64, 3)):
        cm(*case.inputs(n))
        assert cm.stats()["calls"] == before["calls"] + i + 1
    after = cm.stats()
    assert after["kernel_builds"] == before["kernel_builds"]
    assert [len(d.signatures) for d in ds] == sigs
    assert after["compile_s"] == before["compile_s"]


def test_outputs_are_fresh_buffers(compiled):
    case = BY_NAME["mixed"]
    cm = compiled.get(case)
    ins = case.inputs(4)
    a, b = cm(*ins), cm(*ins)
    for u, v in zip(a, b):
        assert u.data_ptr() != v.data_ptr()
        torch.testing.assert_close(u, v, rtol=0, atol=0)


# --- static compile --------------------------------------------------------------------------------

def test_static_compile(compiled):
    case = BY_NAME["worked"]
    cm = compiled.get(case, "static")
    assert cm.stats()["thunk"] == "static"
    assert all(r.kind.value == "literal" for r in cm.pipeline.dims.rows)
    check_eager(case, cm, case.inputs(3))
    check_eager(case, cm, case.inputs(3))   # fresh values, same shape
    calls = cm.stats()["calls"]
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 'x' axis 0"):
        cm(*case.inputs(4))
    assert cm.stats()["calls"] == calls


def test_static_compile_multi_output(compiled):
    case = BY_NAME["reductions"]
    cm = compiled.get(case, "static")
    check_eager(case, cm, case.inputs(3))
    with pytest.raises(dl.ShapeMismatch):
        cm(*case.inputs(2))


# --- property: random op chains, compiled once, checked at several batch sizes ---------------------

def _check_chain(names, batches=(1, 2, 9)):
    m = Chain(names)
    g = torch.Generator().manual_seed(len(names))
    cm = dl.compile(m, (torch.randn(3, 4, 6, generator=g),), dynamic={0: {0: "N"}}, backend="cpu")
    for n in batches:
        x = torch.randn(n, 4, 6, generator=g)
        got, want = cm(x), m(x)
        assert got.shape == want.shape, m.names
        torch.testing.assert_close(got, want, **TOL, msg=lambda s: f"{m.names}: {s}")
    assert cm.stats()["calls"] == len(batches) and cm.stats()["compiles"] == 1


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(sorted(CHAIN_OPS)), min_size=1, max_size=6))
@example(names=["flatten", "split", "scale", "transpose", "fold", "norm_all", "restore", "add_x"])
@example(names=["transpose", "flatten", "split", "bmax", "min_x", "expneg", "rsub_s", "add_s"])
def test_random_chains(names):
    _check_chain(names)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.sampled_from(sorted(CHAIN_OPS)), min_size=1, max_size=10))
def test_random_chains_sweep(names):
    """``make test-slow``: longer chains, fresh examples every run (numba compiles each)."""
    _check_chain(names, batches=(1, 2, 9, 33))


# --- parameters, buffers, autograd inputs ----------------------------------------------------------

def test_parameters_and_buffers_are_constants():
    m = Affine()
    cm = dl.compile(m, torch.randn(2, 4, 6), dynamic={0: {0: "N"}}, backend="cpu")
    assert [v.name for v, _ in cm.pipeline.graph.constants] == ["weight", "shift", "inner_scale"]
    with torch.no_grad():
        for n in (1, 5):
            x = torch.randn(n, 4, 6)
            torch.testing.assert_close(cm(x), m(x), **TOL)
        m.weight.mul_(2.0)   # in-place updates are seen (CPU: same storage)
        x = torch.randn(3, 4, 6)
        torch.testing.assert_close(cm(x), m(x), **TOL)
    with pytest.raises(TypeError, match=r"expected 1 tensor inputs \(x\), got 2"):
        cm(x, x)


def test_requires_grad_inputs_are_accepted():
    cm = dl.compile(Affine(), torch.randn(2, 4, 6), dynamic={0: {0: "N"}}, backend="cpu")
    x = torch.randn(3, 4, 6, requires_grad=True)
    y = cm(x)
    assert not y.requires_grad and y.shape == (3, 4, 6)
