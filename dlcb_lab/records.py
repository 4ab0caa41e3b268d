"""The stage records of one compile: what ``dl.compile`` leaves behind for inspection. Each is
immutable; ``Pipeline`` holds every stage's object, ``Kernel`` one generated kernel (its body,
sources and, once built, its launcher), ``DimTable`` the classification of every axis after the
solve, ``Report`` the stages of a compiled module and the call on some inputs.

The renderings (``dlcb_lab.viz``) take these records; a record never imports them. Its one door to
the notebook layer is the display hook it inherits (``display.Rich``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from .config import Config
from .dims import Constraints, DimKind, Expr, Lit, SolverTrace, Var
from .display import Rich
from .errors import BuildError
from .hostgen.lower import LaunchPlan
from .hostgen.program import HostProgram
from .ir.graph import Graph
from .kgen.emit import CUDA_PRELUDE, cuda_kernel, numba_kernel
from .kgen.kir import CoordMap, KernelBody
from .passes import Partition, PassRecord
from .runtime.build import narrow_unit
from .runtime.direct import BoundLaunch, DirectKernel, DirectLaunch, KernelSignature
from .runtime.thunks import Thunk


@dataclass(frozen=True)
class DimRow:
    value: str
    axis: int
    expr: Expr
    kind: DimKind
    why: str = ""
    """For an input axis that was a dim variable: the first constraint that fixed it (with
    ``dynamic="auto"``, why the axis is literal); else empty."""


@dataclass(frozen=True)
class DimTable(Rich):
    """Every axis of every value after the solve, classified LITERAL / NAMED / RESIDUAL."""

    rows: tuple[DimRow, ...]

    @classmethod
    def of_graph(cls, g: Graph) -> "DimTable":
        """The inputs' and every node's axes, resolved and classified by ``g``'s solver."""
        rows = []
        for v in list(g.inputs) + [n.out for n in g.nodes]:
            for k, d in enumerate(v.shape.items):
                e = g.solver.resolve(d)
                why = ""
                if isinstance(d, Var) and v.producer is None and isinstance(e, Lit):
                    c = next(iter(g.solver.bindings_behind(d)), None)
                    why = "" if c is None else f"#{c.id} {c.lhs!r} == {c.rhs!r} from {c.provenance}"
                rows.append(DimRow(v.name, k, e, g.solver.classify(d), why))
        return cls(tuple(rows))

    def of(self, value: str) -> tuple[DimRow, ...]:
        return tuple(r for r in self.rows if r.value == value)

    def counts(self) -> dict[str, int]:
        """Distinct dims by kind: a dim is an expression (interned), however many axes it sizes
        (``axis_counts``: the axes). The report counts the same way."""
        seen: dict[str, set] = {k.value: set() for k in DimKind}
        for r in self.rows:
            seen[r.kind.value].add(r.expr)
        return {k: len(v) for k, v in seen.items()}

    def axis_counts(self) -> dict[str, int]:
        """Axes (value, axis) by the kind of the dim that sizes them."""
        out = {k.value: 0 for k in DimKind}
        for r in self.rows:
            out[r.kind.value] += 1
        return out

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([(r.value, r.axis, repr(r.expr), r.kind.value, r.why)
                             for r in self.rows], columns=["value", "axis", "expr", "kind", "why"])

    def __repr__(self) -> str:
        lines = [f"DimTable: dims {self.counts()}, axes {self.axis_counts()}"]
        by: dict[str, list[DimRow]] = {}
        for r in self.rows:
            by.setdefault(r.value, []).append(r)
        for v, rs in by.items():
            lines.append(f"  %{v}: [" + ", ".join(f"{r.expr!r}:{r.kind.value[0].upper()}"
                                                    for r in rs) + "]")
            lines.extend(f"    axis {r.axis} fixed by {r.why}" for r in rs if r.why)
        return "\n".join(lines)


@dataclass(frozen=True)
class Kernel(Rich):
    """A generated kernel: its body, coordinate map and source in the chosen backend's language.
    ``cuda_source`` is self-contained (prelude included): it compiles with NVRTC as shown.

    Launchable like a numba.cuda kernel, on the compiled module's built code:
    ``k[grid, block](out, in0, ..)``, ``k[grid, block, stream](..)``, ``k.forall(numel)(..)``.
    Buffers are torch tensors or ``__cuda_array_interface__`` objects (CUDA), torch tensors or
    numpy arrays (CPU); the int arguments (``numel, params..``) are derived from their shapes and
    may be passed after them (then checked). Dtype, device, contiguity and every axis against
    ``signature`` are checked before the launch (``runtime.direct``); ``check(*args)`` resolves a
    launch without running it. CPU kernels validate ``grid``/``block`` and ignore them (numba
    runs one ``prange`` iteration per output element). ``variant(1)``: the block-per-output
    variant of a CUDA reduction."""

    body: KernelBody
    backend: str
    signatures: tuple[KernelSignature, ...] = ()
    """One per variant: buffers with dtype and solved shape, ``numel`` and params expressions."""
    launcher: Any = field(default=None, repr=False, compare=False)
    """The built launcher (``runtime.launchers``), shared with the thunk; None when not built."""
    config: Config = field(default_factory=Config, repr=False)
    """The compile's switches (the pipeline's): which entry points are built, numba's
    ``parallel``."""

    @property
    def source(self) -> str:
        """Source in the backend's language (with the cooperative variant, if any)."""
        return self.cuda_source if self.backend == "cuda" else self.numba_source

    @property
    def name(self) -> str:
        return self.body.name

    @property
    def coord_map(self) -> CoordMap:
        return self.body.coord_map

    @property
    def cuda_parts(self) -> tuple[str, ...]:
        """Each variant's CUDA with every entry point the build compiles: the 64-bit one and the
        32-bit unit's (``runtime.build.narrow_unit``: ``_i32``, ``_w``, ``_v`` unless
        ``config.vectorize`` is off)."""
        widths = ("", *narrow_unit(self.config.vectorize))
        return tuple(cuda_kernel(v, widths) for v in self.body.variants())

    @property
    def cuda_source(self) -> str:
        return CUDA_PRELUDE + "\n" + "\n\n".join(self.cuda_parts)

    @property
    def numba_source(self) -> str:
        return numba_kernel(self.body, self.config.numba_parallel)

    @property
    def signature(self) -> KernelSignature:
        """The launch contract of the plain variant (one thread per output element)."""
        return self.variant(0).signature

    @functools.cached_property
    def _direct(self) -> tuple[DirectKernel, ...]:
        if self.launcher is None or not self.signatures:
            raise BuildError(f"kernel {self.name} is not built (no launcher): launch the "
                             f"kernels of a compiled module's pipeline")
        return tuple(DirectKernel(s, self.launcher) for s in self.signatures)

    def variant(self, i: int = 0) -> DirectKernel:
        """Variant ``i`` as a launchable kernel: 0 one thread per output element, 1 (CUDA
        reductions) one block per output element."""
        ks = self._direct
        if not 0 <= i < len(ks):
            raise IndexError(f"kernel {self.name} has {len(ks)} variant(s), not {i}")
        return ks[i]

    def __getitem__(self, config: tuple) -> BoundLaunch:
        """``k[grid, block]`` or ``k[grid, block, stream]``: call the result with the arguments."""
        return self.variant(0)[config]

    def forall(self, numel: int, stream: Any = None) -> BoundLaunch:
        """Configured as the thunk launches ``numel`` output elements (``launcher.geometry``)."""
        return self.variant(0).forall(numel, stream)

    def check(self, *args: Any) -> DirectLaunch:
        """Check arguments as a launch does and resolve entry point, ``numel`` and params."""
        return self.variant(0).check(*args)

    def __repr__(self) -> str:
        ps = ", ".join(f"{n}={e!r}" for n, e in self.body.params)
        return f"Kernel {self.name} [{self.backend}] out %{self.body.out.name} params ({ps})"


@dataclass(frozen=True)
class Pipeline(Rich):
    """Every stage object of one compile. ``timings``: seconds per pipeline step, in order
    (``capture``, ``lower``, ``generalize``, ``passes``, ``kgen``, ``hostgen``, ``build``);
    ``config``: the switches it was compiled with (``dl.Config``, held by the graph).
    As named files for reading outside a notebook: ``dlcb_lab.viz.dump(pipeline, directory)``."""

    graph: Graph
    constraints: Constraints
    solver_trace: SolverTrace
    residuals: Constraints
    dims: DimTable
    kernels: tuple[Kernel, ...]
    host_program: HostProgram
    launch_plan: LaunchPlan
    thunks: tuple[Thunk, ...]
    timings: Mapping[str, float] = field(default_factory=dict)
    passes: tuple[PassRecord, ...] = ()

    @property
    def partition(self) -> Partition:
        """The per-step table: library calls and generated kernels, the ops each computes."""
        return self.graph.partition

    def __repr__(self) -> str:
        t = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.timings.items())
        changed = self.config.changed()   # the switches off their defaults
        return (f"Pipeline: {len(self.graph.nodes)} ops, {len(self.constraints)} constraints, "
                f"{len(self.solver_trace)} rule applications, {len(self.residuals)} residual "
                f"constraints, dims {self.dims.counts()}, {len(self.kernels)} kernels, "
                f"{len(self.host_program.instrs)} host instructions, thunks "
                f"{[th.kind for th in self.thunks]}, {self.partition.counts()}\n  timings: {t}"
                + ("\n  config: " + ", ".join(f"{k}={v!r} ({self.config.source(k)})"
                                              for k, v in changed.items()) if changed else ""))

    config = property(lambda self: self.graph.config, doc="The compile's switches (``dl.Config``), "
                      "as its passes, build and thunk used them.")


@dataclass(frozen=True, eq=False)
class Report(Rich):
    """Every stage of one compile on one page (``CompiledModule.report(*inputs)``,
    ``dl.explore``): displayed in a notebook as pure-CSS tabs, one per stage (``TABS``), or
    written by ``to_html(path)`` as a standalone page. ``module``: the compiled module (what the
    page reads of it: ``pipeline``, ``stats()`` and ``trace``); ``inputs``: tensors or shapes of
    the user inputs, whose call trace (the host program's registers and checks, the launches)
    gets a tab of its own. The panels are ``dlcb_lab.viz.report.sections(report)``."""

    module: Any
    inputs: tuple = ()

    TABS: ClassVar[tuple[str, ...]] = (
        "Summary", "Graph", "Constraints", "Solver trace", "Dims", "Kernels", "Host program",
        "Call trace", "Launch plan", "Passes")

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))

    @property
    def pipeline(self) -> Pipeline:
        return self.module.pipeline

    @property
    def tabs(self) -> tuple[str, ...]:
        """The tabs this page has: ``TABS``, less "Call trace" without inputs."""
        return tuple(t for t in self.TABS if t != "Call trace" or self.inputs)

    @property
    def trace(self) -> Any:
        """``module.trace(*inputs)`` (a ``LaunchTrace``), or ``None`` without inputs."""
        return self.module.trace(*self.inputs) if self.inputs else None

    def __repr__(self) -> str:
        return f"Report({self.module!r}; tabs: {', '.join(self.tabs)})"
