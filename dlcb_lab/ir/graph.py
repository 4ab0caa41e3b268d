"""DLCB IR graph (paper §2.2). Every op adds its shape constraints to the graph's solver as it is
built, so an incompatible shape raises ``ShapeError`` at construction, naming the op, the axes and
the user's source line. Internal dimension variables (a reshape's ``-1``) are named ``_<hint><k>``
with ``k`` counted per graph, so the same program always gets the same names."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import torch

from ..config import Config
from ..dims import Expr, Lit, Provenance, Shape, Solver, Var, as_expr, shape, var
from ..display import Rich
from ..errors import DLError, ShapeError
from .dtypes import dtype_of
from .ops import OpDef, OpKind, data_and_index, infer_dtypes, is_scalar


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
class Derived:
    """A constant a pass computed from other constants: ``out`` holds ``how(*inputs, **attrs)``
    cast to ``out``'s dtype, contiguous; ``how`` an op (its torch reference) or the name of a
    function of ``passes.core.DERIVE``; ``inputs`` constant values (module parameters and
    buffers, or earlier ``Derived`` outputs) and scalars. ``Graph.derived`` lists them in the
    order they were made: ``passes.core.replay`` recomputes every one from new weights (the
    program cache binds a compiled program to a module's live parameters)."""

    out: Value
    how: "OpDef | str"
    inputs: tuple[Any, ...]
    attrs: Mapping[str, Any]


@dataclass(eq=False)
class Graph(Rich):
    """A DLCB IR graph and its shape-constraint solver."""

    solver: Solver = field(default_factory=Solver)
    inputs: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    constants: list[tuple[Value, torch.Tensor]] = field(default_factory=list)
    requirements: list[tuple[Expr, Provenance]] = field(default_factory=list)
    materialize: set[int] = field(default_factory=set)
    layouts: dict[str, Any] = field(default_factory=dict)   # set by passes.assign_layouts
    partition: Any = None                                   # set by passes.partition
    config: Config = field(default_factory=Config)
    """The compile's switches (``dlcb_lab.config``; set by ``passes.run_passes``), which the
    passes read."""
    derived: list[Derived] = field(default_factory=list)
    """The constants the passes computed, in order (``passes.core.derive``)."""
    examples: dict[str, int] = field(default_factory=dict)
    """Dim name -> its size in the compile's example inputs (the bridge: which piece of a
    piecewise size rule, a negative slice bound say, the compile takes)."""
    n_fresh: int = 0
    n_values: int = 0

    # -- construction ---------------------------------------------------------------------------
    def input(self, name: str, dims: Iterable[Expr | int], dtype: torch.dtype) -> Value:
        try:
            dtype_of(dtype)
        except DLError as err:
            raise err.locate("input", name, "") from None
        v = Value(self._new_id(), name, shape(dims), dtype)
        self.inputs.append(v)
        self.solver.number(v.shape.items)
        return v

    def constant(self, name: str, t: torch.Tensor) -> Value:
        """A module parameter or buffer: an input of static shape, supplied by the compiled module
        (it follows the user's inputs in ``inputs``). One tensor is one constant."""
        for v, c in self.constants:
            if c is t:
                return v
        v = self.input(name, [int(d) for d in t.shape], t.dtype)
        self.constants.append((v, t))
        return v

    def _new_id(self) -> int:
        self.n_values += 1
        return self.n_values - 1

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

    def require(self, e: Expr | int, node: Node | str | Provenance, detail: str,
                where: str = "") -> None:
        """``e >= 0`` for every admitted shape (a slice within its axis, a window within its
        padded extent). A literal is checked now (``ShapeError``); otherwise the host program
        checks it before any launch."""
        e = self.solver.resolve(as_expr(e))
        if isinstance(e, Lit):
            if e.value < 0:
                raise ShapeError(f"{detail}: fails ({e.value} < 0)")
            return
        if isinstance(node, Provenance):   # a caller's own kind (``bridge.guards.TracedGuard``)
            prov = node
        elif isinstance(node, Node):
            prov = Provenance(node.op.name, node.out.name, detail, node.where)
        else:
            prov = Provenance(node, "", detail, where)
        self.requirements.append((e, prov))

    def apply(self, op: OpDef, *inputs: Any, name: str | None = None, where: str = "",
              insert_before: Node | None = None, **attrs: Any) -> Value:
        """Append ``op(*inputs, **attrs)`` (``op`` an ``ir.ops.O`` constant; a pass: insert it
        before ``insert_before``); its constraints are solved immediately. Errors name the op,
        ``name`` and ``where``."""
        if not isinstance(op, OpDef):
            raise TypeError(f"Graph.apply takes an OpDef (ir.ops.Ops.<name>), not {op!r}")
        vid = self._new_id()
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
            raise err.locate(op.name, name, where) from None
        out.producer = node
        self._place(node, insert_before)
        return out

    def _place(self, node: Node, before: Node | None) -> None:
        self.nodes.insert(len(self.nodes) if before is None else self.nodes.index(before), node)

    def restate(self, node: Node, op: OpDef, inputs: tuple, attrs: Mapping[str, Any],
                dims: Iterable[Expr], name: str) -> Value:
        """Insert, before ``node``, ``op(*inputs, **attrs)`` computing what ``node`` computes
        on re-arranged operands, with result shape ``dims`` (``node``'s, re-arranged) and
        ``node``'s dtypes and source line; no constraint is added: the solver checked ``node``
        already (a pass re-expressing it, ``passes.channels_last``)."""
        if not isinstance(op, OpDef):
            raise TypeError(f"Graph.restate takes an OpDef (ir.ops.Ops.<name>), not {op!r}")
        out = Value(self._new_id(), name, shape(dims), node.out.dtype)
        out.producer = Node(len(self.nodes), op, tuple(inputs), dict(attrs), out,
                            node.where, node.compute_dtype)
        self._place(out.producer, node)
        return out

    def set_outputs(self, values: Iterable[Value]) -> None:
        self.outputs = list(values)

    # -- queries ---------------------------------------------------------------------------------
    def dims(self, v: Value) -> tuple[Expr, ...]:
        """``v``'s shape under the current solution."""
        return tuple(self.solver.resolve(d) for d in v.shape.items)

    def materialized(self) -> list[Value]:
        """Values that get a buffer, in graph order: graph outputs, reduction and library results,
        the base values library operands are views of (the host applies the view ops), index
        tensors (the host checks them), and the
        values a pass chose to materialize (``materialize``). Everything else is inlined into the
        kernels that read it."""
        keep = {v.id for v in self.outputs} | self.materialize
        for n in self.nodes:
            if n.op.kind.materialized:
                keep.add(n.out.id)
            if n.op.kind is OpKind.LIBRARY:
                keep.update(self.view_chain(x)[0].id for x in n.tensor_inputs())
            if n.op.kind is OpKind.GATHER:   # the host checks index tensors before launch
                keep.add(data_and_index(n)[1].id)
        out_ids = {o.id for o in self.outputs}
        return [n.out for n in self.nodes if n.out.id in keep] + \
            [v for v in self.inputs if v.id in out_ids]

    def view_chain(self, v: Value) -> tuple[Value, list[Node]]:
        """``v`` as (base, coordinate transforms applied to the base in order): the base is the
        first value up the producer chain that is materialized or not a pure coordinate
        transform."""
        chain: list[Node] = []
        while v.producer is not None and v.producer.op.kind.is_transform and \
                v.id not in self.materialize:
            chain.append(v.producer)
            v = v.producer.inputs[0]
        return v, chain[::-1]

    def __repr__(self) -> str:
        lines = [f"graph({', '.join(f'%{v.name}: {list(self.dims(v))}' for v in self.inputs)}):"]
        for n in self.nodes:
            lines.append(f"  {n!r}  # {list(self.dims(n.out))}")
        lines.append(f"  return {', '.join('%' + v.name for v in self.outputs)}")
        return "\n".join(lines)
