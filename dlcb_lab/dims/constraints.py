"""Shape constraints ``lhs == rhs`` with provenance, and the errors they raise."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..display import Rich
from ..errors import ShapeError
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
class Constraint(Rich):
    """``lhs == rhs`` over dimension expressions (shapes or integers).

    ``id`` is unique within a solver. ``parent`` is None for a constraint the user added, else the
    id of the constraint a rule rewrote into this one (a list axis, a cancelled or collected form,
    a side condition of a solve); following ``parent`` leads to a user-added constraint.
    """

    id: int
    lhs: Expr
    rhs: Expr
    provenance: Provenance = field(compare=False)
    parent: int | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        up = "" if self.parent is None else f" (from #{self.parent})"
        return f"#{self.id}{up}: {self.lhs!r} == {self.rhs!r}    [{self.provenance}]"

    def holds(self, env) -> bool:
        return self.lhs.evaluate(env) == self.rhs.evaluate(env)


class Constraints(tuple, Rich):
    """An ordered collection of ``Constraint``s (one per line when printed)."""

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([(c.id, c.parent, repr(c.lhs), repr(c.rhs), c.provenance.op,
                              c.provenance.node, c.provenance.detail, c.provenance.where)
                             for c in self],
                            columns=["id", "parent_id", "lhs", "rhs", "op", "node", "detail",
                                     "where"])

    def __repr__(self) -> str:
        return "\n".join([f"Constraints: {len(self)}"] + [f"  {c!r}" for c in self])


class Contradiction(ShapeError):
    """Two (or more) constraints cannot hold together.

    ``constraint`` is the user-added constraint that failed: it, or its rewrite ``derived`` (None
    when the constraint failed as added), reduced to ``reduced``. ``colliding`` are the user-added
    constraints whose solutions were substituted into it (never ``constraint`` itself).
    """

    def __init__(self, constraint: Constraint, reduced: str, colliding: tuple[Constraint, ...],
                 derived: Constraint | None = None):
        self.constraint = constraint
        self.reduced = reduced
        self.colliding = colliding
        self.derived = derived
        prov = (derived or constraint).provenance   # a derived one names its axis
        msg = (f"contradiction: #{constraint.id} {constraint.lhs!r} == {constraint.rhs!r} from "
               f"{prov} reduces to {reduced}")
        if derived is not None:
            msg += f"\n  via #{derived.id}: {derived.lhs!r} == {derived.rhs!r}"
        for c in colliding:
            msg += f"\n  collides with #{c.id}: {c.lhs!r} == {c.rhs!r} from {c.provenance}"
        super().__init__(msg, where=prov.where)

    def __str__(self) -> str:   # the message names each constraint with its source line
        return self.msg

    def __reduce__(self):
        return (type(self), (self.constraint, self.reduced, self.colliding, self.derived))
