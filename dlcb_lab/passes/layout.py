"""Layouts. ``channels_last`` runs convolutions in NHWC; ``assign_layouts`` records, for every
value, whether it is a row-major buffer (materialized: a graph input, a library or reduction
result, a graph output, or a library operand's base), a view of another value (a pure coordinate
transform, applied by the host when a library op reads it), or inlined (recomputed by each kernel
that reads it). Buffers are contiguous with strides given as dimension expressions.

There is one buffer layout, row-major: a layout change is a ``permute`` in the IR, which kernels
fuse like any coordinate transform and which cancels against its inverse (``rewrite``'s
``permute_of_permute``). So channels-last needs no strided buffers, no second indexing scheme and
no layout in the kernel ABI: a convolution reads and writes [N, H, W, C] buffers, and the kernels
around it read those through permutes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import Config
from ..dims import Expr, lit
from ..ir.graph import Graph, Node, Value
from ..ir.ops import OpKind, Ops
from .core import uses
from .rewrite import REWRITES, rewrite


@dataclass(frozen=True)
class Layout:
    kind: str                     # "buffer", "view" or "inlined"
    strides: tuple[Expr, ...]     # row-major strides (buffers); () otherwise
    base: str = ""                # views: the buffer they read

    def __repr__(self) -> str:
        if self.kind == "buffer":
            return f"buffer strides [{', '.join(map(repr, self.strides))}]"
        return f"view of %{self.base}" if self.kind == "view" else "inlined"


def row_major_strides(dims) -> tuple[Expr, ...]:
    out, s = [], lit(1)
    for d in reversed(dims):
        out.append(s)
        s = s * d
    return tuple(out[::-1])


def assign_layouts(g: Graph, log: list[str]) -> Graph:
    """Set ``g.layouts`` (value name -> ``Layout``) for every value. Changes nothing else."""
    mats = {v.id for v in g.materialized()} | {v.id for v in g.inputs}
    layouts = {}
    for v in list(g.inputs) + [n.out for n in g.nodes]:
        if v.id in mats:
            layouts[v.name] = Layout("buffer", row_major_strides(g.dims(v)))
        elif v.producer is not None and v.producer.op.kind.is_transform:
            base, _ = g.view_chain(v)
            layouts[v.name] = Layout("view" if base.id in mats else "inlined", (), base.name)
        else:
            layouts[v.name] = Layout("inlined", ())
    g.layouts = layouts
    counts = {k: sum(1 for x in layouts.values() if x.kind == k) for k in ("buffer", "view",
                                                                           "inlined")}
    log.append(", ".join(f"{n} {k}" for k, n in counts.items()))
    return g


NHWC, NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
CHANNELS_LAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""Convolutions in these dtypes run channels-last (cuDNN has no NHWC float64 kernels)."""


def nhwc_weight_is_a_copy(w: torch.Tensor, config: Config) -> bool:
    """Whether ``channels_last`` will hold the convolution weight ``w`` [K, C, R, S] as a new
    tensor: a kernel wider than 1x1 in NHWC ([K, R, S, C] is another order of its elements), under
    ``config.channels_last``. A 1x1 kernel's two orders coincide, so its NHWC convolution reads
    the module's own storage."""
    return config.channels_last and \
        w.dtype in CHANNELS_LAST_DTYPES and w.dim() == 4 and w.shape[2] * w.shape[3] > 1

POOLS = (Ops.max_pool2d, Ops.avg_pool2d, Ops.adaptive_avg_pool2d)
"""Window reductions that run NHWC beside the convolutions (their kernels then read and write
[N, H, W, C] buffers, coalesced along C)."""

_SIMPLIFY = [(name, rule) for name, rule in REWRITES
             if name in ("identity", "permute_of_permute")]


def channels_last(g: Graph, log: list[str]) -> Graph:
    """Run every float convolution in NHWC, the layout cuDNN's tensor-core kernels read and write
    (NCHW operands cost them a transposition each way: 64 per ResNet-50 call on the H200), and
    the pooling windows between them (``POOLS``).

    ``conv2d(x, W)`` becomes ``permute(conv2d(permute(x, NHWC), permute(W, NHWC), layout="NHWC"),
    NCHW)``; the weight's permute folds to a constant (``fold_constants``, next); permutes
    compose and cancel (a convolution feeding a convolution reads its [N, H, W, C] result
    directly). An operand computed by generated code (a BN/activation epilogue, a residual add)
    is then materialized in NHWC order: its kernel writes [N, H, W, C] and every other reader of
    the NCHW value reads that buffer through the inverse permute, so one buffer serves both (a
    residual stream). The decision is by graph, not by shape: it holds for every batch size and
    resolution the compile serves (measured per model and batch: README). Expects batch norm
    already folded (``rewrite``). Leaves: float ``conv2d`` nodes with ``layout="NHWC"``
    (float32 depthwise ones as generated window sums, ``_window_sum``, unless
    ``g.config.depthwise == "library"``); ``g.config.channels_last`` False: the graph unchanged."""
    if not g.config.channels_last:   # as in nhwc_weight_is_a_copy
        log.append("off (config channels_last=False)")
        return g
    convs = [n for n in g.nodes if n.op is Ops.conv2d and n.out.dtype in CHANNELS_LAST_DTYPES
             and n.attrs.get("layout", "NCHW") == "NCHW"]
    pools = [n for n in g.nodes if n.op in POOLS and n.out.rank == 4 and
             n.attrs.get("layout", "NCHW") == "NCHW"] if convs else []
    made: dict[tuple[int, tuple[int, ...]], Value] = {}
    generated = g.config.depthwise != "library"
    windowed: list[tuple[Node, Node]] = []   # (a window sum's first node, its convolution)
    for n in [n for n in g.nodes if n in convs or n in pools]:
        if generated and _depthwise(g, n):
            y, head = _window_sum(g, n, _permute(g, n.inputs[0], NHWC, made))
            windowed.append((head, n))
        else:
            ins = [_permute(g, x, NHWC, made) for x in n.inputs]   # conv: input and weight
            y = g.restate(n, n.op, ins, {**n.attrs, "layout": "NHWC"},
                          [n.out.shape[i] for i in NHWC], f"{n.out.name}_nhwc")
        n.op, n.inputs, n.attrs = Ops.permute, (y,), {"dims": NCHW}
        log.append(f"%{n.out.name}: {y.producer.op.name} in NHWC (%{y.name})")
    rewrite(g, log, _SIMPLIFY)
    use = uses(g)
    operands = [(n.inputs[0], n) for n in g.nodes
                if n.op is Ops.conv2d and n.attrs.get("layout") == "NHWC"] + \
        [(head.inputs[0], n) for head, n in windowed]
    for xp, n in operands:
        p = xp.producer
        if p is None or p.op is not Ops.permute or xp.id in g.materialize:
            continue
        v = p.inputs[0]
        if v.producer is None or v.producer.op.kind.materialized or \
                v.producer.op.kind is OpKind.LIBRARY or v in g.outputs:
            continue   # an input, or a buffer already: the host hands cuDNN a permuted view
        g.materialize.add(xp.id)
        others = [u for u in use.get(v.id, ()) if u is not p]
        if others:
            dims = [int(d) % 4 for d in p.attrs["dims"]]
            back = _permute(g, xp, tuple(dims.index(i) for i in range(4)), made)
            for u in others:
                u.inputs = tuple(back if a is v else a for a in u.inputs)
        log.append(f"%{xp.name}: operand of %{n.out.name} materialized in NHWC"
                   + (f" ({len(others)} other readers of %{v.name} read it)" if others else ""))
        use = uses(g)
    return rewrite(g, log, _SIMPLIFY)


def _depthwise(g: Graph, n: Node) -> bool:
    """A float32 convolution with one filter per channel (groups == in == out channels)."""
    if n.op is not Ops.conv2d or n.out.dtype != torch.float32:
        return False
    o, ci, *_ = g.dims(n.inputs[1])
    return ci.is_lit(1) and o.is_lit(n.attrs["groups"]) and \
        g.dims(n.inputs[0])[1].is_lit(n.attrs["groups"])


def _window_sum(g: Graph, n: Node, xp: Value) -> tuple[Value, Node]:
    """The depthwise convolution ``n`` of the NHWC ``xp`` as generated code (unless
    ``Config.depthwise`` is ``"library"``): ``sum(window(window(pad(xp))) * taps)`` over the two
    window axes (``taps`` the weight as [kh, kw, C]), one kernel with the filter taps as literal
    loops, no library call; and the node that reads ``xp`` (``channels_last`` materializes its
    operand: a producer's epilogue is written once, not recomputed per tap).

    cuDNN (9.10 and later) compiles a depthwise convolution's execution plan at run time, about
    1.5 s for each new shape (NVIDIA/cudnn-frontend#1066): a DLCB module serving a new batch
    size paid it on the call (1.5-2.8 s for MobileNetV3 and EfficientNet-B0 on the H200).
    Generated, a new shape's first call costs 48-196 ms (the other convolutions' cuDNN plans),
    at 2-11 % more time per replayed call (H200, batch 1/8/32: README)."""
    a, w = n.attrs, n.inputs[1]
    c, _, kh, kw = (d.value for d in g.dims(w))
    k, pads = (kh, kw), []
    for i in range(2):
        if a["padding"] == "same":   # torch: the odd unit of padding goes after
            total = a["dilation"][i] * (k[i] - 1)
            pads.append((total // 2, total - total // 2))
        else:
            pads.append((a["padding"][i],) * 2)
    at = dict(where=n.where, insert_before=n)
    v = xp
    head = None
    if any(p for pair in pads for p in pair):
        v = g.apply(Ops.pad, v, before=tuple(map(lit, (0, pads[0][0], pads[1][0], 0))),
                    after=tuple(map(lit, (0, pads[0][1], pads[1][1], 0))), value=0.0,
                    name=f"{n.out.name}_pad", **at)
        head = v.producer
    for i, axis in enumerate((1, 2)):   # [N, H', W', C, kh, kw]
        v = g.apply(Ops.window, v, dim=axis, size=k[i], step=a["stride"][i],
                    dilation=a["dilation"][i], name=f"{n.out.name}_win{i}", **at)
        head = head or v.producer
    v = g.apply(Ops.permute, v, dims=(0, 1, 2, 4, 5, 3), name=f"{n.out.name}_win", **at)
    taps = g.apply(Ops.permute, g.apply(Ops.reshape, w, shape=(c, kh, kw), **at), dims=(1, 2, 0),
                   name=f"{w.name}_taps", **at)   # [kh, kw, C]: read along C, coalesced
    v = g.apply(Ops.mul, v, taps, name=f"{n.out.name}_taps", **at)
    return g.apply(Ops.sum, v, dims=(3, 4), keepdim=False, name=f"{n.out.name}_nhwc", **at), head


def _permute(g: Graph, x: Value, dims: tuple[int, ...], made: dict) -> Value:
    """``permute(x, dims)``, one node per (value, dims), placed right after ``x``'s producer
    (first, for an input), so it precedes every reader of ``x``."""
    key = (x.id, dims)
    if key not in made:
        tag = "nhwc" if dims == NHWC else "nchw"
        after = g.nodes[0 if x.producer is None else g.nodes.index(x.producer) + 1]
        made[key] = g.apply(Ops.permute, x, dims=dims, name=f"{x.name}_{tag}",
                            insert_before=after)
    return made[key]
