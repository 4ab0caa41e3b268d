"""The pipeline report (``cm.report()``, ``dl.explore``): every stage object of one compile on one
page, one pure-CSS tab per stage (no script, so a saved page or an nbconvert export keeps working).
Each tab is the stage object's own rendering; ``Report.to_html(path)`` writes a standalone page
with no external URL."""

from __future__ import annotations

from typing import Sequence

import torch

from ..api import CompiledModule
from ..display import Rich
from ..runtime.thunks import LaunchTrace
from .render import Rendering, renders
from .style import block, details, esc, tabs
from .tables import embed, module_html, passes_html, plural


class Report(Rich):
    """The stages of ``module``'s compile; with ``inputs`` (tensors or shapes of the user inputs)
    also what a call on them does (the host program's trace and the launches)."""

    TABS = ("Summary", "Graph", "Constraints", "Solver trace", "Dims", "Kernels", "Host program",
            "Call trace", "Launch plan", "Passes")

    def __init__(self, module: CompiledModule,
                 inputs: Sequence[torch.Tensor | Sequence[int]] = ()) -> None:
        self.module = module
        self.inputs = tuple(inputs)

    @property
    def trace(self) -> LaunchTrace | None:
        """``module.trace(*inputs)``, or ``None`` without inputs."""
        return self.module.trace(*self.inputs) if self.inputs else None

    def sections(self) -> list[tuple[str, str]]:
        """(tab label, panel HTML), in pipeline order; each panel opens with
        ``<h3 class="dl-stage">``."""
        p = self.module.pipeline
        out = [("Summary", module_html(self.module)),
               ("Graph", embed(p.graph)),
               ("Constraints", embed(p.constraints)
                + (f"<h4>Residual constraints (checked by the host program)</h4>"
                   f"{embed(p.residuals)}" if len(p.residuals) else "")),
               ("Solver trace", embed(p.solver_trace)),
               ("Dims", embed(p.dims)),
               ("Kernels", f"<div>{plural(len(p.kernels), 'generated kernel')}</div>"
                + "".join(details(f"{k.name} -> %{k.body.out.name}", embed(k), open=i == 0)
                          for i, k in enumerate(p.kernels))),
               ("Host program", embed(p.host_program))]
        t = self.trace
        if t is not None:
            out.append(("Call trace", embed(t)))
        out.append(("Launch plan", embed(p.launch_plan)
                    + "".join(f"<h4>Thunk</h4>{embed(th)}" for th in p.thunks)))
        out.append(("Passes", passes_html(p.passes) + f"<h4>Partition</h4>{embed(p.partition)}"))
        return [(label, f'<h3 class="dl-stage">{esc(label)}</h3>{html}') for label, html in out]

    def __repr__(self) -> str:
        labels = [t for t in self.TABS if t != "Call trace" or self.inputs]
        return f"Report({self.module!r}; tabs: {', '.join(labels)})"


@renders(Report)
def report(r: Report) -> Rendering:
    p = r.module.pipeline
    consts = {v.id for v, _ in p.graph.constants}
    names = ", ".join(f"%{v.name}" for v in p.graph.inputs if v.id not in consts)
    head = (f'<h2>dlcb_lab pipeline report</h2><div class="muted">{len(p.graph.nodes)} ops over '
            f"inputs {esc(names)}; one compile serves every shape the constraints admit</div>")
    return Rendering(block(head + tabs(r.sections())), title="dlcb_lab pipeline report")
