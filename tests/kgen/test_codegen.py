"""Code generation without running anything: every model's generated CUDA compiles with NVRTC to an
sm_90 cubin (CI's proof that generated CUDA is valid, no GPU needed), the worked example's coordinate
map and source have the promised shape, golden files pin two small kernels, and the host program's
interpreter and its compiled form agree on valid and invalid shapes.

Regenerate the golden files with ``DLCB_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import os
from dataclasses import replace
import pathlib
import random
import re

import pytest
import torch
import torch.nn.functional as F

import dlcb_lab as dl
from dlcb_lab.bridge.aten import to_ir
from dlcb_lab.dims import lit
from dlcb_lab.hostgen.lower import lower
from dlcb_lab.kgen.infer import coord_var, infer_kernels, materialized_values
from dlcb_lab.kgen.emit import cuda_kernel, cuda_module, numba_kernel, numba_module
from dlcb_lab.kgen.entries import NARROW, VECTOR
from dlcb_lab.kgen.emit import all_variants, entry_points
from dlcb_lab.runtime.nvrtc import compile_cubin

from dlcb_lab.kgen.kir import Load, Loop

from harness import eager_or_refused
from models import BY_NAME, CASES, NanProp, Windows
from models import Fn

GOLDEN = pathlib.Path(__file__).parent / "golden"


def build(case, spec="dynamic", n=3, dtype=torch.float32):
    dyn = {"dynamic": case.dynamic, "dynamic2": case.dynamic2, "static": {}}[spec]
    ins = case.inputs(n, case.m if spec == "dynamic2" else None, dtype=dtype)
    g = to_ir(case.module(), list(ins), dyn)
    return g, infer_kernels(g, cooperative=True)


def is_cubin(b: bytes) -> bool:
    return b[:4] == b"\x7fELF"


# --- every model's CUDA compiles ---------------------------------------------------------------------

VARIANTS = [(c, "dynamic", torch.float32) for c in CASES] + \
    [(c, "dynamic2", torch.float32) for c in CASES if c.dynamic2] + \
    [(c, "static", torch.float32) for c in CASES] + \
    [(c, "dynamic", torch.float64) for c in CASES]


@pytest.mark.parametrize("case,spec,dtype", VARIANTS,
                         ids=[f"{c.name}-{s}-{str(d)[6:]}" for c, s, d in VARIANTS])
def test_cuda_compiles_with_nvrtc(case, spec, dtype):
    g, bodies = build(case, spec, dtype=dtype)
    widths = ("", NARROW, VECTOR)   # every entry point a build makes, the vectorized ones too
    src = cuda_module(bodies, widths)
    assert src.count("__global__") == len(entry_points(bodies, widths)) >= 2
    for b in all_variants(bodies):
        assert f'extern "C" __global__ void {b.name}(' in src
    assert is_cubin(compile_cubin(src, arch="sm_90"))


def test_nan_kernels_compile():
    g = to_ir(NanProp(), [torch.randn(2, 5), torch.randn(2, 5)],
                    {0: {0: "N"}, 1: {0: "N"}})
    assert is_cubin(compile_cubin(cuda_module(infer_kernels(g)), arch="sm_90"))


def _entry_head(src: str) -> str:
    head = src[src.index('extern "C" __global__'):]
    return head[:head.index("{")]


def test_int_params_are_long_long():
    """Named and host-computed dims are ``long long`` parameters of both entry points; the body's
    index type is only the template parameter ``I`` (64-bit entry: long long, 32-bit: int),
    save the divisor params (``kgen.abi.magic``: 64 bits at both widths)."""
    for case in CASES:
        for spec in ("dynamic",) + (("dynamic2",) if case.dynamic2 else ()):
            _, bodies = build(case, spec)
            for b in all_variants(bodies):
                src = cuda_kernel(b)
                head = _entry_head(src)
                for name, _ in b.params:
                    assert f"long long {name}" in head, (case.name, b.name, head)
                assert "long long numel" in head
                body = src[:src.index('extern "C"')]
                for name, _ in b.divisors:
                    assert f"long long {name}" in head
                    body = body.replace(f"const long long {name}", "")
                assert not re.search(r"\b(int|long)\b", body), body
                group = ", 0" if b.cooperative else ""   # G: a block-per-output body's group
                assert f"{b.name}_body<long long{group}>(" in src
                assert f"{b.name}_body<int{group}>(" in src
                assert f'void {b.name}{NARROW}(' in src


# --- the worked example (DESIGN.md) ------------------------------------------------------------------

@pytest.fixture(scope="module")
def worked():
    return build(BY_NAME["worked"])


def test_worked_solve(worked):
    g, bodies = worked
    x, y = g.inputs
    N = g.dims(x)[0]
    assert repr(N) == "N"
    assert g.dims(g.outputs[0]) == (N, lit(24))       # M := N: the -1 is solved exactly
    assert g.dims(y) == (lit(1), lit(4), lit(1)) and g.dims(x)[1:] == (lit(4), lit(6))
    assert not g.solver.solution().residuals
    assert g.solver.classify(N).value == "named"


def test_worked_coord_map(worked):
    _, bodies = worked
    assert len(bodies) == 1
    cm = bodies[0].coord_map
    c0, c1 = coord_var(0), coord_var(1)
    loads = dict(cm.loads)
    assert loads["x"] == (c0, c1 // 6, c1 % 6)
    assert loads["y"] == (lit(0), c1 // 6, lit(0))
    assert loads["x"][1] is loads["y"][1]     # interned: one node for ``j // 6``
    assert [repr(e) for _, e in cm.out_coords] == ["_t // 24", "_t % 24"]
    assert cm.loops == ()


def test_worked_cuda_source(worked):
    g, bodies = worked
    (b,) = bodies
    src = cuda_kernel(b)
    head = _entry_head(src)
    # N stays symbolic: it reaches the kernel only through the ``long long`` thread count 24*N
    # (no coordinate needs N itself); 24 and 6 are literals the compiler strength-reduces.
    assert "long long numel" in head
    assert all(n == "d_N" for n, _ in b.params)   # N, if passed at all, as d_N; nothing else
    body = src[src.index("{"):]
    assert re.search(r"\bd_N\b", body) is None or "long long d_N" in head
    assert "in0[t]" in src                  # x's index 24*(t // 24) + t % 24 collapses to t
    assert len(re.findall(r"= t % 24;", src)) == 1 and len(re.findall(r" / 6;", src)) == 1
    assert "dlcb_fdiv" not in src                              # coords are >= 0: plain C division
    py = numba_kernel(b)
    assert "in0[t]" in py and len(re.findall(r"^\s*\w+ = \w+ // 6\b", py, re.M)) == 1
    host, _ = lower(g, materialized_values(g), bodies)
    for n in (1, 5, 64):
        r = host.interpret([(n, 4, 6), (1, 4, 1)])
        assert r[host.slots[f"{b.name}.numel"]] == 24 * n
        assert r[host.slots["reshape.shape[0]"]] == n and r[host.slots["reshape.shape[1]"]] == 24
    with pytest.raises(dl.ShapeMismatch, match=r"input 1 'y' axis 0"):
        host.interpret([(2, 4, 6), (2, 4, 1)])


def test_named_dim_is_a_kernel_parameter():
    """A kernel that needs N itself (a reduction over the batch axis) takes it as ``long long N``,
    evaluated by the host from ``x.shape[0]``."""
    g, bodies = build(BY_NAME["mixed"])
    red = next(b for b in bodies if b.coord_map.loops)
    assert [(n, repr(e)) for n, e in red.params] == [("d_N", "N")]
    src = cuda_kernel(red)
    assert "long long d_N)" in src and re.search(r"l0 < d_N;", src)
    host, _ = lower(g, materialized_values(g), bodies)
    assert host.interpret([(7, 4, 6), (1, 4, 1)])[host.slots[f"{red.name}.d_N"]] == 7


def test_numba_source_is_valid_python():
    for case in CASES:
        _, bodies = build(case)
        compile(numba_module(bodies), f"<{case.name}>", "exec")


# --- golden files --------------------------------------------------------------------------------------

def _golden(name: str, text: str):
    path = GOLDEN / name
    if os.environ.get("DLCB_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} missing: run with DLCB_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} changed; if intended, regenerate with DLCB_UPDATE_GOLDEN=1"


def test_golden_worked(worked):
    _golden("worked.cu", cuda_module(worked[1]))


def test_golden_batch_reduction():
    _, bodies = build(BY_NAME["mixed"])
    red = next(b for b in bodies if b.coord_map.loops)
    _golden("mixed_batch_sum.cu", cuda_kernel(red) + "\n")


# --- window loops -----------------------------------------------------------------------------------

class SumHW(torch.nn.Module):
    def forward(self, x):        # NHWC: H and W adjacent
        return x.sum((1, 2))


class SumCW(torch.nn.Module):
    def forward(self, x):        # NCHW: C and W apart
        return x.sum((1, 3))


def _nest(stmts) -> list:
    return [(s.extent, _nest(s.body)) for s in stmts if isinstance(s, Loop)]


def test_runtime_window_is_one_flat_loop():
    """A window of runtime extents over contiguous elements is one loop over their product (no
    nest with a runtime inner extent the compiler cannot unroll); a window whose elements are
    apart stays a nest (flat, it would divide the loop variable)."""
    g = to_ir(SumHW(), [torch.randn(2, 5, 6, 8)], {0: {1: "H", 2: "W"}})
    (ext, inner), = _nest(infer_kernels(g, cooperative=True)[0].stmts)
    assert not ext.isdigit() and inner == []
    g = to_ir(SumCW(), [torch.randn(2, 5, 6, 8)], {0: {1: "C", 3: "W"}})
    assert _nest(infer_kernels(g, cooperative=True)[0].stmts) == [("d_C", [("d_W", [])])]
    for m, dyn, sizes in ((SumHW(), {0: {1: "H", 2: "W"}}, ((5, 6, 8), (1, 1, 8), (7, 2, 8), (0, 3, 8))),
                          (SumCW(), {0: {1: "C", 3: "W"}}, ((5, 6, 8), (1, 6, 1), (7, 6, 2), (0, 6, 3)))):
        cm = dl.compile(m, torch.randn(2, 5, 6, 8), dynamic=dyn, backend="cpu")
        for size in sizes:
            x = torch.randn(2, *size)
            torch.testing.assert_close(cm(x), m(x))


def test_literal_window_terms_before_fold():
    """A thread's literal inner window loop computes its terms into a register array, then folds
    them; a masked term is the combine's identity (0, or -inf for a max). One dynamic compile
    matches eager on CPU at several H, W."""
    m = Windows().eval()
    cm = dl.compile(m, torch.randn(2, 8, 9, 11), dynamic={0: {0: "N", 2: "H", 3: "W"}},
                    backend="cpu")
    for shape in ((2, 8, 9, 11), (1, 8, 3, 3), (3, 8, 14, 14), (1, 8, 4, 3)):
        x = torch.randn(shape)
        for a, b in zip(cm(x), m(x)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    bodies = [k.body for k in cm.pipeline.kernels]
    src = {b.name: cuda_kernel(b) for b in bodies}
    conv = next(v for k, v in src.items() if "conv2d" in k)
    assert "float l1v[7];" in conv and "acc1 += l1v[l1];" in conv
    maxes = [v for k, v in src.items() if "max_pool" in k and "l1v[" in v]
    assert len(maxes) == 2 and all("-INFINITY)));" not in v for v in maxes)   # clamped taps
    assert is_cubin(compile_cubin(cuda_module(bodies), arch="sm_90"))


class BiasPool(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.b = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return F.max_pool2d(torch.relu(x + self.b[:, None, None]), 3, 2, ceil_mode=True)


def test_window_reads_its_bias_once_unguarded():
    """Under a ceil-mode window's guard, a read the bounds prove in range (the bias, at the
    output's channel) is neither guarded nor repeated per tap: one load before the loop."""
    m = BiasPool()
    cm = dl.compile(m, torch.randn(2, 4, 9, 9), dynamic={0: {2: "H", 3: "W"}}, backend="cpu")
    for hw in ((9, 9), (3, 4), (10, 7), (16, 16)):
        x = torch.randn(2, 4, *hw)
        torch.testing.assert_close(cm(x), m(x))
    k, = [k.body for k in cm.pipeline.kernels]
    bias = next(i for i, v in enumerate(k.inputs) if v.rank < 4)
    loads = [s for s in k.stmts if isinstance(s, Load) and s.buf == bias]
    assert len(loads) == 1 and not loads[0].pred
    loop = next(s for s in k.stmts if isinstance(s, Loop))
    assert f"in{bias}[" not in cuda_kernel(replace(k, stmts=(loop,)))


class Pool(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.args = args

    def forward(self, x):
        return F.max_pool2d(torch.relu(x), *self.args)


@pytest.mark.parametrize("args, clamped", [
    ((3, 2, 0, 1, True), True), ((3, 2, 1, 1, False), True), ((3, 1, 1, 1, False), True),
    ((3, 2, 1, 2, True), False),   # dilated: a clamped tap may not be the window's
    ((2, 2, 1, 1, True), False),   # torch drops a last window starting past the input:
    ((2, 3, 0, 1, True), False)])  # the extent's mod terms leave the bounds unproven
def test_max_window_taps_clamped(args, clamped):
    """A max over a dilation-1 window reads a tap outside the input (padding, ceil mode's
    overhang) at its coordinate clamped into the input, unmasked, where the bounds prove that
    every window meets the input: the clamped tap is then one of the window's own. Otherwise the
    taps stay masked. One dynamic compile per pool matches eager on CPU down to the smallest
    H, W, and refuses where eager does (ceil mode takes an input shorter than the window when a
    window starts inside it: k=2, s=3 over H=1)."""
    m = Pool(*args)
    cm = dl.compile(m, torch.randn(2, 3, 9, 9), dynamic={0: {2: "H", 3: "W"}}, backend="cpu")
    body, = [k.body for k in cm.pipeline.kernels]
    src = cuda_kernel(body)
    assert ("dlcb_min<I>(dlcb_max<I>(" in src) == clamped
    assert ("-INFINITY)));" in src) != clamped   # a masked tap is the max's identity
    hws = ((9, 9), (1, 2), (2, 1), (3, 3), (4, 7), (10, 5), (16, 17))
    eager_or_refused(cm, m, [torch.randn(2, 3, *hw) for hw in hws], "(holds|reaches) the window")
    assert is_cubin(compile_cubin(cuda_module([body]), arch="sm_90"))


@pytest.mark.parametrize("args", [(2, 3, 0), (3, 2, 0), (3, 2, 1), (5, 4, 2), (2, 5, 1)])
def test_ceil_mode_avg_counts_down_to_an_input_shorter_than_the_window(args):
    """Ceil mode's last window overhangs the padded input and torch divides by the elements it
    covers; where the input is shorter than the window that window is the only one (the full
    windows' count, ``(d + 2p - k) // s + 1``, is 0). One dynamic compile matches eager at
    every size eager takes and refuses the others."""
    m = Fn(lambda x: F.avg_pool2d(x, *args, ceil_mode=True))
    cm = dl.compile(m, torch.randn(2, 3, 9, 8), dynamic={0: {2: "H", 3: "W"}}, backend="cpu")
    eager_or_refused(cm, m, [torch.randn(2, 3, h, h + 1) for h in range(1, 10)],
                     "reaches the window")
    body, = [k.body for k in cm.pipeline.kernels]
    assert is_cubin(compile_cubin(cuda_module([body]), arch="sm_90"))


class CatPad(torch.nn.Module):
    def forward(self, x, y):
        return F.pad(torch.cat([x, y], 1), (1, 1)) * 2


def test_guarded_reads_keep_their_guard():
    """A read through a narrowed coordinate (cat's second input at ``c - 3``, pad's ``w - 1``)
    is in range only where its guard holds: it stays guarded."""
    g = to_ir(CatPad(), [torch.randn(2, 3, 4), torch.randn(2, 5, 4)], {0: {0: "N"}, 1: {0: "N"}})
    loads = [s for s in infer_kernels(g)[0].stmts if isinstance(s, Load)]
    assert len(loads) == 2 and all(ld.pred for ld in loads)


# --- host program: interpreter == compiled function ----------------------------------------------------

class Reshape4(torch.nn.Module):
    def forward(self, x, y):
        return (x * y).reshape(-1, 4), x.sum(0)


def _outcome(f, shapes):
    try:
        return ("ok", list(f(shapes)))
    except dl.ShapeMismatch as e:
        return ("err", str(e))


def _mutate(rng, shapes):
    shapes = [list(s) for s in shapes]
    i = rng.randrange(len(shapes))
    what = rng.random()
    if what < 0.15:
        shapes[i].append(rng.randint(1, 4))
    elif what < 0.3 and shapes[i]:
        shapes[i].pop(rng.randrange(len(shapes[i])))
    elif shapes[i]:
        k = rng.randrange(len(shapes[i]))
        shapes[i][k] = max(0, shapes[i][k] + rng.choice((-2, -1, 1, 3)))
    return [tuple(s) for s in shapes]


HOST_CASES = [(c, "dynamic") for c in CASES] + [(c, "dynamic2") for c in CASES if c.dynamic2] + \
    [(BY_NAME["worked"], "static"), ("reshape4", "dynamic")]


@pytest.mark.parametrize("case,spec", HOST_CASES,
                         ids=[f"{getattr(c, 'name', c)}-{s}" for c, s in HOST_CASES])
def test_host_interpret_matches_compiled(case, spec):
    rng = random.Random(0)
    if case == "reshape4":
        g = to_ir(Reshape4(), [torch.randn(2, 6), torch.randn(6)], {0: {0: "N"}})
        make = lambda n, m: [(n, 6), (6,)]   # noqa: E731
    else:
        g, _ = build(case, spec)
        make = lambda n, m: [tuple(t.shape) for t in case.inputs(   # noqa: E731
            n, m if spec == "dynamic2" else None)]
    host, _ = lower(g, materialized_values(g), infer_kernels(g))
    fast = host.compile()
    seen = {"ok": 0, "err": 0}
    for _ in range(60):
        shapes = make(rng.randint(0, 40), rng.randint(1, 9))
        if rng.random() < 0.5:
            shapes = _mutate(rng, shapes)
        a, b = _outcome(host.interpret, shapes), _outcome(fast, shapes)
        assert a == b, shapes
        seen[a[0]] += 1
    assert seen["ok"] and seen["err"], seen
    with pytest.raises(dl.ShapeMismatch, match="expected"):
        fast([(1,)] * (host.n_args + 1))


# --- integer and bool kernels compile too ------------------------------------------------------------

@pytest.mark.parametrize("dx,dy", [(torch.int64, torch.int32), (torch.uint8, torch.int8),
                                   (torch.bool, torch.bool), (torch.int16, torch.float64)])
def test_integer_and_bool_cuda_compiles(dx, dy):
    """Every op over integer and bool operands (casts, promotion, int64/long long accumulators,
    both reduction variants) is valid CUDA."""
    from models import Fn2, int_mix

    def f(x, y):
        if dx is torch.bool:
            return x & y, x | ~y, x.sum(0), x.amax(1), torch.where(x, 1.5, y.int()), x == y
        return int_mix(x, y)

    ins = (torch.ones(3, 5, dtype=dx), torch.ones(3, 5, dtype=dy))
    g = to_ir(Fn2(f), list(ins), {0: {0: "N"}, 1: {0: "N"}})
    bodies = infer_kernels(g, cooperative=True)
    assert is_cubin(compile_cubin(cuda_module(bodies), arch="sm_90"))
