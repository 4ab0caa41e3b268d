"""The per-call guards of a compiled graph that are no input-axis check, computed once: residual
constraints, requirements (a slice within its axis, a window within its padded axis) and non-empty
``amax`` reductions. ``hostgen.lower`` compiles them into the host program; direct kernel launches
(``runtime.direct``) evaluate them with ``dims.bind.evaluate`` under what a launch's arguments
determine. Both read the same ``Guard``s, so both admit the same shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..dims import Expr, Lit, Var, prod
from ..dims.bind import evaluate
from ..errors import ShapeError
from ..ir.graph import Graph
from ..ir.ops import Ops, reduced_extents
from .program import escape

KINDS = {"check": "==", "nonneg": ">=", "positive": ">"}


@dataclass(frozen=True)
class Guard:
    """``lhs == rhs`` (``kind`` "check"), ``lhs >= 0`` ("nonneg") or ``lhs > 0`` ("positive").
    ``message``: a template over ``{got}`` (``lhs``'s value) and ``{want}`` (``rhs``'s), user text
    escaped; ``note``: where its user dims are declared (the host program appends it, a direct
    launch names the buffer axes instead)."""

    kind: str
    lhs: Expr
    rhs: Expr | None
    message: str
    note: str = ""

    @property
    def template(self) -> str:
        """The host program's message."""
        return self.message + escape(self.note)

    @property
    def free_vars(self) -> frozenset[str]:
        return self.lhs.free_vars | (self.rhs.free_vars if self.rhs is not None else frozenset())

    def failure(self, known: Mapping[Expr, int]) -> str | None:
        """The message when the guard fails under ``known`` (strict divisors: a non-positive one
        raises ``ShapeMismatch``); None when it holds or is undetermined."""
        a = evaluate(self.lhs, known)
        b = None if self.rhs is None else evaluate(self.rhs, known)
        if a is None or (self.rhs is not None and b is None):
            return None
        ok = {"check": lambda: a == b, "nonneg": lambda: a >= 0, "positive": lambda: a > 0}
        return None if ok[self.kind]() else self.message.format(got=a, want=b)


def dim_origins(g: Graph) -> dict[Var, str]:
    """Each user dim -> the first input axis declaring it (``input 0 'x' axis 0``)."""
    out: dict[Var, str] = {}
    for i, v in enumerate(g.inputs):
        for k, d in enumerate(v.shape.items):
            if isinstance(d, Var):
                out.setdefault(d, f"input {i} '{v.name}' axis {k}")
    return out


def describe(exprs, origins: dict[Var, str]) -> str:
    """``; N = input 0 'x' axis 0, ...`` for the user dims in ``exprs``."""
    names = sorted({n for e in exprs for n in e.free_vars})
    where = [f"{v.name} = {o}" for v, o in origins.items() if v.name in names]
    return f"; {', '.join(where)}" if where else ""


def graph_guards(g: Graph) -> tuple[Guard, ...]:
    """The guards of ``g``, in the host program's order: requirements first (a residual may
    divide by a size a requirement bounds: a -1 beside ``N`` is ``(N*W) // (7*N)``), then the
    residual constraints, then non-empty ``amax``. A literal requirement below 0 raises
    ``ShapeError`` (no shape is admitted); literal guards that hold are dropped."""
    origins = dim_origins(g)
    r = g.solver.resolve
    out = []
    seen: set = set()
    for e, prov in g.requirements:
        e = r(e)
        if isinstance(e, Lit):
            if e.value < 0:
                raise ShapeError(f"{prov}: needs {e!r} >= 0")
            continue
        if e in seen:   # checked already, for the first op that required it
            continue
        seen.add(e)
        out.append(Guard("nonneg", e, None, f"{escape(str(prov))}: needs {e!r} >= 0, got {{got}}",
                         describe((e,), origins)))
    for c in g.solver.residuals:
        lhs, rhs = r(c.lhs), r(c.rhs)
        out.append(Guard("check", lhs, rhs,
                         f"residual constraint #{c.id} violated: {lhs!r} == {rhs!r} (got {{got}} "
                         f"!= {{want}}) from {escape(str(c.provenance))}",
                         describe((lhs, rhs), origins)))
    for n in g.nodes:
        if n.op is Ops.amax:
            ext = reduced_extents(g, n)
            e = prod(ext)
            if isinstance(e, Lit) and e.value > 0:
                continue
            out.append(Guard("positive", e, None,
                             f"{n.op.name} '{n.out.name}' at {escape(n.where)}: reduces an empty "
                             f"range ({e!r} = {{got}} elements; eager raises)",
                             describe(ext, origins)))
    return tuple(out)
