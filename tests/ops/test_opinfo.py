"""PyTorch's own OpInfo samples (``op_db``) through a static and a dynamic compile on the CPU
backend, for every op the bridge lowers. A wrong value is a bug; a refusal must be a ``dl`` error.

Every tensor of a sample (also inside a list argument, as for ``cat``) is a module input. The
dynamic compile names every axis of size > 1 (``d<input>_<axis>``; broadcasting ties equal ones);
where that is refused (e.g. a symbolic convolution kernel), only the first input's axes are named.
A dynamic compile is then also called with every named dim grown by one: where eager accepts the
grown inputs the results must agree, or the compiled module refuses them by a requirement it
declared (``ShapeMismatch`` naming it: a slice, window or chunk count on a symbolic axis, where
torch would clamp or vary the output count); where eager raises the compiled module must raise a
``dl`` error. The regular suite runs float32 on at most ``FAST_SAMPLES`` samples per op (a fixed
pseudo-random choice; each new kernel is a numba compile) and one 16-bit format per op on
``REDUCED_SAMPLES`` (``_cases_16bit``: float16 and bfloat16 in turn over the ops); ``-m slow`` runs
each op's other 16-bit format, every sample and every other dtype.
"""

from __future__ import annotations

import operator
import random
import warnings

import pytest
import torch
import torch.utils._pytree as pytree

import dlcb_lab as dl
from dlcb_lab.bridge.registry import registrations
from dlcb_lab.ir.dtypes import DTYPES

common = pytest.importorskip("torch.testing._internal.common_methods_invocations")

OPS = sorted({n for r in registrations() for n in r.opinfo})
"""The OpInfo names the lowering registry (``bridge/registry.py``) gives its registrations."""
FAST = (torch.float32,)
FAST_SAMPLES = 16
"""Samples per op in the regular run (max_pool2d alone has 1440)."""
REDUCED = (torch.float16, torch.bfloat16)
REDUCED_SAMPLES = 3
"""Samples per op and 16-bit dtype in the regular run."""
ULP2 = {torch.float16: 2 * 2.0**-10, torch.bfloat16: 2 * 2.0**-7}
"""16-bit results may differ from eager's by rounding (accumulators of different widths):
two units in the last place, relative to the value or, near zero, absolute."""
OPINFOS = [o for o in common.op_db if o.name in OPS]
EXT_OPS = {n for r in registrations() if r.slow for n in r.opinfo}
"""Registrations marked ``slow`` (the transformers / timm vocabulary): run under ``-m slow`` only
(suite time; ``python tests/tools/opinfo_census.py <op>`` for one)."""


def _cases(dtypes, marks=()):
    out = []
    for op in OPINFOS:
        for dt in sorted(op.supported_dtypes("cpu") & set(dtypes), key=str):
            name = f"{op.name}.{op.variant_test_name}".rstrip(".")
            out.append(pytest.param(op, dt, id=f"{name}-{str(dt)[6:]}", marks=marks))
    return out


def _cases_16bit():
    """Each op in one 16-bit format in the regular run, float16 and bfloat16 in turn over the ops
    that take both (the format is a parameter of one path: 16-bit loads, float32 arithmetic, a
    rounding store; both formats' conversions and roundings stay covered, each by half the ops),
    the other format marked ``slow``. An op that takes one of them runs it."""
    out, turn = [], 0
    for c in _cases(REDUCED):
        op, dt = c.values
        both = len(set(op.supported_dtypes("cpu")) & set(REDUCED)) == 2
        if both and dt is REDUCED[turn % 2]:
            c = pytest.param(*c.values, id=c.id, marks=pytest.mark.slow)
        out.append(c)
        if both and dt is torch.float16:   # _cases sorts bfloat16 first: the op's last format
            turn += 1
    return out


class _Sample(torch.nn.Module):
    """``op(input, *args, **kwargs)`` with the sample's tensors as module inputs (in pytree leaf
    order), everything else baked in."""

    def __init__(self, op, sample):
        super().__init__()
        # x[idx] as a plain function (op.op is the Tensor.__getitem__ slot wrapper)
        self.fn = operator.getitem if op.name == "__getitem__" else op.op
        leaves, self.tree = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        self.slots = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        self.leaves = [None if isinstance(x, torch.Tensor) else x for x in leaves]

    def call(self, *ts):
        leaves = list(self.leaves)
        for i, t in zip(self.slots, ts):
            leaves[i] = t
        input, args, kwargs = pytree.tree_unflatten(leaves, self.tree)
        return self.fn(input, *args, **kwargs)


class _S1(_Sample):
    def forward(self, a):
        return self.call(a)


class _S2(_Sample):
    def forward(self, a, b):
        return self.call(a, b)


class _S3(_Sample):
    def forward(self, a, b, c):
        return self.call(a, b, c)


class _S4(_Sample):
    def forward(self, a, b, c, d):
        return self.call(a, b, c, d)


class _S5(_Sample):
    def forward(self, a, b, c, d, e):
        return self.call(a, b, c, d, e)


_ARITY = (_S1, _S2, _S3, _S4, _S5)


def _tensors(sample) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _spec(ts, first_only=False):
    return {i: {k: f"d{i}_{k}" for k, n in enumerate(t.shape) if n > 1}
            for i, t in enumerate(ts) if i == 0 or not first_only}


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
        tol = ULP2.get(b.dtype, 1e-5)
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, equal_nan=True,
                                   msg=lambda s: f"{ctx}: {s}")


def _samples(op, dtype, limit):
    """(index, sample) pairs: every sample, or ``limit`` of them chosen by a generator seeded with
    the op's name (evenly spaced picks alias with the parameter grids of some ops)."""
    samples = list(enumerate(op.sample_inputs("cpu", dtype)))
    if limit and len(samples) > limit:
        pick = random.Random(f"{op.name}.{op.variant_test_name}").sample(range(len(samples)),
                                                                        limit)
        samples = [samples[i] for i in sorted(pick)]
    return samples


def _show(x):
    """A sample argument for messages, tensors as their shapes."""
    return pytree.tree_map(lambda t: f"T{tuple(t.shape)}" if isinstance(t, torch.Tensor) else t, x)


def _declared_requirement(err: dl.DLError) -> bool:
    """A run-time refusal from a requirement the graph declared (``Graph.require``)."""
    return isinstance(err, dl.ShapeMismatch) and ": needs " in str(err)


def _compile(m, ts, spec):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dl.compile(m, ts, dynamic=spec, backend="cpu", strict=False, fallback=False)


def _check(op, dtype, limit=None):
    refused = ran = 0
    gen = torch.Generator().manual_seed(0)
    for j, sample in _samples(op, dtype, limit):
        ts = [t.detach().clone() for t in _tensors(sample)]
        if len(ts) > len(_ARITY) or any(t.layout is not torch.strided for t in ts):
            continue
        m = _ARITY[len(ts) - 1](op, sample)
        status, want = _eager(m, ts)
        if status == "raises":
            continue
        specs = [False, _spec(ts)]
        while specs:
            spec = specs.pop(0)
            ctx = f"{op.name} {dtype} sample {j} {_show(sample.input)} {_show(sample.args)} " \
                  f"{_show(sample.kwargs)} dynamic={spec}"
            try:
                cm = _compile(m, ts, spec)
            except dl.DLError as err:
                assert str(err), ctx
                refused += 1
                if spec and len(ts) > 1 and spec != _spec(ts, True):
                    specs.append(_spec(ts, True))
                continue
            ran += 1
            _compare(cm(*ts), want, ctx)
            if spec and any(spec.values()):
                grown = _grown(ts, spec, gen, nonneg=op.name == "byte")
                status, want2 = _eager(m, grown)
                if status == "ok":
                    try:
                        got = cm(*grown)
                    except dl.DLError as err:
                        assert _declared_requirement(err), (ctx + " grown", err)
                        continue
                    _compare(got, want2, ctx + " grown")
                else:
                    with pytest.raises(dl.DLError):
                        cm(*grown)
    return ran, refused


FLOAT_ONLY = {"nn.functional.conv2d", "nn.functional.linear", "matmul", "bmm", "mm", "addmm",
              "nn.functional.scaled_dot_product_attention", "nn.functional.max_pool2d",
              "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d"}
"""Library ops and pools: floating operands only (integer ones are a ``DTypeError``)."""


def _expect_refused(op, dtype) -> bool:
    """Not lowered on purpose (a clear refusal): integer rounding division by a tensor (eager
    raises on a zero divisor, a kernel cannot), integer bitwise ops, integer library ops and
    pools, ``round`` to decimals other than 0, and the nuclear norm (an SVD)."""
    return (op.variant_test_name.endswith("_rounding") and not dtype.is_floating_point) or (
        op.name.startswith("bitwise") and dtype is not torch.bool) or (
        op.name in FLOAT_ONLY and not dtype.is_floating_point) or (
        op.name == "round" and op.variant_test_name in ("decimals_3", "decimals_neg_3")) or (
        op.name == "norm" and op.variant_test_name == "nuc")


def _run_op(op, dtype, limit=None):
    ran, refused = _check(op, dtype, limit)
    if _expect_refused(op, dtype):
        assert refused and not ran
    else:
        assert ran, f"every sample of {op.name} {dtype} was refused"


@pytest.mark.parametrize("op,dtype", [c for c in _cases(FAST) if c.values[0].name not in EXT_OPS])
def test_opinfo_samples(op, dtype):
    _run_op(op, dtype, FAST_SAMPLES)


@pytest.mark.parametrize("op,dtype", [c for c in _cases_16bit() if c.values[0].name != "to"
                                      and c.values[0].name not in EXT_OPS])
def test_opinfo_samples_16bit(op, dtype):
    """(``to``'s few picked samples may all be device moves, refused on purpose: ``-m slow``.)"""
    _run_op(op, dtype, REDUCED_SAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("op,dtype", _cases(FAST))
def test_opinfo_all_samples(op, dtype):
    _run_op(op, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("op,dtype", _cases(set(DTYPES) - set(FAST)))
def test_opinfo_samples_all_dtypes(op, dtype):
    _run_op(op, dtype)
