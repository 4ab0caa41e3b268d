"""Fixed-point rewrite solver for dimension constraints (paper §3).

The solver keeps three things: a triangular substitution ``var := expr`` (no solved variable occurs
in any right-hand side), a work list of constraints, and the residual constraints no rule reduces.
A constraint is rewritten by the first applicable rule of ``RULES`` (highest priority first) until
it is dropped (it holds), turned into a binding, split, or left as a residual. Binding a variable
re-queues the residuals that mention it. Each application is a frozen ``TraceRecord``.

The rule set is deliberately small (paper: the regular patterns of the supported ops); it does not
solve arbitrary integer systems. What it cannot reduce stays residual and is checked on the host.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import astuple, dataclass, replace
from typing import Callable, Iterable, Mapping

from .constraints import Constraint, Constraints, Contradiction, Provenance
from .expr import (Expr, ExprLike, Lit, Prod, Shape, Sum, Var, _as_poly, _poly_to_expr, as_expr,
                   gcd_of, lit, prod)


class DimKind(enum.Enum):
    LITERAL = "literal"    # baked into generated code
    NAMED = "named"        # a runtime kernel parameter
    RESIDUAL = "residual"  # computed by the host program


def kind_of(resolved: Expr) -> DimKind:
    """Classification of a dimension after substitution."""
    if isinstance(resolved, Lit):
        return DimKind.LITERAL
    return DimKind.NAMED if isinstance(resolved, Var) else DimKind.RESIDUAL


@dataclass(frozen=True)
class TraceRecord:
    """One rule application: ``before`` rewritten to ``after`` for constraint ``constraint_id``."""

    step: int
    rule: str
    constraint_id: int
    before: str
    after: str
    t_ns: int

    def __repr__(self) -> str:
        return f"{self.step:>4} #{self.constraint_id:<3} {self.rule:<22} {self.before}  ->  {self.after}"


class SolverTrace(tuple):
    """The ordered rule applications of a solve (a tuple of ``TraceRecord``)."""

    def rule_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self:
            out[t.rule] = out.get(t.rule, 0) + 1
        return out

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([astuple(t) for t in self],
                            columns=["step", "rule", "constraint_id", "before", "after", "t_ns"])

    def __repr__(self) -> str:
        return "\n".join([f"SolverTrace: {len(self)} rule applications {self.rule_counts()}"]
                         + [repr(t) for t in self])


# --- rule outcomes ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Drop:           # the constraint holds
    pass


@dataclass(frozen=True)
class _Fail:           # the constraint cannot hold
    why: str


@dataclass(frozen=True)
class _Replace:        # rewritten into these equations (same provenance, optional detail each)
    eqs: tuple[tuple[Expr, Expr], ...]
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Bind:           # solved: var := expr, plus host-checked side conditions (expr == 0)
    v: Var
    e: Expr
    side: tuple[Expr, ...] = ()


Outcome = _Drop | _Fail | _Replace | _Bind | None


def _diff(a: Expr, b: Expr) -> Expr:
    return a - b


def _split_signs(d: Expr) -> tuple[Expr, Expr]:
    """``d == 0`` as ``positive part == negated negative part``."""
    const, terms = _as_poly(d)
    pos = _poly_to_expr((max(const, 0), {m: c for m, c in terms.items() if c > 0}))
    neg = _poly_to_expr((max(-const, 0), {m: -c for m, c in terms.items() if c < 0}))
    return pos, neg


def _pick_var(cands: Iterable[Var]) -> Var | None:
    best = None
    for v in cands:
        if v.rank >= 2:
            continue
        if best is None or (v.rank, -v.serial) < (best.rank, -best.serial):
            best = v
    return best


def _linear_split(d: Expr, v: Var) -> tuple[Expr, Expr] | None:
    """``d == v*a + b`` with ``v`` free in ``a`` and ``b`` and ``a`` a monomial, else None."""
    const, terms = _as_poly(d)
    a_const = 0
    a_terms: dict = {}
    b_terms: dict = {}
    for m, c in terms.items():
        fs = m.factors if isinstance(m, Prod) else (m,)
        k = fs.count(v)
        if k == 0:
            if v.name in m.free_vars:
                return None  # v inside a // or % atom
            b_terms[m] = c
        elif k == 1 and all(v.name not in f.free_vars for f in fs if f is not v):
            rest = list(fs)
            rest.remove(v)
            if not rest:
                a_const += c
                continue
            mono = rest[0] if len(rest) == 1 else _as_poly(prod(rest))[1].popitem()[0]
            a_terms[mono] = a_terms.get(mono, 0) + c
        else:
            return None
    a = _poly_to_expr((a_const, a_terms))
    if not (isinstance(a, (Lit, Var, Prod)) or (isinstance(a, Sum) and a.const == 0
                                               and len(a.terms) == 1)):
        return None
    return a, _poly_to_expr((const, b_terms))


# --- rules: (name, comment, fn(lhs, rhs) -> Outcome) -------------------------------------------

def _r_trivial(a, b):
    # a == a  ->  true   (interned: structural equality is identity)
    return _Drop() if a is b else None


def _r_literal(a, b):
    # 3 == 4  ->  contradiction
    if isinstance(a, Lit) and isinstance(b, Lit):
        return _Drop() if a.value == b.value else _Fail(f"{a.value} != {b.value}")
    return None


def _r_unpack(a, b):
    # [a0, a1] == [b0, b1]  ->  a0 == b0, a1 == b1
    if isinstance(a, Shape) or isinstance(b, Shape):
        if not (isinstance(a, Shape) and isinstance(b, Shape)):
            return _Fail(f"rank mismatch: {a!r} vs {b!r}")
        if len(a) != len(b):
            return _Fail(f"rank {len(a)} != rank {len(b)}")
        return _Replace(tuple(zip(a.items, b.items)), tuple(f"axis {i}" for i in range(len(a))))
    return None


def _r_cancel(a, b):
    # g*a == g*b + g*k  ->  a == b + k;   g*a == g*b + r (g does not divide r)  ->  contradiction
    d = _diff(a, b)
    const, terms = _as_poly(d)
    if not terms:
        return _Drop() if const == 0 else _Fail(f"{d!r} == 0")
    g = gcd_of(_poly_to_expr((0, terms)))
    if g > 1:
        if const % g:
            return _Fail(f"{g} divides the left side but not {const}: {d!r} == 0 has no solution")
        return _Replace((_split_signs(_poly_to_expr((const // g, {m: c // g for m, c in terms.items()}))),))
    return None


def _r_collect(a, b):
    # a + k == b + j  ->  a + (k - j) == b   (terms moved to the side where they are positive)
    if isinstance(a, Shape):
        return None
    pos, neg = _split_signs(_diff(a, b))
    if (pos is a and neg is b) or (pos is b and neg is a):
        return None
    return _Replace(((pos, neg),))


def _r_solve(a, b):
    # v*m + e == 0  ->  v := -e // m   (+ host check -e % m == 0 unless m divides e)
    d = _diff(a, b)
    for v in sorted((x for x in _vars_of(d) if x.rank < 2), key=lambda x: (x.rank, -x.serial)):
        split = _linear_split(d, v)
        if split is None:
            continue
        m, e = split
        if (m.value if isinstance(m, Lit) else m.terms[0][1] if isinstance(m, Sum) else 1) < 0:
            m, e = -m, -e
        q, side = (-e) // m, (-e) % m
        if v.rank == 0 or side.is_lit(0):   # a user dim is never defined by a division
            return _Bind(v, q, () if side.is_lit(0) else (side,))
    return None


RULES: list[tuple[str, str, Callable[[Expr, Expr], Outcome]]] = [
    ("trivial", "a == a  ->  true", _r_trivial),
    ("literal", "3 == 4  ->  contradiction; 3 == 3  ->  true", _r_literal),
    ("unpack_list", "[a0, a1] == [b0, b1]  ->  a0 == b0, a1 == b1", _r_unpack),
    ("cancel_common_factor", "g*a == g*b + g*k  ->  a == b + k", _r_cancel),
    ("collect", "a + k == b + j  ->  a + (k - j) == b", _r_collect),
    ("solve", "v*m + e == 0  ->  v := -e // m (+ host check -e % m == 0)", _r_solve),
]
"""Rewrite rules, highest priority first. Substitution of solved variables runs before all of
them (rule name ``substitute``)."""


def _vars_of(e: Expr) -> list[Var]:
    out: dict[str, Var] = {}
    stack = [e]
    seen = set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if isinstance(x, Var):
            out[x.name] = x
        else:
            stack.extend(x.children())
    return list(out.values())


class Solver:
    """Incremental fixed-point solver. ``add`` reduces one constraint (and what it unblocks)."""

    def __init__(self) -> None:
        self.constraints: list[Constraint] = []
        self.subst: dict[Var, Expr] = {}
        self.binding_source: dict[Var, Constraint] = {}
        self._used: dict[int, frozenset[Var]] = {}   # constraint id -> solved vars substituted in
        self._deps: dict[Var, frozenset[Var]] = {}   # solved var -> solved vars its value used
        self.residuals: list[Constraint] = []
        self.trace: list[TraceRecord] = []
        self._next_id = 0

    # -- public -------------------------------------------------------------------------------
    def add(self, lhs: ExprLike, rhs: ExprLike, provenance: Provenance) -> Constraint:
        """Record ``lhs == rhs`` and solve to a fixed point; raises ``Contradiction``."""
        c = self._new(as_expr(lhs), as_expr(rhs), provenance)
        self.constraints.append(c)
        self._run(deque([c]))
        return c

    def resolve(self, e: Expr) -> Expr:
        """``e`` under the current substitution."""
        return e.subs(self.subst) if self.subst and (e.free_vars & self._solved_names()) else e

    def classify(self, e: Expr) -> DimKind:
        return kind_of(self.resolve(e))

    def solution(self) -> "Solution":
        return Solution(dict(self.subst), Constraints(self.residuals), SolverTrace(self.trace),
                        Constraints(self.constraints))

    # -- internals ------------------------------------------------------------------------------
    def _solved_names(self) -> frozenset[str]:
        return frozenset(v.name for v in self.subst)

    def _new(self, lhs: Expr, rhs: Expr, prov: Provenance) -> Constraint:
        self._next_id += 1
        return Constraint(self._next_id, lhs, rhs, prov)

    def _record(self, rule: str, c: Constraint, before: str, after: str) -> None:
        self.trace.append(TraceRecord(len(self.trace), rule, c.id, before, after,
                                      time.perf_counter_ns()))

    def _colliding(self, c: Constraint, extra: Iterable[Var] = ()) -> tuple[Constraint, ...]:
        """Sources of the bindings substituted into ``c`` or its rewrites (and of ``extra``),
        transitively."""
        seen: set[Var] = set()
        stack = [*self._used.get(c.id, ()), *extra]
        while stack:
            v = stack.pop()
            if v not in seen:
                seen.add(v)
                stack.extend(self._deps[v])
        return tuple(src for v, src in self.binding_source.items() if v in seen and src is not c)

    def _run(self, work: deque) -> None:
        while work:
            c: Constraint = work.popleft()
            a, b = c.lhs, c.rhs
            solved = self._solved_names()
            if (a.free_vars | b.free_vars) & solved:
                used = frozenset(v for v in self.subst if v.name in a.free_vars | b.free_vars)
                self._used[c.id] = self._used.get(c.id, frozenset()) | used
                try:
                    a2, b2 = a.subs(self.subst), b.subs(self.subst)
                except ZeroDivisionError as err:  # a solved divisor is 0
                    raise Contradiction(c, str(err), self._colliding(c)) from None
                self._record("substitute", c, f"{a!r} == {b!r}", f"{a2!r} == {b2!r}")
                a, b = a2, b2
            for name, _, fn in RULES:
                out = fn(a, b)
                if out is None:
                    continue
                if isinstance(out, _Drop):
                    self._record(name, c, f"{a!r} == {b!r}", "true")
                elif isinstance(out, _Fail):
                    self._record(name, c, f"{a!r} == {b!r}", "false")
                    raise Contradiction(c, out.why, self._colliding(c))
                elif isinstance(out, _Replace):
                    self._record(name, c, f"{a!r} == {b!r}",
                                 ", ".join(f"{x!r} == {y!r}" for x, y in out.eqs))
                    for k in reversed(range(len(out.eqs))):
                        prov = c.provenance
                        if out.details:
                            sep = ", " if prov.detail else ""
                            prov = replace(prov, detail=prov.detail + sep + out.details[k])
                        work.appendleft(Constraint(c.id, *out.eqs[k], prov))
                elif isinstance(out, _Bind):
                    after = f"{out.v!r} := {out.e!r}"
                    if out.side:
                        after += "; host-check " + ", ".join(f"{s!r} == 0" for s in out.side)
                    self._record(name, c, f"{a!r} == {b!r}", after)
                    self._bind(out.v, out.e, c, work)
                    for s in out.side:
                        work.append(Constraint(c.id, s, lit(0), c.provenance))
                break
            else:
                if (a, b) != (c.lhs, c.rhs):
                    c = Constraint(c.id, a, b, c.provenance)
                self.residuals.append(c)

    def _bind(self, v: Var, e: Expr, src: Constraint, work: deque) -> None:
        one = {v: e}
        for k in list(self.subst):
            if v.name in self.subst[k].free_vars:
                try:
                    self.subst[k] = self.subst[k].subs(one)
                except ZeroDivisionError as err:  # k := x // v (reshape -1) with v := 0
                    raise Contradiction(src, f"{k!r} := {self.subst[k]!r} with {v!r} := {e!r}: "
                                        f"{err}", self._colliding(src, (k,))) from None
                self._deps[k] |= {v}
        self.subst[v] = e
        self._deps[v] = self._used.get(src.id, frozenset())
        self.binding_source[v] = src
        keep = []
        for r in self.residuals:
            (work.append if v.name in (r.lhs.free_vars | r.rhs.free_vars) else keep.append)(r)
        self.residuals = keep


@dataclass(frozen=True)
class Solution:
    """The fixed point: substitution, residual (host-checked) constraints and the trace."""

    subst: Mapping[Var, Expr]
    residuals: tuple[Constraint, ...]
    trace: tuple[TraceRecord, ...]
    constraints: tuple[Constraint, ...]

    def resolve(self, e: Expr) -> Expr:
        return e.subs(self.subst)

    def classify(self, e: Expr) -> DimKind:
        return kind_of(self.resolve(e))

    def rule_counts(self) -> dict[str, int]:
        return SolverTrace(self.trace).rule_counts()

    def __repr__(self) -> str:
        lines = [f"Solution: {len(self.subst)} solved, {len(self.residuals)} residual, "
                 f"{len(self.trace)} rule applications"]
        lines += [f"  {v!r} := {e!r}" for v, e in self.subst.items()]
        lines += [f"  residual {r!r}" for r in self.residuals]
        return "\n".join(lines)


def solve(eqs: Iterable[tuple[Expr, Expr] | Constraint]) -> Solution:
    """Solve a batch of equations (convenience for tests and notebooks)."""
    s = Solver()
    for i, q in enumerate(eqs):
        if isinstance(q, Constraint):
            s.add(q.lhs, q.rhs, q.provenance)
        else:
            s.add(q[0], q[1], Provenance("eq", detail=f"equation {i}"))
    return s.solution()
