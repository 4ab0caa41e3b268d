"""Every op in the registry, compiled alone through its own ``reference`` (the torch call it
declares as its semantics): the bridge must lower that call back to the op, and the compiled
kernel must agree with the reference at several batch sizes."""

from __future__ import annotations

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.ir.ops import OPS

from harness import TOL

# per op kind: (example inputs from a batch size, attributes)
ARGS = {
    "elementwise1": (lambda n: (torch.randn(n, 3, 5),), {}),
    "elementwise2": (lambda n: (torch.randn(n, 3, 5), torch.randn(3, 1) + 2.0), {}),
    "reshape": (lambda n: (torch.randn(n, 3, 4),), {"shape": (-1, 2, 6)}),
    "permute": (lambda n: (torch.randn(n, 3, 4),), {"dims": (2, 0, 1)}),
    "reduce": (lambda n: (torch.randn(n, 3, 4),), {"dims": (0, 2), "keepdim": True}),
}
UNARY = {"relu", "neg", "exp", "sigmoid", "tanh", "abs"}


def _kind(name: str) -> str:
    op = OPS[name]
    if op.kind == "elementwise":
        return "elementwise1" if name in UNARY else "elementwise2"
    return op.kind


class One(torch.nn.Module):
    def __init__(self, name: str, attrs: dict):
        super().__init__()
        self.ref, self.attrs = OPS[name].reference, attrs

    def forward(self, x):
        return self.ref(x, **self.attrs)


class Two(One):
    def forward(self, x, y):
        return self.ref(x, y, **self.attrs)


def test_every_op_has_a_case():
    assert set(OPS) == {n for n in OPS if _kind(n) in ARGS} and UNARY < set(OPS)


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_its_reference(name):
    make, attrs = ARGS[_kind(name)]
    m = (Two if _kind(name) == "elementwise2" else One)(name, attrs)
    cm = dl.compile(m, make(2), dynamic={0: {0: "N"}}, backend="cpu")
    assert [n.op.name for n in cm.pipeline.graph.nodes] == [name]
    for n in (1, 4, 9):
        ins = make(n)
        torch.testing.assert_close(cm(*ins), m(*ins), **TOL)
