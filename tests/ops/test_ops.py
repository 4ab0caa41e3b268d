"""Every op in the registry, compiled alone through its own ``reference`` (the torch call it
declares as its semantics): the bridge must lower that call back to the op, and the compiled
kernel must agree with the reference at several batch sizes. Inputs and attributes come from the
op's ``sample`` or, without one, from its kind and arity, so a new op needs no new case here."""

from __future__ import annotations

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.ir.ops import OPS, OpKind

from harness import TOL


def _operands(name: str, n: int) -> tuple:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 3, 5, generator=g)
    op = OPS[name]
    if op.kind is not OpKind.ELEMENTWISE or op.arity == 1:
        return (x,)
    y = torch.randn(3, 1, generator=g) + 2.0
    return (x, y) if op.arity == 2 else (x > 0, x, y)


ATTRS = {"reshape": {"shape": (-1, 5, 3)}, "permute": {"dims": (2, 0, 1)},
         "to": {"dtype": torch.float64}, OpKind.REDUCE: {"dims": (0, 2), "keepdim": True}}


class Call(torch.nn.Module):
    def __init__(self, name: str):
        super().__init__()
        op = OPS[name]
        self.ref, self.attrs = op.reference, ATTRS.get(name, ATTRS.get(op.kind, {}))

    def forward(self, x):
        return self.ref(x, **self.attrs)


class Call2(Call):
    def forward(self, x, y):
        return self.ref(x, y, **self.attrs)


class Call3(Call):
    def forward(self, c, x, y):
        return self.ref(c, x, y, **self.attrs)


class Sampled(torch.nn.Module):
    """``op.reference`` on the sample's tensors, its scalars and attributes baked in."""

    def __init__(self, name: str):
        super().__init__()
        args, self.attrs = OPS[name].sample(2)
        self.ref = OPS[name].reference
        self.slots = [isinstance(a, torch.Tensor) for a in args]
        self.scalars = [a for a in args if not isinstance(a, torch.Tensor)]

    def call(self, tensors):
        it, sc = iter(tensors), iter(self.scalars)
        return self.ref(*[next(it) if s else next(sc) for s in self.slots], **self.attrs)


class Sampled1(Sampled):
    def forward(self, a):
        return self.call((a,))


class Sampled2(Sampled):
    def forward(self, a, b):
        return self.call((a, b))


class Sampled3(Sampled):
    def forward(self, a, b, c):
        return self.call((a, b, c))


def _sampled(name: str, n: int) -> tuple:
    return tuple(a for a in OPS[name].sample(n)[0] if isinstance(a, torch.Tensor))


def _case(name: str):
    """(module, operands at batch size n, dynamic spec)."""
    if OPS[name].sample is None:
        m = (Call, Call2, Call3)[len(_operands(name, 1)) - 1](name)
        ins = _operands(name, 2)
        return m, lambda n: _operands(name, n), {i: {0: "N"} for i, t in enumerate(ins)
                                                 if t.dim() == 3}
    a, b = _sampled(name, 2), _sampled(name, 3)
    dyn = {i: {k: "N" for k in range(x.dim()) if x.shape[k] != y.shape[k]}
           for i, (x, y) in enumerate(zip(a, b))}
    m = (Sampled1, Sampled2, Sampled3)[len(a) - 1](name)
    return m, lambda n: _sampled(name, n), {i: d for i, d in dyn.items() if d}


LAYOUTS = {"conv2d": "NHWC", "sdpa": "NLHD"}   # passes.channels_last, rewrite's sdpa_heads_inner


@pytest.mark.parametrize("name", sorted(set(OPS) - {"eager"}))
def test_op_matches_its_reference(name):
    """``eager`` is excluded: it is the fallback for ATen nodes without a lowering, so no torch
    call lowers to it (its reference replays a recorded ATen call)."""
    m, operands, dyn = _case(name)
    cm = dl.compile(m, operands(2), dynamic=dyn, backend="cpu")
    nodes = cm.pipeline.graph.nodes
    if name in LAYOUTS:   # the op in its library's layout, between permutes (a pool alone
        #                  stays NCHW: it runs NHWC only beside convolutions)
        assert all(n.op.name == "permute" for n in nodes if n.op.name != name)
        nodes = [n for n in nodes if n.op.name == name]
        assert [n.attrs["layout"] for n in nodes] == [LAYOUTS[name]]
    assert [n.op.name for n in nodes] == [name]
    for n in (1, 4, 9):
        ins = operands(n)
        got, want = cm(*ins), m(*ins)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, **TOL)
