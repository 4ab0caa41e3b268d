"""Lowerings of the index ops (``index_select``, ``embedding``/``nn.Embedding``, ``gather``): an
input coordinate read from an index tensor (paper §4.3)."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import UnsupportedOp
from .common import refuse, tensor_arg, wrap_axis


def _l_index_select(cx, input, dim, index, *, out=None):
    refuse(out=(out, None))
    x = tensor_arg(input)
    return cx.apply("index_select", x, tensor_arg(index, "index"), dim=wrap_axis(dim, x.rank))


def _l_embedding(cx, input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False):
    if max_norm is not None:   # renormalizes the weight in place
        raise UnsupportedOp("embedding with max_norm (mutates the weight)")
    return cx.apply("embedding", tensor_arg(input), tensor_arg(weight, "weight"))


def _l_gather(cx, input, dim, index, *, sparse_grad=False, out=None):
    refuse(out=(out, None))
    x = tensor_arg(input)
    return cx.apply("gather", x, tensor_arg(index, "index"), dim=wrap_axis(dim, x.rank))


def _m_embedding(cx, mod: nn.Embedding, input):
    return _l_embedding(cx, input, cx.param(mod.weight, "weight"), max_norm=mod.max_norm)


LOWERINGS: dict[str, Callable] = {"index_select": _l_index_select, "embedding": _l_embedding,
                                  "gather": _l_gather}
FUNCTIONS: dict[Any, tuple[str, bool]] = {
    torch.index_select: ("index_select", False), F.embedding: ("embedding", False),
    torch.gather: ("gather", False)}
METHODS: dict[str, tuple[str, bool]] = {"index_select": ("index_select", False),
                                        "gather": ("gather", False)}
MODULES: dict[type, Callable] = {nn.Embedding: _m_embedding}
