"""Layout assignment: every value is a row-major buffer (materialized: a graph input, a library or
reduction result, a graph output, or a library operand's base), a view of another value (a pure
coordinate transform, applied by the host when a library op reads it), or inlined (recomputed by
each kernel that reads it). Buffers are contiguous with strides given as dimension expressions."""

from __future__ import annotations

from dataclasses import dataclass

from ..dims import Expr, lit
from ..ir.graph import Graph


@dataclass(frozen=True)
class Layout:
    kind: str                     # "buffer", "view" or "inlined"
    strides: tuple[Expr, ...]     # row-major strides (buffers); () otherwise
    base: str = ""                # views: the buffer they read

    def __repr__(self) -> str:
        if self.kind == "buffer":
            return f"buffer strides [{', '.join(map(repr, self.strides))}]"
        return f"view of %{self.base}" if self.kind == "view" else "inlined"


def row_major_strides(dims) -> tuple[Expr, ...]:
    out, s = [], lit(1)
    for d in reversed(dims):
        out.append(s)
        s = s * d
    return tuple(out[::-1])


def assign_layouts(g: Graph, log: list[str]) -> Graph:
    """Set ``g.layouts`` (value name -> ``Layout``) for every value. Changes nothing else."""
    mats = {v.id for v in g.materialized()} | {v.id for v in g.inputs}
    layouts = {}
    for v in list(g.inputs) + [n.out for n in g.nodes]:
        if v.id in mats:
            layouts[v.name] = Layout("buffer", row_major_strides(g.dims(v)))
        elif v.producer is not None and v.producer.op.kind.is_transform:
            base, _ = g.view_chain(v)
            layouts[v.name] = Layout("view" if base.id in mats else "inlined", (), base.name)
        else:
            layouts[v.name] = Layout("inlined", ())
    g.layouts = layouts
    counts = {k: sum(1 for x in layouts.values() if x.kind == k) for k in ("buffer", "view",
                                                                           "inlined")}
    log.append(", ".join(f"{n} {k}" for k, n in counts.items()))
    return g
