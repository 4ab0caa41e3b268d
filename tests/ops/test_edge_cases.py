"""Edge cases, each against torch eager on the CPU backend: empty dim lists, zero-size dims (static
and at run time), 0-d tensors, keyword defaults spelled out, integer and bool dtypes with torch's
type promotion, in-place forms, reductions over empty ranges, invalid axes, reshape sizes computed
from dims, and examples the compiled program rejects. A refusal must be a ``dl`` error naming the
op and the user's source line."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import dlcb_lab as dl

from harness import Spy, as_tuple
from models import Fn, Fn2, int_mix

HERE = r"(?:test_edge_cases|models)\.py"
"""Where an error points: the lambda in this file, or `Fn.forward` (tests/tools/models.py) that called it."""


def run(m, ins, dynamic=False, calls=(), device="cpu"):
    """Compile ``m`` for ``ins`` and compare with eager on ``ins`` and on each input tuple of
    ``calls``, on ``device`` (backend ``cpu`` or ``cuda``); returns the compiled module."""
    ins, calls = [t.to(device) for t in ins], [[t.to(device) for t in c] for c in calls]
    cm = dl.compile(m, ins, dynamic=dynamic, backend=device)
    for args in (ins, *calls):
        got, want = as_tuple(cm(*args)), as_tuple(m(*args))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)
    return cm


# --- empty dim lists reduce every axis --------------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda x: torch.sum(x, dim=()), lambda x: torch.amax(x, dim=()), lambda x: torch.mean(x, dim=[]),
    lambda x: x.sum([]), lambda x: torch.sum(x, dim=(), keepdim=True), lambda x: x.amax(),
], ids=["sum()", "amax()", "mean[]", "sum[]", "sum()keep", "amax"])
@pytest.mark.parametrize("dynamic", [False, {0: {0: "N"}}], ids=["static", "dynamic"])
def test_empty_dim_list_reduces_all(fn, dynamic):
    calls = [(torch.randn(5, 3),)] if dynamic else []
    cm = run(Fn(fn), (torch.randn(2, 3),), dynamic, calls)
    assert cm(torch.randn(2, 3)).dim() in (0, 2)


# --- zero-size dims ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fn,shape", [
    (torch.exp, (1, 0, 3)), (torch.sigmoid, (1, 0, 3)), (torch.relu, (1, 0, 3)),
    (lambda x: x + 1, (2, 0)), (lambda x: x.sum(1), (3, 0)), (lambda x: x.mean(1), (3, 0)),
    (lambda x: x.sum(0), (3, 0)), (lambda x: x.reshape(-1, 3).permute(1, 0), (0, 6)),
    (lambda x: x.amax(0), (3, 0)),
], ids=["exp", "sigmoid", "relu", "add", "sum-empty-axis", "mean-empty-axis", "sum-to-empty",
        "reshape-permute", "amax-to-empty"])
def test_zero_size_static(fn, shape):
    run(Fn(fn), (torch.randn(*shape),))


def test_zero_size_at_run_time_launches_nothing(monkeypatch):
    m = Fn(lambda x: (torch.relu(x) * 2, x.sum(0), x.mean(0), x.sum(1), x.reshape(-1, 2)))
    cm = run(m, (torch.randn(3, 4),), {0: {0: "N"}}, [(torch.randn(5, 4),)])
    spy = Spy(cm, monkeypatch)
    x = torch.randn(0, 4)
    got, want = cm(x), m(x)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, equal_nan=True)   # sum over N=0: zeros; mean: NaN
    assert spy.launches == 2   # only the [4]-shaped reductions over the empty axis run


def test_amax_over_empty_range():
    """eager raises for amax over an empty range: at compile time for literal extents, before any
    launch (ShapeMismatch naming the op and line) for a dim that is 0 at run time."""
    with pytest.raises(dl.ShapeError, match=rf"{HERE}.*torch rejects the program: .*zero-size "
                       r"dimension for reduction operation without identity"):
        dl.compile(Fn(lambda x: x.amax(1)), (torch.randn(3, 0),), dynamic=False, backend="cpu")
    with pytest.raises(dl.ShapeError, match=rf"amax 'amax' at {HERE}.*empty range"):
        dl.compile(Fn(lambda x: x.amax(1)), (torch.randn(3, 0),), dynamic="auto", backend="cpu")
    cm = dl.compile(Fn(lambda x: x.amax(0)), (torch.randn(3, 4),), dynamic={0: {0: "N"}}, backend="cpu")
    with pytest.raises(dl.ShapeMismatch, match=rf"amax 'amax' at {HERE}.*empty range.*N = input 0"):
        cm(torch.randn(0, 4))
    with pytest.raises(IndexError):
        torch.randn(0, 4).amax(0)


# --- 0-d tensors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda x: torch.transpose(x, 0, 0), lambda x: x.transpose(-1, 0), lambda x: x.sum(0),
    lambda x: x.sum(-1), lambda x: torch.mean(x, dim=0), lambda x: x.amax(-1),
    lambda x: x.sum(dim=(), keepdim=True), lambda x: x.flatten(), lambda x: x.reshape(1, 1) + x,
    lambda x: x.permute(()) * 2,
], ids=["transpose00", "transpose-10", "sum0", "sum-1", "mean0", "amax-1", "sum()", "flatten",
        "reshape", "permute()"])
def test_zero_dim_tensor(fn):
    run(Fn(fn), (torch.tensor(1.5),))


def test_zero_dim_invalid_axis():
    with pytest.raises(dl.ShapeError, match=r"torch rejects the program: IndexError: "
                       r"Dimension out of range"):
        dl.compile(Fn(lambda x: x.sum(1)), (torch.tensor(1.0),), backend="cpu", dynamic=False)


# --- keyword defaults spelled out ---------------------------------------------------------------------

@pytest.mark.parametrize("fn", [
    lambda x: F.relu(x), lambda x: F.relu(x, inplace=False), lambda x: torch.relu(input=x),
    lambda x: torch.sum(x, dim=1, keepdim=False, dtype=None), lambda x: torch.add(x, x, alpha=1),
    lambda x: torch.add(x, other=x, alpha=2), lambda x: torch.sub(x, 1.5, alpha=2),
    lambda x: torch.flatten(x, start_dim=0, end_dim=-1), lambda x: x.transpose(dim0=0, dim1=1),
    lambda x: torch.div(x, 2.0, rounding_mode=None), lambda x: torch.amax(x, dim=(), keepdim=False),
    lambda x: x.reshape(shape=(-1,)),
    lambda x: torch.permute(x, dims=(1, 0)), lambda x: x.sum(dim=None),
    lambda x: torch.mean(x, 1, True), lambda x: x.contiguous(memory_format=torch.contiguous_format),
    lambda x: torch.sum(x, 0, dtype=torch.float64), lambda x: x.to(dtype=torch.float64, copy=False),
], ids=["F.relu", "F.relu-inplace=False", "input=", "sum-kw", "alpha1", "alpha2", "sub-alpha",
        "flatten-kw", "transpose-kw", "div-rm", "amax-kw", "reshape-kw", "permute-kw", "sum-None",
        "mean-pos", "contiguous-kw", "sum-dtype", "to-kw"])
def test_keyword_defaults(fn):
    run(Fn(fn), (torch.randn(3, 4),), {0: {0: "N"}}, [(torch.randn(6, 4),)])


def test_unsupported_argument_value_is_named():
    with pytest.raises(dl.UnsupportedOp, match=rf"'div': aten.div.Tensor_mode at {HERE}.*"
                                               r"rounding_mode='floor'\) by a tensor"):
        dl.compile(Fn(lambda x: torch.div(x, x + 1, rounding_mode="floor")), (torch.arange(3),),
                   fallback=False,
                   backend="cpu", dynamic=False)
    with pytest.raises(dl.ShapeError, match=rf"{HERE}.*torch rejects the program: TypeError: "
                       r"sum\(\) received an invalid combination of arguments"):
        dl.compile(Fn(lambda x: x.sum(bogus=1)), (torch.randn(3),), backend="cpu", dynamic=False)


# --- integer and bool dtypes, type promotion ------------------------------------------------------------

INT_PAIRS = [(torch.int64, torch.int64), (torch.int32, torch.int64), (torch.int16, torch.int8),
             (torch.uint8, torch.uint8), (torch.int8, torch.int32)]


@pytest.mark.parametrize("dx,dy", INT_PAIRS, ids=[f"{a}-{b}".replace("torch.", "")
                                                   for a, b in INT_PAIRS])
def test_integer_dtypes(dx, dy):
    g = torch.Generator().manual_seed(0)
    lo = 0 if torch.uint8 in (dx, dy) else -9
    mk = lambda n: (torch.randint(lo, 9, (n, 5), generator=g, dtype=dx),   # noqa: E731
                    torch.randint(lo, 9, (n, 5), generator=g, dtype=dy))
    m = Fn2(int_mix)
    run(m, mk(3), {0: {0: "N"}, 1: {0: "N"}}, [mk(1), mk(7)])


def test_bool_and_logical_ops():
    m = Fn2(lambda x, y: (x & y, x | ~y, torch.logical_not(x), x.sum(0), x.amax(1), x.to(torch.float32)
                          + 1, torch.where(x, 1.0, y.double()), x == y, torch.logical_and(x, y.int())))
    mk = lambda n: (torch.rand(n, 4) > 0.5, torch.rand(n, 4) > 0.3)   # noqa: E731
    run(m, mk(3), {0: {0: "N"}, 1: {0: "N"}}, [mk(8)])


def test_type_promotion():
    """int + float scalar -> default float; a 0-d float64 tensor promotes an int tensor's result to
    float64 but not a float32 tensor's (torch's category rules)."""
    m = Fn2(lambda x, s: (x + 1.5, x + s, x.float() + s, x * True, x.float() / 3))
    x, s = torch.arange(6).reshape(2, 3), torch.tensor(0.25, dtype=torch.float64)
    cm = run(m, (x, s), {0: {0: "N"}}, [(torch.arange(12).reshape(4, 3), s)])
    assert [o.dtype for o in cm(x, s)] == [torch.float32, torch.float64, torch.float32,
                                           torch.int64, torch.float32]


@pytest.mark.parametrize("fn,dtype,match", [
    (lambda x: x.mean(), torch.int64, r"torch rejects the program: .*mean\(\): could not infer "
     r"output dtype"),
    (lambda x: -x, torch.bool, r"torch rejects the program: .*Negation.*on a bool tensor"),
    (lambda x: x - x, torch.bool, r"torch rejects .*Subtraction.*two bool tensors"),
], ids=["mean-int", "neg-bool", "sub-bool"])
def test_dtype_eager_rejects(fn, dtype, match):
    with pytest.raises(dl.DTypeError, match=match):
        dl.compile(Fn(fn), (torch.ones(2, 3, dtype=dtype),), backend="cpu", dynamic=False)
    with pytest.raises((RuntimeError, NotImplementedError)):
        fn(torch.ones(2, 3, dtype=dtype))


def test_unsupported_dtype_names_input_and_op():
    with pytest.raises(dl.UnsupportedOp, match=r"input 'x'.*complex64 unsupported"):
        dl.compile(Fn(torch.relu), (torch.ones(2, dtype=torch.complex64),), backend="cpu", dynamic=False)
    with pytest.raises(dl.UnsupportedOp, match=rf"'to' at {HERE}.*float8_e4m3fn unsupported"):
        dl.compile(Fn(lambda x: x.to(torch.float8_e4m3fn)), (torch.ones(2),), backend="cpu", dynamic=False)


# --- in-place forms ------------------------------------------------------------------------------------

def test_inplace_is_functionalized():
    def f(x):
        y = x * 2
        z = y.contiguous()      # an alias of y
        F.relu(y, inplace=True)
        z.add_(1)                # mutates y too (``z += 1`` traces as an out-of-place add)
        w = z.sub_(0.5).exp_()
        return x + y, w, z
    run(Fn(f), (torch.randn(3, 4),), {0: {0: "N"}}, [(torch.randn(5, 4),)])


def test_inplace_cast_back():
    run(Fn(lambda x: torch.relu_(x.to(torch.int32)).add_(1)), (torch.arange(-3, 3),))
    with pytest.raises(dl.DTypeError, match=r"torch rejects the program: .*Promotion of "
                       r"int.add/sub_\(float\) in in-place ops"):
        dl.compile(Fn(lambda x: x.to(torch.int32).add_(1.5)), (torch.arange(3),), backend="cpu", dynamic=False)


@pytest.mark.parametrize("fn,match", [
    (lambda x: x.relu_(), r"mutates graph input 'x'"),
    (lambda x: (x * 1).view(-1).relu_(), r"'view', a view \(only a write into slices"),
    (lambda x: (lambda t, v: t.relu_() + v)(*(lambda t: (t, t[0]))(x * 1)),
     r"shares storage with a view used after the write"),
])
def test_inplace_refused(fn, match):
    with pytest.raises(dl.UnsupportedOp, match=match) as ei:
        dl.compile(Fn(fn), (torch.randn(2, 3),), backend="cpu", dynamic=False)
    assert re.search(HERE, str(ei.value)), str(ei.value)


# --- invalid axes are compile errors naming op and line ---------------------------------------------------

@pytest.mark.parametrize("fn,match", [
    (lambda x: x.sum(5), r"dim 5 out of range for a rank-2 tensor"),
    (lambda x: x.amax(-3), r"dim -3 out of range"),
    (lambda x: x.transpose(0, 3), r"dim1 3 out of range"),
    (lambda x: x.permute(0, 3), r"dim 3 out of range"),
    (lambda x: x.permute(0, 0), r"repeat an axis"),
    (lambda x: x.permute(0), r"permute needs 2 axes"),
    (lambda x: x.flatten(0, 5), r"end_dim 5 out of range"),
    (lambda x: x.flatten(1, 0), r"start_dim 1 comes after end_dim 0"),
    (lambda x: x.sum((1, 1)), r"dim 1 appears multiple times"),
    (lambda x: x.sum(1.5), r"torch rejects the program: TypeError: sum\(\) received an invalid "
     r"combination of arguments - got \(float\)"),
    (lambda x: x.size(2), r"dim 2 out of range"),
    (lambda x: x.view(x.size(2)), r"dim 2 out of range"),
    (lambda x: x.reshape(-1, -1), r"more than one -1"),
    (lambda x: x.reshape(-2, 6), r"invalid size -2"),
    (lambda x: x.reshape(0, -1), r"cannot derive the -1"),
], ids=["sum5", "amax-3", "transpose03", "permute03", "permute00", "permute-short", "flatten05",
        "flatten10", "sum11", "sum1.5", "size2", "view-size2", "reshape-1-1", "reshape-2",
        "reshape0-1"])
@pytest.mark.parametrize("dynamic", [False, {0: {0: "N"}}], ids=["static", "dynamic"])
def test_invalid_axes(fn, match, dynamic):
    with pytest.raises(dl.ShapeError, match=match) as ei:
        dl.compile(Fn(fn), (torch.randn(2, 6),), dynamic=dynamic, backend="cpu")
    assert re.search(HERE, str(ei.value)), str(ei.value)
    with pytest.raises((RuntimeError, IndexError, TypeError)):
        fn(torch.randn(2, 6))


# --- reshape sizes computed from dims ----------------------------------------------------------------------

def test_reshape_sizes_from_dim_arithmetic():
    m = Fn(lambda x: x.reshape(x.size(0) + 1, -1))        # [N, 6] -> [N + 1, 6N / (N + 1)]
    cm = run(m, (torch.randn(2, 6),), {0: {0: "N"}}, [(torch.randn(5, 6),), (torch.randn(0, 6),)])
    with pytest.raises(dl.ShapeMismatch, match=r"residual constraint.*\(N \+ 1\).*N = input 0 'x'"):
        cm(torch.randn(3, 6))
    m = Fn(lambda x: x.reshape(x.size(0) % 3 + 1, -1))
    run(m, (torch.randn(2, 6),), {0: {0: "N"}}, [(torch.randn(4, 6),), (torch.randn(9, 6),)])
    m = Fn(lambda x: x.reshape(x.shape[0] * 2, x.size(1) // 2))
    run(m, (torch.randn(2, 6),), {0: {0: "N"}}, [(torch.randn(7, 6),)])


def test_dim_as_tensor_value():
    run(Fn(lambda x: x * x.size(1) + x.shape[1]), (torch.randn(2, 6),), {0: {0: "N"}})
    with pytest.raises(dl.UnsupportedOp, match=rf"'mul': aten.mul.Tensor at {HERE}.*dimension N "
                       r"used as a tensor"):
        dl.compile(Fn(lambda x: x * x.size(0)), (torch.randn(2, 6),), dynamic={0: {0: "N"}},
                   backend="cpu", fallback=False)


# --- the example inputs must satisfy the compiled program ------------------------------------------------------

@pytest.mark.parametrize("fn,ins,dynamic,match", [
    (lambda x: x.reshape(x.size(0), -1, 4), (torch.randn(2, 6),), {0: {0: "N"}},
     r"torch rejects the program: .*shape '\[s\d+, -1, 4\]' is invalid for input of size"),
    (lambda x: x.reshape(-1, 3), (torch.randn(2, 5),), {0: {0: "N"}},
     r"torch rejects the program: .*shape '\[-1, 3\]' is invalid for input of size 5\*"),
    (lambda x: x.reshape(-1, 3), (torch.randn(2, 5),), False, r"contradiction.*reshape"),
], ids=["reshape-N-1-4", "reshape-1-3-dynamic", "reshape-1-3-static"])
def test_example_inputs_checked_at_compile(fn, ins, dynamic, match):
    with pytest.raises(dl.ShapeError, match=match) as ei:
        dl.compile(Fn(fn), ins, dynamic=dynamic, backend="cpu")
    msg = str(ei.value)
    assert "_r" not in msg or "_r1 is the -1" in msg, msg
    with pytest.raises(RuntimeError):
        fn(*ins)


def test_same_dim_name_with_different_example_sizes():
    with pytest.raises(dl.ShapeError, match=r"example inputs violate.*input 1 'y' axis 0: size 5"):
        dl.compile(Fn2(lambda x, y: (x.sum(), y.sum())), (torch.randn(3), torch.randn(5)),
                   dynamic={0: {0: "N"}, 1: {0: "N"}}, backend="cpu")


# --- layouts ----------------------------------------------------------------------------------------------------

LAYOUTS = {"coo": lambda t: t.to_sparse(), "csr": lambda t: t.to_sparse_csr(),
           "mkldnn": lambda t: t.to_mkldnn()}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_non_strided_inputs_refused(layout, monkeypatch):
    x = torch.randn(2, 3)
    with pytest.raises(dl.UnsupportedOp, match=r"input 0 'x': layout .* unsupported"):
        dl.compile(Fn(torch.relu), (LAYOUTS[layout](x),), backend="cpu", dynamic=False)
    cm = dl.compile(Fn(torch.relu), (x,), dynamic={0: {0: "N"}}, backend="cpu")
    spy = Spy(cm, monkeypatch)
    with pytest.raises(dl.ArgumentError, match=r"input 0 'x': layout .* unsupported \(strided"):
        cm(LAYOUTS[layout](x))
    spy.assert_untouched()


def test_float_alpha_on_integers():
    run(Fn(lambda x: (torch.add(x, 1.5, alpha=2.5), torch.sub(x.float(), x, alpha=0.5),
                      torch.add(x, x, alpha=3))), (torch.arange(6),))
    with pytest.raises(dl.DTypeError, match=rf"{HERE}.*torch rejects the program: .*alpha "
                       r"argument of type <class 'float'> cannot be safely cast"):
        dl.compile(Fn(lambda x: torch.add(x, x, alpha=2.5)), (torch.arange(6),), dynamic=False,
                   backend="cpu")


@pytest.mark.parametrize("make", [
    lambda: torch.randn(4, 3).t(), lambda: torch.randn(3, 8)[:, ::2],
    lambda: torch.randn(3, 1).expand(3, 4), lambda: torch.randn(5, 4)[1:4],
], ids=["transposed", "strided", "expanded", "offset"])
def test_non_contiguous_inputs(make):
    """The thunk copies non-contiguous inputs (any strides, stride 0, storage offset) first."""
    m = Fn2(lambda x, y: (x * y + 1, x.sum(0), (x > 0).amax(1)))
    x = make()
    run(m, (x, torch.randn(x.shape[-1])), {0: {0: "N"}}, [(make(), torch.randn(x.shape[-1]))])


# --- call-time refusals: one validator (runtime.args), dl errors ------------------------------------

REFUSED = [
    ("dtype", lambda x, y: (x.double(), y), dl.DTypeError,
     r"input 0 'x': dtype torch.float64 != compiled torch.float32"),
    ("numpy", lambda x, y: (x.numpy(), y), dl.ArgumentError,
     r"input 0 'x': expected a torch.Tensor, got numpy.ndarray float32 \[3, 4\]"),
    ("list", lambda x, y: (x, y.tolist()), dl.ArgumentError,
     r"input 1 'y': expected a torch.Tensor, got list of 4 items"),
    ("none", lambda x, y: (None, y), dl.ArgumentError,
     r"input 0 'x': expected a torch.Tensor, got None"),
    ("too-few", lambda x, y: (x,), dl.ArgumentError, r"expected 2 tensor inputs \(x, y\), got 1"),
    ("too-many", lambda x, y: (x, y, y), dl.ArgumentError,
     r"expected 2 tensor inputs \(x, y\), got 3"),
    ("meta", lambda x, y: (x.to("meta"), y), dl.DeviceError,
     r"input 0 'x': on meta, expected cpu \(a meta tensor holds no data\)"),
    ("meta-second", lambda x, y: (x, y.to("meta")), dl.DeviceError,
     r"input 1 'y': on meta, expected cpu \(input 0\)"),
]


@pytest.mark.parametrize("make,exc,match", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_call_refusals_are_dl_errors(make, exc, match, monkeypatch):
    """Each refusal is a ``dl`` error keeping its builtin base, raised before the host program
    or any allocation or launch."""
    cm = dl.compile(Fn2(lambda x, y: x * y), (torch.randn(3, 4), torch.randn(4)),
                    dynamic={0: {0: "N"}}, backend="cpu")
    spy = Spy(cm, monkeypatch)
    x, y = torch.randn(3, 4), torch.randn(4)
    with pytest.raises(exc, match=match) as err:
        cm._thunk(*make(x, y))
    assert isinstance(err.value, dl.DLError)
    assert isinstance(err.value, TypeError if exc in (dl.ArgumentError, dl.DTypeError)
                      else ValueError)
    spy.assert_untouched()


def test_wrong_device_refused():
    """A thunk compiled for one device refuses tensors on another (checked on CPU with a thunk
    that claims the ``cuda`` device: the validator runs before anything touches a device)."""
    from dlcb_lab.runtime.thunks import DynamicAOTThunk

    cm = dl.compile(Fn(torch.relu), (torch.randn(3),), dynamic={0: {0: "N"}}, backend="cpu")
    th = cm._thunk
    other = DynamicAOTThunk(th.host, th.plan, th.launchers, th.in_dtypes, "cuda", th.in_names)
    with pytest.raises(dl.DeviceError, match=r"input 0 'x': on cpu, expected cuda"):
        other(torch.randn(3))


DIRECT_REFUSED = [
    ("dtype", lambda o, x, y: (o, x.double(), y), dl.DTypeError,
     r"in0 \(%x\): dtype float64, the kernel's buffer is float32"),
    ("numpy-dtype", lambda o, x, y: (o, x.double().numpy(), y), dl.DTypeError,
     r"in0 \(%x\): dtype '<f8' \(float64\)"),
    ("list", lambda o, x, y: (o, x.tolist(), y), dl.ArgumentError,
     r"in0 \(%x\): expected a torch CPU tensor or a numpy array, got list of 3 items"),
    ("none", lambda o, x, y: (None, x, y), dl.ArgumentError,
     r"out \(%mul\): expected a torch CPU tensor or a numpy array, got None"),
    ("count", lambda o, x, y: (o, x), dl.ArgumentError, r"takes 3 buffers \(out, in0, in1\)"),
    ("meta", lambda o, x, y: (o, x, y.to("meta")), dl.DeviceError,
     r"in1 \(%y\): on meta, expected cpu"),
    ("read-only", lambda o, x, y: (_readonly(o.numpy()), x, y), dl.LayoutError,
     r"out \(%mul\): read-only"),
    ("int", lambda o, x, y: (o, x, y, 1.5), dl.ArgumentError,
     r"int argument numel: expected an int, got float"),
]


def _readonly(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("make,exc,match", [r[1:] for r in DIRECT_REFUSED],
                         ids=[r[0] for r in DIRECT_REFUSED])
def test_direct_launch_refusals_are_dl_errors(make, exc, match):
    """The same validator behind direct launches (``k[grid, block](out, in0, ..)``)."""
    cm = dl.compile(Fn2(lambda x, y: x * y), (torch.randn(3, 4), torch.randn(4)),
                    dynamic={0: {0: "N"}}, backend="cpu")
    (k,) = cm.pipeline.kernels
    out = torch.full((3, 4), float("nan"))
    with pytest.raises(exc, match=match):
        k[1, 1](*make(out, torch.randn(3, 4), torch.randn(4)))
    assert out.isnan().all()


class ScalarCmp(torch.nn.Module):   # comparisons: the scalar in the tensor's dtype
    def forward(self, h):
        return torch.where(h > 0.3, h, -h * 0.5) + (h >= 0.3) + (h == 0.3) + (h < 0.3)


class ScalarRem(torch.nn.Module):   # remainder takes its scalar in the tensor's dtype as well
    def forward(self, h):
        return torch.remainder(h, 0.7) * 0.7


class ScalarPow(torch.nn.Module):   # so does pow, as exponent and as base
    def forward(self, h):
        return h.abs() ** 0.3 + 0.3 ** h


class ScalarAdd(torch.nn.Module):   # add and mul keep the float (CUDA; CPU eager rounds add's)
    def forward(self, h):
        return (h + 0.3) * 0.3 - 0.7


class ScalarDiv(torch.nn.Module):   # CUDA: times the reciprocal (in float), as eager; CPU divides
    def forward(self, h):
        return h / 0.3 + h / 3 - 0.7 / h


def scalar_16bit_inputs(dtype, device="cpu") -> list[torch.Tensor]:
    """Values at and around 0.3 rounded (0.30078125 in bf16, 0.2998046875 in fp16), and a spread."""
    torch.manual_seed(0)
    near = torch.tensor([0.29, 0.30078125, 0.3, 0.31, 0.2988, 0.2998046875, 0.30005],
                        dtype=dtype).reshape(1, 7)
    return [near.to(device), (torch.randn(2, 4000) * 3).to(dtype).to(device)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mod", [ScalarCmp, ScalarRem, ScalarPow, ScalarDiv])
def test_16bit_op_with_a_scalar_as_eager(mod, dtype):
    """torch takes a Python float in a comparison, remainder or pow with a 16-bit tensor in the
    tensor's dtype, and divides by one in float: DLCB's results equal eager's bit for bit (the
    fuzzer's find: bf16 ``where(h > 0.3, ...)``)."""
    for x in scalar_16bit_inputs(dtype):
        cm = dl.compile(mod(), (x,), dynamic={0: {0: "N"}}, backend="cpu")
        assert torch.equal(cm(x), mod()(x)), mod.__name__


def test_a_minus_one_beside_a_zero_size_is_refused_as_torch_refuses_it():
    """``x.view(N, -1, 7)`` at ``N = 0``: the -1 could be any size, so torch raises; the compiled
    program's host check names the -1 (it computed a size there before: the solver had cancelled
    ``N``), and every other shape runs."""
    class View(torch.nn.Module):
        def forward(self, x):
            return x.view(x.shape[0], -1, 7).sum(-1)

    m = View()
    cm = dl.compile(m, (torch.randn(3, 14),), dynamic={0: {0: "N", 1: "W"}}, backend="cpu")
    x = torch.randn(0, 7)
    with pytest.raises(RuntimeError, match="can be any value"):
        m(x)
    with pytest.raises(dl.ShapeMismatch, match="beside the -1"):
        cm(x)
    for shape in ((1, 7), (2, 21), (2, 0)):   # W = 0 with N = 2: the -1 is 0, as in torch
        x = torch.randn(*shape)
        torch.testing.assert_close(cm(x), m(x))
