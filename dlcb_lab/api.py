"""``dl.compile``: torch module + example inputs -> a compiled module that serves every shape the
constraints admit, compiled once (kernels built once per compile, never per call)."""

from __future__ import annotations

import functools
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import torch

from .bridge.fx import lower_to_ir, trace
from .dims import Constraints, DimKind, Expr, Lit, SolverTrace
from .display import Rich
from .errors import ShapeError, ShapeMismatch, SpecError
from .hostgen.lower import LaunchPlan, dim_origins, lower
from .hostgen.program import HostProgram
from .ir.graph import Graph
from .kgen.emit import CUDA_PRELUDE, cuda_kernel, numba_kernel
from .kgen.infer import infer_kernels, materialized_values
from .kgen.kir import CoordMap, KernelBody
from .passes import Partition, PassRecord, run_passes
from .runtime.build import build_kernels
from .runtime.direct import (BoundLaunch, DirectKernel, DirectLaunch, KernelSignature,
                             graph_guards, kernel_signatures)
from .runtime.thunks import DynamicAOTThunk, LaunchTrace, StaticThunk, Thunk


@dataclass(frozen=True)
class DimRow:
    value: str
    axis: int
    expr: Expr
    kind: DimKind


@dataclass(frozen=True)
class DimTable(Rich):
    """Every axis of every value after the solve, classified LITERAL / NAMED / RESIDUAL."""

    rows: tuple[DimRow, ...]

    def of(self, value: str) -> tuple[DimRow, ...]:
        return tuple(r for r in self.rows if r.value == value)

    def counts(self) -> dict[str, int]:
        out = {k.value: 0 for k in DimKind}
        for r in self.rows:
            out[r.kind.value] += 1
        return out

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame([(r.value, r.axis, repr(r.expr), r.kind.value) for r in self.rows],
                            columns=["value", "axis", "expr", "kind"])

    def __repr__(self) -> str:
        lines = [f"DimTable {self.counts()}"]
        by: dict[str, list[DimRow]] = {}
        for r in self.rows:
            by.setdefault(r.value, []).append(r)
        for v, rs in by.items():
            lines.append(f"  %{v}: [" + ", ".join(f"{r.expr!r}:{r.kind.value[0].upper()}"
                                                    for r in rs) + "]")
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
    def cuda_source(self) -> str:
        return CUDA_PRELUDE + "\n" + "\n\n".join(cuda_kernel(v) for v in self.body.variants())

    @property
    def numba_source(self) -> str:
        return numba_kernel(self.body)

    @property
    def signature(self) -> KernelSignature:
        """The launch contract of the plain variant (one thread per output element)."""
        return self.variant(0).signature

    @functools.cached_property
    def _direct(self) -> tuple[DirectKernel, ...]:
        if self.launcher is None or not self.signatures:
            raise RuntimeError(f"kernel {self.name} is not built (no launcher): launch the "
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
    """Every stage object of one compile."""

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
        return (f"Pipeline: {len(self.graph.nodes)} ops, {len(self.constraints)} constraints, "
                f"{len(self.solver_trace)} rule applications, {len(self.residuals)} residual, "
                f"dims {self.dims.counts()}, {len(self.kernels)} kernels, "
                f"{len(self.host_program.instrs)} host instructions, thunks "
                f"{[th.kind for th in self.thunks]}, {self.partition.counts()}\n  timings: {t}")


class CompiledModule(Rich):
    """Callable result of ``dl.compile``. Returns a tensor (or a tuple for several outputs).
    Pickles without its loaded kernels; unpickling rebuilds them (from the kernel cache)."""

    def __init__(self, pipeline: Pipeline, single: bool, kernel_builds: int,
                 constants: Sequence[torch.Tensor] = ()):
        self.pipeline = pipeline
        self._thunk = pipeline.thunks[0]
        self._single = single
        self._kernel_builds = kernel_builds
        self._constants = tuple(constants)
        self._n_user = len(pipeline.graph.inputs) - len(self._constants)

    def __call__(self, *args: torch.Tensor):
        if len(args) != self._n_user:
            names = [v.name for v in self.pipeline.graph.inputs[:self._n_user]]
            raise TypeError(f"expected {self._n_user} tensor inputs ({', '.join(names)}), "
                            f"got {len(args)}")
        out = self._thunk(*args, *self._constants)
        return out[0] if self._single else out

    def stats(self) -> dict[str, Any]:
        """``compiles``: graph compiles behind this module (always 1: no recompiles);
        ``kernel_builds``: kernel functions compiled (launch-time variants included), fixed after
        compile; ``calls``: thunk invocations that launched."""
        return {"compiles": 1, "kernel_builds": self._kernel_builds, "calls": self._thunk.calls,
                "kernels": len(self.pipeline.kernels), "thunk": self._thunk.kind,
                "compile_s": sum(self.pipeline.timings.values())}

    def _shapes(self, inputs: Sequence[torch.Tensor | Sequence[int]]) -> list[tuple[int, ...]]:
        """User inputs (tensors or shapes) -> one shape per graph input, constants appended."""
        return [tuple(x.shape) if isinstance(x, torch.Tensor) else tuple(x) for x in inputs] + \
            [tuple(c.shape) for c in self._constants]

    def trace(self, *inputs: torch.Tensor | Sequence[int]) -> LaunchTrace:
        """What a call on ``inputs`` (tensors, or their shapes) would do, without running it:
        ``.host`` the host program's trace (every register, every check, the first failure's
        message), ``.steps`` each kernel's variant, element count and int params and each
        library call's arguments."""
        return self._thunk.launches(self._shapes(inputs))

    def report(self, *inputs: torch.Tensor | Sequence[int]):
        """Every stage of this compile on one page (``viz.report.Report``: notebook display,
        ``.to_html(path)``); with ``inputs`` (tensors or shapes), also the trace of a call."""
        from .viz.report import Report

        return Report(self, inputs)

    def __reduce__(self):
        th = self._thunk
        shapes = th.shapes if isinstance(th, StaticThunk) else None
        p = self.pipeline
        p = replace(p, thunks=(), kernels=tuple(replace(k, launcher=None) for k in p.kernels))
        return (_restore, (p, self._single, self._constants, th.device, shapes))

    def __repr__(self) -> str:
        return f"CompiledModule({self._thunk!r})"


def _make_thunk(p: Pipeline, backend: str, shapes) -> tuple[Pipeline, int]:
    """Build the kernels; ``p`` with the thunk, and each kernel bound to its launcher (the
    launchers follow the kernels' order, which is the launch plan's)."""
    launchers, builds = build_kernels([k.body for k in p.kernels], backend)
    g = p.graph
    args = (p.host_program, p.launch_plan, launchers, [v.dtype for v in g.inputs], backend,
            [v.name for v in g.inputs], len(g.inputs) - len(g.constants))
    thunk = StaticThunk(*args, shapes=shapes) if shapes is not None else DynamicAOTThunk(*args)
    kernels = tuple(replace(k, launcher=ln) for k, ln in zip(p.kernels, launchers))
    return replace(p, thunks=(thunk,), kernels=kernels), builds


def _restore(p: Pipeline, single: bool, consts: tuple, backend: str, shapes) -> CompiledModule:
    p, builds = _make_thunk(p, backend, shapes)
    return CompiledModule(p, single, builds, consts)


def _resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend not in ("cpu", "cuda"):
        raise SpecError(f"backend must be 'auto', 'cpu' or 'cuda', not {backend!r}")
    if backend == "cuda" and not torch.cuda.is_available():
        raise SpecError("backend='cuda' but torch sees no CUDA device")
    return backend


def _dim_table(g: Graph) -> DimTable:
    rows = []
    for v in list(g.inputs) + [n.out for n in g.nodes]:
        for k, d in enumerate(v.shape.items):
            rows.append(DimRow(v.name, k, g.solver.resolve(d), g.solver.classify(d)))
    return DimTable(tuple(rows))


def check_generalization(g: Graph, strict: bool = True) -> None:
    """A dim declared dynamic that the graph fixes to a literal is an error (``strict``) or a
    warning naming the dim and the constraints that fixed it."""
    for v, origin in dim_origins(g).items():
        e = g.solver.resolve(v)
        if not isinstance(e, Lit):
            continue
        why = "; ".join(f"#{c.id} {c.lhs!r} == {c.rhs!r} from {c.provenance}"
                        for c in g.solver.bindings_behind(v))
        msg = (f"dim {v.name} ({origin}) is declared dynamic but the program fixes it to "
               f"{e.value}: {why}")
        if strict:
            raise ShapeError(msg)
        warnings.warn(msg + " (compiled static in it)", stacklevel=3)


def compile(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor] | torch.Tensor,
            dynamic: Mapping[int | str, Mapping[int, str]] | bool = False,
            backend: str = "auto", strict: bool = True) -> CompiledModule:
    """Compile ``module`` once for the shapes ``dynamic`` admits.

    ``dynamic`` maps an input (position, or parameter name of ``forward``) to ``{axis: dim name}``
    (negative axes count from the end); ``False`` compiles the example shapes statically. A dim
    declared dynamic that the program fixes to a literal raises ``ShapeError`` (a warning with
    ``strict=False``). The example inputs must satisfy the compiled constraints. Raises
    ``ShapeError`` for incompatible shapes, ``UnsupportedOp`` for ops outside the supported set,
    ``DTypeError`` for dtypes an op rejects, ``SpecError`` for malformed arguments.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    backend = _resolve_backend(backend)
    t = {}
    t0 = time.perf_counter()
    g = lower_to_ir(trace(module), example_inputs, dynamic)
    check_generalization(g, strict)
    t["capture+solve"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    g, records = run_passes(g)
    t["passes"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    bodies = infer_kernels(g, cooperative=backend == "cuda")
    t["kgen"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    host, plan = lower(g, materialized_values(g), bodies)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "cuda" else "cpu"
    # same storage when already there; contiguous, so calls need not check them
    consts = [c.detach().to(device).contiguous() for _, c in g.constants]
    shapes = [tuple(x.shape) for x in example_inputs] + [tuple(c.shape) for c in consts]
    try:
        host.interpret(shapes)
    except ShapeMismatch as err:
        raise ShapeError(f"the example inputs violate the compiled program: {err}") from None
    t["hostgen"] = time.perf_counter() - t0
    is_static = all(g.solver.classify(d) is DimKind.LITERAL for v in g.inputs
                    for d in v.shape.items)
    sol = g.solver.solution()
    guards = graph_guards(g)
    kernels = tuple(Kernel(b, backend, kernel_signatures(b, g.dims, guards)) for b in bodies)
    pipe = Pipeline(g, sol.constraints, sol.trace, sol.residuals, _dim_table(g), kernels, host,
                    plan, (), t, records)
    t0 = time.perf_counter()
    pipe, builds = _make_thunk(pipe, backend, shapes if is_static else None)
    t["build"] = time.perf_counter() - t0
    return CompiledModule(pipe, len(g.outputs) == 1, builds, consts)
