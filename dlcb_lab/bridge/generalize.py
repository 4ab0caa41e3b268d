"""Shape generalization: which traced dimensions may stay free variables of the compiled program.

Declared: ``dynamic`` names the free dims, and ``check_generalization`` verifies, after the solve,
that the program did not fix any of them to a literal (a reshape to a constant shape, a broadcast
against a static extent, a branch on the size that torch.export specialized). Automatic
(``dynamic="auto"``): capture proposes every axis as a dim variable, export keeps those the code
admits, the lowering pins the rest, and the solve decides: a dim that stays free is dynamic, a
fixed one is literal with the constraints that fixed it as the reason.
"""

from __future__ import annotations

import warnings

from ..dims import Lit
from ..errors import ShapeError
from ..hostgen.lower import dim_origins
from ..ir.graph import Graph

__all__ = ["check_generalization", "dim_origins"]


def check_generalization(g: Graph, strict: bool = True,
                         declared: frozenset[str] | None = None) -> None:
    """A dim declared dynamic that the graph fixes to a literal is a ``ShapeError`` (``strict``)
    or a warning; either names the dim, its input axis and the constraints that fixed it. With the
    warning, the dim compiles as that literal (the host program checks it at each call).
    ``declared``: the dim names the user gave (every name of an explicit spec; those of
    ``dl.auto(...)``); None: every input dim. An automatic dim the program fixes is the answer,
    not an error: ``cm.pipeline.dims`` shows the constraints behind it."""
    for v, origin in dim_origins(g).items():
        if declared is not None and v.name not in declared:
            continue
        e = g.solver.resolve(v)
        if not isinstance(e, Lit):
            continue
        why = "; ".join(f"#{c.id} {c.lhs!r} == {c.rhs!r} from {c.provenance}"
                        for c in g.solver.bindings_behind(v))
        msg = (f"dim {v.name} ({origin}) is declared dynamic but the program fixes it to "
               f"{e.value}: {why}")
        if strict:
            raise ShapeError(msg)
        warnings.warn(msg + " (compiled static in it)", stacklevel=4)
