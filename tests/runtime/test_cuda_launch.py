"""Compile with NVRTC, load with cuda.core, launch on torch tensors; compare against torch eager."""

from __future__ import annotations

import pytest
import torch

import dlcb_lab as dl

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

SRC = r"""
extern "C" __global__ void axpb(const float* x, float* y, long long n, float a, int b) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + (float)b;
}
"""
SIG = ("ptr", "ptr", "i64", "f32", "i32")


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("DLCB_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    from dlcb_lab.runtime.cuda_launch import CudaModule
    from dlcb_lab.runtime.nvrtc import compile_cubin, device_arch

    module = CudaModule(compile_cubin(SRC, arch=device_arch()), ["axpb"])
    yield module.kernel("axpb", SIG)
    mp.undo()


def _grid(n: int, block: int = 256) -> int:
    return (n + block - 1) // block


@pytest.mark.parametrize("n", [1, 1000, 1 << 20])
def test_launch_matches_torch(kernel, n):
    x = torch.randn(n, device="cuda")
    y = torch.full((n + 7,), float("nan"), device="cuda")  # poisoned, plus a guard tail
    kernel[_grid(n), 256](x, y, n, 1.5, -3)
    torch.testing.assert_close(y[:n], 1.5 * x - 3, rtol=1e-6, atol=1e-6)
    assert torch.isnan(y[n:]).all()  # nothing written past n


def test_explicit_stream_and_tuple_dims(kernel):
    n = 1 << 16
    x = torch.randn(n, device="cuda")
    y = torch.full((n,), float("nan"), device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(torch.cuda.Stream()):  # current stream differs from the one we pass
        kernel[(_grid(n, 128), 1, 1), (128, 1, 1), s](x, y, n, 2.0, 1)
    s.synchronize()
    torch.testing.assert_close(y, 2.0 * x + 1)


def test_cuda_array_interface_and_empty_grid(kernel):
    n = 300
    x = torch.randn(n, device="cuda")
    y = torch.full((n,), float("nan"), device="cuda")

    class View:  # any object exposing __cuda_array_interface__ is a pointer argument
        def __init__(self, t):
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    kernel[_grid(n), 256](View(x), y.data_ptr(), n, 1.0, 0)
    torch.testing.assert_close(y, x)
    kernel[0, 256](x, y, 0, 1.0, 0)  # zero blocks: no launch, no error


def test_wrong_arg_count(kernel):
    x = torch.zeros(4, device="cuda")
    with pytest.raises(dl.ArgumentError, match="takes 5 arguments, got 3"):   # a TypeError
        kernel[1, 32](x, x, 4)


def test_prelude_magic_division(tmp_path, monkeypatch):
    """The prelude's 32-bit ``dlcb_udiv``/``dlcb_umod`` against torch on the device, with
    ``kgen.abi.magic`` divisors from 1 to 2**31 - 1 and indices up to 2**31 - 1; the 64-bit
    instantiation divides plainly."""
    monkeypatch.setenv("DLCB_CACHE_DIR", str(tmp_path))
    from dlcb_lab.kgen.abi import magic
    from dlcb_lab.kgen.spellings import CUDA_PRELUDE
    from dlcb_lab.runtime.cuda_launch import CudaModule
    from dlcb_lab.runtime.nvrtc import compile_cubin, device_arch

    src = CUDA_PRELUDE + r"""
extern "C" __global__ void qr(const long long* n, const long long* d, const long long* dm,
                              long long* q, long long* r, long long* q64, long long k) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= k) return;
    q[i] = dlcb_udiv<int>((int)n[i], (int)d[i], dm[i]);
    r[i] = dlcb_umod<int>((int)n[i], (int)d[i], dm[i]);
    q64[i] = dlcb_udiv<long long>(n[i], d[i], dm[i]);
}
"""
    kernel = CudaModule(compile_cubin(src, arch=device_arch()), ["qr"]).kernel(
        "qr", ("ptr",) * 6 + ("i64",))
    g = torch.Generator().manual_seed(0)
    top = (1 << 31) - 1
    ds = [1, 2, 3, 7, 49, 96, 197, 3136, 65537, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, top]
    ds += torch.randint(1, top, (64,), generator=g).tolist()
    ds += [int(x) for x in torch.randint(1, 1 << 12, (64,), generator=g)]
    pairs = []
    for d in ds:
        ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, top, top - 1, top - d}
        ns |= set(torch.randint(0, top, (16,), generator=g).tolist())
        pairs += [(n, d) for n in ns if 0 <= n <= top]
    n = torch.tensor([p[0] for p in pairs], dtype=torch.int64, device="cuda")
    d = torch.tensor([p[1] for p in pairs], dtype=torch.int64, device="cuda")
    dm = torch.tensor([magic(p[1]) for p in pairs], dtype=torch.int64, device="cuda")
    q, r, q64 = (torch.full_like(n, -1) for _ in range(3))
    kernel[_grid(len(pairs)), 256](n, d, dm, q, r, q64, len(pairs))
    torch.testing.assert_close(q, n // d, rtol=0, atol=0)
    torch.testing.assert_close(r, n % d, rtol=0, atol=0)
    torch.testing.assert_close(q64, n // d, rtol=0, atol=0)
