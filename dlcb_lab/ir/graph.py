"""DLCB IR graph (paper §2.2). Every op adds its shape constraints to the graph's solver as it is
built, so an incompatible shape raises ``ShapeError`` at construction, naming the op and axes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import torch

from ..dims import Expr, Provenance, Shape, ShapeError, Solver, Var, shape, var
from .ops import OPS, OpDef

SUPPORTED_DTYPES = (torch.float32, torch.float64)
_FRESH = itertools.count(1)  # internal variable names are process-global (interned)


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
    """One op application. ``inputs`` holds Values and Python scalars (for scalar operands)."""

    id: int
    op: OpDef
    inputs: tuple[Any, ...]
    attrs: Mapping[str, Any]
    out: Value
    where: str = ""

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

    # -- construction ---------------------------------------------------------------------------
    def input(self, name: str, dims: Iterable[Expr | int], dtype: torch.dtype) -> Value:
        if dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"input '{name}': dtype {dtype} unsupported (supported: "
                            f"{', '.join(map(str, SUPPORTED_DTYPES))})")
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
        return var(f"_{hint}{next(_FRESH)}", 0)

    def constrain(self, lhs, rhs, node: Node | str, detail: str = "", where: str = ""):
        if isinstance(node, Node):
            prov = Provenance(node.op.name, node.out.name, detail, node.where)
        else:
            prov = Provenance(node, "", detail, where)
        return self.solver.add(lhs, rhs, prov)

    def apply(self, opname: str, *inputs: Any, name: str | None = None, where: str = "",
              **attrs: Any) -> Value:
        """Append ``opname(*inputs, **attrs)``; its constraints are solved immediately."""
        op = OPS.get(opname)
        if op is None:
            raise NotImplementedError(f"op '{opname}' is not in the DLCB IR registry")
        tensors = [x for x in inputs if isinstance(x, Value)]
        if not tensors:
            raise ShapeError(f"{opname}: needs at least one tensor operand")
        dtype = tensors[0].dtype
        for t in tensors[1:]:
            if t.dtype != dtype:
                raise TypeError(f"{opname} '{name}': mixed dtypes {dtype} and {t.dtype}")
        vid = len(self.inputs) + len(self.nodes)
        out = Value(vid, name or f"v{vid}", shape(()), dtype)
        node = Node(len(self.nodes), op, tuple(inputs), dict(attrs), out, where)
        out.shape = op.infer(self, node)
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
