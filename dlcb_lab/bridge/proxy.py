"""Opaque functions: a Python function torch.fx keeps as a leaf (``torch.fx.wrap``, e.g. Swin's
``shifted_window_attention``) is run at lowering time on ``TensorProxy`` objects. Torch functions,
tensor methods and operators on a proxy lower through the bridge's tables, so the function becomes
IR ops. Sizes are plain ints where literal (Python control flow on them runs), dimension
expressions where symbolic (control flow on those is refused). Tensors the function creates from
literal sizes (masks, tables) are real torch tensors: they become graph constants when they meet a
proxy. A call whose tensor arguments are all constants is evaluated eagerly (a constant).
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from ..dims import Lit
from ..errors import UnsupportedOp
from ..ir.graph import Value
from .common import Cx


class TensorProxy:
    """A graph value inside an opaque function."""

    __slots__ = ("cx", "v")

    def __init__(self, cx: Cx, v: Value):
        self.cx, self.v = cx, v

    # -- metadata ---------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return tuple(d.value if isinstance(d, Lit) else d for d in self.cx.g.dims(self.v))

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.v.rank

    ndim = property(dim)

    @property
    def dtype(self) -> torch.dtype:
        return self.v.dtype

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def numel(self):
        out = 1
        for d in self.shape:
            out = out * d
        return out

    def new_zeros(self, size, *, dtype=None, **_) -> torch.Tensor:
        return torch.zeros(_ints(size), dtype=dtype or self.dtype)

    def new_ones(self, size, *, dtype=None, **_) -> torch.Tensor:
        return torch.ones(_ints(size), dtype=dtype or self.dtype)

    # -- dispatch ---------------------------------------------------------------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cx = next(a.cx for a in _flat((args, kwargs)) if isinstance(a, TensorProxy))
        return _call(cx, func, False, args, kwargs or {})

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)

        def method(*args, **kwargs):
            return _call(self.cx, name, True, (self, *args), kwargs)
        return method

    def __bool__(self):
        raise UnsupportedOp("a tensor used as a Python bool (data-dependent control flow)")

    def __repr__(self) -> str:
        return f"TensorProxy(%{self.v.name}: {list(self.shape)})"


def _binary(fn):
    def op(self, other):
        return _call(self.cx, fn, False, (self, other), {})

    def rop(self, other):
        return _call(self.cx, fn, False, (other, self), {})
    return op, rop


for _name, _fn in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("matmul", operator.matmul),
                   ("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt),
                   ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge)):
    _op, _rop = _binary(_fn)
    setattr(TensorProxy, f"__{_name}__", _op)
    if _name in ("add", "sub", "mul", "truediv", "matmul"):
        setattr(TensorProxy, f"__r{_name}__", _rop)
TensorProxy.__neg__ = lambda self: _call(self.cx, operator.neg, False, (self,), {})
TensorProxy.__getitem__ = lambda self, idx: _call(self.cx, operator.getitem, False, (self, idx),
                                                  {})
TensorProxy.__hash__ = object.__hash__


def _ints(size) -> list[int]:
    size = size if isinstance(size, (tuple, list)) else (size,)
    if not all(isinstance(s, int) for s in size):
        raise UnsupportedOp(f"a new tensor of symbolic size {size}")
    return list(size)


def _flat(x: Any):
    if isinstance(x, (tuple, list)):
        for y in x:
            yield from _flat(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _flat(y)
    else:
        yield x


def _to_ir(cx: Cx, x: Any) -> Any:
    """Proxies -> values, real tensors -> graph constants, containers recursively."""
    if isinstance(x, TensorProxy):
        return x.v
    if isinstance(x, torch.Tensor):
        return cx.g.constant(f"{cx.name}.const{len(cx.g.constants)}", x.detach())
    if isinstance(x, (tuple, list)):
        return type(x)(_to_ir(cx, y) for y in x)
    return x


def _from_ir(cx: Cx, x: Any) -> Any:
    if isinstance(x, Value):
        return TensorProxy(cx, x)
    if isinstance(x, (tuple, list)):
        return type(x)(_from_ir(cx, y) for y in x)
    return x


def _call(cx: Cx, func: Any, method: bool, args: tuple, kwargs: dict) -> Any:
    from .fx import LOWERINGS, call_lowering, lowering_for

    if func is operator.getitem:
        hit = ("getitem", LOWERINGS["getitem"], False)
    else:
        hit = lowering_for(func, method)
    if hit is None:
        name = func if method else getattr(func, "__qualname__", repr(func))
        raise UnsupportedOp(f"{'method ' if method else ''}{name} inside an opaque function")
    name, fn, _ = hit
    out, _ = call_lowering(cx, name, fn, _to_ir(cx, args), _to_ir(cx, kwargs))
    return _from_ir(cx, out)


def run_opaque(cx: Cx, fn: Any, args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)`` with graph values as proxies (or, when every tensor argument is a
    constant, on the constants themselves); returns values (or a new constant)."""
    consts = {v.id: t for v, t in cx.g.constants}
    vals = [a for a in _flat((args, kwargs)) if isinstance(a, Value)]

    def wrap(x):
        if isinstance(x, Value):
            return consts[x.id] if all(v.id in consts for v in vals) else TensorProxy(cx, x)
        if isinstance(x, (tuple, list)):
            return type(x)(wrap(y) for y in x)
        if isinstance(x, dict):
            return {k: wrap(y) for k, y in x.items()}
        return x

    try:
        with torch.no_grad():
            out = fn(*wrap(args), **wrap(kwargs))
    except TypeError as err:   # e.g. ``N > 3`` on a dimension expression
        raise UnsupportedOp(f"{fn.__qualname__}: {err} (Python code on a symbolic size)") \
            from None
    return _to_ir(cx, out) if isinstance(out, torch.Tensor) else _unwrap(out)


def _unwrap(x: Any) -> Any:
    if isinstance(x, TensorProxy):
        return x.v
    if isinstance(x, (tuple, list)):
        return type(x)(_unwrap(y) for y in x)
    return x
