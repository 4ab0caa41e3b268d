"""Errors: at graph construction (ShapeError naming op and axes), at compile time (a reshape that
cannot hold, unsupported ops, bad specs) and at run time (ShapeMismatch / TypeError / ValueError
naming the input and axis, raised by the host program BEFORE any output is allocated or kernel
launched); calls bound as ``forward``'s signature (``ArgumentError`` naming the parameter); build
failures (NVRTC, numba module load, an unbuilt kernel) as ``BuildError``."""

from __future__ import annotations

import re

import pytest
import torch

import dlcb_lab as dl

from harness import TOL, Spy


class AddXY(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class Reshape4(torch.nn.Module):
    def forward(self, x, y):   # x [N, 6] (N dynamic), y [6]
        return (x * y).reshape(-1, 4)


class Reshape3(torch.nn.Module):
    def forward(self, x):
        return x.reshape(-1, 3)


def compile_cpu(m, ins, dynamic=False):
    return dl.compile(m, ins, dynamic=dynamic, backend="cpu")


@pytest.fixture(scope="module")
def reshape4():
    return compile_cpu(Reshape4(), (torch.randn(2, 6), torch.randn(6)), {0: {0: "N"}})


@pytest.fixture(scope="module")
def tied():
    """x [N, 4] + y [K, 4], both dynamic: broadcasting ties K to N."""
    return compile_cpu(AddXY(), (torch.randn(3, 4), torch.randn(3, 4)),
                       {0: {0: "N"}, 1: {0: "K"}})


# --- construction / compile time ------------------------------------------------------------------

def test_incompatible_broadcast_names_op_and_axes():
    with pytest.raises(dl.ShapeError) as ei:
        compile_cpu(AddXY(), (torch.randn(2, 3), torch.randn(2, 4)), {0: {0: "N"}, 1: {0: "N"}})
    msg = str(ei.value)   # eager raises too: torch's message, at the user's line
    assert "torch rejects the program" in msg and "dimension 1" in msg, msg
    assert re.search(r"\b3\b", msg) and re.search(r"\b4\b", msg), msg
    assert "x + y" in msg and "test_errors.py" in msg, f"user source line missing: {msg}"


def test_incompatible_broadcast_static():
    with pytest.raises(dl.ShapeError, match=r"test_errors.py:\d+ in forward: return x \+ y: "
                       r"torch rejects the program: .*broadcast"):
        compile_cpu(AddXY(), (torch.randn(5, 3), torch.randn(5, 4)))


def test_reshape_impossible_at_compile_time():
    with pytest.raises(dl.ShapeError) as ei:
        compile_cpu(Reshape3(), (torch.randn(4, 5),))
    msg = str(ei.value)
    assert "reshape" in msg and "20" in msg and "x.reshape(-1, 3)" in msg, msg


def test_reshape_two_holes():
    class M(torch.nn.Module):
        def forward(self, x):
            return x.reshape(-1, -1)

    with pytest.raises(dl.ShapeError, match="torch rejects the program: .*only one dimension can be "
                       "inferred"):
        compile_cpu(M(), (torch.randn(4, 5),))


class LogCumSumExp(torch.nn.Module):
    def forward(self, x):
        return torch.logcumsumexp(x, -1)


class Sort(torch.nn.Module):
    def forward(self, x):
        return torch.sort(x, -1)[0]


class PReLU(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.act = torch.nn.PReLU()

    def forward(self, x):
        return self.act(x)


@pytest.mark.parametrize("mod,node", [(LogCumSumExp, "logcumsumexp"), (Sort, "sort"), (PReLU, "prelu")])
def test_unsupported_op_names_node(mod, node):
    """``fallback=False``: the ATen node without a lowering, by name, at the user's line."""
    with pytest.raises(dl.UnsupportedOp) as ei:
        dl.compile(mod(), (torch.randn(3, 3),), dynamic={0: {0: "N"}}, backend="cpu", fallback=False)
    msg = str(ei.value)
    assert f"'{node}" in msg, msg
    assert "test_errors.py" in msg, f"user source line missing: {msg}"


def test_unsupported_dtype_at_compile():
    with pytest.raises(dl.UnsupportedOp, match=r"input 'x'.*complex64 unsupported"):
        compile_cpu(AddXY(), (torch.ones(2, 3, dtype=torch.complex64),
                              torch.ones(2, 3, dtype=torch.complex64)))


@pytest.mark.parametrize("dynamic,match", [
    ({0: {2: "N"}}, r"input 0 'x': axis 2 is not an axis of rank 2"),
    ({0: {0: "_N"}}, r"input 0 'x' axis 0: dim name '_N' must be an identifier"),
    ({0: {0: "N", -2: "M"}}, r"input 0 'x': axis -2 named twice"),
    ({5: {0: "N"}}, r"dynamic: 5 is not an input \(inputs: 0 'x', 1 'y'\)"),
    ({"z": {0: "N"}}, r"dynamic: 'z' is not an input"),
    ({0: 0}, r"dynamic\[0\] = 0: expected dynamic='auto' \(the default; True is the same\), "
             r"False \(static\), \{input: \{axis: dim name\}\}"),
    ({0: "N"}, r"dynamic\[0\] = 'N': expected"),
    ({0: {0: 5}}, r"dim name 5 must be an identifier"),
    ({0: {"0": "N"}}, r"axis '0' is not an axis"),
    ({0: {0: "N"}, "x": {1: "M"}}, r"input 0 'x' given twice"),
    ([0], r"dynamic=\[0\]: expected"),
])
def test_bad_dynamic_spec(dynamic, match):
    with pytest.raises(dl.SpecError, match=match):
        compile_cpu(AddXY(), (torch.randn(2, 3), torch.randn(2, 3)), dynamic)


def test_dynamic_spec_by_input_name():
    cm = compile_cpu(AddXY(), (torch.randn(2, 3), torch.randn(2, 3)),
                     {"x": {0: "N"}, "y": {-2: "N"}})
    assert cm.stats()["thunk"] == "dynamic"
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    torch.testing.assert_close(cm(x, y), x + y)


def test_bad_backend_and_arity():
    with pytest.raises(dl.SpecError, match="backend"):
        dl.compile(AddXY(), (torch.randn(2, 3), torch.randn(2, 3)), backend="tpu")
    with pytest.raises(dl.SpecError, match=r"the example call does not bind to AddXY.forward: "
                                           r"missing required argument\(s\) 'y'"):
        compile_cpu(AddXY(), (torch.randn(2, 3),))


# --- run time: validated before anything runs -----------------------------------------------------

def test_valid_call_goes_through(reshape4, monkeypatch):
    spy = Spy(reshape4, monkeypatch)
    x, y = torch.randn(4, 6), torch.randn(6)
    torch.testing.assert_close(reshape4(x, y), Reshape4()(x, y))
    assert spy.launches == 1 and spy.allocs == 1 and spy.thunk.calls == spy.calls0 + 1


@pytest.mark.parametrize("args,exc,match", [
    (lambda: (torch.randn(2, 7), torch.randn(6)), dl.ShapeMismatch,
     r"input 0 'x' axis 1: size 7 != 6.*static axis"),
    (lambda: (torch.randn(2, 6), torch.randn(5)), dl.ShapeMismatch,
     r"input 1 'y' axis 0: size 5 != 6"),
    (lambda: (torch.randn(2, 6), torch.randn(6, device="meta")), ValueError,
     r"input 1 'y': on meta, expected cpu \(input 0\)"),
    (lambda: (torch.randn(2, 6),), TypeError,
     r"missing required argument\(s\) 'y' \(compiled for \(x, y\)\)"),
    (lambda: (torch.randn(2, 6), torch.randn(6), torch.randn(6)), TypeError,
     r"takes at most 2 positional argument\(s\) \(x, y\), got 3"),
    (lambda: ([[0.0] * 6] * 2, torch.randn(6)), TypeError,
     r"input 0 'x': expected a torch.Tensor, got list"),
])
def test_runtime_errors_before_launch(reshape4, monkeypatch, args, exc, match):
    spy = Spy(reshape4, monkeypatch)
    with pytest.raises(exc, match=match):
        reshape4(*args())
    spy.assert_untouched()


@pytest.mark.parametrize("args", [
    lambda: (torch.randn(2, 6, 1), torch.randn(6)),
    lambda: (torch.randn(2, 6), torch.randn(1, 6)),
], ids=["x-rank3", "y-rank2"])
def test_new_rank_is_compiled_on_first_use(args):
    """A call of another rank (same dtypes) is no ShapeMismatch: it is compiled once (a JIT thunk)
    and computes eager's result; a second call of that rank compiles nothing."""
    cm = compile_cpu(Reshape4(), (torch.randn(2, 6), torch.randn(6)), {0: {0: "N"}})
    ins = args()
    torch.testing.assert_close(cm(*ins), Reshape4()(*ins))
    assert len(cm.jit) == 1 and cm.stats()["jit_builds"] == 1
    compiles = cm.stats()["compiles"]
    torch.testing.assert_close(cm(*ins), Reshape4()(*ins))
    assert cm.stats()["compiles"] == compiles and len(cm.jit) == 1
    x = ins[0].double()   # another rank and dtype: one more signature, compiled on first use
    torch.testing.assert_close(cm(x, ins[1]), Reshape4()(x, ins[1]))
    assert len(cm.jit) == 2


def test_shape_mismatch_is_a_value_error():
    assert issubclass(dl.ShapeMismatch, ValueError)


def test_residual_constraint(reshape4, monkeypatch):
    """[N, 6] -> (-1, 4) needs 6N % 4 == 0: a residual constraint the host checks."""
    p = reshape4.pipeline
    assert len(p.residuals) == 1
    assert p.dims.counts()["residual"] >= 1
    torch.testing.assert_close(reshape4(torch.ones(2, 6), torch.ones(6)), torch.ones(3, 4))
    spy = Spy(reshape4, monkeypatch)
    with pytest.raises(dl.ShapeMismatch) as ei:
        reshape4(torch.randn(3, 6), torch.randn(6))
    spy.assert_untouched()
    msg = str(ei.value)
    assert "residual constraint" in msg and "% 2" in msg and "N" in msg, msg
    assert "reshape" in msg and "test_errors.py" in msg, msg
    assert reshape4(torch.randn(6, 6), torch.randn(6)).shape == (9, 4)


def test_tied_dynamic_dims(tied, monkeypatch):
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    torch.testing.assert_close(tied(x, y), x + y)
    (x0,), (y0,) = ([r.expr for r in tied.pipeline.dims.of(v) if r.axis == 0] for v in "xy")
    assert x0 is y0 and repr(x0) in {"N", "K"}, (x0, y0)   # export ties K and N: one dim
    spy = Spy(tied, monkeypatch)
    with pytest.raises(dl.ShapeMismatch) as ei:
        tied(torch.randn(3, 4), torch.randn(5, 4))
    spy.assert_untouched()
    msg = str(ei.value)
    assert re.search(rf"input 1 'y' axis 0: size 5 != {x0!r} = 3", msg), msg


class Braces(torch.nn.Module):
    def forward(self, x, y):
        return (x * {"s": y}["s"]).reshape(-1, 4)


def test_braces_in_user_source_line():
    """Messages quote the user's source line; braces in it must not break the message template."""
    cm = compile_cpu(Braces(), (torch.randn(2, 6), torch.randn(6)), {0: {0: "N"}})
    with pytest.raises(dl.ShapeMismatch) as ei:
        cm(torch.randn(3, 6), torch.randn(6))
    assert 'return (x * {"s": y}["s"]).reshape(-1, 4)' in str(ei.value)
    # the same through the interpreter and for a refusal torch raises during capture
    with pytest.raises(dl.ShapeMismatch, match="residual constraint"):
        cm.pipeline.host_program.interpret([(3, 6), (6,)])
    with pytest.raises(dl.ShapeError, match=r'in forward: return \(x \* \{"s": y\}\["s"\]\)'
                       r"\.reshape\(-1, 4\): torch rejects the program"):
        compile_cpu(Braces(), (torch.randn(1, 6), torch.randn(6)))


def test_static_thunk_rejects_before_launch(monkeypatch):
    cm = compile_cpu(AddXY(), (torch.randn(2, 4), torch.randn(2, 4)))
    assert cm.stats()["thunk"] == "static"
    spy = Spy(cm, monkeypatch)
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 'x' axis 0: size 3 != 2"):
        cm(torch.randn(3, 4), torch.randn(2, 4))
    with pytest.raises(dl.ShapeMismatch, match=r"input 1 'y' axis 1: size 5 != 4"):
        cm(torch.randn(2, 4), torch.randn(2, 5))
    spy.assert_untouched()


def test_another_dtype_is_compiled_on_first_use():
    """A dtype the compile did not see, which eager accepts, is served by a module of its own
    (compiled once, counted in ``stats()``); one eager rejects is refused with what differs."""
    cm = compile_cpu(AddXY(), (torch.randn(2, 4), torch.randn(2, 4)))
    x, y = torch.randn(2, 4), torch.ones(2, 4, dtype=torch.int64)
    for _ in range(2):
        torch.testing.assert_close(cm(x, y), x + y)
    s = cm.stats()
    assert s["dtype_builds"] == 1 and s["compiles"] == 2 and s["jit_builds"] == 0

    class Sub(torch.nn.Module):
        def forward(self, x, y):
            return x - y

    cm = compile_cpu(Sub(), (x, x))
    with pytest.raises(dl.DTypeError, match=r"input 0 'x' is rank 2 bool, compiled for rank 2 "
                                            r"float32; input 1 'y' is rank 2 bool, .*; compiling "
                                            r"for it failed: .*two bool tensors"):
        cm(x > 0, x < 0)
    with pytest.raises(dl.DTypeError):   # refused again, not compiled again
        cm(x > 0, x < 0)
    assert cm.stats()["compiles"] == 1


# --- errors that must point at the right place ------------------------------------------------------

def test_torchvision_errors_point_at_torchvision_source():
    """A model from torchvision: the error names torchvision's line, not dlcb_lab's or torch's."""
    pytest.importorskip("torchvision")
    from torchvision.models.video import r3d_18

    with pytest.raises(dl.UnsupportedOp) as ei:
        dl.compile(r3d_18().eval(), (torch.randn(1, 3, 4, 32, 32),), backend="cpu",
                   fallback=False)
    msg = str(ei.value)
    assert "resnet.py:" in msg and "self.stem(x)" in msg and "self.conv1(x)" in msg, msg
    assert "api.py" not in msg and "aten.py" not in msg and "conv.py" not in msg, msg
    assert "'conv3d': aten.conv3d.default at resnet.py:" in msg, msg


class Many(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(3, 3, 1)
        self.lin = torch.nn.PReLU()

    def forward(self, x):
        return torch.logcumsumexp(self.lin(self.conv(x)), -1).relu()


def test_unsupported_lists_every_node():
    """``fallback=False``: one error lists every ATen node without a lowering, with its line."""
    with pytest.raises(dl.UnsupportedOp) as ei:
        dl.compile(Many(), (torch.randn(1, 3, 2, 4, 4),), backend="cpu", fallback=False)
    msg = str(ei.value)
    assert msg.startswith("3 ATen nodes not supported by DLCB IR"), msg
    for part in ("'conv3d': aten.conv3d.default at test_errors.py:",
                 "'prelu': aten.prelu.default at test_errors.py:",
                 "'logcumsumexp': aten.logcumsumexp.default at test_errors.py:", "self.lin(self.conv(x))"):
        assert part in msg, (part, msg)
    assert msg.count("test_errors.py:") == 3, msg


def test_unsupported_ops_fall_back_to_eager():
    """By default the same program compiles: the three ops run in PyTorch at their place in the
    launch plan, the relu is generated, and the result matches eager at a new batch size."""
    m = Many()
    cm = dl.compile(m, (torch.randn(2, 3, 2, 4, 4),), dynamic={0: {0: "N"}}, backend="cpu")
    eager = [n.attrs["target"] for n in cm.pipeline.graph.nodes
             if n.op.name == "eager"]
    assert sorted(eager) == ["aten.conv3d.default", "aten.logcumsumexp.default",
                             "aten.prelu.default"], eager
    x = torch.randn(5, 3, 2, 4, 4)
    torch.testing.assert_close(cm(x), m(x), **TOL)


class Pin(torch.nn.Module):
    def forward(self, x):
        return x.reshape(8, 16)


def test_dynamic_dim_pinned_to_literal():
    with pytest.raises(dl.ShapeError) as ei:
        compile_cpu(Pin(), (torch.randn(8, 16),), {0: {0: "N"}})
    msg = str(ei.value)
    assert "dim N (input 0 'x' axis 0) is declared dynamic but the program fixes it to 8" in msg
    assert "reshape 'reshape'" in msg and "x.reshape(8, 16)" in msg and "test_errors.py" in msg
    with pytest.warns(UserWarning, match="fixes it to 8"):
        cm = dl.compile(Pin(), (torch.randn(8, 16),), dynamic={0: {0: "N"}}, backend="cpu", strict=False)
    assert cm.stats()["thunk"] == "static"
    with pytest.raises(dl.ShapeMismatch):
        cm(torch.randn(4, 16))


def test_residual_message_in_user_dims(reshape4):
    with pytest.raises(dl.ShapeMismatch) as ei:
        reshape4(torch.randn(3, 6), torch.randn(6))
    msg = str(ei.value)
    assert "_r" not in msg.split(" from ")[0], msg       # the checked expression: user dims only
    assert "N = input 0 'x' axis 0" in msg, msg


# --- calls bound as forward's signature -------------------------------------------------------------

class Scaled(torch.nn.Module):
    def forward(self, x, y, scale=None, *, bias=None):
        return x * y * scale + bias


@pytest.fixture(scope="module")
def scaled():
    return dl.compile(Scaled(), (torch.randn(2, 3), torch.randn(3), torch.randn(3)),
                      {"bias": torch.randn(3)}, dynamic={0: {0: "N"}}, backend="cpu")


def test_keyword_calls_bind_like_forward(scaled):
    x, y, s, b = torch.randn(4, 3), torch.randn(3), torch.randn(3), torch.randn(3)
    want = Scaled()(x, y, s, bias=b)
    assert repr(scaled.signature) == "(x, y, scale=None, *, bias=None)"
    for args, kwargs in [((x, y, s), {"bias": b}), ((x,), {"y": y, "scale": s, "bias": b}),
                         ((), {"bias": b, "scale": s, "y": y, "x": x})]:
        torch.testing.assert_close(scaled(*args, **kwargs), want)


@pytest.mark.parametrize("call,match", [
    (lambda x, y, s, b: ((x, y, s), {"bias": b, "z": b}),
     r"unexpected keyword argument 'z' \(parameters: x, y, scale, bias\) \(compiled for "
     r"\(x, y, scale=None, \*, bias=None\)\)"),
    (lambda x, y, s, b: ((x, y, s), {"y": y, "bias": b}),
     r"argument 'y' given twice \(by position and keyword\)"),
    (lambda x, y, s, b: ((x, y, s, b), {}),
     r"takes at most 3 positional argument\(s\) \(x, y, scale\), got 4"),
    (lambda x, y, s, b: ((x,), {"bias": b}), r"missing required argument\(s\) 'y'"),
    (lambda x, y, s, b: ((x, y), {"bias": b}),
     r"missing input\(s\) 'scale': traced with an example tensor each"),
    (lambda x, y, s, b: ((x, y, s), {}), r"missing input\(s\) 'bias'"),
])
def test_bad_calls_name_the_parameter(scaled, monkeypatch, call, match):
    spy = Spy(scaled, monkeypatch)
    args, kwargs = call(torch.randn(4, 3), torch.randn(3), torch.randn(3), torch.randn(3))
    with pytest.raises(dl.ArgumentError, match=match) as ei:
        scaled(*args, **kwargs)
    assert isinstance(ei.value, TypeError) and isinstance(ei.value, dl.DLError)
    spy.assert_untouched()


def test_positional_only_forward():
    class P(torch.nn.Module):
        def forward(self, x, y, /):
            return x - y

    cm = compile_cpu(P(), (torch.randn(3), torch.randn(3)))
    assert repr(cm.signature) == "(x, y, /)"
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(cm(x, y), x - y)
    with pytest.raises(dl.ArgumentError, match=r"argument 'y' is positional-only"):
        cm(x, y=y)


def test_var_positional_forward():
    """``forward(*xs)`` and ``forward(a, *xs)``: one input per example, named as export names them
    (``xs_0``, ``xs_1``...), dynamic by position or by that name (the fuzzer's first find: three
    examples gave two inputs, ``input1`` and ``input2``)."""
    class Star(torch.nn.Module):
        def forward(self, *xs):
            return xs[0] + xs[1] * xs[2]

    class Head(torch.nn.Module):
        def forward(self, a, *xs):
            return a - xs[0] * xs[1]

    xs = [torch.randn(3, 4) for _ in range(3)]
    for m, sig, dyn in [
            (Star(), "(xs_0, xs_1, xs_2, /)", {0: {0: "N"}, 1: {0: "N"}, "xs_2": {0: "N"}}),
            (Head(), "(a, xs_0, xs_1, /)", {"a": {0: "N"}, 1: {0: "N"}, 2: {0: "N"}})]:
        cm = dl.compile(m, xs, dynamic=dyn, backend="cpu")
        assert repr(cm.signature) == sig
        ys = [torch.randn(5, 4) for _ in range(3)]
        torch.testing.assert_close(cm(*ys), m(*ys))


def test_signature_survives_pickling(scaled):
    import pickle

    cm = pickle.loads(pickle.dumps(scaled))
    assert cm.signature == scaled.signature
    x, y, s, b = torch.randn(5, 3), torch.randn(3), torch.randn(3), torch.randn(3)
    torch.testing.assert_close(cm(bias=b, x=x, scale=s, y=y), Scaled()(x, y, s, bias=b))
    with pytest.raises(dl.ArgumentError, match=r"unexpected keyword argument 'w'"):
        cm(x, y, s, bias=b, w=b)


# --- build failures are dl errors too ---------------------------------------------------------------

def test_nvrtc_compile_error_is_a_build_error():
    import pickle

    from dlcb_lab.runtime.nvrtc import CudaCompileError, compile_cubin

    src = 'extern "C" __global__ void k(float* y) {\n  y[0] = undeclared_name;\n}\n'
    with pytest.raises(dl.BuildError) as ei:
        compile_cubin(src, arch="sm_90")
    err = ei.value
    assert isinstance(err, CudaCompileError) and isinstance(err, dl.DLError)
    assert isinstance(err, RuntimeError)   # ``except RuntimeError`` keeps working
    assert "undeclared_name" in err.log and ">    2 |   y[0] = undeclared_name;" in str(err)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is CudaCompileError and back.log == err.log and str(back) == str(err)


def test_nvrtc_call_failure_and_bad_arch_are_dl_errors():
    from cuda.bindings import nvrtc as nv

    from dlcb_lab.runtime import nvrtc

    with pytest.raises(dl.BuildError, match="NVRTC call failed: NVRTC_ERROR_INVALID_INPUT"):
        nvrtc._check((nv.nvrtcResult.NVRTC_ERROR_INVALID_INPUT,))
    with pytest.raises(dl.SpecError, match="real architecture"):
        nvrtc.compile_cubin("", arch="compute_90")


def test_numba_load_error_is_a_build_error(tmp_path, monkeypatch):
    import pickle

    from dlcb_lab.runtime.numba_cpu import NumbaModuleLoadError, load_numba_module

    monkeypatch.setenv("DLCB_CACHE_DIR", str(tmp_path))
    with pytest.raises(dl.BuildError) as ei:
        load_numba_module("# dlcb_lab tests/api/test_errors.py\nraise ValueError('broken module')\n")
    err = ei.value
    assert isinstance(err, NumbaModuleLoadError) and isinstance(err, RuntimeError)
    assert "broken module" in str(err) and err.path.parent == tmp_path / "numba"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is NumbaModuleLoadError and back.path == err.path and str(back) == str(err)


def test_unbuilt_kernel_launch_is_a_build_error(reshape4):
    from dataclasses import replace

    k = replace(reshape4.pipeline.kernels[0], launcher=None)
    with pytest.raises(dl.BuildError, match=rf"kernel {k.name} is not built"):
        k.check(torch.empty(3, 4), torch.randn(2, 6), torch.randn(6))
