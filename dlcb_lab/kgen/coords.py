"""Backward coordinate inference (paper §4.2-4.3) into a language-neutral kernel body.

A kernel computes one materialized value (a graph output or a reduction result) with one thread per
output element. Its output coordinates ``c0..c{r-1}`` are derived from the flat thread index ``t``;
each op's ``reverse`` maps the coordinates of its output to those of its inputs (broadcast -> 0,
reshape -> div/mod, permute -> reorder, reduce -> loop variables ``r0..``) until a materialized
value is reached, which becomes a load. Index expressions are dimension expressions, simplified
against the coordinate bounds; interning makes every shared subexpression one node, computed once.
Code that does not depend on a reduction's loop variables is hoisted out of the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..dims import Expr, FloorDiv, Lit, Mod, Prod, Sum, Var, lit, simplify_bounded, var
from ..dims.bounds import lower, nonneg
from ..ir.graph import Graph, Value
from ..ir.ops import linear_index, reduced_extents

THREAD = var("t", 2)


def coord_var(k: int) -> Var:
    return var(f"c{k}", 2)


def loop_var(k: int) -> Var:
    return var(f"r{k}", 2)


# --- kernel IR ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class IdxLet:        # long long name = <kind>(parts)     (expr: the dimension expression, for reading)
    name: str
    kind: str        # "sum": (const, ((coeff, name), ...)) | "prod": names | "div"/"mod": (num, den,
    parts: tuple     #   floor_needed)
    expr: Expr


@dataclass(frozen=True)
class Load:          # T name = buf[index]
    name: str
    buf: str
    index: str


@dataclass(frozen=True)
class Compute:       # T name = op(args)   (op: IR op name; args: temp names or literals)
    name: str
    op: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class Loop:          # for (var = 0; var < extent; ++var) { body }
    var: str         # cooperative: the block's threads split the range (var = tid; var += blockDim)
    extent: str
    body: tuple
    cooperative: bool = False


@dataclass(frozen=True)
class BlockReduce:   # acc = combine of every thread's acc (valid in thread 0)
    name: str
    op: str


@dataclass(frozen=True)
class AccInit:       # acc = init
    name: str
    op: str


@dataclass(frozen=True)
class Accumulate:    # acc = combine(acc, value)
    name: str
    op: str
    value: str


@dataclass(frozen=True)
class Finish:        # name = acc (mean: acc / count)
    name: str
    op: str
    acc: str
    count: str


@dataclass(frozen=True)
class Store:         # out[t] = value   (cooperative kernels: thread 0 of the block only)
    value: str


@dataclass(frozen=True)
class CoordMap:
    """For one kernel: output coordinates (as functions of ``t``), loop extents, and for each load
    the buffer and the input coordinates as expressions of output coordinates and loop vars."""

    out: str
    out_coords: tuple[tuple[str, Expr], ...]
    loops: tuple[tuple[str, Expr], ...]
    loads: tuple[tuple[str, tuple[Expr, ...]], ...]

    def __repr__(self) -> str:
        oc = ", ".join(n for n, _ in self.out_coords)
        lines = [f"CoordMap {self.out}[{oc}]"]
        lines += [f"  {n} = {e!r}" for n, e in self.out_coords]
        lines += [f"  loop {n} < {e!r}" for n, e in self.loops]
        lines += [f"  load {b}[{', '.join(map(repr, cs))}]" for b, cs in self.loads]
        return "\n".join(lines)


@dataclass(frozen=True)
class KernelBody:
    """Everything an emitter needs: buffers, runtime int params (expressions the host evaluates),
    the thread count and the statement list. Types come from ``dtype`` ("f32"/"f64")."""

    name: str
    dtype: str
    out: Value
    inputs: tuple[Value, ...]
    params: tuple[tuple[str, Expr], ...]
    numel: Expr
    stmts: tuple
    coord_map: CoordMap
    cooperative: bool = False                # one block per output element (reductions)
    reduce_extent: Expr | None = None        # elements reduced per output element
    variant: "KernelBody | None" = None      # cooperative alternative, chosen at launch


# --- inference ----------------------------------------------------------------------------------

@dataclass
class _Scope:
    stmts: list
    memo: dict = field(default_factory=dict)


class _Builder:
    def __init__(self, g: Graph, root: Value, materialized: set[int], name: str, dtype: str,
                 cooperative: bool = False):
        self.g, self.root, self.mat, self.name, self.dtype = g, root, materialized, name, dtype
        self.cooperative = cooperative
        self.dims = g.dims(root)
        self.bounds: dict[str, Expr] = {}
        self.coord_defs: dict[Var, Expr] = {}   # output coordinate c_k -> its value in terms of t
        self.params: dict[Expr, str] = {}
        self.inputs: dict[int, Value] = {}
        self.loads: list[tuple[str, tuple[Expr, ...]]] = []
        self.loop_names: set[str] = set()
        self.n = 0
        self.outer = _Scope([])
        self.inner: _Scope | None = None

    def tmp(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"

    # scope of an expression / value: innermost loop scope iff it depends on a loop variable
    def scope_for(self, free: frozenset[str]) -> _Scope:
        return self.inner if self.inner is not None and free & self.loop_names else self.outer

    def lookup(self, key) -> str | None:
        for s in (self.inner, self.outer):
            if s is not None and key in s.memo:
                return s.memo[key]
        return None

    # -- integer index expressions ----------------------------------------------------------------
    def param(self, e: Expr) -> str:
        name = self.params.get(e)
        if name is None:
            name = e.name if isinstance(e, Var) else f"p{len(self.params)}"
            self.params[e] = name
        return name

    def index(self, e: Expr) -> str:
        """Name (or literal / param spelling) holding ``e``; each node is emitted once per scope."""
        if isinstance(e, Lit):
            return str(e.value) if e.value >= 0 else f"({e.value})"
        if isinstance(e, Var):
            return e.name if e.name in self.bounds else self.param(e)
        if not (e.free_vars & self.bounds.keys()) and not _is_poly_of_vars(e):
            return self.param(e)  # host-computed (contains // or % of runtime dims)
        hit = self.lookup(e)
        if hit is not None:
            return hit
        if isinstance(e, Sum):
            kind, parts = "sum", (e.const, tuple((c, self.index(m)) for m, c in e.terms))
        elif isinstance(e, Prod):
            kind, parts = "prod", tuple(self.index(f) for f in e.factors)
        else:
            kind = "div" if isinstance(e, FloorDiv) else "mod"
            parts = (self.index(e.num), self.index(e.den), needs_floor(e, self.bounds))
        name = self.tmp("i")
        scope = self.scope_for(e.free_vars)
        scope.stmts.append(IdxLet(name, kind, parts, e))
        scope.memo[e] = name
        return name

    # -- values ------------------------------------------------------------------------------------
    def value(self, v: Value, coords: list[Expr]) -> str:
        coords = [simplify_bounded(c, self.bounds) for c in coords]
        key = (v.id, tuple(coords))
        hit = self.lookup(key)
        if hit is not None:
            return hit
        free = frozenset().union(*(c.free_vars for c in coords)) if coords else frozenset()
        if v.producer is None or (v.id in self.mat and v is not self.root):
            self.inputs[v.id] = v
            idx = simplify_bounded(linear_index(coords, self.g.dims(v)), self.bounds)
            # in terms of t: identity layouts collapse (24*(t // 24) + t % 24 -> t)
            idx = simplify_bounded(idx.subs(self.coord_defs), self.bounds)
            iname = self.index(idx)
            self.loads.append((v.name, tuple(coords)))
            name = self.tmp("x")
            stmt = Load(name, f"in_{v.name}", iname)
        else:
            node = v.producer
            ins = node.op.reverse(self.g, node, coords)
            if node.op.kind in ("reshape", "permute"):   # pure coordinate transforms
                return self.value(node.inputs[0], ins[0])
            args = tuple(self.value(x, c) if c is not None else float(x)
                         for x, c in zip(node.inputs, ins))
            name = self.tmp("v")
            stmt = Compute(name, node.op.name, args)
        scope = self.scope_for(free)
        scope.stmts.append(stmt)
        scope.memo[key] = name
        return name

    # -- kernel -------------------------------------------------------------------------------------
    def build(self) -> KernelBody:
        numel = _numel(self.dims)
        self.bounds[THREAD.name] = numel
        coords: list[Expr] = []
        raw: list[Expr] = []
        stride: Expr = lit(1)
        for k in reversed(range(len(self.dims))):
            q = THREAD // stride
            raw.append(q % self.dims[k] if k else q)
            stride = stride * self.dims[k]
        out_coords = []
        for k, e in enumerate(reversed(raw)):
            e = simplify_bounded(e, self.bounds)
            if self.dims[k] is lit(1):
                coords.append(lit(0))
                out_coords.append((f"c{k}", lit(0)))
                continue
            cv = coord_var(k)
            self.bounds[cv.name] = self.dims[k]
            self.coord_defs[cv] = e
            out_coords.append((cv.name, e))
            coords.append(cv)
        loops: list[tuple[str, Expr]] = []
        node = self.root.producer
        extent = None
        if node is not None and node.op.kind == "reduce":
            exts = reduced_extents(self.g, node)
            extent = _numel(exts)
            if self.cooperative:   # one flat loop split across the block: r_k from rf
                rf = loop_var("f")
                self.bounds[rf.name] = extent
                self.loop_names.add(rf.name)
                loops.append((rf.name, extent))
                lvars, stride = [], lit(1)
                for ext in reversed(exts):
                    lvars.append(simplify_bounded((rf // stride) % ext, self.bounds))
                    stride = stride * ext
                lvars.reverse()
            else:
                lvars = [loop_var(i) for i in range(len(exts))]
                for lv, ext in zip(lvars, exts):
                    self.bounds[lv.name] = ext
                    self.loop_names.add(lv.name)
                    loops.append((lv.name, ext))
            acc = self.tmp("acc")
            self.outer.stmts.append(AccInit(acc, node.op.name))
            self.inner = _Scope([])
            (in_coords,) = node.op.reverse(self.g, node, coords, loops=lvars)
            val = self.value(node.inputs[0], in_coords)
            self.inner.stmts.append(Accumulate(acc, node.op.name, val))
            body: tuple = tuple(self.inner.stmts)
            for name, ext in reversed(loops):
                body = (Loop(name, self.index(ext), body, self.cooperative),)
            self.inner = None
            self.outer.stmts.extend(body)
            if self.cooperative:
                self.outer.stmts.append(BlockReduce(acc, node.op.name))
            count = self.index(extent) if node.op.name == "mean" else ""
            res = self.tmp("v")
            self.outer.stmts.append(Finish(res, node.op.name, acc, count))
        else:
            res = self.value(self.root, coords)
        self.outer.stmts.append(Store(res))
        cmap = CoordMap(self.root.name, tuple(out_coords), tuple(loops), tuple(self.loads))
        params = tuple((n, e) for e, n in self.params.items())
        return KernelBody(self.name, self.dtype, self.root, tuple(self.inputs.values()), params,
                          numel, tuple(self.outer.stmts), cmap, self.cooperative, extent)


def _is_poly_of_vars(e: Expr) -> bool:
    """True when ``e`` is a polynomial in plain variables (cheap to compute in-kernel)."""
    if isinstance(e, (Lit, Var)):
        return True
    if isinstance(e, (FloorDiv, Mod)):
        return False
    return all(_is_poly_of_vars(c) for c in e.children())


def _numel(dims) -> Expr:
    n: Expr = lit(1)
    for d in dims:
        n = n * d
    return n


def materialized_values(g: Graph) -> list[Value]:
    """Values that get a buffer and a kernel: graph outputs and reduction results (in order)."""
    out_ids = {v.id for v in g.outputs}
    return [n.out for n in g.nodes if n.op.kind == "reduce" or n.out.id in out_ids] + \
        [v for v in g.inputs if v.id in out_ids]


def infer_kernels(g: Graph, cooperative: bool = False) -> list[KernelBody]:
    """One kernel per materialized value, in dependency (graph) order. With ``cooperative``, each
    reduction kernel also carries a block-per-output ``variant`` (for large reduced extents)."""
    mats = materialized_values(g)
    mat_ids = {v.id for v in mats}
    out = []
    for i, v in enumerate(mats):
        tag = "f32" if v.dtype == torch.float32 else "f64"
        name = f"dlcb_k{i}_{_ident(v.name)}"
        body = _Builder(g, v, mat_ids, name, tag).build()
        if cooperative and body.reduce_extent is not None:
            body = replace(body, variant=_Builder(g, v, mat_ids, name + "_blk", tag, True).build())
        out.append(body)
    return out


def _ident(s: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in s)


def needs_floor(e: FloorDiv | Mod, bounds) -> bool:
    """C's ``/`` and ``%`` truncate; they equal floor semantics when the numerator is >= 0."""
    lo = lower(e.num, bounds)
    return not (lo is not None and nonneg(lo))


__all__ = ["KernelBody", "CoordMap", "infer_kernels", "materialized_values", "IdxLet", "Load",
           "Compute", "Loop", "AccInit", "Accumulate", "BlockReduce", "Finish", "Store",
           "needs_floor"]
