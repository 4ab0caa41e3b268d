"""``bounds.simplify``: sound (value-preserving inside the bounds) and effective on reshape-style
coordinate maps."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlcb_lab.dims import FloorDiv, Lit, Mod, as_expr, lit, shape, var
from dlcb_lab.dims.bounds import in_range, lower, nonneg, nonneg_quotients, positive, simplify, \
    upper

# Names are global per process: this file uses the ``tb_`` prefix only.
C0, C1, C2 = var("tb_c0", 2), var("tb_c1", 2), var("tb_c2", 2)   # coordinates
N, W, H = var("tb_n"), var("tb_w"), var("tb_h")                    # runtime dims (>= 1 here)
VARS = {v.name: v for v in (C0, C1, N, W)}

SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def has_divmod(e) -> bool:
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, (FloorDiv, Mod)):
            return True
        stack.extend(x.children())
    return False


# --- targeted: the reshape cases the coordinate maps produce -----------------------------------

def test_reshape_literal():
    b = {"tb_c0": N, "tb_c1": lit(24)}
    assert simplify((C0 * 24 + C1) // 24, b) is C0
    assert simplify((C0 * 24 + C1) % 24, b) is C1
    # DESIGN.md worked example: x's coordinate for output (i, j) of reshape [N, 4, 6] -> (-1, 24)
    flat = C0 * 24 + C1
    got = simplify(shape([flat // 24, (flat // 6) % 4, flat % 6]), b)
    assert got is shape([C0, C1 // 6, C1 % 6])
    # not provable: c1 may reach 24 when its bound is 25
    assert has_divmod(simplify((C0 * 24 + C1) // 24, {"tb_c0": N, "tb_c1": lit(25)}))


def test_reshape_symbolic():
    b = {"tb_c0": N, "tb_c1": W}
    assert simplify((C0 * W + C1) // W, b) is C0
    assert simplify(((C0 * W + C1) // W) % N, b) is C0
    assert simplify((C0 * W + C1) % W, b) is C1
    # c0 < N is needed for the outer % N
    assert has_divmod(simplify(((C0 * W + C1) // W) % N, {"tb_c0": N + 1, "tb_c1": W}))
    # c1 < W is needed for the // W
    assert has_divmod(simplify((C0 * W + C1) // W, {"tb_c0": N, "tb_c1": W + 1}))


def test_reshape_three_axes_symbolic():
    """Flatten ``[N, H, W]`` and un-flatten: every // and % disappears."""
    b = {"tb_c0": N, "tb_c1": H, "tb_c2": W}
    flat = (C0 * H + C1) * W + C2
    got = simplify(shape([flat // (H * W), (flat // W) % H, flat % W]), b)
    assert got is shape([C0, C1, C2])


def test_bounds_helpers():
    b = {"tb_c0": N, "tb_c1": lit(24)}
    assert upper(C0 * 24 + C1, b) is N * 24 - 1
    assert lower(C0 * 24 + C1, b) is lit(0)
    assert upper(N * 3, b) is N * 3           # unbounded names are fixed symbols
    assert upper(C1 % 5, b) is lit(4)
    assert in_range(C1, lit(24), b) and not in_range(C1, lit(23), b)
    assert in_range(C0 * 24 + C1, N * 24, b)
    assert nonneg(N * W + 3) and not nonneg(N - 1) and nonneg(lit(0)) and not nonneg(lit(-1))


def test_negative_quotients_are_not_assumed_nonnegative():
    """Regression: ``a // d`` atoms with a negative numerator were taken as non-negative, and a
    product's minimum was taken as the product of its factors' minima even with a negative factor;
    both made ``simplify`` drop a ``%`` that changes the value."""
    e = ((1 - C1) // 2) % 3                    # (1 - c1) // 2 is negative for c1 >= 3
    b = {"tb_c1": W}
    assert not nonneg(lower((1 - C1) // 2, b))
    assert simplify(e, b) is e
    assert e.evaluate({"tb_c1": 4, "tb_w": 5}) == 1
    e = (C0 * ((1 - C1) // 2)) % 7             # c0 * (negative) is negative
    b = {"tb_c0": lit(3), "tb_c1": lit(5)}
    assert lower(C0 * ((1 - C1) // 2), b) is None
    assert simplify(e, b) is e
    assert not nonneg((-C0) // (N * W)) and nonneg((C0 + 1) // N) and nonneg((-C0) % N)
    assert not nonneg(N * ((N - 2) // 3))


def test_recombine_quotient_and_remainder():
    """``k*d*(x // d) + k*(x % d) -> k*x`` inside sums (reshape round trips)."""
    b = {"tb_c1": lit(100)}
    assert simplify(6 * (C1 // 6) + C1 % 6, b) is C1
    assert simplify(12 * (C1 // 6) + 2 * (C1 % 6) + N, b) is 2 * C1 + N
    x = C0 + 5 * C1
    assert simplify(4 * (x // 4) + x % 4 + 1, {"tb_c0": N, "tb_c1": W}) is x + 1
    e = 5 * (C1 // 6) + C1 % 6                  # partial match: one // instead of // and %
    assert simplify(e, b) is C1 - C1 // 6
    assert simplify(5 * (C1 // 6) + 2 * (C1 % 6), b) is 2 * C1 - 7 * (C1 // 6)
    e = 5 * (C1 // 6) + C1 % 7                  # different divisors: kept
    assert simplify(e, b) is e


# --- random soundness ---------------------------------------------------------------------------

bounds_exprs = st.one_of(st.integers(1, 5), st.sampled_from(["tb_n", "tb_w"]),
                         st.tuples(st.just("+"), st.sampled_from(["tb_n", "tb_w"]),
                                   st.integers(1, 2)),
                         st.tuples(st.just("*"), st.sampled_from(["tb_n", "tb_w"]),
                                   st.integers(2, 3)),
                         st.just(("*", "tb_n", "tb_w")))
divisors = st.one_of(st.integers(1, 6), st.sampled_from(["tb_n", "tb_w", "B0", "B1"]),
                     st.just(("*", "tb_n", "tb_w")),
                     st.tuples(st.just("+"), st.sampled_from(["tb_n", "tb_w"]), st.integers(1, 2)))
# "flat" is c0*B1 + c1 (a row-major flat index), the shape simplify targets; linear terms in a
# coordinate with either sign (conv windows with padding go negative)
linear = st.tuples(st.just("+"), st.tuples(st.just("*"), st.sampled_from(["tb_c0", "tb_c1"]),
                                           st.integers(-3, 3)), st.integers(-4, 4))
leaves = st.one_of(st.sampled_from(["tb_c0", "tb_c1", "tb_n", "tb_w", "flat", "B0", "B1"]),
                   st.integers(-3, 5), linear)
trees = st.recursive(
    leaves,
    lambda ch: st.one_of(st.tuples(st.sampled_from(["+", "-", "*"]), ch, ch),
                         st.tuples(st.sampled_from(["//", "%"]), ch, divisors)),
    max_leaves=8)

OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
       "//": lambda x, y: x // y, "%": lambda x, y: x % y}


def build(t, special):
    if isinstance(t, int):
        return lit(t)
    if isinstance(t, str):
        return special[t] if t in special else VARS[t]
    op, x, y = t
    return OPS[op](build(x, special), build(y, special))


DIM_VALUES = [(1, 1), (1, 3), (2, 2), (3, 1), (2, 5), (4, 3)]


@SETTINGS
@given(trees, bounds_exprs, bounds_exprs)
def test_simplify_preserves_value_within_bounds(t, tb0, tb1):
    b0, b1 = build(tb0, {}), build(tb1, {})
    special = {"B0": b0, "B1": b1, "flat": C0 * b1 + C1}
    e = build(t, special)
    b = {"tb_c0": b0, "tb_c1": b1}
    s = simplify(e, b)
    assert s.free_vars <= e.free_vars
    for n, w in DIM_VALUES:
        env = {"tb_n": n, "tb_w": w}
        for c0, c1 in itertools.product(range(b0.evaluate(env)), range(b1.evaluate(env))):
            env["tb_c0"], env["tb_c1"] = c0, c1
            assert s.evaluate(env) == e.evaluate(env), (e, s, env)


@SETTINGS
@given(trees, bounds_exprs, bounds_exprs)
def test_extremes_are_sound(t, tb0, tb1):
    """``lower``/``upper`` bound the value over all coordinates (runtime dims fixed)."""
    b0, b1 = build(tb0, {}), build(tb1, {})
    e = build(t, {"B0": b0, "B1": b1, "flat": C0 * b1 + C1})
    b = {"tb_c0": b0, "tb_c1": b1}
    lo, hi = lower(e, b), upper(e, b)
    for n, w in DIM_VALUES[:4]:
        env = {"tb_n": n, "tb_w": w}
        vals = []
        for c0, c1 in itertools.product(range(b0.evaluate(env)), range(b1.evaluate(env))):
            vals.append(e.evaluate(dict(env, tb_c0=c0, tb_c1=c1)))
        if lo is not None:
            assert lo.free_vars <= {"tb_n", "tb_w"}
            assert lo.evaluate(env) <= min(vals)
        if hi is not None:
            assert hi.free_vars <= {"tb_n", "tb_w"}
            assert hi.evaluate(env) >= max(vals)


@SETTINGS
@given(st.integers(1, 6), st.integers(2, 6), st.integers(0, 3), st.booleans())
def test_unflatten_random_literal_shapes(a, w, extra, symbolic_rows):
    """``[R, w] -> flat -> [R, w]`` drops every div/mod and is exact; with a bound one too large
    the operation must stay."""
    rows = N if symbolic_rows else lit(a)
    b = {"tb_c0": rows, "tb_c1": lit(w)}
    flat = C0 * w + C1
    assert simplify(shape([flat // w, flat % w]), b) is shape([C0, C1])
    loose = {"tb_c0": rows, "tb_c1": lit(w + 1 + extra)}
    got = simplify(flat // w, loose)
    if w > 1:
        assert has_divmod(got)
    for c0 in range(3):
        for c1 in range(w + 1 + extra):
            env = {"tb_c0": c0, "tb_c1": c1, "tb_n": 3}
            assert got.evaluate(env) == (c0 * w + c1) // w


def test_simplify_int_values_are_expressions():
    assert isinstance(simplify(as_expr(5), {}), Lit)


@SETTINGS
@given(trees, st.integers(2, 5), st.integers(-2, 3).filter(bool), trees, bounds_exprs)
def test_recombine_random(t, d, k, rest, tb1):
    b1 = build(tb1, {})
    special = {"B0": lit(3), "B1": b1, "flat": C0 * b1 + C1}
    x, r = build(t, special), build(rest, special)
    e = k * d * (x // d) + k * (x % d) + r
    s = simplify(e, {"tb_c0": lit(3), "tb_c1": b1})
    for n, w in DIM_VALUES[:3]:
        env = {"tb_n": n, "tb_w": w}
        for c0, c1 in itertools.product(range(3), range(b1.evaluate(env))):
            env["tb_c0"], env["tb_c1"] = c0, c1
            assert s.evaluate(env) == e.evaluate(env)


# --- symbolic divisors ----------------------------------------------------------------------------

def test_positive_divisors_come_from_the_bounds():
    """A coordinate ``0 <= c < b`` exists only where ``b >= 1``: each bound, and each factor of a
    monomial bound, is a witness ``>= 1``; nothing else over runtime dims is assumed positive."""
    b = {"tb_c0": N * W * 4}
    assert positive(N, b) and positive(W, b) and positive(N * W, b) and positive(4 * W, b)
    assert positive(W + H, b) and positive(H + 1, {}) and positive(lit(1), {})
    assert not positive(H, b) and not positive(N, {}) and not positive(lit(0), b)
    assert not positive(W - 1, b) and not positive(C0, b)          # W may be 1; a coordinate
    assert positive(N, {"tb_c0": N - 1}) and not positive(N - 1, {"tb_c0": N})
    assert positive((N + 1) // 2, {"tb_c0": N}) and not positive(N // 2, {"tb_c0": N})
    assert positive(N, {"tb_c0": H, "tb_c1": N * H}) and positive(W, {"tb_c0": W - H})
    assert not positive(W, {"tb_c0": H - W})


def test_a_quotient_witness_makes_its_numerator_one():
    """A witness ``n // k`` (``k`` a positive literal) is ``>= 1``, so ``n >= k``: ``n - k + 1``
    is a witness (a pool's output extent ``(H + 1) // 2`` makes its input extent ``H`` one)."""
    assert positive(H, {"tb_c0": (H + 1) // 2}) and positive(H, {"tb_c0": H // 2})
    nested = {"tb_c0": ((H + 1) // 2 + 1) // 2}
    assert positive(H, nested) and positive((H + 1) // 2, nested)
    assert not positive(H, {"tb_c0": H // 2 + 1}) and not positive(H, {"tb_c0": (H + 2) // 2})


def test_negative_quotients_bounded_by_their_quotient():
    """``nonneg_quotients`` bounds ``c*(x // k)`` (``c < 0``) by ``c*x/k``: a window's first tap
    against its input's last element; ``nonneg`` alone does not prove these."""
    a = (H + 1) // 2
    for e in (a - 2 * ((a + 1) // 2) + 2, H - 2 * (H // 2), 3 * H - 2 * ((3 * H + 1) // 2) + 1,
              H - (H // 2) - (H // 2)):
        assert nonneg_quotients(e) and not nonneg(e), e
    for e in (H - 2 * ((H + 1) // 2), H - 3 * (H // 2), -(H // 2)):
        assert not nonneg_quotients(e), e


@SETTINGS
@given(st.lists(st.tuples(st.integers(-4, 4), st.integers(-3, 3), st.integers(1, 4),
                          st.booleans()), min_size=1, max_size=3),
       st.integers(-3, 3), st.integers(-4, 4))
def test_negative_quotients_sound(terms, a, const):
    """Wherever ``nonneg_quotients`` proves ``a*H + sum c*((H + s) // k) + const`` (a quotient
    nested once more where asked), it is ``>= 0`` at every ``H >= 0``."""
    e = a * H + const
    for c, s, k, nest in terms:
        q = (H + s) // k
        e = e + c * ((q + s) // k if nest else q)
    if nonneg_quotients(e):
        for h in range(0, 40):
            assert e.evaluate({"tb_h": h}) >= 0, (e, h)


def test_a_multiple_of_a_witness_is_positive():
    """``256*W - 256`` is ``256*(W - 1)``: positive where the extent ``W - 1`` is a coordinate's
    bound (a pooled width, say), so it divides by a multiply-high, not a floor division."""
    b = {"tb_c0": W - 1, "tb_c1": N * (W - 1)}
    assert positive(256 * W - 256, b) and positive(6 * W - 6, b)
    assert not positive(256 * W - 256, {"tb_c0": W}) and not positive(256 * W - 512, b)
    assert lower(C0 // (256 * W - 256), {"tb_c0": 256 * N * (W - 1), "tb_c1": W - 1}) is lit(0)


def test_quotient_and_numerator_of_opposite_signs_are_bounded_together():
    """``58*c - 115*(c // 2)`` is ``58*(c % 2) + c // 2``: in ``[0, 86]`` for ``c < 58`` (the
    index of a channel shuffle's second half), where term by term it is in ``[-3220, 3306]``."""
    b = {"tb_c0": lit(58)}
    e = 58 * C0 - 115 * (C0 // 2)
    assert lower(e, b) is lit(0) and upper(e, b) is lit(86)
    assert in_range(e + 29, lit(116), b)
    assert [e.evaluate({"tb_c0": c}) for c in range(58)] == \
        [58 * (c % 2) + c // 2 for c in range(58)]
    assert lower(58 * C0 - 117 * (C0 // 2), b) is not lit(0)   # |k2| > 58*2: as it was


def test_symbolic_remainder_and_quotient_bounds():
    b = {"tb_c0": N * W}
    assert upper(C0 % W, b) is W - 1 and lower(C0 % W, b) is lit(0)
    assert upper(C0 % W, {"tb_c0": N}) is None       # W may be 0 there: no bound
    assert lower(C0 % W, {"tb_c0": N}) is None
    assert upper(C0 // W, {"tb_c0": H * W}) is H - 1  # (H*W - 1) // W is H + (-1) // W
    assert lower((C0 - 1) // W, {"tb_c0": H * W}) is lit(-1)
    assert upper(C0 // W, {"tb_c0": N}) is None
    assert in_range(C0 // W, H, {"tb_c0": H * W}) and in_range(C0 % W, W, b)


def test_symbolic_in_range():
    b = {"tb_c0": W, "tb_c1": N * W}
    assert simplify(C0 // W, b) is lit(0) and simplify(C0 % W, b) is C0
    assert simplify((C1 % W) // W, b) is lit(0) and simplify((C1 % W) % W, b) is C1 % W
    assert simplify((C1 // W) % N, b) is C1 // W
    assert has_divmod(simplify((C1 % W) // W, {"tb_c1": N}))          # W may be 0: kept
    assert simplify(C0 // (W + 1), b) is lit(0) and simplify(C0 % (W + 1), b) is C0
    assert has_divmod(simplify(C0 // (W - 1), {"tb_c0": W}))          # C0 may reach W - 1


def test_quotient_form_is_canonical():
    """``d*(x // d)`` and ``x - x % d`` are one value; the quotient form is kept (one term,
    provably non-negative), the remainder form only where it has fewer terms."""
    b = {"tb_c0": N * W, "tb_c1": lit(7)}
    q = W * (C0 // W)
    assert simplify(C0 - C0 % W, b) is q and simplify(q, b) is q and nonneg(q)
    assert simplify(q - C0, b) is -(C0 % W)
    assert simplify(q + C0 % W, b) is C0
    x = C0 + 3 * C1
    assert simplify(x - x % W + 1, b) is W * (x // W) + 1
    assert simplify(C0 - C0 % W, {"tb_c0": N}) is C0 - C0 % W         # W may be 0: kept
    assert simplify(2 * C0 - C0 % W, b) is 2 * C0 - C0 % W            # no fewer terms: kept


def test_recombine_digits_symbolic():
    """``a*((x // a) % b) + x % a -> x % (a*b)``: two digits of ``x`` are one remainder."""
    b = {"tb_c0": N * H * W}
    assert simplify(W * ((C0 // W) % H) + C0 % W, b) is C0 % (H * W)
    assert simplify(2 * W * ((C0 // W) % H) + 2 * (C0 % W) + N, b) is 2 * (C0 % (H * W)) + N
    assert simplify(4 * ((C0 // 4) % W) + C0 % 4, {"tb_c0": N * W * 4}) is C0 % (4 * W)
    # three digits: the reshape [N*H*W] -> [N, H, W] and back
    flat = H * W * (C0 // (H * W)) + W * ((C0 // W) % H) + C0 % W
    assert simplify(flat, b) is C0
    # kept: W, H may be 0; mismatched coefficients; both literal (see _r_recombine_mod)
    e = W * ((C0 // W) % H) + C0 % W
    assert simplify(e, {"tb_c0": N}) is e
    e = 2 * W * ((C0 // W) % H) + C0 % W
    assert simplify(e, b) is e
    e = 4 * ((C0 // 4) % 3) + C0 % 4
    assert simplify(e, {"tb_c0": lit(50)}) is e


def test_div_of_div_symbolic():
    b = {"tb_c0": N * H * W}
    assert simplify((C0 // W) // H, b) is C0 // (H * W)
    assert simplify((C0 // W + 1) // H, b) is (C0 + W) // (H * W)
    assert simplify((C0 // 4) // 3, {"tb_c0": lit(50)}) is C0 // 12
    e = (C0 // W) // H
    assert simplify(e, {"tb_c0": N}) is e


def test_drop_small_symbolic():
    """``(g*x + s) // (g*d) -> x // d`` and ``% -> g*(x % d) + s`` for ``0 <= s < g``, with ``g``
    a literal or a monomial over runtime dims."""
    b = {"tb_c0": H * W, "tb_c1": lit(4)}
    assert simplify((4 * C0 + C1) // (4 * W), b) is C0 // W
    assert simplify((4 * C0 + C1) % (4 * W), b) is 4 * (C0 % W) + C1
    b = {"tb_c0": lit(5), "tb_c1": H * W}
    assert simplify((H * W * C0 + C1) // (2 * H * W), b) is C0 // 2
    assert simplify((H * W * C0 + C1) % (2 * H * W), b) is H * W * (C0 % 2) + C1
    assert simplify((W * C0) // (W * H), {"tb_c0": N, "tb_c1": H * W}) is C0 // H
    # kept: s may reach g; g may be 0
    e = (4 * C0 + C1) // (4 * W)
    assert simplify(e, {"tb_c0": H * W, "tb_c1": lit(5)}) is e
    e = (H * W * C0 + C1) // (2 * H * W)
    assert simplify(e, {"tb_c0": lit(5), "tb_c1": N}) is e


def test_channel_shuffle_symbolic():
    """ShuffleNet's channel shuffle on a ``[N, 4, H, W]`` tensor (``view(N, 2, 2, H, W)``,
    ``transpose(1, 2)``, ``reshape``) followed by ``permute(0, 2, 3, 1).reshape(N, H*W, 4)``:
    the input offset, as kgen composes it, needs no ``//``/``%`` beyond the output coordinates'."""
    b = {"tb_c0": N, "tb_c1": H * W, "tb_c2": lit(4)}
    nhwc = 4 * C1 + C2                                    # (h*W + w)*4 + c
    h, w, c = (nhwc // (4 * W)) % H, (nhwc // 4) % W, nhwc % 4
    ch = (c % 2) * 2 + c // 2                             # the shuffled channel
    src = ((C0 * 4 + ch) * H + h) * W + w
    got = simplify(src, b)
    assert got is C0 * 4 * H * W + (2 * C2 - 3 * (C2 // 2)) * H * W + C1
    for n, hh, ww in [(1, 1, 1), (2, 2, 3), (1, 3, 2)]:
        env = {"tb_n": n, "tb_h": hh, "tb_w": ww}
        for c0, c1, c2 in itertools.product(range(n), range(hh * ww), range(4)):
            env.update(tb_c0=c0, tb_c1=c1, tb_c2=c2)
            assert got.evaluate(env) == src.evaluate(env)


# random soundness of the symbolic-divisor rules: every pattern the rules target, over random
# divisors (literal, runtime dims, products, sums, quotients), coordinates whose bounds may or may
# not witness the divisors positive, and every dim value from 1 up (divisor 1, coordinate 0)

SYM_DIMS = {"N": N, "W": W, "H": H}
sym_divisors = st.one_of(
    st.integers(1, 4).map(lit), st.sampled_from(list(SYM_DIMS.values())),
    st.sampled_from([N * W, H * W, W + 1, (H + 1) // 2, 2 * W]))
sym_bounds = st.one_of(
    st.integers(1, 6).map(lit),
    st.sampled_from([N, W, H * W, N * W * H, 4 * H * W, W + 1, N - 1 + W, (H + 1) // 2 * W]))
SYM_DIM_VALUES = [(1, 1, 1), (1, 2, 3), (2, 1, 2), (3, 3, 1), (2, 3, 2)]


def _sym_pattern(kind, a, d, k, x, y):
    """The rule shapes: ``a``, ``d`` divisors, ``k`` a coefficient, ``x``, ``y`` index
    expressions over the coordinates."""
    return {
        "mod_bound": (x % a) // a + (x % a) % (a + d) + (x // a) % d,
        "quotient": a * (x // a) - x + (x - x % a) * k + y,
        "digits": k * a * ((x // a) % d) + k * (x % a) + y,
        "digits3": a * d * (x // (a * d)) + a * ((x // a) % d) + x % a,
        "div_of_div": (x // a) // d + (x // a + y) // d,
        "drop_small": (a * x * k + y) // (a * d) + (a * x * k + y) % (a * d),
        "in_range": y // a + y % a + x // (a * d) + x % (a * d),
    }[kind]


@SETTINGS
@given(st.sampled_from(["mod_bound", "quotient", "digits", "digits3", "div_of_div",
                        "drop_small", "in_range"]),
       sym_divisors, sym_divisors, st.integers(-2, 3).filter(bool), sym_bounds, sym_bounds,
       st.sampled_from(["c0", "c0+c1", "2*c0+1", "c0-c1"]), st.sampled_from(["c1", "0", "c1+1"]))
def test_symbolic_divisor_rules_preserve_value(kind, a, d, k, tb0, tb1, tx, ty):
    x = {"c0": C0, "c0+c1": C0 + C1, "2*c0+1": 2 * C0 + 1, "c0-c1": C0 - C1}[tx]
    y = {"c1": C1, "0": lit(0), "c1+1": C1 + 1}[ty]
    e = _sym_pattern(kind, a, d, k, x, y)
    b = {"tb_c0": tb0, "tb_c1": tb1}
    s = simplify(e, b)
    assert s.free_vars <= e.free_vars
    for n, w, h in SYM_DIM_VALUES:
        env = {"tb_n": n, "tb_w": w, "tb_h": h}
        for c0, c1 in itertools.product(range(tb0.evaluate(env)), range(tb1.evaluate(env))):
            env["tb_c0"], env["tb_c1"] = c0, c1
            assert s.evaluate(env) == e.evaluate(env), (e, s, env)


@SETTINGS
@given(sym_divisors, sym_divisors, sym_bounds, st.integers(0, 3))
def test_symbolic_extremes_are_sound(a, d, tb0, shift):
    """``upper``/``lower`` of remainders and quotients by symbolic divisors bound every value."""
    b = {"tb_c0": tb0}
    for e in (C0 % a, (C0 - shift) // a, (C0 // a) % d, (C0 % a) * d + C0 // (a * d)):
        lo, hi = lower(e, b), upper(e, b)
        for n, w, h in SYM_DIM_VALUES:
            env = {"tb_n": n, "tb_w": w, "tb_h": h}
            vals = [e.evaluate(dict(env, tb_c0=c)) for c in range(tb0.evaluate(env))]
            if lo is not None and vals:
                assert lo.evaluate(env) <= min(vals), (e, lo, env)
            if hi is not None and vals:
                assert hi.evaluate(env) >= max(vals), (e, hi, env)
