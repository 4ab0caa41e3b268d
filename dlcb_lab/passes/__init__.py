"""Graph passes (paper §2.2.1-2.2.3). Each pass is a function ``Graph -> Graph`` that rewrites the
graph in place, returns it, and states its contract in its docstring; ``run_passes`` applies them in
order and keeps a ``PassRecord`` per pass (what it changed, for the notebook layer).

Order: ``fold_constants`` (parameters-only subgraphs evaluated at compile time), ``rewrite``
(pattern rules as data: batch norm into the preceding convolution, identities removed),
``channels_last`` (convolutions in NHWC, as permutes in the IR), ``fold_constants`` again,
``eliminate_common`` (common subexpressions), ``eliminate_dead``, ``fuse`` (which shared values get a buffer), then
``assign_layouts`` (a layout for every value) and ``partition`` (library and generated regions,
the fused groups), which only record."""

from __future__ import annotations

import time
from typing import Callable

from ..config import Config
from ..ir.graph import Graph
from .core import PassRecord, eliminate_common, eliminate_dead, fold_constants
from .layout import assign_layouts, channels_last
from .partition import Partition, fuse, partition
from .rewrite import REWRITES, rewrite

PIPELINE: tuple[Callable[[Graph, list[str]], Graph], ...] = (
    fold_constants, rewrite, channels_last, fold_constants, eliminate_common, eliminate_dead, fuse,
    assign_layouts, partition)


def run_passes(g: Graph, config: Config | None = None) -> tuple[Graph, tuple[PassRecord, ...]]:
    """Apply ``PIPELINE`` to ``g`` under ``config`` (default: ``g.config``, which it becomes; the
    passes read it there); returns the graph and one record per pass."""
    g.config = g.config if config is None else config
    records = []
    for p in PIPELINE:
        log: list[str] = []
        t0 = time.perf_counter()
        g = p(g, log)
        records.append(PassRecord(p.__name__, tuple(log), time.perf_counter() - t0))
    return g, tuple(records)


__all__ = ["PIPELINE", "PassRecord", "Partition", "REWRITES", "assign_layouts", "channels_last",
           "eliminate_common", "eliminate_dead", "fold_constants", "fuse", "partition", "rewrite", "run_passes"]
