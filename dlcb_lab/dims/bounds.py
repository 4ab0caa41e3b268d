"""Range reasoning over coordinate variables, used to drop provably-trivial ``//`` and ``%``.

A ``Bounds`` maps coordinate variable names to their exclusive upper bound (an expression over
runtime dims); every variable is ``>= 0``. Variables without a bound are runtime dims: fixed,
non-negative symbols. ``upper``/``lower`` give symbolic inclusive extremes over the coordinates;
``nonneg`` proves a polynomial non-negative when its constant and every coefficient are and every
monomial is (variables and ``%`` are non-negative; ``a // d`` has the sign of ``a``, so it is not
non-negative by itself); ``nonneg_quotients`` also with each negative quotient term
``c*(x // k)`` bounded below by ``c*x/k``. Proofs are sound, not complete: an unprovable fact
simply keeps the operation.

Symbolic divisors. A runtime dim may be 0 (an empty batch), so a divisor over runtime dims gets no
bound, and no rewrite uses it, unless ``positive`` proves it ``>= 1``. The proof rests on the
bounds themselves: a coordinate ``0 <= v < b[v]`` exists only where ``b[v] >= 1``, so every bound is
a *witness* ``>= 1``, and so is each factor of a monomial bound ``k*f1*...*fn`` (``k > 0``, factors
non-negative: a product ``>= 1`` of non-negative integers has no factor 0), and ``n - k + 1`` for a
witness ``n // k`` (``k`` a positive literal: a pool's output extent ``(H + 1) // 2`` makes ``H``
one). kgen's thread index is bounded by the element count ``N*C*H*W``, so each dim of the output
is a witness; a kernel whose index arithmetic has a zero extent has no elements and is not
launched (README). ``positive(d)`` holds for a literal ``>= 1``, for ``d >= w`` with ``w`` a
witness or 1 (``nonneg(d - w)``), for a product of positive factors, a sum whose coefficients
share a factor ``g > 1`` where the sum over ``g`` is positive (``256*W - 256``), a non-negative sum
with a positive term, and ``n // k`` with ``n >= k >= 1``.

``simplify`` rewrites bottom-up with ``BOUNDS_RULES`` (the range facts and the quotient/remainder
recombination), on top of the unconditional ``expr.DIVMOD_RULES`` every construction applies.
Every rule is exact wherever every bounded variable is in range and every divisor of the original
expression is positive (where ``evaluate`` of the original succeeds).
"""

from __future__ import annotations

from typing import Callable, Mapping

import math

from .expr import (Expr, FloorDiv, Lit, Mod, Prod, Sum, Var, _divides, _factors, _monomial,
                   gcd_of, lit, prod, rebuild)

Bounds = Mapping[str, Expr]


def nonneg(e: Expr) -> bool:
    if isinstance(e, Lit):
        return e.value >= 0
    if isinstance(e, Sum):
        return e.const >= 0 and all(c > 0 and nonneg(m) for m, c in e.terms)
    if isinstance(e, Prod):
        return all(nonneg(f) for f in e.factors)
    if isinstance(e, FloorDiv):
        return nonneg(e.num)  # a // d (d > 0) is negative exactly when a is
    return True  # variables and remainders are non-negative


def nonneg_quotients(e: Expr) -> bool:
    """``nonneg``, or ``nonneg`` of ``e`` with its negative quotient terms ``c*(x // k)`` (``c <
    0``, ``k`` a positive literal) bounded below by ``c*x/k`` (``x // k <= x/k``), over the
    common multiple ``L`` of their divisors: ``L*e >= L*(e - sum c*(x // k)) + sum (L*c/k)*x``.
    Proves ``d + 2 - 2*((d + 1) // 2) >= 0``, a window's start against its input's extent. Apart
    from ``nonneg``, which the rewrite rules call on every candidate, as it costs several times
    as much."""
    if nonneg(e):
        return True
    neg = [(m, c) for m, c in e.terms if c < 0 and isinstance(m, FloorDiv) and
           isinstance(m.den, Lit) and m.den.value > 0] if isinstance(e, Sum) else []
    if not neg:
        return False
    L = math.lcm(*(m.den.value for m, _ in neg))
    out = e * L
    for m, c in neg:
        out = out - m * (L * c) + m.num * (L * c // m.den.value)
    return nonneg_quotients(out)


class _Witnesses(tuple):
    """The witnesses of one ``Bounds`` (``_witnesses``), with a memo of ``positive`` under them."""

    memo: dict[Expr, bool]


_WITNESS_CACHE: dict[tuple, _Witnesses] = {}


def _witnesses(b: Bounds) -> _Witnesses:
    """Expressions ``>= 1`` wherever the bounds hold (module docstring): each bound over runtime
    dims, each factor of a monomial one, and ``n - k + 1`` of a quotient ``n // k`` (``k`` a
    positive literal: ``n >= k``)."""
    key = tuple(b.items())
    hit = _WITNESS_CACHE.get(key)
    if hit is not None:
        return hit
    out: dict[Expr, None] = {}
    todo = [w for _, w in key if not w.free_vars & b.keys()]
    while todo:
        w = todo.pop()
        if w in out:
            continue
        out[w] = None
        mono = _monomial(w)
        if mono is not None and mono[0] > 0 and mono[1] is not lit(1):
            fs = _factors(mono[1])
            if all(nonneg(f) for f in fs):
                todo += fs
        if isinstance(w, FloorDiv) and isinstance(w.den, Lit) and w.den.value >= 1:
            todo.append(w.num - w.den.value + 1)   # n // k >= 1: n >= k
    if len(_WITNESS_CACHE) >= 16:   # bounds in use: kgen grows one dict per kernel
        _WITNESS_CACHE.clear()
    hit = _WITNESS_CACHE[key] = _Witnesses(out)
    hit.memo = {}
    return hit


def positive(d: Expr, b: Bounds) -> bool:
    """Prove ``d >= 1`` wherever the bounds hold, for ``d`` over runtime dims (module docstring).
    False for a ``d`` that may be 0 or depends on a bounded variable."""
    if isinstance(d, Lit):
        return d.value >= 1
    if d.free_vars & b.keys():
        return False
    return _positive(d, _witnesses(b))


def _positive(d: Expr, wit: _Witnesses) -> bool:
    if isinstance(d, Lit):
        return d.value >= 1
    hit = wit.memo.get(d)
    if hit is None:
        hit = wit.memo[d] = _prove_positive(d, wit)
    return hit


def _prove_positive(d: Expr, wit: _Witnesses) -> bool:
    if d in wit or nonneg(d - 1) or any(nonneg(d - w) for w in wit):
        return True
    if isinstance(d, Prod):
        return all(_positive(f, wit) for f in d.factors)
    if isinstance(d, Sum):
        g = gcd_of(d)
        if g > 1:   # k*(a - b) >= 1 iff a - b >= 1: 256*W - 256 with the extent W - 1 a witness
            return _positive(sum((m * (c // g) for m, c in d.terms), lit(d.const // g)), wit)
        # non-negative terms, one of them positive
        return d.const >= 0 and all(c > 0 and nonneg(m) for m, c in d.terms) and \
            any(_positive(m, wit) for m, _ in d.terms)
    if isinstance(d, FloorDiv):   # n // k >= 1 iff n >= k, for k >= 1
        return _positive(d.den, wit) and _positive(d.num - d.den + 1, wit)
    return False


def _lit_quotients(q: Expr, b: Bounds, hi: bool) -> Expr:
    """``q`` with each term ``k*(c // d)`` (``c`` a literal, ``d >= 1`` provably) replaced by its
    bound in the direction ``hi`` asks: ``c // d`` is in ``[c, -1]`` for ``c < 0`` and in
    ``[0, c]`` for ``c >= 0`` (``(H*W - 1) // W`` is ``H + (-1) // W``, at most ``H - 1``)."""
    terms = q.terms if isinstance(q, Sum) else ((q, 1),)
    for m, k in terms:
        if isinstance(m, FloorDiv) and isinstance(m.num, Lit) and positive(m.den, b):
            c = m.num.value
            up = (k > 0) == hi
            val = (-1 if c < 0 else c) if up else (c if c < 0 else 0)
            q = q + (val - m) * k
    return q


def _extreme(e: Expr, b: Bounds, hi: bool) -> Expr | None:
    if not (e.free_vars & b.keys()):
        return e
    if isinstance(e, Var):
        return b[e.name] - 1 if hi else lit(0)
    if isinstance(e, Prod):
        # a product's extreme is the product of the factors' extremes only if no factor is negative
        los = [_extreme(f, b, False) for f in e.factors]
        if any(x is None or not nonneg(x) for x in los):
            return None
        parts = [_extreme(f, b, True) for f in e.factors] if hi else los
        return None if any(p is None for p in parts) else prod(parts)
    if isinstance(e, Sum):
        e = _regroup(e)
        out: Expr = lit(e.const)
        for m, c in e.terms:
            x = _extreme(m, b, hi if c > 0 else not hi)
            if x is None:
                return None
            out = out + x * c
        return out
    # a divisor over runtime dims that may be 0 gives no bound (x // d is monotone in x for d >= 1)
    if isinstance(e, FloorDiv) and positive(e.den, b):
        x = _extreme(e.num, b, hi)
        return None if x is None else _lit_quotients(x // e.den, b, hi)
    if isinstance(e, Mod) and positive(e.den, b):
        return e.den - 1 if hi else lit(0)
    return None


def _regroup(e: Sum) -> Expr:
    """``e`` with a pair ``k1*x + k2*(x // m)`` (``m`` a literal, ``k1`` and ``k2`` of opposite
    signs, ``|k2| <= |k1|*m``) spelled ``k1*(x % m) + (k1*m + k2)*(x // m)``: the same value, in
    terms of one sign, so their extremes bound it tightly (``58*c - 115*(c // 2)`` is
    ``58*(c % 2) + c // 2``, in ``[0, 28 + 58]`` for ``c < 58``: a channel shuffle's index)."""
    terms = dict(e.terms)
    for q, k2 in e.terms:
        if isinstance(q, FloorDiv) and isinstance(q.den, Lit):
            k1 = terms.get(q.num)
            if k1 and k1 * k2 < 0 and abs(k2) <= abs(k1) * q.den.value:
                return e - (q.num - q.num % q.den) * k1 + q * (k1 * q.den.value)
    return e


def upper(e: Expr, b: Bounds) -> Expr | None:
    """Inclusive symbolic maximum of ``e`` over the bounded variables (None if unknown)."""
    return _extreme(e, b, True)


def lower(e: Expr, b: Bounds) -> Expr | None:
    """Inclusive symbolic minimum of ``e`` over the bounded variables (None if unknown)."""
    return _extreme(e, b, False)


def in_range(e: Expr, den: Expr, b: Bounds) -> bool:
    """Prove ``0 <= e < den``."""
    lo, hi = lower(e, b), upper(e, b)
    return lo is not None and hi is not None and nonneg(lo) and nonneg(den - 1 - hi)


def simplify(e: Expr, b: Bounds, memo: dict | None = None) -> Expr:
    """``e`` rewritten bottom-up by ``BOUNDS_RULES`` under ``b`` (the same value wherever every
    bounded variable is in range)."""
    if isinstance(e, (Lit, Var)):
        return e
    memo = {} if memo is None else memo
    done = memo.get(e)
    if done is not None:
        return done

    def rec(x: Expr) -> Expr:
        return simplify(x, b, memo)

    out = rebuild(e, rec)
    if out is not e and isinstance(e, (FloorDiv, Mod)) and isinstance(out, (Sum, FloorDiv, Mod)):
        out = rec(out)       # re-canonicalized into another node: simplify that one
    else:
        out = _rewrite(out, b)
    memo[e] = out
    return out


def _rewrite(e: Expr, b: Bounds) -> Expr:
    """``e`` (children already simplified) rewritten by the first applicable rule until none
    applies."""
    while True:
        for _, _, fn in BOUNDS_RULES:
            out = fn(e, b)
            if out is not None:
                e = out
                break
        else:
            return e


# --- rules: (name, comment, fn(e, bounds) -> Expr | None) ---------------------------------------

def _r_div_in_range(e, b):
    if isinstance(e, FloorDiv) and in_range(e.num, e.den, b):
        return lit(0)
    return None


def _r_mod_in_range(e, b):
    if isinstance(e, Mod) and in_range(e.num, e.den, b):
        return e.num
    return None


def _split_small(e, b):
    """For ``num // d`` or ``num % d`` (``d`` a positive literal): ``(rest, small, g)`` with
    ``num = rest + small``, ``small`` one term ``c*v`` over a bounded variable, or the constant,
    with ``0 <= small < g``, and ``g > 1`` dividing both ``d`` and every coefficient of ``rest``
    (``(2*v + 1) // 8 -> 2*v // 8``, which is ``v // 4``)."""
    if not isinstance(e, (FloorDiv, Mod)) or not isinstance(e.den, Lit) or e.den.value <= 0 or \
            not isinstance(e.num, Sum):
        return None
    for m, c in e.num.terms:
        if isinstance(m, Var) and m.name in b:
            rest = e.num - m * c
            g = math.gcd(e.den.value, gcd_of(rest))
            if g > 1 and in_range(m * c, lit(g), b):
                return rest, m * c, g
    k = e.num.const
    rest = e.num - k
    g = math.gcd(e.den.value, gcd_of(rest))
    return (rest, lit(k), g) if 0 < k < g else None


def _r_drop_small(e, b):
    hit = _split_small(e, b)
    if hit is None:
        return None
    rest, small, _ = hit
    return rest // e.den if isinstance(e, FloorDiv) else rest % e.den + small


def _coordinate(e: Expr, b: Bounds) -> bool:
    """``e`` depends on a bounded variable. The rules for symbolic divisors rewrite only such
    expressions: a runtime-dim expression (an extent, a bound) stays as the solver built it, so
    it keeps matching the bounds that spell it the same way."""
    return bool(e.free_vars & b.keys())


def _mono(e: Expr) -> tuple[int, list[Expr]] | None:
    """A monomial ``e`` as (coefficient, atoms), None for a true sum."""
    mono = _monomial(e)
    if mono is None:
        return None
    return mono[0], ([] if mono[1] is lit(1) else list(_factors(mono[1])))


def _mono_gcd(x: tuple[int, list[Expr]], y: tuple[int, list[Expr]]) -> tuple[int, list[Expr]]:
    """The largest common monomial factor (gcd of the coefficients, shared atoms)."""
    rest, shared = list(y[1]), []
    for f in x[1]:
        if f in rest:
            rest.remove(f)
            shared.append(f)
    return math.gcd(x[0], y[0]), shared


def _r_drop_small_symbolic(e, b):
    """``_r_drop_small`` for a divisor that is a monomial over runtime dims: ``g`` is a common
    factor of the divisor and of some terms of the numerator (``rest``; the other terms are
    ``small``), ``g >= 1`` provably and ``0 <= small < g``. Then, with ``rest = g*r`` and
    ``den = g*d``: ``(g*r + small) // (g*d) = r // d`` (``r + small/g`` has the floor of ``r``) and
    ``(g*r + small) % (g*d) = g*(r % d) + small``. ``small = 0`` cancels the common factor. Tried
    with ``g`` the factor common to every term, then each term's factor in common with ``den``."""
    if not isinstance(e, (FloorDiv, Mod)) or isinstance(e.den, Lit) or not _coordinate(e, b) \
            or not positive(e.den, b):
        return None
    den = _mono(e.den)
    if den is None:
        return None
    const, terms = (e.num.const, e.num.terms) if isinstance(e.num, Sum) else (0, ((e.num, 1),))
    per_term = [_mono_gcd(den, _mono(m * c)) for m, c in terms]
    whole = per_term[0]
    for g in per_term[1:] + ([(const, [])] if const else []):
        whole = _mono_gcd(whole, g)
    for gc, ga in dict.fromkeys((g[0], tuple(g[1])) for g in [whole] + per_term):
        g = prod(ga) * gc
        if g is lit(1) or not positive(g, b):
            continue
        r, small = lit(0), lit(const)
        if isinstance(g, Lit) and const % g.value == 0:
            r, small = lit(const // g.value), lit(0)
        for m, c in terms:
            hit = _divides(g, m, c)
            if hit is None:
                small = small + m * c
            else:
                r = r + hit[0] * hit[1]
        if not r.free_vars or not (small is lit(0) or in_range(small, g, b)):
            continue
        dm, dc = _divides(g, *reversed(_monomial(e.den)))
        d = dm * dc
        return simplify(r // d if isinstance(e, FloorDiv) else g * (r % d) + small, b)
    return None


def _r_div_of_div(e, b):
    """``(x // a + y) // c -> (x + a*y) // (a*c)``: ``x // a + y`` is ``(x + a*y) // a`` for an
    integer ``y``, and ``(z // a) // c`` is ``z // (a*c)`` for ``a, c >= 1``."""
    if not isinstance(e, FloorDiv) or not _coordinate(e, b) or not positive(e.den, b):
        return None
    terms = ((e.num, 1),) if isinstance(e.num, FloorDiv) else \
        e.num.terms if isinstance(e.num, Sum) else ()
    for q, k in terms:
        if k == 1 and isinstance(q, FloorDiv) and positive(q.den, b):
            y = e.num - q
            return simplify((q.num + q.den * y) // (q.den * e.den), b)
    return None


def _r_recombine_mod(e, b):
    """``k*a*((x // a) % c) + k*(x % a) -> k*(x % (a*c))`` (the remainders of ``x`` by ``a`` and
    of ``x // a`` by ``c`` are the digits of ``x % (a*c)``), for ``a, c >= 1`` not both literal,
    where it leaves fewer ``//``/``%`` terms. With literal ``a`` and ``c`` the two digits are
    usually the kernel's own output coordinates, computed anyway, and a literal ``%`` costs
    about the multiply-add it would save (vit_tiny's cat: ``_t % 64 + 64*((_t // 64) % 17)`` ->
    ``_t % 1088`` adds a ``%``); a symbolic one is a hardware division."""
    if not isinstance(e, Sum) or not _coordinate(e, b):
        return None
    inner = dict.fromkeys(f for m, _ in e.terms for f in _factors(m)
                          if isinstance(f, Mod) and isinstance(f.num, FloorDiv))
    if not inner:
        return None
    now = _divmod_terms(e, b)
    for mm, k in e.terms:
        if not isinstance(mm, Mod):
            continue
        x, a = mm.num, mm.den
        for f in inner:
            if f.num.num is not x or f.num.den is not a or \
                    (isinstance(a, Lit) and isinstance(f.den, Lit)) or \
                    not (positive(a, b) and positive(f.den, b)):
                continue
            new = e - (a * f + mm) * k + simplify(x % (a * f.den), b) * k
            if _divmod_terms(new, b) < now:
                return new
    return None


def _r_recombine(e, b):
    """``d*(x // d) + x % d == x``, used in whichever direction leaves fewer ``//``/``%`` terms,
    else (``d >= 1`` provably) fewer terms; a ``//`` or ``%`` factor may sit in a product
    (``512*P*(_t // 512) + P*(_t % 512) -> P*_t``). Ties keep the expression, so the canonical
    direction is the quotient form: ``x - x % d -> d*(x // d)`` (fewer terms), while
    ``d*(x // d)`` stays, not ``x - x % d``. The quotient form is one term, ``nonneg`` proves it
    non-negative from ``x >= 0`` (so C's truncating ``/`` and ``%`` of it need no floor
    correction) and its bounds are tight, where ``x - x % d`` has a negative coefficient and a
    lower bound ``lower(x) - d + 1``. The remainder form is taken only where it leaves fewer
    terms: ``d*(x // d) - x -> -(x % d)``."""
    if not isinstance(e, Sum):
        return None
    now = _measure(e, b)
    for m, c in e.terms:
        if isinstance(m, Mod):   # k*(x % d): the original rule
            new = e - m * c - m.den * FloorDiv.make(m.num, m.den) * c + m.num * c
            if _divmod_terms(new, b) < now[0] or \
                    (_coordinate(e, b) and positive(m.den, b) and _measure(new, b) < now):
                return new
    if not _coordinate(e, b):
        return None
    for m, c in e.terms:
        fs = list(_factors(m))
        for f in dict.fromkeys(fs):
            if not isinstance(f, (FloorDiv, Mod)) or (m is f and isinstance(f, Mod)) or \
                    not positive(f.den, b):
                continue
            others = list(fs)
            others.remove(f)
            rest = prod(others)
            if isinstance(f, Mod):   # c*rest*(x % d) = c*rest*x - c*rest*d*(x // d)
                new = e - m * c + (f.num - f.den * FloorDiv.make(f.num, f.den)) * rest * c
            else:                    # c*rest*(x // d), c*rest = k*d: k*x - k*(x % d)
                hit = _divides(f.den, rest, c)
                if hit is None:
                    continue
                new = e - m * c + (f.num - simplify(Mod.make(f.num, f.den), b)) * hit[0] * hit[1]
            if _measure(new, b) < now:
                return new
    return None


BOUNDS_RULES: list[tuple[str, str, Callable[[Expr, Bounds], Expr | None]]] = [
    ("div_in_range", "x // d  ->  0   if 0 <= x < d", _r_div_in_range),
    ("mod_in_range", "x % d  ->  x   if 0 <= x < d", _r_mod_in_range),
    ("drop_small", "(g*x + s) // d  ->  g*x // d   and   (g*x + s) % d  ->  g*x % d + s   if "
     "g | d, 0 <= s < g", _r_drop_small),
    ("drop_small_symbolic", "(g*x + s) // (g*d)  ->  x // d   and   (g*x + s) % (g*d)  ->  "
     "g*(x % d) + s   if g >= 1, 0 <= s < g (g a monomial over runtime dims; s = 0 cancels g)",
     _r_drop_small_symbolic),
    ("div_of_div", "(x // a + y) // b  ->  (x + a*y) // (a*b)   if a, b >= 1", _r_div_of_div),
    ("recombine_mod", "k*a*((x // a) % b) + k*(x % a)  ->  k*(x % (a*b))   if a, b >= 1, "
     "not both literal", _r_recombine_mod),
    ("recombine", "k*d*(x // d) + k*(x % d)  ->  k*x   if it leaves fewer // and % terms (or, "
     "d >= 1, fewer terms: x - x % d  ->  d*(x // d))", _r_recombine),
]
"""Bounds-dependent rewrites used by ``simplify``, highest priority first: ``fn(e, bounds)``
returns the rewritten node or None. ``recombine`` and ``recombine_mod`` are exact; they undo
reshape round trips. A rule for a symbolic divisor fires only where ``positive`` proves it
``>= 1`` (``x // d`` and ``x % d`` with ``0 <= x < d`` need no proof: ``x < d`` implies it) and,
except the original ``recombine``, only on expressions over bounded variables."""


def _divmod_terms(e: Expr, b: Bounds) -> int:
    """Terms with a ``//`` or ``%`` factor over bounded variables (a runtime dim that is itself a
    quotient, e.g. a pooled extent ``(H - 1) // 2 + 1``, does not count; with no bounds, every
    quotient counts)."""
    terms = e.terms if isinstance(e, Sum) else ((e, 1),)
    return sum(any(isinstance(f, (FloorDiv, Mod)) and (not b or f.free_vars & b.keys())
                   for f in (m.factors if isinstance(m, Prod) else (m,))) for m, _ in terms)


def _measure(e: Expr, b: Bounds) -> tuple[int, int]:
    """(``//``/``%`` terms, terms): what ``recombine`` lowers."""
    return _divmod_terms(e, b), len(e.terms) if isinstance(e, Sum) else 1
