"""Interned dimension expressions: interning, canonical form, evaluation, subs, div/mod, pickling.

Random expression trees are plain tuples (``("+", a, b)``, ``("//", a, d)``, a variable name or an
int) so that the same tree can be built as an ``Expr``, evaluated with Python integers and
evaluated through sympy independently.
"""

from __future__ import annotations

import gc
import pickle
import subprocess
import sys
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlcb_lab.dims import FloorDiv, Lit, Mod, Prod, Shape, Sum, Var, as_expr, lit, prod, shape, var
from dlcb_lab.dims import expr as expr_mod

from trees import fold

# Names are global per process: this file uses the ``tx_`` prefix only.
A, B, C = var("tx_a"), var("tx_b"), var("tx_c")     # values >= 0
P = var("tx_p")                                       # values >= 1 (usable as a divisor)
VARS = {v.name: v for v in (A, B, C, P)}
NONNEG = ["tx_a", "tx_b", "tx_c"]

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- random trees -----------------------------------------------------------------------------

divisors = st.one_of(
    st.integers(1, 7),
    st.just("tx_p"),
    st.tuples(st.just("+"), st.sampled_from(NONNEG), st.integers(1, 3)),
    st.tuples(st.just("*"), st.just("tx_p"), st.integers(1, 4)),
    st.tuples(st.just("+"), st.just("tx_p"), st.sampled_from(NONNEG)),
)

leaves = st.one_of(st.sampled_from(sorted(VARS)), st.integers(-4, 6))


def _extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(["+", "-", "*"]), children, children),
        st.tuples(st.sampled_from(["//", "%"]), children, divisors),
    )


trees = st.recursive(leaves, _extend, max_leaves=10)
envs = st.fixed_dictionaries({"tx_a": st.integers(0, 9), "tx_b": st.integers(0, 9),
                              "tx_c": st.integers(0, 9), "tx_p": st.integers(1, 9)})



def build(t):
    """The tree as an Expr (int leaves stay Python ints, exercising the reflected operators)."""
    return fold(t, VARS)


def E(t):
    return as_expr(build(t))


def pyval(t, env):
    return fold(t, env)


def mirror(t):
    """Same value, operands of + and * swapped everywhere."""
    if isinstance(t, (int, str)):
        return t
    op, x, y = t
    if op in "+*":
        return (op, mirror(y), mirror(x))
    return (op, mirror(x), mirror(y))


def nodes(e):
    out, stack = [], [e]
    while stack:
        x = stack.pop()
        out.append(x)
        stack.extend(x.children())
    return out


def structural_free(e) -> frozenset:
    """Oracle for ``free_vars`` from the node structure alone."""
    if isinstance(e, Var):
        return frozenset([e.name])
    if isinstance(e, Lit):
        return frozenset()
    return frozenset().union(*(structural_free(c) for c in e.children()))


# --- interning ----------------------------------------------------------------------------------

def test_interning_basic():
    assert lit(3) is lit(3) is as_expr(3)
    assert var("tx_a") is A
    import numpy as np

    assert as_expr(np.int64(3)) is lit(3)
    assert A + B is B + A
    assert A * B * C is C * (B * A)
    assert shape([A, 2]) is shape((A, lit(2)))
    assert shape([A, 2]) is not shape([2, A])
    assert (A + 1) // 2 is (1 + A) // 2
    assert hash(A * B + 1) == hash(1 + B * A)
    with pytest.raises(ValueError):
        var("tx_a", 2)  # one variable per name and rank


def test_intern_table_is_weak():
    """Nodes nobody holds leave the intern table; rebuilding them gives an equal node (same repr
    and hash), interned again; a node still held stays the one the table returns."""
    kept = (A * 7 + 1) // (B + 3)
    gc.collect()
    before = len(expr_mod._TABLE)

    def build():
        xs = [var(f"tx_weak{i}") for i in range(200)]
        es = [(x * 7 + i) // (x + 3) + x % 5 * A for i, x in enumerate(xs)]
        assert len(expr_mod._TABLE) > before + 1000
        return repr(es[17]), hash(es[17]), weakref.ref(es[17])

    text, h, ref = build()
    gc.collect()
    assert ref() is None
    assert len(expr_mod._TABLE) <= before + 5
    assert var("tx_weak17", 2).rank == 2   # a dead name may come back with another rank
    x = var("tx_weak17")
    with pytest.raises(ValueError):
        var("tx_weak17", 2)
    e = (x * 7 + 17) // (x + 3) + x % 5 * A
    assert repr(e) == text and hash(e) == h and e is (17 + 7 * x) // (3 + x) + A * (x % 5)
    assert (A * 7 + 1) // (B + 3) is kept


@SETTINGS
@given(trees)
def test_interning_same_tree_twice(t):
    e1, e2 = E(t), E(t)
    assert e1 is e2
    assert hash(e1) == hash(e2) == e1._hash
    # a node is also reachable through the intern table from a dict keyed on structure
    d = {e1: 1}
    assert d[E(t)] == 1


@SETTINGS
@given(trees)
def test_canonical_commutativity(t):
    assert E(t) is E(mirror(t))


@SETTINGS
@given(trees, trees, trees)
def test_canonical_ring_laws(t1, t2, t3):
    x, y, z = E(t1), E(t2), E(t3)
    assert (x + y) + z is x + (y + z)
    assert (x * y) * z is x * (y * z)
    assert x * (y + z) is x * y + x * z
    assert (x + y) * (x - y) is x * x - y * y
    assert x - y is x + (-1) * y
    assert (x + y) - y is x
    assert x - x is lit(0)
    assert x + 0 is x and x * 1 is x and 1 * x is x
    assert x * 0 is lit(0)
    assert 3 * x is x + x + x


def test_canonical_shape_of_nodes():
    # bare atoms/products are never wrapped; a single coefficient-1 term is the term itself
    assert (A + B) - B is A
    assert isinstance(A * B, Prod)
    assert isinstance(2 * A, Sum) and (2 * A).terms == ((A, 2),) and (2 * A).const == 0
    s = 1 + B * 2 + A * A + A
    assert isinstance(s, Sum) and s.const == 1
    assert [m for m, _ in s.terms] == sorted((m for m, _ in s.terms), key=lambda m: m.sort_key)
    assert all(c != 0 for _, c in s.terms)
    assert prod([]) is lit(1) and prod([A, 2, B]) is 2 * A * B


@SETTINGS
@given(trees)
def test_canonical_invariants(t):
    """Every Sum is sorted, has non-zero coefficients and is not a bare term; Prods have >= 2
    atom factors, sorted."""
    for n in nodes(E(t)):
        if isinstance(n, Sum):
            keys = [m.sort_key for m, _ in n.terms]
            assert keys == sorted(keys) and len(set(keys)) == len(keys)
            assert all(c != 0 for _, c in n.terms)
            assert not (n.const == 0 and len(n.terms) == 1 and n.terms[0][1] == 1)
            assert all(not isinstance(m, (Sum, Lit)) for m, _ in n.terms)
        elif isinstance(n, Prod):
            assert len(n.factors) >= 2
            assert all(isinstance(f, (Var, FloorDiv, Mod)) for f in n.factors)
            keys = [f.sort_key for f in n.factors]
            assert keys == sorted(keys)


# --- evaluation ---------------------------------------------------------------------------------

@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, envs)
def test_evaluate_matches_python_and_sympy(t, env):
    e = E(t)
    want = pyval(t, env)
    assert e.evaluate(env) == want
    import sympy

    # Built unevaluated and folded bottom-up by xreplace: sympy 1.14 rewrites
    # Mod(a*Mod(c, a + 1), 3) to Mod(a*Mod(c, a + 1)**2, 3) (wrong) when it evaluates eagerly.
    with sympy.evaluate(False):
        sy = e.to_sympy()
    sy = sy.xreplace({sympy.Symbol(k, integer=True, nonnegative=True): sympy.Integer(v)
                      for k, v in env.items()})
    assert sy.is_Integer and int(sy) == want


@SETTINGS
@given(trees, envs)
def test_free_vars(t, env):
    e = E(t)
    assert e.free_vars == structural_free(e)
    for n in nodes(e):
        assert n.free_vars == structural_free(n)
    # evaluation only needs the free variables
    assert e.evaluate({k: env[k] for k in e.free_vars}) == pyval(t, env)
    if e.free_vars:
        missing = sorted(e.free_vars)[0]
        with pytest.raises(KeyError):
            e.evaluate({k: v for k, v in env.items() if k != missing})


def test_free_vars_examples():
    assert (A - A + B).free_vars == {"tx_b"}
    assert ((A * P + B) // P).free_vars == {"tx_a", "tx_b", "tx_p"}
    assert ((A * P) // P).free_vars == {"tx_a"}
    assert shape([A, 3, B * C]).free_vars == {"tx_a", "tx_b", "tx_c"}
    assert lit(7).free_vars == frozenset()


# --- subs ---------------------------------------------------------------------------------------

nonneg_trees = st.recursive(st.one_of(st.sampled_from(sorted(VARS)), st.integers(0, 5)),
                            lambda ch: st.tuples(st.sampled_from(["+", "*"]), ch, ch),
                            max_leaves=4)


@SETTINGS
@given(trees, envs)
def test_subs_literals_is_evaluation(t, env):
    e = E(t)
    r = e.subs({VARS[k]: lit(v) for k, v in env.items()})
    assert isinstance(r, Lit) and r.value == pyval(t, env)


@SETTINGS
@given(trees, envs, nonneg_trees, nonneg_trees)
def test_subs_expressions_agrees_with_evaluation(t, env, ga, gp):
    e = E(t)
    g_a = E(ga)
    g_p = E(gp) + 1  # keeps tx_p >= 1
    r = e.subs({A: g_a, P: g_p})
    env2 = dict(env, tx_a=g_a.evaluate(env), tx_p=g_p.evaluate(env))
    assert r.evaluate(env) == e.evaluate(env2)
    # subs of a variable by itself, and the empty mapping, return the very same node
    assert e.subs({A: A}) is e
    assert e.subs({}) is e
    # substituting the same expression built two ways gives the same node
    assert r is e.subs({A: E(mirror(ga)), P: 1 + E(mirror(gp))})


def test_subs_examples():
    assert ((A * 24 + B) // 24).subs({B: lit(30)}) is A + 1
    assert (A * B).subs({A: B + 1}) is B * B + B
    assert shape([A, B]).subs({A: lit(2)}) is shape([2, B])
    assert ((A + B) % P).subs({P: lit(1)}) is lit(0)
    with pytest.raises(ZeroDivisionError):
        (A // P).subs({P: lit(0)})


# --- floor division and modulo ------------------------------------------------------------------

@SETTINGS
@given(trees, st.one_of(st.integers(1, 9), st.just("tx_p"),
                        st.tuples(st.just("*"), st.just("tx_p"), st.integers(2, 3))), envs)
def test_divmod_identity(t, d, env):
    e, de = E(t), E(d)
    q, r = e // de, e % de
    dv = de.evaluate(env)
    ev = e.evaluate(env)
    assert q.evaluate(env) == ev // dv
    assert r.evaluate(env) == ev % dv
    assert (q * de + r).evaluate(env) == ev
    assert 0 <= r.evaluate(env) < dv


@SETTINGS
@given(st.recursive(st.one_of(st.sampled_from(["tx_a", "tx_b", "tx_p"]), st.integers(-5, 5)),
                    lambda ch: st.tuples(st.sampled_from(["+", "-", "*"]), ch, ch),
                    max_leaves=5),
       st.integers(0, 5), st.integers(2, 9))
def test_divmod_splitting_structural(tq, k, d):
    """``(q*d + r) // d -> q + r // d`` and ``(q*d + r) % d -> r % d`` on construction, with ``r``
    a remainder-like term (coefficient in [0, d)) on a variable that ``q`` does not use."""
    q = E(tq)
    rk = k % d
    r = rk * C
    assert (q * d + r) // d is q + r // d
    assert (q * d + r) % d is r % d
    # symbolic monomial divisor
    assert (q * P + C) // P is q + C // P
    assert (q * P + C) % P is C % P
    assert (q * P * d + r) // (P * d) is q + r // (P * d)
    # constants are folded into [0, d)
    assert (C + (q * d + 3 * d + 1)) // d is q + 3 + (C + 1) // d


def test_divmod_examples():
    assert (A * 24 + B) // 24 is A + B // 24
    assert (A * 24 + B) % 24 is B % 24
    assert (A * 24 + 30) // 24 is A + 1
    assert (A * 24 + 30) % 24 is lit(6)
    assert (A * P + B) // P is A + B // P
    assert (A * B * P) // (B * P) is A
    assert (A * P) % P is lit(0)
    assert A // 1 is A and A % 1 is lit(0)
    assert P // P is lit(1) and P % P is lit(0)
    assert lit(-7) // 2 is lit(-4) and lit(-7) % 2 is lit(1)
    assert (A - 1) // 2 is -1 + (A + 1) // 2
    assert isinstance(A // P, FloorDiv) and isinstance(A % P, Mod)
    assert 0 // P is lit(0) and 0 % P is lit(0)
    with pytest.raises(ZeroDivisionError):
        A // 0
    with pytest.raises(ZeroDivisionError):
        A % -3
    with pytest.raises(ZeroDivisionError):
        (A // P).evaluate({"tx_a": 3, "tx_p": 0})
    with pytest.raises(TypeError):
        shape([A]) + 1
    with pytest.raises(TypeError):
        shape([A]) // 2
    with pytest.raises(TypeError):
        as_expr(2.5)


# --- pickling -----------------------------------------------------------------------------------

@SETTINGS
@given(trees)
def test_pickle_roundtrip_is_same_object(t):
    e = E(t)
    for proto in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(e, protocol=proto))
        assert back is e
        assert hash(back) == hash(e)
    s = shape([e, A, 3])
    assert pickle.loads(pickle.dumps(s)) is s


def test_pickle_in_fresh_process():
    """Unpickling in a process where none of the nodes exist re-interns them (same repr, same
    values, ranks kept)."""
    internal = var("tx_internal", 0)
    e = shape([((A * 24 + B) // 7) % P + internal * C - 3, A * B])
    code = (
        "import pickle, sys\n"
        "from dlcb_lab.dims import var\n"
        "e = pickle.loads(sys.stdin.buffer.read())\n"
        "assert pickle.loads(pickle.dumps(e)) is e\n"
        "print(repr(e)); print(var('tx_internal', 0).rank)\n"
        "print(e.evaluate({'tx_a': 5, 'tx_b': 9, 'tx_c': 2, 'tx_p': 4, 'tx_internal': 3}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(e),
                         capture_output=True, check=True).stdout.decode().splitlines()
    env = {"tx_a": 5, "tx_b": 9, "tx_c": 2, "tx_p": 4, "tx_internal": 3}
    assert out == [repr(e), "0", repr(e.evaluate(env))]


# --- shapes -------------------------------------------------------------------------------------

def test_shape_node():
    s = shape([A, 4, B * 2])
    assert isinstance(s, Shape) and len(s) == 3 and s[1] is lit(4) and list(s) == [A, lit(4), 2 * B]
    assert s.numel() is 8 * A * B
    assert s.evaluate({"tx_a": 2, "tx_b": 3}) == (2, 4, 6)
    assert shape([]).numel() is lit(1)


# --- flat_quotients: one key for nested and merged quotients ---------------------------------------

def test_flat_quotients_meets_the_nested_and_the_merged_spelling():
    nested = ((((A + 1) // 2) + 1) // 2 + 1) // 2    # three stride-2 layers' output sizes
    assert expr_mod.flat_quotients(nested) is (A + 7) // 8
    assert expr_mod.flat_quotients((A - 1) // 8 + 1) is (A + 7) // 8   # export's spelling
    assert expr_mod.flat_quotients(A // P + 1) is A // P + 1             # symbolic: kept
    assert expr_mod.flat_quotients(2 * (A // 2) + B) is 2 * (A // 2) + B   # coefficient 2: kept


@SETTINGS
@given(trees, envs)
def test_flat_quotients_keeps_the_value(t, env):
    e = E(t)
    try:
        want = e.evaluate(env)
    except (ZeroDivisionError, ValueError):
        return
    assert expr_mod.flat_quotients(e).evaluate(env) == want


def test_rounded_up_spells_a_pad_to_a_multiple_as_one():
    pad7, w = (7 - A % 7) % 7, A // 4
    assert expr_mod.rounded_up(A + pad7) is 7 * ((A + 6) // 7)
    assert expr_mod.rounded_up(A + (-A) % 7) is 7 * ((A + 6) // 7)     # export's (-h) % 7
    assert expr_mod.rounded_up((A + pad7) // 7) is (A + 6) // 7        # a window count
    assert expr_mod.rounded_up(w + w % 2) is 2 * ((w + 1) // 2)        # patch merging's H % 2
    assert expr_mod.rounded_up(B + pad7) is B + pad7                   # another size's pad
    assert expr_mod.rounded_up(A + 3 + pad7) is 7 * ((A + 6) // 7) + 3
    for a in range(40):
        for e in (A + pad7, w + w % 2, (A + pad7) // 7 + B * (A % 3)):
            env = {"tx_a": a, "tx_b": 3}
            assert expr_mod.rounded_up(e).evaluate(env) == e.evaluate(env)
