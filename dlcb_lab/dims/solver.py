"""Fixed-point rewrite solver for dimension constraints (paper §3).

The solver keeps three things: a triangular substitution ``var := expr`` (no solved variable occurs
in any right-hand side), a work list of constraints, and the residual constraints no rule reduces.
A constraint is rewritten by the first applicable rule of ``RULES`` (highest priority first; the
first, ``substitute``, applies the substitution) until it is dropped (it holds), turned into a
binding, rewritten into new constraints, or left as a residual. Binding a variable re-queues the
residuals that mention it.

Lineage. Every constraint a rule produces is a new ``Constraint`` with its own id and ``parent``
set to the constraint it was rewritten from. ``Solver.constraints`` holds the user-added ones,
``Solver.derived`` the produced ones in creation order, so the original set and every rewrite chain
can be reconstructed (``origin`` follows ``parent`` to the user-added constraint). Each rule
application is a frozen ``TraceRecord`` holding the interned equation and the rule's outcome; its
text is rendered only when asked.

Replay. A ``SolverTrace`` also holds the user-added constraints (and the derived ones), so
``SolverTrace.replay()`` re-runs the solve with each rule's recorded outcome in place of the rule:
it yields the work list, residuals and substitution after every step, and the state after the last
step is the ``Solution``'s. A ``Contradiction`` raised by the solver carries the trace up to the
failing step as ``trace``.

Elimination order. ``solve`` prefers the variable of lowest rank and, among equal ranks, the one the
solver saw last; variables are numbered by first appearance (left to right, lhs before rhs) in the
constraints passed to ``add``. The result depends only on the constraints, never on when the ``Var``
objects were created.

The rule set is deliberately small (paper: the regular patterns of the supported ops); it does not
solve arbitrary integer systems. What it cannot reduce stays residual and is checked on the host.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Callable, Iterable, Iterator, Mapping

from ..display import Rich
from .bounds import nonneg
from .constraints import Constraint, Constraints, Contradiction, Provenance
from .expr import (Expr, ExprLike, Lit, Shape, Sum, Var, _as_poly, _factors, _make_prod,
                   _monomial, _poly_to_expr, as_expr, gcd_of, lit)


class DimKind(enum.Enum):
    LITERAL = "literal"    # baked into generated code
    NAMED = "named"        # a runtime kernel parameter
    RESIDUAL = "residual"  # computed by the host program


def kind_of(resolved: Expr) -> DimKind:
    """Classification of a dimension after substitution."""
    if isinstance(resolved, Lit):
        return DimKind.LITERAL
    return DimKind.NAMED if isinstance(resolved, Var) else DimKind.RESIDUAL


# --- rule outcomes ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Drop:
    """The constraint holds."""

    def render(self) -> str:
        return "true"


@dataclass(frozen=True)
class Fail:
    """The constraint cannot hold (``why``). ``used``: solved variables just substituted in."""

    why: str
    used: frozenset[Var] = frozenset()

    def render(self) -> str:
        return "false"


@dataclass(frozen=True)
class Replace:
    """Rewritten into the equations ``eqs``, each a new derived constraint (provenance detail
    ``details[k]`` appended when given). ``used``: solved variables substituted in."""

    eqs: tuple[tuple[Expr, Expr], ...]
    details: tuple[str, ...] = ()
    used: frozenset[Var] = frozenset()

    def render(self) -> str:
        return ", ".join(f"{x!r} == {y!r}" for x, y in self.eqs)


@dataclass(frozen=True)
class Bind:
    """Solved: ``v := e``, plus host-checked side conditions ``s == 0`` (derived constraints)."""

    v: Var
    e: Expr
    side: tuple[Expr, ...] = ()

    def render(self) -> str:
        s = f"{self.v!r} := {self.e!r}"
        if self.side:
            s += "; host-check " + ", ".join(f"{x!r} == 0" for x in self.side)
        return s


Outcome = Drop | Fail | Replace | Bind | None


@dataclass(frozen=True)
class TraceRecord(Rich):
    """One rule application: equation ``eq`` of constraint ``constraint_id`` (derived from
    ``parent_id``, None if user-added) rewritten with ``outcome``. ``before``/``after`` render
    them as text. ``t_ns``: ``perf_counter_ns`` when the rule applied; ``dt_ns``: the time to
    find and compute the rewrite (the rules tried before it included; applying it excluded)."""

    step: int
    rule: str
    constraint_id: int
    parent_id: int | None
    eq: tuple[Expr, Expr]
    outcome: Drop | Fail | Replace | Bind
    t_ns: int
    dt_ns: int = 0

    @property
    def before(self) -> str:
        return f"{self.eq[0]!r} == {self.eq[1]!r}"

    @property
    def after(self) -> str:
        return self.outcome.render()

    def __repr__(self) -> str:
        return f"{self.step:>4} #{self.constraint_id:<3} {self.rule:<22} {self.before}  ->  {self.after}"


class SolverTrace(tuple, Rich):
    """The ordered rule applications of a solve (a tuple of ``TraceRecord``), with the
    user-added ``constraints`` (in order) and the ``derived`` ones (in creation order) they act
    on. Built from another ``SolverTrace`` without ``constraints``, it keeps that one's."""

    constraints: tuple[Constraint, ...]
    derived: tuple[Constraint, ...]

    def __new__(cls, records: Iterable[TraceRecord] = (),
                constraints: Iterable[Constraint] | None = None,
                derived: Iterable[Constraint] | None = None) -> "SolverTrace":
        self = super().__new__(cls, records)
        if constraints is None and isinstance(records, SolverTrace):
            constraints, derived = records.constraints, records.derived
        self.constraints = tuple(constraints or ())
        self.derived = tuple(derived or ())
        return self

    def constraint(self, cid: int) -> Constraint:
        """The user-added or derived constraint with id ``cid`` (KeyError if unknown)."""
        by_id = self.__dict__.get("_by_id")
        if by_id is None:
            by_id = self.__dict__["_by_id"] = {c.id: c for c in (*self.constraints,
                                                                 *self.derived)}
        return by_id[cid]

    def replay(self, initial: bool = False) -> Iterator["SolverState"]:
        """The solver's tables after each step, in order (with ``initial``, first the state
        before step 0). Re-runs the solve from ``constraints`` with every rule replaced by its
        recorded outcome, so the last state's ``subst`` and ``residuals`` are the solution's.
        A state includes the user constraints added before the next step (those no rule
        rewrote are residual already). Raises ``ValueError`` when the records do not replay
        (a trace without its constraints, or records out of order)."""
        return _replay(self, initial)

    def rule_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self:
            out[t.rule] = out.get(t.rule, 0) + 1
        return out

    def to_frame(self):
        """One row per step; times in µs: ``t_us`` when the rule applied, counted from the
        start of the first step's rule search, ``dt_us`` the step's own time (``dt_ns``)."""
        import pandas as pd

        t0 = self[0].t_ns - self[0].dt_ns if len(self) else 0
        return pd.DataFrame([(t.step, t.rule, t.constraint_id, t.parent_id, t.before, t.after,
                              (t.t_ns - t0) / 1e3, t.dt_ns / 1e3) for t in self],
                            columns=["step", "rule", "constraint_id", "parent_id", "before",
                                     "after", "t_us", "dt_us"])

    def rule_frame(self):
        """One row per rule that applied (in ``RULES`` order): ``count``, ``total_us`` and
        ``mean_us`` of the steps' ``dt_ns`` in µs (the unit of ``to_frame`` and of the rendered
        trace), and ``share`` of the total time."""
        import pandas as pd

        acc: dict[str, list[int]] = {}
        for t in self:
            a = acc.setdefault(t.rule, [0, 0])
            a[0] += 1
            a[1] += t.dt_ns
        order = {name: k for k, (name, _, _) in enumerate(RULES)}
        rows = sorted(acc.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))
        total = sum(a[1] for _, a in rows) or 1
        return pd.DataFrame([(r, n, ns / 1e3, ns / n / 1e3, ns / total) for r, (n, ns) in rows],
                            columns=["rule", "count", "total_us", "mean_us", "share"]
                            ).set_index("rule")

    def __repr__(self) -> str:
        return "\n".join([f"SolverTrace: {len(self)} rule applications {self.rule_counts()}"]
                         + [repr(t) for t in self])


@dataclass(frozen=True, eq=False)
class SolverState(Rich):
    """The solver's tables after trace step ``step`` (-1: before the first; ``record`` its
    ``TraceRecord``): ``pending`` the work list in order, ``residuals`` the constraints no rule
    reduces (in the solver's order), ``subst`` the substitution (read-only, in binding order).
    ``failed``: the constraint this step found contradictory (the solve of its ``add`` stopped
    there). States share unchanged tables: treat them as read-only."""

    step: int
    record: TraceRecord | None
    pending: tuple[Constraint, ...]
    residuals: tuple[Constraint, ...]
    subst: Mapping[Var, Expr]
    failed: Constraint | None = None

    @property
    def live(self) -> dict[int, Constraint]:
        """The live equations (pending and residual) by constraint id, in id order."""
        return {c.id: c for c in sorted((*self.pending, *self.residuals), key=lambda c: c.id)}

    def __repr__(self) -> str:
        lines = [f"SolverState after step {self.step}: {len(self.pending)} pending, "
                 f"{len(self.residuals)} residual, {len(self.subst)} solved"
                 + (f", #{self.failed.id} failed" if self.failed is not None else "")]
        lines += [f"  {v!r} := {e!r}" for v, e in self.subst.items()]
        lines += [f"  pending {c!r}" for c in self.pending]
        lines += [f"  residual {c!r}" for c in self.residuals]
        return "\n".join(lines)


@dataclass(frozen=True)
class RuleContext:
    """The solver state a rule may read (live views of the solver's tables; rules never write
    them): the substitution, the solved variables by name, and each variable's first-appearance
    number."""

    subst: Mapping[Var, Expr]
    solved: Mapping[str, Var]
    seen: Mapping[str, int]

    def order(self, v: Var) -> tuple[int, int]:
        """Elimination preference, smallest first: lowest rank, then the latest seen."""
        return v.rank, -self.seen[v.name]


def _split_signs(d: Expr) -> tuple[Expr, Expr]:
    """``d == 0`` as ``positive part == negated negative part``."""
    const, terms = _as_poly(d)
    pos = _poly_to_expr((max(const, 0), {m: c for m, c in terms.items() if c > 0}))
    neg = _poly_to_expr((max(-const, 0), {m: -c for m, c in terms.items() if c < 0}))
    return pos, neg


def _linear_split(d: Expr, v: Var) -> tuple[Expr, Expr] | None:
    """``d`` as ``v*m + e`` with ``v`` free in ``m`` and ``e`` (``m`` any polynomial), else None
    (``v`` squared, or inside a ``//`` or ``%``)."""
    const, terms = _as_poly(d)
    m_const = 0
    m_terms: dict = {}
    e_terms: dict = {}
    for mono, c in terms.items():
        if v.name not in mono.free_vars:
            e_terms[mono] = c
            continue
        rest = list(_factors(mono))
        if rest.count(v) != 1:
            return None
        rest.remove(v)
        if any(v.name in f.free_vars for f in rest):
            return None
        if rest:
            m_terms[_make_prod(tuple(rest))] = c   # distinct monomials give distinct rests
        else:
            m_const += c
    return _poly_to_expr((m_const, m_terms)), _poly_to_expr((const, e_terms))


def _leading(m: Expr) -> int:
    """Coefficient of the term of highest degree (atoms count 1; ties: the last in canonical
    order), the one that decides the sign for large values."""
    if isinstance(m, Lit):
        return m.value
    if isinstance(m, Sum):
        return max(m.terms, key=_degree_key)[1]
    return 1


def _degree_key(term: tuple[Expr, int]) -> tuple:
    return len(_factors(term[0])), term[0].sort_key


# --- rules: (name, comment, fn(ctx, lhs, rhs) -> Outcome) ---------------------------------------

def _r_substitute(ctx, a, b):
    if not ctx.solved:
        return None
    names = (a.free_vars | b.free_vars) & ctx.solved.keys()
    if not names:
        return None
    used = frozenset(ctx.solved[n] for n in names)
    try:
        return Replace(((a.subs(ctx.subst), b.subs(ctx.subst)),), used=used)
    except ZeroDivisionError as err:  # a solved divisor is 0
        return Fail(str(err), used)


def _r_trivial(ctx, a, b):
    return Drop() if a is b else None


def _r_literal(ctx, a, b):
    if isinstance(a, Lit) and isinstance(b, Lit):
        return Drop() if a.value == b.value else Fail(f"{a.value} != {b.value}")
    return None


def _r_unpack(ctx, a, b):
    if isinstance(a, Shape) or isinstance(b, Shape):
        if not (isinstance(a, Shape) and isinstance(b, Shape)):
            return Fail(f"rank mismatch: {a!r} vs {b!r}")
        if len(a) != len(b):
            return Fail(f"rank {len(a)} != rank {len(b)}")
        return Replace(tuple(zip(a.items, b.items)), tuple(f"axis {i}" for i in range(len(a))))
    return None


def _r_cancel(ctx, a, b):
    d = a - b
    const, terms = _as_poly(d)
    if not terms:
        return Drop() if const == 0 else Fail(f"{d!r} == 0")
    g = gcd_of(_poly_to_expr((0, terms)))
    if g > 1:
        if const % g:
            return Fail(f"{g} divides the left side but not {const}: {d!r} == 0 has no solution")
        reduced = _poly_to_expr((const // g, {m: c // g for m, c in terms.items()}))
        return Replace((_split_signs(reduced),))
    return None


def _r_collect(ctx, a, b):
    if isinstance(a, Shape):
        return None
    pos, neg = _split_signs(a - b)
    if (pos is a and neg is b) or (pos is b and neg is a):
        return None
    return Replace(((pos, neg),))


def _r_solve(ctx, a, b):
    """Tries variables in ``ctx.order``. ``m`` is any polynomial free of ``v``, its sign made so
    the leading coefficient is positive; the host checks the divisor of ``v``'s value positive.
    A rank-1 variable is solved only by an exact division; an exact division by a non-monomial
    ``m`` leaves no divisor to check, so ``m >= 1`` must be provable."""
    d = a - b
    for v in sorted((x for x in _vars_of(d) if x.rank < 2), key=ctx.order):
        split = _linear_split(d, v)
        if split is None:
            continue
        m, e = split
        if _leading(m) < 0:
            m, e = -m, -e
        q, side = (-e) // m, (-e) % m
        exact = side.is_lit(0)
        if _monomial(m) is None and exact and not nonneg(m - 1):
            continue
        if v.rank == 0 or exact:
            return Bind(v, q, () if exact else (side,))
    return None


RULES: list[tuple[str, str, Callable[[RuleContext, Expr, Expr], Outcome]]] = [
    ("substitute", "a(v) == b(v)  ->  a(s) == b(s)   for every solved v := s", _r_substitute),
    ("trivial", "a == a  ->  true   (interned: structural equality is identity)", _r_trivial),
    ("literal", "3 == 4  ->  contradiction; 3 == 3  ->  true", _r_literal),
    ("unpack_list", "[a0, a1] == [b0, b1]  ->  a0 == b0, a1 == b1", _r_unpack),
    ("cancel_common_factor", "g*a == g*b + g*k  ->  a == b + k;   g*a == g*b + r (g does not "
     "divide r)  ->  contradiction", _r_cancel),
    ("collect", "a + k == b + j  ->  a + (k - j) == b   (terms moved to the side where they are "
     "positive)", _r_collect),
    ("solve", "v*m + e == 0  ->  v := -e // m   (+ host check -e % m == 0 unless it folds to 0)",
     _r_solve),
]
"""Rewrite rules, highest priority first: ``fn(ctx, lhs, rhs)`` (``ctx`` a ``RuleContext``)
returns an outcome or None (does not apply)."""


def _vars_of(e: Expr) -> list[Var]:
    """The variables of ``e`` in order of first appearance (pre-order, left to right)."""
    out: dict[str, Var] = {}
    stack = [e]
    seen = set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if isinstance(x, Var):
            out.setdefault(x.name, x)
        else:
            stack.extend(reversed(x.children()))
    return list(out.values())


class _Resolves:
    """``resolve``/``classify``/``origin``, shared by ``Solver`` and ``Solution``: the host class
    provides ``subst``, ``_solved`` (name -> solved ``Var``) and ``_by_id`` (id -> constraint)."""

    __slots__ = ()

    def resolve(self, e: Expr) -> Expr:
        """``e`` under the substitution (``e`` itself when it mentions no solved variable)."""
        return e if self._solved.keys().isdisjoint(e.free_vars) else e.subs(self.subst)

    def classify(self, e: Expr) -> DimKind:
        return kind_of(self.resolve(e))

    def origin(self, c: Constraint) -> Constraint:
        """The user-added constraint ``c`` was derived from (``c`` itself if user-added)."""
        while c.parent is not None:
            c = self._by_id[c.parent]
        return c


class Solver(_Resolves):
    """Incremental fixed-point solver. ``add`` reduces one constraint (and what it unblocks).

    ``constraints``: the user-added constraints, in order; ``derived``: the constraints rules
    produced (``parent`` set), in creation order; ``residuals``: the constraints left, user-added
    or derived; ``binding_source[v]``: the constraint, user-added or derived, that solved ``v``.
    Ids are unique across ``constraints`` and ``derived``.
    """

    def __init__(self) -> None:
        self.constraints: list[Constraint] = []
        self.derived: list[Constraint] = []
        self.subst: dict[Var, Expr] = {}
        self.binding_source: dict[Var, Constraint] = {}
        self.residuals: list[Constraint] = []
        self.trace: list[TraceRecord] = []
        self._solved: dict[str, Var] = {}
        self._seen: dict[str, int] = {}               # variable name -> first-appearance number
        self._by_id: dict[int, Constraint] = {}
        self._used: dict[int, frozenset[Var]] = {}   # constraint id -> solved vars substituted in
        self._deps: dict[Var, frozenset[Var]] = {}   # solved var -> solved vars its value used
        self._next_id = 0
        self._ctx = RuleContext(self.subst, self._solved, self._seen)

    # -- public -------------------------------------------------------------------------------
    def add(self, lhs: ExprLike, rhs: ExprLike, provenance: Provenance) -> Constraint:
        """Record ``lhs == rhs`` and solve to a fixed point; raises ``Contradiction``."""
        lhs, rhs = as_expr(lhs), as_expr(rhs)
        for side in (lhs, rhs):
            for v in _vars_of(side):
                self._seen.setdefault(v.name, len(self._seen))
        c = self._new(lhs, rhs, provenance, None)
        self.constraints.append(c)
        self._run(deque([c]))
        return c

    def number(self, exprs: Iterable[Expr]) -> None:
        """Number the variables of ``exprs`` now, before the constraints that mention them: the
        graph numbers its inputs' dims in input order, so of two tied input dims the solver
        keeps the first input's (the elimination order)."""
        for e in exprs:
            for v in _vars_of(e):
                self._seen.setdefault(v.name, len(self._seen))

    def solution(self) -> "Solution":
        return Solution(dict(self.subst), Constraints(self.residuals),
                        SolverTrace(self.trace, self.constraints, self.derived),
                        Constraints(self.constraints), Constraints(self.derived))

    # -- internals ------------------------------------------------------------------------------
    def _new(self, lhs: Expr, rhs: Expr, prov: Provenance, parent: Constraint | None,
             used: frozenset[Var] = frozenset()) -> Constraint:
        self._next_id += 1
        c = Constraint(self._next_id, lhs, rhs, prov, None if parent is None else parent.id)
        self._by_id[c.id] = c
        if parent is not None:
            self.derived.append(c)
        if used:
            self._used[c.id] = used
        return c

    def bindings_behind(self, v: Var) -> tuple[Constraint, ...]:
        """The constraints (user-added or derived) whose bindings determine ``v``'s value: its own
        and, transitively, those of the solved variables substituted into it; in binding order."""
        return self._sources(self._dep_closure((v,)))

    def _dep_closure(self, vs: Iterable[Var]) -> set[Var]:
        seen: set[Var] = set()
        stack = list(vs)
        while stack:
            v = stack.pop()
            if v not in seen:
                seen.add(v)
                stack.extend(self._deps.get(v, ()))
        return seen

    def _sources(self, vs: set[Var]) -> tuple[Constraint, ...]:
        return tuple(src for v, src in self.binding_source.items() if v in vs)

    def _colliding(self, c: Constraint, extra: Iterable[Var] = ()) -> tuple[Constraint, ...]:
        """User-added sources of the bindings substituted into ``c`` or its ancestors (and of
        ``extra``), transitively; ``c``'s own origin excluded."""
        root = self.origin(c)
        out: dict[int, Constraint] = {}
        for src in self._sources(self._dep_closure((*self._used.get(c.id, ()), *extra))):
            r = self.origin(src)
            if r is not root:
                out.setdefault(r.id, r)
        return tuple(out.values())

    def _contradiction(self, c: Constraint, why: str, extra: Iterable[Var] = ()) -> Contradiction:
        err = Contradiction(self.origin(c), why, self._colliding(c, extra),
                            None if c.parent is None else c)
        err.trace = SolverTrace(self.trace, self.constraints, self.derived)
        return err

    def _run(self, work: deque) -> None:
        ctx = self._ctx
        while work:
            c: Constraint = work.popleft()
            t0 = time.perf_counter_ns()
            for name, _, fn in RULES:
                out = fn(ctx, c.lhs, c.rhs)
                if out is not None:
                    self._apply(name, c, out, work, t0)
                    break
            else:
                self.residuals.append(c)

    def _apply(self, rule: str, c: Constraint, out: Drop | Fail | Replace | Bind,
               work: deque, t0: int) -> None:
        now = time.perf_counter_ns()
        self.trace.append(TraceRecord(len(self.trace), rule, c.id, c.parent, (c.lhs, c.rhs), out,
                                      now, now - t0))
        if isinstance(out, Fail):
            raise self._contradiction(c, out.why, out.used)
        used = self._used.get(c.id, frozenset())
        if isinstance(out, Replace):
            used = used | out.used
            new = []
            for k, (x, y) in enumerate(out.eqs):
                prov = c.provenance
                if out.details:
                    sep = ", " if prov.detail else ""
                    prov = replace(prov, detail=prov.detail + sep + out.details[k])
                new.append(self._new(x, y, prov, c, used))
            work.extendleft(reversed(new))
        elif isinstance(out, Bind):
            self._bind(out.v, out.e, c, work)
            for s in out.side:
                work.append(self._new(s, lit(0), c.provenance, c, used))

    def _bind(self, v: Var, e: Expr, src: Constraint, work: deque) -> None:
        one = {v: e}
        for k in list(self.subst):
            if v.name in self.subst[k].free_vars:
                try:
                    self.subst[k] = self.subst[k].subs(one)
                except ZeroDivisionError as err:  # k := x // v (reshape -1) with v := 0
                    raise self._contradiction(src, f"{k!r} := {self.subst[k]!r} with {v!r} := "
                                              f"{e!r}: {err}", (k,)) from None
                self._deps[k] |= {v}
        self.subst[v] = e
        self._solved[v.name] = v
        self._deps[v] = self._used.get(src.id, frozenset())
        self.binding_source[v] = src
        keep = []
        for r in self.residuals:
            (work.append if v.name in (r.lhs.free_vars | r.rhs.free_vars) else keep.append)(r)
        self.residuals = keep


@dataclass(frozen=True)
class Solution(_Resolves):
    """The fixed point: substitution, residual (host-checked) constraints, the trace, and the
    user-added and derived constraints (see ``Solver``)."""

    subst: Mapping[Var, Expr]
    residuals: tuple[Constraint, ...]
    trace: tuple[TraceRecord, ...]
    constraints: tuple[Constraint, ...]
    derived: tuple[Constraint, ...] = ()
    _solved: Mapping[str, Var] = field(init=False, repr=False, compare=False)
    _by_id: Mapping[int, Constraint] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_solved", {v.name: v for v in self.subst})
        object.__setattr__(self, "_by_id", {c.id: c for c in (*self.constraints, *self.derived)})

    def rule_counts(self) -> dict[str, int]:
        return SolverTrace(self.trace).rule_counts()

    def __repr__(self) -> str:
        lines = [f"Solution: {len(self.subst)} solved, {len(self.residuals)} residual, "
                 f"{len(self.trace)} rule applications"]
        lines += [f"  {v!r} := {e!r}" for v, e in self.subst.items()]
        lines += [f"  residual {r!r}" for r in self.residuals]
        return "\n".join(lines)


def _replay(trace: SolverTrace, initial: bool) -> Iterator[SolverState]:
    """``SolverTrace.replay``: ``Solver._run`` with each popped constraint either rewritten by
    the next record's outcome (when that record is its) or left residual, exactly as the solve
    went; ``add`` boundaries are the user-added constraints, each starting a fresh work list."""
    s = Solver()
    recs, n, i = tuple(trace), len(trace), 0
    subst: Mapping[Var, Expr] = MappingProxyType({})
    res_list, res = s.residuals, ()
    failed = None

    def state(step: int, pending: tuple[Constraint, ...]) -> SolverState:
        nonlocal res_list, res
        if s.residuals is not res_list or len(s.residuals) != len(res):
            res_list, res = s.residuals, tuple(s.residuals)
        return SolverState(step, recs[step] if step >= 0 else None, pending, res, subst, failed)

    for u in trace.constraints:
        c = s._new(u.lhs, u.rhs, u.provenance, None)
        if c.id != u.id:
            raise ValueError(f"trace does not replay: user constraint #{u.id} came as #{c.id}")
        s.constraints.append(c)
        work = deque([c])
        while work:
            c = work.popleft()
            if i == n or recs[i].constraint_id != c.id:
                s.residuals.append(c)
                continue
            if i or initial:
                yield state(i - 1, (c, *work))
            rec, failed = recs[i], None
            i += 1
            if (rec.constraint_id, rec.eq) != (c.id, (c.lhs, c.rhs)):
                raise ValueError(f"trace does not replay at step {rec.step}: #{c.id} is "
                                 f"{c.lhs!r} == {c.rhs!r}, the record has {rec.before}")
            try:
                s._apply(rec.rule, c, rec.outcome, work, 0)
            except Contradiction:
                failed = c
                work.clear()      # the solver raised: the rest of this add's work is dropped
            if isinstance(rec.outcome, Bind):
                subst = MappingProxyType(dict(s.subst))
    if i != n:
        raise ValueError(f"trace does not replay: step {i} (#{recs[i].constraint_id}) never "
                         "comes up")
    if n or initial:
        yield state(n - 1, ())


def solve(eqs: Iterable[tuple[Expr, Expr] | Constraint]) -> Solution:
    """Solve a batch of equations (convenience for tests and notebooks)."""
    s = Solver()
    for i, q in enumerate(eqs):
        if isinstance(q, Constraint):
            s.add(q.lhs, q.rhs, q.provenance)
        else:
            s.add(q[0], q[1], Provenance("eq", detail=f"equation {i}"))
    return s.solution()
