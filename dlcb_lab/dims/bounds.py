"""Range reasoning over coordinate variables, used to drop provably-trivial ``//`` and ``%``.

A ``Bounds`` maps coordinate variable names to their exclusive upper bound (an expression over
runtime dims); every variable is ``>= 0``. Variables without a bound are runtime dims: fixed,
non-negative symbols. ``upper``/``lower`` give symbolic inclusive extremes over the coordinates;
``nonneg`` proves a polynomial non-negative when its constant and every coefficient are and every
monomial is (variables and ``%`` are non-negative; ``a // d`` has the sign of ``a``, so it is not
non-negative by itself). Proofs are sound, not complete: an unprovable fact simply keeps the
operation.

``simplify`` rewrites bottom-up with ``BOUNDS_RULES`` (the range facts and the quotient/remainder
recombination), on top of the unconditional ``expr.DIVMOD_RULES`` every construction applies.
"""

from __future__ import annotations

from typing import Callable, Mapping

import math

from .expr import Expr, FloorDiv, Lit, Mod, Prod, Sum, Var, gcd_of, lit, prod, rebuild

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
        out: Expr = lit(e.const)
        for m, c in e.terms:
            x = _extreme(m, b, hi if c > 0 else not hi)
            if x is None:
                return None
            out = out + x * c
        return out
    if isinstance(e, FloorDiv) and not (e.den.free_vars & b.keys()):
        x = _extreme(e.num, b, hi)
        return None if x is None else x // e.den
    if isinstance(e, Mod) and not (e.den.free_vars & b.keys()):
        return e.den - 1 if hi else lit(0)
    return None


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
    ``num = rest + small``, ``small`` one term ``c*v`` over a bounded variable with
    ``0 <= small < g``, and ``g > 1`` dividing both ``d`` and every coefficient of ``rest``."""
    if not isinstance(e, (FloorDiv, Mod)) or not isinstance(e.den, Lit) or e.den.value <= 0 or \
            not isinstance(e.num, Sum):
        return None
    for m, c in e.num.terms:
        if isinstance(m, Var) and m.name in b:
            rest = e.num - m * c
            g = math.gcd(e.den.value, gcd_of(rest))
            if g > 1 and in_range(m * c, lit(g), b):
                return rest, m * c, g
    return None


def _r_drop_small(e, b):
    hit = _split_small(e, b)
    if hit is None:
        return None
    rest, small, _ = hit
    return rest // e.den if isinstance(e, FloorDiv) else rest % e.den + small


def _r_recombine(e, b):
    if not isinstance(e, Sum):
        return None
    for m, c in e.terms:
        if isinstance(m, Mod):
            new = e - m * c - m.den * FloorDiv.make(m.num, m.den) * c + m.num * c
            if _divmod_terms(new, b) < _divmod_terms(e, b):
                return new
    return None


BOUNDS_RULES: list[tuple[str, str, Callable[[Expr, Bounds], Expr | None]]] = [
    ("div_in_range", "x // d  ->  0   if 0 <= x < d", _r_div_in_range),
    ("mod_in_range", "x % d  ->  x   if 0 <= x < d", _r_mod_in_range),
    ("drop_small", "(g*x + s) // d  ->  g*x // d   and   (g*x + s) % d  ->  g*x % d + s   if "
     "g | d, 0 <= s < g", _r_drop_small),
    ("recombine", "k*d*(x // d) + k*(x % d)  ->  k*x   if it leaves fewer // and % terms",
     _r_recombine),
]
"""Bounds-dependent rewrites used by ``simplify``, highest priority first: ``fn(e, bounds)``
returns the rewritten node or None. ``recombine`` is exact; it undoes reshape round trips."""


def _divmod_terms(e: Expr, b: Bounds) -> int:
    """Terms with a ``//`` or ``%`` factor over bounded variables (a runtime dim that is itself a
    quotient, e.g. a pooled extent ``(H - 1) // 2 + 1``, does not count; with no bounds, every
    quotient counts)."""
    terms = e.terms if isinstance(e, Sum) else ((e, 1),)
    return sum(any(isinstance(f, (FloorDiv, Mod)) and (not b or f.free_vars & b.keys())
                   for f in (m.factors if isinstance(m, Prod) else (m,))) for m, _ in terms)
