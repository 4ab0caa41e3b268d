"""Pattern rewrites as data: ``REWRITES`` lists ``(name, rule)`` pairs, each with a one-line
comment; a rule looks at one node and either rewrites the graph around it (returning a description)
or returns None. ``rewrite`` applies the list to a fixed point.

Folding batch norm into a convolution needs no rule of its own: batch norm lowers to
``x * scale + shift`` per channel (``scale``/``shift`` folded to constants), ``conv_scale`` moves
``scale`` into the weight where the weight is copied anyway (a kxk kernel in NHWC), and ``shift``
(with ``scale`` elsewhere) stays elementwise, fused as the epilogue of the kernel that reads the
convolution. A convolution with a bias (``conv + b``) first has the scale
distributed over the bias (``shift_scale``), and the two shifts then merge (``shift_shift``)."""

from __future__ import annotations

from typing import Callable

import torch

from ..dims import as_expr, prod
from ..ir.graph import Graph, Node, Value
from ..ir.ops import OpDef, OpKind, Ops, infer_dtypes, is_scalar
from ..ir.ops.library import SDPA_NLHD
from .core import constant_of, derive, replace_value, uses

Rule = Callable[[Graph, Node, dict], "str | None"]


def _sole_reader(g: Graph, v: Value, use: dict) -> bool:
    """Whether one node reads ``v`` and the graph does not return it: a rule may then change
    what ``v`` holds, or drop it, rewriting only that reader."""
    return len(use.get(v.id, ())) == 1 and not any(o is v for o in g.outputs)


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
    """conv2d(x, W) * s  ->  conv2d(x, W * s[:, None, None, None])   (s per output channel),
    where ``channels_last`` copies W anyway (``nhwc_weight_is_a_copy``: a kxk kernel in NHWC).
    Elsewhere (1x1 kernels, NCHW) W * s would be a second copy of the module's weight, so
    ``* s`` stays in the epilogue that adds the shift (one multiply per element, no memory)."""
    from .layout import nhwc_weight_is_a_copy   # layout imports this module
    if n.op is not Ops.mul or len(n.inputs) != 2:
        return None
    for y, s in (n.inputs, n.inputs[::-1]):
        if not isinstance(y, Value) or y.producer is None or y.producer.op is not Ops.conv2d or \
                not _sole_reader(g, y, use) or is_scalar(s) or y.dtype != n.out.dtype:
            continue
        vec = _channel_vector(g, s, y.rank)
        conv = y.producer
        w = constant_of(g, conv.inputs[1])
        if vec is None or w is None or vec.numel() != w.shape[0] or \
                not nhwc_weight_is_a_copy(w, g.config):
            continue
        w2 = derive(g, "scale_out_channels", (conv.inputs[1], s),
                    name=f"{conv.inputs[1].name}*{s.name}", dtype=w.dtype)
        conv.inputs = (conv.inputs[0], w2)
        replace_value(g, n.out, y)
        g.nodes.remove(n)
        return f"%{n.out.name}: conv2d %{y.name} scaled by %{s.name} -> weight %{w2.name}"
    return None


def _shifted(g: Graph, n: Node, op: OpDef, use: dict) -> tuple[Node, Value, Value, Value] | None:
    """Matches ``n = (y + c) op t``: ``n`` a binary ``op`` of a single-use add ``inner`` with one
    constant operand ``c``, and a constant ``t``; every value has ``y``'s dtype and the result
    has ``y``'s shape. Returns (inner, y, c, t) or None."""
    if n.op is not op or len(n.inputs) != 2:
        return None
    for a, t in (n.inputs, n.inputs[::-1]):
        if not isinstance(a, Value) or a.producer is None or not _sole_reader(g, a, use) or \
                is_scalar(t) or constant_of(g, t) is None:
            continue
        inner = a.producer
        if inner.op is not Ops.add or len(inner.inputs) != 2 or \
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
    hit = _shifted(g, n, Ops.mul, use)
    if hit is None:
        return None
    inner, y, c, s = hit
    cs = derive(g, Ops.mul, (c, s), name=f"{c.name}*{s.name}", dtype=y.dtype)
    inner.op, inner.inputs = n.op, (y, s)       # the add becomes y * s ...
    n.op, n.inputs = Ops.add, (inner.out, cs)  # ... and the mul adds c * s
    return f"%{n.out.name}: (%{y.name} + %{c.name}) * %{s.name} -> %{y.name} * %{s.name} + " \
           f"%{cs.name}"


def _shift_shift(g: Graph, n: Node, use: dict) -> str | None:
    """(y + a) + b  ->  y + (a + b)   (a, b constants broadcasting into y)"""
    hit = _shifted(g, n, Ops.add, use)
    if hit is None:
        return None
    inner, y, a, b = hit
    ab = derive(g, Ops.add, (a, b), name=f"{a.name}+{b.name}", dtype=y.dtype)
    n.inputs = (y, ab)
    g.nodes.remove(inner)
    return f"%{n.out.name}: (%{y.name} + %{a.name}) + %{b.name} -> %{y.name} + %{ab.name}"


def _identity(g: Graph, n: Node, use: dict) -> str | None:
    """x * 1, x + 0, x - 0, x / 1, to(x, x.dtype), same-shape reshape, cat([x])  ->  x"""
    x = n.inputs[0]
    if not isinstance(x, Value) or x.dtype != n.out.dtype or g.dims(x) != g.dims(n.out):
        return None
    other = n.inputs[1] if len(n.inputs) == 2 else None
    same = (n.op in (Ops.mul, Ops.div) and other == 1 and not isinstance(other, bool)) or \
        (n.op in (Ops.add, Ops.sub) and other == 0 and not isinstance(other, bool)) or \
        n.op in (Ops.to, Ops.reshape) or (n.op is Ops.cat and len(n.inputs) == 1) or \
        (n.op is Ops.permute and tuple(n.attrs["dims"]) == tuple(range(x.rank)))
    if not same:
        return None
    replace_value(g, n.out, x)
    g.nodes.remove(n)
    return f"%{n.out.name} = {n.op.name}(%{x.name}) is %{x.name}"


_MANTISSA = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}
"""Significand bits of each float dtype: the integers up to 2**bits are exact in it."""


def holds_exactly(wide: torch.dtype, narrow: torch.dtype) -> bool:
    """Whether every value of ``narrow`` converts to ``wide`` and back unchanged (NaN and the
    infinities included): a float of more bits (float16 and bfloat16 into float32 or float64,
    float32 into float64), an integer of a range that contains it, a float whose significand
    holds its range; any dtype for bool, which converts back as ``!= 0``."""
    if narrow is torch.bool:
        return not wide.is_complex
    if wide is torch.bool or wide.is_complex or narrow.is_complex:
        return False
    if narrow.is_floating_point:
        return wide.is_floating_point and torch.finfo(wide).bits > torch.finfo(narrow).bits
    r = torch.iinfo(narrow)
    if wide.is_floating_point:
        return max(r.max, -r.min) <= 2 ** _MANTISSA[wide]
    w = torch.iinfo(wide)
    return w.min <= r.min and r.max <= w.max


def _cast_round_trip(g: Graph, n: Node, use: dict) -> str | None:
    """to(to(y, T), y.dtype)  ->  y   when T holds every value of y.dtype (f16 -> f32 -> f16)"""
    x = n.inputs[0]
    if n.op is not Ops.to or x.producer is None or x.producer.op is not Ops.to:
        return None
    y = x.producer.inputs[0]
    if not isinstance(y, Value) or y.dtype != n.out.dtype or not holds_exactly(x.dtype, y.dtype):
        return None
    replace_value(g, n.out, y)
    g.nodes.remove(n)
    return f"%{n.out.name} = to(to(%{y.name}, {str(x.dtype).removeprefix('torch.')})) is %{y.name}"


def _reshape_of_reshape(g: Graph, n: Node, use: dict) -> str | None:
    """reshape(reshape(x, s1), s2)  ->  reshape(x, s2)"""
    if n.op is not Ops.reshape:
        return None
    x = n.inputs[0]
    if x.producer is None or x.producer.op is not Ops.reshape:
        return None
    inner = x.producer.inputs[0]
    n.inputs = (inner,)
    n.attrs = dict(n.attrs, shape=tuple(g.dims(n.out)))
    return f"%{n.out.name}: reshape of reshape %{x.name} -> reshape of %{inner.name}"


def _slice_of_slice(g: Graph, n: Node, use: dict) -> str | None:
    """slice(slice(x, a, s1, k1), a, s2, k2)  ->  slice(x, a, s1 + s2*k1, k1*k2)   (same axis)"""
    if n.op is not Ops.slice:
        return None
    x = n.inputs[0]
    inner = x.producer
    if inner is None or inner.op is not Ops.slice or inner.attrs["dim"] != n.attrs["dim"]:
        return None
    a, b = inner.attrs, n.attrs
    n.inputs = inner.inputs
    n.attrs = dict(b, start=as_expr(a["start"]) + as_expr(b["start"]) * a["step"],
                   step=a["step"] * b["step"])
    return f"%{n.out.name}: slice of slice %{x.name} -> one slice"


def _permute_of_permute(g: Graph, n: Node, use: dict) -> str | None:
    """permute(permute(x, p), q)  ->  permute(x, [p[i] for i in q])   (identity: removed next)"""
    if n.op is not Ops.permute:
        return None
    x = n.inputs[0]
    inner = x.producer
    if inner is None or inner.op is not Ops.permute or x.id in g.materialize:
        return None   # a materialized permute is a buffer (channels_last): read it, not its input
    p = [int(d) % x.rank for d in inner.attrs["dims"]]
    n.inputs = inner.inputs
    n.attrs = dict(n.attrs, dims=tuple(p[int(i) % x.rank] for i in n.attrs["dims"]))
    return f"%{n.out.name}: permute of permute %{x.name} -> one permute"


def _linear_of_row_merge(g: Graph, n: Node, use: dict) -> str | None:
    """linear(reshape(y, [*R, K]), W)  ->  reshape(linear(reshape(y, [*Y, K]), W), [*R, O])
    (y = [*Y, *T] with T's axes merging into K, Y re-grouped into R)

    A linear acts on each row alone and both reshapes keep the rows in order, so the regrouping
    of rows moves past it; a permute of y's row axes can then move too (``reshape_of_permute``,
    ``linear_of_permute``). nn.MultiheadAttention's ``attn.permute(2, 0, 1, 3).reshape(L*N, E)``
    before the output projection is a copy; this way the projection reads the attention
    result where it lies."""
    if n.op is not Ops.linear:
        return None
    x, *wb = n.inputs
    r = x.producer
    if r is None or r.op is not Ops.reshape or x.id in g.materialize:
        return None
    y = r.inputs[0]
    dy, dx = g.dims(y), g.dims(x)
    j = next((j for j in range(len(dy) - 1, 0, -1) if prod(dy[j:]) is dx[-1]), None)
    if j is None or list(dy[:j]) == list(dx[:-1]):
        return None
    inner = g.restate(n, Ops.reshape, (y,), {"shape": (*dy[:j], dx[-1])}, (*dy[:j], dx[-1]),
                      f"{x.name}_rows")
    out = g.dims(n.out)
    rows = g.restate(n, Ops.linear, (inner, *wb), n.attrs, (*dy[:j], out[-1]),
                     f"{n.out.name}_rows")
    n.op, n.inputs, n.attrs = Ops.reshape, (rows,), {"shape": tuple(out)}
    return f"%{n.out.name}: linear of row-merged %{x.name} -> rows regrouped after linear " \
           f"%{rows.name}"


def _reshape_of_permute(g: Graph, n: Node, use: dict) -> str | None:
    """reshape(permute(x, p), [*P, M])  ->  permute(reshape(x, [*X, M]), [*p[:k], k])
    (the reshape merges the last axes k.. of the permute, which p keeps in place)"""
    if n.op is not Ops.reshape:
        return None
    y = n.inputs[0]
    pn = y.producer
    if pn is None or pn.op is not Ops.permute or y.id in g.materialize:
        return None
    p = [int(d) % y.rank for d in pn.attrs["dims"]]
    dy, dn = g.dims(y), g.dims(n.out)
    k = len(dn) - 1
    if k < 1 or y.rank - k < 2 or any(p[i] != i for i in range(k, y.rank)) or \
            list(dn[:-1]) != list(dy[:k]) or prod(dy[k:]) is not dn[-1]:
        return None
    x = pn.inputs[0]
    dx = g.dims(x)
    merged = g.restate(n, Ops.reshape, (x,), {"shape": (*dx[:k], dn[-1])}, (*dx[:k], dn[-1]),
                       f"{n.out.name}_merged")
    n.op, n.inputs, n.attrs = Ops.permute, (merged,), {"dims": (*p[:k], k)}
    return f"%{n.out.name}: reshape of permute %{y.name} -> permute of reshape %{merged.name}"


def _linear_of_permute(g: Graph, n: Node, use: dict) -> str | None:
    """linear(permute(x, d), W)  ->  permute(linear(x, W), d)   (d keeps the last axis in place)

    A linear acts on the last axis alone, so it commutes with a permutation of the others. On a
    permuted operand torch runs one small GEMM per leading index (a batched matmul of M = the
    inner extent, reading W once per batch: ViT's ``(S, N, E)`` in-projection); on ``x`` it is one
    GEMM over all rows, and the permutation is fused into the consumers."""
    if n.op is not Ops.linear:
        return None
    p, *wb = n.inputs
    perm = p.producer
    if perm is None or perm.op is not Ops.permute:
        return None
    dims = tuple(int(d) % p.rank for d in perm.attrs["dims"])
    if dims[-1] != p.rank - 1 or dims == tuple(range(p.rank)):
        return None
    x = perm.inputs[0]
    rows = g.apply(Ops.linear, x, *wb, name=f"{n.out.name}_rows", where=n.where, insert_before=n)
    n.op, n.inputs, n.attrs = Ops.permute, (rows,), {"dims": dims}
    n.out.dtype, n.compute_dtype = infer_dtypes(n)
    return f"%{n.out.name}: linear of permute %{p.name} -> permute of linear %{rows.name}"


def _matmul_of_weight(g: Graph, n: Node, use: dict) -> str | None:
    """matmul(x, W)  ->  linear(x, permute(W, (1, 0)))   (W a rank-2 constant; folded next)

    GPT-2's Conv1D (``addmm(b, x, W)``) becomes a linear, whose bias ``linear_bias`` can take."""
    if n.op is not Ops.matmul or len(n.inputs) != 2:
        return None
    x, w = n.inputs
    if w.rank != 2 or constant_of(g, w) is None or x.rank < 1 or not w.dtype.is_floating_point:
        return None
    wt = g.apply(Ops.permute, w, dims=(1, 0), name=f"{w.name}_t", where=n.where, insert_before=n)
    n.op, n.inputs, n.attrs = Ops.linear, (x, wt), {}
    return f"%{n.out.name}: matmul by the constant %{w.name} -> linear"


def _feeds_libraries(g: Graph, v: Value, use: dict) -> bool:
    """Every reader of ``v`` is a library call, directly or through coordinate transforms (so
    ``v`` is a buffer no generated kernel reads), and ``v`` is no graph output (a transform no
    one reads is dead: a rewrite left it)."""
    return not any(o is v for o in g.outputs) and all(
        u.op.kind is OpKind.LIBRARY or (u.op.kind.is_transform and _feeds_libraries(g, u.out, use))
        for u in use.get(v.id, ()))


def _linear_bias(g: Graph, n: Node, use: dict) -> str | None:
    """linear(x, W) + b  ->  linear(x, W, b)   (b a constant [O]; the sum read only by library
    calls; also through a permute keeping the last axis: permute(linear(x, W), d) + b)

    A bias is fused for free into the kernel that reads a linear's result; a result read only by
    library calls (BERT's and GPT-2's q, k, v, viewed into heads for attention) would get a kernel
    of its own, one pass over it, for the add. cuBLAS adds it in the GEMM's epilogue instead.
    In float16 and bfloat16 the bias always goes into the linear: eager's ``addmm`` rounds the
    sum once, a kernel's add would round the product first (bf16 ``round(linear(x))`` was off by
    one where the sum sat at x.5 after the double rounding: fuzz case ``da4b6b95fc98``)."""
    if n.op is not Ops.add or len(n.inputs) != 2 or not (
            n.out.dtype in (torch.float16, torch.bfloat16) or _feeds_libraries(g, n.out, use)):
        return None
    for y, b in (n.inputs, n.inputs[::-1]):
        t = constant_of(g, b) if isinstance(b, Value) else None
        if t is None or t.dim() != 1 or t.dtype != n.out.dtype or not isinstance(y, Value) or \
                y.dtype != n.out.dtype or g.dims(n.out) != g.dims(y) or \
                not g.dims(y)[-1].is_lit(t.shape[0]) or not _sole_reader(g, y, use):
            continue
        perm = y.producer   # a permute keeping the last axis commutes with the bias (ViT)
        if perm is not None and perm.op is Ops.permute and \
                int(perm.attrs["dims"][-1]) % y.rank == y.rank - 1:
            lin_out = perm.inputs[0]
        else:
            perm, lin_out = None, y
        lin = lin_out.producer
        if lin is None or lin.op is not Ops.linear or len(lin.inputs) != 2 or \
                not _sole_reader(g, lin_out, use):
            continue
        lin.inputs = (*lin.inputs, b)
        replace_value(g, n.out, lin.out if perm is None else perm.out)
        g.nodes.remove(n)
        return f"%{n.out.name}: linear %{lin.out.name} + bias %{b.name} -> one linear"
    return None


def _sdpa_heads_inner(g: Graph, n: Node, use: dict) -> str | None:
    """sdpa(q, k, v)  ->  permute(sdpa(q, k, v, layout="NLHD"), (0, 2, 1, 3))   (rank 4)

    The CUDA attention kernels write [N, L, H, D] and torch returns it as a transposed view; as
    an [N, H, L, D] buffer it was copied once to be contiguous and once more by the usual
    ``transpose(1, 2).reshape(N, L, H*D)`` before the output projection. As [N, L, H, D] both
    go: the transpose cancels against this permute and the reshape is a view."""
    if n.op is not Ops.sdpa or n.out.rank != 4 or n.attrs.get("layout", "NHLD") != "NHLD":
        return None
    y = g.restate(n, Ops.sdpa, n.inputs, {**n.attrs, "layout": "NLHD"},
                  [n.out.shape[i] for i in SDPA_NLHD], f"{n.out.name}_nlhd")
    n.op, n.inputs, n.attrs = Ops.permute, (y,), {"dims": SDPA_NLHD}
    return f"%{n.out.name}: sdpa as [N, L, H, D] (%{y.name})"



def _softmax_written_out(g: Graph, n: Node, use: dict) -> str | None:
    """exp(x - amax(x, a)) / sum(exp(x - amax(x, a)), a)  ->  softmax(x, a)   (one axis, keepdim)

    One row kernel (two passes over each row) instead of three (the amax, the sum, the
    division: four passes). Eager's refusal of an empty row (amax) stays, as a requirement."""
    if n.op is not Ops.div or not all(isinstance(v, Value) for v in n.inputs):
        return None
    e, s = n.inputs
    sm, ex = s.producer, e.producer
    if sm is None or sm.op is not Ops.sum or sm.inputs[0] is not e or ex is None or \
            ex.op is not Ops.exp or not isinstance(ex.inputs[0], Value):
        return None
    d = ex.inputs[0].producer
    if d is None or d.op is not Ops.sub or not all(isinstance(v, Value) for v in d.inputs):
        return None
    x, m = d.inputs
    mx = m.producer
    if mx is None or mx.op is not Ops.amax or mx.inputs[0] is not x:
        return None
    axes = tuple(sm.attrs["dims"])
    if len(axes) != 1 or tuple(mx.attrs["dims"]) != axes or not sm.attrs["keepdim"] or \
            not mx.attrs["keepdim"] or not x.dtype.is_floating_point or \
            len({x.dtype, e.dtype, s.dtype, n.out.dtype}) != 1 or g.dims(x) != g.dims(n.out):
        return None
    row = g.dims(x)[axes[0]]
    if not (row.is_lit() and row.value > 0):
        g.require(row - 1, mx, "reduces a non-empty row; eager raises on an empty one")
    n.op, n.inputs, n.attrs = Ops.softmax, (x,), {"axes": axes}
    return f"%{n.out.name}: exp(%{x.name} - amax) / sum -> softmax(%{x.name}, axis {axes[0]})"


def _norm_affine(g: Graph, n: Node, use: dict) -> str | None:
    """layer_norm(x) * w  ->  layer_norm(x, w);   layer_norm(x, w) + b  ->  layer_norm(x, w, b)
    (w, b broadcast against x: ``affine="full"``; float32 and float64)

    The affine epilogue of a norm without its own weight and bias (GroupNorm-like modulation,
    ``F.layer_norm(x, s) * scale + shift``) is computed in the row kernel's output pass instead
    of a kernel of its own that reads the normalized tensor back. In double, rounded once: a
    16-bit result would differ from eager's three roundings, so those stay separate."""
    if n.op not in (Ops.mul, Ops.add) or len(n.inputs) != 2 or \
            n.out.dtype not in (torch.float32, torch.float64):
        return None
    weight = n.op is Ops.mul   # mul: a norm without affine; add: one with a full weight
    for y, p in (n.inputs, n.inputs[::-1]):
        ln = y.producer if isinstance(y, Value) else None
        if ln is None or ln.op is not Ops.layer_norm or not isinstance(p, Value) or p is y or \
                len(ln.inputs) != (1 if weight else 2) or \
                (not weight and ln.attrs.get("affine") != "full") or \
                {y.dtype, p.dtype} != {n.out.dtype} or g.dims(n.out) != g.dims(y) or \
                not _sole_reader(g, y, use):
            continue
        n.op, n.inputs = ln.op, (*ln.inputs, p)
        n.attrs = {**ln.attrs, "affine": "full"}
        g.nodes.remove(ln)
        return f"%{n.out.name}: layer_norm %{y.name} {'*' if weight else '+'} %{p.name} -> " \
               f"its {'weight' if weight else 'bias'}"
    return None


def _merge_linears(g: Graph, n: Node, use: dict) -> str | None:
    """linear(x, W1, b1), linear(x, W2, b2), ..  ->  y = linear(x, [W1; W2; ..], [b1; b2; ..]),
    each result a slice of y's last axis   (constant weights, and biases if any, of one dtype)

    Attention's q, k and v projections (BERT), a SwiGLU's gate and up: one GEMM reads ``x``
    once, with the weights side by side, instead of one GEMM each. The merged weights are new
    constants: their bytes again on the device, the module keeping its own."""
    if n.op is not Ops.linear or not isinstance(n.inputs[0], Value):
        return None
    x = n.inputs[0]

    def consts(m: Node) -> list[torch.Tensor] | None:
        ts = [constant_of(g, p) if isinstance(p, Value) else None for p in m.inputs[1:]]
        return ts if all(t is not None for t in ts) else None

    mine = consts(n)
    if mine is None:
        return None
    sibs = [(m, ts) for m in use.get(x.id, ()) if m.op is Ops.linear and m.inputs[0] is x and
            len(m.inputs) == len(n.inputs) and (ts := consts(m)) is not None and
            all(t.dtype == mine[0].dtype for t in ts) and ts[0].shape[1] == mine[0].shape[1]]
    if len(sibs) < 2 or sibs[0][0] is not n:   # placed where the first of them was
        return None
    parts = [derive(g, Ops.cat, tuple(m.inputs[1 + k] for m, _ in sibs), {"dim": 0},
                    name=f"{p.name}_cat{len(sibs)}", dtype=p.dtype)
             for k, p in enumerate(n.inputs[1:])]
    y = g.apply(Ops.linear, x, *parts, name=f"{n.out.name}_merged", where=n.where,
                insert_before=n)
    start = 0
    for m, ts in sibs:
        width = ts[0].shape[0]
        m.op, m.inputs = Ops.slice, (y,)
        m.attrs = {"dim": x.rank - 1, "start": start, "length": width, "step": 1}
        start += width
    return f"%{y.name}: {len(sibs)} linears of %{x.name} " \
           f"({', '.join('%' + m.out.name for m, _ in sibs)}) as one, each a slice"


REWRITES: list[tuple[str, Rule]] = [
    ("identity", _identity),                    # x * 1, x + 0, to(x, x.dtype), cat([x])  ->  x
    ("cast_round_trip", _cast_round_trip),      # to(to(y, wider), y.dtype)  ->  y
    ("reshape_of_reshape", _reshape_of_reshape),  # reshape(reshape(x)) -> reshape(x)
    ("slice_of_slice", _slice_of_slice),        # slice(slice(x)) on one axis -> slice(x)
    ("permute_of_permute", _permute_of_permute),  # permute(permute(x)) -> permute(x)
    ("shift_scale", _shift_scale),              # (y + c) * s  ->  y * s + c * s
    ("conv_scale", _conv_scale),                # conv2d(x, W) * s  ->  conv2d(x, W * s)
    ("shift_shift", _shift_shift),              # (y + a) + b  ->  y + (a + b)
    ("linear_of_row_merge", _linear_of_row_merge),  # linear(reshape rows) -> reshape(linear)
    ("reshape_of_permute", _reshape_of_permute),  # merge the kept tail before the permute
    ("linear_of_permute", _linear_of_permute),  # linear(permute(x)) -> permute(linear(x))
    ("sdpa_heads_inner", _sdpa_heads_inner),    # sdpa -> permute(sdpa as [N, L, H, D])
    ("matmul_of_weight", _matmul_of_weight),    # matmul(x, W const) -> linear(x, W.T)
    ("linear_bias", _linear_bias),              # linear + b read by libraries -> linear(b)
    ("merge_linears", _merge_linears),          # linear(x, Wi) .. -> slices of linear(x, [Wi])
    ("softmax_written_out", _softmax_written_out),  # exp(x - amax) / sum(..) -> softmax(x)
    ("norm_affine", _norm_affine),              # layer_norm(x) * w + b -> layer_norm(x, w, b)
]


def rewrite(g: Graph, log: list[str], rules: list[tuple[str, Rule]] | None = None) -> Graph:
    """Apply ``rules`` (default ``REWRITES``) until none applies (each rule keeps shapes, dtypes
    and values of the graph outputs). Leaves: no rule matches."""
    changed = True
    rounds = 0
    use = _Uses(g)
    while changed and rounds < 50:
        changed, rounds = False, rounds + 1
        for name, rule in REWRITES if rules is None else rules:
            alive = set(map(id, g.nodes))
            for n in list(g.nodes):
                if id(n) not in alive:
                    continue
                what = rule(g, n, use)
                if what is not None:
                    log.append(f"{name}: {what}")
                    changed = True
                    use.stale()
                    alive = set(map(id, g.nodes))
    return g


class _Uses:
    """``core.uses(g)`` for the rules, recomputed at the first read after a change (most rules
    return before reading it: a change costs one walk of the graph, not one per rule)."""

    def __init__(self, g: Graph):
        self.g, self._map = g, None

    def get(self, key: int, default=None):
        if self._map is None:
            self._map = uses(self.g)
        return self._map.get(key, default)

    def stale(self) -> None:
        self._map = None
