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
