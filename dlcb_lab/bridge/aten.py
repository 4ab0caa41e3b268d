"""PyTorch bridge, the lowering driver (paper §2.1): an exported ATen graph -> DLCB IR.

Lowerings are registered per ATen overload packet (``bridge.registry``; ``aten.add`` serves
``add.Tensor`` and ``add.Scalar``): the opset of ``torch.export``'s default IR, documented by
PyTorch (native_functions.yaml), instead of the open set of torch functions, methods, operators
and modules a tracer of Python meets. A node's ``args`` and ``kwargs`` are bound against the
lowering's signature, which follows the ATen schema (``self`` -> ``input``); a mismatch or a value
the lowering does not support raises ``UnsupportedOp``. In-place overloads (``relu_``,
``add_``) are functionalized (``bridge.functionalize``). Nodes that compute on sizes
(``aten.sym_size``, size arithmetic) give dimension expressions (``bridge.sizes``), so
``x.view(x.size(0), -1)`` stays symbolic; export's ranges and the module code's guards become
host checks (``bridge.guards``). Every error names the node, its ATen target and the user's
source line; every unsupported node is listed in one error.
"""

from __future__ import annotations

import inspect
import operator
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch._higher_order_ops.wrap import wrap_with_autocast

from ..dims import Lit
from ..errors import DLError, UnsupportedOp
from ..ir.graph import Graph, Value
from ..ir.ops import Ops
from ..ir.ops.eager import Operand
from . import ops  # noqa: F401  (registers every lowering)
from .capture import Captured, input_dims, is_symbolic
from .common import Cx, NoDimForm, NoFallback, Unavailable, find
from .functionalize import functionalize
from .guards import code_guards, input_relations, pin, ranges
from .nodes import describe, packet, show, where
from .registry import lookup
from .sizes import NO_OPS, SIZE_PACKETS, SIZE_TARGETS, TENSORS, Spellings, on_sizes, to_dim

_NEW_FACTORIES = {"new_zeros", "new_ones", "new_full", "new_empty"}


def lowering(n: fx.Node) -> tuple[Callable, bool] | None:
    """(lowering, in place) of an ATen node, or None when DLCB has none."""
    name = packet(n)
    return None if name is None else lookup(name)


def supported(n: fx.Node) -> bool:
    """Whether ``n`` lowers (size-level nodes, tuple access and autocast regions always do)."""
    if n.op != "call_function" or n.target in SIZE_TARGETS or n.target is operator.getitem or \
            n.target is wrap_with_autocast:
        return True
    return packet(n) in SIZE_PACKETS or lowering(n) is not None


def unsupported_nodes(graph: fx.Graph, folded: set = frozenset()) -> list[str]:
    """One line per node no lowering handles (``folded`` ones aside): the node, its ATen target
    and source line."""
    return [f"  '{n.name}': {describe(n)} at {where(n)}" for n in graph.nodes
            if n not in folded and not supported(n)]


def _fold(graph: fx.Graph, tensors: dict, inputs: set) -> dict:
    """Nodes whose value depends on no user input, computed now by PyTorch on the parameters,
    buffers and constants (``tensors``): masks and tables built from literal sizes, in-place
    writes into them included (eager semantics, on tensors no caller sees). Not folded: random
    ops, and in-place ops on a parameter or buffer (the module's own tensor)."""
    live, out = set(inputs), {}
    for n in graph.nodes:
        if n.op != "call_function":
            continue
        deps = list(n.all_input_nodes)
        stand_in = {}
        if packet(n) in _NEW_FACTORIES and deps[:1] == [n.args[0]] and \
                n.args[0] not in deps[1:]:   # x.new_zeros(size): x gives only dtype and device
            val = n.args[0].meta.get("val")
            if isinstance(val, torch.Tensor):
                stand_in[n.args[0]] = torch.empty(0, dtype=val.dtype)
                deps = deps[1:]
        tags = getattr(n.target, "tags", ())
        mutates_param = _mutates(n) and isinstance(n.args[0], fx.Node) and n.args[0] in tensors
        if any(a in live or (a not in tensors and a not in out) for a in deps) or \
                torch.Tag.nondeterministic_seeded in tags or mutates_param or not deps and \
                not stand_in and packet(n) is None:
            live.add(n)
            continue
        args, kwargs = fx.node.map_arg((n.args, n.kwargs),
                                       lambda a: stand_in.get(a, out.get(a, tensors.get(a))))
        with torch.no_grad():
            out[n] = n.target(*args, **kwargs)
    return out


# --- graph lowering --------------------------------------------------------------------------------

def lower_to_ir(cap: Captured, fallback: bool = False) -> Graph:
    """Build a DLCB IR graph from a captured module: the user inputs (named as ``forward``'s
    parameters, dims from the dynamic spec), then parameters, buffers and constants as graph
    constants of static shape, created when first used. ``fallback``: a node without a lowering
    (or whose lowering refuses its arguments) becomes an ``eager`` op, run by PyTorch; else one
    ``UnsupportedOp`` lists every such node."""
    from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

    ep = cap.program
    g = Graph()
    env: dict[fx.Node, Any] = {}
    symbols: dict[Any, Any] = {}   # export's size symbols -> graph dims
    nodes = {n.name: n for n in cap.graph.nodes if n.op == "placeholder"}
    consts: dict[fx.Node, tuple[str, torch.Tensor]] = {}
    user = 0
    for s in ep.graph_signature.input_specs:
        n = nodes.get(s.arg.name)
        if s.kind is InputKind.USER_INPUT and isinstance(s.arg, ConstantArgument):
            if n is not None:   # a non-tensor argument: a constant of the trace
                env[n] = s.arg.value
        elif s.kind is InputKind.USER_INPUT:
            ex = cap.examples[user]
            env[n] = g.input(cap.names[user], input_dims(ex, cap.spec.get(user, {})), ex.dtype)
            g.examples.update((d.name, int(size)) for d, size in zip(g.dims(env[n]), ex.shape)
                              if not isinstance(d, Lit))
            for s_, d in zip(n.meta["val"].shape, g.dims(env[n])):
                if is_symbolic(s_) and s_.node.expr.is_Symbol:
                    symbols.setdefault(s_.node.expr, d)
            user += 1
        elif s.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            t = ep.state_dict[s.target] if s.target in ep.state_dict else ep.constants[s.target]
            consts[n] = (s.target, t)
        else:
            raise UnsupportedOp(f"module input '{s.arg.name}' of kind {s.kind.name}")
    input_relations(g, cap, env, symbols)
    for spec in ep.graph_signature.output_specs:
        if spec.kind is not OutputKind.USER_OUTPUT:
            raise UnsupportedOp(f"the module mutates {spec.kind.name.lower().replace('_', ' ')} "
                                f"'{spec.target}' (in training mode?): compiled modules are "
                                f"functional")
    folded = _fold(cap.graph, {n: t for n, (_, t) in consts.items()}, set(env))
    bad = unsupported_nodes(cap.graph, set(folded))
    if bad and not fallback:
        raise UnsupportedOp(f"{len(bad)} ATen node{'s' * (len(bad) > 1)} not supported by DLCB "
                            f"IR:\n" + "\n".join(bad))
    for n, val in folded.items():   # tensors: graph constants on first use
        if isinstance(val, torch.Tensor):
            consts[n] = (n.name, val)
        else:
            env[n] = val
    spell = Spellings(g)
    late = [p for p in cap.pins if p[2] > 1]   # pinned after the graph's own constraints
    pin(g, cap, [p for p in cap.pins if p[2] <= 1])   # before: ops read a 0 or 1 as torch did
    for n in cap.graph.nodes:
        if n.op == "placeholder" or n in folded:
            continue
        if n.op == "get_attr" and isinstance(getattr(ep.graph_module, n.target, None),
                                             fx.GraphModule):
            env[n] = getattr(ep.graph_module, n.target)   # a region's graph (wrap_with_autocast)
            continue
        try:
            try:
                _lower_node(g, n, env, consts, spell)
            except UnsupportedOp as err:
                if not fallback or n.op != "call_function" or _mutates(n) or \
                        isinstance(err, NoFallback):
                    raise
                try:
                    if n.target is operator.getitem:   # an item the producer's lowering left
                        env[n] = _eager(g, n.args[0], env, consts, symbols, str(err.msg),
                                        only=n.args[1])
                    else:
                        env[n] = _eager(g, n, env, consts, symbols, str(err.msg))
                except NoDimForm as no:   # the lowering's refusal says more
                    raise NoDimForm(err.msg, no.symbols) from None
        except DLError as err:
            raise err.locate(describe(n), n.name, where(n)) from None
    pin(g, cap, late)
    ranges(g, cap, symbols)
    code_guards(g, cap, symbols)
    return g


def _mutates(n: fx.Node) -> bool:
    """An in-place or out= overload: eager would write a buffer the compiled program owns."""
    schema = getattr(n.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _eager(g: Graph, n: fx.Node, env: dict, consts: dict, symbols: dict, reason: str,
           only: int | None = None) -> Any:
    """``n`` as an ``eager`` op: its tensor arguments operands (parameters and buffers too), the
    rest a template; its result shape export's, in graph dims. An op with several results is a
    tuple (or list) of eager ops, one per tensor result, each taking its ``item``; a
    nondeterministic one stays an ``UnsupportedOp`` (two calls would draw different values), as
    does a result whose size export could not derive from the inputs' (data-dependent:
    ``nonzero``) or that is no tensor. ``only``: just that result (one the node's lowering left
    uncomputed, such as the indices of ``max(x, dim)``)."""
    if not isinstance(n.target, torch._ops.OpOverload) or n.target.namespace != "aten":
        raise UnsupportedOp(f"{reason} (and no ATen operator to run eagerly in its place)")
    val = n.meta.get("val")
    several = isinstance(val, (tuple, list)) and bool(val) and \
        all(isinstance(x, torch.Tensor) or x is None for x in val)
    if not isinstance(val, torch.Tensor) and not several:
        raise UnsupportedOp(f"{describe(n)} has no lowering and returns "
                            f"{type(val).__name__}, not tensors: it cannot run eagerly "
                            f"between compiled ops ({reason})")
    if several and only is None and _random(n):
        raise UnsupportedOp(f"{describe(n)} has no lowering and returns several random "
                            f"tensors: it cannot run eagerly once per result ({reason})")
    operands: list[Value] = []

    def template(a: Any) -> Any:
        if isinstance(a, fx.Node):
            v = _value(g, env, consts, a) if a in env or a in consts else None
            if isinstance(v, Value):
                operands.append(v)
                return Operand(len(operands) - 1)
            return v
        if isinstance(a, (tuple, list)):
            return type(a)(template(x) for x in a)
        return a

    args = template(tuple(n.args))
    kwargs = tuple((k, template(v)) for k, v in n.kwargs.items())

    def one(t: torch.Tensor, item: int | None) -> Value:
        out_shape = tuple(to_dim(s, symbols, describe(n)) for s in t.shape)
        return g.apply(Ops.eager, *operands, name=n.name if item is None else f"{n.name}_{item}",
                       where=where(n), target=describe(n), args=args, kwargs=kwargs,
                       out_shape=out_shape, dtype=t.dtype, reason=reason.splitlines()[0],
                       **({} if item is None else {"item": item}))

    if not several:
        return one(val, None)
    if only is not None:
        return one(val[only], only)
    return type(val)(one(t, j) if isinstance(t, torch.Tensor) else None
                     for j, t in enumerate(val))


def _value(g: Graph, env: dict, consts: dict, a: fx.Node) -> Any:
    """``a``'s value in the graph; a parameter, buffer or constant becomes a graph constant on
    first use."""
    if a not in env and a in consts:
        env[a] = g.constant(*consts[a])
    return env[a]


def _random(n: fx.Node) -> bool:
    """A node whose results are random: a nondeterministic op (tagged so), unless its schema's
    ``train`` flag is False in this call (``lstm``'s dropout is off in inference)."""
    if torch.Tag.nondeterministic_seeded not in getattr(n.target, "tags", ()):
        return False
    schema = getattr(n.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    if "train" in names:
        i = names.index("train")
        train = n.kwargs.get("train", n.args[i] if i < len(n.args) else True)
        return train is not False
    return True


def _lower_node(g: Graph, n: fx.Node, env: dict, consts: dict, spell: Spellings) -> None:
    args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: _value(g, env, consts, a))
    if n.target is operator.getitem:   # a tuple's item, computed or not (``Unavailable``)
        env[n] = args[0][args[1]]
        if isinstance(env[n], Unavailable) and n.users:   # eager computes it (lower_to_ir)
            raise UnsupportedOp(f"{env[n].what}: not computed by the lowering")
        return
    used = find((args, tuple(kwargs.values())), Unavailable)
    if used is not None and packet(n) not in NO_OPS:   # export's metadata checks compute nothing
        raise NoFallback(f"'{n.name}' at {where(n)}: uses {used.what}, which DLCB does not "
                         f"compute")
    if n.op == "output":
        outs = list(args[0])
        if not all(isinstance(o, Value) for o in outs):
            raise UnsupportedOp("module outputs must be tensors, not "
                                f"{[type(o).__name__ for o in outs]}")
        g.set_outputs(outs)
        return
    if n.op != "call_function":
        raise UnsupportedOp(f"{n.op} node {n.target!r}")
    t, name = n.target, packet(n)
    if t is wrap_with_autocast:
        env[n] = _autocast_region(g, n, args, consts, spell)
        return
    size = on_sizes(g, n, t, name, args, kwargs, spell)
    if size is not TENSORS:
        env[n] = size
        return
    hit = lowering(n)
    if hit is None:
        raise UnsupportedOp(f"{describe(n)}: no DLCB lowering")
    fn, inplace = hit
    out = call_lowering(Cx(g, n.name, where(n)), name, fn, args, kwargs)
    if inplace:
        out = functionalize(g, n, env, args[0], out)
    env[n] = out


def _autocast_region(g: Graph, n: fx.Node, args: tuple, consts: dict, spell: Spellings) -> Any:
    """``wrap_with_autocast`` (export's region for ``with torch.autocast(...)``) with autocast
    off (EfficientViT computes its linear attention so): the region's own graph, lowered in
    place on the operands; autocast on (ops cast to a lower precision) is refused by name."""
    device, dtype, enabled, _, region, *operands = args
    if enabled:
        raise UnsupportedOp(f"'{n.name}' at {where(n)}: an autocast region on {device} in "
                            f"{dtype} (regions with autocast off lower)")
    env = dict(zip([m for m in region.graph.nodes if m.op == "placeholder"], operands))
    for m in region.graph.nodes:
        if m.op == "output":
            return fx.node.map_arg(m.args[0], env.__getitem__)
        if m.op != "placeholder":
            _lower_node(g, m, env, consts, spell)
    raise UnsupportedOp(f"'{n.name}': an autocast region without an output")


def call_lowering(cx: Cx, name: str, fn: Callable, args: tuple, kwargs: dict):
    """``fn(cx, *args, **kwargs)`` with the arguments bound to its signature first (so a mismatch
    is an ``UnsupportedOp`` naming the lowering)."""
    kwargs = {("input" if k == "self" else k): v for k, v in kwargs.items()}
    try:
        bound = inspect.signature(fn).bind(cx, *args, **kwargs)
    except TypeError as err:
        raise UnsupportedOp(f"arguments {show(args, kwargs)} do not fit "
                            f"{name}{_signature(fn)}: {err}") from None
    return fn(*bound.args, **bound.kwargs)


def _signature(fn: Callable) -> str:
    params = list(inspect.signature(fn).parameters.values())[1:]
    return "(" + ", ".join(str(p) for p in params) + ")"


def to_ir(module: torch.nn.Module, examples: Sequence[Any], dynamic: Any = False) -> Graph:
    """Capture and lower in one call (what ``dl.compile`` does before the passes)."""
    from .capture import capture

    examples = (examples,) if isinstance(examples, torch.Tensor) else tuple(examples)
    return lower_to_ir(capture(module, examples, None, dynamic))
