"""The eager op: an ATen node DLCB does not lower, run by PyTorch at its place in the launch
plan (the bridge's fallback, paper §2.1); an op that returns several tensors (``sort``, ``topk``,
``lstm``) is one eager op per result used, each taking its ``item`` of the op's results. Its
operands are materialized tensors, its other
arguments literals or dims (host registers at run time), its result shape the one torch.export
derived, in graph dims, so the shapes after it stay symbolic and the host program knows every
buffer before the first launch. It is a library op: the launch plan calls ``reference``. What
torch checks inside the op (a window larger than its input) the host program does not know: a
failure there is a ``ShapeMismatch`` raised when the op runs, after the launches before it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ...dims import Lit, Shape, shape
from ...errors import ShapeMismatch
from .core import OpDef, OpKind, register

if TYPE_CHECKING:
    from ..graph import Graph, Node


@dataclass(frozen=True)
class Operand:
    """Where the ``index``-th tensor operand goes in an eager call's argument template."""

    index: int

    def __repr__(self) -> str:
        return f"%{self.index}"


def aten_op(target: str) -> torch._ops.OpOverload:
    """``"aten.cumsum.default"`` -> ``torch.ops.aten.cumsum.default`` (ATen only: a loaded
    artifact names its eager ops by string, never by a pickled callable)."""
    ns, name, overload = target.split(".")
    if ns != "aten":
        raise ValueError(f"eager op {target!r}: only ATen operators run eagerly")
    return getattr(getattr(torch.ops.aten, name), overload)


def _fill(template: Any, tensors: tuple) -> Any:
    if isinstance(template, Operand):
        return tensors[template.index]
    if isinstance(template, (tuple, list)):
        return type(template)(_fill(t, tensors) for t in template)
    if isinstance(template, Lit):
        return template.value
    return template


def _infer(g: "Graph", node: "Node") -> Shape:
    return shape(g.solver.resolve(d) for d in node.attrs["out_shape"])


def _reference(*tensors: torch.Tensor, target: str, args: tuple, kwargs: tuple,
               out_shape: tuple = (), dtype: torch.dtype | None = None, reason: str = "",
               item: int | None = None) -> torch.Tensor:
    """``target(*args, **kwargs)`` with the operands filled in, or its ``item``-th result for an
    op that returns several (``out_shape``, ``dtype`` and ``reason`` describe the result and why
    it runs eagerly)."""
    try:
        out = aten_op(target)(*_fill(args, tensors), **dict(_fill(kwargs, tensors)))
    except (RuntimeError, IndexError, ValueError) as err:   # sizes the host could not check
        raise ShapeMismatch(f"eager {target} ({reason}) raised: {str(err).splitlines()[0]}") \
            from None
    if item is not None:
        out = out[item]
    return out.to(dtype) if dtype is not None and out.dtype != dtype else out


EAGER = register(OpDef("eager", OpKind.LIBRARY, _infer, None, _reference))
