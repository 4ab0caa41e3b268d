"""The one binder and evaluator (``dims.bind``): the zero-divisor policy, the plan's steps, random
affine/floordiv shapes bound from concrete sizes against brute-force evaluation, the host program
(``HostBuilder.emit_binding``) and ``BindPlan.run`` agreeing on every call, and a graph whose
inputs are declared as expressions (``(H + 1) // 2``, ``2*N + 1``) compiled, called and launched
directly with the same accept/refuse decisions."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlcb_lab as dl
from dlcb_lab.dims import lit, var
from dlcb_lab.dims.bind import (Attainable, Bind, Check, Consistent, Source, evaluate,
                                plan_binding)
from dlcb_lab.hostgen.guards import graph_guards
from dlcb_lab.hostgen.lower import lower
from dlcb_lab.hostgen.program import HostBuilder
from dlcb_lab.ir.graph import Graph
from dlcb_lab.ir.ops import Ops
from dlcb_lab.kgen.infer import infer_kernels, materialized_values
from dlcb_lab.passes import run_passes
from dlcb_lab.runtime.build import build_kernels
from dlcb_lab.runtime.direct import DirectKernel, kernel_signatures
from dlcb_lab.runtime.thunks import DynamicAOTThunk

A, B, H, N, W = var("A"), var("B"), var("H"), var("N"), var("W")


def sources(*shapes):
    return [Source(f"input {i} axis {k}", e, i, k) for i, s in enumerate(shapes)
            for k, e in enumerate(s)]


def host_of(plan, n_args):
    hb = HostBuilder(n_args)
    hb.emit_binding(plan, lambda j: f"{plan.sources[j].label}: size {{got}} != {{want}}")
    return hb, hb.build()


# --- the evaluator: one zero-divisor policy -------------------------------------------------------

def test_evaluate_partial_knowledge_and_divisors():
    e = (H + 1) // 2 + N
    assert evaluate(e, {H: 5}) is None                       # N unknown
    assert evaluate(e, {H: 5, N: 2}) == 5
    assert evaluate(e, {(H + 1) // 2: 7, N: 1}) == 8         # a known atom, H itself unknown
    with pytest.raises(dl.ShapeMismatch, match=r"divisor W = 0 of \(H \+ 1\) // W"):
        evaluate((H + 1) // W, {H: 3, W: 0})                # shapes and checks: strict
    assert evaluate((H + 1) // W, {H: 3, W: 0}, lenient=True) == 0   # launch slots: x // 0 == 0
    assert evaluate((H + 1) % W, {H: 3, W: 0}, lenient=True) == 0
    assert evaluate((H + 1) % W, {H: 3, W: 3}) == 1


# --- the plan's steps -----------------------------------------------------------------------------

def test_plan_steps():
    p = plan_binding(sources([N, 2 * N + 1], [W * N]))
    assert p.steps[0] == Bind(0, N)                          # the bare axis first, no check
    assert p.steps[1:] == (Check(1), Bind(2, W, lit(0), N)) and not p.pending
    p = plan_binding(sources([2 * N + 1]))
    assert p.steps == (Bind(0, N, lit(1), lit(2)),)
    p = plan_binding(sources([W, N * W]))                    # a product's one unknown factor
    assert p.steps == (Bind(0, W), Bind(1, N, lit(0), W))
    p = plan_binding(sources([(H + 1) // 2], [H]))          # the atom first, then its operand
    assert p.steps == (Bind(1, H), Check(0))                 # bare H binds first: a plain check
    p = plan_binding(sources([(H + 1) // 2, 3 * H]))
    assert p.steps == (Bind(0, (H + 1) // 2), Bind(1, H, lit(0), lit(3)),
                       Consistent((H + 1) // 2, 0))
    assert plan_binding(sources([(H + 1) // 2])).steps == (Bind(0, (H + 1) // 2),)   # low 0
    # (H + 5) // 2 is canonically 2 + (H + 1) // 2: the atom binds, shifted
    assert plan_binding(sources([(H + 5) // 2])).steps == (Bind(0, (H + 1) // 2, lit(2)),)
    p = plan_binding(sources([W], [(W + H) // 2]))           # least value W // 2, at H = 0
    assert p.steps == (Bind(0, W), Bind(1, (W + H) // 2), Attainable((W + H) // 2, 1, W // 2))
    p.run([(5,), (2,)])
    with pytest.raises(dl.ShapeMismatch, match=r"gives \(H \+ W\) // 2 = 1, below 2, its least"):
        p.run([(5,), (1,)])
    for bad in ((3 * H) // 2, H % 3, H * H):        # gaps, a bounded range, no affine inverse
        p = plan_binding(sources([bad]))
        assert p.steps == () and p.pending == (0,), bad
        assert "H not determined" in p.undetermined(0)
    p = plan_binding(sources([(H + 1) // 2, (H + 2) // 3]))  # one H, two atoms: not bound alone
    assert p.pending == (0, 1)


def test_run_messages():
    p = plan_binding(sources([2 * N + 1], [N + 3]))
    b = p.run([(7,), (6,)])
    assert b.known[N] == 3 and b.origin[N] == "input 0 axis 0"
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 axis 0: size 8 != 2\*N \+ 1 for every "
                                               r"integer N >= 0"):
        p.run([(8,), (6,)])
    with pytest.raises(dl.ShapeMismatch, match=r"input 1 axis 0: size 5 != N \+ 3 = 6 \(N from "
                                               r"input 0 axis 0\)"):
        p.run([(7,), (5,)])
    p = plan_binding(sources([(H + 1) // 2], [H]))          # H bare: checked through H
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 axis 0: size 3 != \(H \+ 1\) // 2 = 5"):
        p.run([(3,), (9,)])
    p = plan_binding(sources([W, N * W]))
    with pytest.raises(dl.ShapeMismatch, match="for every integer N >= 0"):
        p.run([(0, 0)])                                      # N*W with W = 0: N undetermined


def test_int_arguments_supply_what_no_shape_determines():
    """Direct launches with partial knowledge: an explicit int binds the dim the buffers leave
    open (after every shape source), and a bound atom is then checked against it."""
    atom = (H + 1) // 2
    src = [Source("in0 axis 0", atom, 0, 0), Source("int argument d_H", H, 0)]
    p = plan_binding(src)
    assert p.steps == (Bind(0, atom), Bind(1, H), Consistent(atom, 0)) and not p.pending
    assert p.run([(3,)], [5]).known[H] == 5
    with pytest.raises(dl.ShapeMismatch, match=r"in0 axis 0: size 3 != \(H \+ 1\) // 2 = 4 "
                                               r"\(H from int argument d_H\)"):
        p.run([(3,)], [7])
    p = plan_binding([Source("in0 axis 0", N, 0, 0), Source("int argument numel", 4 * N, 0)])
    assert p.steps == (Bind(0, N), Check(1))
    with pytest.raises(dl.ShapeMismatch, match=r"int argument numel = 9, but 4\*N = 8"):
        p.run([(2,)], [9])
    p = plan_binding([Source("in0 axis 0", W, 0, 0), Source("int argument p", W * N + 1, 0)])
    assert p.steps == (Bind(0, W), Bind(1, N, lit(1), W))   # an int binds affinely too
    assert p.run([(3,)], [13]).known[N] == 4


# --- random shapes against brute force ------------------------------------------------------------

FORMS = st.sampled_from(["v", "affine", "floordiv", "product", "literal", "two", "nested"])


@st.composite
def axis(draw):
    form = draw(FORMS)
    v = draw(st.sampled_from([A, B]))
    w = B if v is A else A
    c, k, d = draw(st.integers(1, 2)), draw(st.integers(0, 3)), draw(st.integers(2, 3))
    return {"v": v, "affine": c * v + k, "floordiv": (c * v + k) // d, "product": A * B,
            "literal": lit(k + 1), "two": (c * v + w + k) // d,
            "nested": ((c * v + k) // d + 1) // 2}[form]


SHAPES = st.lists(st.lists(axis(), min_size=1, max_size=3), min_size=1, max_size=3)
K = 60


def _witness(shapes, sizes, low: int) -> bool:
    for a, b in itertools.product(range(low, K), repeat=2):
        env = {"A": a, "B": b}
        if all(e.evaluate(env) == n for s, ns in zip(shapes, sizes) for e, n in zip(s, ns)):
            return True
    return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SHAPES, st.integers(0, 6), st.integers(0, 6), st.lists(st.integers(-2, 2), max_size=9))
def test_bind_against_brute_force(shapes, a, b, deltas):
    plan = plan_binding(sources(*shapes))
    env = {"A": a, "B": b}
    sizes = [[e.evaluate(env) for e in s] for s in shapes]
    flat = [(i, k) for i, s in enumerate(sizes) for k in range(len(s))]
    for (i, k), dl_ in zip(flat, deltas):                     # perturb some axes
        sizes[i][k] = max(0, sizes[i][k] + dl_)
    if plan.pending:
        return                                               # refused at compile time
    try:
        got = plan.run(sizes)
    except dl.ShapeMismatch:
        got = None
    _, host = host_of(plan, len(shapes))
    try:
        regs = host.interpret(sizes)
    except dl.ShapeMismatch:
        regs = None
    assert (got is None) == (regs is None)                   # host program == direct execution
    if got is not None:
        assert _witness(shapes, sizes, 0)                    # sound: some dims give the sizes
    elif all(c > 0 for c in (a, b)) and not deltas:
        pytest.fail(f"refused sizes the dims {env} produce: {sizes}")
    if got is None and _witness(shapes, sizes, 1):
        pytest.fail(f"refused {sizes}, which dims >= 1 produce ({plan!r})")


@settings(max_examples=40, deadline=None)
@given(SHAPES, st.integers(1, 6), st.integers(1, 6))
def test_bound_dims_are_the_true_ones(shapes, a, b):
    plan = plan_binding(sources(*shapes))
    env = {"A": a, "B": b}
    sizes = [[e.evaluate(env) for e in s] for s in shapes]
    if plan.pending:
        return
    got = plan.run(sizes)
    hb, host = host_of(plan, len(shapes))
    regs = host.interpret(sizes)
    for e, v in got.known.items():
        assert v == e.evaluate(env), e                       # every bound value the true one
        assert regs[hb.env[e]] == v                          # the host's register agrees


# --- a graph whose inputs are declared as expressions ---------------------------------------------

@pytest.fixture(scope="module")
def exprgraph():
    g = Graph()
    x = g.input("x", [(H + 1) // 2, 2 * N + 1], torch.float32)
    y = g.input("y", [1, 2 * N + 1], torch.float32)
    g.set_outputs([g.apply(Ops.mul, g.apply(Ops.add, x, y, name="s"), 2.0, name="z")])
    g, _ = run_passes(g)
    bodies = infer_kernels(g)
    host, plan = lower(g, materialized_values(g), bodies)
    launchers, _ = build_kernels(bodies, "cpu")
    thunk = DynamicAOTThunk(host, plan, launchers, [v.dtype for v in g.inputs], "cpu",
                            [v.name for v in g.inputs])
    (body,) = bodies
    (sig,) = kernel_signatures(body, g.dims, graph_guards(g))
    return g, host, thunk, DirectKernel(sig, launchers[0])


def test_expression_inputs_bind(exprgraph):
    g, host, thunk, _ = exprgraph
    x, y = torch.randn(4, 9), torch.randn(1, 9)
    torch.testing.assert_close(thunk(x, y)[0], (x + y) * 2)
    r = host.interpret([(4, 9), (1, 9)])
    (numel,) = [r[k] for s, k in host.slots.items() if s.endswith(".numel")]
    assert numel == 36 and r[host.slots["z.shape[1]"]] == 9
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 'x' axis 1: size - 1 = 9 is no "
                                               r"non-negative multiple of 2"):
        thunk(torch.randn(4, 10), torch.randn(1, 10))
    with pytest.raises(dl.ShapeMismatch, match=r"input 1 'y' axis 1: size 7 != 2\*N \+ 1 = 9"):
        thunk(x, torch.randn(1, 7))


def test_host_program_and_direct_launch_agree(exprgraph):
    _, host, thunk, k = exprgraph
    for hx, wx, wy in itertools.product(range(0, 4), range(0, 6), range(0, 6)):
        try:
            host.interpret([(hx, wx), (1, wy)])
            ok = True
        except dl.ShapeMismatch:
            ok = False
        ts = {"z": torch.empty(hx, wx), "x": torch.empty(hx, wx), "y": torch.empty(1, wy)}
        try:
            k.check(*(ts[b.value] for b in k.signature.buffers))
            direct = True
        except dl.ShapeMismatch:
            direct = False
        assert ok == direct == (wx == wy and wx % 2 == 1), (hx, wx, wy)


def test_undeterminable_input_refused_at_compile_time():
    """An input axis no plan step can check (``(3*H) // 2`` skips values) is a compile-time
    ``ShapeError`` naming the axis and the dim, never an admitted-but-unchecked shape."""
    g = Graph()
    x = g.input("x", [(3 * H) // 2], torch.float32)
    g.set_outputs([g.apply(Ops.relu, x, name="r")])
    g, _ = run_passes(g)
    bodies = infer_kernels(g)
    with pytest.raises(dl.ShapeError, match=r"input 0 'x' axis 0: cannot check its size against "
                                            r"\(3\*H\) // 2: H not determined by the sizes"):
        lower(g, materialized_values(g), bodies)
