"""Export's knowledge of the inputs' sizes and the module code's own guards on them, as graph
constraints and host checks: axes export tied or derived (``input_relations``), each size
symbol's range (``ranges``), axes export specialized (``pin``), and the guards of the module's
code beyond ranges (``code_guards``). A failed check of a range or a code guard is a
``TracedGuard`` requirement: ``CompiledModule`` then compiles a variant traced at the call's
sizes (the guard's other side)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from ..dims import Lit, Provenance, lit
from ..errors import ShapeError, UnsupportedOp
from ..ir.graph import Graph, Value
from .capture import TORCH_DIR, Captured, is_symbolic, source_file
from .sizes import sym_dim, to_dim

GUARD_NOTE = "the traced program holds where this guard of the module's code holds"
"""What a ``TracedGuard``'s message adds for the reader."""


@dataclass(frozen=True)
class TracedGuard(Provenance):
    """A requirement holding where the traced program does: an export range or a guard of the
    module's code. ``CompiledModule`` answers its failure with a variant traced at the call's
    sizes (``is_traced_guard``)."""


def require_traced(g: Graph, e, detail: str, where: str = "") -> None:
    """``e >= 0`` as a ``TracedGuard`` requirement of ``g``."""
    prov = TracedGuard("torch.export", "", f"{detail}: {GUARD_NOTE}", where)
    g.require(e, prov, prov.detail)


def is_traced_guard(g: Graph, failure: str) -> bool:
    """Whether ``failure`` (a ``ShapeMismatch``'s requirement, as the host program names it)
    is one of ``g``'s ``TracedGuard`` requirements."""
    return any(isinstance(p, TracedGuard) and str(p) == failure for _, p in g.requirements)


def input_relations(g: Graph, cap: Captured, env: dict, symbols: dict) -> None:
    """What export knows of the inputs' sizes, as constraints: axes export found equal (one
    symbol) and axes it derived (``2*s0``). Their ranges: ``ranges``."""
    where = "torch.export"
    for n in cap.graph.nodes:
        v = env.get(n)
        if n.op != "placeholder" or not isinstance(v, Value):
            continue
        for k, (sz, d) in enumerate(zip(n.meta["val"].shape, g.dims(v))):
            if not is_symbolic(sz) or symbols.get(sz.node.expr) is d:
                continue
            g.constrain(d, to_dim(sz, symbols, f"input '{v.name}' axis {k}"), where,
                        f"input '{v.name}' axis {k} is {sz} in the traced program")


def ranges(g: Graph, cap: Captured, symbols: dict) -> None:
    """Each export symbol's range as host checks, after the graph's own requirements (so a slice
    out of its axis is reported as the slice, not as the range it implies), where the trace had
    export's 0/1 specialization (ranges from 2). A size-oblivious trace's ranges also hold what
    torch's own shape functions guarded (the fake convolution's memory-format choice asks
    ``N > 1`` and ``H // 32 > 1``: ConvNeXt's range was N >= 2, H >= 64, and batch 1 compiled a
    variant); there the code's own guards are the ranges (``code_guards``)."""
    from torch.utils._sympy.numbers import int_oo

    if cap.oblivious:
        return
    for sym, vr in cap.program.range_constraints.items():
        d = symbols.get(sym)
        if d is None:
            continue
        lo, hi = int(vr.lower), vr.upper
        if lo > 0:
            require_traced(g, d - lo, f"{d!r} >= {lo} ({sym} in {vr})")
        if hi is not int_oo and hi != float("inf"):
            require_traced(g, int(hi) - d, f"{d!r} <= {int(hi)} ({sym} in {vr})")


def pin(g: Graph, cap: Captured, pins) -> None:
    """The axes export specialized, fixed to their example sizes; a requirement the sizes now
    fail is a ``ShapeError`` here (the lowering recorded it while the axis was symbolic)."""
    for i, k, size in pins:
        g.constrain(g.dims(g.inputs[i])[k], lit(size), "torch.export",
                    f"input {i} '{cap.names[i]}' axis {k}: the traced code specializes it (a "
                    f"branch or check on its value)")
    for e, prov in g.requirements if pins else ():
        e = g.solver.resolve(e)
        if isinstance(e, Lit) and e.value < 0:
            raise ShapeError(f"{prov}: fails for the specialized sizes ({e.value} < 0)")


def code_guards(g: Graph, cap: Captured, symbols: dict) -> None:
    """The code's own guards on sizes beyond ranges (``if h + (-h) % 7 <= 7``: torchvision Swin
    drops the shift when the padded size fits one window) as host checks: torch.export keeps such
    a guard nowhere in its program, so a call on the other side of the branch would compute the
    traced side. Guards raised inside torch (an op's meta function, a reference implementation,
    ``torch.nn.functional``) are left out: they concern an op of the graph, which the lowering
    constrains for every size itself. An ``Ne`` keeps the traced side (``a > b`` or ``a < b``).
    A guard with no dim form cannot be checked: a warning names each."""
    import sympy

    shape_env = next((sz.node.shape_env for n in cap.graph.nodes if n.op == "placeholder"
                      for sz in getattr(n.meta.get("val"), "shape", ())
                      if isinstance(sz, torch.SymInt)), None)
    if shape_env is None:
        return
    hint = shape_env.backed_var_to_val if hasattr(shape_env, "backed_var_to_val") else \
        shape_env.var_to_val   # older torch
    rel, unchecked = sympy.core.relational, []
    for guard in shape_env.guards:
        at = getattr(getattr(guard, "sloc", None), "framework_loc", None)
        if not hasattr(at, "filename") or at.filename.startswith(TORCH_DIR):
            continue   # an op's shape function: DLCB lowers the op for every size itself
        loc = f"{source_file(at.filename)}:{at.lineno}"
        expr = shape_env.replace(guard.expr)   # a symbol export unified with another: that one
        if isinstance(expr, sympy.Or):   # the side the trace took
            expr = next((a for a in expr.args if bool(a.xreplace(hint))), expr)
        for e in (expr.args if isinstance(expr, sympy.And) else (expr,)):
            if e in (sympy.true, sympy.false) or not isinstance(e, rel.Relational):
                if e is not sympy.true:
                    unchecked.append(f"{e} ({loc})")
                continue
            if len(e.free_symbols) == 1 and (e.lhs.is_Symbol or e.rhs.is_Symbol) and \
                    not isinstance(e, rel.Ne) and not cap.oblivious:   # a range: ``ranges``
                continue
            taken: list = []
            try:
                d = sym_dim(e.lhs - e.rhs, symbols, f"guard {e}", hint, taken)
            except UnsupportedOp:
                unchecked.append(f"{e} ({loc})")
                continue
            if isinstance(e, rel.Ne):
                above = (e.lhs - e.rhs).xreplace(hint) > 0
                checks = [d - 1] if above else [-d - 1]
            else:
                checks = {rel.Ge: [d], rel.Gt: [d - 1], rel.Le: [-d], rel.Lt: [-d - 1],
                          rel.Eq: [d, -d]}[type(e)]
            named = e.xreplace({s: sympy.Symbol(repr(symbols[s])) for s in e.free_symbols
                                if s in symbols})
            said = f"{named} ({e})" if str(named) != str(e) else str(e)
            for c in checks + taken:
                require_traced(g, c, said, loc)
    if unchecked:
        warnings.warn(f"DLCB cannot check {len(unchecked)} of torch.export's guards on sizes (no "
                      f"dim form); a call where one fails computes the traced branch: "
                      f"{'; '.join(unchecked)}", stacklevel=2)
