"""Factory lowerings: tensors built from sizes (full, ones, zeros and their ``new_`` and ``_like``
forms, fill, scalar_tensor, arange), sizes symbolic. No host tensor of the result's size is
built: a fill is a one-element constant expanded (a coordinate transform, fused into its
readers); ``arange`` counts in a generated ``prefix_sum`` of the int64 constant 1 (its values are
computed in the kernel, from the output coordinate). ``device`` is the backend's and ignored;
other layouts and pinned memory are refused."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ...dims import Expr, Lit, as_expr, lit
from ...errors import DTypeError, ShapeError, UnsupportedOp
from ...ir.graph import Value
from ...ir.ops import Ops
from ..common import Cx, dim_arg, number, row_major, tensor_arg
from ..registry import UNLISTED, aten, register

NO_OPERAND = "no tensor operand for the fuzzer to draw"


def _factory_args(layout: Any, pin_memory: Any, memory_format: Any = None) -> None:
    if layout not in (None, torch.strided):
        raise UnsupportedOp(f"layout={layout} unsupported (strided tensors only)")
    if pin_memory not in (None, False):
        raise UnsupportedOp("pin_memory=True unsupported (outputs live on the backend's device)")
    if memory_format is not None:
        row_major(memory_format)


def sizes_arg(size: Any) -> tuple[Expr, ...]:
    """A size list argument (an int or a list of ints and sizes), each checked non-negative."""
    if isinstance(size, (int, Expr)) and not isinstance(size, bool):
        size = (size,)
    out = []
    for i, d in enumerate(size):
        e = dim_arg(d, f"size[{i}]")
        if isinstance(e, Lit) and e.value < 0:
            raise ShapeError(f"size[{i}] is {e.value}: negative dimension (torch rejects it)")
        out.append(e)
    return tuple(out)


def filled(cx: Cx, sizes: tuple[Expr, ...], value: Any, dtype: torch.dtype) -> Value:
    """``value`` in ``dtype`` over ``sizes``: a one-element constant, expanded (no buffer)."""
    value = number(value, "fill_value")
    try:
        t = torch.full((), value, dtype=dtype)
    except (RuntimeError, TypeError) as err:
        raise DTypeError(f"fill_value {value!r} as {dtype}: {str(err).splitlines()[0]}") from None
    c = cx.g.constant(f"{cx.name}.fill", t)
    return cx.apply(Ops.expand, c, sizes=sizes) if sizes else c


def size_value(cx: Cx, e: Expr, what: str) -> Value:
    """The dimension expression ``e`` as a 0-d int64 tensor, counted in a kernel: the sum of the
    constant 1 over ``e`` elements (a loop compilers reduce to ``e``). ``e`` must be
    non-negative (host-checked)."""
    cx.g.require(e, cx.name, f"{what} ({e!r}, used as a value) is non-negative", cx.where)
    one = cx.g.constant(f"{cx.name}.one", torch.ones((), dtype=torch.int64))
    return cx.apply(Ops.sum, cx.apply(Ops.expand, one, sizes=(e,)), dims=(0,), keepdim=False)


def _default_dtype(value: Any) -> torch.dtype:
    """torch.full's inference from the fill value: bool, int64, or the default float dtype."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, (int, Expr)):
        return torch.int64
    if isinstance(value, complex):
        raise DTypeError("complex fill values are unsupported")
    return torch.get_default_dtype()


@register(aten.full, ir=(Ops.expand,), no_opinfo=UNLISTED, no_fuzz=NO_OPERAND)
def full(cx, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    _factory_args(layout, pin_memory)
    return filled(cx, sizes_arg(size), fill_value, dtype or _default_dtype(fill_value))


def _const_factory(value: int) -> Callable:
    def lowering(cx, size, *, dtype=None, layout=None, device=None, pin_memory=None):
        _factory_args(layout, pin_memory)
        return filled(cx, sizes_arg(size), value, dtype or torch.get_default_dtype())
    lowering.__doc__ = f"``{'ones' if value else 'zeros'}(size)`` (default float dtype)."
    return lowering


register(aten.ones, ir=(Ops.expand,), no_opinfo=UNLISTED, no_fuzz=NO_OPERAND)(_const_factory(1))
register(aten.zeros, ir=(Ops.expand,), no_opinfo=UNLISTED, no_fuzz=NO_OPERAND)(_const_factory(0))


def _new_factory(value: int | None) -> Callable:
    """``new_ones``/``new_zeros``/``new_empty``: ``size`` in the input's dtype (empty is zeros)."""
    def lowering(cx, input, size, *, dtype=None, layout=None, device=None, pin_memory=None):
        _factory_args(layout, pin_memory)
        return filled(cx, sizes_arg(size), value or 0, dtype or tensor_arg(input).dtype)
    return lowering


@register(aten.new_full, ir=(Ops.expand,), opinfo=("new_full",), slow=True, no_fuzz=NO_OPERAND)
def new_full(cx, input, size, fill_value, *, dtype=None, layout=None, device=None,
             pin_memory=None):
    _factory_args(layout, pin_memory)
    return filled(cx, sizes_arg(size), fill_value, dtype or tensor_arg(input).dtype)


def _like_factory(value: int | None) -> Callable:
    def lowering(cx, input, *, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None):
        _factory_args(layout, pin_memory, memory_format)
        x = tensor_arg(input)
        return filled(cx, cx.g.dims(x), value or 0, dtype or x.dtype)
    return lowering


def _register_fills() -> None:
    """``new_ones``/``new_zeros``/``new_empty`` and ``ones_like``/``zeros_like``/``empty_like``
    (an empty tensor's values are zeros here)."""
    for packet, make, value in ((aten.new_ones, _new_factory, 1), (aten.new_zeros, _new_factory, 0),
                                (aten.new_empty, _new_factory, None),
                                (aten.ones_like, _like_factory, 1),
                                (aten.zeros_like, _like_factory, 0),
                                (aten.empty_like, _like_factory, None)):
        tested = dict(opinfo=(packet.__name__,), slow=True) if value is not None else \
            dict(no_opinfo="uninitialized values (zeros here)")
        register(packet, ir=(Ops.expand,), no_fuzz=NO_OPERAND, **tested)(make(value))


_register_fills()


@register(aten.full_like, ir=(Ops.expand,), opinfo=("full_like",), slow=True, no_fuzz=NO_OPERAND)
def full_like(cx, input, fill_value, *, dtype=None, layout=None, device=None,
              pin_memory=None, memory_format=None):
    _factory_args(layout, pin_memory, memory_format)
    x = tensor_arg(input)
    return filled(cx, cx.g.dims(x), fill_value, dtype or x.dtype)


@register(aten.fill, ir=(Ops.expand, Ops.to), opinfo=("fill",), slow=True, no_fuzz=NO_OPERAND)
def fill(cx, input, value):
    """``fill`` (``fill_`` writes it in place: a slice of a mask, say): ``value`` (a number or a
    0-d tensor) over ``input``'s shape in its dtype."""
    x = tensor_arg(input)
    if not isinstance(value, Value):
        return filled(cx, cx.g.dims(x), value, x.dtype)
    if value.rank != 0:
        raise ShapeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                         f"{value.rank} dimensions")
    v = cx.apply(Ops.to, value, dtype=x.dtype) if value.dtype != x.dtype else value
    return cx.apply(Ops.expand, v, sizes=cx.g.dims(x)) if x.rank else v


@register(aten.scalar_tensor, ir=(), no_opinfo=UNLISTED, no_fuzz=NO_OPERAND)
def scalar_tensor(cx, s, *, dtype=None, layout=None, device=None, pin_memory=None):
    _factory_args(layout, pin_memory)
    return filled(cx, (), s, dtype or torch.get_default_dtype())


def _arange_count(start: Any, end: Any, step: Any) -> Expr:
    """torch's length ``ceil((end - start) / step)``; a symbolic bound needs integer ``start``
    and ``step`` (the length is then exact integer arithmetic, host-checked non-negative)."""
    if not any(isinstance(v, Expr) and not isinstance(v, Lit) for v in (start, end, step)):
        s, e, d = (number(v, n) for v, n in ((start, "start"), (end, "end"), (step, "step")))
        if d == 0:
            raise ShapeError("arange: step must be nonzero")
        if (d > 0 and e < s) or (d < 0 and e > s):
            raise ShapeError(f"arange({s}, {e}, {d}): upper bound and larger bound inconsistent "
                             f"with step sign")
        return lit(math.ceil((float(e) - float(s)) / float(d)))
    for v, n in ((start, "start"), (step, "step")):
        if isinstance(v, float) and not v.is_integer():
            raise UnsupportedOp(f"arange with a symbolic bound and the fractional {n} {v!r} "
                                f"(its length is no integer expression)")
    if isinstance(step, Expr) and not isinstance(step, Lit):
        raise UnsupportedOp(f"arange with the symbolic step {step!r}")
    if isinstance(end, float) and not end.is_integer():
        raise UnsupportedOp(f"arange with a symbolic start and the fractional end {end!r}")
    d = int(number(step, "step"))
    if d == 0:
        raise ShapeError("arange: step must be nonzero")
    s, e = as_expr(int(start) if isinstance(start, float) else start), \
        as_expr(int(end) if isinstance(end, float) else end)
    span = e - s if d > 0 else s - e
    return span if abs(d) == 1 else (span + abs(d) - 1) // abs(d)


def _arange_args(start, end, step, dtype) -> tuple[Any, Any, torch.dtype]:
    """(start, end, dtype) of an ``arange`` call: bounds checked, dtype inferred as torch does."""
    if end is None:
        start, end = 0, start
    if start is None:
        start = 0
    for v, n in ((start, "start"), (end, "end"), (step, "step")):
        if isinstance(v, Value):
            raise UnsupportedOp(f"arange: {n} is a tensor (a data-dependent size)")
        if isinstance(v, bool) or not isinstance(v, (int, float, Expr)):
            raise UnsupportedOp(f"arange: {n} {v!r} is not a number")
    if dtype is None:
        floats = any(isinstance(v, float) for v in (start, end, step))
        dtype = torch.get_default_dtype() if floats else torch.int64
    if dtype is torch.bool or dtype.is_complex:
        raise DTypeError(f"arange in {dtype} unsupported")
    if not dtype.is_floating_point and any(isinstance(v, float) and not v.is_integer()
                                           for v in (start, end, step)):
        raise UnsupportedOp(f"arange in {dtype} with fractional bounds or step")
    return start, end, dtype


@register(aten.arange, ir=(Ops.prefix_sum, Ops.expand, Ops.sub, Ops.mul, Ops.add, Ops.to),
          no_opinfo=UNLISTED, no_fuzz=NO_OPERAND)
def arange(cx, start=None, end=None, step=1, *, dtype=None, layout=None, device=None,
           pin_memory=None):
    """``arange.default`` (end), ``.start`` (start, end), ``.start_step``: values
    ``start + step * i`` computed in the kernel from ``i``, a generated count (``prefix_sum`` of
    the int64 constant 1, minus 1); floating results as eager's CPU kernel computes them (in
    double; float for 16-bit dtypes), integers exactly. Bounds may be sizes (``arange(S)``,
    ``arange(2, S + 1)``, ``arange(S, 0, -1)``); a symbolic start is counted in a kernel
    (``size_value``)."""
    _factory_args(layout, pin_memory)
    start, end, dtype = _arange_args(start, end, step, dtype)
    n = _arange_count(start, end, step)
    d = number(step, "step")
    s: Any = start.value if isinstance(start, Lit) else start
    if isinstance(s, Expr):   # a symbolic start: counted in a kernel (non-negative)
        s = size_value(cx, s, "arange's start")
    one = cx.g.constant(f"{cx.name}.one", torch.ones((), dtype=torch.int64))
    i = cx.apply(Ops.prefix_sum, cx.apply(Ops.expand, one, sizes=(n,)), dim=0)
    i = cx.apply(Ops.sub, i, 1)
    if not dtype.is_floating_point:
        if d != 1:
            i = cx.apply(Ops.mul, i, int(d))
        if isinstance(s, Value) or s != 0:
            i = cx.apply(Ops.add, i, s if isinstance(s, Value) else int(s))
        return cx.cast(i, dtype)
    acc = torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32
    v = cx.cast(i, acc)
    if d != 1:
        v = cx.apply(Ops.mul, v, float(d))
    if isinstance(s, Value) or s != 0:
        v = cx.apply(Ops.add, v, cx.cast(s, acc) if isinstance(s, Value) else float(s))
    return cx.cast(v, dtype)
