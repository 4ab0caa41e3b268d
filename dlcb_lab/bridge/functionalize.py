"""Functionalization of in-place ATen overloads (``relu_``, ``add_``, a write into a slice): the
IR's values are immutable, so an in-place op's result replaces the mutated value (and its
aliases) for every later use; a write into slices of a computed tensor becomes a concatenation
around the written piece. Writes visible elsewhere (an input, a parameter, a view used after the
write) are refused."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from ..errors import DTypeError, UnsupportedOp
from ..ir.graph import Graph, Value
from ..ir.ops import Ops
from .common import Cx, wrap_axis
from .nodes import packet, where
from .ops.shape import aten_slice, cat


def functionalize(g: Graph, n: fx.Node, env: dict, target: Any, out: Value) -> Value:
    """In-place op on ``target``: every node holding ``target`` now holds ``out`` (cast back to
    ``target``'s dtype, as torch does). Refused where the write would be visible elsewhere: on a
    module input, parameter or buffer (a placeholder), on a view (its base would change), or on
    a tensor a view was taken of before the write (the view would change)."""
    if not isinstance(target, Value):
        raise UnsupportedOp("in-place op on a non-tensor")
    if out is target:   # an identity (dropout_ in eval): nothing is written
        return out
    src = n.args[0] if isinstance(n.args[0], fx.Node) else None
    if src is not None and src.op == "placeholder":
        raise UnsupportedOp(f"in-place op mutates graph input '{target.name}' (the caller's "
                            f"tensor, a parameter or a buffer); use the out-of-place form")
    if out.dtype != target.dtype:
        if not torch.can_cast(out.dtype, target.dtype):
            raise DTypeError(f"result type {out.dtype} can't be cast to the in-place operand's "
                             f"dtype {target.dtype}")
        out = g.apply(Ops.to, out, dtype=target.dtype, name=f"{n.name}_cast", where=where(n))
    if src is not None and _is_view(src):
        chain = _slice_chain(src, n)
        if chain is None:
            raise UnsupportedOp(f"in-place op on '{target.name}', a view (only a write into "
                                f"slices, step 1, of a tensor the program computes, with no other "
                                f"view of it used after the write, is functionalized); use the "
                                f"out-of-place form")
        return _write_through(g, n, env, chain, out)
    if src is not None and any(_is_view(u) and _used_after(u, n) for u in src.users
                               if u is not n and _before(u, n)):
        raise UnsupportedOp(f"in-place op on '{target.name}', which shares storage with a view "
                            f"used after the write; use the out-of-place form")
    _rebind(env, target, out)
    return out


def _rebind(env: dict, old: Value, new: Value) -> None:
    """Every node holding ``old`` now holds ``new`` (the value after an in-place write)."""
    for k, v in env.items():
        if v is old:
            env[k] = new


def _slice_chain(view: fx.Node, n: fx.Node) -> list[fx.Node] | None:
    """``view`` as ``slice(slice(... base))`` (innermost first), every slice of step 1, ``base``
    computed by the program (not a placeholder nor a view), and no view of ``base`` or of the
    chain other than the chain itself used after ``n``; else None."""
    chain, node = [], view
    while _is_view(node):
        step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
        if packet(node) != "slice" or step != 1 or not isinstance(node.args[0], fx.Node):
            return None
        chain.append(node)
        node = node.args[0]
    if node.op == "placeholder":
        return None
    for x in (node, *chain[1:]):
        if any(_is_view(u) and u not in chain and _before(u, n) and _used_after(u, n)
               for u in x.users):
            return None
    return chain


_TO_THE_END = 1 << 62
"""A slice end at or past this is ``None`` (export writes ``x[a:]`` as end 2**63 - 1)."""


def _write_through(g: Graph, n: fx.Node, env: dict, chain: list[fx.Node], new: Value) -> Value:
    """A write of ``new`` into the slices ``chain`` (``_slice_chain``): each parent becomes the
    concatenation of its part before the slice, the written slice and its part after it, along
    the slice's axis (a guarded selection in the kernels), and the base's new value replaces the
    old one. The pieces' sizes are constrained to the parent's (a host check where symbolic)."""
    cx = Cx(g, n.name, where(n))
    for s in chain:
        parent = env[s.args[0]]
        given = list(fx.node.map_arg(tuple(s.args[1:4]), lambda a: env[a]))
        dim, start, end = given + [0, None, None][len(given):]
        axis = wrap_axis(dim, parent.rank)
        pieces = [new]
        if start is not None and not (isinstance(start, int) and start == 0):
            pieces.insert(0, aten_slice(cx, parent, axis, None, start))
        if end is not None and not (isinstance(end, int) and end >= _TO_THE_END):
            pieces.append(aten_slice(cx, parent, axis, end, None))
        if len(pieces) > 1:
            new = cat(cx, pieces, axis)
        gap = g.dims(new)[axis] - g.dims(parent)[axis]   # checked, never solved for
        for e in (gap, -gap):
            g.require(e, n.name, f"in-place write into a slice along axis {axis}: the pieces "
                                 f"make the axis", where(n))
    _rebind(env, env[chain[-1].args[0]], new)
    return new


def _used_after(v: fx.Node, n: fx.Node) -> bool:
    """Whether ``v`` or a view of it (transitively) is read by a node after ``n``."""
    for u in v.users:
        if u is n:
            continue
        if not _before(u, n) or (_is_view(u) and _used_after(u, n)):
            return True
    return False


def _is_view(n: fx.Node) -> bool:
    """A node whose traced result aliases one of its tensor inputs (``slice``, ``view``,
    ``expand``; ``to`` or ``reshape`` only where they returned a view)."""
    schema = getattr(n.target, "_schema", None)
    if schema is None or not schema.returns or schema.returns[0].alias_info is None or \
            schema.is_mutable:
        return False
    val = n.meta.get("val")
    ins = [a.meta.get("val") for a in n.all_input_nodes]
    return not isinstance(val, torch.Tensor) or any(
        isinstance(t, torch.Tensor) and torch._C._is_alias_of(val, t) for t in ins)


def _before(a: fx.Node, b: fx.Node) -> bool:
    """Whether ``a`` comes before ``b`` in the graph."""
    node = a.next
    while node is not None and node.op != "root":
        if node is b:
            return True
        node = node.next
    return False
