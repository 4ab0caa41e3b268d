"""Index ops (paper §4.3): coordinates read from an index tensor. Compared with eager at several
shapes; out-of-range indices are refused by the host before the reading kernel launches."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import dlcb_lab as dl
from dlcb_lab.kgen.emit import cuda_module
from dlcb_lab.kgen.infer import infer_kernels
from dlcb_lab.runtime.nvrtc import compile_cubin


class Mix(nn.Module):
    """embedding, index_select on a computed index, gather along a middle axis."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, tok, x, idx):   # tok [N, L] int64, x [N, 6, 4], idx [N, 3, 4] int64
        e = self.emb(tok)                                   # [N, L, 4]
        s = x.index_select(1, (idx[0, :, 0] + 1).clamp(max=5))   # [N, 3, 4]
        return e.sum(1, keepdim=True) + torch.gather(x, 1, idx) * s


def _inputs(n, L, g):
    return (torch.randint(0, 10, (n, L), generator=g), torch.randn(n, 6, 4, generator=g),
            torch.randint(0, 6, (n, 3, 4), generator=g))


def test_index_ops_match_eager():
    m, g = Mix().eval(), torch.Generator().manual_seed(0)
    cm = dl.compile(m, _inputs(2, 5, g), dynamic={0: {0: "N", 1: "L"}, 1: {0: "N"}, 2: {0: "N"}},
                    backend="cpu")
    for n, L in ((1, 5), (3, 2), (4, 9)):
        ins = _inputs(n, L, g)
        with torch.no_grad():
            torch.testing.assert_close(cm(*ins), m(*ins))
    assert is_cubin(compile_cubin(cuda_module(infer_kernels(cm.pipeline.graph, True)),
                                  arch="sm_90"))


def is_cubin(b: bytes) -> bool:
    return b[:4] == b"\x7fELF"


@pytest.mark.parametrize("bad", [10, -1])
def test_out_of_range_index_refused_before_launch(bad):
    m, g = Mix().eval(), torch.Generator().manual_seed(1)
    cm = dl.compile(m, _inputs(2, 5, g), dynamic={0: {0: "N", 1: "L"}, 1: {0: "N"}, 2: {0: "N"}},
                    backend="cpu")
    tok, x, idx = _inputs(2, 5, g)
    tok[1, 3] = bad
    with pytest.raises(dl.ShapeMismatch, match=r"index tensor 'tok'.*outside \[0, 10\)"):
        cm(tok, x, idx)
    idx[0, 1, 2] = 6
    with pytest.raises(dl.ShapeMismatch, match=r"outside \[0, 6\)"):
        cm(_inputs(2, 5, g)[0], x, idx)


class ConstIndex(nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.register_buffer("idx", idx)

    def forward(self, x):
        return x.index_select(1, self.idx) * 2


def test_constant_index_checked_at_compile_time():
    x = torch.randn(2, 4)
    cm = dl.compile(ConstIndex(torch.tensor([3, 0, 3])), (x,), dynamic={0: {0: "N"}},
                    backend="cpu")
    torch.testing.assert_close(cm(torch.randn(5, 4)).shape, torch.Size([5, 3]))
    assert not any(s.index_checks for s in cm.pipeline.launch_plan.kernels)
    with pytest.raises(dl.ShapeError, match=r"values outside \[0, 4\)"):
        dl.compile(ConstIndex(torch.tensor([4])), (x,), dynamic={0: {0: "N"}}, backend="cpu")


class _SelectSum(ConstIndex):
    def forward(self, x):
        return x.index_select(1, self.idx).sum(0)


@pytest.mark.parametrize("m", [ConstIndex(torch.tensor([3, 0])), _SelectSum(torch.tensor([3, 0]))],
                         ids=["empty output", "reduction over nothing"])
def test_index_read_by_no_element_still_checked(m):
    """Eager checks every index whatever the output's size: a value of no elements (no kernel)
    and a reduction over none (a kernel that never reaches the read) are refused too."""
    cm = dl.compile(m, (torch.randn(2, 4),), dynamic={0: {0: "N", 1: "M"}}, backend="cpu")
    torch.testing.assert_close(cm(torch.randn(0, 4)), m(torch.randn(0, 4)))
    with pytest.raises(RuntimeError, match="out of DATA bounds"):
        m(torch.randn(0, 3))
    with pytest.raises(dl.ShapeMismatch, match=r"index tensor 'idx'.*outside \[0, 3\)"):
        cm(torch.randn(0, 3))


def test_index_dtype_refused():
    with pytest.raises(dl.DTypeError, match=r"torch rejects the program: .*Expected dtype "
                       r"int32/int64 for index, but got torch.int16"):
        dl.compile(_Gather(), (torch.randn(2, 4), torch.zeros(2, 4, dtype=torch.int16)),
                   backend="cpu", dynamic=False)


def test_tensor_remainder_follows_the_divisor_sign():
    """``x % 3`` is ``aten.remainder`` (it was refused under torch.fx): torch's sign convention,
    a dynamic batch, against eager."""
    class Rem(nn.Module):
        def forward(self, x):
            return x % 3, x % -2.5

    m = Rem()
    cm = dl.compile(m, (torch.randn(2, 4),), dynamic={0: {0: "N"}}, backend="cpu", fallback=False)
    x = torch.randn(5, 4) * 10
    for got, want in zip(cm(x), m(x)):
        torch.testing.assert_close(got, want)


class _Gather(nn.Module):
    def forward(self, x, i):
        return torch.gather(x, 1, i)


class _Fn2(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, i):
        return self.fn(x, i)


ZERO_D = {   # name: (fn, x, index): torch's 0-d and empty-index rules
    "gather-0d-input": (lambda x, i: torch.gather(x, 0, i), torch.tensor(1.5),
                        torch.tensor([0, 0, 0])),
    "gather-0d-both": (lambda x, i: torch.gather(x, -1, i), torch.tensor(1.5), torch.tensor(0)),
    "gather-0d-index": (lambda x, i: torch.gather(x, 0, i) * 2, torch.randn(4),
                        torch.tensor(3)),
    "gather-empty-uint8": (lambda x, i: torch.gather(x, 0, i), torch.randn(5),
                           torch.zeros(2, 0, dtype=torch.uint8)),
    "gather-empty-rank": (lambda x, i: torch.gather(x, 1, i), torch.randn(5, 3),
                          torch.zeros(0, dtype=torch.int64)),
    "index_select-0d": (lambda x, i: torch.index_select(x, 0, i), torch.tensor(2.5),
                        torch.tensor([0])),
    "index_select-0d-both": (lambda x, i: x.index_select(-1, i), torch.tensor(2.5),
                             torch.tensor(0)),
}


@pytest.mark.parametrize("name", ZERO_D)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_zero_d_and_empty_index(name, dynamic):
    fn, x, i = ZERO_D[name]
    m = _Fn2(fn)
    spec = {k: {a: f"d{k}_{a}" for a, n in enumerate(t.shape) if n > 1}
            for k, t in enumerate((x, i))} if dynamic else False
    cm = dl.compile(m, (x, i), dynamic=spec, backend="cpu")
    got, want = cm(x, i), m(x, i)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if dynamic and name == "gather-0d-input":   # another index length; an index out of range
        i2 = torch.tensor([0] * 5)
        torch.testing.assert_close(cm(x, i2), m(x, i2), rtol=0, atol=0)
        with pytest.raises(dl.ShapeMismatch, match=r"outside \[0, 1\)"):
            cm(x, torch.tensor([0, 1]))


def test_index_select_of_0d_needs_one_index():
    with pytest.raises(dl.ShapeError, match="the index of a 0-d input has one element"):
        dl.compile(_Fn2(lambda x, i: torch.index_select(x, 0, i)),
                   (torch.tensor(1.0), torch.tensor([0, 0])), backend="cpu", dynamic=False)
