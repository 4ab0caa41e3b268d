"""``dl.compile``: torch module + example inputs -> a compiled module that serves every shape the
constraints admit, compiled once (kernels built once per compile, never per call).

``compile`` is the pipeline, one named and timed step per stage: capture (torch.export) -> lower (IR;
constraints solved as ops are added) -> generalize (the declared dynamic dims stay free) ->
passes -> kgen (coordinate inference) -> hostgen (host program, launch plan) -> build (kernels
compiled, thunk assembled). The stage objects are kept in a ``records.Pipeline``."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import torch

from .bridge.aten import GUARD_NOTE, lower_to_ir
from .bridge.capture import capture
from .bridge.generalize import check_generalization
from .dims import DimKind
from .display import Rich
from .errors import ArgumentError, DLError, DTypeError, ShapeError, ShapeMismatch, SpecError
from .hostgen.lower import LaunchPlan, lower
from .hostgen.program import HostProgram
from .ir.graph import Graph
from .ir.ops import check_backend
from .kgen.infer import infer_kernels, materialized_values
from .kgen.kir import KernelBody
from .passes import PassRecord, run_passes
from .passes.partition import index_reads
from .records import DimTable, Kernel, Pipeline
from .runtime.build import build_kernels
from .runtime.direct import kernel_signatures
from .runtime.thunks import DynamicAOTThunk, LaunchTrace, StaticThunk

__all__ = ["compile", "CompiledModule", "CallSignature"]

_P = inspect.Parameter


@dataclass(frozen=True)
class CallSignature:
    """The compiled module's call interface: ``forward``'s parameters, one tensor input of the
    graph each, in order. ``kinds`` are ``inspect.Parameter`` kinds (positional-only,
    positional-or-keyword, keyword-only); ``defaults`` the ``repr`` of a parameter's default, or
    None. A default is never used: the graph was traced with the example given for that
    parameter, so a call must pass every input. Picklable (names and strings only)."""

    names: tuple[str, ...]
    kinds: tuple[int, ...]
    defaults: tuple[str | None, ...]

    @classmethod
    def of(cls, forward: Callable, names: Sequence[str]) -> "CallSignature":
        """``forward``'s signature if its parameters are the traced inputs ``names``; else (a
        ``*args`` parameter, a wrapped forward) the inputs by position only."""
        try:
            ps = list(inspect.signature(forward).parameters.values())
        except (TypeError, ValueError):
            ps = []
        if [p.name for p in ps] != list(names) or \
                any(p.kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) for p in ps):
            return cls(tuple(names), (int(_P.POSITIONAL_ONLY),) * len(names), (None,) * len(names))
        return cls(tuple(p.name for p in ps), tuple(int(p.kind) for p in ps),
                   tuple(None if p.default is _P.empty else _short_repr(p.default) for p in ps))

    def bind(self, args: tuple, kwargs: Mapping[str, Any]) -> tuple:
        """``args`` and ``kwargs`` as one positional tuple, bound as Python binds a call to
        ``forward``; ``ArgumentError`` naming the parameter at fault."""
        n = len(self.names)
        if not kwargs and len(args) == n and _P.KEYWORD_ONLY not in self.kinds:
            return args   # the common call: every input by position
        positional = [i for i, k in enumerate(self.kinds) if k != _P.KEYWORD_ONLY]
        if len(args) > len(positional):
            raise ArgumentError(f"{self._expected(len(args) + len(kwargs))}: takes at most "
                                f"{len(positional)} positional argument(s), got {len(args)}")
        bound: dict[int, Any] = dict(zip(positional, args))
        for key, value in kwargs.items():
            i = self.names.index(key) if key in self.names else -1
            if i < 0:
                raise ArgumentError(f"unexpected keyword argument {key!r} "
                                    f"({self._expected(len(args) + len(kwargs))})")
            if self.kinds[i] == _P.POSITIONAL_ONLY:
                raise ArgumentError(f"input {i} {key!r} is positional-only, passed as keyword")
            if i in bound:
                raise ArgumentError(f"input {i} {key!r} given twice (by position and keyword)")
            bound[i] = value
        missing = [i for i in range(n) if i not in bound]
        if missing:
            what = ", ".join(f"input {i} {self.names[i]!r}" + (
                f" (its default {self.defaults[i]} was not traced: the compile took an example "
                f"tensor for it)" if self.defaults[i] is not None else "") for i in missing)
            raise ArgumentError(f"missing {what} ({self._expected(len(bound))})")
        return tuple(bound[i] for i in range(n))

    def _expected(self, got: int) -> str:
        return f"expected {len(self.names)} tensor inputs ({', '.join(self.names)}), got {got}"

    def __repr__(self) -> str:
        """As ``inspect`` prints a signature: ``(x, /, y=None, *, z)``."""
        parts: list[str] = []
        for i, (name, kind, d) in enumerate(zip(self.names, self.kinds, self.defaults)):
            if kind == _P.KEYWORD_ONLY and (not i or self.kinds[i - 1] != _P.KEYWORD_ONLY):
                parts.append("*")
            parts.append(name if d is None else f"{name}={d}")
            if kind == _P.POSITIONAL_ONLY and self.kinds[i + 1:i + 2] != (_P.POSITIONAL_ONLY,):
                parts.append("/")
        return f"({', '.join(parts)})"


def _signature_key(xs: Sequence[Any]) -> tuple:
    """(rank, dtype) per input: what a thunk is compiled for."""
    return tuple((len(x.shape), x.dtype) for x in xs)


def _short_repr(x: Any, limit: int = 40) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[:limit - 3] + "..."


class CompiledModule(Rich):
    """Callable result of ``dl.compile``: called as the module's ``forward`` (positional and
    keyword arguments), returns a tensor (or a tuple for several outputs). Pickles without its
    loaded kernels; unpickling rebuilds them (from the kernel cache).

    One compile serves every shape of its (rank, dtype) signature through its static or
    dynamic-AOT thunk. Three cases get a module of their own, compiled on first use (at compile
    time when the example is one), cached and reused: a call whose ranks match no compiled
    signature (a JIT thunk: ``dynamic="auto"`` for those inputs; ``jit``, by signature); a call
    on the other side of a branch the module's code takes on sizes (a guard torch.export
    recorded, checked by the host program: a variant traced at the call's sizes; ``variants``,
    by the guard); and a call the general program refuses where a dynamic dim is 0 or 1 (a
    broadcast, a squeeze, a branch on the size: a variant traced with those axes at their sizes,
    so it computes what torch does; ``variants``, by (input, axis, size))."""

    def __init__(self, pipeline: Pipeline, signature: CallSignature, single: bool,
                 kernel_builds: int, constants: Sequence[torch.Tensor] = (),
                 source: tuple | None = None):
        self.pipeline = pipeline
        self.signature = signature
        self._thunk = pipeline.thunks[0]
        self._single = single
        self._kernel_builds = kernel_builds
        self._constants = tuple(constants)
        self._source = source   # (module, backend, fallback, spec, example shapes); None: none
        self._key = _signature_key(pipeline.graph.inputs[:len(signature.names)])
        self.jit: dict[tuple, CompiledModule] = {}
        self.variants: dict[frozenset, CompiledModule] = {}

    def __call__(self, *args: torch.Tensor, **kwargs: torch.Tensor):
        ins = self.signature.bind(args, kwargs)
        try:
            out = self._thunk(*ins, *self._constants)
        except (DTypeError, ShapeMismatch) as err:   # checked before any launch
            return self._other(ins, err)(*ins)
        return out[0] if self._single else out

    def _other(self, ins: tuple, err: Exception) -> "CompiledModule":
        """The JIT thunk or variant for ``ins``, compiled on first use; else ``err``."""
        if self._source is None or not all(isinstance(t, torch.Tensor) for t in ins):
            raise err
        module, backend, fallback, spec, shapes = self._source
        key = _signature_key(ins)
        if key != self._key:
            if [d for _, d in key] != [d for _, d in self._key]:
                raise err   # a dtype the module was not compiled for
            if key not in self.jit:
                self.jit[key] = compile(module, ins, dynamic="auto", backend=backend,
                                        fallback=fallback)
            return self.jit[key]
        static_ok = all(ins[i].shape[k] == n for i, shape in enumerate(shapes)
                        for k, n in enumerate(shape) if k not in spec.get(i, {}))
        if not static_ok or not isinstance(err, ShapeMismatch):
            raise err
        small = frozenset((i, k, int(ins[i].shape[k])) for i, axes in spec.items() for k in axes
                          if ins[i].shape[k] <= 1)
        if small:   # those axes fixed at their sizes
            side, dyn = small, {i: {k: n for k, n in axes.items() if (i, k, ins[i].shape[k])
                                    not in small} for i, axes in spec.items()}
        elif GUARD_NOTE in str(err):   # the other side of a branch on sizes: traced there
            side, dyn = frozenset({str(err).split(": needs")[0]}), spec
        else:
            raise err
        if side not in self.variants:
            try:
                self.variants[side] = compile(module, ins, dynamic=dyn, backend=backend,
                                              fallback=fallback)
            except DLError:   # no program for these sizes: the general program's refusal
                self.variants[side] = None
        if self.variants[side] is None:
            raise err
        return self.variants[side]

    def stats(self) -> dict[str, Any]:
        """``compiles``: graph compiles behind this module (1, plus one per JIT signature and
        size-1 variant; never one per shape); ``kernel_builds``: kernel functions compiled
        (launch-time variants included), JIT thunks' and variants' included; ``calls``: thunk
        invocations that launched; ``thunks``: calls per thunk kind (``static``/``dynamic``;
        ``jit``; ``variant``); ``graphs``: CUDA-graph captures, replays and LRU evictions
        (``runtime.graphs``; zeros on CPU)."""
        jit, var = list(self.jit.values()), [v for v in self.variants.values() if v is not None]
        calls = {self._thunk.kind: self._thunk.calls,
                 "jit": sum(c.stats()["calls"] for c in jit),
                 "variant": sum(c.stats()["calls"] for c in var)}
        graphs = [c._thunk.graphs for c in [self, *jit, *var] if c._thunk.graphs is not None]
        return {"compiles": 1 + len(jit) + len(var),
                "kernel_builds": self._kernel_builds + sum(c._kernel_builds for c in jit + var),
                "jit_builds": len(jit), "variants": len(var), "calls": sum(calls.values()),
                "thunks": calls,
                "graphs": {k: sum(g.stats()[k] for g in graphs)
                           for k in ("captures", "replays", "evictions")},
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

    def save(self, path) -> Any:
        """One self-contained, versioned artifact at ``path`` (``dl.load`` runs it in another
        process with no kernel builds); see ``dlcb_lab.artifact``."""
        from .artifact import save

        return save(self, path)

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
        return (_restore, (p, self.signature, self._single, self._constants, th.device, shapes))

    def __repr__(self) -> str:
        return f"CompiledModule{self.signature!r}: {self._thunk!r}"


# --- the pipeline ---------------------------------------------------------------------------------

def compile(module: torch.nn.Module, example_inputs: Sequence[torch.Tensor] | torch.Tensor,
            dynamic: Mapping[int | str, Mapping[int, str]] | bool = False,
            backend: str = "auto", strict: bool = True, fallback: bool = True) -> CompiledModule:
    """Compile ``module`` once for the shapes ``dynamic`` admits.

    ``dynamic`` maps an input (position, or parameter name of ``forward``) to ``{axis: dim name}``
    (negative axes count from the end); ``False`` compiles the example shapes statically. A dim
    declared dynamic that the program fixes to a literal raises ``ShapeError`` (a warning with
    ``strict=False``). The example inputs must satisfy the compiled constraints. ``fallback``: an
    op DLCB does not lower runs in PyTorch eager at its place in the launch plan (an ``eager``
    step; ``False``: one ``UnsupportedOp`` lists every such op). Raises
    ``ShapeError`` for incompatible shapes, ``UnsupportedOp`` for ops outside the supported set,
    ``DTypeError`` for dtypes an op rejects, ``SpecError`` for malformed arguments.
    """
    examples = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else \
        tuple(example_inputs)
    backend = _resolve_backend(backend)
    step = _Steps()
    cap = step("capture", capture, module, examples, dynamic)
    g = step("lower", lower_to_ir, cap, fallback)
    step("generalize", check_generalization, g, strict and not cap.auto, cap.auto)
    g, pass_records = step("passes", run_passes, g)
    check_backend(g, backend)
    bodies = step("kgen", infer_kernels, g, cooperative=backend == "cuda")
    host, plan, consts, shapes = step("hostgen", _hostgen, g, bodies, examples, backend,
                                       cap.widened)
    pipe = _pipeline(g, bodies, host, plan, pass_records, backend, step.timings)
    pipe, builds = step("build", _make_thunk, pipe, backend, shapes if _static(g) else None)
    signature = CallSignature.of(getattr(module, "forward", module),
                                 [v.name for v in g.inputs[:len(examples)]])
    pinned = {(i, k) for i, k, _ in cap.pins}   # a variant declares only the free axes
    free = {i: {k: n for k, n in axes.items() if (i, k) not in pinned}
            for i, axes in cap.spec.items()}
    cm = CompiledModule(pipe, signature, len(g.outputs) == 1, builds, consts,
                        (module, backend, fallback, free, [tuple(x.shape) for x in examples]))
    if cap.widened:   # traced at 1: the variant for the example, now
        try:
            cm._thunk(*examples, *consts)
        except ShapeMismatch as err:
            cm._other(examples, err)
    return cm


class _Steps:
    """Runs the pipeline's steps, recording each one's wall time under its name."""

    def __init__(self):
        self.timings: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.timings[name] = time.perf_counter() - t0


def _resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend not in ("cpu", "cuda"):
        raise SpecError(f"backend must be 'auto', 'cpu' or 'cuda', not {backend!r}")
    if backend == "cuda" and not torch.cuda.is_available():
        raise SpecError("backend='cuda' but torch sees no CUDA device")
    return backend


def _hostgen(g: Graph, bodies: Sequence[KernelBody], examples: Sequence[torch.Tensor],
             backend: str, widened: bool = False
             ) -> tuple[HostProgram, LaunchPlan, list[torch.Tensor], list[tuple]]:
    """The host program and launch plan; the module's parameters and buffers on the backend's
    device (the same storage when already there; contiguous, so calls need not check them); the
    example call's shapes, which the host program must accept (unless the capture ``widened`` a
    size-1 axis: then the size-1 variant serves the example)."""
    host, plan = lower(g, materialized_values(g), bodies)
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "cuda" else "cpu"
    consts = [c.detach().to(device).contiguous() for _, c in g.constants]
    shapes = [tuple(x.shape) for x in examples] + [tuple(c.shape) for c in consts]
    try:
        host.interpret(shapes)
    except ShapeMismatch as err:
        if not widened:
            raise ShapeError(f"the example inputs violate the compiled program: {err}") from None
    return host, plan, consts, shapes


def _static(g: Graph) -> bool:
    """Every input axis a literal: a static thunk (one host-program run, at compile time)."""
    return all(g.solver.classify(d) is DimKind.LITERAL for v in g.inputs for d in v.shape.items)


def _pipeline(g: Graph, bodies: Sequence[KernelBody], host: HostProgram, plan: LaunchPlan,
              passes: Sequence[PassRecord], backend: str, timings: dict[str, float]) -> Pipeline:
    """The stage records of a compile, before the build (no thunk, kernels without launchers)."""
    sol = g.solver.solution()
    mats = {v.id for v in g.materialized()}
    kernels = tuple(Kernel(b, backend, kernel_signatures(b, g.dims, plan.guards,
                                                         index_reads(g, b.out, mats)))
                    for b in bodies)   # the host program's guards (hostgen.guards), once
    return Pipeline(g, sol.constraints, sol.trace, sol.residuals, DimTable.of_graph(g), kernels,
                    host, plan, (), timings, tuple(passes))


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


def _restore(p: Pipeline, signature: CallSignature, single: bool, consts: tuple, backend: str,
             shapes) -> CompiledModule:
    p, builds = _make_thunk(p, backend, shapes)
    return CompiledModule(p, signature, single, builds, consts)
