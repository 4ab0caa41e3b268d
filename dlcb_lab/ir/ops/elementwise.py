"""Elementwise ops: a broadcasting map over tensor operands and Python scalars. Shapes follow
torch's broadcasting (each pair of non-1 extents is constrained equal); the reverse transform maps
a broadcast axis to coordinate 0. Operands arrive cast to the compute dtype; the result is cast to
the output dtype; NaN semantics follow torch (the reference).

Adding an elementwise op: one row in a table below: name, torch reference, arity, its CUDA C++ and
numba spellings (``str.format`` templates over the operands ``{0}, {1}, ...`` in the compute
dtype and ``{z}``, zero in it), and a sample if the default operands do not suit it; a helper a
spelling calls goes into that language's prelude in ``kgen/spellings.py``, which derives its
per-language tables from these rows (importing ``kgen.emit`` fails naming any op left unspelled).
``docs/contributing.md`` has the whole recipe."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Sequence

import torch
import torch.nn.functional as F

from ...dims import Expr, Shape, lit, shape
from .core import Coords, OpDef, OpKind, is_scalar, register

if TYPE_CHECKING:
    from ..graph import Graph, Node


def broadcast_dims(g: "Graph", node: "Node", operands: Sequence[tuple[int, Sequence[Expr]]]
                   ) -> list[Expr]:
    """torch's broadcast of the shapes ``operands`` ((operand index, dims) pairs, axes
    right-aligned): every pair of non-1 extents on one axis is constrained equal."""
    rank = max((len(d) for _, d in operands), default=0)
    out: list[Expr] = []
    for ax in range(rank):
        cur: Expr | None = None
        src = None
        for i, dims in operands:
            k = ax - (rank - len(dims))
            if k < 0:
                continue
            d = g.solver.resolve(dims[k])
            if d is lit(1):
                cur = cur or d
                continue
            if cur is None or cur is lit(1):
                cur, src = d, (i, k)
            elif d is not cur:
                g.constrain(cur, d, node, f"broadcast operand {src[0]} axis {src[1]} with "
                                         f"operand {i} axis {k}")
                cur = g.solver.resolve(cur)
        out.append(cur if cur is not None else lit(1))
    return out


def infer_broadcast(g: "Graph", node: "Node") -> Shape:
    return shape(broadcast_dims(g, node, [(i, x.shape.items) for i, x in enumerate(node.inputs)
                                          if not is_scalar(x)]))


def broadcast_coords(g: "Graph", x, out_dims, coords: Coords) -> Coords:
    """Coordinates in ``x`` of output ``coords`` (axes right-aligned; a size-1 axis of ``x``
    against a non-1 output axis reads coordinate 0)."""
    off = len(coords) - x.rank
    dims = g.dims(x)
    return [lit(0) if (dims[k] is lit(1) and out_dims[k + off] is not lit(1)) else coords[k + off]
            for k in range(x.rank)]


def _reverse_broadcast(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords | None]:
    out_dims = g.dims(node.out)
    return [None if is_scalar(x) else broadcast_coords(g, x, out_dims, coords)
            for x in node.inputs]


def _elementwise(name: str, reference: Callable, arity: int, cuda: str, numba: str,
                 sample=None) -> None:
    register(OpDef(name, OpKind.ELEMENTWISE, infer_broadcast, _reverse_broadcast, reference,
                   arity, sample=sample, cuda=cuda, numba=numba))


def _ref_to(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype)


def _positive(n: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(n)
    return (torch.rand(n, 3, 5, generator=g) + 0.1,), {}


def _ref_div_rounding(mode: str) -> Callable:
    def reference(a, b):
        return torch.div(a, b, rounding_mode=mode)
    return reference


def _half_sample(dtype: torch.dtype) -> Callable:
    def sample(n: int) -> tuple[tuple, dict]:
        g = torch.Generator().manual_seed(n)
        return (torch.randn(n, 3, 5, generator=g).mul(20).to(dtype),
                torch.randn(3, 1, generator=g).to(dtype)), {}
    return sample


def _int_divisor_sample(n: int) -> tuple[tuple, dict]:
    """An integer dividend (both signs) and a negative Python int divisor (integer rounding
    division takes no tensor divisor: eager raises on a zero one)."""
    g = torch.Generator().manual_seed(n)
    return (torch.randint(-20, 21, (n, 3, 5), generator=g), -3), {}


def _clamp_sample(n: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(n)
    return (torch.randn(n, 3, 5, generator=g) * 4, -0.5, 1.5), {}


# name, reference, arity, CUDA spelling, numba spelling (, sample operands)
for _name, _ref, _arity, _cuda, _numba, *_sample in (
    ("relu", torch.relu, 1, "({0} < {z} ? {z} : {0})", "({z} if {0} < {z} else {0})"),
    ("neg", torch.neg, 1, "(-{0})", "(-{0})"),
    ("abs", torch.abs, 1, "dlcb_abs({0})", "abs({0})"),
    ("exp", torch.exp, 1, "dlcb_exp({0})", "math.exp({0})"),
    ("log", torch.log, 1, "dlcb_log({0})", "_log({0})", _positive),
    ("sqrt", torch.sqrt, 1, "dlcb_sqrt({0})", "_sqrt({0})", _positive),
    ("rsqrt", torch.rsqrt, 1, "dlcb_rsqrt({0})", "_rsqrt({0})", _positive),
    ("erf", torch.erf, 1, "dlcb_erf({0})", "math.erf({0})"),
    ("sigmoid", torch.sigmoid, 1, "dlcb_sigmoid({0})", "_sigmoid({0})"),
    ("tanh", torch.tanh, 1, "dlcb_tanh({0})", "math.tanh({0})"),
    ("silu", F.silu, 1, "dlcb_silu({0})", "_silu({0})"),
    ("gelu", F.gelu, 1, "dlcb_gelu({0})", "_gelu({0})"),
    ("gelu_tanh", functools.partial(F.gelu, approximate="tanh"), 1, "dlcb_gelu_tanh({0})",
     "_gelu_tanh({0})"),
    ("hardsigmoid", F.hardsigmoid, 1, "dlcb_hardsigmoid({0})", "_hardsigmoid({0})"),
    ("hardswish", F.hardswish, 1, "dlcb_hardswish({0})", "_hardswish({0})"),
    ("clamp", torch.clamp, 3,
     "dlcb_min(dlcb_max({0}, {1}), {2})",
     "_min(_max({0}, {1}), {2})", _clamp_sample),
    ("add", torch.add, 2, "({0} + {1})", "({0} + {1})"),
    ("sub", torch.sub, 2, "({0} - {1})", "({0} - {1})"),
    ("mul", torch.mul, 2, "({0} * {1})", "({0} * {1})"),
    ("div", torch.div, 2, "({0} / {1})", "_div({0}, {1})"),
    # div(rounding_mode=...), chosen by the compute dtype: 'trunc' of floats is trunc(div(a, b));
    # 'floor' of floats is torch's div_floor (from fmod), in 16 bits with every step rounded to
    # 16 bits as eager computes it; integers: C truncation, floor division
    ("trunc", torch.trunc, 1, "dlcb_trunc({0})", "np.trunc({0})"),
    ("div_floor", _ref_div_rounding("floor"), 2,
     "dlcb_div_floor<decltype({0} + {1}), dlcb_keep>({0}, {1})",
     "_div_floor({0}, {1}, 0)"),
    ("div_floor_f16", _ref_div_rounding("floor"), 2,
     "dlcb_div_floor<float, dlcb_r_f16>({0}, {1})",
     "_div_floor({0}, {1}, 1)", _half_sample(torch.float16)),
    ("div_floor_bf16", _ref_div_rounding("floor"), 2,
     "dlcb_div_floor<float, dlcb_r_bf16>({0}, {1})",
     "_div_floor({0}, {1}, 2)", _half_sample(torch.bfloat16)),
    ("div_trunc_int", _ref_div_rounding("trunc"), 2,
     "({0} / {1})",
     "_div_trunc_int({0}, {1})", _int_divisor_sample),
    ("div_floor_int", _ref_div_rounding("floor"), 2,
     "dlcb_fdiv({0}, {1})",
     "({0} // {1})", _int_divisor_sample),
    ("maximum", torch.maximum, 2, "dlcb_max({0}, {1})", "_max({0}, {1})"),
    ("minimum", torch.minimum, 2, "dlcb_min({0}, {1})", "_min({0}, {1})"),
    ("eq", torch.eq, 2, "({0} == {1})", "({0} == {1})"),
    ("ne", torch.ne, 2, "({0} != {1})", "({0} != {1})"),
    ("lt", torch.lt, 2, "({0} < {1})", "({0} < {1})"),
    ("le", torch.le, 2, "({0} <= {1})", "({0} <= {1})"),
    ("gt", torch.gt, 2, "({0} > {1})", "({0} > {1})"),
    ("ge", torch.ge, 2, "({0} >= {1})", "({0} >= {1})"),
    ("logical_not", torch.logical_not, 1, "(!{0})", "(not {0})"),
    ("logical_and", torch.logical_and, 2, "({0} && {1})", "(bool({0}) and bool({1}))"),
    ("logical_or", torch.logical_or, 2, "({0} || {1})", "(bool({0}) or bool({1}))"),
    ("where", torch.where, 3, "({0} ? {1} : {2})", "({1} if {0} else {2})"),
    ("to", _ref_to, 1, "{0}", "{0}"),
):
    _elementwise(_name, _ref, _arity, _cuda, _numba, *_sample)


# --- added for the ATen opset of transformers / timm -------------------------------------------

def _pow_sample(n: int) -> tuple[tuple, dict]:
    """A positive base (a negative one to a fractional power is NaN) and a tensor exponent."""
    g = torch.Generator().manual_seed(n)
    return (torch.rand(n, 3, 5, generator=g) * 3 + 0.1, torch.randn(3, 1, generator=g) * 2), {}


def _int_sample(n: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(n)
    return (torch.randint(-50, 50, (n, 3, 5), generator=g),
            torch.randint(-50, 50, (3, 1), generator=g)), {}


def _log1p_sample(n: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(n)
    return (torch.rand(n, 3, 5, generator=g) * 4 - 0.9,), {}


def _round_sample(n: int) -> tuple[tuple, dict]:
    """Halves included (torch rounds them to even)."""
    g = torch.Generator().manual_seed(n)
    return (torch.randint(-12, 13, (n, 3, 5), generator=g) / 2,), {}


# pow: floating operands (std::pow); the bridge lowers eager's special scalar exponents (2, 3,
# 0.5, -1, ...) and integer powers by a literal exponent as multiplications. floor, ceil and
# round take floating operands (the bridge passes integers through, as torch returns them).
# CUDA's C++ overloads pick the float or double function (powf / pow, ...).
for _name, _ref, _arity, _cuda, _numba, *_sample in (
    ("pow", torch.pow, 2, "pow({0}, {1})", "np.power({0}, {1})", _pow_sample),
    ("sin", torch.sin, 1, "sin({0})", "math.sin({0})"),
    ("cos", torch.cos, 1, "cos({0})", "math.cos({0})"),
    ("log1p", torch.log1p, 1, "log1p({0})", "math.log1p({0})", _log1p_sample),
    ("expm1", torch.expm1, 1, "expm1({0})", "math.expm1({0})"),
    ("floor", torch.floor, 1, "floor({0})", "np.floor({0})"),
    ("ceil", torch.ceil, 1, "ceil({0})", "np.ceil({0})"),
    ("round", torch.round, 1, "rint({0})", "np.rint({0})", _round_sample),
    ("sign", torch.sign, 1, "(({z} < {0}) - ({0} < {z}))", "_sign({0})"),
    ("atan", torch.atan, 1, "atan({0})", "math.atan({0})"),
    ("bitwise_xor_int", torch.bitwise_xor, 2, "({0} ^ {1})", "({0} ^ {1})", _int_sample),
    # torch.remainder: floats from fmod (the divisor's sign); integers (a Python int divisor,
    # as div's rounding modes: eager raises on a zero one) floor modulo
    ("remainder", torch.remainder, 2,
     "((fmod({0}, {1}) != {z} && (({1} < {z}) != (fmod({0}, {1}) < {z}))) "
     "? fmod({0}, {1}) + {1} : fmod({0}, {1}))", "_remainder({0}, {1})"),
    ("remainder_int", torch.remainder, 2, "dlcb_fmod({0}, {1})", "({0} % {1})",
     _int_divisor_sample),
):
    _elementwise(_name, _ref, _arity, _cuda, _numba, *_sample)
