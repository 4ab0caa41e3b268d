"""PyTorch bridge, capture half (paper §2.1): trace a module with torch.fx and lower it to DLCB IR.

Inputs get symbolic shapes: an axis named in ``dynamic`` becomes a user dimension variable (rank 1),
every other axis the literal size of the example input. Size queries (``x.size(0)``, ``x.shape``)
become dimension expressions, so ``x.view(x.size(0), -1)`` stays symbolic. An op outside the
supported set raises ``UnsupportedOp`` naming the fx node and the user's source line.
"""

from __future__ import annotations

import linecache
import operator
import os
import re
import sys
from typing import Any, Mapping, Sequence

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

from ..dims import Expr, lit, var
from ..ir.graph import Graph, Value

DynamicSpec = Mapping[int, Mapping[int, str]]
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_RESERVED = re.compile(r"^(_.*|t|rf|[cr]\d+|p\d+|numel|out|step|i\d+|v\d+|x\d+|acc\d+)$")


class UnsupportedOp(NotImplementedError):
    """The traced program uses an op DLCB does not lower (yet)."""


_UNARY = {"relu", "neg", "exp", "sigmoid", "tanh", "abs"}
_BINARY = {"add", "sub", "mul", "div", "maximum", "minimum"}
_REDUCE = {"sum", "mean", "amax"}

_FUNCTIONS: dict[Any, str] = {
    torch.relu: "relu", F.relu: "relu", torch.neg: "neg", operator.neg: "neg", torch.exp: "exp",
    torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
    torch.abs: "abs", operator.abs: "abs",
    torch.add: "add", operator.add: "add", operator.iadd: "add", torch.sub: "sub",
    operator.sub: "sub", operator.isub: "sub", torch.mul: "mul", operator.mul: "mul",
    operator.imul: "mul", torch.div: "div", operator.truediv: "div", operator.itruediv: "div",
    torch.maximum: "maximum", torch.minimum: "minimum",
    torch.reshape: "reshape", torch.flatten: "flatten", torch.permute: "permute",
    torch.transpose: "transpose", torch.sum: "sum", torch.mean: "mean", torch.amax: "amax",
}
_MODULES: dict[type, str] = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh",
                             nn.Flatten: "flatten", nn.Identity: "identity"}
_METHODS = _UNARY | _BINARY | _REDUCE | {"view", "reshape", "flatten", "permute", "transpose",
                                         "contiguous", "size"}


_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


class _Tracer(fx.Tracer):
    """fx tracer that records the user's source line of each node (``meta["dlcb_where"]``).

    fx's own ``record_stack_traces`` symbolizes whole stacks (about 1.5 s on first use); one frame
    walk per node is enough to name the line an error should point at.
    """

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        f = sys._getframe(1)
        while f is not None and (f.f_code.co_filename.startswith(_TORCH_DIR)
                                 or f.f_code.co_filename.startswith(_OWN_DIR)):
            f = f.f_back
        if f is not None:
            code = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
            node.meta["dlcb_where"] = (f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} "
                                       f"in {f.f_code.co_name}: {code}")
        return node


def trace(module: nn.Module) -> fx.GraphModule:
    tracer = _Tracer()
    graph = tracer.trace(module)
    return fx.GraphModule(tracer.root, graph)


def _where(node: fx.Node) -> str:
    return node.meta.get("dlcb_where", node.name)


def input_dims(example: torch.Tensor, spec: Mapping[int, str] | None, i: int) -> list[Expr]:
    spec = dict(spec or {})
    dims: list[Expr] = []
    for k, n in enumerate(example.shape):
        name = spec.pop(k, None) if k in spec else spec.pop(k - example.dim(), None)
        if name is None:
            dims.append(lit(int(n)))
            continue
        if not isinstance(name, str) or not name.isidentifier() or _RESERVED.match(name):
            raise ValueError(f"input {i} axis {k}: dim name {name!r} must be an identifier not "
                             f"starting with '_' nor reserved ({_RESERVED.pattern})")
        dims.append(var(name, 1))
    if spec:
        raise ValueError(f"input {i}: dynamic axes {sorted(spec)} out of range for rank "
                         f"{example.dim()}")
    return dims


def _norm_axes(dims: Any, rank: int) -> tuple[int, ...]:
    if dims is None:
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = (dims,)
    return tuple(sorted(d % rank if rank else d for d in dims))


def lower_to_ir(gm: fx.GraphModule, examples: Sequence[torch.Tensor],
                dynamic: DynamicSpec) -> Graph:
    """Build a DLCB IR graph from a traced module (inputs in placeholder order)."""
    g = Graph()
    env: dict[fx.Node, Any] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(examples):
        raise ValueError(f"module takes {len(placeholders)} inputs, {len(examples)} examples given")
    for i, (n, ex) in enumerate(zip(placeholders, examples)):
        if not isinstance(ex, torch.Tensor):
            raise TypeError(f"example input {i} is {type(ex).__name__}, expected a torch.Tensor")
        env[n] = g.input(n.name, input_dims(ex, dynamic.get(i), i), ex.dtype)

    def arg(a):
        return fx.node.map_arg(a, lambda n: env[n])

    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "get_attr":   # parameters and buffers: constant inputs of static shape
            t = _fetch_attr(gm, n.target)
            if not isinstance(t, torch.Tensor):
                raise UnsupportedOp(f"fx node '{n.name}': attribute {n.target!r} is a "
                                    f"{type(t).__name__}, not a tensor")
            env[n] = g.constant(n.name, t)
            continue
        if n.op == "output":
            outs = arg(n.args[0])
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            if not all(isinstance(o, Value) for o in outs):
                raise UnsupportedOp("module outputs must be tensors")
            g.set_outputs(outs)
            continue
        args, kwargs = arg(n.args), arg(n.kwargs)
        where = _where(n)
        if n.op == "call_function":
            if n.target is getattr:
                env[n] = _getattr(args[0], args[1], n, where, g)
                continue
            if n.target is operator.getitem:
                env[n] = args[0][args[1]]
                continue
            if all(not isinstance(a, Value) for a in args) and n.target in (
                    operator.add, operator.mul, operator.sub, operator.floordiv, operator.mod):
                env[n] = n.target(*args)   # size arithmetic on dimension expressions
                continue
            op = _FUNCTIONS.get(n.target)
        elif n.op == "call_method":
            if n.target == "size":
                x = args[0]
                env[n] = tuple(g.dims(x)) if len(args) == 1 and "dim" not in kwargs else \
                    g.dims(x)[(args[1] if len(args) > 1 else kwargs["dim"])]
                continue
            op = n.target if n.target in _METHODS else None
        elif n.op == "call_module":
            mod = gm.get_submodule(n.target)
            op = _MODULES.get(type(mod))
            if op == "flatten":
                kwargs = {"start_dim": mod.start_dim, "end_dim": mod.end_dim}
        else:
            op = None
        if op is None:
            raise UnsupportedOp(f"fx node '{n.name}' ({n.op} {_target_name(n)}) at {where}: not "
                                f"supported by DLCB IR")
        env[n] = _emit(g, op, args, kwargs, n.name, where)
    return g


def _fetch_attr(gm: fx.GraphModule, path: str):
    obj = gm
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _target_name(n: fx.Node) -> str:
    t = n.target
    return t if isinstance(t, str) else getattr(t, "__name__", repr(t))


def _getattr(x, attr, n, where, g):
    if isinstance(x, Value) and attr == "shape":
        return tuple(g.dims(x))
    raise UnsupportedOp(f"fx node '{n.name}': getattr {attr!r} at {where}")


def _emit(g: Graph, op: str, args: tuple, kwargs: dict, name: str, where: str) -> Value:
    def bad(msg):
        return UnsupportedOp(f"{op} '{name}' at {where}: {msg}")

    x = args[0]
    if op == "identity" or op == "contiguous":
        return x
    if op in _UNARY:
        if kwargs.get("inplace"):
            kwargs = {}
        if len(args) != 1 or kwargs:
            raise bad(f"unsupported arguments {args[1:]} {kwargs}")
        return g.apply(op, x, name=name, where=where)
    if op in _BINARY:
        if "alpha" in kwargs or "rounding_mode" in kwargs or len(args) != 2:
            raise bad(f"unsupported arguments {kwargs}")
        a, b = args
        for s in (a, b):
            if not isinstance(s, (Value, int, float)) or isinstance(s, bool):
                raise bad(f"operand {s!r} is not a tensor or a Python number")
        a = a if isinstance(a, Value) else float(a)
        b = b if isinstance(b, Value) else float(b)
        return g.apply(op, a, b, name=name, where=where)
    if op in ("view", "reshape"):
        shape = args[1:] if len(args) > 2 or not isinstance(args[1], (tuple, list)) else args[1]
        shape = kwargs.get("shape", shape)
        return g.apply("reshape", x, shape=tuple(shape), name=name, where=where)
    if op == "flatten":
        start = kwargs.get("start_dim", args[1] if len(args) > 1 else 0) % max(x.rank, 1)
        end = kwargs.get("end_dim", args[2] if len(args) > 2 else -1) % max(x.rank, 1)
        dims = g.dims(x)
        merged: Expr = lit(1)
        for d in dims[start:end + 1]:
            merged = merged * d
        return g.apply("reshape", x, shape=(*dims[:start], merged, *dims[end + 1:]), name=name,
                       where=where)
    if op == "permute":
        perm = args[1:] if len(args) > 2 or not isinstance(args[1], (tuple, list)) else args[1]
        perm = kwargs.get("dims", perm)
        return g.apply("permute", x, dims=tuple(p % x.rank for p in perm), name=name, where=where)
    if op == "transpose":
        a0 = kwargs.get("dim0", args[1] if len(args) > 1 else None) % x.rank
        a1 = kwargs.get("dim1", args[2] if len(args) > 2 else None) % x.rank
        perm = list(range(x.rank))
        perm[a0], perm[a1] = perm[a1], perm[a0]
        return g.apply("permute", x, dims=tuple(perm), name=name, where=where)
    if op in _REDUCE:
        dims = kwargs.get("dim", args[1] if len(args) > 1 else None)
        keep = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
        if set(kwargs) - {"dim", "keepdim"}:
            raise bad(f"unsupported arguments {kwargs}")
        return g.apply(op, x, dims=_norm_axes(dims, x.rank), keepdim=keep, name=name, where=where)
    raise bad("no lowering")  # pragma: no cover
