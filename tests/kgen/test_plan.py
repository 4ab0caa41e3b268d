"""One kernel ABI (``kgen.abi``) and one launch plan: the CUDA and numba sources print the ABI's
parameter list (checked against the source text and, for CUDA, compiled with NVRTC to an sm_90
cubin, no GPU needed), the launchers pack in its order, direct-launch signatures are read from it;
the launch plan's steps are the partition's steps, in order; the thunk's one step walker gives
``launches`` exactly what ``__call__`` launches; one guard list for the host and direct launches."""

from __future__ import annotations

import re
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as hst

import dlcb_lab as dl
from dlcb_lab.bridge.aten import to_ir
from dlcb_lab.kgen.abi import ORDER, EntryABI, Param, abi, magic, magic_div, pack
from dlcb_lab.kgen.emit import (all_variants, cuda_kernel, cuda_module, entry_points,
                                numba_kernel, numba_signature, signature)
from dlcb_lab.kgen.entries import (NARROW, ROW_CACHE, VECTOR, WARP, EntryPoint, entries,
                                   in_place_inputs, variant_entries, vector_loads, vector_width,
                                   warp_rows)
from dlcb_lab.dims import Lit
from dlcb_lab.kgen.infer import infer_kernels
from dlcb_lab.runtime.cuda_launch import CudaModule
from dlcb_lab.runtime.nvrtc import compile_cubin, compile_cubin_later, wait_background

from harness import Recorder
from models import BY_NAME, CASES

NAMES = ["binary", "reductions", "softmax", "mixed"]


def bodies_of(name: str):
    case = BY_NAME[name]
    g = to_ir(case.module(), list(case.inputs(3)), case.dynamic)
    return infer_kernels(g, cooperative=True)


def bodies_of_dtype(name: str, dtype: torch.dtype):
    case = BY_NAME[name]
    xs = [x.to(dtype) if x.is_floating_point() else x for x in case.inputs(3)]
    g = to_ir(case.module().to(dtype), xs, case.dynamic)
    return infer_kernels(g, cooperative=True)


def _cuda_params(src: str, entry: str) -> list[str]:
    m = re.search(rf'extern "C" __global__ void {entry}\(([^)]*)\)', src)
    assert m, entry
    return [p.strip() for p in m.group(1).split(",")]


def test_in_place_inputs_are_those_read_only_at_the_output_index():
    """x [N, 3, 5] is read at the output's index; y [3, 1] and z [5] broadcast; a reduction
    reads many elements per output; softmax's division reads x at ``t`` and its row stats
    broadcast."""
    assert [in_place_inputs(k) for k in bodies_of("binary")] == [(0,)]
    assert all(in_place_inputs(k) == () for k in bodies_of("reductions"))
    div = next(k for k in bodies_of("softmax") if k.name.endswith("_div"))
    assert in_place_inputs(div) == (0,)
    src = cuda_kernel(div, ("", NARROW, VECTOR))
    assert "float* out" in src and "const float* in0" in src and "in1" in src
    assert "const float* __restrict__ in1" in src and "__restrict__ out" not in src


class _Epilogue(torch.nn.Module):
    """A library call's result read by one elementwise kernel (bias broadcast, a flip)."""

    def __init__(self, keep: bool = False, flip: bool = False):
        super().__init__()
        self.lin, self.keep, self.flip = torch.nn.Linear(6, 6, bias=False), keep, flip
        self.b = torch.nn.Parameter(torch.randn(6))

    def forward(self, x):
        a = self.lin(x)
        y = torch.relu(a + a.flip(-1) if self.flip else a + self.b) * 2 + torch.relu(x)
        return (y, a) if self.keep else y


@pytest.mark.parametrize("keep, flip, over", [(False, False, True), (True, False, False),
                                              (False, True, False)],
                         ids=["dies", "an-output", "read-elsewhere"])
def test_a_kernel_overwrites_an_operand_that_dies_at_its_launch(keep, flip, over):
    """The linear's result dies at the epilogue, which reads it only at its own index: the
    epilogue writes over it (one buffer fewer at that step). Not where the result is also an
    output, nor where the kernel reads it at another index too (a flip); never a user input."""
    m = _Epilogue(keep, flip).eval()
    cm = dl.compile(m, (torch.randn(3, 6),), dynamic={0: {0: "N"}}, backend="cpu")
    plan = cm._thunk.plan
    (k,) = plan.kernels
    assert (k.in_place is not None) == over
    if over:
        assert plan.buffers[k.in_place].value == "linear"
        assert "(over %linear)" in repr(plan)
        trace = cm._thunk.launches([(5, 6)] + [tuple(c.shape) for c in cm._constants])
        assert [st.in_place for st in trace.steps] == ["", "linear"]
    for n in (1, 4, 9):
        x = torch.randn(n, 6)
        with torch.no_grad():
            torch.testing.assert_close(cm(x), m(x))


@pytest.mark.parametrize("name", NAMES)
def test_sources_print_the_abi(name):
    for k in all_variants(bodies_of(name)):
        a = abi(k)
        assert [p.kind for p in a.params] == sorted((p.kind for p in a.params), key=ORDER.index)
        alias = {f"in{i}" for i in in_place_inputs(k)}   # out may overwrite them: no restrict
        alias |= {"out"} if alias else set()
        want = [f"{'' if p.kind == 'out' else 'const '}{p.dtype.ctype}*"
                f"{'' if p.name in alias else ' __restrict__'} {p.name}"
                if p.is_buffer else f"long long {p.name}" for p in a.params]
        src = cuda_kernel(k, ("", NARROW, VECTOR))
        for suffix in ("", NARROW) + (VECTOR,) * (vector_width(k) > 1):   # one parameter list
            assert _cuda_params(src, k.name + suffix) == want
        assert signature(k) == a.launch_kinds == tuple(
            "ptr" if p.is_buffer else "i64" for p in a.params)
        if not k.cooperative:
            py = numba_kernel(k)
            assert f"def {k.name}({', '.join(a.names)}):" in py
            assert numba_signature(k).count("[::1]") == len(a.buffers)
            assert numba_signature(k).count("int64") == len(a.ints)
        assert [p.value for p in a.buffers] == [k.out, *k.inputs]
        assert [(p.name, p.expr) for p in a.int_params] == list(k.params + k.divisors)
        assert a.ints[0].name == "numel" and a.ints[0].expr is k.numel


def test_cuda_abi_compiles_with_nvrtc():
    """The parameter lists the ABI prints are valid CUDA: one module, every entry point."""
    for n in ("reductions", "mixed"):
        assert compile_cubin(cuda_module(bodies_of(n)), arch="sm_90")[:4] == b"\x7fELF"


def test_index_widths_build_apart():
    """A unit's 32-bit entry points compile alone (before the compile returns) and its 64-bit
    ones alone, on a background thread; a module over a pending cubin waits for it when asked."""
    bodies = bodies_of("mixed")
    names = {w: entry_points(bodies, (w,)) for w in ("", NARROW)}
    assert sorted(names[""] + names[NARROW]) == sorted(entry_points(bodies))
    for w, other in (("", NARROW), (NARROW, "")):
        src = cuda_module(bodies, (w,))
        assert all(f"void {e}(" in src for e in names[w])
        assert not any(f"void {e}(" in src for e in names[other])
    later = compile_cubin_later(cuda_module(bodies, ("",)), arch="sm_90")
    mod = CudaModule(later, names[""])
    assert "pending" in repr(mod) or later.done()
    wait_background()
    assert later.done()
    assert mod.cubin == later.result() and mod.cubin[:4] == b"\x7fELF"
    assert all(e.encode() in mod.cubin for e in names[""]) and "pending" not in repr(mod)


def _launcher(*wide: EntryPoint, coop: bool = False, sm_count: int = 132):
    """A ``CudaLauncher`` over entry points without functions: both index widths of variant 0
    (and, ``coop``, of a cooperative variant 1), and the ``wide`` ones."""
    from dlcb_lab.runtime.launchers import CudaLauncher

    plain = [EntryPoint("k", s, v, v == 1, s == NARROW) for v in range(1 + coop)
             for s in ("", NARROW)]
    return CudaLauncher([(e, None) for e in plain + list(wide)], sm_count)


def _lanes(rows: bool = True, extent_max: int = 32 * ROW_CACHE, lanes: int = 32,
           stream: bool = False) -> EntryPoint:
    """A cooperative variant's group-of-lanes entry point (``extent_max``: a warp's default, a
    row of runtime extent)."""
    from dlcb_lab.runtime.launchers import BLOCK

    return EntryPoint("k_blk", WARP, 1, True, True, BLOCK // lanes, lanes,
                      extent_max=extent_max, stream=stream, rows=rows)


def test_vectorized_entry_points():
    """Per-element kernels get a vectorized entry point (16 bytes of output per thread; loads at
    the output's own index move as vectors); reductions and cooperative kernels do not. The
    launcher takes it only for variant 0 at 32-bit index, ``numel`` a multiple of the width and
    every vector access aligned (checked on the pointers; CPU tensors stand in for them here)."""

    widths = {k.name: (vector_width(k), vector_loads(k)) for k in all_variants(bodies_of("mixed"))}
    kinds = {k.name: k for k in all_variants(bodies_of("mixed"))}
    assert any(w == 4 for w, _ in widths.values()), widths          # float32: 4 per thread
    for name, (w, loads) in widths.items():
        k = kinds[name]
        assert (w == 1) == (k.cooperative or bool(k.coord_map.loops)), name
        assert set(loads) <= set(range(len(k.inputs)))
    half = bodies_of_dtype("binary", torch.float16)
    assert {vector_width(k) for k in half} == {8}
    src = cuda_kernel(half[0], (NARROW, VECTOR))
    assert "dlcb_vec<dlcb_f16, 8> vout;" in src and "#pragma unroll" in src
    (v,) = variant_entries(half[0], 0, (VECTOR,))
    assert (v.name, v.narrow, v.per, v.out_bytes) == (half[0].name + VECTOR, True, 8, 16)
    assert {b for b, n in v.loads} == set(vector_loads(half[0])) and {n for _, n in v.loads} == {16}

    vec = EntryPoint("k", VECTOR, 0, False, True, 4, loads=((1, 16),), out_bytes=16)
    ln = _launcher(vec, coop=True)
    base = torch.zeros(64)
    out, a, b = base[:32], torch.zeros(64)[:32], torch.zeros(64)

    def width(*a, **kw) -> int:
        return ln.pick(*a, **kw).per

    assert width(0, 32, True, out, [b, a]) == 4 and ln.pick(0, 32, True) is vec
    assert width(0, 32, True) == 4                      # no pointers: taken as aligned
    assert width(0, 30, True, out, [b, a]) == 1         # numel not a multiple of 4
    assert width(0, 32, False, out, [b, a]) == 1        # 64-bit index
    assert width(1, 32, True, out, [b, a]) == 1         # the cooperative variant
    assert width(0, 32, True, out, [b, a[1:]]) == 1     # a vector input 4 bytes off
    assert width(0, 32, True, out, [b[1:], a]) == 4     # a scalar input may be anywhere
    assert width(0, 32, True, base[2:34], [b, a]) == 1  # the output 8 bytes off
    assert ln.pick(0, 30, True).suffix == NARROW and ln.pick(0, 32, False).suffix == ""
    assert ln.pick(0, 32, True, plain=True).suffix == NARROW    # a direct launch: never vectors
    assert vec.geometry(4096) == (4, 256) and ln.pick(0, 30, True).geometry(4096) == (16, 256)


@pytest.mark.parametrize("c, dynamic, want, lanes", [
    (49, False, 4, 16), (64, False, 4, 16), (65, False, 3, 32), (96, False, 3, 32),
    (768, False, 24, 32), (1024, False, 32, 32), (1025, False, 16, 32), (48, True, 16, 32),
    (768, True, 16, 32)])
def test_warp_cache_follows_a_literal_row(c, dynamic, want, lanes):
    """The warp entry point of a layer norm or softmax row of literal extent runs ``lanes`` per
    row (16 up to ``HALF_ROW_MAX``, else 32; a runtime extent 32) and keeps ``ceil(c / lanes)``
    elements a lane (up to ``WARP_ROW_MAX``), a runtime one ``ROW_CACHE``; the launcher serves
    rows up to ``lanes *`` that by warp, and the emitted body sizes ``rc`` by it and takes
    ``lanes`` as its template argument ``G``. A sum keeps no row: ``ROW_CACHE``."""
    from dlcb_lab.kgen.entries import group_lanes, warp_cache

    class Rows(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.layer_norm(x, (x.shape[-1],)), x.softmax(-1), x.sum(-1)

    dyn = {0: {0: "N", 1: "C"}} if dynamic else {0: {0: "N"}}
    blocks = [b.variant for b in infer_kernels(to_ir(Rows(), [torch.randn(2, c)], dyn),
                                               cooperative=True)]
    assert [warp_cache(b) for b in blocks] == [want, want, ROW_CACHE]
    assert [group_lanes(b) for b in blocks] == [lanes] * 3
    warps = [e for b in blocks for e in variant_entries(b, 1, (WARP,))]
    assert [(e.lanes, e.per, e.extent_max) for e in warps] == \
        [(lanes, 256 // lanes, lanes * w) for w in (want, want, ROW_CACHE)]
    src = cuda_module(blocks[:1], (NARROW, WARP))
    assert f"constexpr int RC = G ? {want} : {ROW_CACHE};" in src and "rc[RC];" in src
    assert f"{blocks[0].name}_body<int, {lanes}>(" in src


def test_warp_entry_points():
    """Every block-per-output kernel has a warp entry point (``_w``: its body with ``G``, the
    lanes per output, ``group_lanes``; 32-bit index) that compiles with NVRTC. ``warp_rows``: no reduced load steps by
    more than one element (sum(1) and mean(0) of ``[N, 4, 6]`` do; a div/mod split counts as a
    row). The launcher runs variant 1 as a warp per output, eight per block, up to the entry's
    ``extent_max`` (``32 * ROW_CACHE`` for a row of runtime extent) at 32-bit index (a plain row
    reduction at any extent, given ``WARPS_PER_SM`` outputs per SM), and prefers it to the
    thread-per-output variant for rows from ``WARP_MIN_ROWS``, whatever the outputs."""
    from dlcb_lab.kgen.entries import group_lanes
    from dlcb_lab.runtime.launchers import BLOCK, WARP_MIN_ROWS, WARPS_PER_SM

    WARP_MAX = 32 * ROW_CACHE

    bodies = bodies_of("reductions")
    coop = {k.name: k for k in all_variants(bodies) if k.cooperative}
    rows = {n for n, k in coop.items() if warp_rows(k)}
    assert set(coop) - rows == {"dlcb_k0_sum_1_blk", "dlcb_k4_mean_1_blk"}   # strides 6, 24
    src = cuda_module(bodies, (NARROW, WARP))
    for n in coop:
        assert f"{n}_body<int, {group_lanes(coop[n])}>(" in src and f"{n}_body<int, 0>(" in src
    assert [group_lanes(coop[f"dlcb_k{i}_{n}_blk"]) for i, n in enumerate(
        ("sum_1", "mean", "amax", "sum_2", "mean_1", "amax_1"))] == [16] * 3 + [32] * 3  # literal
    # extents of at most HALF_ROW_MAX, then runtime ones
    assert entry_points(bodies, (WARP,)) == [f"{n}{WARP}" for n in coop]
    warps = [e for k in bodies for e in entries(k, (WARP,))]
    assert [(e.variant, e.cooperative, e.narrow, e.rows) for e in warps] == \
        [(1, True, True, n in rows) for n in coop]
    assert [e.stream for e in warps] == [e.rows for e in warps]   # plain reductions: no row cache
    cubin = compile_cubin(src, arch="sm_90")
    assert all(f"{n}{WARP}".encode() in cubin for n in coop)

    big, few = 10**7, 100                                  # outputs: over and under the fill
    contiguous, strided = _launcher(_lanes(), coop=True), _launcher(_lanes(False), coop=True)
    for extent, narrow, want_big, want_strided in (
            (WARP_MIN_ROWS, True, 1, 0), (WARP_MAX, True, 1, 0), (WARP_MIN_ROWS - 1, True, 0, 0),
            (WARP_MAX + 1, True, 0, 0), (96, False, 0, 0)):
        assert contiguous.choose(big, extent, narrow) == want_big, (extent, narrow)
        assert strided.choose(big, extent, narrow) == want_strided, (extent, narrow)
    for ln in (contiguous, strided):
        assert ln.choose(few, 96, True) == 1 and ln.choose(few, WARP_MAX + 1, True) == 1
        assert ln.pick(1, few, True, extent=WARP_MAX).per == BLOCK // 32   # a warp per output
        assert ln.pick(1, few, True, extent=WARP_MAX + 1).suffix == NARROW  # the block
        assert ln.pick(1, few, False, extent=96).suffix == ""              # 64-bit index
    assert _launcher(coop=True).choose(big, 96, True) == 0   # no warp entry
    long_rows = _launcher(_lanes(extent_max=768), coop=True)
    assert long_rows.choose(big, 768, True) == 1
    assert long_rows.pick(1, few, True, extent=768).per == 8
    assert long_rows.pick(1, few, True, extent=769).per == 1
    # a plain row reduction (a sum: no row in registers) streams by warp at any extent once there
    # are WARPS_PER_SM outputs per SM; below that, and for a cached row, the block
    plain = _launcher(_lanes(stream=True), coop=True, sm_count=132)
    many = WARPS_PER_SM * 132
    for ln, n, want in ((plain, many, 8), (plain, many - 1, 1), (contiguous, many, 1)):
        assert ln.choose(n, 3136, True) == 1 and ln.pick(1, n, True, extent=3136).per == want
        assert ln.pick(1, n, False, extent=3136).per == 1                 # 64-bit index
    assert plain.choose(big, 3136, True) == 1 and contiguous.choose(big, 3136, True) == 0
    assert _lanes().geometry(1000) == (125, BLOCK)
    assert contiguous.pick(1, 1000, True, extent=WARP_MAX + 1).geometry(1000) == (1000, BLOCK)
    half = _launcher(_lanes(extent_max=64, lanes=16), coop=True)
    assert half.choose(few, 49, True) == 1 and half.pick(1, few, True, extent=49).per == 16
    assert half.pick(1, few, True, extent=49).geometry(1000) == (63, BLOCK)


def test_abi_order_enforced_and_pack():
    out, numel = Param("out", "out"), Param("numel", "numel")
    EntryABI("k", (out, Param("in0", "in"), numel, Param("p", "int"), Param("dv0", "div")))
    for bad in [(Param("in0", "in"), out, numel), (out, numel, Param("in0", "in")),
                (out, Param("p", "int"), numel), (out,),
                (out, numel, Param("dv0", "div"), Param("p", "int"))]:
        with pytest.raises(dl.BuildError, match="out of ABI order"):
            EntryABI("k", bad)
    assert pack("o", ["a", "b"], 7, [1, 2]) == ("o", "a", "b", 7, 1, 2)


@given(hst.integers(0, (1 << 31) - 1), hst.integers(1, (1 << 31) - 1))
def test_magic_division(n, d):
    """A runtime divisor's param: ``n // d`` from a multiply-high and a shift, for every
    non-negative 32-bit index and divisor, in 32-bit unsigned arithmetic."""
    packed = magic(d)
    m, shift = packed & 0xFFFFFFFF, packed >> 32
    assert packed == shift << 32 | m and shift <= 31
    assert ((n * m) >> 32) + n < 1 << 32     # the kernel's sum does not wrap
    assert magic_div(n, packed) == n // d
    assert magic_div((1 << 31) - 1, packed) == ((1 << 31) - 1) // d


def test_magic_division_edges():
    for d in [1, 2, 3, 7, 49, 2**16 + 1, 2**30 - 1, 2**30, 2**30 + 1, 2**31 - 1]:
        for n in {0, 1, d - 1, d, d + 1, 2 * d - 1, (1 << 31) - 1} - {1 << 31}:
            if n < 1 << 31:
                assert magic_div(n, magic(d)) == n // d, (n, d)
    assert magic(0) == magic(1)                       # a kernel without elements
    for d in [2**31, 2**40]:                          # beyond every 32-bit index: quotient 0
        assert magic_div((1 << 31) - 1, magic(d)) == 0


@pytest.fixture(scope="module")
def convpool():
    class ConvPool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)

        def forward(self, x):
            return torch.nn.functional.max_pool2d(torch.relu(self.c(x)), 2, 2,
                                                  ceil_mode=True).sum(-1) + 1

    torch.manual_seed(0)
    return dl.compile(ConvPool().eval(), (torch.randn(2, 3, 9, 11),),
                      dynamic={0: {0: "N", 2: "H", 3: "W"}}, backend="cpu")


def test_plan_steps_are_the_partition_steps(convpool):
    p = convpool.pipeline
    part, plan = p.partition.steps, p.launch_plan
    assert [s.step for s in plan.steps] == [s.index for s in part if s.launches]
    for st in plan.steps:
        ps = part[st.step]
        assert plan.buffers[st.out].value == ps.value
        assert ps.kind == ("library" if hasattr(st, "op") else "generated")
    assert len(plan.kernels) == len(p.kernels) == sum(1 for s in part if s.kind == "generated")


def test_one_walker(convpool, monkeypatch):
    """``launches`` reports, step by step, exactly what ``__call__`` launches."""
    th = convpool.pipeline.thunks[0]
    log: list = []
    monkeypatch.setattr(th, "launchers", [Recorder(f, log) for f in th.launchers])
    x = torch.randn(3, 3, 13, 10)
    convpool(x)
    t = convpool.trace(x)
    assert t.ok
    assert [(s.variant, s.numel, tuple(v for _, v in s.params), s.narrow, s.width)
            for s in t.steps if s.kind == "kernel"] == log
    assert [s.kind for s in t.steps] == [
        "library" if ps.kind == "library" else "kernel"
        for ps in convpool.pipeline.partition.steps if ps.launches]


def test_direct_signatures_read_the_abi_and_the_one_guard_list(convpool):
    p = convpool.pipeline
    guards = p.launch_plan.guards
    for k in p.kernels:
        for v, sig in zip(k.body.variants(), k.signatures):
            a = abi(v)
            assert tuple(b.name for b in sig.buffers) == tuple(q.name for q in a.buffers)
            assert sig.int_names == tuple(q.name for q in a.ints if q.kind != "div")
            assert all(any(gd is h for h in guards) for gd in sig.guards)


def test_runtime_divisors_are_magic_params(convpool):
    """A division by a runtime value names its divisor param; the CUDA body divides by it at 32
    bits; the host program and a direct launch pass ``magic`` of the divisor's value."""
    p = convpool.pipeline
    x = torch.randn(3, 3, 13, 10)
    steps = [s for s in convpool.trace(x).steps if s.kind == "kernel"]
    env = {"N": 3, "H": 13, "W": 10}
    seen = 0
    for k, step in zip(p.kernels, steps):
        b = k.body
        named = {s.magic for s in b.stmts if getattr(s, "magic", "")}
        assert named == {n for n, _ in b.divisors}
        src = cuda_kernel(b)
        for n, e in b.divisors:
            assert f"const long long {n}" in src and f", {n})" in src
            assert not isinstance(e, Lit) and not e.free_vars - env.keys()
            assert dict(step.params)[n] == magic(e.evaluate(env))
            seen += 1
        if b.divisors:
            y = torch.empty([int(d.evaluate(env)) for d in p.graph.dims(b.out)])
            ins = [x if v.name == "x" else torch.empty(
                [int(d.evaluate(env)) for d in p.graph.dims(v)]) for v in b.inputs]
            d = k.variant(0).check(y, *ins)
            assert [v for n, v in d.params if n.startswith("dv")] == \
                [magic(e.evaluate(env)) for _, e in b.divisors]
    assert seen


@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.name)
def test_cpu_launcher_packs_in_abi_order(case, monkeypatch):
    """The numba function receives ``pack(out, ins, numel, params)``."""
    cm = dl.compile(case.module(), case.inputs(2), dynamic=case.dynamic, backend="cpu")
    seen = []
    for ln, k in zip(cm.pipeline.thunks[0].launchers, cm.pipeline.kernels):
        fn = ln.fn

        def spy(*args, fn=fn, k=k):
            seen.append((k, args))
            return fn(*args)

        monkeypatch.setattr(ln, "fn", spy)
    cm(*case.inputs(5))
    assert seen
    for k, args in seen:
        a = abi(k.body)
        assert len(args) == len(a.params)
        assert [x.dtype.itemsize for x in args[:len(a.buffers)]] == \
            [p.dtype.torch.itemsize for p in a.buffers]
        assert all(isinstance(x, int) for x in args[len(a.buffers):])


def test_replay_cost_model_keeps_copy_bound_calls_plain():
    """``runtime.graphs``' cost model (pure arithmetic over the plan; no GPU): a replay saves the
    plan's steps less itself and its copies, and costs the copies' bytes. One kernel never pays;
    a four-step call with small tensors does; a large output outweighs the launches saved."""
    from dlcb_lab.runtime.graphs import COPY_BYTES_PER_US, LAUNCH_US, GraphCache

    class Steps(torch.nn.Module):   # kernel, library call, cooperative kernel, kernel
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(x * 2).softmax(-1) + 1

    def cost(m, x_example, x):
        cm = dl.compile(m.eval(), (x_example,), dynamic={0: {0: "N"}}, backend="cpu")
        th = cm._thunk
        tensors = th._check_args((x, *cm._constants))
        return len(th.plan.steps), GraphCache(th)._costs_more(tensors, th._registers(tensors))

    class One(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1

    assert cost(One(), torch.randn(2, 8), torch.randn(4, 8)) == \
        (1, "plain launches: a replay would save 0 launches (~0 us) and copy 0.000256 MB in and "
            "out (~0 us)")
    assert cost(Steps(), torch.randn(2, 8), torch.randn(4, 8)) == (4, None)
    # saved: 4 - replay - 1 input copy - 1 output copy = 1 launch; break-even at
    # 2 * bytes / rate = LAUNCH_US, i.e. bytes = LAUNCH_US * rate / 2 (input and output alike)
    n = int(LAUNCH_US * COPY_BYTES_PER_US / 2 / (2 * 8 * 4)) + 1
    steps, why = cost(Steps(), torch.randn(2, 8), torch.randn(n, 8))
    assert why is not None and why.startswith("plain launches: a replay would save 1 launches"), why
    assert cost(Steps(), torch.randn(2, 8), torch.randn(n - 2, 8))[1] is None


def test_capture_gate_holds_runs_back_while_a_capture_runs():
    """``runtime.graphs.GATE`` (pure threading; no GPU): runs share it, reentrantly; a capture
    waits for the runs in progress, and a run that starts meanwhile waits for the capture."""
    import threading

    from dlcb_lab.runtime.graphs import _Gate

    gate, log = _Gate(), []
    in_run, release, capture_waits = threading.Event(), threading.Event(), threading.Event()

    def run():
        with gate.shared(), gate.shared():   # reentrant
            in_run.set()
            release.wait(5)
            log.append("run ends")

    def capture():
        capture_waits.set()
        with gate.exclusive():
            log.append("capture")

    def late_run():
        with gate.shared():
            log.append("late run")

    t1 = threading.Thread(target=run)
    t1.start()
    assert in_run.wait(5)
    t2 = threading.Thread(target=capture)
    t2.start()
    assert capture_waits.wait(5)
    while not gate._waiting:   # the capture is queued behind the run
        time.sleep(0.001)
    t3 = threading.Thread(target=late_run)
    t3.start()
    time.sleep(0.05)
    assert log == []           # neither the capture nor the late run got in
    release.set()
    for t in (t1, t2, t3):
        t.join(5)
    assert log == ["run ends", "capture", "late run"], log
    with gate.shared(), pytest.raises(RuntimeError, match="capture inside"):
        with gate.exclusive():
            pass
