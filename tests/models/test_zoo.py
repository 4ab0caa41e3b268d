"""TorchVision model zoo (``dlcb_lab.bench.zoo``): the FAST subset compiled once each on the CPU
backend and checked against eager at three (batch, H, W) shapes, with no recompile and no kernel
rebuild; every generated kernel of those models compiles to an sm_90 cubin with NVRTC (no GPU
needed); two of them also in fp16 / bf16; the full zoo (fp32, fp16, bf16) as a slow sweep. A tiny
model checks the harness itself: it must pass a correct compile and reject a perturbed one.
"""

from __future__ import annotations

import functools

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.bench import zoo
from dlcb_lab.kgen.emit import cuda_module, entry_points
from dlcb_lab.kgen.infer import infer_kernels
from dlcb_lab.runtime.nvrtc import compile_cubin


@functools.lru_cache(maxsize=None)
def _compiled(name: str):
    """One CPU compile per model per worker, shared by the tests below; the exception if any."""
    try:
        return zoo.compile_model(name, "cpu")
    except Exception as err:
        return err


def compiled(name: str) -> dl.CompiledModule:
    cm = _compiled(name)
    if isinstance(cm, Exception):
        raise cm
    return cm


def assert_row_ok(row: dict, spec: zoo.ModelSpec) -> None:
    assert row["ok"], f"{row['model']}: {row['error']}"
    assert row["max_rel_err"] <= zoo.TOL
    assert row["compiles"] == 1 + row["variants"] and row["variants"] <= 1   # batch 1, once
    assert row["kernel_builds_after"] == row["kernel_builds"]
    assert row["dims"] == ",".join(spec.dims), "a declared dynamic dim was pinned"


@pytest.mark.parametrize("name", zoo.FAST)
def test_fast_model_matches_eager(name):
    row = zoo.check_model(name, backend="cpu", cm=compiled(name))
    assert_row_ok(row, zoo.MODELS[name])


@pytest.mark.parametrize("name", zoo.FAST)
def test_fast_kernels_compile_with_nvrtc(name):
    """The compiled kernels in one translation unit, and the cooperative set the cuda backend
    would generate for the same graph, each compile to an sm_90 cubin holding every entry point."""
    cm = compiled(name)
    plain = [k.body for k in cm.pipeline.kernels]
    assert plain
    for bodies in (plain, infer_kernels(cm.pipeline.graph, cooperative=True)):
        cubin = compile_cubin(cuda_module(bodies), arch="sm_90")
        assert cubin[:4] == b"\x7fELF"
        missing = [e for e in entry_points(bodies) if e.encode() not in cubin]
        assert not missing, f"entry points absent from the cubin: {missing[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_matches_eager(name):
    assert_row_ok(zoo.check_model(name, backend="cpu"), zoo.MODELS[name])


def assert_16bit_ok(name: str, dtype: torch.dtype, cm: dl.CompiledModule | None = None) -> dict:
    row = zoo.check_model(name, backend="cpu", dtype=dtype, cm=cm)
    assert row["ok"], f"{name} {dtype}: {row['error']}"
    assert row["dims"] == ",".join(zoo.MODELS[name].dims)
    assert row["fp32_err"] <= zoo.HALF_SLACK * row["eager_fp32_err"] + zoo.TOL
    return row


@pytest.mark.parametrize("name,dtype", [("resnet18", torch.float16),
                                        ("vit_tiny", torch.bfloat16)])
def test_fast_model_16bit(name, dtype):
    """One compile in fp16/bf16 serves every shape, within twice eager's own 16-bit error against
    the fp32 model; its kernels (16-bit loads, stores and rounding) compile with NVRTC."""
    cm = zoo.compile_model(name, "cpu", dtype=dtype)
    assert_16bit_ok(name, dtype, cm)
    bodies = [k.body for k in cm.pipeline.kernels]
    assert any(b.dtype.reduced for b in bodies)
    assert compile_cubin(cuda_module(bodies), arch="sm_90")[:4] == b"\x7fELF"


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_zoo_model_16bit(name, dtype):
    assert_16bit_ok(name, dtype)


# --- the harness itself -------------------------------------------------------------------------

class Tiny(torch.nn.Module):
    def forward(self, x):
        y = torch.relu(x * 2.0 + 1.0)
        return y.mean(dim=(2, 3)) - y.amax(dim=(2, 3))


class Perturbed:
    """A compiled module whose outputs are off by a relative 1e-3 (10x the bound)."""

    def __init__(self, cm):
        self._cm = cm

    def __getattr__(self, attr):
        return getattr(self._cm, attr)

    def __call__(self, x):
        return self._cm(x) * (1 + 1e-3)


@pytest.fixture
def tiny(monkeypatch):
    spec = zoo.ModelSpec("tiny", zoo._seeded(Tiny), zoo.CNN_DYNAMIC, 224, ((64, 80), (96, 72)))
    monkeypatch.setitem(zoo.MODELS, "tiny", spec)
    return spec


def test_harness_accepts_correct_and_rejects_wrong(tiny):
    cm = zoo.compile_model("tiny")
    row = zoo.check_model("tiny", cm=cm)
    assert_row_ok(row, tiny)
    assert row["eager_ops"] == 6          # mul, add, relu, mean, amax, sub
    assert row["shapes"] == "1x64x80 3x96x72 5x64x80"
    bad = zoo.check_model("tiny", cm=Perturbed(cm))
    assert not bad["ok"] and 5e-4 < bad["max_rel_err"] < 2e-3, bad


def test_16bit_errors():
    """A 16-bit check passes within HALF_SLACK of eager's own error against fp32, fails beyond it,
    and flags a degenerate eager output; ``worst`` keeps the maxima."""
    ref32 = torch.tensor([1.0, -2.0, 4.0])
    want = ref32.half() + torch.tensor([0.004, 0, 0], dtype=torch.half)   # eager: 1e-3 off
    near = ref32.half() + torch.tensor([0, 0.008, 0], dtype=torch.half)
    far = ref32.half() + torch.tensor([0, 0, 0.04], dtype=torch.half)
    ok, bad = zoo.errors(near, want, ref32), zoo.errors(far, want, ref32)
    assert ok.eager_vs_fp32 == pytest.approx(1e-3, rel=0.05) and ok.ok(zoo.TOL) and not ok.note
    assert bad.vs_fp32 > zoo.HALF_SLACK * bad.eager_vs_fp32 + zoo.TOL and not bad.ok(zoo.TOL)
    assert ok.worst(bad).vs_fp32 == bad.vs_fp32 and ok.worst(None) is ok
    zero = zoo.errors(ref32.half() * 0, ref32.half() * 0 + 1, ref32)
    assert zero.note.startswith("eager's 16-bit output is degenerate")


def test_rel_error():
    a = torch.tensor([[1.0, -4.0], [2.0, 0.5]])
    assert zoo.rel_error(a, a.clone()) == 0
    assert zoo.rel_error(a + 0.004, a) == pytest.approx(1e-3, rel=1e-4)
    assert zoo.rel_error((a, a), (a, a * 2)) == pytest.approx(0.5)   # max over outputs
    nan = a.clone()
    nan[0, 0] = float("nan")
    assert zoo.rel_error(nan, a) == float("inf")
    assert zoo.rel_error(a[:1], a) == float("inf")                 # shape
    assert zoo.rel_error(a.double(), a) == float("inf")            # dtype
    assert zoo.rel_error((a,), (a, a)) == float("inf")             # output count
    assert zoo.rel_error(a * 0, a * 0) == float("inf")             # zero reference: vacuous


def test_compile_failure_is_a_row():
    row = zoo.check_model("squeezenet1_1", resolutions=[(4, 4)])   # eager itself refuses
    assert not row["ok"] and row["error"].startswith("eager: RuntimeError"), row["error"]


def test_vit_head_is_not_zero():
    """torchvision zero-initialises the ViT head; a zero output would make the check vacuous."""
    m = zoo.MODELS["vit_tiny"].build()
    y = m(zoo.make_input(2, (64, 64)))
    assert y.abs().min() > 0 and not torch.equal(y[0], y[1])


def test_specs():
    assert set(zoo.FAST) <= set(zoo.MODELS)
    for name, spec in zoo.MODELS.items():
        assert spec.dims == (("N",) if spec.fixed_res else ("N", "H", "W")), name
        (h0, w0), (h1, w1) = spec.test_res
        if spec.fixed_res:
            assert (h0, w0) == (h1, w1) == (spec.native, spec.native), name
        else:
            assert min(h0, w0, h1, w1) >= 64 and h0 != w0 and h1 != w1, name
    assert zoo.check_shapes((1, 3, 5), ["a", "b"]) == [(1, "a"), (3, "b"), (5, "a")]
