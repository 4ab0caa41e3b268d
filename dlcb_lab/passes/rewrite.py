"""Pattern rewrites as data: ``REWRITES`` lists ``(name, rule)`` pairs, each with a one-line
comment; a rule looks at one node and either rewrites the graph around it (returning a description)
or returns None. ``rewrite`` applies the list to a fixed point.

Folding batch norm into a convolution needs no rule of its own: batch norm lowers to
``x * scale + shift`` per channel (``scale``/``shift`` folded to constants), ``conv_scale`` moves
``scale`` into the weight, and ``shift`` stays an elementwise add, fused as the epilogue of the
kernel that reads the convolution. A convolution with a bias (``conv + b``) first has the scale
distributed over the bias (``shift_scale``), and the two shifts then merge (``shift_shift``)."""

from __future__ import annotations

from typing import Callable

import torch

from ..dims import as_expr
from ..ir.graph import Graph, Node, Value
from ..ir.ops import OPS, infer_dtypes, is_scalar
from .core import constant_of, replace_value, uses

Rule = Callable[[Graph, Node, dict], "str | None"]


def _channel_vector(g: Graph, s: Value, rank: int) -> torch.Tensor | None:
    """The constant ``s`` as a per-channel vector [C] if it broadcasts along axis 1 of a rank-
    ``rank`` value only ([C, 1, 1] or [1, C, 1, 1]), else None."""
    t = constant_of(g, s)
    if t is None or t.dim() > rank or t.dim() < rank - 1:
        return None
    shape = [1] * (rank - t.dim()) + list(t.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    return t.reshape(-1)


def _conv_scale(g: Graph, n: Node, use: dict) -> str | None:
    """conv2d(x, W) * s  ->  conv2d(x, W * s[:, None, None, None])   (s per output channel)"""
    if n.op.name != "mul" or len(n.inputs) != 2:
        return None
    for y, s in (n.inputs, n.inputs[::-1]):
        if not isinstance(y, Value) or y.producer is None or y.producer.op.name != "conv2d" or \
                len(use.get(y.id, ())) != 1 or is_scalar(s) or y.dtype != n.out.dtype:
            continue
        vec = _channel_vector(g, s, y.rank)
        conv = y.producer
        w = constant_of(g, conv.inputs[1])
        if vec is None or w is None or vec.numel() != w.shape[0]:
            continue
        w2 = g.constant(f"{conv.inputs[1].name}*{s.name}",
                        (w * vec.reshape(-1, 1, 1, 1)).to(w.dtype))
        conv.inputs = (conv.inputs[0], w2)
        replace_value(g, n.out, y)
        g.nodes.remove(n)
        return f"%{n.out.name}: conv2d %{y.name} scaled by %{s.name} -> weight %{w2.name}"
    return None


def _shifted(g: Graph, n: Node, op: str, use: dict) -> tuple[Node, Value, Value, Value] | None:
    """Matches ``n = (y + c) op t``: ``n`` a binary ``op`` of a single-use add ``inner`` with one
    constant operand ``c``, and a constant ``t``; every value has ``y``'s dtype and the result
    has ``y``'s shape. Returns (inner, y, c, t) or None."""
    if n.op.name != op or len(n.inputs) != 2:
        return None
    for a, t in (n.inputs, n.inputs[::-1]):
        if not isinstance(a, Value) or a.producer is None or len(use.get(a.id, ())) != 1 or \
                is_scalar(t) or constant_of(g, t) is None:
            continue
        inner = a.producer
        if inner.op.name != "add" or len(inner.inputs) != 2 or \
                any(is_scalar(x) for x in inner.inputs):
            continue
        for y, c in (inner.inputs, inner.inputs[::-1]):
            if constant_of(g, c) is not None and constant_of(g, y) is None and \
                    len({y.dtype, c.dtype, t.dtype, n.out.dtype}) == 1 and \
                    g.dims(n.out) == g.dims(y):
                return inner, y, c, t
    return None


def _shift_scale(g: Graph, n: Node, use: dict) -> str | None:
    """(y + c) * s  ->  y * s + (c * s)   (c, s constants broadcasting into y)"""
    hit = _shifted(g, n, "mul", use)
    if hit is None:
        return None
    inner, y, c, s = hit
    cs = g.constant(f"{c.name}*{s.name}", (constant_of(g, c) * constant_of(g, s)).to(y.dtype))
    inner.op, inner.inputs = n.op, (y, s)       # the add becomes y * s ...
    n.op, n.inputs = OPS["add"], (inner.out, cs)  # ... and the mul adds c * s
    return f"%{n.out.name}: (%{y.name} + %{c.name}) * %{s.name} -> %{y.name} * %{s.name} + " \
           f"%{cs.name}"


def _shift_shift(g: Graph, n: Node, use: dict) -> str | None:
    """(y + a) + b  ->  y + (a + b)   (a, b constants broadcasting into y)"""
    hit = _shifted(g, n, "add", use)
    if hit is None:
        return None
    inner, y, a, b = hit
    ab = g.constant(f"{a.name}+{b.name}", (constant_of(g, a) + constant_of(g, b)).to(y.dtype))
    n.inputs = (y, ab)
    g.nodes.remove(inner)
    return f"%{n.out.name}: (%{y.name} + %{a.name}) + %{b.name} -> %{y.name} + %{ab.name}"


def _identity(g: Graph, n: Node, use: dict) -> str | None:
    """x * 1, x + 0, x - 0, x / 1, to(x, x.dtype), same-shape reshape  ->  x"""
    x = n.inputs[0]
    if not isinstance(x, Value) or x.dtype != n.out.dtype or g.dims(x) != g.dims(n.out):
        return None
    other = n.inputs[1] if len(n.inputs) == 2 else None
    same = (n.op.name in ("mul", "div") and other == 1 and not isinstance(other, bool)) or \
        (n.op.name in ("add", "sub") and other == 0 and not isinstance(other, bool)) or \
        n.op.name in ("to", "reshape") or \
        (n.op.name == "permute" and tuple(n.attrs["dims"]) == tuple(range(x.rank)))
    if not same:
        return None
    replace_value(g, n.out, x)
    g.nodes.remove(n)
    return f"%{n.out.name} = {n.op.name}(%{x.name}) is %{x.name}"


def _reshape_of_reshape(g: Graph, n: Node, use: dict) -> str | None:
    """reshape(reshape(x, s1), s2)  ->  reshape(x, s2)"""
    if n.op.name != "reshape":
        return None
    x = n.inputs[0]
    if x.producer is None or x.producer.op.name != "reshape":
        return None
    inner = x.producer.inputs[0]
    n.inputs = (inner,)
    n.attrs = dict(n.attrs, shape=tuple(g.dims(n.out)))
    return f"%{n.out.name}: reshape of reshape %{x.name} -> reshape of %{inner.name}"


def _slice_of_slice(g: Graph, n: Node, use: dict) -> str | None:
    """slice(slice(x, a, s1, k1), a, s2, k2)  ->  slice(x, a, s1 + s2*k1, k1*k2)   (same axis)"""
    if n.op.name != "slice":
        return None
    x = n.inputs[0]
    inner = x.producer
    if inner is None or inner.op.name != "slice" or inner.attrs["dim"] != n.attrs["dim"]:
        return None
    a, b = inner.attrs, n.attrs
    n.inputs = inner.inputs
    n.attrs = dict(b, start=as_expr(a["start"]) + as_expr(b["start"]) * a["step"],
                   step=a["step"] * b["step"])
    return f"%{n.out.name}: slice of slice %{x.name} -> one slice"


def _permute_of_permute(g: Graph, n: Node, use: dict) -> str | None:
    """permute(permute(x, p), q)  ->  permute(x, [p[i] for i in q])   (identity: removed next)"""
    if n.op.name != "permute":
        return None
    x = n.inputs[0]
    inner = x.producer
    if inner is None or inner.op.name != "permute" or x.id in g.materialize:
        return None   # a materialized permute is a buffer (channels_last): read it, not its input
    p = [int(d) % x.rank for d in inner.attrs["dims"]]
    n.inputs = inner.inputs
    n.attrs = dict(n.attrs, dims=tuple(p[int(i) % x.rank] for i in n.attrs["dims"]))
    return f"%{n.out.name}: permute of permute %{x.name} -> one permute"


def _linear_of_permute(g: Graph, n: Node, use: dict) -> str | None:
    """linear(permute(x, d), W)  ->  permute(linear(x, W), d)   (d keeps the last axis in place)

    A linear acts on the last axis alone, so it commutes with a permutation of the others. On a
    permuted operand torch runs one small GEMM per leading index (a batched matmul of M = the
    inner extent, reading W once per batch: ViT's ``(S, N, E)`` in-projection); on ``x`` it is one
    GEMM over all rows, and the permutation is fused into the consumers."""
    if n.op.name != "linear":
        return None
    p, w = n.inputs
    perm = p.producer
    if perm is None or perm.op.name != "permute":
        return None
    dims = tuple(int(d) % p.rank for d in perm.attrs["dims"])
    if dims[-1] != p.rank - 1 or dims == tuple(range(p.rank)):
        return None
    x = perm.inputs[0]
    rows = g.apply("linear", x, w, name=f"{n.out.name}_rows", where=n.where)
    g.nodes.insert(g.nodes.index(n), g.nodes.pop())
    n.op, n.inputs, n.attrs = OPS["permute"], (rows,), {"dims": dims}
    n.out.dtype, n.compute_dtype = infer_dtypes(n)
    return f"%{n.out.name}: linear of permute %{p.name} -> permute of linear %{rows.name}"


REWRITES: list[tuple[str, Rule]] = [
    ("identity", _identity),                    # x * 1, x + 0, to(x, x.dtype), ...  ->  x
    ("reshape_of_reshape", _reshape_of_reshape),  # reshape(reshape(x)) -> reshape(x)
    ("slice_of_slice", _slice_of_slice),        # slice(slice(x)) on one axis -> slice(x)
    ("permute_of_permute", _permute_of_permute),  # permute(permute(x)) -> permute(x)
    ("shift_scale", _shift_scale),              # (y + c) * s  ->  y * s + c * s
    ("conv_scale", _conv_scale),                # conv2d(x, W) * s  ->  conv2d(x, W * s)
    ("shift_shift", _shift_shift),              # (y + a) + b  ->  y + (a + b)
    ("linear_of_permute", _linear_of_permute),  # linear(permute(x)) -> permute(linear(x))
]


def rewrite(g: Graph, log: list[str], rules: list[tuple[str, Rule]] | None = None) -> Graph:
    """Apply ``rules`` (default ``REWRITES``) until none applies (each rule keeps shapes, dtypes
    and values of the graph outputs). Leaves: no rule matches."""
    changed = True
    rounds = 0
    while changed and rounds < 50:
        changed, rounds = False, rounds + 1
        for name, rule in REWRITES if rules is None else rules:
            use = uses(g)
            for n in list(g.nodes):
                if n not in g.nodes:
                    continue
                what = rule(g, n, use)
                if what is not None:
                    log.append(f"{name}: {what}")
                    changed = True
                    use = uses(g)
    return g
