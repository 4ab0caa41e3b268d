"""Backward coordinate inference (paper §4.2-4.3) into kernel IR.

A kernel computes one materialized value (a graph output or a reduction result) with one thread per
output element. Its output coordinates ``_c0.._c{r-1}`` are derived from the flat thread index
``_t``; each op's ``reverse`` maps the coordinates of its output to those of its inputs (broadcast
-> 0, reshape -> div/mod, permute -> reorder, reduce -> loop variables ``_l0..``) until a
materialized value is reached, which becomes a load. Index expressions are dimension expressions,
simplified against the coordinate bounds; interning makes every shared subexpression one node,
computed once. Code that does not depend on a reduction's loop variables is hoisted out of the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from ..dims import Expr, FloorDiv, Lit, Mod, Prod, Sum, Var, interpret, lit, prod, simplify_bounded, \
    var
from ..dims.bounds import Bounds, lower, nonneg, nonneg_quotients, positive, upper
from ..errors import DLError
from ..ir.dtypes import F32, F64, I64, dtype_of
from ..ir.graph import Graph, Value
from ..ir.ops import REDUCTIONS, ROW_KINDS, Combine, Guard, Guarded, OpKind, Ops, \
    Reduction, RowKind, delinearize, linear_index
from ..passes.partition import steps
from .kir import (AccInit, Accumulate, BlockReduce, CoordMap, Compute, DivMod, Finish, IdxCast,
                  IdxClamp, IdxDivMod, IdxProd, IdxSum, Imm, KernelBody, Load, Loop, Pred, Ref,
                  RowAccumulate, RowCombine, RowInit, RowOutput, RowStats, Select, Store, StoreAt,
                  acc_dtype, code_name)

THREAD = var("_t", 2)
FLAT_LOOP = var("_lf", 2)


def coord_var(k: int) -> Var:
    return var(f"_c{k}", 2)


def loop_var(k: int) -> Var:
    return var(f"_l{k}", 2)


@dataclass
class _Scope:
    stmts: list
    memo: dict = field(default_factory=dict)


class _Builder:
    def __init__(self, g: Graph, root: Value, materialized: set[int], name: str,
                 cooperative: bool = False, flat: bool | None = None):
        self.g, self.root, self.mat, self.name = g, root, materialized, name
        self.cooperative = cooperative
        self.flat = cooperative if flat is None else flat   # a window as one delinearized loop
        self.dims = g.dims(root)
        self.bounds: dict[str, Expr] = {}
        self.coord_defs: dict[Var, Expr] = {}   # output coordinate _c_k -> its value in terms of _t
        self.coord_names: set[str] = set()
        self.params: dict[Expr, str] = {}
        self.divisors: dict[Expr, str] = {}      # runtime divisor -> its magic param
        self.inputs: dict[int, int] = {}        # value id -> buffer position
        self.in_values: list[Value] = []
        self.loads: list[tuple[str, tuple[Expr, ...]]] = []
        self.path: list[tuple[str, str]] = []    # reverse transforms from the root inward
        self.via: list[tuple[tuple[str, str], ...]] = []   # per load: ``path`` when it was made
        self.temps: list[str] = []               # per load: its Load statement's name
        self.loop_names: set[str] = set()
        self.narrow_names: set[str] = set()      # coordinates bounded only where a guard holds
        self.index_exprs: list[Expr] = []
        self.n = 0
        self.outer = _Scope([])
        self.inner: _Scope | None = None
        self.pred = ""                            # the guard in force ("" for none)
        self.identity: tuple[Expr, ...] | None = None   # the output's own coordinates (not rows)
        self.pred_vars: dict[str, frozenset[str]] = {"": frozenset()}
        self.simplified: dict[Expr, Expr] = {}   # one memo per kernel: a variable's bound is set
        #   once, before any expression over it is simplified
        self.spelling = IndexSpelling(self)

    def simplify(self, e: Expr) -> Expr:
        """``e`` simplified under the coordinate bounds (``dims.bounds``), memoized."""
        return simplify_bounded(e, self.bounds, self.simplified)

    def tmp(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"

    def enter(self, node, coords, ins) -> None:
        """Push ``node``'s reverse transform (output ``coords`` -> one input's ``ins``) on the
        provenance path of the loads made until the caller pops it (``CoordMap.via``). A failed
        build is discarded, so no ``finally`` is needed (and none deepens the recursion)."""
        self.path.append((node.op.name, transform_kind(node, coords, ins, self.loop_names)))

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
            name = code_name(e) if isinstance(e, Var) else f"p{len(self.params)}"
            self.params[e] = name
        return name

    def divisor(self, d: Expr) -> str:
        """The magic param of divisor ``d`` (``kgen.abi.magic``), or ``""`` where ``d`` is a
        literal (NVRTC strength-reduces it) or depends on coordinates (no host value)."""
        if isinstance(d, Lit) or d.free_vars & self.bounds.keys():
            return ""
        return self.divisors.setdefault(d, f"dv{len(self.divisors)}")

    def index(self, e: Expr) -> str:
        """Name (or literal / param spelling) holding ``e`` (``dims.interpret`` over
        ``IndexSpelling``); each node is emitted once per scope. Output coordinates are spelled
        through the thread index (they have no statements)."""
        if e.free_vars & self.coord_names:
            e = self.simplify(e.subs(self.coord_defs))
        return interpret(e, self.spelling, self.spelling)

    # -- guards ------------------------------------------------------------------------------------
    def guard(self, guards: tuple[Guard, ...]) -> str:
        """A predicate: the guard in force and ``guards``, without terms the coordinate bounds
        prove; the name of the guard in force when nothing is left."""
        lo_terms, hi_terms, free = [], [], set(self.pred_vars[self.pred])
        for gd in guards:
            e = self.simplify(gd.expr)
            lo_ok, hi_ok = self.proven(e, gd)
            if not lo_ok:
                lo_terms.append((self.index(e), self.index(gd.lo)))
                free |= e.free_vars | gd.lo.free_vars
            if not hi_ok:
                hi_terms.append((self.index(e), self.index(gd.hi)))
                free |= e.free_vars | gd.hi.free_vars
        if not lo_terms and not hi_terms:
            return self.pred
        key = ("pred", self.pred, tuple(lo_terms), tuple(hi_terms))
        hit = self.lookup(key)
        if hit is not None:
            return hit
        name = self.tmp("m")
        scope = self.scope_for(frozenset(free))
        scope.stmts.append(Pred(name, self.pred, tuple(lo_terms), tuple(hi_terms)))
        scope.memo[key] = name
        self.pred_vars[name] = frozenset(free)
        return name

    def proven(self, e: Expr, gd: Guard) -> tuple[bool, bool]:
        """Whether the coordinate bounds prove ``gd.lo <= e`` and ``e < gd.hi`` (``e``: ``gd``'s
        expression, simplified)."""
        lo, hi = lower(e, self.bounds), upper(e, self.bounds)
        return lo is not None and nonneg(lo - gd.lo), hi is not None and nonneg(gd.hi - 1 - hi)

    def guarded(self, v: Value, where: list[Expr] | Guarded) -> tuple[str, str]:
        """(predicate, value) of ``v`` at coordinates that may carry guards: loads under the
        predicate read nothing where it fails."""
        if not isinstance(where, Guarded):
            return self.pred, self.value(v, where)
        saved = self.pred
        self.pred = self.guard(where.guards)
        try:
            return self.pred, self.value(v, self.narrowed(where))
        finally:
            self.pred = saved

    def narrowed(self, where: Guarded) -> list[Expr]:
        """``where.coords`` with each guarded coordinate ``e`` (``0 <= e < hi``, not a variable)
        replaced by a fresh variable bounded by ``hi`` and defined as ``e``: under the guard the
        coordinate is known non-negative, so the input's index arithmetic needs no floor
        corrections (``(_t % 17) - 1`` rather than ``((_t % 17) + 1023) // 1024 - 1``)."""
        coords = list(where.coords)
        for gd in where.guards:
            e = self.simplify(gd.expr)
            if isinstance(e, (Var, Lit)) or not gd.lo.is_lit(0) or e not in coords:
                continue
            u = var(f"_g{len(self.coord_names)}", 2)
            self.bounds[u.name] = gd.hi
            self.coord_defs[u] = self.simplify(e.subs(self.coord_defs))
            self.coord_names.add(u.name)
            self.narrow_names.add(u.name)
            if e.free_vars & self.loop_names:   # defined per loop iteration: code using u too
                self.loop_names.add(u.name)
            coords = [u if c is e else c for c in coords]
        return coords

    def clamped(self, where: list[Expr] | Guarded, loops) -> list[Expr] | None:
        """For a max over a window: ``where.coords`` with each guarded coordinate ``e`` clamped
        into its guard's ``[0, hi)`` (``IdxClamp``), so every tap is read unmasked; None unless
        the bounds prove the clamp exact. It is where ``e`` steps by one per step of one loop
        variable ``l`` (dilation 1: the window's taps on the axis are contiguous, ``first`` at
        ``l = 0`` to ``last``) and every window meets the axis (``first <= hi - 1``, ``last >=
        0``, ``hi >= 1``): a clamped tap is then a tap of the same window, which the max reads
        anyway (ceil mode's overhang, padding)."""
        if not isinstance(where, Guarded) or self.flat:
            return None
        exts = {lv.name: ext for lv, ext in loops}
        clamps = []
        for gd in where.guards:
            e = self.simplify(gd.expr)
            if all(self.proven(e, gd)):
                continue   # always in range: read as is
            names = e.free_vars & self.loop_names
            if not gd.lo.is_lit(0) or e not in where.coords or len(names) != 1 or \
                    not names <= exts.keys():
                return None
            lv = var(next(iter(names)), 2)
            if (e - lv).free_vars & self.loop_names:
                return None
            start = self.simplify(e.subs({lv: lit(0)}))
            first, early = upper(start, self.bounds), lower(start, self.bounds)
            last = lower(self.simplify(e.subs({lv: exts[lv.name] - 1})), self.bounds)
            if first is None or last is None or early is None or not (
                    nonneg_quotients(gd.hi - 1 - first) and nonneg(last) and
                    (nonneg(early) or positive(gd.hi, self.bounds))):
                return None
            clamps.append((e, gd.hi))
        coords = list(where.coords)
        for e, hi in clamps:
            key = ("clamp", e, hi)
            u = self.lookup(key)
            if u is None:
                u = var(self.tmp("_k"), 2)
                self.bounds[u.name] = hi
                self.loop_names.add(u.name)
                self.inner.stmts.append(IdxClamp(code_name(u), self.index(e), self.index(hi)))
                self.inner.memo[key] = u
            coords = [u if c is e else c for c in coords]
        return coords

    def within(self, coords: list[Expr], v: Value) -> bool:
        """Whether the bounds prove ``coords`` inside ``v``'s dims whatever the guard in force
        (a guarded window's bias, read at the output's channel): such a load needs no guard.
        ``coords`` must not hold a narrowed coordinate, whose bound holds under its guard only."""
        for c, d in zip(coords, self.g.dims(v)):
            lo, hi = lower(c, self.bounds), upper(c, self.bounds)
            if lo is None or hi is None or not (nonneg(lo) and nonneg(d - 1 - hi)):
                return False
        return True

    def gathered(self, idx: Value, coords: list[Expr], extent: Expr) -> Var:
        """A coordinate variable holding ``idx`` at ``coords`` (in ``[0, extent)``: the host checks
        the index tensor before launch)."""
        val = self.value(idx, coords)
        key = ("gather", val)
        hit = self.lookup(key)
        if hit is not None:
            return hit
        j = var(f"_j{self.n + 1}", 2)
        self.n += 1
        self.bounds[j.name] = extent
        free = frozenset().union(*(c.free_vars for c in coords)) | self.pred_vars[self.pred]
        scope = self.scope_for(free)
        if scope is self.inner:
            self.loop_names.add(j.name)
        scope.stmts.append(IdxCast(code_name(j), val))
        scope.memo[key] = j
        return j

    # -- values ------------------------------------------------------------------------------------
    def value(self, v: Value, coords: list[Expr]) -> str:
        coords = [self.simplify(c) for c in coords]
        key = (v.id, tuple(coords), self.pred)
        hit = self.lookup(key)
        if hit is not None:
            return hit
        free = frozenset().union(*(c.free_vars for c in coords)) if coords else frozenset()
        leaf = v.producer is None or (v.id in self.mat and v is not self.root)
        if leaf and self.pred and not free & (self.loop_names | self.narrow_names) and \
                self.within(coords, v):
            saved, self.pred = self.pred, ""   # read unguarded, once outside the loop
            try:
                return self.value(v, coords)
            finally:
                self.pred = saved
        free |= self.pred_vars[self.pred]
        if leaf:
            buf = self.inputs.setdefault(v.id, len(self.inputs))
            if buf == len(self.in_values):
                self.in_values.append(v)
            if self.identity == tuple(coords) and self.g.dims(v) == self.dims:
                idx = THREAD   # the output's own layout: linear_index(delinearize(_t)) is _t
            else:
                idx = self.simplify(linear_index(coords, self.g.dims(v)))
                # in terms of _t: literal layouts collapse (24*(_t // 24) + _t % 24 -> _t)
                idx = self.simplify(idx.subs(self.coord_defs))
            iname = self.index(idx)
            self.index_exprs.append(idx)   # also when idx is a bare variable (no statement)
            self.loads.append((v.name, tuple(coords)))
            name = self.tmp("x")
            self.via.append(tuple(self.path))
            self.temps.append(name)
            stmt = Load(name, dtype_of(v.dtype), buf, iname, self.pred)
        else:
            node = v.producer
            if node.op.kind is OpKind.GATHER:    # coordinates read from an index tensor
                self.path.append((node.op.name, "index tensor"))   # loads made by gathered
                ins = located(node, node.op.reverse, self.g, node, coords, index=self.gathered)
                self.path.pop()
                x, c = next((x, c) for x, c in zip(node.inputs, ins) if c is not None)
                self.enter(node, coords, c)
                name = self.value(x, c)
                self.path.pop()
                return name
            ins = located(node, node.op.reverse, self.g, node, coords)
            if node.op.kind.is_transform:   # pure coordinate transforms
                self.enter(node, coords, ins[0])
                name = self.value(node.inputs[0], ins[0])
                self.path.pop()
                return name
            t = dtype_of(v.dtype)
            if node.op.kind is OpKind.SELECT:
                refs: list[tuple[str, Ref]] = []
                default: Ref | Imm | None = None
                # one alternative per input (cat, pad), or several reads of one input (pad_axis)
                srcs = node.inputs if len(node.inputs) == len(ins) else (node.inputs[0],) * len(ins)
                for x, c in zip(srcs, ins):
                    self.enter(node, coords, c)
                    p, val = self.guarded(x, c)
                    self.path.pop()
                    if p == self.pred:   # the guard always holds here: later inputs are dead
                        default = Ref(val, dtype_of(x.dtype))
                        break
                    refs.append((p, Ref(val, dtype_of(x.dtype))))
                if default is None:
                    default = Imm(node.attrs["value"]) if "value" in node.attrs else \
                        refs.pop()[1]
                name = self.tmp("v")
                stmt = Select(name, t, tuple(refs), default)
            else:
                args = []
                rounded = dtype_of(node.compute_dtype).reduced and (
                    node.out.dtype is torch.bool or node.op.name in SCALAR_IN_DTYPE)
                for x, c in zip(node.inputs, ins):
                    if c is None:
                        args.append(Imm(torch.tensor(x, dtype=node.compute_dtype).item()
                                        if rounded and isinstance(x, float) else x))
                        continue
                    self.enter(node, coords, c)
                    args.append(Ref(self.value(x, c), dtype_of(x.dtype)))
                    self.path.pop()
                args = tuple(args)
                name = self.tmp("v")
                stmt = Compute(name, node.op.name, args, t, dtype_of(node.compute_dtype))
        scope = self.scope_for(free)
        scope.stmts.append(stmt)
        scope.memo[key] = name
        return name

    # -- kernel -------------------------------------------------------------------------------------
    def build(self) -> KernelBody:
        node = self.root.producer
        row = node is not None and node.op.kind is OpKind.ROW
        axes = node.attrs["axes"] if row else ()
        own = [a for a in range(len(self.dims)) if a not in axes]   # one thread per element
        numel = prod(self.dims[a] for a in own)
        self.bounds[THREAD.name] = numel
        coords: list[Expr] = [lit(0)] * len(self.dims)
        out_coords = []
        for a, e in zip(own, delinearize(THREAD, [self.dims[a] for a in own])):
            e = self.simplify(e)
            if self.dims[a] is lit(1):
                out_coords.append((coord_var(a).name, lit(0)))
                continue
            cv = coord_var(a)
            self.bounds[cv.name] = self.dims[a]
            self.coord_defs[cv] = e
            self.coord_names.add(cv.name)
            out_coords.append((cv.name, e))
            coords[a] = cv
        if not row:
            self.identity = tuple(coords)
        loops: list[tuple[Var, Expr]] = []
        extent = None
        out_t = dtype_of(self.root.dtype)
        if row:
            extent = prod(self.dims[a] for a in axes)
            self.row(node, coords, axes, extent, loops, out_t)
        elif node is not None and node.op.kind is OpKind.REDUCE:
            red = REDUCTIONS[node.op.name]
            acc_t = acc_dtype(red, out_t)
            win = located(node, node.op.window, self.g, node, coords)
            extent = prod(win.extents)
            acc = self.tmp("acc")
            self.outer.stmts.append(AccInit(acc, red, acc_t))
            counter = self.tmp("cnt") if red.mean and win.count is None else ""
            if counter:
                self.outer.stmts.append(AccInit(counter, _COUNT, I64))
            if not extent.is_lit(0):   # an empty extent leaves the identity (mean: 0/0 = NaN)
                self.reduce_loops(node, coords, win, extent, loops, acc, red, acc_t, counter)
            if self.cooperative:
                self.outer.stmts.append(BlockReduce(acc, red, acc_t))
                if counter:
                    self.outer.stmts.append(BlockReduce(counter, _COUNT, I64))
            count = (counter or self.index(win.count)) if red.mean else ""
            res = self.tmp("v")
            self.outer.stmts.append(Finish(res, red, acc, count, out_t))
            self.outer.stmts.append(Store(res))
        else:
            self.outer.stmts.append(Store(self.value(self.root, coords)))
        bound_extent = None if extent is None else \
            prod(win.bounds) if node.op.kind is OpKind.REDUCE else extent
        cmap = CoordMap(self.root.name, tuple(out_coords), tuple((v.name, e) for v, e in loops),
                        tuple(self.loads), tuple(self.via), tuple(self.temps))
        params = tuple((n, e) for e, n in self.params.items())
        bounds = index_bounds([numel, *(e for _, e in params), *self.index_exprs], self.bounds)
        return KernelBody(self.name, out_t, self.root, tuple(self.in_values), params, numel,
                          tuple(self.outer.stmts), cmap, bounds, self.cooperative, bound_extent,
                          divisors=tuple((n, e) for e, n in self.divisors.items()))

    def open_loops(self, exts, bounds, extent, loops) -> list[Expr]:
        """Loop variables over ``exts`` in a fresh inner scope: one per extent, or with ``flat``
        one loop over their product, delinearized (the cooperative variant splits it across the
        block)."""
        if self.flat:
            self.bounds[FLAT_LOOP.name] = prod(bounds)
            self.loop_names.add(FLAT_LOOP.name)
            loops.append((FLAT_LOOP, extent))
            lvars = [self.simplify(e) for e in delinearize(FLAT_LOOP, exts)]
        else:
            lvars = [loop_var(i) for i in range(len(exts))]
            for lv, ext, bound in zip(lvars, exts, bounds):
                self.bounds[lv.name] = bound
                self.loop_names.add(lv.name)
                loops.append((lv, ext))
        self.inner = _Scope([])
        return lvars

    def close_loops(self, loops) -> None:
        body: tuple = tuple(self.inner.stmts)
        for lv, ext in reversed(loops):
            body = (Loop(code_name(lv), self.index(ext), body, self.cooperative),)
        self.inner = None
        self.outer.stmts.extend(body)

    def reduce_loops(self, node, coords, win, extent, loops, acc, red, acc_t, counter) -> None:
        lvars = self.open_loops(win.extents, win.bounds, extent, loops)
        (where,) = located(node, node.op.reverse, self.g, node, coords, loops=lvars)
        self.enter(node, coords, where)
        clamped = self.clamped(where, loops) if red.combine is Combine.MAX else None
        pred, val = self.guarded(node.inputs[0], where) if clamped is None else \
            (self.pred, self.value(node.inputs[0], clamped))
        self.path.pop()
        self.inner.stmts.append(Accumulate(acc, red, val, acc_t, pred))
        if counter:
            self.inner.stmts.append(Accumulate(counter, _COUNT, "1", I64, pred))
        self.close_loops(loops)

    def row(self, node, coords, axes, extent, loops, out_t) -> None:
        """A row-wise normalization: accumulate the row, combine (cooperative), the stats, then
        each element of the row computed again, normalized and stored."""
        kind = ROW_KINDS[node.op.name]
        exts = [self.dims[a] for a in axes]
        wide = kind is RowKind.NORM or node.inputs[0].dtype == torch.float64
        self.outer.stmts.append(RowInit(kind, F64 if wide else F32))
        if not extent.is_lit(0):
            lvars = self.open_loops(exts, exts, extent, loops)
            ins = located(node, node.op.reverse, self.g, node, coords, loops=lvars)
            self.enter(node, coords, ins[0])
            self.inner.stmts.append(RowAccumulate(kind, self.value(node.inputs[0], ins[0])))
            self.path.pop()
            self.close_loops(loops)
        if self.cooperative:
            self.outer.stmts.append(RowCombine(kind))
        self.outer.stmts.append(RowStats(kind, self.index(extent), node.attrs.get("eps", 0.0)))
        if extent.is_lit(0):
            return
        again: list = []
        lvars = self.open_loops(exts, exts, extent, again)
        ins = located(node, node.op.reverse, self.g, node, coords, loops=lvars)
        self.enter(node, coords, ins[0])
        affine = [self.value(p, c) for p, c in zip(node.inputs[1:], ins[1:])]
        res = self.tmp("v")
        self.inner.stmts.append(RowOutput(res, kind, self.value(node.inputs[0], ins[0]), out_t,
                                          *affine))
        self.path.pop()
        idx = self.simplify(linear_index(ins[0], self.dims))
        idx = self.simplify(idx.subs(self.coord_defs))
        self.index_exprs.append(idx)
        self.inner.stmts.append(StoreAt(self.index(idx), res))
        self.close_loops(again)


_COUNT = Reduction(Combine.SUM)


def transform_kind(node, coords, ins, loop_names) -> str:
    """What ``node``'s reverse transform does to one input (for ``CoordMap.via``): ``coords`` the
    output coordinates, ``ins`` that input's (a list or ``Guarded``), ``loop_names`` the loop
    variables in scope."""
    kind = node.op.kind
    cs = list(ins.coords if isinstance(ins, Guarded) else ins)
    if kind is OpKind.ELEMENTWISE or node.op is Ops.expand:
        tail = coords[len(coords) - len(cs):] if cs else []
        bcast = len(cs) < len(coords) or any(c.is_lit(0) and not o.is_lit(0)
                                             for c, o in zip(cs, tail))
        return "broadcast→0" if bcast else "identity"
    if kind is OpKind.REDUCE:   # a window mixes output coordinates and loop variables
        mixed = any(c.free_vars & loop_names and any(v.startswith("_") for v in c.free_vars - loop_names)
                    for c in cs)   # kernel-internal names start with "_", dims' never do
        return "window" if mixed else "reduce loop"
    return _TRANSFORM_KINDS.get(node.op.name) or _TRANSFORM_KINDS.get(kind.value, kind.value)


_TRANSFORM_KINDS = {"reshape": "reshape (div/mod)", "permute": "permute", "slice": "slice",
                    "roll": "roll (mod)", "pad": "pad (guarded)", "cat": "cat (guarded)",
                    "pad_axis": "pad (reflect/replicate/circular, guarded)",
                    "select": "guarded select", "gather": "gather", "row": "row loop"}
"""``transform_kind`` by op name, then by op kind."""


class IndexSpelling:
    """kgen's domain of ``dims.interpret``: an index expression's value is the name (literal,
    param) holding it in the kernel; each composite node one statement (``IdxSum``, ``IdxProd``,
    ``IdxDivMod``, spelled per language by ``kgen.emit``) in the innermost scope it depends on.
    The memo (``get``) is what the kernel has before computing a node: the statements of the
    scope chain (a node is emitted once per scope) and the host-computed params (a node over
    runtime dims only that holds a ``//`` or ``%``). Divisors in a kernel are positive where it
    has elements, so no zero-divisor policy applies."""

    def __init__(self, b: "_Builder") -> None:
        self.b = b

    def get(self, e: Expr) -> str | None:
        if not (e.free_vars & self.b.bounds.keys()) and not _is_poly_of_vars(e):
            return self.b.param(e)   # host-computed (contains // or % of runtime dims)
        return self.b.lookup(e)

    @staticmethod
    def lit(e: Lit) -> str:
        return str(e.value) if e.value >= 0 else f"({e.value})"

    def var(self, v: Var) -> str:
        return code_name(v) if v.name in self.b.bounds else self.b.param(v)

    def sum(self, e: Expr, const: int, terms: list) -> str:
        terms = tuple((c, n) for n, c in terms)
        return self.emit(IdxSum(self.b.tmp("i"), const, terms, e))

    def prod(self, e: Expr, factors: list) -> str:
        return self.emit(IdxProd(self.b.tmp("i"), tuple(factors), e))

    def floordiv(self, e: Expr, num: str, den: str) -> str:
        return self.divmod(e, DivMod.FLOORDIV, num, den)

    def mod(self, e: Expr, num: str, den: str) -> str:
        return self.divmod(e, DivMod.MOD, num, den)

    def divmod(self, e: Expr, op: DivMod, num: str, den: str) -> str:
        floor = needs_floor(e, self.b.bounds)
        return self.emit(IdxDivMod(self.b.tmp("i"), op, num, den, floor, e,
                                   "" if floor else self.b.divisor(e.den)))

    def emit(self, stmt) -> str:
        e = stmt.expr
        self.b.index_exprs.append(e)
        scope = self.b.scope_for(e.free_vars)
        scope.stmts.append(stmt)
        scope.memo[e] = stmt.name
        return stmt.name


def _is_poly_of_vars(e: Expr) -> bool:
    """True when ``e`` is a polynomial in plain variables (cheap to compute in-kernel)."""
    if isinstance(e, (Lit, Var)):
        return True
    if isinstance(e, (FloorDiv, Mod)):
        return False
    return all(_is_poly_of_vars(c) for c in e.children())


def magnitude(e: Expr, b: Bounds, memo: dict | None = None) -> Expr:
    """A bound, as an expression of runtime dims, on ``|x|`` for the value ``x`` of ``e`` and for
    every partial result of computing it term by term, over the coordinate ranges ``b`` (runtime
    dims are non-negative; a coordinate ``v`` is at most ``b[v] - 1``; ``|x // d| <= |x| // d``,
    plus one when ``x`` may be negative; ``x % d`` is below ``d``, its floor correction below
    ``2d``). ``memo``: magnitudes already found under ``b`` (expressions share subexpressions)."""
    if isinstance(e, Lit):
        return lit(abs(e.value))
    if isinstance(e, Var):
        return b[e.name] - 1 if e.name in b else e
    memo = {} if memo is None else memo
    done = memo.get(e)
    if done is not None:
        return done
    if isinstance(e, Sum):
        out = sum((magnitude(m, b, memo) * abs(c) for m, c in e.terms), lit(abs(e.const)))
    elif isinstance(e, Prod):
        out = prod(magnitude(f, b, memo) for f in e.factors)
    elif isinstance(e, FloorDiv):   # x // d, d >= 1 a runtime value (else only d >= 1 is known)
        out = magnitude(e.num, b, memo)
        if not e.den.free_vars & b.keys():
            lo = lower(e.num, b)
            out = out // e.den + (0 if lo is not None and nonneg(lo) else 1)
    else:
        out = magnitude(e.den, b, memo) * 2
    memo[e] = out
    return out


SCALAR_IN_DTYPE = frozenset({"remainder", "pow"})
"""Ops whose Python-float operand torch rounds to a 16-bit tensor's dtype before computing, on
CPU and CUDA alike (its kernels take the scalar as ``scalar_t``; ``pow`` either way round), as it
does for every comparison (a bool output); mul and div compute with the float as given (opmath),
and so do add and sub on CUDA (CPU eager rounds theirs: one unit in the last place apart)."""

BOUND_SLACK = 1 << 10
"""An index bound within this of another one is dropped (``entries.NARROW_LIMIT`` leaves room
for it)."""


def index_bounds(exprs: list[Expr], b: Bounds) -> tuple[Expr, ...]:
    """The magnitudes of ``exprs``, without those provably at most ``BOUND_SLACK`` above another
    one (``N`` beside ``24*N - 1``: the host evaluates fewer bounds per call)."""
    mags: list[Expr] = []
    memo: dict = {}
    for e in dict.fromkeys(magnitude(x, b, memo) for x in exprs):
        if any(nonneg(m - e + BOUND_SLACK) for m in mags):
            continue
        mags = [m for m in mags if not nonneg(e - m + BOUND_SLACK)] + [e]
    return tuple(mags)


def materialized_values(g: Graph) -> list[Value]:
    """The values that get a buffer (``Graph.materialized``)."""
    return g.materialized()


def infer_kernels(g: Graph, cooperative: bool = False) -> list[KernelBody]:
    """One kernel per generated step of the partition (``passes.partition.steps``: the one step
    list, which the launch plan and the thunks walk too) that launches (its element count is not
    literally 0), in step order. With ``cooperative``, each reduction kernel also carries a
    block-per-output ``variant`` (for large reduced extents)."""
    mats = materialized_values(g)
    by_id = {v.id: v for v in mats}
    mat_ids = set(by_id)
    part = getattr(g, "partition", None)
    out = []
    for st in part.steps if part is not None else steps(g):
        if st.kind != "generated" or not st.launches:
            continue
        v = by_id[st.value_id]
        name = f"dlcb_k{st.index}_{_ident(v.name)}"
        try:
            body = _Builder(g, v, mat_ids, name).build()
            if _runtime_nest(body.stmts):
                flat = _Builder(g, v, mat_ids, name, flat=True).build()
                body = body if _splits_flat(flat.stmts) else flat
            if cooperative and body.reduce_extent is not None:
                body = replace(body, variant=_Builder(g, v, mat_ids, name + "_blk", True).build())
        except DLError as err:   # not located at a node below: the kernel's own value
            raise err.locate(*_where(v)) from None
        out.append(body)
    return out


def _runtime_nest(stmts, nested: bool = False) -> bool:
    """Whether a loop nest has a runtime extent: the compiler can neither unroll its inner loop
    nor overlap loads across its rows (convnext_tiny's head pool over a runtime 7x7 window,
    7.5 against the static kernel's 5.3 us on an H100; one loop over the 49, 5.5 us)."""
    return any(isinstance(s, Loop) and ((nested and not s.extent.isdigit())
                                        or _runtime_nest(s.body, True)) for s in stmts)


def _splits_flat(stmts) -> bool:
    """Whether a flattened window divides its loop variable (the window is not contiguous in
    what it reads: the nest is cheaper)."""
    return any(_splits_flat(s.body) if isinstance(s, Loop) else
               isinstance(s, IdxDivMod) and FLAT_LOOP.name in s.expr.free_vars for s in stmts)


def _where(v: Value) -> tuple[str, str, str]:
    """(op, node, source line) of ``v`` for ``DLError.locate``."""
    n = v.producer
    return ("input", v.name, "") if n is None else (n.op.name, n.out.name, n.where)


def located(node, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with a ``DLError`` it raises located at ``node`` (its op, value
    and source line), unless a node below already located it."""
    try:
        return fn(*args, **kwargs)
    except DLError as err:
        raise err.locate(*_where(node.out)) from None


def _ident(s: str) -> str:
    return "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in s)


def needs_floor(e: FloorDiv | Mod, bounds: Bounds) -> bool:
    """C's ``/`` and ``%`` truncate; they equal floor semantics when the numerator is >= 0."""
    lo = lower(e.num, bounds)
    return not (lo is not None and nonneg(lo))
