"""``dl.compile``: torch module + example inputs -> a compiled module that serves every shape the
constraints admit, compiled once (kernels built once per compile, never per call)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from .bridge.fx import lower_to_ir, trace
from .dims import Constraints, DimKind, Expr, SolverTrace
from .hostgen.lower import LaunchPlan, lower
from .hostgen.program import HostProgram
from .ir.graph import Graph
from .kgen.coords import CoordMap, KernelBody, infer_kernels
from .kgen.emit import (NARROW, cuda_kernel, cuda_module, entry_points, numba_kernel,
                        numba_module, signature)
from .runtime.thunks import CpuLauncher, CudaLauncher, DynamicAOTThunk, StaticThunk, Thunk


@dataclass(frozen=True)
class DimRow:
    value: str
    axis: int
    expr: Expr
    kind: DimKind


@dataclass(frozen=True)
class DimTable:
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
class Kernel:
    """A generated kernel: its body, coordinate map and source in the chosen backend's language."""

    body: KernelBody
    backend: str

    @property
    def source(self) -> str:
        """Source in the backend's language (the cooperative variant, if any, is ``variant``)."""
        return self.cuda_source if self.backend == "cuda" else self.numba_source

    @property
    def name(self) -> str:
        return self.body.name

    @property
    def coord_map(self) -> CoordMap:
        return self.body.coord_map

    @property
    def cuda_source(self) -> str:
        return cuda_kernel(self.body)

    @property
    def numba_source(self) -> str:
        return numba_kernel(self.body)

    def __repr__(self) -> str:
        ps = ", ".join(f"{n}={e!r}" for n, e in self.body.params)
        return f"Kernel {self.name} [{self.backend}] out %{self.body.out.name} params ({ps})"


@dataclass(frozen=True)
class Pipeline:
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

    def __repr__(self) -> str:
        t = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.timings.items())
        return (f"Pipeline: {len(self.graph.nodes)} ops, {len(self.constraints)} constraints, "
                f"{len(self.solver_trace)} rule applications, {len(self.residuals)} residual, "
                f"dims {self.dims.counts()}, {len(self.kernels)} kernels, "
                f"{len(self.host_program.instrs)} host instructions, thunks "
                f"{[th.kind for th in self.thunks]}\n  timings: {t}")


class CompiledModule:
    """Callable result of ``dl.compile``. Returns a tensor (or a tuple for several outputs)."""

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

    def __repr__(self) -> str:
        return f"CompiledModule({self._thunk!r})"


def _resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend not in ("cpu", "cuda"):
        raise ValueError(f"backend must be 'auto', 'cpu' or 'cuda', not {backend!r}")
    if backend == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("backend='cuda' but torch sees no CUDA device")
    return backend


def _dim_table(g: Graph) -> DimTable:
    rows = []
    for v in list(g.inputs) + [n.out for n in g.nodes]:
        for k, d in enumerate(v.shape.items):
            rows.append(DimRow(v.name, k, g.solver.resolve(d), g.solver.classify(d)))
    return DimTable(tuple(rows))


def build_kernels(bodies: Sequence[KernelBody], backend: str) -> tuple[list, int]:
    """Compile all kernels of one graph as one unit. Returns (launchers, kernel functions built)."""
    if backend == "cuda":
        from .runtime.cuda_launch import CudaModule
        from .runtime.nvrtc import compile_cubin, device_arch

        cubin = compile_cubin(cuda_module(list(bodies)), arch=device_arch())
        mod = CudaModule(cubin, entry_points(list(bodies)))
        sm = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        launchers = []
        for b in bodies:
            variants = (b,) if b.variant is None else (b, b.variant)
            launchers.append(CudaLauncher({(i, narrow): mod.kernel(v.name + NARROW * narrow,
                                                                   signature(v))
                                           for i, v in enumerate(variants)
                                           for narrow in (False, True)}, sm))
        return launchers, len(entry_points(list(bodies)))
    from .runtime.numba_cpu import load_numba_module

    mod, _ = load_numba_module(numba_module(list(bodies)))
    launchers = [CpuLauncher(getattr(mod, b.name)) for b in bodies]
    return launchers, len(bodies)


def compile(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor] | torch.Tensor,
            dynamic: Mapping[int, Mapping[int, str]] | bool = False,
            backend: str = "auto") -> CompiledModule:
    """Compile ``module`` once for the shapes ``dynamic`` admits.

    ``dynamic`` maps an input index to ``{axis: dim name}`` (negative axes count from the end);
    ``False`` (or ``{}``) compiles the example shapes statically. Raises ``ShapeError`` for
    incompatible shapes and ``UnsupportedOp`` for ops outside the supported set.
    """
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if dynamic is True:
        raise ValueError("dynamic=True needs dim names: pass {input: {axis: 'N'}}")
    spec = dict(dynamic or {})
    backend = _resolve_backend(backend)
    t = {}
    t0 = time.perf_counter()
    gm = trace(module)
    g = lower_to_ir(gm, list(example_inputs), spec)
    t["capture+solve"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    bodies = infer_kernels(g, cooperative=backend == "cuda")
    t["kgen"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    host, plan = lower(g, bodies)
    t["hostgen"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    launchers, builds = build_kernels(bodies, backend)
    t["build"] = time.perf_counter() - t0
    is_static = not any(g.solver.classify(d) != DimKind.LITERAL for v in g.inputs
                        for d in v.shape.items)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "cuda" else "cpu"
    consts = [t.detach().to(device) for _, t in g.constants]   # same storage when already there
    args = (host, plan, launchers, [v.dtype for v in g.inputs], backend, [v.name for v in g.inputs])
    if is_static:
        shapes = [tuple(x.shape) for x in example_inputs] + [tuple(t.shape) for t in consts]
        thunk: Thunk = StaticThunk(*args, shapes=shapes)
    else:
        thunk = DynamicAOTThunk(*args)
    sol = g.solver.solution()
    pipe = Pipeline(g, sol.constraints, sol.trace, sol.residuals, _dim_table(g),
                    tuple(Kernel(b, backend) for b in bodies), host, plan,
                    (thunk,), t)
    return CompiledModule(pipe, len(g.outputs) == 1, builds, consts)
