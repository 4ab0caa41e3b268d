"""Interned dimension expressions (paper §3).

Semantics: every expression denotes an integer. Dimensions and coordinates are non-negative; ``//``
is floor division and ``%`` is the non-negative remainder, both for positive divisors.

Canonical form. Arithmetic is kept as a polynomial over *atoms* with integer coefficients:

    Sum(const, ((m1, c1), (m2, c2), ...))       const + c1*m1 + c2*m2 + ...

where each monomial ``mi`` is an atom (``Var``, ``FloorDiv``, ``Mod``) or a ``Prod`` of atoms
(a sorted tuple with repetition), terms are sorted by a structural key, coefficients are non-zero
and constants are folded. A polynomial that is a bare literal, atom or product is never wrapped in
a ``Sum``. ``FloorDiv``/``Mod`` split their numerator on construction:
``(q*d + r) // d -> q + r // d`` and ``(q*d + r) % d -> r % d`` (exact for integer ``q``, ``r``).

Interning. Every node is built through ``_intern``: the same structure is the same object, so ``is``
is structural equality, ``hash`` is content-derived and cached, and memo tables keyed on nodes are
exact. ``==`` on nodes is identity; use ``Eq``/constraints for equations. The table holds nodes
weakly: a node nobody references is dropped, and building the same structure again gives a fresh
node with the same hash (nothing may depend on ``id()`` of a dead node).

Div/mod algebra. ``DIVMOD_RULES`` lists the rewrites applied, highest priority first, whenever a
``//`` or ``%`` is built; what none of them rewrites becomes a ``FloorDiv``/``Mod`` atom. Each rule
is exact for positive divisors.

One interpreter. ``interpret(e, domain, memo)`` is the only walker that gives an expression a value:
a fold over the canonical form, generic over the value domain (``Ints`` here, for
``Expr.evaluate`` and ``dims.bind.evaluate``; host-program registers, ``hostgen.program``; the names
of kgen's index statements, ``kgen.infer``) and over the ``ZeroDivisor`` policy (``STRICT``
raises, ``LENIENT`` gives 0, ``dims.bind`` raises ``ShapeMismatch``). ``memo`` holds known or
already computed sub-expressions: a known atom is used as is, its operands never visited (kgen's
host-computed params are such values too).
"""

from __future__ import annotations

import math
import weakref
from typing import Callable, Iterable, Mapping, Union

from ..display import Rich

__all__ = [
    "Expr", "Lit", "Var", "Prod", "Sum", "FloorDiv", "Mod", "Shape",
    "lit", "var", "as_expr", "shape", "prod", "ExprLike", "DIVMOD_RULES",
    "interpret", "operands", "Ints", "ZeroDivisor", "STRICT", "LENIENT",
]

ExprLike = Union["Expr", int]


class _Ref(weakref.ref):
    """A weak reference to an interned node that knows its table key."""

    __slots__ = ("key",)


_TABLE: dict[tuple, _Ref] = {}


def _forget(ref: _Ref, table: dict = _TABLE) -> None:
    """Weakref callback: drop the entry of a dead node unless it was already re-interned."""
    if table.get(ref.key) is ref:
        del table[ref.key]


def _intern(cls: type, key: tuple, init: Callable[..., None], *args) -> "Expr":
    """The live node ``(cls, key)``, else a new one set up by ``init(node, *args)``."""
    full = (cls, key)
    ref = _TABLE.get(full)
    if ref is not None:
        node = ref()
        if node is not None:
            return node
    node = object.__new__(cls)
    node._key = key
    node._hash = hash(full)
    init(node, *args)
    ref = _Ref(node, _forget)
    ref.key = full
    _TABLE[full] = ref
    return node


class Expr(Rich):
    """Base of all dimension-expression nodes. Immutable and interned (see module docstring)."""

    __slots__ = ("_key", "_hash", "_free", "_sort", "__weakref__")
    _order = 0

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return (_rebuild, (type(self).__name__, self._rebuild_args()))

    # --- structure ---------------------------------------------------------------------------
    @property
    def free_vars(self) -> frozenset[str]:
        """Names of the variables this expression depends on."""
        return self._free

    @property
    def sort_key(self) -> tuple:
        return self._sort

    def children(self) -> tuple["Expr", ...]:
        return ()

    def is_lit(self, value: int | None = None) -> bool:
        return False

    # --- arithmetic (builds canonical nodes) ---------------------------------------------------
    def __add__(self, other: ExprLike) -> "Expr":
        return _poly_to_expr(_poly_add(_as_poly(self), _poly_of(other)))

    __radd__ = __add__

    def __neg__(self) -> "Expr":
        return self * -1

    def __sub__(self, other: ExprLike) -> "Expr":
        return self + (-as_expr(other))

    def __rsub__(self, other: ExprLike) -> "Expr":
        return as_expr(other) + (-self)

    def __mul__(self, other: ExprLike) -> "Expr":
        return _poly_to_expr(_poly_mul(_as_poly(self), _poly_of(other)))

    __rmul__ = __mul__

    def __floordiv__(self, other: ExprLike) -> "Expr":
        return FloorDiv.make(self, as_expr(other))

    def __rfloordiv__(self, other: ExprLike) -> "Expr":
        return FloorDiv.make(as_expr(other), self)

    def __mod__(self, other: ExprLike) -> "Expr":
        return Mod.make(self, as_expr(other))

    def __rmod__(self, other: ExprLike) -> "Expr":
        return Mod.make(as_expr(other), self)

    # --- evaluation and conversion -----------------------------------------------------------
    def evaluate(self, env: Mapping[str, int]) -> int:
        """Concrete value under ``env`` (variable name -> int): ``interpret`` over ``Ints``,
        strict (a non-positive divisor raises ``ZeroDivisionError``). Raises KeyError on a free
        name."""
        return interpret(self, Ints(STRICT, env))

    def subs(self, mapping: Mapping["Expr", "Expr"]) -> "Expr":
        """Replace sub-expressions (usually ``Var``s) by expressions; result is canonical."""
        if not mapping:
            return self
        return _subs(self, mapping, {})

    def to_sympy(self):
        """A sympy expression with the same value (for printing and testing, never for solving)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.pretty()

    def pretty(self, prec: int = 0) -> str:
        raise NotImplementedError

    def _rebuild_args(self) -> tuple:
        raise NotImplementedError


def _rebuild(kind: str, args: tuple) -> Expr:
    """Unpickling: the node of class ``kind`` from ``_rebuild_args`` (re-interned)."""
    return _REBUILD[kind](*args)


def _rebuild_sum(const: int, terms: tuple) -> Expr:
    return _poly_to_expr((const, dict(terms)))


def _rebuild_floordiv(num: Expr, den: Expr) -> Expr:
    return _divmod(num, den, FloorDiv)


def _rebuild_mod(num: Expr, den: Expr) -> Expr:
    return _divmod(num, den, Mod)


class Lit(Expr):
    """An integer literal."""

    __slots__ = ("value",)
    _order = 0

    def is_lit(self, value=None):
        return value is None or self.value == value

    def to_sympy(self):
        import sympy

        return sympy.Integer(self.value)

    def pretty(self, prec=0):
        s = str(self.value)
        return f"({s})" if self.value < 0 and prec > 0 else s

    def _rebuild_args(self):
        return (self.value,)


def _init_lit(n, value):
    n.value = value
    n._free = frozenset()
    n._sort = (0, value)


def lit(value: int) -> Lit:
    value = int(value)
    if -_SMALL_LO <= value < _SMALL_HI:
        return _SMALL[value + _SMALL_LO]
    return _intern(Lit, (value,), _init_lit, value)


# Small literals are kept alive: no intern churn for constants, and ``is`` tests on them are exact.
_SMALL_LO, _SMALL_HI = 16, 1025
_SMALL = tuple(_intern(Lit, (v,), _init_lit, v) for v in range(-_SMALL_LO, _SMALL_HI))
_ZERO, _ONE = lit(0), lit(1)


class Var(Expr):
    """A named dimension or coordinate variable.

    ``rank`` orders variables for elimination: the solver substitutes away the variable of lowest
    rank first (0: internal/derived, e.g. a reshape's ``-1``; 1: user-named input dims; 2:
    coordinate and loop variables, never eliminated); among equals, the one it saw last (see
    ``Solver``). A name denotes one variable while it lives: asking for it again with another rank
    is an error.
    """

    __slots__ = ("name", "rank")
    _order = 1

    def to_sympy(self):
        import sympy

        return sympy.Symbol(self.name, integer=True, nonnegative=True)

    def pretty(self, prec=0):
        return self.name

    def _rebuild_args(self):
        return (self.name, self.rank)


def _init_var(n, name, rank):
    n.name = name
    n.rank = rank
    n._free = frozenset((name,))
    n._sort = (1, name)


def var(name: str, rank: int = 1) -> Var:
    node = _intern(Var, (name,), _init_var, name, rank)
    if node.rank != rank:
        raise ValueError(f"variable {name!r} already exists with rank {node.rank}, not {rank}")
    return node


class Prod(Expr):
    """A product of two or more atoms (sorted, with repetition); coefficient-free."""

    __slots__ = ("factors",)
    _order = 2

    def children(self):
        return self.factors

    def to_sympy(self):
        import sympy

        return sympy.Mul(*(f.to_sympy() for f in self.factors))

    def pretty(self, prec=0):
        s = "*".join(f.pretty(2) for f in self.factors)
        return f"({s})" if prec > 2 else s

    def _rebuild_args(self):
        return (self.factors,)


def _make_prod(factors: tuple[Expr, ...]) -> Expr:
    if len(factors) == 1:
        return factors[0]
    factors = tuple(sorted(factors, key=_key_of))
    return _intern(Prod, factors, _init_prod, factors)


def _init_prod(n, factors):
    n.factors = factors
    n._free = frozenset().union(*(f._free for f in factors))
    n._sort = (2, tuple(f._sort for f in factors))


def prod(items: Iterable[ExprLike]) -> Expr:
    """Product of expressions (1 for none)."""
    r: Expr = lit(1)
    for x in items:
        r = r * x
    return r


class Sum(Expr):
    """``const + sum(coeff * monomial)``, the canonical polynomial (see module docstring)."""

    __slots__ = ("const", "terms")
    _order = 3

    def children(self):
        return tuple(m for m, _ in self.terms)

    def to_sympy(self):
        import sympy

        return sympy.Add(sympy.Integer(self.const), *(c * m.to_sympy() for m, c in self.terms))

    def pretty(self, prec=0):
        parts = []
        for m, c in self.terms:
            body = m.pretty(2)
            if c == 1:
                s = body
            elif c == -1:
                s = "-" + body
            else:
                s = f"{c}*{body}"
            parts.append(s)
        if self.const:
            parts.append(str(self.const))
        s = parts[0]
        for p in parts[1:]:
            s += f" - {p[1:]}" if p.startswith("-") else f" + {p}"
        return f"({s})" if (prec > 0 and len(parts) > 1) or prec > 2 or (prec > 1 and parts[0].startswith("-")) else s

    def _rebuild_args(self):
        return (self.const, self.terms)


class _DivMod(Expr):
    """Shared body of ``FloorDiv`` and ``Mod`` (``den > 0``)."""

    __slots__ = ("num", "den")
    _sym = ""

    def children(self):
        return (self.num, self.den)

    def pretty(self, prec=0):
        s = f"{self.num.pretty(3)} {self._sym} {self.den.pretty(3)}"
        return f"({s})" if prec > 1 else s

    def _rebuild_args(self):
        return (self.num, self.den)


class FloorDiv(_DivMod):
    """``num // den`` (floor division; ``den > 0``)."""

    __slots__ = ()
    _order = 4
    _sym = "//"

    def to_sympy(self):
        import sympy

        return sympy.floor(self.num.to_sympy() / self.den.to_sympy())

    @staticmethod
    def make(num: Expr, den: Expr) -> Expr:
        return _divmod(num, den, FloorDiv)


class Mod(_DivMod):
    """``num % den`` (non-negative remainder; ``den > 0``)."""

    __slots__ = ()
    _order = 5
    _sym = "%"

    def to_sympy(self):
        import sympy

        return sympy.Mod(self.num.to_sympy(), self.den.to_sympy())

    @staticmethod
    def make(num: Expr, den: Expr) -> Expr:
        return _divmod(num, den, Mod)


class Shape(Expr):
    """An ordered list of dimension expressions (a tensor shape). Not arithmetic."""

    __slots__ = ("items",)
    _order = 6

    def children(self):
        return self.items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __iter__(self):
        return iter(self.items)

    def evaluate(self, env):
        return tuple(x.evaluate(env) for x in self.items)

    def to_sympy(self):
        import sympy

        return sympy.Tuple(*(x.to_sympy() for x in self.items))

    def pretty(self, prec=0):
        return "[" + ", ".join(x.pretty() for x in self.items) + "]"

    def _rebuild_args(self):
        return (self.items,)

    def numel(self) -> Expr:
        return prod(self.items)


def shape(items: Iterable[ExprLike]) -> Shape:
    items = tuple(as_expr(x) for x in items)
    return _intern(Shape, items, _init_shape, items)


def _init_shape(n, items):
    n.items = items
    n._free = frozenset().union(*(x._free for x in items)) if items else frozenset()
    n._sort = (6, tuple(x._sort for x in items))


def as_expr(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        try:
            import operator

            x = operator.index(x)
        except TypeError:
            raise TypeError(f"not a dimension expression: {x!r}") from None
    return lit(x)


def _key_of(e: Expr) -> tuple:
    return e._sort


# --- polynomial arithmetic ---------------------------------------------------------------------
# A polynomial is (const, {monomial: coeff}); a monomial is an atom or a Prod.

Poly = tuple[int, dict]


def _as_poly(e: Expr) -> Poly:
    if isinstance(e, Lit):
        return e.value, {}
    if isinstance(e, Sum):
        return e.const, dict(e.terms)
    if isinstance(e, Shape):
        raise TypeError(f"arithmetic on a shape list {e!r}")
    return 0, {e: 1}


def _poly_of(x: ExprLike) -> Poly:
    """``_as_poly`` of an operand; a plain int builds no ``Lit``."""
    if type(x) is int:
        return x, {}
    return _as_poly(as_expr(x))


def _poly_add(a: Poly, b: Poly) -> Poly:
    terms = dict(a[1])
    for m, c in b[1].items():
        terms[m] = terms.get(m, 0) + c
    return a[0] + b[0], terms


def _factors(m: Expr) -> tuple[Expr, ...]:
    return m.factors if isinstance(m, Prod) else (m,)


def _poly_mul(a: Poly, b: Poly) -> Poly:
    const = a[0] * b[0]
    terms: dict = {}

    def put(m, c):
        terms[m] = terms.get(m, 0) + c

    for m, c in a[1].items():
        if b[0]:
            put(m, c * b[0])
    for m, c in b[1].items():
        if a[0]:
            put(m, c * a[0])
    for m1, c1 in a[1].items():
        for m2, c2 in b[1].items():
            put(_make_prod(_factors(m1) + _factors(m2)), c1 * c2)
    return const, terms


def _poly_to_expr(p: Poly) -> Expr:
    const, terms = p
    items = tuple(sorted(((m, c) for m, c in terms.items() if c), key=lambda mc: _key_of(mc[0])))
    if not items:
        return lit(const)
    if len(items) == 1 and const == 0 and items[0][1] == 1:
        return items[0][0]
    return _intern(Sum, (const, items), _init_sum, const, items)


def _init_sum(n, const, items):
    n.const = const
    n.terms = items
    n._free = frozenset().union(*(m._free for m, _ in items))
    n._sort = (3, const, tuple((m._sort, c) for m, c in items))


def _monomial(e: Expr) -> tuple[int, Expr] | None:
    """``e`` as ``coeff * monomial`` (monomial may be ``lit(1)``), or None for a true sum."""
    if isinstance(e, Lit):
        return e.value, _ONE
    if isinstance(e, Sum):
        return (e.terms[0][1], e.terms[0][0]) if e.const == 0 and len(e.terms) == 1 else None
    return 1, e


def _divides(den: Expr, m: Expr, c: int) -> tuple[Expr, int] | None:
    """If ``c*m`` is ``den`` times ``c' * m'``, return ``(m', c')``."""
    d = _monomial(den)
    if d is None or d[0] == 0 or c % d[0]:
        return None
    rest = list(_factors(m))
    for f in () if d[1] is _ONE else _factors(d[1]):
        if f not in rest:
            return None
        rest.remove(f)
    return (_make_prod(tuple(rest)) if rest else _ONE), c // d[0]


def _divmod(num: Expr, den: Expr, kind: type) -> Expr:
    """``num // den`` (``kind`` is ``FloorDiv``) or ``num % den`` (``Mod``), canonical."""
    if isinstance(num, Shape) or isinstance(den, Shape):
        raise TypeError("floor division / modulo of a shape list")
    if isinstance(den, Lit) and den.value <= 0:
        raise ZeroDivisionError(f"{kind.__name__} by non-positive literal {den.value}")
    for _, _, fn in DIVMOD_RULES:
        out = fn(kind, num, den)
        if out is not None:
            return out
    return _atom(kind, num, den)


def _atom(kind: type, num: Expr, den: Expr) -> Expr:
    return _intern(kind, (num, den), _init_divmod, num, den)


def _init_divmod(n, num, den):
    n.num = num
    n.den = den
    n._free = num._free | den._free
    n._sort = (type(n)._order, num._sort, den._sort)


def _split(num: Expr, den: Expr) -> tuple[Expr, Expr] | None:
    """``num`` as ``q*den + r``: ``q`` collects the terms that are multiples of ``den`` (and, for a
    literal ``den``, the constant is reduced into ``[0, den)``). None if ``q`` would be 0."""
    const, terms = _as_poly(num)
    q_const = 0
    q_terms: dict = {}
    r_terms: dict = {}
    for m, c in terms.items():
        hit = _divides(den, m, c)
        if hit is None:
            r_terms[m] = c
        elif hit[0] is _ONE:
            q_const += hit[1]
        else:
            q_terms[hit[0]] = hit[1]   # distinct m give distinct m / den
    if isinstance(den, Lit):
        q_const += const // den.value
        const %= den.value
    if not q_terms and not q_const:
        return None
    return _poly_to_expr((q_const, q_terms)), _poly_to_expr((const, r_terms))


# --- div/mod rules: (name, comment, fn(kind, num, den) -> Expr | None) ---------------------------

def _r_den_one(kind, num, den):
    if den is _ONE:
        return num if kind is FloorDiv else _ZERO
    return None


def _r_fold(kind, num, den):
    if isinstance(num, Lit) and isinstance(den, Lit):
        return lit(num.value // den.value if kind is FloorDiv else num.value % den.value)
    return None


def _r_zero(kind, num, den):
    return _ZERO if num is _ZERO else None


def _r_self(kind, num, den):
    if num is den:
        return _ONE if kind is FloorDiv else _ZERO
    return None


def _r_mod_of_mod(kind, num, den):
    if kind is Mod and isinstance(num, Mod):
        outer = _monomial(num.den)
        if outer is not None and _divides(den, outer[1], outer[0]) is not None:
            return _divmod(num.num, den, Mod)
    return None


def _r_common_factor(kind, num, den):
    dm = _monomial(den)
    g = math.gcd(gcd_of(num), dm[0]) if dm is not None else 1
    if g <= 1:
        return None
    const, terms = _as_poly(num)
    num = _poly_to_expr((const // g, {m: c // g for m, c in terms.items()}))
    den = lit(dm[0] // g) if dm[1] is _ONE else _poly_to_expr((0, {dm[1]: dm[0] // g}))
    return _divmod(num, den, FloorDiv) if kind is FloorDiv else _divmod(num, den, Mod) * g


def _r_split_div(kind, num, den):
    if kind is FloorDiv and not isinstance(num, (Var, FloorDiv, Mod)):
        qr = _split(num, den)
        if qr is not None:
            return qr[0] + _divmod(qr[1], den, FloorDiv)
    return None


def _r_split_mod(kind, num, den):
    if kind is Mod and not isinstance(num, (Var, FloorDiv, Mod)):
        qr = _split(num, den)
        if qr is not None:
            return _divmod(qr[1], den, Mod)
    return None


DIVMOD_RULES: list[tuple[str, str, Callable[[type, Expr, Expr], Expr | None]]] = [
    ("den_one", "x // 1  ->  x;  x % 1  ->  0", _r_den_one),
    ("fold_literals", "7 // 2  ->  3;  7 % 2  ->  1", _r_fold),
    ("zero_numerator", "0 // d  ->  0;  0 % d  ->  0", _r_zero),
    ("self", "x // x  ->  1;  x % x  ->  0", _r_self),
    ("mod_of_mod", "(x % (k*d)) % d  ->  x % d", _r_mod_of_mod),
    ("split_div", "(q*d + r) // d  ->  q + r // d", _r_split_div),
    ("split_mod", "(q*d + r) % d  ->  r % d", _r_split_mod),
    ("common_factor", "(g*x) // (g*d)  ->  x // d;  (g*x) % (g*d)  ->  g*(x % d)   (g > 1 an "
     "integer dividing every coefficient)", _r_common_factor),
]
"""Div/mod rewrites applied on construction, highest priority first: ``fn(kind, num, den)``
(``kind`` is ``FloorDiv`` or ``Mod``, ``den`` not a non-positive literal) returns the canonical
result or None. Whatever no rule rewrites is interned as an atom."""


def rebuild(e: Expr, f: Callable[[Expr], Expr]) -> Expr:
    """``e`` with each child replaced by ``f(child)``, re-canonicalized."""
    if isinstance(e, (Lit, Var)):
        return e
    if isinstance(e, Prod):
        return prod(f(x) for x in e.factors)
    if isinstance(e, Sum):
        out: Expr = lit(e.const)
        for m, c in e.terms:
            out = out + f(m) * c
        return out
    if isinstance(e, FloorDiv):
        return f(e.num) // f(e.den)
    if isinstance(e, Mod):
        return f(e.num) % f(e.den)
    if isinstance(e, Shape):
        return shape(f(x) for x in e.items)
    raise TypeError(type(e))  # pragma: no cover


def _bottom_up(e: Expr, local: Callable[[Expr], Expr], memo: dict) -> Expr:
    """``local`` applied to each node of ``e`` after its children, once per node."""
    if isinstance(e, (Lit, Var)):
        return e
    done = memo.get(e)
    if done is None:
        done = memo[e] = local(rebuild(e, lambda x: _bottom_up(x, local, memo)))
    return done


def flat_quotients(e: Expr) -> Expr:
    """``e`` with every ``(x // m + q) // n`` of literal ``m``, ``n`` merged into
    ``(x + m*q) // (m*n)`` (exact: ``x // m + q`` is ``(x + m*q) // m``), bottom-up: a key under
    which two spellings of one value meet, the size rules' nested ``((H + 1) // 2 + 1) // 2`` and
    export's ``(H + 3) // 4``. Not a canonical form: a nested size is how the graph spells a
    layer's output in terms of its input's, which a binder given that input's size evaluates."""
    memo: dict = {}

    def merge(out: Expr) -> Expr:
        if not (isinstance(out, FloorDiv) and isinstance(out.den, Lit)):
            return out
        inner = next((m for m, c in _as_poly(out.num)[1].items() if c == 1 and
                      isinstance(m, FloorDiv) and isinstance(m.den, Lit)), None)
        if inner is None:
            return out
        m = inner.den.value
        return _bottom_up((inner.num + (out.num - inner) * m) // (m * out.den.value), merge, memo)

    return _bottom_up(e, merge, memo)


def _padded(term: Expr) -> tuple[list[Expr], int] | None:
    """``(xs, m)`` where ``term`` pads each ``x`` of ``xs`` up to a multiple of the literal ``m``:
    ``(-z) % m`` pads ``z`` (and ``y``, where ``z`` is ``y % m``); ``x % 2`` pads ``x`` (the same
    for ``m = 2``: torchvision's patch merging pads by ``H % 2``)."""
    if not isinstance(term, Mod) or not isinstance(term.den, Lit):
        return None
    m, hit = term.den.value, _monomial(term.num)
    if hit is None:
        return None
    if hit[0] == -1:
        z = hit[1]
        return ([z, z.num] if isinstance(z, Mod) and z.den is term.den else [z]), m
    return ([term.num], 2) if m == 2 and hit[0] == 1 else None


def rounded_up(e: Expr) -> Expr:
    """``e`` with each ``x + (-x) % m`` (``x`` padded to a multiple of a literal ``m``, a window
    size; also spelt ``x + (-(x % m)) % m``) spelt ``m*((x + m - 1) // m)``, bottom-up: the same
    value, in a form a reshape into windows divides exactly (``7*q // 7`` is ``q``), where the sum
    leaves the solver a residual it cannot prove and the kernels a quotient that never cancels."""

    def round_up(out: Expr) -> Expr:
        terms = dict(out.terms) if isinstance(out, Sum) else {}
        for term, c in terms.items():
            hit = _padded(term) if c == 1 else None
            for x in hit[0] if hit else ():
                if _part_of(x, terms):
                    m = hit[1]
                    return out - term - x + ((x + (m - 1)) // m) * m
        return out

    return _bottom_up(e, round_up, {})


def _part_of(x: Expr, terms: dict) -> bool:
    """Every term of ``x`` is a term of the sum (``terms``: monomial -> coefficient)."""
    own = _as_poly(x)[1]
    return bool(own) and all(terms.get(t) == k for t, k in own.items())


def _subs(e: Expr, mapping: Mapping[Expr, Expr], memo: dict) -> Expr:
    hit = mapping.get(e)
    if hit is not None:
        return hit
    if isinstance(e, (Lit, Var)):
        return e
    done = memo.get(e)
    if done is None:
        done = memo[e] = rebuild(e, lambda x: _subs(x, mapping, memo))
    return done


def gcd_of(p: Expr) -> int:
    """gcd of the constant and all coefficients of a polynomial (0 for the zero polynomial)."""
    const, terms = _as_poly(p)
    return math.gcd(const, *terms.values())


_REBUILD: dict[str, Callable[..., Expr]] = {
    "Lit": lit, "Var": var, "Prod": prod, "Sum": _rebuild_sum, "FloorDiv": _rebuild_floordiv,
    "Mod": _rebuild_mod, "Shape": shape,
}


# --- the interpreter -----------------------------------------------------------------------------
# One fold over the canonical form, generic over the value domain and the zero-divisor policy (as
# JAX's ``shape_poly`` evaluates one expression over ints or tracers). Domains: ``Ints`` below
# (``Expr.evaluate``; ``dims.bind.evaluate``, partial), the host program's registers
# (``hostgen.program``) and kgen's index spellings (``kgen.infer``).

class ZeroDivisor:
    """A zero-divisor policy: what ``x // d`` and ``x % d`` are for ``d <= 0``, which the semantics
    leaves undefined. Strict: raise ``error(message(e, d))``; lenient (``error`` None): 0, as for
    launch slots (``dims.bind``). A domain that computes no value at fold time compiles the
    policy instead (the host program: ``fdiv``/``mod``, which fail at run time, or
    ``fdiv0``/``mod0``)."""

    __slots__ = ("error", "message")

    def __init__(self, error: type[Exception] | None = None,
                 message: Callable[[Expr, int], str] | None = None) -> None:
        self.error, self.message = error, message

    @property
    def lenient(self) -> bool:
        return self.error is None

    def __call__(self, e: Expr, d: int) -> int:
        """The value of ``e`` (a ``FloorDiv``/``Mod``) whose divisor is ``d <= 0``."""
        if self.error is None:
            return 0
        raise self.error(self.message(e, d))


STRICT = ZeroDivisor(ZeroDivisionError,
                     lambda e, d: f"{e!r}: divisor {e.den!r} = {d} is not positive")
LENIENT = ZeroDivisor()


def interpret(e: Expr, dom, memo: Mapping | None = None, write: bool = False):
    """The value of ``e`` in domain ``dom``, bottom-up. ``memo`` (None: none) holds known or
    already computed sub-expressions: ``memo[e]``, where present, is taken as is and ``e``'s
    operands are not visited (a bound atom, a register, a kernel param); literals are not looked
    up. ``write``: store each value computed in ``memo``.

    A domain supplies ``lit(e)``, ``var(v)`` (a variable not in the memo), ``sum(e, const,
    terms)`` (``terms``: ``(value, coeff)`` per monomial, in order), ``prod(e, factors)``,
    ``floordiv(e, num, den)`` and ``mod(e, num, den)``. A domain value is never None: None is
    *unknown* (``var`` of a variable no memo holds, under partial knowledge), and so is every
    expression over it, without a domain operation."""
    t = type(e)
    if t is Lit:
        return dom.lit(e)
    if memo is not None:
        hit = memo.get(e)
        if hit is not None:
            return hit
    if t is Var:
        v = dom.var(e)
    elif t is Sum:
        terms = []
        for m, c in e.terms:
            x = interpret(m, dom, memo, write)
            if x is None:
                return None
            terms.append((x, c))
        v = dom.sum(e, e.const, terms)
    elif t is Prod:
        factors = []
        for f in e.factors:
            x = interpret(f, dom, memo, write)
            if x is None:
                return None
            factors.append(x)
        v = dom.prod(e, factors)
    elif t is FloorDiv or t is Mod:
        num, den = interpret(e.num, dom, memo, write), interpret(e.den, dom, memo, write)
        if num is None or den is None:
            return None
        v = dom.floordiv(e, num, den) if t is FloorDiv else dom.mod(e, num, den)
    else:
        raise TypeError(f"cannot evaluate {e!r}")
    if write and v is not None:
        memo[e] = v
    return v


def operands(e: Expr, dom, memo: dict, write: bool = False):
    """``interpret`` with ``memo[e]`` itself hidden: ``e`` computed from its operands (a bound
    atom checked against them)."""
    have = memo.pop(e, None)
    try:
        return interpret(e, dom, memo, write)
    finally:
        if have is not None:
            memo[e] = have


class Ints:
    """The domain of Python ints, with zero-divisor policy ``zero``. ``names``: variable name ->
    value (a name it lacks raises KeyError); None: variables are known only through the memo, an
    unknown one is None (partial knowledge, ``dims.bind``)."""

    __slots__ = ("zero", "names")

    def __init__(self, zero: ZeroDivisor = STRICT, names: Mapping[str, int] | None = None) -> None:
        self.zero, self.names = zero, names

    @staticmethod
    def lit(e: Lit) -> int:
        return e.value

    def var(self, v: Var) -> int | None:
        return None if self.names is None else self.names[v.name]

    @staticmethod
    def sum(e: Sum, const: int, terms: list) -> int:
        for x, c in terms:
            const += c * x
        return const

    @staticmethod
    def prod(e: Prod, factors: list) -> int:
        r = 1
        for x in factors:
            r *= x
        return r

    def floordiv(self, e: FloorDiv, n: int, d: int) -> int:
        return n // d if d > 0 else self.zero(e, d)

    def mod(self, e: Mod, n: int, d: int) -> int:
        return n % d if d > 0 else self.zero(e, d)
