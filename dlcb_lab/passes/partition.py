"""Partition into library and generated regions, and fusion. Each materialized value is one
thunk step: a library call (its op alone) or a generated kernel computing the value from buffers,
with every non-materialized producer inlined (elementwise chains, broadcasts, reshape/permute,
pad, slicing, cat, and the epilogue of a library op it reads: bias, folded batch norm, residual
add, activation). ``Partition`` is the per-step table (``cm.pipeline.partition``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..dims import Expr, prod, var
from ..display import Rich
from ..ir.graph import Graph, Value
from ..ir.ops import OpKind, Ops


@dataclass(frozen=True)
class Step:
    """One thunk step: the materialized ``value`` (IR id ``value_id``) computed by a library call
    or a generated kernel. ``launches``: kernel launches per call (library: ATen calls; 0 for a
    generated value of literally no elements, which gets an empty buffer and no kernel). The
    launch plan (``hostgen.lower``) has one step per step here with launches, in this order."""

    index: int
    kind: str                 # "library" or "generated"
    value: str                # the materialized value
    ops: tuple[str, ...]      # ops computed by the step, producer first
    reads: tuple[str, ...]    # buffers read
    launches: int             # kernel launches per call (library: ATen calls)
    value_id: int = -1
    why: str = ""
    """An ``eager`` step (an ATen op DLCB does not lower, run by PyTorch): its target, source
    line and the reason it runs eagerly."""


@dataclass(frozen=True)
class Partition(Rich):
    steps: tuple[Step, ...]

    def counts(self) -> dict[str, int]:
        return {k: sum(1 for s in self.steps if s.kind == k) for k in ("library", "generated")}

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([(s.index, s.kind, s.value, len(s.ops), " ".join(s.ops), s.launches,
                              s.why) for s in self.steps],
                            columns=["step", "kind", "value", "n_ops", "ops", "launches", "why"])

    def __repr__(self) -> str:
        c = self.counts()
        lines = [f"Partition: {c['library']} library calls, {c['generated']} generated kernels"]
        for s in self.steps:
            ops = " ".join(s.ops)
            lines.append(f"  {s.index:>3} {s.kind:<9} %{s.value} <- {ops[:90]}"
                         f"{'...' if len(ops) > 90 else ''}")
            if s.why:
                lines.append(f"        {s.why}")
        return "\n".join(lines)


def index_reads(g: Graph, v: Value, mats: set[int]) -> list[tuple[Value, Expr]]:
    """``(index tensor, extent)`` per index tensor the kernel computing ``v`` reads coordinates
    from (its index ops' reverse transforms at symbolic output coordinates), whether or not the
    kernel launches or reaches the read: eager checks every index, whatever the output's size."""
    reads: dict[int, tuple[Value, Expr]] = {}

    def record(idx: Value, coords, extent: Expr):
        reads.setdefault(idx.id, (idx, extent))
        return var(f"_j{len(reads)}", 2)

    for x in inlined(g, v, mats):
        n = x.producer
        if n.op.kind is OpKind.GATHER:
            n.op.reverse(g, n, [var(f"_c{k}", 2) for k in range(x.rank)], index=record)
    return list(reads.values())


def inlined(g: Graph, v: Value, mats: set[int]) -> list[Value]:
    """The values a kernel computing ``v`` computes (``v`` last), producers first."""
    seen: dict[int, Value] = {}

    def walk(x: Value) -> None:
        n = x.producer
        if n is None or x.id in seen or (x.id in mats and x is not v):
            return
        for i in n.tensor_inputs():
            walk(i)
        seen[x.id] = x

    walk(v)
    return list(seen.values())


SHARED_OPS, SHARED_READS = 4, 3
"""A value inlined into two or more kernels is materialized when its inlined computation has at
least ``SHARED_OPS`` ops (coordinate transforms do not count: they cost index arithmetic, no
read) or reads ``SHARED_READS`` non-constant buffers (recomputing a residual stream or a
concatenation per consumer); cheaper shared values (a bias add, a broadcast, a centered row) are
recomputed."""


TREE_REUSE = 8
"""A value that one kernel's expression tree reads ``TREE_REUSE`` or more times is materialized
(the latest such value first): an inlined value read on both branches of a select, nested k
deep, is computed 2^k times. torchvision Swin's shifted-window mask, nine slice fills of one
buffer at a dynamic resolution, made softmax kernels of 10,000 lines that NVRTC and numba did
not finish compiling in minutes."""


def fuse(g: Graph, log: list[str]) -> Graph:
    """Choose the fusion groups: add to ``g.materialize`` each value whose recomputation in every
    kernel that reads it would cost more than computing it once (``SHARED_OPS``,
    ``SHARED_READS``), earliest first, then each value one kernel reads ``TREE_REUSE`` times.
    Leaves: every kernel root and its inlined producers (``inlined``) form the groups."""
    order = {n.out.id: k for k, n in enumerate(g.nodes)}
    while True:
        mats = {v.id for v in g.materialized()}
        users: dict[int, set[int]] = {}
        reused: list[tuple[int, Value, int]] = []
        for root in g.materialized():
            if root.producer is None or root.producer.op.kind is OpKind.LIBRARY:
                continue
            for x in inlined(g, root, mats)[:-1]:
                users.setdefault(x.id, set()).add(root.id)
            reused += [(order[x.id], x, k) for x, k in _reads_in_tree(g, root, mats)
                       if k >= TREE_REUSE and x is not root and not x.producer.op.kind.is_transform]
        pick = None
        for n in g.nodes:
            x = n.out
            if len(users.get(x.id, ())) < 2 or n.op.kind.is_transform:
                continue
            consts = {c.name for c, _ in g.constants}
            reads = [r for r in _reads(g, x, mats) if r not in consts]
            ops = [v for v in inlined(g, x, mats) if not v.producer.op.kind.is_transform]
            if len(ops) >= SHARED_OPS or len(reads) >= SHARED_READS:
                pick = x
                break
        if pick is not None:
            why = f"inlined into {len(users[pick.id])} kernels"
        elif reused:
            _, pick, k = max(reused, key=lambda r: r[0])
            why = f"read {k} times by one kernel"
        else:
            return g
        g.materialize.add(pick.id)
        log.append(f"materialize %{pick.name} ({pick.producer.op.name}): {why}")


def _reads_in_tree(g: Graph, root: Value, mats: set[int]) -> list[tuple[Value, int]]:
    """Each value the kernel computing ``root`` inlines, with the times its expression tree reads
    it (the sum over the paths from ``root``)."""
    vals = inlined(g, root, mats)
    times = {root.id: 1}
    for x in reversed(vals):   # consumers before producers
        for i in x.producer.tensor_inputs():
            times[i.id] = times.get(i.id, 0) + times.get(x.id, 0)
    return [(x, times.get(x.id, 0)) for x in vals]


def steps(g: Graph) -> tuple[Step, ...]:
    """The step list: one step per materialized value (``Graph.materialized``), in graph order;
    a graph input that is an output is a generated ``copy``."""
    mats = g.materialized()
    ids = {v.id for v in mats}
    out = []
    for v in mats:
        n = v.producer
        if n is not None and n.op.kind is OpKind.LIBRARY:
            reads = tuple(g.view_chain(x)[0].name for x in n.tensor_inputs())
            why = f"{n.attrs['target']} at {n.where}: {n.attrs['reason']}" \
                if n.op is Ops.eager else ""
            out.append(Step(len(out), "library", v.name, (n.op.name,), reads, 1, v.id, why))
            continue
        ops = [x.producer.op.name for x in inlined(g, v, ids)] if n is not None else ["copy"]
        empty = prod(g.dims(v)).is_lit(0)
        out.append(Step(len(out), "generated", v.name, tuple(ops), _reads(g, v, ids),
                        0 if empty else 1, v.id))
    return tuple(out)


def partition(g: Graph, log: list[str]) -> Graph:
    """Set ``g.partition`` to ``steps(g)``. Changes nothing else."""
    g.partition = Partition(steps(g))
    for s in g.partition.steps:
        epi = [r for r in s.reads if _library_output(g, r)] if s.kind == "generated" else []
        if epi and s.ops:
            log.append(f"%{s.value}: epilogue of {', '.join('%' + r for r in epi)} fused "
                       f"({' '.join(s.ops)})")
    c = g.partition.counts()
    log.insert(0, f"{c['library']} library calls, {c['generated']} generated kernels")
    return g


def _reads(g: Graph, v: Value, mats: set[int]) -> tuple[str, ...]:
    out: dict[str, None] = {}

    def walk(x: Value, top: bool) -> None:
        if x.producer is None or (x.id in mats and not top):
            out[x.name] = None
            return
        for i in x.producer.tensor_inputs():
            walk(i, False)

    walk(v, True)
    return tuple(out)


def _library_output(g: Graph, name: str) -> bool:
    return any(n.out.name == name and n.op.kind is OpKind.LIBRARY for n in g.nodes)
