"""Shape constraints ``lhs == rhs`` with provenance, and the errors they raise."""

from __future__ import annotations

from dataclasses import dataclass, field

from .expr import Expr


@dataclass(frozen=True)
class Provenance:
    """Where a constraint comes from: the IR op, which operand/axis, and the user's source line."""

    op: str
    node: str = ""
    detail: str = ""
    where: str = ""

    def __str__(self) -> str:
        s = f"{self.op}"
        if self.node:
            s += f" '{self.node}'"
        if self.detail:
            s += f" ({self.detail})"
        if self.where:
            s += f" at {self.where}"
        return s


@dataclass(frozen=True)
class Constraint:
    """``lhs == rhs`` over dimension expressions (shapes or integers)."""

    id: int
    lhs: Expr
    rhs: Expr
    provenance: Provenance = field(compare=False)

    def __repr__(self) -> str:
        return f"#{self.id}: {self.lhs!r} == {self.rhs!r}    [{self.provenance}]"

    def holds(self, env) -> bool:
        return self.lhs.evaluate(env) == self.rhs.evaluate(env)


class Constraints(tuple):
    """An ordered collection of ``Constraint``s (one per line when printed)."""

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([(c.id, repr(c.lhs), repr(c.rhs), c.provenance.op, c.provenance.node,
                              c.provenance.detail, c.provenance.where) for c in self],
                            columns=["id", "lhs", "rhs", "op", "node", "detail", "where"])

    def __repr__(self) -> str:
        return "\n".join([f"Constraints: {len(self)}"] + [f"  {c!r}" for c in self])


class ShapeError(ValueError):
    """An op's operand shapes are incompatible (raised while the graph is built)."""


class Contradiction(ShapeError):
    """Two (or more) constraints cannot hold together.

    ``constraint`` is the one that failed after rewriting to ``reduced``; ``colliding`` are the
    constraints whose solutions were substituted into it.
    """

    def __init__(self, constraint: Constraint, reduced: str, colliding: tuple[Constraint, ...]):
        self.constraint = constraint
        self.reduced = reduced
        self.colliding = colliding
        msg = f"contradiction: {constraint.lhs!r} == {constraint.rhs!r} from {constraint.provenance}"
        msg += f" reduces to {reduced}"
        for c in colliding:
            msg += f"\n  collides with #{c.id}: {c.lhs!r} == {c.rhs!r} from {c.provenance}"
        super().__init__(msg)
