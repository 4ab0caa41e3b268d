"""One before/after example per rewrite rule, for every rule list: the solver's ``RULES``,
``expr.DIVMOD_RULES`` (applied when a ``//``/``%`` is built) and ``bounds.BOUNDS_RULES`` (applied by
``simplify``). A rule added to a list without an example here fails ``test_every_rule_has_an_example``.

Each example also checks that its rule is the first applicable one of its list (so the priority
order is pinned), and div/mod examples are checked against concrete evaluation.
"""

from __future__ import annotations

import itertools

import pytest

from dlcb_lab.dims import RULES, FloorDiv, Mod, lit, shape, var
from dlcb_lab.dims.bounds import BOUNDS_RULES
from dlcb_lab.dims.expr import DIVMOD_RULES
from dlcb_lab.dims.solver import Bind, Drop, Fail, Replace, RuleContext

# Names are global per process: this file uses the ``tr_`` prefix only.
A, B, C = var("tr_a"), var("tr_b"), var("tr_c")
P = var("tr_p")                       # >= 1 where it divides
N, R = var("tr_n"), var("tr_r", 0)    # R internal (rank 0)
C1 = var("tr_c1", 2)                  # a coordinate


def ctx(subst=None, seen=("tr_a", "tr_b", "tr_c", "tr_p", "tr_n", "tr_r")) -> RuleContext:
    subst = dict(subst or {})
    return RuleContext(subst, {v.name: v for v in subst}, {n: i for i, n in enumerate(seen)})


# --- solver rules: name -> [(ctx, lhs, rhs, outcome)] ------------------------------------------

SOLVER_EXAMPLES = {
    "substitute": [
        (ctx({A: B + 1}), A * 2, C, Replace(((2 * B + 2, C),), used=frozenset({A}))),
        (ctx({P: lit(0)}), A // P, B, Fail),                       # a solved divisor is 0
        (ctx({A: B + 1}), B, C, None),
    ],
    "trivial": [(ctx(), A + 1, 1 + A, Drop()), (ctx(), A, B, None)],
    "literal": [(ctx(), lit(3), lit(4), Fail)],
    "unpack_list": [
        (ctx(), shape([A, 2]), shape([B, 3]),
         Replace(((A, B), (lit(2), lit(3))), ("axis 0", "axis 1"))),
        (ctx(), shape([A]), A, Fail),                                # rank mismatch
        (ctx(), shape([A]), shape([A, B]), Fail),
    ],
    "cancel_common_factor": [
        (ctx(), 6 * A + 4, 2 * B, Replace(((3 * A + 2, B),))),
        (ctx(), 4 * A + 2, 4 * B + 5, Fail),                        # 4 does not divide 3
        (ctx(), 24 * A, 24 * B, Replace(((A, B),))),
    ],
    "collect": [
        (ctx(), A + 3, B + 5, Replace(((A, B + 2),))),
        (ctx(), A - B, lit(0), Replace(((A, B),))),
        (ctx(), A, B + 2, None),                                     # already collected
    ],
    "solve": [
        (ctx(), A, B + 1, Bind(B, A - 1)),                           # newest among equals
        (ctx(seen=("tr_b", "tr_a")), A, B + 1, Bind(A, B + 1)),
        (ctx(), A * B * 4, R * 5, Bind(R, (4 * A * B) // 5, ((4 * A * B) % 5,))),
        (ctx(), 2 * A, 3 * B, None),                                 # user dims: exact only
        # polynomial divisor (rank 0): sign normalized, host-checked side condition
        (ctx(), N * 6, (N + 1) * R, Bind(R, (6 * N) // (N + 1), ((6 * N) % (N + 1),))),
        (ctx(), 4 * A * A * R + R, 4 * A * R + 1,                 # leading: highest degree
         Bind(R, 1 // (4 * A * A - 4 * A + 1), (1 % (4 * A * A - 4 * A + 1),))),
        (ctx(), (N % 3 + 1) * R, 6 * N,
         Bind(R, (6 * N) // (N % 3 + 1), ((6 * N) % (N % 3 + 1),))),
        # exact division by a polynomial provably >= 1 solves a user dim
        (ctx(), A * (N + 1), N + 1, Bind(A, lit(1))),
        # B*(A - 1) == 0 would give B := 0 with nothing checking A != 1: A := B // B instead
        (ctx(), B, A * B, Bind(A, lit(1))),
        (ctx(), C1, 2 * var("tr_c2", 2), None),                      # coordinates never
    ],
}


def _first(rules, *args):
    for name, _, fn in rules:
        out = fn(*args)
        if out is not None:
            return name, out
    return None, None


@pytest.mark.parametrize("name, ex", [(n, ex) for n, exs in SOLVER_EXAMPLES.items()
                                      for ex in exs])
def test_solver_rule_example(name, ex):
    c, lhs, rhs, want = ex
    fn = {n: f for n, _, f in RULES}[name]
    got = fn(c, lhs, rhs)
    if want is Fail:
        assert isinstance(got, Fail), got
    else:
        assert got == want, (got, want)
    if got is not None:
        assert _first(RULES, c, lhs, rhs)[0] == name
        assert got.render()


# --- div/mod rules: name -> [(kind, num, den, result)] ------------------------------------------

DIVMOD_EXAMPLES = {
    "den_one": [(FloorDiv, A + B, lit(1), A + B), (Mod, A * B, lit(1), lit(0))],
    "fold_literals": [(FloorDiv, lit(-7), lit(2), lit(-4)), (Mod, lit(-7), lit(2), lit(1))],
    "zero_numerator": [(FloorDiv, lit(0), P, lit(0)), (Mod, lit(0), P + 1, lit(0))],
    "self": [(FloorDiv, A + P, A + P, lit(1)), (Mod, P, P, lit(0))],
    "mod_of_mod": [(Mod, A % 12, lit(4), A % 4), (Mod, A % (6 * P), 3 * P, A % (3 * P)),
                   (Mod, A % 10, lit(4), None)],
    "split_div": [(FloorDiv, A * 24 + B, lit(24), A + B // 24),
                  (FloorDiv, A + 7, lit(3), 2 + (A + 1) // 3),
                  (FloorDiv, A * B * P + C, B * P, A + C // (B * P)),
                  (FloorDiv, A * 24 + 30, lit(24), A + 1)],
    "split_mod": [(Mod, A * 24 + B, lit(24), B % 24), (Mod, A * P + B, P, B % P),
                  (Mod, A * 24 + 30, lit(24), lit(6)), (Mod, A + B, P, None)],
    "common_factor": [(FloorDiv, A * 8 + 4, lit(32), (2 * A + 1) // 8),
                      (Mod, A * 8 + B * 4, lit(24), ((2 * A + B) % 6) * 4),
                      (FloorDiv, A * 6, P * 4, (A * 3) // (P * 2)),
                      (Mod, A * 8 + 3, lit(32), None)],
}

ENVS = [dict(zip(("tr_a", "tr_b", "tr_c", "tr_p"), vals))
        for vals in itertools.product((0, 1, 5, 13), (0, 2, 7), (0, 3), (1, 2, 4))]


@pytest.mark.parametrize("name, ex", [(n, ex) for n, exs in DIVMOD_EXAMPLES.items()
                                      for ex in exs])
def test_divmod_rule_example(name, ex):
    kind, num, den, want = ex
    fn = {n: f for n, _, f in DIVMOD_RULES}[name]
    got = fn(kind, num, den)
    assert got is want, (got, want)
    if want is None:
        return
    assert _first(DIVMOD_RULES, kind, num, den)[0] == name
    built = num // den if kind is FloorDiv else num % den
    assert built is want                     # construction applies the rules
    for env in ENVS:
        n, d = num.evaluate(env), den.evaluate(env)
        if d <= 0:
            continue
        assert want.evaluate(env) == (n // d if kind is FloorDiv else n % d), env


# --- bounds rules: name -> [(expr, bounds, result)] ---------------------------------------------

BOUNDS_EXAMPLES = {
    "div_in_range": [(C1 // 24, {"tr_c1": lit(24)}, lit(0)),
                     (C1 // 24, {"tr_c1": lit(25)}, None),
                     (C1 // N, {"tr_c1": N}, lit(0))],
    "mod_in_range": [(C1 % 24, {"tr_c1": lit(24)}, C1), (C1 % N, {"tr_c1": N + 1}, None)],
    "drop_small": [((16 * N + C1) // 256, {"tr_c1": lit(16)}, (16 * N) // 256),
                   ((16 * N + C1) % 256, {"tr_c1": lit(16)}, (16 * N) % 256 + C1),
                   ((16 * N + C1) // 256, {"tr_c1": lit(17)}, None),
                   ((12 * N + C1) // 8, {"tr_c1": lit(4)}, (12 * N) // 8),
                   ((2 * N + 1) // 8, {"tr_c1": lit(1)}, N // 4),          # the constant
                   ((2 * N + 1) % 8, {"tr_c1": lit(1)}, 2 * (N % 4) + 1),
                   ((2 * N + 3) // 8, {"tr_c1": lit(1)}, None)],           # 3 >= 2
    "drop_small_symbolic": [((4 * C1 + 3) // (4 * N), {"tr_c1": 2 * N}, C1 // N),
                            ((4 * C1 + 3) % (4 * N), {"tr_c1": 2 * N}, 4 * (C1 % N) + 3),
                            ((4 * C1 + 5) // (4 * N), {"tr_c1": 2 * N}, None),   # 5 >= 4
                            ((4 * C1 + 3) // (4 * N), {"tr_c1": lit(9)}, None)],  # N may be 0
    "div_of_div": [((C1 // N) // 3, {"tr_c1": 6 * N}, C1 // (3 * N)),
                   ((C1 // N + 1) // 3, {"tr_c1": 6 * N}, (C1 + N) // (3 * N)),
                   ((C1 // N) // 3, {"tr_c1": lit(30)}, None)],
    "recombine_mod": [(N * ((C1 // N) % 3) + C1 % N, {"tr_c1": 6 * N}, C1 % (3 * N)),
                      (N * ((C1 // N) % 3) + C1 % N, {"tr_c1": lit(30)}, None),
                      (4 * ((C1 // 4) % 3) + C1 % 4, {"tr_c1": lit(30)}, None)],   # literal
    "recombine": [(6 * (C1 // 6) + C1 % 6, {}, C1),
                  (12 * (C1 // 6) + 2 * (C1 % 6) + N, {}, 2 * C1 + N),
                  (5 * (C1 // 6) + C1 % 6, {}, C1 - C1 // 6),
                  (5 * (C1 // 6) + C1 % 7, {}, None),
                  (C1 - C1 % N, {"tr_c1": 2 * N}, N * (C1 // N)),       # the quotient form
                  (N * (C1 // N), {"tr_c1": 2 * N}, None),
                  (N * (C1 // N) - C1, {"tr_c1": 2 * N}, -(C1 % N)),
                  (C1 - C1 % N, {"tr_c1": lit(30)}, None),              # N may be 0
                  (512 * N * (C1 // 512) + N * (C1 % 512), {"tr_c1": lit(1000)}, N * C1)],
}


@pytest.mark.parametrize("name, ex", [(n, ex) for n, exs in BOUNDS_EXAMPLES.items()
                                      for ex in exs])
def test_bounds_rule_example(name, ex):
    e, b, want = ex
    fn = {n: f for n, _, f in BOUNDS_RULES}[name]
    got = fn(e, b)
    assert got is want, (got, want)
    if want is None:
        return
    assert _first(BOUNDS_RULES, e, b)[0] == name
    hi = {"tr_c1": 30}
    for n in (1, 3, 7):
        for c1 in range(b["tr_c1"].evaluate({"tr_n": n}) if b else hi["tr_c1"]):
            env = {"tr_c1": c1, "tr_n": n}
            assert want.evaluate(env) == e.evaluate(env), env


# --- the lists themselves -----------------------------------------------------------------------

LISTS = {"RULES": (RULES, SOLVER_EXAMPLES), "DIVMOD_RULES": (DIVMOD_RULES, DIVMOD_EXAMPLES),
         "BOUNDS_RULES": (BOUNDS_RULES, BOUNDS_EXAMPLES)}


@pytest.mark.parametrize("list_name, rule", [(ln, r[0]) for ln, (rules, _) in LISTS.items()
                                             for r in rules])
def test_every_rule_has_an_example(list_name, rule):
    rules, examples = LISTS[list_name]
    assert any(ex[-1] is not None for ex in examples.get(rule, ())), \
        f"{list_name} rule {rule!r} has no before/after example"


@pytest.mark.parametrize("list_name", sorted(LISTS))
def test_rule_entries(list_name):
    """``(name, comment, fn)``: unique names, a one-line ``before  ->  after`` comment."""
    rules, examples = LISTS[list_name]
    names = [r[0] for r in rules]
    assert len(names) == len(set(names))
    assert set(examples) <= set(names), set(examples) - set(names)
    for name, comment, fn in rules:
        assert "  ->  " in comment and "\n" not in comment and callable(fn), name
