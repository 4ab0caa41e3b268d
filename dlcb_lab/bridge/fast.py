"""The fast capture path (Stage 8): which modules may be exported statically and generalized by
DLCB's own solver instead of traced with symbolic sizes (``torch.export`` with ``Dim.AUTO`` axes
costs 2-5x a static export: most of it is SymInt arithmetic in the meta functions).

A static export bakes every size a Python line computes into the graph as a literal and takes
every branch on a size silently. It is sound to generalize exactly when no Python line of the
forward reads a size. ``certify`` proves that with ``torch.fx.symbolic_trace`` (0.01-0.03 s): it
traces the forward with proxies, so a branch on a tensor or a size raises, and a size read
(``x.shape``, ``x.size()``, ``len(x)``, ``x.dim()``) is a node of its graph. A module is
certified when the trace succeeds, no node reads a size or an attribute of a tensor, every call
is in ``FUNCTIONS`` / ``METHODS`` (torch functions that compute no size in Python) and every leaf
module (a ``torch.nn`` module the trace does not enter) is in ``LEAVES`` with the settings
``LEAVES`` allows (no ``Upsample``: ``interpolate`` computes its output size in Python; no
``AdaptiveAvgPool2d`` with a ``None`` size). The static graph must then hold only ``ATEN`` ops,
whose sizes DLCB's IR derives from its operands' dims: a literal size argument in it is the
code's own constant. Everything else (a Python branch on sizes, as in Swin; a size read, as in
ViT's patch count; transformers models, which symbolic_trace refuses) takes ``torch.export``.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["ATEN", "FUNCTIONS", "LEAVES", "METHODS", "certify", "check_graph"]


def _no_none(size: Any) -> bool:
    return size is not None and not (isinstance(size, (tuple, list)) and None in size)


LEAVES: dict[type, Any] = {
    nn.Conv1d: lambda m: m.padding_mode == "zeros", nn.Conv2d: lambda m: m.padding_mode == "zeros",
    nn.Conv3d: lambda m: m.padding_mode == "zeros",
    nn.BatchNorm1d: None, nn.BatchNorm2d: None, nn.BatchNorm3d: None,
    nn.LayerNorm: None, nn.GroupNorm: None, nn.Linear: None, nn.Identity: None,
    nn.ReLU: None, nn.ReLU6: None, nn.Hardswish: None, nn.Hardsigmoid: None, nn.SiLU: None,
    nn.Sigmoid: None, nn.Tanh: None, nn.GELU: None, nn.LeakyReLU: None, nn.ELU: None,
    nn.Dropout: None, nn.Flatten: None, nn.Softmax: None,
    nn.MaxPool2d: None, nn.AvgPool2d: None,
    nn.AdaptiveAvgPool2d: lambda m: _no_none(m.output_size),
    nn.AdaptiveAvgPool1d: lambda m: _no_none(m.output_size),
}
"""Leaf modules whose forward computes no size in Python, each with the condition on its
settings (None: any). Training mode changes the ops, not the sizes: the static graph holds what
the symbolic one does (a random op is no ``ATEN`` op and takes export)."""

FUNCTIONS = frozenset({
    operator.add, operator.mul, operator.sub, operator.truediv, operator.neg,
    torch.add, torch.mul, torch.sub, torch.cat, torch.flatten, torch.permute, torch.relu,
    torch.sigmoid, torch.tanh, F.relu, F.relu6, F.gelu, F.silu, F.hardswish, F.hardsigmoid,
    F.layer_norm, F.dropout,
})
"""Functions the forward may call (with any arguments: none of them computes a size)."""

METHODS = frozenset({"permute", "flatten", "contiguous", "relu", "sigmoid", "mean", "add",
                     "mul", "sum", "transpose"})
"""Tensor methods the forward may call."""

_WRAPPED = {"stochastic_depth"}   # torchvision.ops, torch.fx.wrap'ed: identity in eval
_A = torch.ops.aten
ATEN = frozenset({
    _A.conv1d.default, _A.conv2d.default, _A.conv3d.default, _A.batch_norm.default,
    _A.layer_norm.default, _A.group_norm.default, _A.linear.default, _A.relu.default,
    _A.relu_.default, _A.hardtanh.default, _A.hardtanh_.default, _A.hardswish.default,
    _A.hardswish_.default, _A.hardsigmoid.default, _A.hardsigmoid_.default, _A.silu.default,
    _A.silu_.default, _A.sigmoid.default, _A.tanh.default, _A.gelu.default,
    _A.leaky_relu.default, _A.elu.default, _A.dropout.default, _A.dropout_.default,
    _A.flatten.using_ints, _A.softmax.int, _A.max_pool2d.default, _A.avg_pool2d.default,
    _A.adaptive_avg_pool2d.default, _A.adaptive_avg_pool1d.default, _A.add.Tensor,
    _A.add_.Tensor, _A.mul.Tensor, _A.mul_.Tensor, _A.sub.Tensor, _A.div.Tensor,
    _A.neg.default, _A.cat.default, _A.permute.default, _A.mean.dim, _A.sum.dim_IntList,
    _A.transpose.int, _A.contiguous.default, _A.clone.default, _A.add.Scalar, _A.mul.Scalar,
})
"""The ATen ops a certified module's static export may hold (every size argument of them in a
certified graph is a literal of the code, not a size the trace read)."""


def certify(module: nn.Module) -> str | None:
    """None when ``module`` may take the fast path; else why not (for ``Captured.path``)."""
    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as err:   # a branch on a traced value, an untraceable call
        return f"torch.fx.symbolic_trace: {type(err).__name__}: {str(err).splitlines()[0]}"
    for n in gm.graph.nodes:
        if n.op == "call_module":
            leaf = gm.get_submodule(n.target)
            if type(leaf) not in LEAVES:
                return f"leaf module {type(leaf).__name__} ('{n.target}')"
            ok = LEAVES[type(leaf)]
            if ok is not None and not ok(leaf):
                return f"leaf module {type(leaf).__name__} ('{n.target}') with these settings"
        elif n.op == "call_function":
            if n.target not in FUNCTIONS and getattr(n.target, "__name__", "") not in _WRAPPED:
                return f"call of {getattr(n.target, '__name__', n.target)} ('{n.name}')"
        elif n.op == "call_method":
            if n.target not in METHODS:
                return f"method .{n.target}() ('{n.name}'): reads a size or is not known"
    return None


def check_graph(ep) -> str | None:
    """None when the static export holds only ``ATEN`` ops; else the first other one."""
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target not in ATEN:
            return f"the static export holds {n.target}"
    return None
