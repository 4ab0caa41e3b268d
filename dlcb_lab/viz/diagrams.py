"""Diagrams (graphviz -> SVG) and expression renderings.

- ``graph_svg``: the IR graph. Ops are nodes, values are edges labelled with their shapes after the
  solve (``[N, 64, (H+1)//2, (W+1)//2]``); inputs, constants and outputs have their own shapes;
  each partition step (generated kernel or library call) is a coloured cluster. Graphs of more
  than ``FOLD_AT`` ops fold structurally identical consecutive blocks into one "… N ops hidden"
  node (``fold_units``); where more than ``LOOSE_AT`` ops stay drawn, blocks of the same ops that
  read a different number of earlier results (a DenseNet layer's growing concatenation) fold
  too, and say so. The values a folded block passes to one later op are one edge.
- ``constraint_dag``: the interned expression DAG behind a set of constraints, each node drawn
  once; constraints are dashed edges between their two roots; provenance is each node's and
  edge's SVG ``<title>`` (shown on hover); trivial constraints (``a == a``) behind one
  "N trivial constraints hidden" node unless asked for.
- ``Expr``: text, HTML and ``text/latex`` (through sympy, with ``//`` as a floor and ``%`` as
  ``\\bmod``, kept unevaluated so the canonical form is what is shown).
"""

from __future__ import annotations

import functools
import re
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from ..dims import Constraint, Constraints, DimKind, Expr, FloorDiv, Lit, Mod, Prod, Shape, Sum, \
    Var, kind_of
from ..ir.graph import Graph, Node, Value
from ..ir.ops import OpKind
from ..passes.partition import inlined
from .render import Rendering, renders
from .style import LIGHT, block, esc, folded_table, kernel_id, scoped, table
from .tables import plural

if TYPE_CHECKING:
    import graphviz


def _graphviz():
    """The graphviz package, imported on first drawing: expression text, aliases and tables
    need no graphviz."""
    import graphviz

    return graphviz


NO_GRAPHVIZ = "no diagram: the graphviz package is not installed (the text form follows)"


def _needs_graphviz(fn: Callable[[object], Rendering]) -> Callable[[object], Rendering]:
    """A diagram renderer that falls back to the object's text form, saying why, where the
    graphviz package is missing (so a report renders on a machine without the ``viz`` extra)."""

    @functools.wraps(fn)
    def rendered(obj):
        try:
            return fn(obj)
        except ImportError as err:
            if err.name != "graphviz":
                raise
            html = f'<div class="muted">{esc(NO_GRAPHVIZ)}</div><pre>{esc(repr(obj))}</pre>'
            return Rendering(block(html), title=type(obj).__name__)

    return rendered


FOLD_AT = 40
"""Graphs with more ops than this fold repeated blocks (``graph_svg(fold=None)``)."""
LOOSE_AT = 150
"""Where more ops than this stay drawn after folding identical blocks, blocks that differ only in
which earlier results they read fold too (``fold_units``)."""
MIN_FOLD_OPS = 4
"""A repeated block is folded only when it hides at least this many ops."""
MAX_PERIOD = 32
"""Longest block (in steps, or ops without a partition) the fold search tries."""
ALIAS_AT = 22
"""A dim whose compact spelling is longer than this is shown as an alias (``H₁``) with a legend."""
EAGER_ATTR = "eager"
"""A node attribute (``node.attrs[EAGER_ATTR]`` true) or op name marking an op that runs eagerly
in torch (a fallback); such nodes are drawn dashed in the fail colour."""

COLORS = {k: LIGHT[k] for k in ("literal", "named", "residual", "library", "generated", "fail",
                                 "muted", "input", "highlight")}
"""The stylesheet's light palette (``style.LIGHT``) as graphviz colours; fills add an alpha
suffix. Inline, ``SVG_CSS`` maps each to the theme's colour."""

SVG_CSS = scoped("""
S .dl-svg { color: var(--dl-fg); overflow-x: auto; max-width: 100%; }
S .dl-svg svg { max-width: none; height: auto; }
S .dl-svg g.graph > polygon[fill="white"] { fill: transparent; stroke: none; }
S .dl-svg [stroke="black"] { stroke: currentColor; }
S .dl-svg [fill="black"], S .dl-svg text:not([fill]) { fill: currentColor; }
""" + "".join(f'S .dl-svg [stroke="{c}"] {{ stroke: var(--dl-{k}); }} '
              f'S .dl-svg text[fill="{c}"] {{ fill: var(--dl-{k}); }}\n'
              for k, c in COLORS.items()))
"""Inline-SVG rules: graphviz's black and white follow the theme's foreground and background, and
each palette colour (``COLORS``, fixed in the SVG) the theme's variable of the same name (light or
dark). The bare SVG (``image/svg+xml``, shown without this stylesheet) keeps its opaque white
background and the light palette, so it reads on any page."""


# -- SVG plumbing ----------------------------------------------------------------------------------
_GROUP = re.compile(r'(<g id="([^"]+)" class="(?:node|edge|cluster)">\s*<title>)[^<]*(</title>)')


def _svg(dot: graphviz.Digraph, titles: Mapping[str, str]) -> str:
    """``dot`` as SVG; each node, edge and cluster whose ``id`` is in ``titles`` gets that text as
    its ``<title>`` (the hover text)."""
    svg = dot.pipe(format="svg", encoding="utf-8")

    def sub(m: re.Match) -> str:
        t = titles.get(m.group(2))
        return m.group(0) if t is None else f"{m.group(1)}{esc(t)}{m.group(3)}"

    return _GROUP.sub(sub, svg)


def svg_html(svg: str) -> str:
    """An SVG document as an inline HTML fragment: no XML prolog, doctype or namespace URLs (an
    inline ``<svg>`` needs none), theme-aware colours (``SVG_CSS``)."""
    body = svg[svg.find("<svg"):]
    body = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", body, count=2)
    body = re.sub(r"<!--.*?-->", "", body, flags=re.S)
    return f'<style>{SVG_CSS}</style><div class="dl-svg">{body}</div>'


def _fill(kind: str) -> str:
    return COLORS[kind] + "22"


# -- dims spelled compactly ------------------------------------------------------------------------
def dim_text(e: Expr) -> str:
    """``e`` in Python syntax without spaces or redundant parentheses: ``((H+1)//2+1)//2``,
    ``18*(H//6)`` (``*``, ``//`` and ``%`` share one precedence level, left to right)."""
    return _compact(e, 0)


# precedence context: 0 top, 1 term of +, 2 left of * // %, 3 right of *, 4 right of // %
def _compact(e: Expr, prec: int) -> str:
    if isinstance(e, Lit):
        return f"({e.value})" if e.value < 0 and prec else str(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Shape):
        return "[" + ", ".join(_compact(x, 0) for x in e.items) + "]"
    if isinstance(e, Prod):
        first = 3 if prec == 3 else 2    # after a ``*`` even the first factor is a right operand
        s = "*".join(_compact(f, 3 if k else first) for k, f in enumerate(e.factors))
        return f"({s})" if prec >= 4 else s
    if isinstance(e, (FloorDiv, Mod)):
        op = "//" if isinstance(e, FloorDiv) else "%"
        s = f"{_compact(e.num, 2)}{op}{_compact(e.den, 4)}"
        return f"({s})" if prec >= 3 else s
    if isinstance(e, Sum):
        parts = []
        for m, c in e.terms:
            parts.append(_compact(m, 1) if c == 1 else f"-{_compact(m, 3)}" if c == -1 else
                         f"{c}*{_compact(m, 3)}")
        if e.const:
            parts.append(str(e.const))
        s = parts[0]
        for p in parts[1:]:
            s += p if p.startswith("-") else f"+{p}"
        return f"({s})" if prec >= 2 else s
    return repr(e)


def _full(dims: Iterable[Expr]) -> str:
    return "[" + ", ".join(dim_text(d) for d in dims) + "]"


_SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


class _Aliases:
    """Short names for long dims (``H₁ = (H+1)//2``), numbered per leading variable."""

    def __init__(self, limit: int = ALIAS_AT):
        self.limit = limit
        self.names: dict[Expr, str] = {}
        self.count: dict[str, int] = {}

    def dim(self, e: Expr) -> str:
        s = dim_text(e)
        if len(s) <= self.limit:
            return s
        if e not in self.names:
            base = min(e.free_vars) if e.free_vars else "d"
            self.count[base] = self.count.get(base, 0) + 1
            self.names[e] = f"{base}{str(self.count[base]).translate(_SUB)}"
        return self.names[e]

    def shape(self, dims: Iterable[Expr]) -> str:
        return "[" + ", ".join(self.dim(d) for d in dims) + "]"

    def legend(self) -> list[str]:
        return [f"{n} = {dim_text(e)}" for e, n in self.names.items()]


# -- the IR graph ----------------------------------------------------------------------------------
def is_eager(node: Node) -> bool:
    """True when ``node`` runs eagerly in torch (a fallback op), by ``EAGER_ATTR``."""
    return bool(node.attrs.get(EAGER_ATTR)) or node.op.name == EAGER_ATTR or \
        getattr(node.op.kind, "value", "") == EAGER_ATTR


@dataclass(frozen=True)
class Unit:
    """What folding compares: one partition step (its ops) or, without a partition, one op.
    ``label``: cluster title; ``kind``: "library", "generated" or "" (no partition)."""

    nodes: tuple[Node, ...]
    kind: str = ""
    label: str = ""
    title: str = ""
    value: str = ""       # the step's materialized value


@dataclass(frozen=True)
class Fold:
    """Units ``[start, start + period * repeats)`` are ``repeats`` copies of one block;
    every copy after the first is hidden behind one node. ``loose``: the copies repeat the block's
    ops, but may read other (or more) results of earlier steps (``fold_units``)."""

    start: int
    period: int
    repeats: int
    hidden_ops: int
    loose: bool = False

    @property
    def hidden(self) -> range:
        return range(self.start + self.period, self.start + self.period * self.repeats)


def _kernel_name(i: int, value: str) -> str:
    """The name ``kgen.infer.infer_kernels`` gives the kernel of the ``i``-th materialized value."""
    return f"dlcb_k{i}_" + "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in value)


def graph_units(g: Graph) -> list[Unit]:
    """``g``'s ops grouped into partition steps, in graph order (a library step holds the view
    ops the host applies to its operands); one unit per op when ``g`` has no partition. An op
    inlined into several kernels belongs to the first."""
    part = getattr(g, "partition", None)
    if part is None:
        return [Unit((n,)) for n in g.nodes]
    mats = g.materialized()
    index = {v.name: i for i, v in enumerate(mats)}
    by_name = {v.name: v for v in mats}
    ids = {v.id for v in mats}
    taken: set[int] = set()
    units = []
    for s in part.steps:
        v = by_name.get(s.value)
        members: list[Node] = []
        if v is not None and v.producer is not None:
            if s.kind == "library":
                n = v.producer
                for x in n.tensor_inputs():
                    members += g.view_chain(x)[1]
                members.append(n)
            else:
                members = [x.producer for x in inlined(g, v, ids)]
        members = [n for n in members if n.out.id not in taken]
        taken.update(n.out.id for n in members)
        if s.kind == "library":
            label = f"library: {' '.join(s.ops)}"
        else:
            label = _kernel_name(index.get(s.value, s.index), s.value)
        title = (f"step {s.index} ({s.kind}): %{s.value} <- {' '.join(s.ops)}; reads "
                 f"{', '.join('%' + r for r in s.reads)}")
        units.append(Unit(tuple(members), s.kind, label, title, s.value))
    rest = [n for n in g.nodes if n.out.id not in taken]   # dead or host-side ops outside every step
    return units + [Unit((n,)) for n in rest]


def _tokens(g: Graph, units: Sequence[Unit]) -> list[tuple]:
    """A translation-invariant structural token per unit: its kind and, per op, the op name and
    where each operand comes from (an op of this unit, the result of a unit so many steps back or
    one of its ops, a constant, an input)."""
    where: dict[int, tuple[int, int | str]] = {}
    for u, unit in enumerate(units):
        for k, n in enumerate(unit.nodes):
            where[n.out.id] = (u, "out" if unit.value == n.out.name else k)
    consts = {v.id for v, _ in g.constants}
    out = []
    for u, unit in enumerate(units):
        ops = []
        for n in unit.nodes:
            refs = []
            for x in n.tensor_inputs():
                if x.id in where:
                    pu, pk = where[x.id]
                    refs.append(("u", u - pu, pk))
                else:
                    refs.append(("c",) if x.id in consts else ("in",))
            ops.append((n.op.name, tuple(refs)))
        out.append((unit.kind, tuple(ops)))
    return out


def _loose_tokens(g: Graph, units: Sequence[Unit]) -> list[tuple]:
    """``_tokens`` with each operand read from another step reduced to "an earlier step's
    result" and an op's operands taken as a set: blocks of the same ops, wired alike inside each
    step, compare equal however many earlier results they read."""
    out = []
    for kind, ops in _tokens(g, units):
        out.append((kind, tuple((name, frozenset(r if r[0] != "u" or r[1] == 0 else ("earlier",)
                                                   for r in refs)) for name, refs in ops)))
    return out


def fold_units(g: Graph, units: Sequence[Unit], min_ops: int = MIN_FOLD_OPS,
               max_period: int = MAX_PERIOD, loose_at: int | None = LOOSE_AT) -> list[Fold]:
    """Runs of two or more consecutive, structurally identical blocks of units, chosen greedily by
    the number of ops they hide, non-overlapping. Identical: same op names and kinds, operands
    from the same relative positions (``_tokens``); shapes and attributes may differ. Where more
    than ``loose_at`` ops stay drawn (None: never), runs of the units left are then folded by
    ``_loose_tokens`` too (``Fold.loose``)."""
    size = [len(u.nodes) for u in units]
    free = [True] * len(units)
    folds = _fold_search(_tokens(g, units), size, free, min_ops, max_period, False)
    if loose_at is not None and len(g.nodes) - sum(f.hidden_ops for f in folds) > loose_at:
        folds += _fold_search(_loose_tokens(g, units), size, free, min_ops, max_period, True)
    return sorted(folds, key=lambda f: f.start)


def _fold_search(tok: Sequence, size: Sequence[int], free: list[bool], min_ops: int,
                 max_period: int, loose: bool) -> list[Fold]:
    """The greedy search of ``fold_units`` over the ``free`` units (marked taken as it folds)."""
    folds: list[Fold] = []
    n = len(tok)
    while True:
        best: Fold | None = None
        for p in range(1, min(max_period, n // 2) + 1):
            for i in range(n - 2 * p + 1):
                if not free[i]:
                    continue
                k = 1
                while i + (k + 1) * p <= n and tok[i + k * p:i + (k + 1) * p] == \
                        tok[i:i + p] and all(free[i + k * p:i + (k + 1) * p]):
                    k += 1
                if k < 2 or not all(free[i:i + p]):
                    continue
                hidden = sum(size[i + p:i + k * p])
                if hidden >= min_ops and (best is None or hidden > best.hidden_ops):
                    best = Fold(i, p, k, hidden, loose)
        if best is None:
            return folds
        folds.append(best)
        for j in range(best.start, best.start + best.period * best.repeats):
            free[j] = False


def drawn_edges(g: Graph, rep: Mapping[int, str], show_consts: bool
                ) -> list[tuple[str, str, list[Value]]]:
    """The value edges of the drawing, in order: (source node, consumer node, values). ``rep``:
    op result value id -> the node drawn for it (a fold's node for a hidden op). One edge per
    value and consumer, none inside a node; the values a fold's node passes to one consumer are
    one edge."""
    consts = {v.id for v, _ in g.constants}
    edges: dict[tuple, tuple[str, str, list[Value]]] = {}
    for n in g.nodes:
        dst = rep[n.out.id]
        for x in n.tensor_inputs():
            if x.producer is not None:
                src = rep[x.id]
            elif x.id not in consts or show_consts:
                src = f"v{x.id}"
            else:
                continue
            if src == dst:
                continue
            key = (src, dst) if src.startswith("fold") else (src, dst, x.id)
            e = edges.setdefault(key, (src, dst, []))
            if all(v.id != x.id for v in e[2]):
                e[2].append(x)
    return list(edges.values())


def graph_svg(g: Graph, fold: bool | None = None) -> str:
    """``g`` as an SVG diagram (see the module docstring). ``fold``: fold repeated blocks (None:
    when ``g`` has more than ``FOLD_AT`` ops)."""
    svg, _ = _graph(g, fold)
    return svg


def _unit(target: graphviz.Digraph, unit: Unit, ui: int, titles: dict, rep: dict,
          consts: set[int], show_consts: bool) -> None:
    """Draw one unit's ops into ``target`` (a step's cluster, or the graph)."""
    if unit.kind:
        color = COLORS.get(unit.kind, COLORS["muted"])
        cid = f"cluster{ui}"
        link = {"URL": f"#{kernel_id(unit.label)}", "tooltip": unit.title} \
            if unit.kind == "generated" else {}
        target.attr(label=unit.label, id=cid, style="rounded,filled", color=color,
                    fillcolor=_fill(unit.kind if unit.kind in COLORS else "muted"),
                    fontcolor=color, fontsize="9", labeljust="l", **link)
        titles[cid] = unit.title
    for n in unit.nodes:
        nid = f"n{n.out.id}"       # keyed by the result's value id: unique in a graph
        rep[n.out.id] = nid
        label = n.op.name
        if not show_consts:
            k = sum(1 for x in n.tensor_inputs() if x.id in consts)
            label += f" (+{k} const)" if k else ""
        attrs = {}
        if is_eager(n):
            label += "\n(eager)"
            attrs = {"style": "dashed,rounded", "color": COLORS["fail"],
                     "fontcolor": COLORS["fail"]}
        elif n.op.kind is OpKind.LIBRARY:
            attrs = {"color": COLORS["library"], "penwidth": "1.5"}
        target.node(nid, label, id=nid, **attrs)
        titles[nid] = f"{n!r}" + (f"\n{n.where}" if n.where else "")
    if unit.kind and not unit.nodes:   # an input returned as an output: a copy kernel
        nid = f"copy{ui}"
        target.node(nid, "copy", id=nid)
        titles[nid] = unit.title


def _graph(g: Graph, fold: bool | None) -> tuple[str, list[str]]:
    fold = len(g.nodes) > FOLD_AT if fold is None else fold
    units = graph_units(g)
    folds = fold_units(g, units) if fold else []
    names = _Aliases()
    dot = _graphviz().Digraph("graph", graph_attr={"rankdir": "TB", "fontsize": "10",
                                                "fontname": "Helvetica", "nodesep": "0.25",
                                                "ranksep": "0.3", "bgcolor": "white"},
                           node_attr={"fontname": "Helvetica", "fontsize": "10",
                                      "shape": "box", "style": "rounded", "height": "0.3"},
                           edge_attr={"fontname": "Helvetica", "fontsize": "8",
                                      "arrowsize": "0.6"})
    titles: dict[str, str] = {}
    rep: dict[int, str] = {}             # op's result value id -> graphviz node drawn for it
    hidden_unit: dict[int, int] = {}     # unit index -> fold index
    for fi, f in enumerate(folds):
        for u in f.hidden:
            hidden_unit[u] = fi
    consts = {v.id for v, _ in g.constants}
    show_consts = not fold

    # inputs and constants
    for v in g.inputs:
        if v.id in consts and not show_consts:
            continue
        nid = f"v{v.id}"
        kind = "constant" if v.id in consts else "input"
        dot.node(nid, f"%{v.name}", id=nid, shape="note" if kind == "constant" else "invhouse",
                 style="filled", fillcolor=_fill("muted" if kind == "constant" else "input"),
                 fontsize="8" if kind == "constant" else "10")
        titles[nid] = f"{kind} %{v.name}: {_full(g.dims(v))} {v.dtype}"
    # folds
    for fi, f in enumerate(folds):
        nid = f"fold{fi}"
        rng = f.hidden
        what = "step" if units[f.start].kind else "op"
        same = ("the same ops as above, reading other earlier results" if f.loose else
                "as shown above")
        dot.node(nid, f"… {plural(f.hidden_ops, 'op')} hidden ({f.repeats - 1}× block)\n"
                      f"{plural(f.period, what)} each, {same}",
                 id=nid, shape="box", style="dashed,rounded", color=COLORS["muted"],
                 fontcolor=COLORS["muted"])
        vals = [n.out.name for u in rng for n in units[u].nodes]
        titles[nid] = (f"{plural(f.hidden_ops, 'op')} hidden: the block of {what}s "
                       f"{f.start}..{f.start + f.period - 1} repeated "
                       f"{plural(f.repeats - 1, 'more time')}"
                       + (" (the same ops in the same steps; operands from earlier steps may "
                          "differ)" if f.loose else "") + "; values "
                       + ", ".join("%" + x for x in vals[:40]) + (" …" if len(vals) > 40 else ""))
        for u in rng:
            for n in units[u].nodes:
                rep[n.out.id] = nid
    # ops, clustered per step
    for ui, unit in enumerate(units):
        if ui in hidden_unit:
            continue
        with dot.subgraph(name=f"cluster_{ui}") if unit.kind else nullcontext(dot) as target:
            _unit(target, unit, ui, titles, rep, consts, show_consts)
    # value edges (one per value and consumer drawn; none inside a fold; one per fold and
    # consumer)
    drawn: set[tuple[str, str, int]] = set()
    ne = 0

    def edge(src: str, dst: str, v: Value, more: Sequence[Value] = ()) -> None:
        nonlocal ne
        if src == dst or (src, dst, v.id) in drawn:
            return
        drawn.add((src, dst, v.id))
        eid = f"e{ne}"
        ne += 1
        dims = g.dims(v)
        label = names.shape(dims) + (f" +{len(more)}" if more else "")
        dot.edge(src, dst, label=label, id=eid)
        titles[eid] = f"%{v.name}: {_full(dims)} {v.dtype}" + "".join(
            f"\n%{x.name}: {_full(g.dims(x))} {x.dtype}" for x in more)

    for src, dst, vals in drawn_edges(g, rep, show_consts):
        edge(src, dst, vals[0], vals[1:])
    for k, v in enumerate(g.outputs):
        nid = f"out{k}"
        dot.node(nid, f"output {k}: %{v.name}", id=nid, shape="house", style="filled,bold",
                 fillcolor=_fill("generated"))
        titles[nid] = f"output {k}: %{v.name}: {_full(g.dims(v))} {v.dtype}"
        src = rep[v.id] if v.producer is not None else f"v{v.id}"
        if v.producer is None and v.id in consts and not show_consts:
            continue
        copy = next((f"copy{ui}" for ui, u in enumerate(units)
                     if u.kind and not u.nodes and u.value == v.name), None)
        if copy is not None:
            edge(src, copy, v)
            src = copy
        edge(src, nid, v)
    legend = names.legend()
    if legend:
        dot.attr(label="\\l".join(legend) + "\\l", labelloc="b", labeljust="l", fontsize="9")
    return _svg(dot, titles), legend


@renders(Graph)
@_needs_graphviz
def render_graph(g: Graph) -> Rendering:
    svg, _ = _graph(g, None)
    part = getattr(g, "partition", None)
    counts = part.counts() if part is not None else {}
    head = (f"<div><b>Graph</b>: {plural(len(g.nodes), 'op')}, "
            f"{plural(len(g.inputs) - len(g.constants), 'input')}, "
            f"{plural(len(g.constants), 'constant')}, {plural(len(g.outputs), 'output')}"
            + (f"; {plural(counts.get('generated', 0), 'generated kernel')}, "
               f"{plural(counts.get('library', 0), 'library call')}" if part is not None else "")
            + "</div>")
    note = ('<div class="muted">edges: values with their shapes after the solve; clusters: '
            "partition steps (green: generated kernel, blue: library call); hover for details"
            "</div>")
    return Rendering(block(head + note + svg_html(svg)), svg=svg, title="Graph")


# -- the constraint DAG ----------------------------------------------------------------------------
Resolver = Callable[[Expr], Expr]


def _resolver(resolved) -> Resolver | None:
    """``resolved`` as a function: None, a callable, a mapping (missing: unchanged), or an object
    with ``.resolve`` (a ``Solver`` or ``Solution``)."""
    if resolved is None:
        return None
    if hasattr(resolved, "resolve"):
        return resolved.resolve
    if isinstance(resolved, Mapping):
        return lambda e: resolved.get(e, e)
    return resolved


def dag_nodes(constraints: Iterable[Constraint]) -> list[Expr]:
    """Every distinct expression node reachable from the constraints' two sides (children of
    sums, products, ``//``, ``%`` and shape lists), each once, in first-seen order."""
    seen: dict[Expr, None] = {}
    stack: list[Expr] = []
    for c in constraints:
        stack += [c.rhs, c.lhs]
        while stack:
            e = stack.pop()
            if e in seen:
                continue
            seen[e] = None
            stack += reversed(e.children())
    return list(seen)


def _node_label(e: Expr) -> str:
    if isinstance(e, Lit):
        return str(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Sum):
        return "+" if not e.const else f"+ {e.const}" if e.const > 0 else f"− {-e.const}"
    if isinstance(e, Prod):
        return "×"
    if isinstance(e, FloorDiv):
        return "//"
    if isinstance(e, Mod):
        return "%"
    if isinstance(e, Shape):
        return f"[{len(e.items)}]"
    return type(e).__name__


DAG_LEGEND = ('<span class="muted">colours: <span class="dl-literal">literal</span>, '
              '<span class="dl-named">named</span> (a user dim), <span class="dl-residual">'
              "residual</span> (an internal dim, or an expression of dims: the host computes "
              "it); without a solution, as built</span>")
"""The constraint DAG's node colours, for the renderings that show it."""


def _node_kind(e: Expr, resolve: Resolver | None) -> str | None:
    """literal / named / residual by the solver's classification when ``resolve`` is given, else
    as built: a literal, a user (rank-1) dim named, an internal (rank-0) dim or any other
    expression with free variables residual (``kind_of`` of the unsolved form). None for a
    shape list."""
    if isinstance(e, Shape):
        return None
    if resolve is not None:
        try:
            return kind_of(resolve(e)).value
        except Exception:   # an expression the resolver does not know: classify as built
            pass
    if isinstance(e, Lit):
        return DimKind.LITERAL.value
    if isinstance(e, Var):
        return DimKind.NAMED.value if e.rank else DimKind.RESIDUAL.value
    return DimKind.RESIDUAL.value if e.free_vars else None


def trivial(c: Constraint) -> bool:
    """``a == a``: both sides the same interned expression (the solver drops it at once)."""
    return c.lhs is c.rhs


def constraint_dag(constraints: Iterable[Constraint], resolved=None, highlight=None,
                   show_trivial: bool = False) -> str:
    """The interned expression DAG of ``constraints`` as SVG: one node per distinct expression
    (``dag_nodes``), child edges labelled with coefficients (sums), ``n``/``d`` (``//``, ``%``) or
    the axis (shapes); each constraint a dashed edge ``#id`` between its lhs and rhs roots. Nodes
    are coloured literal / named / residual (``DAG_LEGEND``) by ``resolved`` (a ``Solver`` or
    ``Solution``, a ``resolve`` function or a mapping; None: as built, see ``_node_kind``).
    Hover text (``<title>``): the expression, its classification (when ``resolved`` is given)
    and the constraints it occurs in, with provenance.
    ``highlight``: an expression or expressions to emphasize (e.g. what a rule rewrote).
    Trivial constraints (``a == a``, ``trivial``) are left out, and the expressions only they
    reach, behind one "N trivial constraints hidden" node (its hover text lists them);
    ``show_trivial`` draws them, each a self-loop."""
    constraints = list(constraints)
    hidden = [] if show_trivial else [c for c in constraints if trivial(c)]
    if hidden:
        constraints = [c for c in constraints if not trivial(c)]
    resolve = _resolver(resolved)
    hi: set[Expr] = set()
    if isinstance(highlight, Expr):
        hi = {highlight}
    elif highlight is not None:
        hi = set(highlight)
    nodes = dag_nodes(constraints)
    ids = {e: f"x{i}" for i, e in enumerate(nodes)}
    uses: dict[Expr, list[str]] = {}
    for c in constraints:
        for side, root in (("lhs", c.lhs), ("rhs", c.rhs)):
            uses.setdefault(root, []).append(f"{side} of #{c.id}: {c.provenance}")
    dot = _graphviz().Digraph("constraints", graph_attr={"rankdir": "TB", "bgcolor": "white",
                                                      "nodesep": "0.2", "ranksep": "0.35"},
                           node_attr={"fontname": "Helvetica", "fontsize": "10",
                                      "shape": "ellipse", "height": "0.3", "margin": "0.04"},
                           edge_attr={"fontname": "Helvetica", "fontsize": "8",
                                      "arrowsize": "0.5"})
    titles: dict[str, str] = {}
    for e in nodes:
        nid = ids[e]
        kind = _node_kind(e, resolve)
        attrs = {"shape": "box" if isinstance(e, (Lit, Var)) else "ellipse"}
        if isinstance(e, Shape):   # a list: a double box (no record shape: dot drops edges)
            attrs.update(shape="box", peripheries="2")
        if kind is not None:
            attrs.update(style="filled", fillcolor=_fill(kind), color=COLORS[kind])
        if e in hi:
            attrs.update(style="filled,bold", penwidth="3", color=COLORS["fail"],
                         fillcolor=COLORS["highlight"] + "66")
        dot.node(nid, _node_label(e), id=nid, **attrs)
        lines = [repr(e)]
        if resolve is not None:
            try:
                r = resolve(e)
                lines.append(f"resolves to {r!r} ({kind_of(r).value})")
            except Exception:
                pass
        u = uses.get(e, [])
        lines += u[:8] + ([f"… {len(u) - 8} more"] if len(u) > 8 else [])
        titles[nid] = "\n".join(lines)
    if hidden:
        dot.node("trivial", f"{plural(len(hidden), 'trivial constraint')} hidden (a == a)",
                 id="trivial", shape="box", style="dashed,rounded", color=COLORS["muted"],
                 fontcolor=COLORS["muted"])
        by: dict[tuple[str, str], list[Constraint]] = {}
        for c in hidden:
            by.setdefault((c.provenance.op, repr(c.lhs)), []).append(c)
        titles["trivial"] = "\n".join(
            [f"{len(cs)}× {lhs} == {lhs} ({op}): " + ", ".join(f"#{c.id}" for c in cs[:12])
             + (" …" if len(cs) > 12 else "") for (op, lhs), cs in by.items()]
            + ["constraint_dag(..., show_trivial=True) draws them"])
    ne = 0
    for e in nodes:
        for child, label in _child_edges(e):
            eid = f"c{ne}"
            ne += 1
            dot.edge(ids[e], ids[child], label=label, id=eid)
    for c in constraints:
        eid = f"k{c.id}"
        dot.edge(ids[c.lhs], ids[c.rhs], label=f"#{c.id}", id=eid, style="dashed", dir="none",
                 color=COLORS["residual"], fontcolor=COLORS["residual"], constraint="false",
                 penwidth="1.5")
        up = "" if c.parent is None else f" (rewritten from #{c.parent})"
        titles[eid] = f"#{c.id}{up}: {c.lhs!r} == {c.rhs!r}\n{c.provenance}"
    return _svg(dot, titles)


def _child_edges(e: Expr) -> list[tuple[Expr, str]]:
    if isinstance(e, Sum):
        return [(m, "" if c == 1 else f"×{c}") for m, c in e.terms]
    if isinstance(e, (FloorDiv, Mod)):
        return [(e.num, "n"), (e.den, "d")]
    if isinstance(e, Shape):
        return [(x, str(i)) for i, x in enumerate(e.items)]
    return [(x, "") for x in e.children()]


def _constraint_row(c: Constraint) -> tuple:
    p = c.provenance
    return (f"#{c.id}", "" if c.parent is None else f"#{c.parent}", f"<code>{esc(c.lhs)}</code>",
            f"<code>{esc(c.rhs)}</code>", f"<code>{esc(p.op)}</code> {esc(p.node)}",
            esc(p.detail), f'<span class="muted">{esc(p.where)}</span>')


_CONSTRAINT_HEAD = ["id", "from", "lhs", "rhs", "op", "operand / axis", "where"]


@renders(Constraints)
@_needs_graphviz
def render_constraints(cs: Constraints) -> Rendering:
    svg = constraint_dag(cs)
    drawn = [c for c in cs if not trivial(c)]
    n = len(dag_nodes(drawn))
    k = len(cs) - len(drawn)
    from .tables import trivial_constraints_html

    html = (f"<div><b>Constraints</b>: {len(cs)}"
            + (f" ({k} trivial, <code>a == a</code>)" if k else "")
            + f"; expression DAG of {plural(n, 'interned node')}"
            + (" (trivial constraints hidden)" if k else "")
            + ' <span class="muted">(dashed: a constraint between its two sides; hover for '
            f"provenance)</span><br>{DAG_LEGEND}</div>"
            + (folded_table(_CONSTRAINT_HEAD, [_constraint_row(c) for c in drawn], raw=True)
               if drawn else "")
            + trivial_constraints_html([c for c in cs if trivial(c)])
            + svg_html(svg))
    return Rendering(block(html), svg=svg, title="Constraints")


@renders(Constraint)
@_needs_graphviz
def render_constraint(c: Constraint) -> Rendering:
    svg = constraint_dag([c], show_trivial=True)
    html = (table(_CONSTRAINT_HEAD, [_constraint_row(c)], raw=True) + f"<div>{DAG_LEGEND}</div>"
            + svg_html(svg))
    return Rendering(block(html), svg=svg, latex=f"${latex(c.lhs)} = {latex(c.rhs)}$",
                     title=f"Constraint #{c.id}")


# -- expressions -----------------------------------------------------------------------------------
@functools.cache
def sympy_heads():
    """(``FloorDivF``, ``ModF``): unevaluated sympy heads for ``//`` and ``%`` (sympy's own
    ``floor``/``Mod`` would rewrite the canonical form, e.g. ``floor((H + 2)/2)`` into
    ``floor(H/2) + 1``)."""
    import sympy

    class FloorDivF(sympy.Function):
        nargs = 2

        def _latex(self, printer):
            n, d = (printer._print(a) for a in self.args)
            return rf"\left\lfloor {n} / {d} \right\rfloor"

        def _sympystr(self, printer):
            return f"({printer._print(self.args[0])}) // ({printer._print(self.args[1])})"

    class ModF(sympy.Function):
        nargs = 2

        def _latex(self, printer):
            from sympy.printing.precedence import PRECEDENCE

            n = printer.parenthesize(self.args[0], PRECEDENCE["Mul"], strict=True)
            d = printer.parenthesize(self.args[1], PRECEDENCE["Mul"], strict=True)
            return rf"{n} \bmod {d}"

        def _sympystr(self, printer):
            return f"({printer._print(self.args[0])}) % ({printer._print(self.args[1])})"

    return FloorDivF, ModF


def to_sympy(e: Expr):
    """``e`` as a sympy expression for display: sums and products as sympy builds them, ``//``
    and ``%`` as unevaluated heads printing as a floor and ``\\bmod``; a shape as a ``Tuple``.
    (``Expr.to_sympy`` is the evaluating conversion, for testing.)"""
    import sympy

    fdiv, fmod = sympy_heads()
    if isinstance(e, Lit):
        return sympy.Integer(e.value)
    if isinstance(e, Var):
        return e.to_sympy()
    if isinstance(e, Sum):
        return sympy.Add(sympy.Integer(e.const), *(c * to_sympy(m) for m, c in e.terms))
    if isinstance(e, Prod):
        return sympy.Mul(*(to_sympy(f) for f in e.factors))
    if isinstance(e, FloorDiv):
        return fdiv(to_sympy(e.num), to_sympy(e.den))
    if isinstance(e, Mod):
        return fmod(to_sympy(e.num), to_sympy(e.den))
    if isinstance(e, Shape):
        return sympy.Tuple(*(to_sympy(x) for x in e.items))
    raise TypeError(type(e))


def latex(e: Expr) -> str:
    """LaTeX for ``e`` (no math delimiters): ``\\left\\lfloor H / 2 \\right\\rfloor + 1``; a shape
    as ``\\left[N, 64\\right]``."""
    import sympy

    if isinstance(e, Shape):
        return r"\left[" + ", ".join(latex(x) for x in e.items) + r"\right]"
    return sympy.latex(to_sympy(e))


@renders(Expr)
def render_expr(e: Expr) -> Rendering:
    free = ", ".join(sorted(e.free_vars))
    html = (f'<code title="{esc(type(e).__name__)}">{esc(repr(e))}</code>'
            + (f' <span class="muted">free: {esc(free)}</span>' if free else ""))
    return Rendering(block(html), latex=f"${latex(e)}$", title=repr(e))
