"""DLCB IR graph (paper §2.2). Every op adds its shape constraints to the graph's solver as it is
built, so an incompatible shape raises ``ShapeError`` at construction, naming the op, the axes and
the user's source line. Internal dimension variables (a reshape's ``-1``) are named ``_<hint><k>``
with ``k`` counted per graph, so the same program always gets the same names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import torch

from ..dims import Expr, Provenance, Shape, Solver, Var, shape, var
from ..errors import DLError, ShapeError
from .dtypes import dtype_of
from .ops import OPS, OpDef, infer_dtypes, is_scalar


@dataclass(eq=False)
class Value:
    """An SSA tensor value. ``shape`` is the shape as built (before the final substitution)."""

    id: int
    name: str
    shape: Shape
    dtype: torch.dtype
    producer: "Node | None" = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"%{self.name}: {self.shape!r}"


@dataclass(eq=False)
class Node:
    """One op application. ``inputs`` holds Values and Python scalars (scalar operands);
    ``compute_dtype`` is the dtype elementwise code computes in (see ``ops.infer_dtypes``)."""

    id: int
    op: OpDef
    inputs: tuple[Any, ...]
    attrs: Mapping[str, Any]
    out: Value
    where: str = ""
    compute_dtype: torch.dtype | None = None

    def tensor_inputs(self) -> list[Value]:
        return [x for x in self.inputs if isinstance(x, Value)]

    def __repr__(self) -> str:
        args = ", ".join(f"%{x.name}" if isinstance(x, Value) else repr(x) for x in self.inputs)
        at = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return f"%{self.out.name} = {self.op.name}({args}{', ' if at else ''}{at})"


@dataclass(eq=False)
class Graph:
    """A DLCB IR graph and its shape-constraint solver."""

    solver: Solver = field(default_factory=Solver)
    inputs: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    constants: list[tuple[Value, torch.Tensor]] = field(default_factory=list)
    n_fresh: int = 0

    # -- construction ---------------------------------------------------------------------------
    def input(self, name: str, dims: Iterable[Expr | int], dtype: torch.dtype) -> Value:
        try:
            dtype_of(dtype)
        except DLError as err:
            raise err.locate("input", name, "") from None
        v = Value(len(self.inputs) + len(self.nodes), name, shape(dims), dtype)
        self.inputs.append(v)
        return v

    def constant(self, name: str, t: torch.Tensor) -> Value:
        """A module parameter or buffer: an input of static shape, supplied by the compiled module
        (it follows the user's inputs in ``inputs``)."""
        v = self.input(name, [int(d) for d in t.shape], t.dtype)
        self.constants.append((v, t))
        return v

    def fresh_var(self, hint: str = "d") -> Var:
        """A new internal (rank-0) dimension variable, e.g. a reshape's ``-1``."""
        self.n_fresh += 1
        return var(f"_{hint}{self.n_fresh}", 0)

    def constrain(self, lhs, rhs, node: Node | str, detail: str = "", where: str = ""):
        if isinstance(node, Node):
            prov = Provenance(node.op.name, node.out.name, detail, node.where)
        else:
            prov = Provenance(node, "", detail, where)
        return self.solver.add(lhs, rhs, prov)

    def apply(self, opname: str, *inputs: Any, name: str | None = None, where: str = "",
              **attrs: Any) -> Value:
        """Append ``opname(*inputs, **attrs)``; its constraints are solved immediately. Errors
        name the op, ``name`` and ``where``."""
        op = OPS[opname]
        vid = len(self.inputs) + len(self.nodes)
        name = name or f"v{vid}"
        try:
            if not any(isinstance(x, Value) for x in inputs):
                raise ShapeError("needs at least one tensor operand")
            bad = [x for x in inputs if not (isinstance(x, Value) or is_scalar(x))]
            if bad:
                raise ShapeError(f"operand {bad[0]!r} is neither a tensor nor a Python number")
            out = Value(vid, name, shape(()), torch.float32)
            node = Node(len(self.nodes), op, tuple(inputs), dict(attrs), out, where)
            out.dtype, node.compute_dtype = infer_dtypes(node)
            dtype_of(out.dtype)
            out.shape = op.infer(self, node)
        except DLError as err:
            raise err.locate(opname, name, where) from None
        out.producer = node
        self.nodes.append(node)
        return out

    def set_outputs(self, values: Iterable[Value]) -> None:
        self.outputs = list(values)

    # -- queries ---------------------------------------------------------------------------------
    def dims(self, v: Value) -> tuple[Expr, ...]:
        """``v``'s shape under the current solution."""
        return tuple(self.solver.resolve(d) for d in v.shape.items)

    def __repr__(self) -> str:
        lines = [f"graph({', '.join(f'%{v.name}: {list(self.dims(v))}' for v in self.inputs)}):"]
        for n in self.nodes:
            lines.append(f"  {n!r}  # {list(self.dims(n.out))}")
        lines.append(f"  return {', '.join('%' + v.name for v in self.outputs)}")
        return "\n".join(lines)
