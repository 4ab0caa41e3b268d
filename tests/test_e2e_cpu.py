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
from models import BY_NAME, CASES

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
    assert all(k.body.dtype == "f64" for k in cm.pipeline.kernels)


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

def _chain_ops():
    """name -> (applicable(rest), code(h, x, rest) -> h', new rest). ``rest``: h's non-leading
    dims (plain ints: ``h.dim()`` is a Proxy under fx tracing).

    Every op keeps numel (so ``x.reshape(h.shape)`` is always valid) and keeps values bounded, so
    float32 results stay comparable with eager at 1e-5."""
    every = lambda r: True   # noqa: E731
    same = lambda r: r       # noqa: E731
    ops = {
        "relu": (every, lambda h, x, r: torch.relu(h), same),
        "neg": (every, lambda h, x, r: -h, same),
        "expneg": (every, lambda h, x, r: torch.exp(-h.abs()), same),
        "sigmoid": (every, lambda h, x, r: torch.sigmoid(h), same),
        "tanh": (every, lambda h, x, r: h.tanh(), same),
        "abs": (every, lambda h, x, r: torch.abs(h), same),
        "add_s": (every, lambda h, x, r: h + 1.5, same),
        "rsub_s": (every, lambda h, x, r: 2.0 - h, same),
        "mul_s": (every, lambda h, x, r: -0.5 * h, same),
        "div_s": (every, lambda h, x, r: h / 3, same),
        "rdiv_s": (every, lambda h, x, r: 1.0 / (1.0 + h.abs()), same),
        "add_x": (every, lambda h, x, r: h + x.reshape(h.shape), same),
        "sub_x": (every, lambda h, x, r: torch.sub(x.reshape(h.shape), h), same),
        "mul_x": (every, lambda h, x, r: h * torch.tanh(x.reshape(h.shape)), same),
        "div_x": (every, lambda h, x, r: h / (x.reshape(h.shape).abs() + 1.0), same),
        "max_x": (every, lambda h, x, r: torch.maximum(h, x.reshape(h.shape)), same),
        "min_x": (every, lambda h, x, r: torch.minimum(x.reshape(h.shape), h), same),
        "center": (every, lambda h, x, r: h - h.mean(-1, keepdim=True), same),
        "scale": (every, lambda h, x, r: h / (h.abs().amax(1, keepdim=True) + 1.0), same),
        "norm_all": (every, lambda h, x, r: h / (1.0 + h.abs().sum(
            dim=tuple(range(1, len(r) + 1)), keepdim=True)), same),
        "bmax": (every, lambda h, x, r: h - h.amax(0, keepdim=True), same),
        "transpose": (lambda r: len(r) >= 2, lambda h, x, r: h.transpose(-1, -2),
                      lambda r: (*r[:-2], r[-1], r[-2])),
        "flatten": (lambda r: len(r) >= 2, lambda h, x, r: h.flatten(1), lambda r: (_prod(r),)),
        "split": (lambda r: len(r) == 1 and r[0] % 4 == 0,
                  lambda h, x, r: h.view(h.size(0), 4, -1), lambda r: (4, r[0] // 4)),
        "fold": (lambda r: len(r) >= 2, lambda h, x, r: h.reshape(-1, h.shape[-1]),
                 lambda r: (r[-1],)),
        "restore": (every, lambda h, x, r: h.reshape(x.shape), lambda r: (4, 6)),
    }
    return ops


def _prod(r):
    p = 1
    for d in r:
        p *= d
    return p


CHAIN_OPS = _chain_ops()


class Chain(torch.nn.Module):
    def __init__(self, names):
        super().__init__()
        rest, self.names, self.steps = (4, 6), [], []
        for nm in names:   # keep the ops that apply to the current shape
            ok, _, nxt = CHAIN_OPS[nm]
            if ok(rest):
                self.names.append(nm)
                self.steps.append((nm, rest))
                rest = nxt(rest)

    def forward(self, x):
        h = x
        for nm, rest in self.steps:
            h = CHAIN_OPS[nm][1](h, x, rest)
        return h


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(sorted(CHAIN_OPS)), min_size=1, max_size=6))
@example(names=["flatten", "split", "scale", "transpose", "fold", "norm_all", "restore", "add_x"])
@example(names=["transpose", "flatten", "split", "bmax", "min_x", "expneg", "rsub_s", "add_s"])
def test_random_chains(names):
    m = Chain(names)
    g = torch.Generator().manual_seed(len(names))
    cm = dl.compile(m, (torch.randn(3, 4, 6, generator=g),), dynamic={0: {0: "N"}}, backend="cpu")
    for n in (1, 2, 9):
        x = torch.randn(n, 4, 6, generator=g)
        got, want = cm(x), m(x)
        assert got.shape == want.shape, m.names
        torch.testing.assert_close(got, want, **TOL, msg=lambda s: f"{m.names}: {s}")
    assert cm.stats()["calls"] == 3 and cm.stats()["compiles"] == 1
