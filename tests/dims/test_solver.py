"""The fixed-point dimension solver: planted random systems of the kinds conv / pool / reshape /
broadcast produce, an exact oracle for the literal/equality fragment, sympy agreement, contradiction
explanations, idempotence and the trace.

Variable names are global per process (a name denotes one variable of one rank), so every example
materializes fresh ``ts_*`` names from a counter.
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import itertools
import math
import pickle
import weakref
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dlcb_lab.dims import (RULES, Contradiction, DimKind, FloorDiv, Lit, Provenance, Shape,
                           ShapeError, Solution, Solver, SolverTrace, TraceRecord, Var, lit, prod,
                           shape, solve, var)
from dlcb_lab.dims.solver import Bind, Replace

_counter = itertools.count()


def fresh(prefix: str, rank: int = 1) -> Var:
    return var(f"ts_{prefix}{next(_counter)}", rank)


SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])

PLANT_VALUES = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24]
LITS = [1, 2, 3, 4, 6, 8, 12, 24]
CONV_PARAMS = [(p, d, k, s) for p in range(3) for d in (1, 2) for k in (1, 2, 3) for s in (1, 2, 3)]


def conv_value(h: int, params) -> int:
    p, d, k, s = params
    return (h + 2 * p - d * (k - 1) - 1) // s + 1


def conv_expr(h, params):
    p, d, k, s = params
    return (h + 2 * p - d * (k - 1) - 1) // s + 1


# --- planted systems -----------------------------------------------------------------------------
# Items are ("d", i) user dim i, ("l", v) literal v, ("m", j) the -1 of the j-th reshape (rank 0),
# ("p", j) the output height of the j-th conv (rank 1). The strategy knows every item's planted
# value, so every generated system is satisfiable by construction.

@st.composite
def planted_systems(draw, with_conv: bool = True):
    k = draw(st.integers(2, 5))
    plant = draw(st.lists(st.sampled_from(PLANT_VALUES), min_size=k, max_size=k))
    values = {("d", i): plant[i] for i in range(k)}
    n_m = n_p = 0
    symbolic = draw(st.booleans())  # avoid pinning dims to literals: residuals, symbolic bindings

    def item_with_value(v):
        same = [it for it, x in values.items() if x == v]
        if same and (symbolic or draw(st.integers(0, 3))):
            return draw(st.sampled_from(same))
        return ("l", v)

    def any_item():  # a positive item (conv outputs may be <= 0)
        if draw(st.booleans()):
            return draw(st.sampled_from(sorted(it for it, x in values.items() if x > 0)))
        return ("l", draw(st.sampled_from(LITS)))

    kinds = ["eq", "shape", "reshape", "reshape", "linear", "linear", "mref"]
    if not symbolic:
        kinds += ["lit"]
    if with_conv:
        kinds += ["conv", "conv", "convdef"]
    specs = []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(kinds))
        if kind == "eq":
            a = draw(st.sampled_from(sorted(values)))
            specs.append(("eq", a, item_with_value(values[a])))
        elif kind == "lit":
            i = draw(st.integers(0, k - 1))
            specs.append(("lit", ("d", i), ("l", plant[i])))
        elif kind == "shape":
            pool = sorted(set(values.values()) | (set() if symbolic else set(LITS)))
            vals = [draw(st.sampled_from(pool)) for _ in range(draw(st.integers(1, 4)))]
            specs.append(("shape", [item_with_value(v) for v in vals],
                          [item_with_value(v) for v in vals]))
        elif kind == "reshape":
            ins = [any_item() for _ in range(draw(st.integers(1, 3)))]
            vin = math.prod(values.get(it, it[1]) for it in ins)
            outs = [any_item() for _ in range(draw(st.integers(0, 2)))]
            vout = math.prod(values.get(it, it[1]) for it in outs)
            if vin % vout:
                outs = [("l", draw(st.sampled_from([x for x in LITS if vin % x == 0])))]
                vout = outs[0][1]
            values[("m", n_m)] = vin // vout
            specs.append(("reshape", ins, outs, n_m))
            n_m += 1
        elif kind == "linear":
            x, y = draw(st.sampled_from(sorted(values))), draw(st.sampled_from(sorted(values)))
            a, c = draw(st.integers(1, 4)), draw(st.integers(1, 4))
            b = draw(st.integers(0, 5))
            diff = a * values[x] + b - c * values[y]
            e = diff if diff >= 0 else 0
            b = b if diff >= 0 else b - diff
            specs.append(("linear", a, x, b, c, y, e))
        elif kind == "mref":
            ms = [it for it in values if it[0] == "m"]
            if ms:
                m = draw(st.sampled_from(ms))
                specs.append(("eq", item_with_value(values[m]), m))
        elif kind == "conv":
            i = draw(st.integers(0, k - 1))
            p1 = draw(st.sampled_from(CONV_PARAMS))
            target = conv_value(plant[i], p1)
            matches = [(j, p2) for j in range(k) for p2 in CONV_PARAMS
                       if conv_value(plant[j], p2) == target]
            j, p2 = draw(st.sampled_from(matches))
            specs.append(("conv", i, p1, j, p2))
        elif kind == "convdef":
            i = draw(st.integers(0, k - 1))
            p1 = draw(st.sampled_from(CONV_PARAMS))
            values[("p", n_p)] = conv_value(plant[i], p1)
            specs.append(("convdef", i, p1, n_p))
            n_p += 1
    order = draw(st.permutations(range(len(specs))))
    return k, values, [specs[i] for i in order]


class System:
    """A spec turned into fresh variables, equations with unique provenance, and planted values."""

    def __init__(self, k, values, specs):
        self.dims = [fresh("d") for _ in range(k)]
        self.ms: dict[int, Var] = {}
        self.ps: dict[int, Var] = {}
        for it in values:
            if it[0] == "m":
                self.ms[it[1]] = fresh("m", 0)
            elif it[0] == "p":
                self.ps[it[1]] = fresh("p")
        self.plant = {self.item(it).name: v for it, v in values.items()}
        self.eqs = []
        uid = next(_counter)
        for n, sp in enumerate(specs):
            lhs, rhs = self.equation(sp)
            self.eqs.append((lhs, rhs, Provenance(sp[0], node=f"n{n}u{uid}", detail="model")))

    def item(self, it):
        kind, x = it
        return {"d": lambda: self.dims[x], "l": lambda: lit(x), "m": lambda: self.ms[x],
                "p": lambda: self.ps[x]}[kind]()

    def equation(self, sp):
        kind = sp[0]
        if kind in ("eq", "lit"):
            return self.item(sp[1]), self.item(sp[2])
        if kind == "shape":
            return shape(self.item(i) for i in sp[1]), shape(self.item(i) for i in sp[2])
        if kind == "reshape":
            _, ins, outs, m = sp
            return prod(self.item(i) for i in ins), self.ms[m] * prod(self.item(i) for i in outs)
        if kind == "linear":
            _, a, x, b, c, y, e = sp
            return a * self.item(x) + b, c * self.item(y) + e
        if kind == "conv":
            _, i, p1, j, p2 = sp
            return conv_expr(self.dims[i], p1), conv_expr(self.dims[j], p2)
        if kind == "convdef":
            _, i, p1, n = sp
            return self.ps[n], conv_expr(self.dims[i], p1)
        raise AssertionError(kind)

    def solve(self):
        s = Solver()
        for lhs, rhs, prov in self.eqs:
            s.add(lhs, rhs, prov)
        return s, s.solution()

    def names(self) -> set[str]:
        out: set[str] = set()
        for lhs, rhs, _ in self.eqs:
            out |= lhs.free_vars | rhs.free_vars
        return out


def holds(lhs, rhs, env) -> bool:
    return lhs.evaluate(env) == rhs.evaluate(env)


def full_env(sol, free_env):
    env = dict(free_env)
    for v, e in sol.subst.items():
        env[v.name] = e.evaluate(free_env)
    return env


def residuals_hold(sol, env) -> bool:
    try:
        return all(r.holds(env) for r in sol.residuals)
    except ZeroDivisionError:
        return False


def check_solution_shape(sol):
    """Triangular substitution; residuals mention no solved variable."""
    solved = {v.name for v in sol.subst}
    for v, e in sol.subst.items():
        assert not (e.free_vars & solved), (v, e)
        assert v.rank < 2
    for r in sol.residuals:
        assert not ((r.lhs.free_vars | r.rhs.free_vars) & solved), r
        assert not isinstance(r.lhs, Shape) and not isinstance(r.rhs, Shape)


def check_lineage(sol):
    """User-added constraints have no parent; every derived one has an older parent, so each
    chain ends at a user-added constraint; ids are unique."""
    by_id = {c.id: c for c in (*sol.constraints, *sol.derived)}
    assert len(by_id) == len(sol.constraints) + len(sol.derived)
    assert all(c.parent is None for c in sol.constraints)
    for c in sol.derived:
        assert c.parent in by_id and c.parent < c.id
        assert sol.origin(c) in sol.constraints
    for r in sol.residuals:
        assert r.id in by_id and by_id[r.id] is r


def check_trace(sol):
    names = {name for name, _, _ in RULES}
    check_lineage(sol)
    by_id = {c.id: c for c in (*sol.constraints, *sol.derived)}
    last = -1
    for n, t in enumerate(sol.trace):
        assert isinstance(t, TraceRecord)
        with pytest.raises(dataclasses.FrozenInstanceError):
            t.rule = "x"
        assert t.step == n
        assert t.rule in names
        c = by_id[t.constraint_id]
        assert t.parent_id == c.parent and t.eq == (c.lhs, c.rhs)
        assert isinstance(t.before, str) and isinstance(t.after, str)
        assert t.t_ns >= last
        last = t.t_ns
    counts = sol.rule_counts()
    assert sum(counts.values()) == len(sol.trace)
    assert all(counts[r] == sum(t.rule == r for t in sol.trace) for r in counts)


def check_idempotent(sol):
    again = solve(sol.residuals)
    assert again.trace == ()
    assert dict(again.subst) == {}
    assert [(r.lhs, r.rhs) for r in again.residuals] == [(r.lhs, r.rhs) for r in sol.residuals]


def sample_values(rng):
    return rng.choice(PLANT_VALUES) if rng.random() < 0.7 else rng.randint(1, 40)


@settings(SETTINGS, max_examples=250)
@given(planted_systems(), st.randoms(use_true_random=False))
def test_planted_systems(spec, rng):
    sys_ = System(*spec)
    solver, sol = sys_.solve()          # (c) satisfiable: must not raise
    check_solution_shape(sol)
    check_trace(sol)                    # (e)
    check_idempotent(sol)               # (d)
    solved = {v.name for v in sol.subst}
    free = sys_.names() - solved
    assert {n for v in sol.subst for n in sol.subst[v].free_vars} <= free
    # no solution is lost: the planted assignment satisfies the bindings and residuals
    plant_free = {n: sys_.plant[n] for n in free}
    assert residuals_hold(sol, plant_free)
    env = full_env(sol, plant_free)
    for v in sol.subst:
        assert env[v.name] == sys_.plant[v.name], (v, sol.subst[v])
    # (a) every solution of the residuals extends to a solution of all constraints
    hits = 0
    for _ in range(40):
        f = {n: sample_values(rng) for n in free}
        if not residuals_hold(sol, f):
            continue
        hits += 1
        env = full_env(sol, f)
        for lhs, rhs, prov in sys_.eqs:
            assert holds(lhs, rhs, env), (prov, lhs, rhs, env, sol)
    event(f"residuals={len(sol.residuals) > 0} sampled solutions={min(hits, 5)}+")
    # classification agrees with the resolved expressions
    for d in sys_.dims:
        r = solver.resolve(d)
        assert r is sol.resolve(d)
        want = (DimKind.LITERAL if isinstance(r, Lit) else DimKind.NAMED if isinstance(r, Var)
                else DimKind.RESIDUAL)
        assert sol.classify(d) is want is solver.classify(d)
        if isinstance(r, Lit):
            assert r.value == sys_.plant[d.name]


# --- sympy agreement ------------------------------------------------------------------------------

@settings(SETTINGS, max_examples=60)
@given(planted_systems(with_conv=False), st.randoms(use_true_random=False))
def test_agrees_with_sympy(spec, rng):
    import sympy

    sys_ = System(*spec)
    _, sol = sys_.solve()
    if not sol.subst:
        return
    plain = {}

    def to_sym(e):  # assumption-free symbols: sympy must not filter rational solutions
        s = e.to_sympy()
        return s.xreplace({x: plain.setdefault(x.name, sympy.Symbol(x.name))
                           for x in s.free_symbols})

    eqs = []
    for lhs, rhs, _ in sys_.eqs:
        pairs = zip(lhs, rhs) if isinstance(lhs, Shape) else [(lhs, rhs)]
        eqs += [to_sym(x) - to_sym(y) for x, y in pairs]
    unknowns = [plain.setdefault(v.name, sympy.Symbol(v.name)) for v in sol.subst]
    try:
        res = sympy.solve(eqs, unknowns, dict=True)
    except NotImplementedError:
        return
    if len(res) != 1:
        return  # none (a constraint on the parameters alone, i.e. a residual) or not unique
    free = sys_.names() - {v.name for v in sol.subst}
    envs = [{n: sys_.plant[n] for n in free}]
    for _ in range(30):
        f = {n: sample_values(rng) for n in free}
        if residuals_hold(sol, f):
            envs.append(f)
    compared = 0
    for v, e in sol.subst.items():
        s = res[0].get(plain[v.name])
        if s is None or s.free_symbols & set(unknowns):
            continue  # not uniquely determined by sympy
        compared += 1
        event(f"compared with sympy: {type(e).__name__}")
        for f in envs:
            want = s.xreplace({plain[n]: sympy.Integer(x) for n, x in f.items() if n in plain})
            assert sympy.Rational(e.evaluate(f)) == want, (v, e, s, f)


# --- the literal / equality fragment: exact oracle --------------------------------------------

@st.composite
def literal_systems(draw):
    k = draw(st.integers(1, 5))
    specs = []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["eq", "lit", "scaled", "shape"]))
        d = lambda: ("d", draw(st.integers(0, k - 1)))  # noqa: E731
        if kind == "eq":
            specs.append(("eq", d(), d()))
        elif kind == "lit":
            specs.append(("eq", d(), ("l", draw(st.integers(1, 4)))))
        elif kind == "scaled":
            specs.append(("scaled", draw(st.integers(1, 3)), d(), draw(st.integers(0, 3)),
                          draw(st.integers(1, 9))))
        else:
            n = draw(st.integers(1, 3))
            side = lambda: [d() if draw(st.booleans()) else ("l", draw(st.integers(1, 4)))  # noqa
                            for _ in range(n)]
            specs.append(("shape", side(), side()))
    return k, specs


def oracle(k, specs):
    """Union-find over dims with required values: the exact consistency of the system, and each
    dim's forced value (None if free)."""
    parent = list(range(k))
    val: dict[int, Fraction] = {}

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    ok = True

    def pin(i, v):
        nonlocal ok
        r = find(i)
        if v.denominator != 1 or val.setdefault(r, v) != v:
            ok = False

    def same(x, y):
        nonlocal ok
        if x[0] == "l" and y[0] == "l":
            ok &= x[1] == y[1]
        elif x[0] == "l" or y[0] == "l":
            dim, l_ = (x, y) if y[0] == "l" else (y, x)
            pin(dim[1], Fraction(l_[1]))
        else:
            a, b = find(x[1]), find(y[1])
            if a != b:
                parent[a] = b
                if a in val:
                    pin(b, val.pop(a))

    for sp in specs:
        if sp[0] == "eq":
            same(sp[1], sp[2])
        elif sp[0] == "scaled":
            _, a, x, b, v = sp
            pin(x[1], Fraction(v - b, a))
        else:
            for x, y in zip(sp[1], sp[2]):
                same(x, y)
    return ok, [val.get(find(i)) for i in range(k)]


def lit_equations(k, specs):
    dims = [fresh("q") for _ in range(k)]
    it = lambda x: dims[x[1]] if x[0] == "d" else lit(x[1])  # noqa: E731
    uid = next(_counter)
    eqs = []
    for n, sp in enumerate(specs):
        if sp[0] == "eq":
            lhs, rhs = it(sp[1]), it(sp[2])
        elif sp[0] == "scaled":
            lhs, rhs = sp[1] * it(sp[2]) + sp[3], lit(sp[4])
        else:
            lhs, rhs = shape(map(it, sp[1])), shape(map(it, sp[2]))
        eqs.append((lhs, rhs, Provenance(sp[0], node=f"n{n}u{uid}")))
    return dims, eqs


def solve_eqs(eqs):
    s = Solver()
    for lhs, rhs, prov in eqs:
        s.add(lhs, rhs, prov)
    return s.solution()


@settings(SETTINGS, max_examples=300)
@given(literal_systems())
def test_literal_systems_against_oracle(spec):
    k, specs = spec
    ok, forced = oracle(k, specs)
    event(f"consistent: {ok}")
    dims, eqs = lit_equations(k, specs)
    if ok:
        sol = solve_eqs(eqs)
        check_trace(sol)
        check_idempotent(sol)
        assert sol.residuals == ()
        for d, v in zip(dims, forced):
            if v is None:
                assert sol.classify(d) is DimKind.NAMED
            else:
                assert sol.resolve(d) is lit(int(v))
        return
    with pytest.raises(Contradiction) as info:
        solve_eqs(eqs)
    exc = info.value
    assert isinstance(exc, ShapeError)
    check_explanation(exc, eqs)


def check_explanation(exc: Contradiction, eqs):
    """The failing and colliding constraints are named (provenance in the message) and are, on
    their own, already contradictory; if the failing one alone is satisfiable, at least two
    distinct constraints are named."""
    msg = str(exc)
    named = [exc.constraint, *exc.colliding]
    assert all(c.parent is None for c in named), named      # user-added constraints only
    assert len({c.id for c in named}) == len(named)
    assert exc.derived is None or exc.derived.parent is not None
    index = {prov.node: i for i, (_, _, prov) in enumerate(eqs)}   # nodes are unique per eq
    for c in named:
        assert (c.lhs, c.rhs) == eqs[index[c.provenance.node]][:2]
        assert f"#{c.id}" in msg and f"'{c.provenance.node}'" in msg, (c, msg)
    roots = [eqs[i] for i in sorted(index[c.provenance.node] for c in named)]
    with pytest.raises(Contradiction):
        solve_eqs(roots)
    lhs, rhs, prov = eqs[index[exc.constraint.provenance.node]]
    try:
        solve_eqs([(lhs, rhs, prov)])
    except Contradiction:
        return
    assert len(named) >= 2, msg


@settings(SETTINGS, max_examples=200)
@given(planted_systems(), st.data())
def test_contradiction_against_planted(spec, data):
    """Pinning a dim of a satisfiable system to a wrong literal raises, and explains itself."""
    sys_ = System(*spec)
    _, sol = sys_.solve()
    pinned = [d for d in sys_.dims if isinstance(sol.resolve(d), Lit)]
    event(f"pinned dims: {bool(pinned)}")
    if not pinned:
        return
    d = data.draw(st.sampled_from(pinned))
    wrong = sys_.plant[d.name] + data.draw(st.sampled_from([-3, -1, 1, 2, 5]))
    as_list = data.draw(st.booleans())
    new = (shape([d, 7]), shape([wrong, 7])) if as_list else (d, lit(wrong))
    eqs = sys_.eqs + [(*new, Provenance("pin", node=f"pin{next(_counter)}"))]
    with pytest.raises(Contradiction) as info:
        solve_eqs(eqs)
    assert info.value.constraint.provenance is eqs[-1][2]
    check_explanation(info.value, eqs)


# --- targeted contradictions ------------------------------------------------------------------

def test_contradiction_two_literals():
    x = fresh("x")
    with pytest.raises(Contradiction) as info:
        solve_eqs([(x, lit(3), Provenance("add", node="first")),
                   (x, lit(4), Provenance("mul", node="second"))])
    msg = str(info.value)
    assert "'first'" in msg and "'second'" in msg
    assert [c.id for c in info.value.colliding] == [1]


def test_contradiction_shape_lists_names_both():
    """Broadcasting constraints are shape lists: the collision is found after unpacking, and must
    still name the list constraint that bound the variable."""
    x, y = fresh("x"), fresh("y")
    with pytest.raises(Contradiction) as info:
        solve_eqs([(shape([x, y]), shape([3, 4]), Provenance("add", node="first")),
                   (shape([y, x]), shape([4, 5]), Provenance("mul", node="second"))])
    msg = str(info.value)
    assert "'first'" in msg and "'second'" in msg, msg
    assert "axis 1" in msg


def test_contradiction_through_a_chain():
    x, y, z = fresh("x"), fresh("y"), fresh("z")
    eqs = [(x, lit(3), Provenance("a", node="pinx")),
           (shape([y, z]), shape([x, 2]), Provenance("b", node="link")),
           (y * 2 + 1, lit(9), Provenance("c", node="last"))]
    with pytest.raises(Contradiction) as info:
        solve_eqs(eqs)
    msg = str(info.value)
    for node in ("pinx", "link", "last"):
        assert f"'{node}'" in msg, msg
    check_explanation(info.value, eqs)


def test_contradiction_later_substitution_into_binding():
    """``x := y + 1`` first, ``y := 3`` later (rewriting x's binding), then ``x == 5``."""
    x, y = fresh("x"), fresh("y")
    eqs = [(x, y + 1, Provenance("a", node="xy")),
           (y, lit(3), Provenance("b", node="y3")),
           (x, lit(5), Provenance("c", node="x5"))]
    with pytest.raises(Contradiction) as info:
        solve_eqs(eqs)
    msg = str(info.value)
    for node in ("xy", "y3", "x5"):
        assert f"'{node}'" in msg, msg
    check_explanation(info.value, eqs)


def test_contradiction_single_constraint():
    x = fresh("x")
    with pytest.raises(Contradiction) as info:
        solve_eqs([(2 * x, lit(7), Provenance("reshape", node="only"))])
    assert "'only'" in str(info.value) and info.value.colliding == ()
    with pytest.raises(Contradiction):
        solve([(shape([x, 2]), shape([x, 3]))])


def test_divisor_solved_to_zero():
    """Regression: ``M := N // K`` (reshape -1 over a symbolic dim) and then ``K == 0`` raised a
    bare ZeroDivisionError out of the solver; it is a contradiction naming both constraints."""
    m, k, n = fresh("m", 0), fresh("k"), fresh("n")
    eqs = [(m * k, n, Provenance("reshape", node="r")),
           (k, lit(0), Provenance("input", node="k0"))]
    with pytest.raises(Contradiction) as info:
        solve_eqs(eqs)
    assert "'r'" in str(info.value) and "'k0'" in str(info.value)
    check_explanation(info.value, eqs)
    # a residual whose divisor is solved to 0 later
    h, s_ = fresh("h"), fresh("s")
    eqs = [((h + 1) // s_, (h + 3) // 2, Provenance("conv", node="c")),
           (s_, lit(0), Provenance("input", node="s0"))]
    with pytest.raises(Contradiction) as info:
        solve_eqs(eqs)
    check_explanation(info.value, eqs)


def test_rank_mismatch():
    x, y = fresh("x"), fresh("y")
    with pytest.raises(Contradiction, match="rank"):
        solve([(shape([x, y]), shape([x]))])
    with pytest.raises(Contradiction, match="rank"):
        solve([(shape([x]), x)])
    with pytest.raises(Contradiction, match="rank"):
        solve([(x, shape([]))])
    assert solve([(shape([]), shape([]))]).trace[0].rule == "trivial"


# --- worked example (DESIGN.md) ---------------------------------------------------------------

def test_worked_example_broadcast_reshape():
    n, m = fresh("N"), fresh("M", 0)
    sol = solve([(n * 4 * 6, m * 24)])
    assert 24 * n is n * 4 * 6
    assert dict(sol.subst) == {m: n}
    assert [t.rule for t in sol.trace] == ["cancel_common_factor", "solve"]
    assert sol.residuals == ()
    assert sol.classify(n) is DimKind.NAMED and sol.classify(m) is DimKind.NAMED
    assert sol.classify(lit(24)) is DimKind.LITERAL


def test_worked_example_reshape_residual():
    n, h, w, m = fresh("N"), fresh("H"), fresh("W"), fresh("M", 0)
    s = Solver()
    c = s.add(prod([n, h, w]), m * 24, Provenance("reshape", node="r", detail="-1"))
    assert c.id == 1
    sol = s.solution()
    assert dict(sol.subst) == {m: (h * n * w) // 24}
    assert [(r.lhs, r.rhs) for r in sol.residuals] == [((h * n * w) % 24, lit(0))]
    assert sol.residuals[0].provenance.node == "r"
    assert sol.classify(m) is DimKind.RESIDUAL
    assert [t.rule for t in sol.trace] == ["solve"]
    check_idempotent(sol)
    # adding the missing fact later (incremental) discharges the residual
    s.add(w, 6, Provenance("input", node="x", detail="axis 2"))
    s.add(h, 4, Provenance("input", node="x", detail="axis 1"))
    sol = s.solution()
    assert sol.residuals == () and sol.resolve(m) is n
    assert "substitute" in sol.rule_counts()


def test_conv_branches():
    """Same conv on two branches: structurally equal heights cancel; different ones stay a
    host-checked residual."""
    h = fresh("H")
    sol = solve([(conv_expr(h, (1, 1, 3, 2)), conv_expr(h, (1, 1, 3, 2)))])
    assert sol.residuals == () and [t.rule for t in sol.trace] == ["trivial"]
    h2 = fresh("H")
    sol = solve([(conv_expr(h, (1, 1, 3, 2)), conv_expr(h2, (0, 1, 1, 2)))])
    assert len(sol.residuals) == 1 and not sol.subst
    r = sol.residuals[0]
    assert isinstance(r.lhs, FloorDiv) or isinstance(r.rhs, FloorDiv)
    check_idempotent(sol)
    # a named output height is solved to the conv expression
    p = fresh("P")
    sol = solve([(p, conv_expr(h, (1, 1, 3, 2)))])
    assert conv_expr(h, (1, 1, 3, 2)) is (h + 1) // 2
    assert dict(sol.subst) == {p: (h + 1) // 2}


def test_coordinates_are_never_eliminated():
    c, d = fresh("c", 2), fresh("d")
    sol = solve([(c, d + 1)])
    assert dict(sol.subst) == {d: c - 1}
    c2 = fresh("c", 2)
    sol = solve([(c, c2 * 2)])
    assert not sol.subst and len(sol.residuals) == 1


def test_elimination_order():
    """Rank 0 (internal) before rank 1; the newest among equals."""
    a, b = fresh("a"), fresh("b")
    m = fresh("m", 0)
    sol = solve([(a, b)])
    assert dict(sol.subst) == {b: a}
    sol = solve([(m, a * b)])
    assert dict(sol.subst) == {m: a * b}
    sol = solve([(a * b, m)])
    assert dict(sol.subst) == {m: a * b}


def test_linear_equalities():
    x, y = fresh("x"), fresh("y")
    sol = solve([(2 * x + 1, 2 * y + 1)])
    assert dict(sol.subst) == {y: x}
    sol = solve([(3 * x + 2, 6 * y + 8)])          # x == 2*y + 2
    assert dict(sol.subst) == {x: 2 * y + 2}
    sol = solve([(2 * x, 3 * y)])                   # no integral rewrite: residual
    assert not sol.subst and len(sol.residuals) == 1
    check_idempotent(sol)
    with pytest.raises(Contradiction):
        solve([(4 * x + 2, 4 * y + 5)])
    sol = solve([(6 * x + 4, 3 * x + 2 * x + 9)])   # x == 5
    assert sol.resolve(x) is lit(5)


def test_rules_are_data():
    """Unique names, substitution first, and the one-line comment lives only in the entry (the
    per-rule before/after examples are in test_dims_rules.py)."""
    names = [r[0] for r in RULES]
    assert len(names) == len(set(names)) and names[0] == "substitute"
    for name, comment, fn in RULES:
        assert "->" in comment and "\n" not in comment and callable(fn)
        src = inspect.getsource(fn)
        assert not any(line.strip().startswith("#") and "->" in line
                       for line in src.splitlines()), name


def test_solution_repr_and_trace_example():
    x = fresh("x")
    s = Solver()
    s.add(shape([x, 3]), shape([2, 3]), Provenance("add", node="n"))
    sol = s.solution()
    assert sol.rule_counts() == {"unpack_list": 1, "solve": 1, "trivial": 1}
    assert "1 solved" in repr(sol)
    check_trace(sol)


# --- determinism, lineage, polynomial divisors, one resolve, pickling ---------------------------

ORDER_CODE = """
import sys
from dlcb_lab.dims import Provenance, Solver, SolverTrace, shape, var
names = ["ts_ord_a", "ts_ord_b", "ts_ord_c", "ts_ord_m"]
vs = {n: var(n, 0 if n.endswith("_m") else 1)
      for n in (names if sys.argv[1] == "fwd" else names[::-1])}
a, b, c, m = (vs[n] for n in names)
s = Solver()
for lhs, rhs in [(a, b), (shape([c, 4]), shape([b + 0, 4])), (a * c * 4, m * 6)]:
    s.add(lhs, rhs, Provenance("eq"))
sol = s.solution()
print(repr(SolverTrace(sol.trace)).replace(chr(10), "|"))
print(sorted((repr(v), repr(e)) for v, e in sol.subst.items()))
"""


def _order_run(order: str) -> list[str]:
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", ORDER_CODE, order], capture_output=True,
                          check=True).stdout.decode().splitlines()


def _order_solve(names, ranks):
    vs = {n: var(n, ranks[n]) for n in names}
    a, b, c, m = (vs[n] for n in sorted(vs))
    s = Solver()
    for lhs, rhs in [(a, b), (shape([c, 4]), shape([b + 0, 4])), (a * c * 4, m * 6)]:
        s.add(lhs, rhs, Provenance("eq"))
    sol = s.solution()
    return (repr(SolverTrace(sol.trace)), sorted((repr(v), repr(e)) for v, e in sol.subst.items()),
            [weakref.ref(v) for v in vs.values()])


def test_elimination_order_independent_of_creation():
    """The same equations give the same trace and substitution whatever order (and whenever) the
    variables were created: in two processes creating them in opposite orders, and in one process
    where they are dropped and re-created in the opposite order."""
    fwd, rev = _order_run("fwd"), _order_run("rev")
    assert fwd == rev
    assert "('ts_ord_b', 'ts_ord_a')" in fwd[1]      # the later-seen of two user dims goes
    names = [f"ts_reorder{next(_counter)}_{x}" for x in "abcm"]
    ranks = {n: 0 if n.endswith("_m") else 1 for n in names}
    first = _order_solve(names, ranks)
    gc.collect()
    assert all(r() is None for r in first[2])        # gone: re-created below
    second = _order_solve(names[::-1], ranks)
    assert first[:2] == second[:2]


def test_trace_records_keep_expressions_and_lineage():
    x, y = fresh("x"), fresh("y")
    s = Solver()
    c1 = s.add(shape([x, 2 * y]), shape([3, 6]), Provenance("add", node="first"))
    assert s.constraints == [c1] and c1.parent is None
    # unpack -> #2 (axis 0), #3 (axis 1); #3 cancels to #4
    assert [(d.id, d.parent, d.lhs, d.rhs, d.provenance.detail) for d in s.derived] == [
        (2, 1, x, lit(3), "axis 0"), (3, 1, 2 * y, lit(6), "axis 1"), (4, 3, y, lit(3), "axis 1")]
    assert s.binding_source[y] is s.derived[2] and s.origin(s.derived[2]) is c1
    recs = s.solution().trace
    assert [(t.rule, t.constraint_id, t.parent_id) for t in recs] == [
        ("unpack_list", 1, None), ("solve", 2, 1), ("cancel_common_factor", 3, 1), ("solve", 4, 3)]
    t0, t3 = recs[0], recs[3]
    assert t0.eq == (shape([x, 2 * y]), shape([3, 6])) and t0.eq[0] is shape([x, 2 * y])
    assert isinstance(t0.outcome, Replace) and t0.outcome.eqs == ((x, lit(3)), (2 * y, lit(6)))
    assert t0.before == f"[{x!r}, 2*{y!r}] == [3, 6]"
    assert t0.after == f"{x!r} == 3, 2*{y!r} == 6"
    assert isinstance(t3.outcome, Bind) and t3.outcome.v is y and t3.after == f"{y!r} := 3"
    df = SolverTrace(recs).to_frame()
    assert list(df.columns) == ["step", "rule", "constraint_id", "parent_id", "before", "after",
                                "t_us", "dt_us"]
    assert list(df["before"]) == [t.before for t in recs]
    # a contradiction names user-added constraints by their own ids, and the derived step
    with pytest.raises(Contradiction) as info:
        s.add(x + y, lit(7), Provenance("mul", node="second"))
    exc = info.value
    assert exc.constraint is s.constraints[1] and exc.constraint.id == 5
    assert exc.derived.parent == 5 and (exc.derived.lhs, exc.derived.rhs) == (lit(6), lit(7))
    assert exc.colliding == (c1,)
    assert "#5" in str(exc) and "#1" in str(exc) and f"via #{exc.derived.id}" in str(exc)


def test_solve_polynomial_divisor():
    """``v*m + e == 0`` with ``m`` any polynomial free of ``v``: a rank-0 variable is solved with a
    host-checked remainder; a user dim only exactly (and never by dropping a divisor that could
    be 0)."""
    n, r = fresh("N"), fresh("r", 0)
    sol = solve([(n * 6, (n + 1) * r)])
    assert dict(sol.subst) == {r: (6 * n) // (n + 1)}
    assert [(c.lhs, c.rhs) for c in sol.residuals] == [((6 * n) % (n + 1), lit(0))]
    for nv in range(12):
        env = {n.name: nv}
        if sol.residuals[0].holds(env):
            assert nv * 6 == (nv + 1) * sol.subst[r].evaluate(env)
    assert [t.rule for t in sol.trace] == ["solve"]
    d, m = fresh("d"), fresh("m", 0)             # sign from the highest-degree term: the
    sol = solve([(lit(1), m * (2 * d - 1) * (2 * d - 1))])   # divisor is positive for d >= 1
    assert all(c.holds({d.name: 1}) for c in sol.residuals)
    assert sol.subst[m].evaluate({d.name: 1}) == 1
    n2, r2 = fresh("N"), fresh("r", 0)
    sol = solve([((n2 % 3 + 1) * r2, 6 * n2)])
    assert dict(sol.subst) == {r2: (6 * n2) // (n2 % 3 + 1)}
    a = fresh("a")
    sol = solve([(n * 6, (n + 1) * a)])            # a user dim is never defined by a division
    assert not sol.subst and len(sol.residuals) == 1
    sol = solve([(a * (n + 1), n + 1)])            # exact, and n + 1 >= 1
    assert dict(sol.subst) == {a: lit(1)}
    b = fresh("b")
    sol = solve([(b, a * b)])                      # b*(a - 1) == 0: not b := 0
    assert dict(sol.subst) == {a: lit(1)}


def test_resolve_and_classify_have_one_implementation():
    assert Solver.resolve is Solution.resolve and Solver.classify is Solution.classify
    x, m = fresh("x"), fresh("m", 0)
    s = Solver()
    s.add(m * 2, x * 4, Provenance("reshape"))
    assert s.resolve(m) is s.solution().resolve(m) is 2 * x
    assert s.resolve(x) is x and s.classify(m) is DimKind.RESIDUAL


def test_pickle_solution_and_solver():
    n, h, m = fresh("N"), fresh("H"), fresh("M", 0)
    s = Solver()
    s.add(shape([n, h]), shape([n, 4]), Provenance("add", node="x"))
    s.add(n * h * 5, m * 6, Provenance("reshape", node="r", detail="-1"))
    sol = s.solution()
    back = pickle.loads(pickle.dumps(sol))
    assert back == sol and back is not sol
    assert [(t.before, t.after) for t in back.trace] == [(t.before, t.after) for t in sol.trace]
    assert back.trace[0].eq[0] is sol.trace[0].eq[0]       # expressions re-interned
    assert back.resolve(m) is sol.resolve(m) and back.derived == sol.derived
    assert back.origin(back.residuals[0]) == sol.constraints[1]
    s2 = pickle.loads(pickle.dumps(s))                     # and the solve goes on
    s2.add(n, 6, Provenance("input"))
    assert s2.residuals == [] and s2.resolve(m) is lit(20)
    with pytest.raises(Contradiction) as info:
        s2.add(h, 5, Provenance("pin", node="p"))
    exc = pickle.loads(pickle.dumps(info.value))
    assert str(exc) == str(info.value) and exc.colliding == info.value.colliding
