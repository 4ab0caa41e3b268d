"""The pipeline report (``cm.report()``, ``dl.explore``: a ``records.Report``): every stage object of
one compile on one page, one pure-CSS tab per stage (the tabs need no script, so a saved page or an
nbconvert export keeps working). Each tab is the stage object's own rendering (``sections``);
``Report.to_html(path)`` writes a standalone page with no external URL.

Size (a DenseNet-121 page stays under 6 MB): the Kernels tab lists each distinct code once, in the
language of the backend that runs it (a kernel of an earlier one's code links to that listing; the
other language is in the kernel's own display and ``viz.dump``), the CUDA prelude once (CUDA
backend; each listing links to it); the graph folds repeated blocks; each stylesheet is carried
once (``style.styles_once``); every kernel section is closed. Each kernel section has the anchor
``style.kernel_id(name)`` (``dlcb-kernel-<kernel name>``); graph clusters, the source-line index
and the kernel list link there, and a link into another tab shows that tab (``style.CSS``)."""

from __future__ import annotations

from ..ir.graph import Graph
from ..passes.partition import inlined
from ..records import Pipeline, Report
from ..runtime.build import distinct
from .code import CODE_CSS, kernel_html, prelude_html
from .render import Rendering, renders
from .style import block, esc, folded_table, kernel_id, kernel_link, styles_once, table, tabs
from .tables import embed, graph_aliases, module_html, passes_html, plural, solve_html


def source_index(g: Graph, kernels: dict[str, str]) -> list[tuple[str, list[str], list[str]]]:
    """Per model source line (``Node.where``), in graph order: the generated kernels whose code
    computes one of its ops (an op inlined into several kernels counts for each) and the library
    calls it makes. ``kernels``: materialized value name -> kernel name."""
    part = getattr(g, "partition", None)
    if part is None:
        return []
    mats = g.materialized()
    by_name = {v.name: v for v in mats}
    ids = {v.id for v in mats}
    rows: dict[str, tuple[int, list[str], list[str]]] = {}

    def add(n, kernel: str | None, library: str | None) -> None:
        if not n.where:
            return
        _, ks, libs = rows.setdefault(n.where, (n.out.id, [], []))
        if kernel and kernel not in ks:
            ks.append(kernel)
        if library and library not in libs:
            libs.append(library)

    for s in part.steps:
        v = by_name.get(s.value)
        if v is None or v.producer is None:
            continue
        if s.kind == "library":
            add(v.producer, None, v.producer.op.name)
            for x in v.producer.tensor_inputs():   # the views the host applies to its operands
                for n in g.view_chain(x)[1]:
                    add(n, None, n.op.name)
        elif s.value in kernels:
            for x in inlined(g, v, ids):
                add(x.producer, kernels[s.value], None)
    order = sorted(rows.items(), key=lambda kv: kv[1][0])
    return [(where, ks, libs) for where, (_, ks, libs) in order]


def kernels_html(p: Pipeline) -> str:
    """The Kernels tab: the kernel list (each with the kernel whose build it launches, where
    that is an earlier one of the same code: ``runtime.build.distinct``), the source-line index,
    the CUDA prelude once (CUDA backend), then one closed section per kernel (anchor
    ``kernel_id``) listing the code the backend runs; a kernel of the same code as an earlier one
    links to that one's listing (``code.kernel_html``)."""
    names = {k.body.out.name: k.name for k in p.kernels}
    index = [(f"<code>{esc(where)}</code>", " ".join(kernel_link(k) for k in ks) or
              '<span class="muted">none</span>',
              esc(", ".join(libs))) for where, ks, libs in source_index(p.graph, names)]
    rep = distinct([k.body for k in p.kernels], p.kernels[0].backend) if p.kernels else []
    rows = [(kernel_link(k.name), f"<code>%{esc(k.body.out.name)}</code>",
             len(k.body.variants()),
             "" if r == i else kernel_link(p.kernels[r].name))
            for i, (k, r) in enumerate(zip(p.kernels, rep))]

    def listing(i: int, k) -> str:
        return kernel_html(k, prelude=False, style=False, other=False,
                           same_as=None if rep[i] == i else p.kernels[rep[i]].name)

    sections = "".join(
        f'<details id="{esc(kernel_id(k.name))}" class="dl-kernel"><summary><code>{esc(k.name)}'
        f"</code> -&gt; %{esc(k.body.out.name)}</summary>{listing(i, k)}</details>"
        for i, k in enumerate(p.kernels))
    return (f"<div>{plural(len(p.kernels), 'generated kernel')}: "
            f"{plural(len(set(rep)), 'distinct code')}, each built once (<i>built as</i>: the "
            f"kernel whose build a kernel of the same code launches)</div>"
            f"<style>{CODE_CSS}</style>"
            + folded_table(["kernel", "writes", "variants", "built as"], rows, raw=True)
            + ("<h4>Source lines → kernels</h4>"
               + folded_table(["model source line", "generated kernels", "library calls"], index,
                              raw=True) if index else "")
            + (prelude_html() if p.kernels and p.kernels[0].backend == "cuda" else "")
            + sections)


def sections(r: Report) -> list[tuple[str, str]]:
    """(tab label, panel HTML) of report ``r``, in pipeline order (``r.tabs``); each panel opens
    with ``<h3 class="dl-stage">``."""
    p = r.module.pipeline
    with graph_aliases(p.graph):   # H₁/W₁ as the graph drawing names them, in every tab
        return _sections(r, p)


def _sections(r: Report, p: Pipeline) -> list[tuple[str, str]]:
    out = [("Summary", module_html(r.module) + config_html(p)),
           ("Graph", embed(p.graph)),
           ("Constraints", solve_html(p) + "<h4>All constraints</h4>" + embed(p.constraints)
            + (f"<h4>Residual constraints (checked by the host program)</h4>"
               f"{embed(p.residuals)}" if len(p.residuals) else "")),
           ("Solver trace", embed(p.solver_trace)),
           ("Dims", embed(p.dims)),
           ("Kernels", kernels_html(p)),
           ("Host program", embed(p.host_program))]
    t = r.trace
    if t is not None:
        out.append(("Call trace", embed(t)))
    out.append(("Launch plan", embed(p.launch_plan)
                + "".join(f"<h4>Thunk</h4>{embed(th)}" for th in p.thunks)))
    out.append(("Passes", passes_html(p.passes) + f"<h4>Partition</h4>{embed(p.partition)}"))
    return [(label, f'<h3 class="dl-stage">{esc(label)}</h3>{html}') for label, html in out]


def config_html(p: Pipeline) -> str:
    """The switches the compile ran with (``dl.Config``): field, value, default, and where the
    value came from (``call``: ``dl.compile``'s ``config``, ``env``: its ``DLCB_*`` variable)."""
    return "<h4>Configuration</h4>" + table(["field", "value", "default", "source"],
                                            p.config.rows())


@renders(Report)
def report(r: Report) -> Rendering:
    p = r.module.pipeline
    consts = {v.id for v, _ in p.graph.constants}
    names = ", ".join(f"%{v.name}" for v in p.graph.inputs if v.id not in consts)
    head = (f'<h2>dlcb_lab pipeline report</h2><div class="muted">{len(p.graph.nodes)} ops over '
            f"inputs {esc(names)}; one compile serves every shape the constraints admit</div>")
    return Rendering(styles_once(block(head + tabs(sections(r)))),
                     title="dlcb_lab pipeline report")
