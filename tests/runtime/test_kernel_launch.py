"""Direct launches of generated kernels, numba.cuda style:
``cm.pipeline.kernels[i][grid, block](out, in0, ..)``. Every argument is checked against the
kernel's symbolic signature (dtype, device, contiguity, each axis against its dimension
expression, the int arguments) before the launch; results must match ``cm(...)`` and eager. CPU
tests run everywhere; ``gpu`` tests need CUDA (and numba.cuda for the device-array ones) and skip
cleanly otherwise.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import dlcb_lab as dl
from dlcb_lab.records import Kernel
from dlcb_lab.kgen.entries import BLOCK, MAX_GRID, EntryPoint
from dlcb_lab.runtime.launchers import CpuLauncher

from models import BY_NAME

WORKED = BY_NAME["worked"]          # relu(x * y).reshape(-1, 24), x [N, 4, 6], y [1, 4, 1]


class ConvPool(torch.nn.Module):
    """Residual dims: conv output height ``(H + 1) // 2``, pool ``((H + 1) // 2 + 1) // 2``."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.c(x)), 2, 2, ceil_mode=True).sum(-1) + 1


class Select(torch.nn.Module):
    def forward(self, x, i):
        return torch.index_select(x, 0, i) * 2


class Slice(torch.nn.Module):
    def forward(self, x):
        return x[:, 2:5] * 2


@pytest.fixture(scope="module")
def worked():
    return dl.compile(WORKED.module(), WORKED.inputs(3), dynamic=WORKED.dynamic, backend="cpu")


@pytest.fixture(scope="module")
def convpool():
    torch.manual_seed(0)
    m = ConvPool().eval()
    return m, dl.compile(m, (torch.randn(2, 3, 9, 11),), dynamic={0: {0: "N", 2: "H", 3: "W"}},
                         backend="cpu")


def _poisoned(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


# --- CPU: results ---------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 5, 33])
def test_torch_tensors_match_compiled_and_eager(worked, n):
    k = worked.pipeline.kernels[0]
    x, y = WORKED.inputs(n)
    out = _poisoned(n, 24)
    k[1, 1](out, x, y)
    torch.testing.assert_close(out, worked(x, y), rtol=0, atol=0)
    torch.testing.assert_close(out, WORKED.module()(x, y))


def test_numpy_arrays_and_forall(worked):
    k = worked.pipeline.kernels[0]
    x, y = WORKED.inputs(7)
    out = np.full((7, 24), np.nan, np.float32)
    k.forall(out.size)(out, x.numpy(), y.numpy())
    np.testing.assert_array_equal(out, worked(x, y).numpy())
    ro = x.numpy().copy()
    ro.flags.writeable = False            # inputs may be read-only (copied for numba)
    out2 = np.empty_like(out)
    k[4, 32](out2, ro, y.numpy())
    np.testing.assert_array_equal(out2, out)


def test_explicit_ints_checked(worked):
    k = worked.pipeline.kernels[0]
    x, y = WORKED.inputs(4)
    out = torch.empty(4, 24)
    k[1, 1](out, x, y, 96)
    torch.testing.assert_close(out, worked(x, y), rtol=0, atol=0)
    with pytest.raises(dl.ShapeMismatch, match=r"int argument numel = 95, but 24\*N = 96"):
        k[1, 1](out, x, y, 95)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_16bit_tensors(dtype):
    cm = dl.compile(WORKED.module(), WORKED.inputs(3, dtype=dtype), dynamic=WORKED.dynamic,
                    backend="cpu")
    k = cm.pipeline.kernels[0]
    x, y = WORKED.inputs(6, dtype=dtype)
    out = _poisoned(6, 24, dtype=dtype)
    k[1, 1](out, x, y)
    torch.testing.assert_close(out, cm(x, y), rtol=0, atol=0)
    if dtype is torch.float16:   # numpy float16 arrays too (passed as their uint16 bits)
        outn = np.empty((6, 24), np.float16)
        k[1, 1](outn, x.numpy(), y.numpy())
        np.testing.assert_array_equal(outn, out.numpy())
    with pytest.raises(dl.DTypeError, match=r"in0 \(%x\): dtype float32"):
        k[1, 1](out, x.float(), y)


def test_residual_dims_chain_matches_module(convpool):
    """Launch the pool, sum and add kernels one after another on the conv output (a library call
    run here by hand, channels-last as the compiled program runs it: ``passes.channels_last``):
    the params are derived from ``(H + 1) // 2``-style axes."""
    m, cm = convpool
    p = cm.pipeline
    x = torch.randn(3, 3, 13, 10)
    c = F.conv2d(x, m.c.weight, stride=2, padding=1).permute(0, 2, 3, 1).contiguous()  # [N,H,W,C]
    steps = [s for s in cm.trace(x).steps if s.kind == "kernel"]
    bufs = [c, *(torch.empty(s.shape) for s in steps)]
    pool, tot, add = p.kernels
    assert pool.body.out.name == "max_pool2d_nhwc" and pool.body.inputs[0].name == "conv2d_nhwc"
    for k, (src, dst), s in zip(p.kernels, zip(bufs, bufs[1:]), steps):
        args = (dst, src) + ((m.c.bias.detach().view(4, 1, 1),) if k is pool else ())
        d = k.check(*args)          # the thunk's own decision for these shapes
        assert (d.entry, d.numel, d.params, d.narrow) == (s.name, s.numel, s.params, s.narrow)
        k.forall(d.numel)(*args)
    torch.testing.assert_close(bufs[-1], cm(x), rtol=0, atol=0)
    torch.testing.assert_close(bufs[-1], m(x), rtol=1e-5, atol=1e-5)
    # the pool output's height disagrees with the conv output's (a consistency check of bindings)
    with pytest.raises(dl.ShapeMismatch, match=r"out \(%max_pool2d_nhwc\) axis 1: size 3 != "
                       r"\(\(\(H \+ 1\) // 2\) \+ 1\) // 2 = 4 \(\(H \+ 1\) // 2 from in0 "
                       r"\(%conv2d_nhwc\) axis 1\)"):
        pool[1, 1](torch.empty(3, 3, 3, 4), c, m.c.bias.detach().view(4, 1, 1))


def test_two_dynamic_dims():
    case = BY_NAME["reductions"]
    cm = dl.compile(case.module(), case.inputs(3, 6), dynamic=case.dynamic2, backend="cpu")
    (x,) = case.inputs(5, 9)
    want = cm(x)
    for k, w in zip(cm.pipeline.kernels, want):
        out = _poisoned(*w.shape)
        k[1, 1](out, x)
        torch.testing.assert_close(out, w, rtol=0, atol=0)


def test_index_tensor_checked():
    cm = dl.compile(Select(), (torch.randn(5, 3), torch.tensor([0, 4, 2])),
                    dynamic={0: {0: "N"}, 1: {0: "K"}}, backend="cpu")
    (k,) = cm.pipeline.kernels
    x, i = torch.randn(6, 3), torch.tensor([5, 0, 3, 3])
    out = torch.empty(4, 3)
    k[1, 1](out, i, x)
    torch.testing.assert_close(out, cm(x, i), rtol=0, atol=0)
    bad = _poisoned(4, 3)
    with pytest.raises(dl.ShapeMismatch, match=r"in0 \(%i\): index values in \[0, 6\], outside "
                                               r"\[0, 6\)"):
        k[1, 1](bad, torch.tensor([6, 0, 3, 3]), x)
    assert bad.isnan().all()


def test_check_indices_one_pass_over_several():
    """``check_indices``: every check of a call at once (one ``aminmax`` per distinct tensor, one
    sync), the first failing one named with the values it saw; empty tensors pass; int32 and
    int64 tensors in one batch."""
    from dlcb_lab.runtime.launchers import check_indices

    ids, pos = torch.tensor([[3, 7], [0, 9]]), torch.arange(4, dtype=torch.int32)
    check_indices([(ids, 10, "wte"), (ids, 12, "wte again"), (pos, 4, "wpe"),
                   (torch.empty(0, dtype=torch.int64), 0, "none")])
    check_indices([])
    with pytest.raises(dl.ShapeMismatch, match=r"^wpe: index values in \[0, 3\], outside \[0, 3\)"):
        check_indices([(ids, 10, "wte"), (pos, 3, "wpe"), (ids, 9, "later")])
    with pytest.raises(dl.ShapeMismatch, match=r"^wte: index values in \[-1, 8\]"):
        check_indices([(ids - 1, 10, "wte")])


def test_guards_of_the_program():
    """A slice needs its axis long enough: the host program's requirement guards the kernel."""
    cm = dl.compile(Slice(), (torch.randn(3, 7),), dynamic={0: {0: "N", 1: "W"}}, backend="cpu")
    (k,) = cm.pipeline.kernels
    out = _poisoned(3, 3)
    with pytest.raises(dl.ShapeMismatch, match=r"needs W - 5 >= 0, got -1 \(W from in0 \(%x\) "
                                               r"axis 1\)"):
        k[1, 1](out, torch.randn(3, 4))
    assert out.isnan().all()
    x = torch.randn(3, 6)
    k[1, 1](out, x)
    torch.testing.assert_close(out, x[:, 2:5] * 2)


class Direct:
    """Stands in for a thunk's launcher: before each launch, resolves the same launch directly
    (``Kernel.variant(v).check``) and runs it into a second buffer; both must agree."""

    def __init__(self, launcher, kernel, log):
        self.f, self.k, self.log = launcher, kernel, log

    def __getattr__(self, name):   # choose, pick, geometry: the launcher's own
        return getattr(self.f, name)

    def __call__(self, entry, numel, out, ins, params):
        k = self.k.variant(entry.variant)
        d = k.check(out, *ins)
        assert (d.variant, d.numel, tuple(v for _, v in d.params), d.narrow) == \
            (entry.variant, numel, tuple(params), entry.narrow), (self.k.name, d)
        mine = torch.empty_like(out)
        k.forall(numel)(mine, *ins)
        self.f(entry, numel, out, ins, params)
        # a later launch may write over this buffer in place: keep what this one wrote
        self.log.append((self.k.name, mine, out.clone()))


def _zoo_direct(name, backend, monkeypatch, batch, res):
    """Every kernel launch of a TorchVision model's call, resolved and run directly as well."""
    from dlcb_lab.bench import zoo

    cm = zoo.compile_model(name, backend)
    th = cm.pipeline.thunks[0]
    log: list = []
    monkeypatch.setattr(th, "launchers", [Direct(f, k, log) for f, k in
                                          zip(th.launchers, cm.pipeline.kernels)])
    with torch.no_grad():
        cm(zoo.make_input(batch, res, device=th.device))
    assert len(log) >= len(cm.pipeline.kernels)
    for kname, mine, out in log:
        torch.testing.assert_close(mine, out, rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{kname}: {m}")


def test_zoo_kernels_direct_equal_thunk(monkeypatch):
    """resnet18 with dynamic batch, H and W: derived numel, params and index width equal the host
    program's for every kernel, and the direct launches compute the same buffers."""
    _zoo_direct("resnet18", "cpu", monkeypatch, 2, (72, 40))


# --- CPU: refusals --------------------------------------------------------------------------------

def _refused(k, exc, pattern, *args):
    """``k[1, 1](*args)`` raises ``exc`` matching ``pattern`` and leaves ``args[0]`` untouched."""
    out = args[0]
    before = out.clone() if isinstance(out, torch.Tensor) else None
    with pytest.raises(exc, match=pattern):
        k[1, 1](*args)
    if before is not None:
        torch.testing.assert_close(out, before, equal_nan=True, rtol=0, atol=0)


def test_direct_launch_over_its_input(worked):
    """relu(x * y) reads x only at the output's index (``in_place_inputs``): ``out`` may be x's
    very memory, as the launch plan writes it when x dies there."""
    k = worked.pipeline.kernels[0]
    x, y = WORKED.inputs(4)
    want = torch.relu(x * y).reshape(4, 24)
    k[1, 1](x.view(4, 24), x, y)
    torch.testing.assert_close(x.view(4, 24), want)


def test_refusals(worked):
    k = worked.pipeline.kernels[0]
    x, y = WORKED.inputs(4)
    out = _poisoned(4, 24)
    _refused(k, dl.ArgumentError, r"takes 3 buffers \(out, in0, in1\), optionally followed by 1 ints "
                           r"\(numel\); got 2", out, x)
    _refused(k, dl.DTypeError, r"in1 \(%y\): dtype float64, the kernel's buffer is float32",
             out, x, y.double())
    _refused(k, dl.ShapeMismatch, r"in1 \(%y\) axis 1: size 5 != 4", out, x, torch.randn(1, 5, 1))
    _refused(k, dl.ShapeMismatch, r"in0 \(%x\) axis 0: size 5 != N = 4 \(from out \(%reshape\) "
                                  r"axis 0\)", out, torch.randn(5, 4, 6), y)
    _refused(k, dl.ShapeMismatch, r"in0 \(%x\): rank 2 != 3 \(expected \[N, 4, 6\]\)",
             out, torch.randn(4, 24), y)
    _refused(k, dl.LayoutError, r"in0 \(%x\): not contiguous", out, x.transpose(1, 2).contiguous()
             .transpose(1, 2), y)
    _refused(k, dl.ArgumentError, r"in0 \(%x\): expected a torch CPU tensor or a numpy array, got list",
             out, [1.0], y)
    flat = torch.zeros(4 * 24 + 1)   # out one element past x: a partial overlap
    _refused(k, dl.LayoutError, r"out \(%reshape\) overlaps in0 \(%x\)", flat[1:].view(4, 24),
             flat[:-1].view(4, 4, 6), y)
    _refused(k, dl.LayoutError, r"out \(%reshape\) overlaps in1 \(%y\)", flat[:96].view(4, 24),
             x, flat[:4].view(1, 4, 1))   # y broadcasts: never the output's memory
    ro = np.zeros((4, 24), np.float32)
    ro.flags.writeable = False
    with pytest.raises(dl.LayoutError, match=r"out \(%reshape\): read-only"):
        k[1, 1](ro, x, y)
    with pytest.raises(dl.DTypeError, match=r"in0 \(%x\): dtype '<f8'"):
        k[1, 1](out, x.double().numpy(), y)


def test_cuda_memory_refused_by_cpu_kernel(worked):
    class Dev:   # any __cuda_array_interface__ object is CUDA memory
        __cuda_array_interface__ = {"shape": (4, 24), "typestr": "<f4", "data": (1 << 20, False),
                                    "version": 3, "strides": None}

    k = worked.pipeline.kernels[0]
    x, y = WORKED.inputs(4)
    with pytest.raises(dl.DeviceError, match=r"out \(%reshape\): Dev is CUDA memory; the cpu kernel"):
        k[1, 1](Dev(), x, y)


def test_launch_configuration_checked(worked):
    k = worked.pipeline.kernels[0]
    with pytest.raises(dl.ArgumentError, match=r"takes \(grid, block\) or \(grid, block, stream\)"):
        k[4]
    with pytest.raises(dl.ArgumentError, match="1-D"):
        k[(2, 2), 32]
    with pytest.raises(dl.ArgumentError, match="block 0: must be at least 1"):
        k[1, 0]
    with pytest.raises(dl.ArgumentError, match="no streams"):
        k[1, 1, torch.device("cpu")]
    assert repr(k[(3, 1, 1), [8], 0]) == "dlcb_k0_reshape[3, 8]"
    x, y = WORKED.inputs(2)
    with pytest.raises(dl.ArgumentError, match="grid 0 launches nothing"):
        k[0, 1](torch.empty(2, 24), x, y)
    k[0, 1](torch.empty(0, 24), *WORKED.inputs(0))        # no elements: nothing to launch
    with pytest.raises(dl.ArgumentError, match=r"launch with dlcb_k0_reshape\[grid, block\]"):
        k.variant(0)(torch.empty(2, 24), x, y)
    with pytest.raises(IndexError, match="1 variant"):
        k.variant(1)


def test_signature_and_unbuilt_kernel(worked):
    k = worked.pipeline.kernels[0]
    assert repr(k.signature) == ("dlcb_k0_reshape(out (%reshape): f32[N, 24], in0 (%x): "
                                 "f32[N, 4, 6], in1 (%y): f32[1, 4, 1], numel = 24*N)")
    with pytest.raises(RuntimeError, match="not built"):
        Kernel(k.body, "cpu", k.signatures)[1, 1]


def test_pickled_module_kernels_launch(worked):
    cm = pickle.loads(pickle.dumps(worked))
    k = cm.pipeline.kernels[0]
    assert isinstance(k.launcher, CpuLauncher)
    x, y = WORKED.inputs(3)
    out = torch.empty(3, 24)
    k[1, 1](out, x, y)
    torch.testing.assert_close(out, worked(x, y), rtol=0, atol=0)


# --- launch geometry ------------------------------------------------------------------------------

def test_geometry():
    thread, block = EntryPoint("k"), EntryPoint("k_blk", variant=1, cooperative=True)
    assert thread.geometry(1000) == (4, BLOCK)
    assert block.geometry(1000) == (1000, BLOCK)
    assert thread.geometry(0) == (0, BLOCK)
    assert thread.geometry(MAX_GRID * BLOCK * 3) == (MAX_GRID, BLOCK)
    cpu = CpuLauncher(None)
    assert cpu.geometry(cpu.pick(0, 77, True), 77) == (77, 1)


def test_trace_reports_grid_and_block(worked):
    t = worked.trace((5, 4, 6), (1, 4, 1))
    (s,) = t.steps
    assert (s.numel, s.grid, s.block) == (120, 120, 1)
    assert "grid 120 block 1" in repr(t)
    pytest.importorskip("pygments")
    from dlcb_lab.viz.render import bundle

    assert "120 prange iterations" in bundle(t)["text/html"]


# --- GPU ------------------------------------------------------------------------------------------

def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


def _numba_cuda():
    _cuda()
    nc = pytest.importorskip("numba.cuda")
    if not nc.is_available():
        pytest.skip("numba.cuda sees no device")
    return nc


@pytest.fixture(scope="module")
def worked_cuda():
    _cuda()
    ex = WORKED.inputs(3, device="cuda")
    return dl.compile(WORKED.module(), ex, dynamic=WORKED.dynamic, backend="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 7, 1000])
def test_gpu_numba_device_arrays(worked_cuda, n):
    nc = _numba_cuda()
    k = worked_cuda.pipeline.kernels[0]
    x, y = WORKED.inputs(n)
    want = WORKED.module()(x, y).numpy()
    xd, yd = nc.to_device(x.numpy()), nc.to_device(y.numpy())
    out = nc.device_array((n, 24), np.float32)
    k[-(-24 * n // 128), 128](out, xd, yd)
    nc.synchronize()
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-6, atol=1e-6)
    out2 = nc.to_device(np.full((n, 24), np.nan, np.float32))
    s = nc.stream()
    k[2, 64, s](out2, xd, yd)           # any grid: the kernels loop grid-stride
    s.synchronize()
    np.testing.assert_allclose(out2.copy_to_host(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_gpu_torch_tensors_stream_and_forall(worked_cuda):
    k = worked_cuda.pipeline.kernels[0]
    x, y = WORKED.inputs(300, device="cuda")
    want = worked_cuda(x, y)
    out = torch.full((300, 24), float("nan"), device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    k[3, 256, s](out, x, y)
    s.synchronize()
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    out.fill_(float("nan"))
    k.forall(out.numel())(out, x, y)
    d = k.check(out, x, y)
    step = worked_cuda.trace(x, y).steps[0]
    assert (d.entry, d.numel, d.narrow) == ("dlcb_k0_reshape_i32", 7200, True)
    # a call takes the vectorized entry point (4 floats per thread); direct launches, per element
    assert (step.name, step.numel, step.narrow, step.width) == ("dlcb_k0_reshape_v", 7200, True, 4)
    assert (step.grid, step.block) == (-(-7200 // 4 // BLOCK), BLOCK)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, want, rtol=0, atol=0)


@pytest.mark.gpu
def test_gpu_fp16_tensors():
    _cuda()
    ex = WORKED.inputs(3, device="cuda", dtype=torch.float16)
    cm = dl.compile(WORKED.module(), ex, dynamic=WORKED.dynamic, backend="cuda")
    k = cm.pipeline.kernels[0]
    x, y = WORKED.inputs(50, device="cuda", dtype=torch.float16)
    out = torch.full((50, 24), float("nan"), device="cuda", dtype=torch.float16)
    k[8, 128](out, x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, cm(x, y), rtol=0, atol=0)
    with pytest.raises(dl.DTypeError, match=r"in0 \(%x\): dtype float32"):
        k[8, 128](out, x.float(), y)


@pytest.mark.gpu
def test_gpu_refused_before_launch(worked_cuda):
    nc = _numba_cuda()
    k = worked_cuda.pipeline.kernels[0]
    x, y = WORKED.inputs(4)
    xd, yd = nc.to_device(x.numpy()), nc.to_device(y.numpy())
    out = nc.to_device(np.full((4, 24), np.nan, np.float32))
    with pytest.raises(dl.DTypeError, match=r"in0 \(%x\): dtype typestr '<f8'"):
        k[1, 128](out, nc.to_device(x.double().numpy()), yd)
    with pytest.raises(dl.ShapeMismatch, match=r"in0 \(%x\) axis 0: size 5 != N = 4"):
        k[1, 128](out, nc.to_device(np.zeros((5, 4, 6), np.float32)), yd)
    with pytest.raises(dl.LayoutError, match=r"in0 \(%x\): not C-contiguous"):
        k[1, 128](out, nc.to_device(np.zeros((4, 4, 12), np.float32))[:, :, ::2], yd)
    with pytest.raises(dl.DeviceError, match=r"in1 \(%y\): a numpy array \(host memory\)"):
        k[1, 128](out, xd, y.numpy())
    with pytest.raises(dl.DeviceError, match=r"in0 \(%x\): a tensor on cpu"):
        k[1, 128](out, x, yd)
    with pytest.raises(dl.ArgumentError, match="at most 1024 threads"):
        k[1, 2048]
    nc.synchronize()
    assert np.isnan(out.copy_to_host()).all(), "a refused launch wrote the output"
    tout = torch.full((4, 24), float("nan"), device="cuda")
    with pytest.raises(dl.ShapeMismatch, match=r"in1 \(%y\) axis 2: size 2 != 1"):
        k[1, 128](tout, x.cuda(), torch.zeros(1, 4, 2, device="cuda"))
    torch.cuda.synchronize()
    assert tout.isnan().all(), "a refused launch wrote the output"


@pytest.mark.gpu
def test_gpu_cooperative_variant():
    _cuda()
    case = BY_NAME["reductions"]
    cm = dl.compile(case.module(), case.inputs(3, device="cuda"), dynamic=case.dynamic,
                    backend="cuda")
    (x,) = case.inputs(9, device="cuda")
    want = cm(x)
    tried = 0
    for k, w in zip(cm.pipeline.kernels, want):
        if len(k.signatures) < 2:
            continue
        coop = k.variant(1)
        with pytest.raises(dl.ArgumentError, match="multiple of 32"):
            coop[4, 100]
        out = torch.full(w.shape, float("nan"), device="cuda")
        coop[3, 64](out, x)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, w, rtol=1e-5, atol=1e-5)
        tried += 1
    assert tried


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_gpu_zoo_kernels_direct_equal_thunk(monkeypatch, name):
    """As on CPU, with the cuda backend's variant and index-width choices (both variants)."""
    _cuda()
    _zoo_direct(name, "cuda", monkeypatch, 3, (96, 64))
