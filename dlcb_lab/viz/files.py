"""``dump(pipeline, dir)`` (``dlcb_lab.viz.dump``): one compile as readable named files (as depyf does for Dynamo), so the
generated code, the constraints and the solve can be read, grepped and diffed outside a notebook.

Files (``FILES`` describes each; ``index.txt`` lists them):

- ``prelude.cuh``: the CUDA prelude, once; each ``<kernel>.cu`` starts with
  ``#include "prelude.cuh"`` followed by the kernel's variants, so ``prelude.cuh`` + the rest of a
  ``.cu`` file is exactly ``Kernel.cuda_source`` (what the backend compiles).
- ``<kernel>.py``: the numba source with its prelude inline (each file imports on its own).
- ``constraints.csv``, ``solver_trace.csv``, ``dims.csv``: one row per constraint (user-added and
  derived), per rule application (times in µs) and per value axis (with the graph's alias).
- ``graph.txt``, ``host_program.txt``, ``launch_plan.txt``: the stage objects' text forms.
- ``report.html``: the pipeline report (``records.Report``); without graphviz its diagrams
  fall back to their text forms, and say so.

Needs neither graphviz nor ipywidgets nor pandas.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ..dims import Constraint
from ..kgen.emit import CUDA_PRELUDE, PY_PRELUDE

FILES = {
    "index.txt": "this list",
    "prelude.cuh": "the CUDA prelude (helpers every kernel uses), once; each .cu includes it",
    "<kernel>.cu": "a generated kernel's CUDA C++ (every variant), after #include \"prelude.cuh\"",
    "<kernel>.py": "the same kernel for the CPU backend (numba, one prange iteration per output "
                   "element), its prelude inline",
    "constraints.csv": "every shape constraint, user-added (parent empty) and derived by a rule: "
                       "lhs == rhs, provenance (op, node, operand/axis, source line), whether "
                       "trivial (a == a) or residual (checked by the host program)",
    "solver_trace.csv": "every rule application in order: rule, constraint, before -> after, "
                        "t_us (since the first step started) and dt_us (the step's own time)",
    "dims.csv": "every axis of every value after the solve: expression, kind (literal: in the "
                "code, named: a kernel parameter, residual: computed by the host program), the "
                "graph's alias for long dims",
    "graph.txt": "the IR graph, one op per line with its shape after the solve",
    "host_program.txt": "the host program: instructions (loads, arithmetic, checks with their "
                        "messages) and launch slots",
    "launch_plan.txt": "the launch plan: kernel launches and library calls in order, buffers",
    "report.html": "the pipeline report (open in a browser; no network needed)",
}


def _write(path: Path, text: str) -> None:
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def _csv(path: Path, header: list[str], rows) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _trivial(c: Constraint) -> bool:
    from .tables import trivial_constraint

    return trivial_constraint(c)


def _aliases(p) -> dict[str, str]:
    """repr -> alias of the graph's long dims; empty without graphviz (``dim_aliases``)."""
    from .tables import dim_aliases

    return {repr(e): a for e, a in dim_aliases(p.graph).items()}


def _report(p, module: Any) -> str:
    """The report page (diagrams fall back to text where graphviz is missing)."""
    from ..records import Report
    from .render import render
    from .style import page

    r = render(Report(module if module is not None else _Module(p)))
    return page(r.title, r.html)


class _Module:
    """What ``Report`` reads of a compiled module, from its pipeline alone (a dump without its
    module): the pipeline and ``stats``."""

    def __init__(self, p) -> None:
        self.pipeline = p

    def stats(self) -> dict[str, Any]:
        th = self.pipeline.thunks[0] if self.pipeline.thunks else None
        return {"kernels": len(self.pipeline.kernels),
                "thunk": th.kind if th is not None else "none",
                "calls": th.calls if th is not None else 0,
                "compile_s": sum(self.pipeline.timings.values())}

    def trace(self, *inputs):
        raise TypeError("a pipeline dump has no call trace")


def dump(p, directory: str | Path, module: Any = None, report: bool = True) -> Path:
    """Write ``p`` (a ``Pipeline``, or a ``CompiledModule``: its pipeline) as the files of
    ``FILES`` into ``directory`` (created; files of the same names replaced) and return its
    ``Path``. ``module``: the ``CompiledModule`` for the report's summary (else one is read off the
    pipeline); ``report``: write ``report.html``."""
    if module is None and hasattr(p, "pipeline"):
        p, module = p.pipeline, p
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written: list[tuple[str, str]] = []

    def note(name: str, what: str) -> None:
        written.append((name, what))

    # kernels
    if p.kernels:
        _write(out / "prelude.cuh", CUDA_PRELUDE)
        note("prelude.cuh", FILES["prelude.cuh"])
    for k in p.kernels:
        body = "\n\n".join(k.cuda_parts)
        _write(out / f"{k.name}.cu", f'#include "prelude.cuh"\n{body}')
        _write(out / f"{k.name}.py", PY_PRELUDE + "\n\n" + k.numba_source)
        ps = ", ".join(f"{n} = {e!r}" for n, e in k.body.params)
        what = f"kernel for %{k.body.out.name}" + (f" (params {ps})" if ps else "")
        note(f"{k.name}.cu", f"{what}: CUDA C++")
        note(f"{k.name}.py", f"{what}: numba")
    # constraints and the solve
    tr = p.solver_trace
    residual = {c.id for c in p.residuals}
    cs = {c.id: c for c in (*p.constraints, *tr.constraints, *tr.derived)}.values()
    _csv(out / "constraints.csv",
         ["id", "parent", "lhs", "rhs", "op", "node", "detail", "where", "trivial", "residual"],
         [(c.id, "" if c.parent is None else c.parent, repr(c.lhs), repr(c.rhs),
           c.provenance.op, c.provenance.node, c.provenance.detail, c.provenance.where,
           int(_trivial(c)), int(c.id in residual)) for c in sorted(cs, key=lambda c: c.id)])
    note("constraints.csv", FILES["constraints.csv"])
    t0 = tr[0].t_ns - tr[0].dt_ns if len(tr) else 0
    from .solve import is_trivial

    _csv(out / "solver_trace.csv",
         ["step", "rule", "constraint_id", "parent_id", "before", "after", "trivial", "t_us",
          "dt_us"],
         [(t.step, t.rule, t.constraint_id, "" if t.parent_id is None else t.parent_id,
           t.before, t.after, int(is_trivial(t)), f"{(t.t_ns - t0) / 1e3:.3f}",
           f"{t.dt_ns / 1e3:.3f}") for t in tr])
    note("solver_trace.csv", FILES["solver_trace.csv"])
    aliases = _aliases(p)
    _csv(out / "dims.csv", ["value", "axis", "expr", "kind", "alias"],
         [(r.value, r.axis, repr(r.expr), r.kind.value, aliases.get(repr(r.expr), ""))
          for r in p.dims.rows])
    note("dims.csv", FILES["dims.csv"])
    # text forms
    legend = "".join(f"#   {a} = {t}\n" for t, a in sorted(aliases.items(), key=lambda kv: kv[1]))
    legend = f"# aliases of long dims (as in the graph drawing):\n{legend}" if legend else ""
    _write(out / "graph.txt", repr(p.graph))
    note("graph.txt", FILES["graph.txt"])
    _write(out / "host_program.txt", repr(p.host_program)
           + "\n\n# registers hold:\n" + "".join(f"#   r{k} = {e}\n" for k, e in
                                                 enumerate(p.host_program.regs) if e)
           + legend)
    note("host_program.txt", FILES["host_program.txt"])
    _write(out / "launch_plan.txt", repr(p.launch_plan))
    note("launch_plan.txt", FILES["launch_plan.txt"])
    if report:
        html = _report(p, module)
        (out / "report.html").write_text(html, encoding="utf-8")
        note("report.html", FILES["report.html"])
    width = max(len(n) for n, _ in written) + 2
    _write(out / "index.txt", "dlcb_lab pipeline dump: "
           + f"{len(p.graph.nodes)} ops, {len(p.kernels)} kernels, {len(tr)} rule applications\n\n"
           + "\n".join(f"{n:<{width}}{w}" for n, w in [("index.txt", FILES["index.txt"]),
                                                        *written]))
    return out
