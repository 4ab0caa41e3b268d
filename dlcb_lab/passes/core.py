"""Graph surgery shared by the passes: use lists, value replacement, constant folding and dead
code elimination."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from ..dims import Expr, Lit, shape
from ..display import Rich
from ..ir.graph import Derived, Graph, Node, Value
from ..ir.ops import OpDef, Ops


@dataclass(frozen=True)
class PassRecord(Rich):
    """What one pass changed: one line per change."""

    name: str
    changes: tuple[str, ...]
    seconds: float

    def __repr__(self) -> str:
        head = f"{self.name}: {len(self.changes)} changes ({self.seconds * 1e3:.1f} ms)"
        return "\n".join([head] + [f"  {c}" for c in self.changes[:20]] +
                         ([f"  ... {len(self.changes) - 20} more"] if len(self.changes) > 20
                          else []))


def uses(g: Graph) -> dict[int, list[Node]]:
    """Value id -> the nodes reading it."""
    out: dict[int, list[Node]] = {}
    for n in g.nodes:
        for x in n.tensor_inputs():
            out.setdefault(x.id, []).append(n)
    return out


def replace_value(g: Graph, old: Value, new: Value) -> None:
    """Every read of ``old`` (and the graph outputs) now reads ``new``."""
    for n in g.nodes:
        if any(x is old for x in n.inputs):
            n.inputs = tuple(new if x is old else x for x in n.inputs)
    g.outputs = [new if o is old else o for o in g.outputs]


def constant_of(g: Graph, v: Value) -> torch.Tensor | None:
    for c, t in g.constants:
        if c is v:
            return t
    return None


def make_constant(g: Graph, v: Value, t: torch.Tensor) -> None:
    """Turn node output ``v`` into a constant holding ``t`` (its producer is dropped)."""
    g.nodes.remove(v.producer)
    v.producer = None
    v.shape = shape(int(d) for d in t.shape)
    g.inputs.append(v)   # constants follow the user inputs, in ``constants`` order
    g.constants.append((v, t))


DERIVE: dict[str, Callable[..., torch.Tensor]] = {
    "scale_out_channels": lambda w, s: w * s.reshape(-1, *[1] * (w.dim() - 1)),
}
"""Derivations of constants that are no single op (``derive``'s ``how`` by name)."""


def _evaluate(how: OpDef | str, args: list, attrs: Mapping[str, Any], dtype: torch.dtype
              ) -> torch.Tensor:
    fn = DERIVE[how] if isinstance(how, str) else how.reference
    with torch.no_grad():
        return fn(*args, **attrs).to(dtype).contiguous()


def derive(g: Graph, how: OpDef | str, inputs: tuple, attrs: Mapping[str, Any] | None = None, *,
           out: Value | None = None, name: str = "", dtype: torch.dtype | None = None) -> Value:
    """A constant computed now from constants (and scalars) ``inputs``: ``how`` an op (its
    torch reference) or a ``DERIVE`` name. ``out``: a node's result, which becomes that
    constant (its producer dropped); else a new constant ``name`` of ``dtype``. Every constant a
    pass makes goes through here and is recorded in ``g.derived`` (``replay``)."""
    consts = {v.id: t for v, t in g.constants}
    args = [consts[x.id] if isinstance(x, Value) else x for x in inputs]
    attrs = dict(attrs or {})
    t = _evaluate(how, args, attrs, out.dtype if out is not None else dtype)
    if out is None:
        out = g.constant(name, t)
    else:
        make_constant(g, out, t)
    g.derived.append(Derived(out, how, tuple(inputs), attrs))
    return out


def replay(derived: list[Derived], values: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """``values`` (value id -> tensor: the constants the capture made) extended by every
    ``derived`` constant, recomputed from them in order (``derive``'s arithmetic, bit for
    bit). Raises ``KeyError`` for an input not in ``values``."""
    out = dict(values)
    for d in derived:
        args = [out[x.id] if isinstance(x, Value) else x for x in d.inputs]
        out[d.out.id] = _evaluate(d.how, args, d.attrs, d.out.dtype)
    return out


def _static(attr) -> bool:
    if isinstance(attr, Expr):
        return isinstance(attr, Lit)
    if isinstance(attr, (tuple, list)):
        return all(_static(a) for a in attr)
    return True


def fold_constants(g: Graph, log: list[str]) -> Graph:
    """Evaluate, at compile time, every node whose tensor operands are all constants (parameters
    and buffers) and whose attributes are literal, with its torch reference; its output becomes a
    constant. A transform read only as the weight of ``linear`` calls stays a view of its
    constant (cuBLAS reads a transposed operand at the same speed; a folded copy would double the
    weight's memory: GPT-2's Conv1D weights, ``rewrite.matmul_of_weight``). Leaves: no node with
    only constant operands but those views."""
    consts = {v.id: t for v, t in g.constants}
    use = uses(g)
    for n in list(g.nodes):
        tensors = n.tensor_inputs()
        if not tensors or any(x.id not in consts for x in tensors) or \
                not all(_static(a) for a in n.attrs.values()) or _weight_view(n, use):
            continue
        v = derive(g, n.op, n.inputs, n.attrs, out=n.out)
        consts[v.id] = t = g.constants[-1][1]
        log.append(f"%{n.out.name} = {n.op.name}({', '.join(_names(n))}) -> constant "
                   f"{list(t.shape)}")
    return g


def _weight_view(n: Node, use: dict[int, list[Node]]) -> bool:
    readers = use.get(n.out.id, ())
    return n.op.kind.is_transform and bool(readers) and all(
        u.op is Ops.linear and u.inputs[1] is n.out and
        not any(x is n.out for x in u.inputs[:1] + u.inputs[2:]) for u in readers)


def _names(n: Node) -> list[str]:
    return [f"%{x.name}" if isinstance(x, Value) else repr(x) for x in n.inputs]


def eliminate_common(g: Graph, log: list[str]) -> Graph:
    """Common subexpressions: a node that computes what an earlier node computes (the same op on
    the same operand values and scalars, equal attributes, the same result dtype and dims) is
    dropped and its readers read the earlier result (HuggingFace BERT builds the same additive
    attention mask in every layer; two convolutions of one input in NHWC permute it twice).
    Eager steps are never merged (an ATen op run by PyTorch may be random or stateful). Leaves:
    no two nodes compute the same thing."""
    first: dict = {}
    for n in list(g.nodes):
        if n.op is Ops.eager:
            continue
        try:
            key = _hash_key((n.op.name, n.inputs, dict(n.attrs), n.out.dtype, g.dims(n.out)))
            seen = first.setdefault(key, n)
        except TypeError:   # an attribute that cannot be compared by value
            continue
        if seen is not n:
            replace_value(g, n.out, seen.out)
            g.nodes.remove(n)
            log.append(f"%{n.out.name} = {n.op.name}(...) is %{seen.out.name}")
    return g


def _hash_key(x):
    """``x`` as a hashable key equal only for equal values: Values by identity, floats by
    spelling (``0.0`` and ``-0.0`` differ; ``1`` and ``1.0`` and ``True`` differ too), lists and
    dicts by their items. Raises ``TypeError`` for what has no such key."""
    if isinstance(x, Value):
        return ("value", x.id)
    if isinstance(x, (bool, int, float, complex)):
        return (type(x).__name__, repr(x))
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(_hash_key(a) for a in x))
    if isinstance(x, dict):
        return ("dict", tuple(sorted((k, _hash_key(v)) for k, v in x.items())))
    if isinstance(x, torch.Tensor):
        raise TypeError("tensor attribute")
    hash(x)
    return (type(x).__name__, x)


def eliminate_dead(g: Graph, log: list[str]) -> Graph:
    """Drop nodes whose result nothing reads (and that are not outputs), then constants nothing
    reads. Leaves: every node and constant is used."""
    live = {v.id for v in g.outputs}
    kept = []
    for n in reversed(g.nodes):
        if n.out.id in live:
            kept.append(n)
            live.update(x.id for x in n.tensor_inputs())
        else:
            log.append(f"dead %{n.out.name} = {n.op.name}")
    g.nodes = kept[::-1]
    dead = [v for v, _ in g.constants if v.id not in live]
    if dead:
        ids = {v.id for v in dead}
        g.constants = [(v, t) for v, t in g.constants if v.id not in ids]
        g.inputs = [v for v in g.inputs if v.id not in ids]
        log.append(f"dropped {len(dead)} unused constants")
    return g
