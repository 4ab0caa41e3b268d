"""The one expression interpreter (``dims.interpret``): every domain gives a random expression the
same value. Ints (``Expr.evaluate``, ``dims.bind.evaluate``), the host program's registers (run by
its interpreter and by its compiled form) and kgen's index statements (their Python spelling, run
with ``exec``); with a zero divisor, the strict policies all refuse and the lenient ones give 0.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlcb_lab as dl
from dlcb_lab.dims import LENIENT, Ints, as_expr, interpret, lit, var
from dlcb_lab.dims.bind import evaluate
from dlcb_lab.hostgen.program import HostBuilder
from dlcb_lab.kgen.emit import _Numba
from dlcb_lab.kgen.infer import _Builder

from trees import fold

# Names are global per process: this file uses the ``ti_`` prefix only.
A, B = var("_ti_a", 2), var("_ti_b", 2)      # kernel coordinates, in [0, 7)
N, P = var("ti_n"), var("ti_p")              # runtime dims: N >= 0, P >= 1 (a divisor)
VARS = {v.name: v for v in (A, B, N, P)}
ORDER = sorted(VARS)
BOUNDS = {A.name: lit(7), B.name: lit(7)}

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

divisors = st.one_of(st.integers(1, 7), st.just("ti_p"),
                     st.tuples(st.just("+"), st.just("ti_p"), st.sampled_from(ORDER)))
zero_divisors = st.one_of(divisors, st.just("ti_n"))
leaves = st.one_of(st.sampled_from(ORDER), st.integers(-4, 6))


def _trees(divs):
    def extend(children):
        return st.one_of(st.tuples(st.sampled_from(["+", "-", "*"]), children, children),
                         st.tuples(st.sampled_from(["//", "%"]), children, divs))

    return st.recursive(leaves, extend, max_leaves=10)


envs = st.fixed_dictionaries({"_ti_a": st.integers(0, 6), "_ti_b": st.integers(0, 6),
                              "ti_n": st.integers(0, 9), "ti_p": st.integers(1, 9)})

def build(t):
    return fold(t, VARS)


def host_program(e, lenient=False):
    """A host program loading each variable from ``shapes[0]`` (in ``ORDER``), slot ``out`` = e."""
    hb = HostBuilder(1)
    for k, name in enumerate(ORDER):
        hb.bind(VARS[name], hb.load(0, k))
    hb.lenient = lenient
    hb.slot("out", e)
    return hb.build()


def run_host(e, env, lenient=False):
    prog = host_program(e, lenient)
    shapes = [[env[n] for n in ORDER]]
    r = prog.interpret(shapes)[prog.slots["out"]]
    assert prog.compile()(shapes)[prog.slots["out"]] == r
    return r


class _NoGraph:
    @staticmethod
    def dims(root):
        return ()


def run_kernel_spelling(e, env):
    """``e`` spelled as kgen's index statements (coordinates ``A``, ``B``; runtime dims and
    host-computed params are kernel parameters), printed in Python and executed."""
    b = _Builder(_NoGraph(), None, set(), "k")
    b.bounds = dict(BOUNDS)
    name = b.index(e)
    ns = {"ti_a": env[A.name], "ti_b": env[B.name]}
    ns.update({p: x.evaluate(env) for x, p in b.params.items()})   # the host computes params
    printer = _Numba(None)
    exec("\n".join(printer.stmt(s) for s in b.outer.stmts), ns)
    return eval(name, ns)


@SETTINGS
@given(_trees(divisors), envs)
def test_domains_agree(t, env):
    e = as_expr(build(t))
    want = e.evaluate(env)
    known = {VARS[n]: v for n, v in env.items()}
    assert evaluate(e, known) == want
    assert evaluate(e, known, lenient=True) == want
    assert run_host(e, env) == want
    assert run_host(e, env, lenient=True) == want
    assert run_kernel_spelling(e, env) == want


@SETTINGS
@given(_trees(zero_divisors), envs)
def test_zero_divisor_policies_agree(t, env):
    """Strict: ``Expr.evaluate``, ``dims.bind.evaluate`` and the host program all refuse or all
    give one value; lenient (launch slots): ints and ``fdiv0``/``mod0`` agree."""
    e = as_expr(build(t))
    known = {VARS[n]: v for n, v in env.items()}
    assert evaluate(e, known, lenient=True) == run_host(e, env, lenient=True) \
        == interpret(e, Ints(LENIENT, env), {})
    try:
        want = e.evaluate(env)
    except ZeroDivisionError:
        with pytest.raises(dl.ShapeMismatch, match="is not positive"):
            evaluate(e, known)
        with pytest.raises(dl.ShapeMismatch, match="must be positive"):
            run_host(e, env)
        return
    assert evaluate(e, known) == run_host(e, env) == want


def test_partial_knowledge_is_none_and_known_atoms_are_used():
    h = (N + 1) // 2
    e = h * P + 3
    assert evaluate(e, {N: 5}) is None                  # P unknown
    assert evaluate(e, {h: 4, P: 2}) == 11              # N unknown, the atom known
    assert interpret(e, Ints(names={"ti_n": 5, "ti_p": 2}), {}) == 9


def test_host_program_emits_each_node_once():
    e = (N + 1) // 2 * P + (N + 1) // 2
    prog = host_program(e * 2 + e)
    ops = [i.op for i in prog.instrs]
    assert ops.count("fdiv") == 1 and ops.count("load") == len(ORDER)
