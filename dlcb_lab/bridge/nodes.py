"""What an exported node is, for the lowering's messages: its ATen packet, its target as
ATen spells it, the user's source line, its arguments shown."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.fx as fx

from ..ir.graph import Value
from .capture import user_frame


def packet(n: fx.Node) -> str | None:
    """The ATen packet name of a node's target (None for a non-ATen target)."""
    t = n.target
    if isinstance(t, torch._ops.OpOverload) and t.namespace == "aten":
        return t.overloadpacket.__name__
    return None


def describe(n: fx.Node) -> str:
    t = n.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t.namespace}.{t._opname}.{t._overloadname}"
    return getattr(t, "__qualname__", None) or repr(t)


def where(n: fx.Node) -> str:
    """The user's source line of ``n`` (from export's stack trace), else the node's name."""
    return user_frame(n.meta.get("stack_trace")) or n.name


def show(args: Sequence, kwargs: dict) -> str:
    """Arguments as a message shows them (tensors by name)."""
    def one(a):
        return f"%{a.name}" if isinstance(a, Value) else repr(a)
    return ", ".join([*(one(a) for a in args), *(f"{k}={one(v)}" for k, v in kwargs.items())])
