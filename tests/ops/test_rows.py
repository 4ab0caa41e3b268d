"""Row-wise normalizations (one kernel each): against eager on awkward rows (infinities, NaN,
empty rows, rows along a middle axis, a permuted input) and the kernel structure itself."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dlcb_lab as dl
from dlcb_lab.kgen.kir import RowAccumulate, StoreAt


class Rows(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(6)

    def forward(self, x):   # x [N, L, 6]
        return (F.softmax(x, -1), F.log_softmax(x, 1), self.ln(x * 2 + 1),
                F.layer_norm(x.permute(0, 2, 1), (x.shape[1],)))


def _check(cm, m, x):
    with torch.no_grad():
        for a, b in zip(cm(x), m(x)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_rows_match_eager_on_awkward_values():
    m = Rows().eval()
    cm = dl.compile(m, (torch.randn(2, 5, 6),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    x = torch.randn(3, 7, 6) * 5
    x[0, 0] = float("-inf")            # a row of -inf: NaN, as eager
    x[0, 1, 2] = float("-inf")         # one -inf: exp gives 0
    x[1, 2, 3] = float("inf")
    x[2, 4, 0] = float("nan")
    _check(cm, m, x)
    _check(cm, m, torch.randn(1, 1, 6))
    _check(cm, m, torch.randn(2, 0, 6))    # no rows / empty rows


def test_one_kernel_per_normalization_reading_the_input_twice():
    m = Rows().eval()
    cm = dl.compile(m, (torch.randn(2, 5, 6),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    steps = cm.pipeline.partition.steps
    assert [s.ops[-1] for s in steps] == ["softmax", "log_softmax", "layer_norm", "layer_norm"]
    for k in cm.pipeline.kernels:
        loops = [s for s in k.body.stmts if type(s).__name__ == "Loop"]
        assert len(loops) == 2   # pass 1 accumulates, pass 2 stores
        assert any(isinstance(s, RowAccumulate) for s in loops[0].body)
        assert any(isinstance(s, StoreAt) for s in loops[1].body)


class RowsOfAxis(nn.Module):
    """Each normalization over the last axis, layer norm with affine operands and a fused
    prologue: the block-per-row kernels, whose rows of up to ``entries.ROW_CACHE * BLOCK``
    elements are read once and kept in registers."""

    def forward(self, x, w, b):
        return (F.softmax(x, -1), F.log_softmax(x, -1),
                F.layer_norm(x * 2 + 1, (x.shape[-1],), w, b))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64],
                         ids=str)
def test_block_rows_on_both_sides_of_the_register_cache(dtype):
    """Rows of 1 to 9000 elements (the cache holds 4096 at 256 threads), few enough rows that
    every call takes the block-per-row variant, with -inf, +inf and NaN in some rows."""
    from dlcb_lab.kgen.entries import BLOCK, ROW_CACHE

    edge = ROW_CACHE * BLOCK
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=dtype, generator=g)   # noqa: E731
    m = RowsOfAxis()
    cm = dl.compile(m, (mk(3, 64), mk(64), mk(64)),
                    dynamic={0: {0: "N", 1: "C"}, 1: {0: "C"}, 2: {0: "C"}}, backend="cuda")
    tol = {torch.float16: 2e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-5)
    for c in (1, 31, 256, 1000, edge - 1, edge, edge + 1, 9000):
        x, w, b = mk(5, c) * 3, mk(c), mk(c)
        x[1, c // 2] = float("-inf")
        x[2, 0] = float("nan")
        x[3, c - 1] = float("inf")
        for got, want in zip(cm(x, w, b), m(x, w, b)):
            torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True,
                                       msg=lambda s: f"row of {c} in {dtype}: {s}")
