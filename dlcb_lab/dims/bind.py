"""Shapes -> dims: the one binder, and evaluation under partial knowledge (``evaluate``).

A call supplies integers: the sizes of its arguments' axes and, for direct kernel launches, int
arguments. Each *source* says which dimension expression its integer must equal. ``plan_binding``
decides at compile time, by symbolic simulation, how those integers determine the dims (JAX's
``solve_dim_vars`` is the model): a ``BindPlan`` is a step list, executed per call either as host
program instructions (``hostgen.program.HostBuilder.emit_binding``) or directly by
``BindPlan.run`` (direct launches, with partial knowledge). Steps:

- ``Bind``: the source's expression is affine in one unknown monomial ``m`` (everything else known):
  ``size == rest + coef*m``, so ``m := (size - rest) / coef``, an exact non-negative integer
  (``coef > 0``), else the call is refused. A product with one unknown factor binds that factor
  (``N*W`` with ``W`` known binds ``N``, ``coef = W``). A bare dim (``N``) binds with no check; bare
  axes bind first, in source order, so a program whose dims each have a bare axis binds exactly
  as a list of loads. ``m`` may be an atom (``(H + 1) // 2``): the atom's value is known from then
  on, sub-expressions that contain it (``((H + 1) // 2 + 1) // 2``) evaluate through it (nodes are
  interned), and ``H`` stays unknown unless another source determines it.
- ``Check``: the source's expression evaluates from what is known; the size must equal it.
- ``Consistent``: a bound atom whose operands became known later (``(H + 1) // 2`` from one axis,
  ``H`` from another) must equal its own evaluation.
- ``Attainable``: a bound ``(a*H + b) // c`` whose ``H`` no source determines: some ``H >= 0``
  must give the size. With each such dim only in this atom, linear with coefficient ``0 < a <= c``,
  the atom takes every value from its value at ``H = 0`` up (each unit of ``H`` adds at most 1),
  so the check is ``size >= low``. Any other atom with undetermined dims is not bound (its source
  stays *pending*): accepting it could admit shapes no dims produce.

Sources are visited bare axes first, then the other shape axes until none makes progress, then the
int arguments (a check where the shapes determine the value, else a bind: an int argument binds
its whole expression when it is not affine in one unknown), then the shape axes again. What stays
undetermined is ``BindPlan.pending``: the host program refuses it at compile time, a direct launch
when called.

Zero divisors, one policy. ``evaluate(e, known, lenient)`` (the one interpreter,
``dims.expr.interpret``, over ints under partial knowledge): a shape expression or check
(``lenient=False``) with a non-positive divisor raises ``ShapeMismatch`` (dims are non-negative and
``//``, ``%`` are defined for positive divisors); a launch slot (``lenient=True``: a kernel's
thread count, int params, index bounds) gives ``x // 0 == x % 0 == 0``, since such a divisor is
an extent of a value with no elements and the kernel it parameterizes then launches nothing. The
host program's ``fdiv``/``mod`` and ``fdiv0``/``mod0`` instructions are the two policies compiled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence, Union

from ..errors import ShapeMismatch
from .expr import LENIENT, Expr, FloorDiv, Ints, Lit, Prod, Sum, Var, ZeroDivisor, interpret, lit, \
    operands, prod

__all__ = ["Source", "Bind", "Check", "Consistent", "Attainable", "BindStep", "BindPlan",
           "Binding", "plan_binding", "evaluate"]

_ZERO, _ONE = lit(0), lit(1)


# --- the evaluator --------------------------------------------------------------------------------

_SHAPES = Ints(ZeroDivisor(ShapeMismatch,
                           lambda e, d: f"divisor {e.den!r} = {d} of {e!r} is not positive"))
_SLOTS = Ints(LENIENT)
"""``dims.expr.interpret``'s int domain under partial knowledge, per zero-divisor policy."""


def evaluate(e: Expr, known: Mapping[Expr, int], lenient: bool = False) -> int | None:
    """``e`` under ``known`` (values of sub-expressions, variables included), or None when it
    depends on an unknown variable. A non-positive divisor raises ``ShapeMismatch``, unless
    ``lenient`` (launch slots: ``x // 0 == x % 0 == 0``); see the module docstring."""
    return interpret(e, _SLOTS if lenient else _SHAPES, known)


def _operands(e: Expr, known: Mapping[Expr, int], lenient: bool) -> int | None:
    """``e`` evaluated from its operands (``known[e]`` itself is not read)."""
    return operands(e, _SLOTS if lenient else _SHAPES, known)


# --- sources and steps ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """One integer a call supplies: ``shapes[arg][axis]`` or, ``axis`` None, int argument
    ``ints[arg]`` (evaluated leniently, as a launch slot); ``label`` names it in messages
    (``input 0 'x' axis 1``, ``in1 (%y) axis 0``, ``int argument numel``)."""

    label: str
    expr: Expr
    arg: int
    axis: int | None = None

    @property
    def is_int(self) -> bool:
        return self.axis is None


@dataclass(frozen=True)
class Bind:
    """``sources[source] == rest + coef*target``: ``target := (size - rest) / coef``, exact and
    non-negative (``plain``: ``rest`` 0 and ``coef`` 1, no check)."""

    source: int
    target: Expr
    rest: Expr = _ZERO
    coef: Expr = _ONE

    @property
    def plain(self) -> bool:
        return self.rest is _ZERO and self.coef is _ONE


@dataclass(frozen=True)
class Check:
    """The size of ``sources[source]`` equals its expression, evaluated from what is known."""

    source: int


@dataclass(frozen=True)
class Consistent:
    """The atom ``target`` (bound by ``sources[source]``) equals its evaluation from its operands,
    known by now."""

    target: Expr
    source: int


@dataclass(frozen=True)
class Attainable:
    """The atom ``target`` (bound by ``sources[source]``; some of its dims undetermined) is at
    least ``low``, its value with those dims 0: then some non-negative dims give it."""

    target: Expr
    source: int
    low: Expr


BindStep = Union[Bind, Check, Consistent, Attainable]


@dataclass(frozen=True)
class Binding:
    """``BindPlan.run``'s result: ``known`` every bound sub-expression's value, ``origin`` the
    source label each was read from."""

    known: dict[Expr, int]
    origin: dict[Expr, str]

    def value(self, e: Expr, lenient: bool = False) -> int | None:
        return evaluate(e, self.known, lenient)

    def why(self, e: Expr) -> str:
        """`` (N from in0 (%x) axis 0; ...)``: where the known parts of ``e`` were read."""
        if e in self.origin:
            return f" (from {self.origin[e]})"
        src = [] if isinstance(e, Lit) else self._sources(e)
        return f" ({'; '.join(src)})" if src else ""

    def why_operands(self, e: Expr) -> str:
        src = list(dict.fromkeys(s for c in e.children() for s in self._sources(c)))
        return f" ({'; '.join(src)})" if src else ""

    def _sources(self, e: Expr) -> list[str]:
        if e in self.origin:
            return [f"{e!r} from {self.origin[e]}"]
        return list(dict.fromkeys(s for c in e.children() for s in self._sources(c)))


@dataclass(frozen=True)
class BindPlan:
    """How a call's integers determine the dims: ``steps`` in order over ``sources``; ``pending``
    the sources nothing lets the plan check (their expressions' dims undetermined)."""

    sources: tuple[Source, ...]
    steps: tuple[BindStep, ...]
    pending: tuple[int, ...] = ()
    bound: dict[Expr, int] = field(default_factory=dict, compare=False)
    """Each bound expression -> the source it is read from."""

    def origin(self, e: Expr) -> str:
        """The labels of the sources ``e``'s bound parts come from."""
        if e in self.bound:
            return f"{e!r} from {self.sources[self.bound[e]].label}"
        parts = (self.origin(c) for c in e.children() if not isinstance(c, Lit))
        return "; ".join(dict.fromkeys(p for p in parts if p))

    def undetermined(self, i: int) -> str:
        """Why pending source ``i`` cannot be checked."""
        s = self.sources[i]
        free = ", ".join(sorted(n for n in s.expr.free_vars if _var(n, s.expr) not in self.bound))
        return (f"{s.label}: cannot check its size against {s.expr!r}: {free or repr(s.expr)} "
                f"not determined by the sizes")

    def run(self, shapes: Sequence[Sequence[int]], ints: Sequence[int] = ()) -> Binding:
        """Execute the steps for concrete sizes (``ints``: the int arguments, when the plan has
        int sources). Raises ``ShapeMismatch`` naming the source and where the known dims it
        was compared against come from; pending sources are not looked at."""
        b = Binding({}, {})
        for st in self.steps:
            s = self.sources[st.source]
            n = ints[s.arg] if s.is_int else shapes[s.arg][s.axis]
            if isinstance(st, Check):
                try:
                    got = evaluate(s.expr, b.known, s.is_int)
                except ShapeMismatch as err:
                    raise ShapeMismatch(f"{s.label}: {err}") from None
                if got != n and s.is_int:
                    raise ShapeMismatch(f"{s.label} = {n}, but {s.expr!r} = {got} by the "
                                        f"argument sizes{b.why(s.expr)}")
                if got != n:
                    want = repr(s.expr) if isinstance(s.expr, Lit) else f"{s.expr!r} = {got}"
                    raise ShapeMismatch(f"{s.label}: {_size(s, n)} != {want}{b.why(s.expr)}")
            elif isinstance(st, Bind):
                if st.plain:
                    v = n
                else:
                    try:
                        rest, coef = evaluate(st.rest, b.known), evaluate(st.coef, b.known)
                    except ShapeMismatch as err:
                        raise ShapeMismatch(f"{s.label}: {err}") from None
                    if coef <= 0 or n < rest or (n - rest) % coef:
                        raise ShapeMismatch(f"{s.label}: {_size(s, n)} != {s.expr!r} for every "
                                            f"integer {st.target!r} >= 0"
                                            f"{b.why(st.rest + st.coef)}")
                    v = (n - rest) // coef
                b.known[st.target], b.origin[st.target] = v, s.label
            elif isinstance(st, Consistent):
                v = b.known[st.target]
                got = _operands(st.target, b.known, s.is_int)
                if got != v:
                    head = (f"{_size(s, n)} != {st.target!r}" if st.target is s.expr else
                            f"{_size(s, n)} gives {st.target!r} = {v}, but {st.target!r}")
                    raise ShapeMismatch(f"{s.label}: {head} = {got}{b.why_operands(st.target)}")
            else:
                v, low = b.known[st.target], evaluate(st.low, b.known)
                if v < low:
                    raise ShapeMismatch(f"{s.label}: {_size(s, n)} gives {st.target!r} = {v}, "
                                        f"below {low}, its least value for dims >= 0"
                                        f"{b.why(st.low)}")
        return b

    def __repr__(self) -> str:
        lines = [f"BindPlan: {len(self.sources)} sources, {len(self.steps)} steps"
                 + (f", {len(self.pending)} pending" if self.pending else "")]
        for st in self.steps:
            s = self.sources[st.source]
            if isinstance(st, Bind):
                how = "size" if st.plain else f"(size - {st.rest!r}) / {st.coef!r}"
                lines.append(f"  bind  {st.target!r} := {how}  [{s.label}: {s.expr!r}]")
            elif isinstance(st, Check):
                lines.append(f"  check {s.label} == {s.expr!r}")
            elif isinstance(st, Consistent):
                lines.append(f"  check {st.target!r} (from {s.label}) against its operands")
            else:
                lines.append(f"  check {st.target!r} (from {s.label}) >= {st.low!r}")
        lines += [f"  pending {self.sources[i].label}: {self.sources[i].expr!r}"
                  for i in self.pending]
        return "\n".join(lines)


def _size(s: Source, n: int) -> str:
    return f"= {n}" if s.is_int else f"size {n}"


def _var(name: str, e: Expr) -> Expr | None:
    if isinstance(e, Var):
        return e if e.name == name else None
    for c in e.children():
        v = _var(name, c)
        if v is not None:
            return v
    return None


# --- planning -------------------------------------------------------------------------------------

def _computable(e: Expr, known: set[Expr] | frozenset[Expr]) -> bool:
    if e in known or isinstance(e, Lit):
        return True
    if isinstance(e, Var):
        return False
    return all(_computable(c, known) for c in e.children())


def _solve(e: Expr, known: set[Expr], forbidden: frozenset[Expr]) -> Bind | None:
    """``e`` as ``rest + coef*m`` with ``m`` its one unknown monomial (a product's one unknown
    factor), or None (several unknowns, or ``m`` forbidden)."""
    const, terms = (e.const, e.terms) if isinstance(e, Sum) else (0, ((e, 1),))
    unknown = [(m, c) for m, c in terms if not _computable(m, known)]
    if len(unknown) != 1:
        return None
    m, c = unknown[0]
    rest = e - m * c
    coef: Expr = lit(c)
    if isinstance(m, Prod):
        free = [f for f in m.factors if not _computable(f, known)]
        if len(free) == 1:
            coef = coef * prod(f for f in m.factors if f is not free[0])
            m = free[0]
    if m in forbidden:
        return None
    return Bind(-1, m, rest, coef)


def plan_binding(sources: Sequence[Source]) -> BindPlan:
    """The binding plan for ``sources`` (module docstring). Pure: reads only the expressions."""
    sources = tuple(sources)
    forbidden: frozenset[Expr] = frozenset()
    while True:
        plan, bad = _plan(sources, forbidden)
        if not bad:
            return plan
        forbidden |= bad


def _plan(sources: tuple[Source, ...], forbidden: frozenset[Expr]
          ) -> tuple[BindPlan, frozenset[Expr]]:
    known: set[Expr] = set()
    bound: dict[Expr, int] = {}
    steps: list[BindStep] = []

    def bind(st: Bind, i: int) -> None:
        st = Bind(i, st.target, st.rest, st.coef)
        steps.append(st)
        known.add(st.target)
        bound[st.target] = i

    shape_left = []
    for i, s in enumerate(sources):                       # bare axes first
        if s.is_int:
            continue
        if isinstance(s.expr, Var) and s.expr not in known:
            bind(Bind(i, s.expr), i)
        else:
            shape_left.append(i)

    def settle(left: list[int]) -> list[int]:
        progress = True
        while left and progress:
            progress, rest = False, []
            for i in left:
                e = sources[i].expr
                if _computable(e, known):
                    steps.append(Check(i))
                    progress = True
                    continue
                st = _solve(e, known, forbidden)
                if st is None:
                    rest.append(i)
                    continue
                bind(st, i)
                progress = True
            left = rest
        return left

    shape_left = settle(shape_left)
    ints = [i for i, s in enumerate(sources) if s.is_int]
    if ints:
        for i in ints:
            e = sources[i].expr
            if _computable(e, known):
                steps.append(Check(i))
            else:
                bind(_solve(e, known, forbidden) or Bind(i, e), i)
        shape_left = settle(shape_left)
    # bound atoms: consistent with their operands, or attainable, or not to be bound at all
    atoms = [(t, i) for t, i in bound.items() if not isinstance(t, Var)]
    open_vars: dict[str, int] = {}
    for t, i in atoms:
        if not sources[i].is_int and not _computable_operands(t, known):
            for n in t.free_vars:
                open_vars[n] = open_vars.get(n, 0) + 1
    bad = set()
    for t, i in atoms:
        if _computable_operands(t, known):
            steps.append(Consistent(t, i))
        elif not sources[i].is_int:
            low = _low(t, known, open_vars)
            if low is None:
                bad.add(t)
            elif not (isinstance(low, Lit) and low.value <= 0):   # sizes are >= 0 anyway
                steps.append(Attainable(t, i, low))
    return BindPlan(sources, tuple(steps), tuple(shape_left), bound), frozenset(bad)


def _computable_operands(t: Expr, known: set[Expr]) -> bool:
    return all(_computable(c, known) for c in t.children())


def _low(t: Expr, known: set[Expr], open_vars: Mapping[str, int]) -> Expr | None:
    """The least value of the bound atom ``t`` over its undetermined dims when it takes every
    integer value from there up, else None. That holds for ``(b + a1*u1 + ..) // c`` (``c`` a
    literal, ``b`` known) whose undetermined dims appear in no other bound atom and each in one
    term ``ui``, every ``ui`` an undetermined dim (least value 0) or again such an atom, every
    ``ai > 0`` and the least ``ai <= c``: raising that ``ui`` by 1 raises ``t`` by at most 1. The
    least value is ``(b + a1*low(u1) + ..) // c``."""
    und = {n for n in t.free_vars if _var(n, t) not in known}
    if any(open_vars.get(n, 0) > 1 for n in und):
        return None
    low = _range_low(t, known, und)
    return low if low is not None and _computable(low, known) else None


def _range_low(e: Expr, known: set[Expr], und: set[str]) -> Expr | None:
    if not (e.free_vars & und):
        return e
    if isinstance(e, Var):
        return _ZERO
    if not isinstance(e, FloorDiv) or not isinstance(e.den, Lit):
        return None
    num = e.num
    const, terms = (num.const, num.terms) if isinstance(num, Sum) else (0, ((num, 1),))
    low: Expr = lit(const)
    coefs, seen = [], set()
    for m, c in terms:
        mine = m.free_vars & und
        if mine:
            if c <= 0 or mine & seen:
                return None
            seen |= mine
            coefs.append(c)
            lm = _range_low(m, known, und)
            if lm is None:
                return None
            low = low + lm * c
        else:
            low = low + m * c
    if not coefs or min(coefs) > e.den.value:
        return None
    return low // e.den
