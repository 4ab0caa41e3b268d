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
    assert [v.name for v, _ in cm.pipeline.graph.constants] == ["weight", "shift", "inner.scale"]
    with torch.no_grad():
        for n in (1, 5):
            x = torch.randn(n, 4, 6)
            torch.testing.assert_close(cm(x), m(x), **TOL)
        m.weight.mul_(2.0)   # in-place updates are seen (CPU: same storage)
        x = torch.randn(3, 4, 6)
        torch.testing.assert_close(cm(x), m(x), **TOL)
    with pytest.raises(TypeError, match=r"takes at most 1 positional argument\(s\) \(x\), got 2"):
        cm(x, x)


def test_requires_grad_inputs_are_accepted():
    cm = dl.compile(Affine(), torch.randn(2, 4, 6), dynamic={0: {0: "N"}}, backend="cpu")
    x = torch.randn(3, 4, 6, requires_grad=True)
    y = cm(x)
    assert not y.requires_grad and y.shape == (3, 4, 6)


# --- source locations ---------------------------------------------------------------------------

CELL = "/tmp/ipykernel_4242/1896757467.py"   # ipykernel's file name for a notebook cell
CELL_SRC = '''import torch.nn.functional as F
class CellModule(torch.nn.Module):
    def forward(self, x):
        return F.pad(x, (1, 1), mode="zeros")
'''


def test_source_file_names_a_notebook_cell():
    """IPython maps a cell's file name to its execution count: ``In[3]``, not the hash."""
    from dlcb_lab.bridge.capture import source_file

    assert source_file(CELL, {CELL: 3}) == "In[3]"
    assert source_file(CELL, {"/tmp/ipykernel_4242/other.py": 3}) == "1896757467.py"
    assert source_file(CELL) == "1896757467.py"   # no IPython running: the basename
    assert source_file("/home/u/model.py") == "model.py"


def _cell_module():
    """A module class whose code was compiled from a cell-style file name (as ipykernel does:
    the source is in ``linecache``)."""
    import linecache

    linecache.cache[CELL] = (len(CELL_SRC), None, CELL_SRC.splitlines(True), CELL)
    ns = {"torch": torch}
    exec(compile(CELL_SRC, CELL, "exec"), ns)
    return ns["CellModule"]()


def test_refusal_in_cell_code_outside_ipython_names_the_file():
    """torch rejects ``mode="zeros"`` while export traces: the refusal names the cell's file."""
    with pytest.raises(dl.ShapeError) as ei:
        dl.compile(_cell_module(), torch.randn(2, 3), backend="cpu", dynamic=False)
    assert ei.value.where == '1896757467.py:4 in forward: return F.pad(x, (1, 1), mode="zeros")'


def test_refusal_in_an_ipython_cell_names_the_cell():
    """Under a real IPython shell the location reads ``In[<n>]:<line>``."""
    interactiveshell = pytest.importorskip("IPython.core.interactiveshell")
    shell = interactiveshell.InteractiveShell.instance()
    try:
        shell.run_cell("import torch, dlcb_lab as dl", store_history=True)
        shell.run_cell(CELL_SRC, store_history=True)
        count = shell.execution_count - 1
        shell.run_cell("try:\n    dl.compile(CellModule(), torch.randn(2, 3), backend='cpu')\n"
                       "except dl.DLError as e:\n    err = e\n", store_history=True)
        where = shell.user_ns["err"].where
    finally:
        interactiveshell.InteractiveShell.clear_instance()
    assert where == f'In[{count}]:4 in forward: return F.pad(x, (1, 1), mode="zeros")'


# --- div with rounding_mode -----------------------------------------------------------------------

class _Div(torch.nn.Module):
    def __init__(self, mode, scalar=None):
        super().__init__()
        self.mode, self.scalar = mode, scalar

    def forward(self, a, b):
        d = b if self.scalar is None else self.scalar
        return torch.div(a, d, rounding_mode=self.mode), a.div(d, rounding_mode=self.mode) * 2


def _div_operands(n, dtype):
    g = torch.Generator().manual_seed(n)
    a = torch.randn(n, 400, generator=g) * 60
    b = torch.randn(n, 400, generator=g)   # quotients near integers, rounded in 16 bits
    a[0, :4] = torch.tensor([5.0, -5.0, 0.0, -0.0])
    b[0, :4] = torch.tensor([0.0, 0.0, -2.0, 3.0])   # +-inf, NaN, signed zeros
    a[0, 4], b[0, 4] = float("inf"), 2.0
    a[0, 5], b[0, 5] = 7.0, -3.5                   # an exact quotient
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=str)
def test_div_rounding_float(mode, dtype):
    """Floating operands: bit-exact against eager (signed zeros, infinities, NaN, negatives; in
    16 bits eager rounds the quotient, and each step of 'floor', to 16 bits), at several batch
    sizes of one dynamic compile."""
    m = _Div(mode)
    cm = dl.compile(m, _div_operands(3, dtype), dynamic={0: {0: "N"}, 1: {0: "N"}},
                    backend="cpu")
    for n in (1, 3, 8):
        ins = _div_operands(n, dtype)
        for got, want in zip(cm(*ins), m(*ins)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
            num = ~want.isnan()   # signed zeros (a NaN's sign bit is not specified)
            assert torch.equal(got.signbit()[num], want.signbit()[num])


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("divisor", [3, -4, 1])
def test_div_rounding_integer_by_python_int(mode, divisor):
    m = _Div(mode, divisor)
    a = torch.arange(-13, 14).reshape(3, 9)
    cm = dl.compile(m, (a, a), dynamic={0: {0: "N"}}, backend="cpu")
    for x in (a, torch.randint(-2**40, 2**40, (5, 9))):
        for got, want in zip(cm(x, a), m(x, a)):
            assert got.dtype == want.dtype == torch.int64
            assert torch.equal(got, want)


def test_div_rounding_integer_refusals():
    a = torch.arange(6).reshape(2, 3)
    with pytest.raises(dl.UnsupportedOp, match=r"integer division \(rounding_mode='floor'\) by "
                                               r"a tensor: eager raises on a zero divisor"):
        dl.compile(_Div("floor"), (a, a), backend="cpu", fallback=False, dynamic=False)
    with pytest.raises(dl.UnsupportedOp, match=r"integer division by zero"):
        dl.compile(_Div("trunc", 0), (a, a), backend="cpu", fallback=False, dynamic=False)
    with pytest.raises(dl.ShapeError, match=r"torch rejects the program: .*div expected "
                       r"rounding_mode to be one of .* but found round"):   # eager raises too
        dl.compile(_Div("round"), (a.float(), a.float()), backend="cpu", dynamic=False)


def test_rounding_division_and_pad_modes_compile_to_cubin():
    """The CUDA spellings of the rounding divisions (float, double, half, int64) and the pad
    modes compile with NVRTC (no GPU needed)."""
    from dlcb_lab.kgen.emit import cuda_module
    from dlcb_lab.kgen.infer import infer_kernels
    from dlcb_lab.runtime.nvrtc import compile_cubin

    class Mixed(torch.nn.Module):
        def forward(self, a, b, i):
            pads = [torch.nn.functional.pad(a, (2, 1, 1, 1), mode=m)
                    for m in ("reflect", "replicate", "circular")]
            return (*pads, torch.div(a, b, rounding_mode="floor"),
                    torch.div(a.double(), b.double(), rounding_mode="trunc"),
                    torch.div(a.half(), b.half(), rounding_mode="floor"),
                    torch.div(a.bfloat16(), b.bfloat16(), rounding_mode="floor"), a.trunc(),
                    torch.div(i, -3, rounding_mode="floor"), torch.div(i, 5, rounding_mode="trunc"))

    ins = (torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.arange(24).reshape(2, 3, 4))
    cm = dl.compile(Mixed(), ins, dynamic={0: {0: "N", 2: "W"}, 1: {0: "N", 2: "W"},
                                           2: {0: "N", 2: "W"}}, backend="cpu")
    for got, want in zip(cm(*ins), Mixed()(*ins)):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    src = cuda_module(infer_kernels(cm.pipeline.graph, True))
    assert "dlcb_r_bf16>(" in src and "dlcb_trunc(" in src and "dlcb_fdiv(" in src
    assert compile_cubin(src, arch="sm_90")[:4] == b"\x7fELF"


MAX_CHAINS = r'''
import torch, dlcb_lab as dl
class M(torch.nn.Module):
    def forward(self, x, y):
        return x.amax(), y.abs().amin(), torch.linalg.vector_norm(y, float("-inf")), x.amax(-1)
x, y = torch.randn(4, 8), torch.randn(5, 5)
x[1, 7] = float("nan")
got, want = dl.compile(M(), (x, y), backend="cpu")(x, y), M()(x, y)
for a, b in zip(got, want):
    torch.testing.assert_close(a, b, equal_nan=True)
print("ok")
'''


def test_max_reductions_over_literal_extents_compile():
    """Static max and min reductions of 32 and 25 elements to one value: numba's LLVM,
    vectorizing the output loop around an unrolled chain of NaN-propagating maxima that does
    not depend on the output index, ran for hours (``norm(x, -inf)`` of a 5x5 OpInfo sample);
    such kernels compile with its loop vectorizer off. In a subprocess, so that a
    return of the hang fails here instead of stalling the suite."""
    import subprocess
    import sys

    import os
    import tempfile

    fresh = tempfile.mkdtemp()   # nothing compiled before: the kernels compile here
    out = subprocess.run([sys.executable, "-c", MAX_CHAINS], capture_output=True, text=True,
                         timeout=240, env={**os.environ, "DLCB_CACHE_DIR": fresh,
                                           "NUMBA_CACHE_DIR": fresh})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
