"""NVRTC → cubin on a machine without a GPU: output format, on-disk cache, headers, error messages."""

from __future__ import annotations

import pytest

from dlcb_lab.runtime import nvrtc
from dlcb_lab.runtime.cache import cache_dir, content_key
from dlcb_lab.runtime.nvrtc import CudaCompileError, compile_cubin, nvrtc_compile_count

SCALE = r"""
extern "C" __global__ void k(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"""


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLCB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_content_key_length_prefixed():
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key("x", b"y") == content_key(b"x", "y")


def test_cache_dir_follows_env(tmp_cache):
    assert cache_dir("cubin") == tmp_cache / "cubin" and (tmp_cache / "cubin").is_dir()


def test_nvrtc_version():
    major, minor = nvrtc.nvrtc_version()
    assert major >= 12 and minor >= 0


def test_compile_cubin_is_elf_and_cached(tmp_cache):
    n0 = nvrtc_compile_count()
    cubin = compile_cubin(SCALE, arch="sm_90")
    assert cubin.startswith(b"\x7fELF") and len(cubin) > 64
    assert nvrtc_compile_count() == n0 + 1
    assert len(list((tmp_cache / "cubin").glob("*.cubin"))) == 1
    again = compile_cubin(SCALE, arch="sm_90")
    assert again == cubin and nvrtc_compile_count() == n0 + 1  # cache hit: no NVRTC call
    compile_cubin(SCALE, arch="sm_90", options=("-lineinfo",))  # options are part of the key
    assert nvrtc_compile_count() == n0 + 2


def test_fp16_header_compiles():
    src = r"""
#include <cuda_fp16.h>
extern "C" __global__ void h(const __half* x, __half* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __hmul(x[i], __float2half(2.0f));
}
"""
    assert compile_cubin(src).startswith(b"\x7fELF")


def test_syntax_error_reports_log_and_line():
    src = SCALE + '\nextern "C" __global__ void bad(float* y) {\n    y[0] = 1.0f +;\n}\n'
    n0 = nvrtc_compile_count()
    with pytest.raises(CudaCompileError) as info:
        compile_cubin(src)
    msg = str(info.value)
    assert "error" in msg and info.value.log.strip() in msg
    bad_line = src.splitlines().index("    y[0] = 1.0f +;") + 1
    assert f">{bad_line:5d} |     y[0] = 1.0f +;" in msg
    assert nvrtc_compile_count() == n0 + 1  # counted (NVRTC ran) ...
    with pytest.raises(CudaCompileError):
        compile_cubin(src)
    assert nvrtc_compile_count() == n0 + 2  # ... but never cached


def test_rejects_virtual_arch():
    with pytest.raises(ValueError):
        compile_cubin(SCALE, arch="compute_90")


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_kernels_split_into_units_compile_in_parallel(workers):
    """A model's distinct kernels split into contiguous NVRTC units (at most ``workers``), each
    compiled to its own cubin by parallel threads; every kernel is in exactly one unit, a kernel
    of the same code as an earlier one in that one's, and each cubin exports the entry points
    of the distinct kernels it holds."""
    import torch
    import torchvision

    from dlcb_lab.bridge.aten import to_ir
    from dlcb_lab.kgen.emit import cuda_module, entry_points
    from dlcb_lab.kgen.infer import infer_kernels
    from dlcb_lab.passes import run_passes
    from dlcb_lab.runtime.build import distinct, units

    m = torchvision.models.squeezenet1_1(num_classes=10).eval()
    g, _ = run_passes(to_ir(m, (torch.randn(2, 3, 32, 32),), {0: {0: "N"}}))
    bodies = infer_kernels(g, cooperative=True)
    rep = distinct(bodies)
    groups = units(bodies, workers)
    assert 1 <= len(groups) <= workers
    assert sorted(i for grp in groups for i in grp) == list(range(len(bodies)))   # each once
    firsts = [i for grp in groups for i in grp if rep[i] == i]
    assert firsts == sorted(set(rep))                                             # contiguous
    assert all(rep[i] in grp for grp in groups for i in grp)
    subs = [[bodies[i] for i in grp if rep[i] == i] for grp in groups]
    n0 = nvrtc_compile_count()
    cubins = nvrtc.compile_cubins([cuda_module(sub) for sub in subs])
    assert nvrtc_compile_count() == n0 + len(groups)
    for cubin, sub in zip(cubins, subs):
        assert cubin.startswith(b"\x7fELF")
        assert all(name.encode() in cubin for name in entry_points(sub))


def test_kernels_of_one_code_compile_once():
    """Repeated blocks give kernels of the same code under different names: ``distinct`` maps
    each to the first of its code, whose source is its own with the name swapped (comments
    aside); a kernel that differs in a literal (a channel count) or a dtype is its own."""
    import re

    import torch

    from dlcb_lab.bridge.aten import to_ir
    from dlcb_lab.kgen.emit import cuda_kernel
    from dlcb_lab.kgen.infer import infer_kernels
    from dlcb_lab.passes import run_passes
    from dlcb_lab.runtime.build import distinct

    class Blocks(torch.nn.Module):
        def forward(self, x, y, z):
            a = torch.sigmoid(x) * 2 + 1       # these two: the same code
            b = torch.sigmoid(y) * 2 + 1
            c = (torch.sigmoid(z) * 2 + 1).sum(-1)   # a sum over 8 ...
            d = (torch.sigmoid(y) * 2 + 1).sum(-1)   # ... and over 16: two codes
            e = torch.sigmoid(x.double()) * 2 + 1     # another dtype
            return a, b, c, d, e

    ex = (torch.randn(4, 16), torch.randn(4, 16), torch.randn(4, 8))
    g, _ = run_passes(to_ir(Blocks(), ex, {0: {0: "N"}, 1: {0: "M"}, 2: {0: "K"}}))
    bodies = infer_kernels(g, cooperative=True)
    rep = distinct(bodies)
    assert len(bodies) == 5 and len(set(rep)) == 4 and rep[1] == 0, rep
    strip = re.compile(r"//[^\n]*")
    for i, r in enumerate(rep):
        if r != i:
            mine = strip.sub("", cuda_kernel(bodies[i]).replace(bodies[i].name, "K"))
            assert mine == strip.sub("", cuda_kernel(bodies[r]).replace(bodies[r].name, "K"))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_block_row_kernels_compile_in_every_float_dtype(dtype):
    """softmax, log_softmax and layer norm, block per row: the register-cached passes and the
    two-read ones beside them, with float accumulators for softmax of float32 and 16-bit rows
    and double ones for float64 rows and every layer norm."""
    import torch
    import torch.nn.functional as F

    from dlcb_lab.bridge.aten import to_ir
    from dlcb_lab.kgen.emit import cuda_module
    from dlcb_lab.kgen.entries import ROW_CACHE
    from dlcb_lab.kgen.infer import infer_kernels
    from dlcb_lab.passes import run_passes

    class Rows(torch.nn.Module):
        def forward(self, x, w):
            return F.softmax(x, -1), F.log_softmax(x, -1), F.layer_norm(x, (x.shape[-1],), w)

    t = getattr(torch, dtype)
    g, _ = run_passes(to_ir(Rows(), (torch.randn(2, 8, dtype=t), torch.randn(8, dtype=t)),
                            {0: {0: "N", 1: "C"}, 1: {0: "C"}}))
    blocks = [b.variant for b in infer_kernels(g, cooperative=True)]
    assert len(blocks) == 3 and all(b is not None for b in blocks)
    src = cuda_module(blocks)
    acc = "double" if dtype == "float64" else "float"
    assert src.count(f"{acc} rm = -INFINITY, rs = 0;") == 2
    assert src.count("double rs1 = 0, rs2 = 0;") == 1
    assert src.count("rc[RC];") == 3 and src.count("} else {") >= 3
    # a row of runtime extent: the warp keeps as many elements a lane as the block
    assert src.count(f"constexpr int RC = G ? {ROW_CACHE} : {ROW_CACHE};") == 3
    assert compile_cubin(src).startswith(b"\x7fELF")
