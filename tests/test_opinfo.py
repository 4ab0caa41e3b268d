"""PyTorch's own OpInfo samples (``op_db``) through a static and a dynamic compile on the CPU
backend, for every op the bridge lowers. A wrong value is a bug; a refusal must be a ``dl`` error.

The dynamic compile names every axis of size > 1 (``d<input>_<axis>``; broadcasting ties equal
ones) and is then also called with every named dim grown by one: where eager accepts the grown
inputs the results must agree, where eager raises the compiled module must raise a ``dl`` error.
The regular suite runs float32 (about 3 min cold on 2 cores: each new kernel is a numba compile);
``-m slow`` sweeps every other supported dtype.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.ir.dtypes import DTYPES

common = pytest.importorskip("torch.testing._internal.common_methods_invocations")

OPS = ["nn.functional.relu", "neg", "abs", "exp", "sigmoid", "tanh", "add", "sub", "mul", "div",
       "true_divide", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "logical_not",
       "logical_and", "logical_or", "where", "sum", "mean", "amax", "reshape", "view", "permute",
       "transpose", "flatten", "contiguous", "to", "bitwise_not", "bitwise_and", "bitwise_or",
       "float", "double", "long", "int", "bool", "byte", "char", "short"]
FAST = (torch.float32,)
OPINFOS = [o for o in common.op_db if o.name in OPS]


def _cases(dtypes, marks=()):
    out = []
    for op in OPINFOS:
        for dt in sorted(op.supported_dtypes("cpu") & set(dtypes), key=str):
            name = f"{op.name}.{op.variant_test_name}".rstrip(".")
            out.append(pytest.param(op, dt, id=f"{name}-{str(dt)[6:]}", marks=marks))
    return out


class _Sample(torch.nn.Module):
    """``op(input, *args, **kwargs)`` with the sample's tensors as module inputs."""

    def __init__(self, op, sample):
        super().__init__()
        self.fn = op.op
        self.args = [a if not isinstance(a, torch.Tensor) else None for a in sample.args]
        self.kwargs = {k: v for k, v in sample.kwargs.items() if not isinstance(v, torch.Tensor)}
        self.slots = [i for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor)]
        self.kslots = [k for k, v in sample.kwargs.items() if isinstance(v, torch.Tensor)]

    def call(self, x, ts):
        args, it = list(self.args), iter(ts)
        for i in self.slots:
            args[i] = next(it)
        return self.fn(x, *args, **self.kwargs, **{k: next(it) for k in self.kslots})


class _S1(_Sample):
    def forward(self, x):
        return self.call(x, ())


class _S2(_Sample):
    def forward(self, x, a):
        return self.call(x, (a,))


class _S3(_Sample):
    def forward(self, x, a, b):
        return self.call(x, (a, b))


def _tensors(sample) -> list[torch.Tensor]:
    return [sample.input] + [a for a in sample.args if isinstance(a, torch.Tensor)] + \
        [v for v in sample.kwargs.values() if isinstance(v, torch.Tensor)]


def _spec(ts):
    return {i: {k: f"d{i}_{k}" for k, n in enumerate(t.shape) if n > 1} for i, t in enumerate(ts)}


def _grown(ts, spec, gen, nonneg=False):
    """Fresh inputs with every named dim grown by one (``nonneg``: no negative values, for casts
    to unsigned types, undefined for negative floats in C++ and so in eager)."""
    out = []
    for i, t in enumerate(ts):
        shape = [n + 1 if k in spec.get(i, {}) else n for k, n in enumerate(t.shape)]
        r = torch.randn(shape, generator=gen) * 4
        r = r.abs() if nonneg else r
        out.append(r.to(t.dtype) if t.dtype is not torch.bool else r > 0)
    return out


def _eager(m, ts):
    try:
        return ("ok", m(*ts))
    except Exception as err:   # noqa: BLE001 - eager's own refusal
        return ("raises", err)


def _compare(got, want, ctx):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want), ctx
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype, (ctx, a.shape, b.shape, a.dtype, b.dtype)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True,
                                   msg=lambda s: f"{ctx}: {s}")


def _check(op, dtype):
    refused = ran = 0
    gen = torch.Generator().manual_seed(0)
    for j, sample in enumerate(op.sample_inputs("cpu", dtype)):
        ts = [t.detach().clone() for t in _tensors(sample)]
        if len(ts) > 3 or any(t.layout is not torch.strided for t in ts):
            continue
        m = (_S1, _S2, _S3)[len(ts) - 1](op, sample)
        status, want = _eager(m, ts)
        if status == "raises":
            continue
        for spec in (False, _spec(ts)):
            ctx = f"{op.name} {dtype} sample {j} {[tuple(t.shape) for t in ts]} {sample.args} " \
                  f"{sample.kwargs} dynamic={spec}"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cm = dl.compile(m, ts, dynamic=spec, backend="cpu", strict=False)
            except dl.DLError as err:
                assert str(err), ctx
                refused += 1
                continue
            ran += 1
            _compare(cm(*ts), want, ctx)
            if spec and any(spec.values()):
                grown = _grown(ts, spec, gen, nonneg=op.name == "byte")
                status, want2 = _eager(m, grown)
                if status == "ok":
                    _compare(cm(*grown), want2, ctx + " grown")
                else:
                    with pytest.raises(dl.DLError):
                        cm(*grown)
    return ran, refused


def _expect_refused(op, dtype) -> bool:
    """Not lowered on purpose: rounding division and integer bitwise ops (a clear refusal)."""
    return op.variant_test_name.endswith("_rounding") or (
        op.name.startswith("bitwise") and dtype is not torch.bool)


def _run_op(op, dtype):
    ran, refused = _check(op, dtype)
    if _expect_refused(op, dtype):
        assert refused and not ran
    else:
        assert ran, f"every sample of {op.name} {dtype} was refused"


@pytest.mark.parametrize("op,dtype", _cases(FAST))
def test_opinfo_samples(op, dtype):
    _run_op(op, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("op,dtype", _cases(set(DTYPES) - set(FAST)))
def test_opinfo_samples_all_dtypes(op, dtype):
    _run_op(op, dtype)
