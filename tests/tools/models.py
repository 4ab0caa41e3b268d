"""Small fx-traceable modules covering DLCB's op set, shared by the end-to-end and codegen tests.

Each ``Case`` names a module, how to build fresh random inputs (with negative values) for a batch
size ``n`` (and optionally a second dynamic size ``m``), and the ``dynamic`` spec to compile with.
Keep the modules small: every materialized value (graph output or reduction result) is one kernel,
and on the ``cpu`` backend each kernel costs a numba compile the first time it is seen.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F


class Unary(nn.Module):
    """relu, neg, exp, sigmoid, tanh, abs (function, method and module spellings)."""

    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        a = torch.relu(x) + self.act(-x) * 0.5
        b = torch.exp(torch.neg(x.abs())) * torch.sigmoid(x)
        return a - b + torch.tanh(x).abs() - x.neg().exp().tanh()


class Binary(nn.Module):
    """add/sub/mul/div/maximum/minimum with broadcasting and Python scalars on both sides."""

    def forward(self, x, y, z):   # x [N, 3, 5], y [3, 1], z [5]
        a = torch.maximum(x, y) - torch.minimum(x * z, y)
        b = x / (z.abs() + 0.5) + 1.0 / (1.0 + y.abs())
        c = 2.0 - x + x / 3 - 3 * y + (x + 1) * 0.25 - x * 2
        return torch.add(a, b) + torch.sub(c, torch.mul(y, z)) + torch.div(x, 4.0)


class Worked(nn.Module):
    """DESIGN.md's worked example: ``relu(x * y).reshape(-1, 24)``, x [N, 4, 6], y [1, 4, 1]."""

    def forward(self, x, y):
        return torch.relu(x * y).reshape(-1, 24)


class Reshapes(nn.Module):
    """view/reshape/flatten (incl. ``x.view(x.size(0), -1)``, ``-1`` and nn.Flatten)."""

    def __init__(self):
        super().__init__()
        self.flat = nn.Flatten()

    def forward(self, x):   # x [N, 3, 4]
        a = x.view(x.size(0), -1)                       # [N, 12]
        b = self.flat(x) + torch.flatten(x, 1) * 2.0    # [N, 12]
        c = x.reshape(x.shape[0], 4, 3).reshape(-1, 6)  # [2N, 6]
        return a - b, torch.relu(c), torch.flatten(x).view(-1, 2) * 3.0


class Permutes(nn.Module):
    """permute / transpose (negative axes too), reshape after a permute, .contiguous()."""

    def forward(self, x):   # x [N, 3, 4, 5]
        p = x.permute(0, 2, 3, 1)                                   # [N, 4, 5, 3]
        t = x.transpose(1, 3) * torch.permute(x, (0, 3, 2, 1)).neg()  # [N, 5, 4, 3]
        f = x.transpose(-1, -2).contiguous().reshape(x.size(0), -1)  # [N, 15 * 4]
        return p + 1.0, t, torch.transpose(f, 0, 1)


class Reductions(nn.Module):
    """sum / mean / amax over one, several and all axes, with and without keepdim."""

    def forward(self, x):   # x [N, 4, 6]
        return (x.sum(1), x.mean((1, 2), keepdim=True), torch.amax(x, -1, keepdim=True),
                x.sum(), torch.mean(x, 0), x.amax(dim=(0, 2)), torch.sum(x, dim=-1, keepdim=True))


class Softmax(nn.Module):
    """Reductions feeding elementwise ops (a hand-written softmax and a centered norm)."""

    def forward(self, x):   # x [N, T, 8]
        e = torch.exp(x - x.amax(-1, keepdim=True))
        c = x - x.mean(dim=1, keepdim=True)
        return e / e.sum(-1, keepdim=True), c


class Mixed(nn.Module):
    """Multiple outputs mixing reshape, permute, reductions and a scalar (the demo model)."""

    def forward(self, x, y):   # x [N, 4, 6], y [1, 4, 1]
        z = torch.relu(x * y).reshape(-1, 24)
        w = z.permute(1, 0)
        return w.sum(dim=1, keepdim=True) + z.mean(), torch.sigmoid(z) - 1.0


class Head(nn.Module):
    """A classifier-head-shaped chain built from nn modules: Flatten -> ReLU -> center -> Tanh."""

    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Flatten(), nn.ReLU(), nn.Identity())
        self.tanh = nn.Tanh()

    def forward(self, x):   # x [N, 2, 3, 4]
        h = self.seq(x)
        return self.tanh(h - h.mean(1, keepdim=True))


class Nonfinite(nn.Module):
    """Non-finite Python scalars (inf, -inf) as operands; outputs hold infinities but no NaN."""

    def forward(self, x):   # x [N, 7]
        same = torch.minimum(x, x * 0.0 + float("inf")) + torch.maximum(float("-inf") + x * 0.0, x)
        return same, torch.exp(x * float("-inf"))


class NanProp(nn.Module):
    """NaN propagation (torch semantics) through maximum, minimum, relu and amax."""

    def forward(self, x, y):   # x, y [N, 5]
        return torch.maximum(x, y), torch.minimum(y, x), torch.relu(x), x.amax(1), y * float("nan")


class Pools(nn.Module):
    """A strided conv then five stride-2 max pools: dims nest to ``((((H+1)//2+1)//2 ...`` (long
    enough for the graph drawing to alias them)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def forward(self, x):
        y = self.conv(x)
        for _ in range(5):
            y = F.max_pool2d(y, 3, 2, 1)
        return torch.relu(y) + 1.0


class Windows(nn.Module):
    """Windows over runtime H and W: a 7x7 depthwise convolution (generated in NHWC), a 3x3
    average pool, a ceil-mode max pool, and the global mean (one flat loop over H*W)."""

    def __init__(self, c: int = 8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)

    def forward(self, x):
        y = self.dw(x)
        y = F.avg_pool2d(y, 3, 1, 1) + F.max_pool2d(y, 3, 1, 1)
        return F.max_pool2d(y, 3, 2, ceil_mode=True), y.mean((2, 3))


@dataclass(frozen=True)
class Case:
    name: str
    module: Callable[[], nn.Module]
    make: Callable[..., tuple[torch.Tensor, ...]]   # make(n, m=None, device="cpu")
    dynamic: dict = field(default_factory=dict)     # compile spec with the batch dim dynamic
    dynamic2: dict | None = None                    # spec with two dynamic dims (uses ``m``)
    m: int | None = None                            # the example's second size (for dynamic2)

    def inputs(self, n: int, m: int | None = None, device: str = "cpu", dtype=torch.float32):
        g = torch.Generator().manual_seed(1000 * n + (m or 0) + zlib.crc32(self.name.encode()) % 997)
        return tuple(t.to(device=device, dtype=dtype) for t in self.make(n, m, g))

    def __repr__(self) -> str:
        return self.name


def _r(g, *shape):
    return torch.randn(*shape, generator=g) * 2.0   # plenty of negative values


CASES = [
    Case("unary", Unary, lambda n, m, g: (_r(g, n, 3, 5),), {0: {0: "N"}}),
    Case("binary", Binary, lambda n, m, g: (_r(g, n, 3, 5), _r(g, 3, 1), _r(g, 5)),
         {0: {0: "N"}}),
    Case("worked", Worked, lambda n, m, g: (_r(g, n, 4, 6), _r(g, 1, 4, 1)), {0: {0: "N"}}),
    Case("reshapes", Reshapes, lambda n, m, g: (_r(g, n, 3, 4),), {0: {0: "N"}}),
    Case("permutes", Permutes, lambda n, m, g: (_r(g, n, 3, 4, 5),), {0: {0: "N"}}),
    Case("reductions", Reductions, lambda n, m, g: (_r(g, n, 4, 6 if m is None else m),),
         {0: {0: "N"}}, {0: {0: "N", 2: "W"}}, 6),
    Case("softmax", Softmax, lambda n, m, g: (_r(g, n, 5 if m is None else m, 8),),
         {0: {0: "N"}}, {0: {0: "N", 1: "T"}}, 5),
    Case("mixed", Mixed, lambda n, m, g: (_r(g, n, 4, 6), _r(g, 1, 4, 1)), {0: {0: "N"}}),
    Case("head", Head, lambda n, m, g: (_r(g, n, 2, 3, 4),), {0: {0: "N"}}),
    Case("nonfinite", Nonfinite, lambda n, m, g: (_r(g, n, 7),), {0: {0: "N"}}),
]
BY_NAME = {c.name: c for c in CASES}


# --- random op chains (property tests) ------------------------------------------------------------

def _chain_ops():
    """name -> (applicable(rest), code(h, x, rest) -> h', new rest). ``rest``: h's non-leading
    dims (plain ints: ``h.dim()`` is a Proxy under fx tracing).

    Every op keeps numel (so ``x.reshape(h.shape)`` is always valid) and keeps values bounded, so
    float32 results stay comparable with eager at 1e-5."""
    every = lambda r: True   # noqa: E731
    same = lambda r: r       # noqa: E731
    ops = {
        "relu": (every, lambda h, x, r: torch.relu(h), same),
        "neg": (every, lambda h, x, r: -h, same),
        "expneg": (every, lambda h, x, r: torch.exp(-h.abs()), same),
        "sigmoid": (every, lambda h, x, r: torch.sigmoid(h), same),
        "tanh": (every, lambda h, x, r: h.tanh(), same),
        "abs": (every, lambda h, x, r: torch.abs(h), same),
        "add_s": (every, lambda h, x, r: h + 1.5, same),
        "rsub_s": (every, lambda h, x, r: 2.0 - h, same),
        "mul_s": (every, lambda h, x, r: -0.5 * h, same),
        "div_s": (every, lambda h, x, r: h / 3, same),
        "rdiv_s": (every, lambda h, x, r: 1.0 / (1.0 + h.abs()), same),
        "add_x": (every, lambda h, x, r: h + x.reshape(h.shape), same),
        "sub_x": (every, lambda h, x, r: torch.sub(x.reshape(h.shape), h), same),
        "mul_x": (every, lambda h, x, r: h * torch.tanh(x.reshape(h.shape)), same),
        "div_x": (every, lambda h, x, r: h / (x.reshape(h.shape).abs() + 1.0), same),
        "max_x": (every, lambda h, x, r: torch.maximum(h, x.reshape(h.shape)), same),
        "min_x": (every, lambda h, x, r: torch.minimum(x.reshape(h.shape), h), same),
        "center": (every, lambda h, x, r: h - h.mean(-1, keepdim=True), same),
        "scale": (every, lambda h, x, r: h / (h.abs().amax(1, keepdim=True) + 1.0), same),
        "norm_all": (every, lambda h, x, r: h / (1.0 + h.abs().sum(
            dim=tuple(range(1, len(r) + 1)), keepdim=True)), same),
        "bmax": (every, lambda h, x, r: h - h.amax(0, keepdim=True), same),
        "transpose": (lambda r: len(r) >= 2, lambda h, x, r: h.transpose(-1, -2),
                      lambda r: (*r[:-2], r[-1], r[-2])),
        "flatten": (lambda r: len(r) >= 2, lambda h, x, r: h.flatten(1), lambda r: (_prod(r),)),
        "split": (lambda r: len(r) == 1 and r[0] % 4 == 0,
                  lambda h, x, r: h.view(h.size(0), 4, -1), lambda r: (4, r[0] // 4)),
        "fold": (lambda r: len(r) >= 2, lambda h, x, r: h.reshape(-1, h.shape[-1]),
                 lambda r: (r[-1],)),
        "restore": (every, lambda h, x, r: h.reshape(x.shape), lambda r: (4, 6)),
    }
    return ops


def _prod(r):
    p = 1
    for d in r:
        p *= d
    return p


CHAIN_OPS = _chain_ops()


class Chain(torch.nn.Module):
    def __init__(self, names):
        super().__init__()
        rest, self.names, self.steps = (4, 6), [], []
        for nm in names:   # keep the ops that apply to the current shape
            ok, _, nxt = CHAIN_OPS[nm]
            if ok(rest):
                self.names.append(nm)
                self.steps.append((nm, rest))
                rest = nxt(rest)

    def forward(self, x):
        h = x
        for nm, rest in self.steps:
            h = CHAIN_OPS[nm][1](h, x, rest)
        return h


class Affine(torch.nn.Module):
    """Parameters and a buffer are constants of the compiled module (static shapes)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 6))
        self.register_buffer("shift", torch.randn(6))
        self.inner = torch.nn.Module()
        self.inner.scale = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, x):
        return torch.tanh(x * self.weight + self.shift) * self.inner.scale


# --- shared by several stages' tests ----------------------------------------------------------

class Fn(torch.nn.Module):
    """A module around a one-argument function (export traces through the lambda)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class Fn2(Fn):
    def forward(self, x, y):
        return self.fn(x, y)


def int_mix(x, y):   # x: int, y: same-shape int of another width
    a = x * 3 - y + (x > y).to(torch.int64) + torch.maximum(x, y) - torch.minimum(-x, y).abs()
    b = torch.where(x >= 0, x, y) + (x == y) + x.neg() + torch.relu(x)
    return a, b, x.sum(1), y.amax(0), x / 2, x + 1.5, (x != 0) & (y < 1), ~(x > 0), x.float().mean()


class WorkedSum(torch.nn.Module):
    """``Worked`` with a reduction beside a reshape: two kernels."""

    def forward(self, x, y):
        return torch.relu(x * y).reshape(-1, 24).sum(1, keepdim=True) + x.reshape(x.size(0), -1)


class Overflow(torch.nn.Module):
    """A fused intermediate of 43692 * 49152 > 2**31 elements, never materialized."""

    def forward(self, x, y):
        return (x + y).reshape(-1, 65536).sum(1), x * 2


class ConvBN(nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(6, eps=1e-3)
        with torch.no_grad():   # non-trivial running statistics
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-1, 1)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


HOSTILE = ["np", "prange", "range", "for", "None", "lambda", "in_x", "in0", "I", "int", "float",
           "auto", "class", "threadIdx", "blockDim", "INFINITY", "NAN", "out", "numel", "t",
           "step", "c0", "l0", "p0", "math", "ñ"]
