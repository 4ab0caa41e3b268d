"""Structural properties of a compile: repeated compiles neither leak interned expressions nor
rename internal variables; user dim names never reach generated code; a compiled module pickles;
each kernel's ``cuda_source`` compiles alone; the 32-bit index entry point is chosen per kernel
from the bound of every index expression it evaluates, not from buffer sizes."""

from __future__ import annotations

import gc
import pickle

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.dims import expr as dims_expr
from dlcb_lab.kgen.emit import cuda_module
from dlcb_lab.runtime.launchers import NARROW_LIMIT
from dlcb_lab.runtime.nvrtc import compile_cubin

from harness import TOL


class Worked(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x * y).reshape(-1, 24).sum(1, keepdim=True) + x.reshape(x.size(0), -1)


def _worked(backend="cpu", name="N"):
    return dl.compile(Worked(), (torch.randn(2, 4, 6), torch.randn(1, 4, 1)),
                      dynamic={0: {0: name}}, backend=backend)


def test_repeated_compiles_do_not_leak_or_rename():
    first = repr(_worked().pipeline.solver_trace)
    gc.collect()
    before = len(dims_expr._TABLE)
    for _ in range(20):
        cm = _worked()
        assert repr(cm.pipeline.solver_trace) == first   # same names (_r1...), same steps
        del cm
    gc.collect()
    assert len(dims_expr._TABLE) <= before + 5, (before, len(dims_expr._TABLE))


HOSTILE = ["np", "prange", "range", "for", "None", "lambda", "in_x", "in0", "I", "int", "float",
           "auto", "class", "threadIdx", "blockDim", "INFINITY", "NAN", "out", "numel", "t",
           "step", "c0", "l0", "p0", "math", "ñ"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_dim_names(name):
    cm = _worked(name=name)
    x, y = torch.randn(5, 4, 6), torch.randn(1, 4, 1)
    torch.testing.assert_close(cm(x, y), Worked()(x, y), **TOL)
    src = cuda_module([k.body for k in cm.pipeline.kernels])
    compile_cubin(src, arch="sm_90")   # NVRTC accepts it
    assert repr(cm.pipeline.dims.of("x")[0].expr) == name   # renderings keep the user's name


def test_each_kernel_cuda_source_compiles_alone():
    cm = dl.compile(Worked(), (torch.randn(2, 4, 6), torch.randn(1, 4, 1)), {0: {0: "N"}},
                    backend="cpu")
    assert len(cm.pipeline.kernels) == 2
    for k in cm.pipeline.kernels:
        assert compile_cubin(k.cuda_source, arch="sm_90")[:4] == b"\x7fELF"


def test_compiled_module_pickles():
    cm = _worked()
    cm2 = pickle.loads(pickle.dumps(cm))
    x, y = torch.randn(7, 4, 6), torch.randn(1, 4, 1)
    torch.testing.assert_close(cm2(x, y), cm(x, y))
    assert repr(cm2.pipeline.graph) == repr(cm.pipeline.graph)
    assert cm2.stats()["thunk"] == "dynamic"
    g = pickle.loads(pickle.dumps(cm.pipeline.graph))
    assert [n.op for n in g.nodes] == [n.op for n in cm.pipeline.graph.nodes]   # ops by name


class Overflow(torch.nn.Module):
    """A fused intermediate of 43692 * 49152 > 2**31 elements, never materialized."""

    def forward(self, x, y):
        return (x + y).reshape(-1, 65536).sum(1), x * 2


def test_index_width_from_index_bounds_per_kernel():
    """The reduction indexes a 2.1e9-element fused intermediate: its bound exceeds int32 although
    every buffer fits; the elementwise kernel beside it stays 32-bit."""
    cm = dl.compile(Overflow(), (torch.randn(4, 1, dtype=torch.float64),
                                 torch.randn(1, 65536, dtype=torch.float64)),
                    {0: {0: "N"}, 1: {1: "M"}}, backend="cpu")
    host = cm.pipeline.host_program
    r = host.interpret([(43692, 1), (1, 49152)])
    red, ew = cm.pipeline.kernels
    assert r[host.slots[f"{red.name}.numel"]] < NARROW_LIMIT   # buffers fit in int32
    assert r[host.slots[f"{red.name}.index_bound"]] >= 43692 * 49152 - 1 > NARROW_LIMIT
    assert r[host.slots[f"{ew.name}.index_bound"]] < NARROW_LIMIT
    small = host.interpret([(8, 1), (1, 8192)])
    assert small[host.slots[f"{red.name}.index_bound"]] < NARROW_LIMIT


def test_index_bound_is_tight_for_identity_layouts():
    """The bound follows the values (``200704*(t // 200704) <= numel``), not the worst case of each
    factor: a 25.7M-element broadcast kernel keeps the 32-bit entry point."""
    from dlcb_lab.bench.bandwidth import BiasReLU

    x, s = torch.randn(2, 64, 56, 56), torch.randn(1, 64, 1, 1)
    cm = dl.compile(BiasReLU(), (x, s, s), {0: {0: "N"}}, backend="cpu")
    host, (k,) = cm.pipeline.host_program, cm.pipeline.kernels
    r = host.interpret([(128, 64, 56, 56), (1, 64, 1, 1), (1, 64, 1, 1)])
    numel = r[host.slots[f"{k.name}.numel"]]
    assert numel <= r[host.slots[f"{k.name}.index_bound"]] <= numel + 2 ** 20
