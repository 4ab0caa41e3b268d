"""``dl.compile``: torch module + example inputs -> a compiled module that serves every shape the
constraints admit, compiled once (kernels built once per compile, never per call).

``compile`` is the pipeline, one named and timed step per stage: capture (torch.export) -> lower (IR;
constraints solved as ops are added) -> generalize (the declared dynamic dims stay free) ->
passes -> kgen (coordinate inference) -> hostgen (host program, launch plan) -> build (kernels
compiled, thunk assembled). The stage objects are kept in a ``records.Pipeline``. A compile the
program cache has seen (``artifact.program``: the same module, call and settings) loads the
finished program instead, bound to the module's live weights; one the capture cache has seen
(``artifact.capture``) skips the trace."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import torch

from .artifact import capture as capture_cache
from .artifact import program as program_cache
from .bridge.aten import NoDimForm, lower_to_ir
from .bridge.guards import is_traced_guard
from .bridge.capture import Auto, auto, capture, derived_apart
from .bridge.generalize import check_generalization
from .bridge.signature import CallSignature
from .config import Config, resolve as resolve_config
from .dims import DimKind
from .display import Rich
from .errors import DLError, DTypeError, ShapeError, ShapeMismatch, SpecError, UnsupportedOp
from .hostgen.lower import LaunchPlan, lower
from .hostgen.program import HostProgram
from .ir.graph import Graph
from .ir.ops import Ops, check_backend
from .kgen.infer import infer_kernels, materialized_values
from .kgen.kir import KernelBody
from .passes import PassRecord, run_passes
from .passes.partition import index_reads
from .records import DimTable, Kernel, Pipeline
from .runtime.build import build_kernels
from .runtime.direct import kernel_signatures
from .runtime.thunks import DynamicAOTThunk, LaunchTrace, StaticThunk

__all__ = ["compile", "auto", "Auto", "CompiledModule", "CallSignature"]


def _signature_key(xs: Sequence[Any]) -> tuple:
    """(rank, dtype) per input: what a thunk is compiled for."""
    return tuple((len(x.shape), x.dtype) for x in xs)


class CompiledModule(Rich):
    """Callable result of ``dl.compile``: called as the module's ``forward`` is (positional and
    keyword arguments, bound as Python binds them; ``signature``), returns what the module
    returns (a tensor, a tuple, a dict, an HF ``ModelOutput``: export's output structure).
    Pickles without its loaded kernels; unpickling rebuilds them (from the kernel cache).

    One compile serves every shape of its (rank, dtype) signature through its static or
    dynamic-AOT thunk. Three cases get a module of their own, compiled on first use (at compile
    time when the example is one), cached and reused: a call whose ranks or dtypes match no
    compiled signature (``jit``, by signature: another rank is traced ``dynamic="auto"``,
    another dtype with the compile's own ``dynamic``); a call on the other side of a branch the
    module's code takes on sizes (a guard torch.export recorded, checked by the host program,
    two input axes export tied by one, or an axis export derived from others, a mask of past +
    new tokens: a variant traced at the call's sizes; ``variants``, by the guard or the axes);
    and a call the general program refuses where a dynamic dim is 0 or 1 (a broadcast, a
    squeeze, a branch on the size: a variant traced with those axes at their sizes, so it
    computes what torch does; ``variants``, by (input, axis, size))."""

    def __init__(self, pipeline: Pipeline, signature: CallSignature, kernel_builds: int,
                 constants: Sequence[torch.Tensor] = (), source: tuple | None = None,
                 capture: tuple[str, str, str] = ("off", "export", "off")):
        self.pipeline = pipeline
        self.signature = signature
        self._thunk = pipeline.thunks[0]
        self._kernel_builds = kernel_builds
        self._constants = tuple(constants)
        self._source = source   # (module, backend, fallback, dynamic, free spec, example
        #                           shapes, ties, derived axes); None: none (a loaded artifact)
        self._capture = capture   # what the capture cache did (api._capture_and_lower), the
        #   capture's path (bridge.capture: "fast" or "export: why"), what the program cache did
        self._key = _signature_key(pipeline.graph.inputs[:len(signature.inputs)])
        self.jit: dict[tuple, CompiledModule | DLError] = {}
        self.variants: dict[frozenset, CompiledModule | DLError] = {}

    def __call__(self, *args: Any, **kwargs: Any):
        return self._run(self.signature.bind(args, kwargs))

    def _run(self, ins: tuple):
        """The compiled program on the bound inputs ``ins``, or the JIT thunk or variant that
        serves them; the output in the module's structure."""
        try:
            out = self._thunk(*ins, *self._constants)
        except (DTypeError, ShapeMismatch) as err:   # checked before any launch
            return self._other(ins, err)._run(ins)
        return self.signature.unflatten(out)

    def _other(self, ins: tuple, err: Exception) -> "CompiledModule":
        """The JIT thunk or variant for ``ins``, compiled on first use; else ``err``."""
        if self._source is None or not all(isinstance(t, torch.Tensor) for t in ins):
            raise err
        key = _signature_key(ins)
        if key != self._key:
            return self._jit(ins, key)
        module, backend, fallback, _, spec, shapes, ties, derived = self._source
        static_ok = all(ins[i].shape[k] == n for i, shape in enumerate(shapes)
                        for k, n in enumerate(shape) if k not in spec.get(i, {}))
        if not static_ok or not isinstance(err, ShapeMismatch):
            raise err
        small = frozenset((i, k, int(ins[i].shape[k])) for i, axes in spec.items() for k in axes
                          if ins[i].shape[k] <= 1)
        broken = frozenset(t for t in ties if ins[t[0][0]].shape[t[0][1]] !=
                           ins[t[1][0]].shape[t[1][1]])
        apart = derived_apart(derived, [t.shape for t in ins]) if derived else frozenset()
        if small:   # those axes fixed at their sizes
            side, dyn = small, {i: {k: n for k, n in axes.items() if (i, k, ins[i].shape[k])
                                    not in small} for i, axes in spec.items()}
        elif broken:   # axes export tied by a guard: traced where they differ, each its own dim
            side, dyn = broken, {i: dict(axes) for i, axes in spec.items()}
            for _, (i, k) in broken:
                dyn[i][k] = f"{dyn[i][k]}_{i}_{k}"
        elif apart:   # an axis export derived from others differs: the code's other side
            side, dyn = apart, spec
        elif is_traced_guard(self.pipeline.graph, str(err).split(": needs")[0]):
            side, dyn = frozenset({str(err).split(": needs")[0]}), spec   # the branch's other side
        else:
            raise err
        if side not in self.variants:
            try:
                self.variants[side] = self._compile_like(ins, dyn)
            except DLError as why:   # no program for these sizes: the general program's refusal
                self.variants[side] = why
        v = self.variants[side]
        if isinstance(v, DLError):
            if side is broken:
                names = self.signature.inputs
                raise type(err)(f"{err} (torch.export tied " + "; ".join(
                    f"input {i} '{names[i]}' axis {k} to input {j} '{names[j]}' axis {m}"
                    for (j, m), (i, k) in sorted(broken)) + f" by a guard of the module's "
                    f"code; traced at these sizes it fails: {v})") from None
            raise err
        return v

    def _jit(self, ins: tuple, key: tuple) -> "CompiledModule":
        """The module for another (rank, dtype) signature, compiled on first use: another rank
        with ``dynamic="auto"``, another dtype with the compile's own ``dynamic``. A failed
        compile is kept and raised again, prefixed with what differs."""
        if key not in self.jit:
            ranks = [r for r, _ in key] != [r for r, _ in self._key]
            try:
                self.jit[key] = self._compile_like(ins, "auto" if ranks else self._source[3])
            except DLError as err:
                what = "; ".join(
                    f"input {i} '{name}' is {_sig_text(now)}, compiled for {_sig_text(was)}"
                    for i, (name, now, was) in enumerate(zip(self.signature.inputs, key,
                                                             self._key)) if now != was)
                self.jit[key] = type(err)(f"{what}; compiling for it failed: {err}")
        if isinstance(self.jit[key], DLError):
            raise self.jit[key]
        return self.jit[key]

    def _compile_like(self, ins: tuple, dynamic: Any) -> "CompiledModule":
        """``module`` compiled again from a call like the example's, with ``ins`` in the
        inputs' places, under this compile's configuration."""
        module, backend, fallback = self._source[:3]
        args, kwargs = self.signature.example_call(ins)
        return compile(module, args, kwargs, dynamic=dynamic, backend=backend,
                       fallback=fallback, config=self.pipeline.config)

    def stats(self) -> dict[str, Any]:
        """``compiles``: graph compiles behind this module (1, plus one per JIT signature and
        variant; never one per shape); ``kernel_builds``: kernel functions compiled (launch-time
        variants included), JIT thunks' and variants' included; ``jit_builds``: modules for
        another rank, ``dtype_builds``: for another dtype only; ``variants``; ``calls``: thunk
        invocations that launched; ``thunks``: calls per thunk kind (``static``/``dynamic``;
        ``jit``, by rank and dtype; ``variant``); ``graphs``: CUDA-graph captures, replays and
        LRU evictions (``runtime.graphs``; zeros on CPU); ``compile_s``: the steps' wall
        seconds; ``capture``: what the capture cache did for this compile (``artifact.capture``:
        ``"hit"``, ``"miss"``, ``"off"``, ``"uncacheable: <why>"``); ``capture_path``: how the
        program was captured (``"fast"``: a static export the solver generalized,
        ``bridge.fast``; ``"export: <why not fast>"``: torch.export with symbolic sizes);
        ``program``: what the program cache did (``artifact.program``: ``"hit"``, a compiled
        program loaded, no capture, passes or build; ``"miss"``, ``"off"``)."""
        jit = [c for c in self.jit.values() if isinstance(c, CompiledModule)]
        var = [v for v in self.variants.values() if isinstance(v, CompiledModule)]
        dtypes = sum(1 for k, c in self.jit.items() if isinstance(c, CompiledModule) and
                     [r for r, _ in k] == [r for r, _ in self._key])
        calls = {self._thunk.kind: self._thunk.calls,
                 "jit": sum(c.stats()["calls"] for c in jit),
                 "variant": sum(c.stats()["calls"] for c in var)}
        graphs = [c._thunk.graphs for c in [self, *jit, *var] if c._thunk.graphs is not None]
        return {"compiles": 1 + len(jit) + len(var),
                "kernel_builds": self._kernel_builds + sum(c._kernel_builds for c in jit + var),
                "jit_builds": len(jit) - dtypes, "dtype_builds": dtypes, "variants": len(var),
                "calls": sum(calls.values()), "thunks": calls,
                "graphs": {k: sum(g.stats()[k] for g in graphs)
                           for k in ("captures", "replays", "evictions")},
                "kernels": len(self.pipeline.kernels), "thunk": self._thunk.kind,
                "compile_s": sum(self.pipeline.timings.values()), "capture": self._capture[0],
                "capture_path": self._capture[1], "program": self._capture[2]}

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
        from .records import Report

        return Report(self, inputs)

    def __reduce__(self):
        th = self._thunk
        shapes = th.shapes if isinstance(th, StaticThunk) else None
        p = self.pipeline
        p = replace(p, thunks=(), kernels=tuple(replace(k, launcher=None) for k in p.kernels))
        return (_restore, (p, self.signature, self._constants, th.device, shapes))

    def __repr__(self) -> str:
        return f"CompiledModule{self.signature!r}: {self._thunk!r}"


# --- the pipeline ---------------------------------------------------------------------------------

def compile(module: torch.nn.Module, args: Sequence[Any] | torch.Tensor = (),
            kwargs: Mapping[str, Any] | None = None, *,
            dynamic: str | bool | Auto | Mapping[int | str, Mapping[int, str]] = "auto",
            backend: str = "auto", strict: bool = True, fallback: bool = True,
            config: Config | Mapping[str, Any] | None = None) -> CompiledModule:
    """Compile ``module`` once, from the example call ``module(*args, **kwargs)``, for the shapes
    ``dynamic`` admits. Tensor arguments are the inputs; ``None``, bools, ints, floats and
    strings are constants of the program (a call must pass the same). The result is called as
    the module is and returns what it returns.

    ``dynamic``: ``"auto"`` (the default; ``True`` is the same) proposes every input axis free
    and keeps free those the program admits: readable names (``N, C, H, W`` for an image,
    ``batch, seq`` for token ids and masks), one dim per axis unless the program ties them;
    ``dl.auto({input: {axis: name}})`` names some of them, the rest stay automatic; a mapping
    ``{input: {axis: dim name}}`` (input a position or ``forward``'s parameter name, negative
    axes from the end) frees exactly those axes; ``False`` compiles the example's shapes
    statically. A dim named in a spec that the program fixes to a literal raises ``ShapeError``
    (a warning with ``strict=False``). ``fallback``: an op DLCB does not lower runs in PyTorch
    eager at its place in the launch plan (an ``eager`` step; ``False``: one ``UnsupportedOp``
    lists every such op left after dead code is removed). ``config``: the switches (``dl.Config``,
    docs/design.md "Configuration"): ``None`` the environment's (``DLCB_*``, read now), a mapping
    ``{field: value}`` of overrides over them (``config={"channels_last": False}``), or a whole
    ``Config``; recorded in ``pipeline.config``, kept by the modules compiled later for other
    signatures and sizes, saved in artifacts. Raises ``ShapeError`` for
    incompatible shapes, ``UnsupportedOp`` for ops outside the supported set, ``DTypeError`` for
    dtypes an op rejects, ``SpecError`` for malformed arguments.
    """
    args = (args,) if isinstance(args, torch.Tensor) else tuple(args)
    backend = _resolve_backend(backend)
    config = resolve_config(config)
    step = _Steps()
    k, cached = _cache_key(step, module, args, kwargs, dynamic, config)
    pk = None
    if k is not None and config.program_cache:
        pk = program_cache.key(k, config, backend, strict, fallback)
        hit = step("load", program_cache.load, pk, module)
        if hit is not None:
            return _loaded(hit, step, module, args, kwargs, backend, fallback, dynamic, config)
        step.timings["capture"] += step.timings.pop("load")
    cap, g, cached, origin = _capture_and_lower(step, module, args, kwargs, dynamic, k, cached,
                                                config.fast_capture)
    examples = cap.examples
    roots = list(g.constants)   # before the passes derive theirs (the program cache's roots)
    step("generalize", check_generalization, g, strict, cap.declared)
    g, pass_records = step("passes", run_passes, g, config)
    if not fallback:
        _no_eager(g)
    check_backend(g, backend)
    bodies = step("kgen", infer_kernels, g, cooperative=backend == "cuda")
    host, plan, consts, shapes = step("hostgen", _hostgen, g, bodies, examples, backend,
                                       cap.widened)
    pipe = _pipeline(g, bodies, host, plan, pass_records, backend, step.timings)
    pipe, builds = step("build", _make_thunk, pipe, backend, shapes if _static(g) else None)
    pinned = {(i, k) for i, k, _ in cap.pins} | {   # a variant declares only the free axes
        (i, k) for i, v in enumerate(g.inputs[:len(examples)]) for k, d in enumerate(v.shape.items)
        if g.solver.classify(d) is DimKind.LITERAL}   # (the solver pins a static trace's)
    free = {i: {k: n for k, n in axes.items() if (i, k) not in pinned}
            for i, axes in cap.spec.items()}
    cm = CompiledModule(pipe, cap.signature, builds, consts,
                        (module, backend, fallback, cap.auto_spec or dynamic, free,
                         [tuple(x.shape) for x in examples], cap.ties, cap.derived),
                        (cached, cap.path, "off" if pk is None else "miss"))
    if pk is not None and origin is not None:
        auto = None if cap.auto_spec is None else (dict(cap.auto_spec.names), cap.auto_spec.fixed)
        program_cache.store(pk, cm, roots, origin, {
            "auto": auto, "free": free, "ties": cap.ties, "derived": cap.derived,
            "widened": cap.widened, "path": cap.path})
    if cap.widened:   # traced at 1: the variant for the example, now
        _example_variant(cm, examples)
    return cm


def _example_variant(cm: CompiledModule, examples: tuple) -> None:
    """A capture that traced a size-1 axis at 2: the variant for the example, compiled now."""
    try:
        cm._thunk(*examples, *cm._constants)
    except ShapeMismatch as err:
        cm._other(examples, err)


def _cache_key(step: "_Steps", module: torch.nn.Module, args: tuple,
               kwargs: Mapping[str, Any] | None, dynamic: Any, config: Config
               ) -> tuple[str | None, str]:
    """The capture cache's key of this compile (``artifact.capture``; the program cache's key
    builds on it) and what the caches can do: ``"miss"`` (so far), ``"off"``,
    ``"uncacheable: <why>"`` (no key)."""
    if not config.capture_cache:
        return None, "off"
    try:
        return step("capture", capture_cache.key, module, args, kwargs,
                    (dynamic, config.fast_capture)), "miss"
    except capture_cache.Uncacheable as why:
        return None, f"uncacheable: {why}"


def _loaded(hit: tuple, step: "_Steps", module: torch.nn.Module, args: tuple,
            kwargs: Mapping[str, Any] | None, backend: str, fallback: bool, dynamic: Any,
            config: Config) -> CompiledModule:
    """The compiled module of a program cache hit (``artifact.program``), bound to this call."""
    p, builds, signature, c = hit
    p.graph.config = config   # the switches as this call gave them (equal where they matter)
    p = replace(p, kernels=tuple(replace(k, config=config) for k in p.kernels))
    examples = signature.bind(args, dict(kwargs or {}))
    spec = dynamic if c["auto"] is None else Auto(*c["auto"])
    cm = CompiledModule(replace(p, timings=step.timings), signature, builds,
                        _device_constants(p.graph, backend),
                        (module, backend, fallback, spec, c["free"],
                         [tuple(x.shape) for x in examples], c["ties"], c["derived"]),
                        ("hit", c["path"], "hit"))
    if c["widened"]:
        _example_variant(cm, examples)
    return cm


def _capture_and_lower(step: "_Steps", module: torch.nn.Module, args: tuple,
                       kwargs: Mapping[str, Any] | None, dynamic: Any, k: str | None,
                       cached: str, fast: bool) -> tuple[Any, Graph, str, Any]:
    """Capture and lower, through the capture cache (``artifact.capture``; entry ``k``, None:
    none), by the fast path where ``bridge.fast`` certifies the module and ``fast``; under
    ``dynamic="auto"``, a size with no dim form makes the input axes it depends on static, and
    the model is traced again (automatic generalization keeps free only the dims the program
    can be compiled for). The third result says what the capture cache did: ``"hit"``,
    ``"miss"``, ``"off"`` or ``"uncacheable: <why>"`` (``cached`` unless it hit); the fourth
    where the graph's constants come from (``capture.Origin``; None without an entry)."""
    if k is not None:
        hit = step("capture", capture_cache.load, k, module, args, kwargs)
        if hit is not None:   # read back lowered: the lower step takes no time
            step.timings["lower"] = 0.0
            return (*hit[:2], "hit", hit[2])
    spec = dynamic
    while True:
        cap = step("capture", capture, module, args, kwargs, spec, fast)
        try:
            g = step("lower", lower_to_ir, cap, True)
            break
        except NoDimForm as err:
            spec = cap.fixing(err.symbols)
            if spec is None:
                raise
    origin = None
    if k is not None:
        try:
            origin = step("capture", capture_cache.store, k, module, cap, g)
        except Exception as err:   # a cache that cannot be written costs the next compile, only
            logging.getLogger(__name__).warning("capture cache: entry not written (%s: %s)",
                                                type(err).__name__, err)
    return cap, g, cached, origin


def _no_eager(g: Graph) -> None:
    """``fallback=False``: one ``UnsupportedOp`` listing every op left to eager once dead code
    is gone (an op nobody reads is no reason to refuse the model)."""
    left = [n for n in g.nodes if n.op is Ops.eager]
    if left:
        raise UnsupportedOp(f"{len(left)} ATen node{'s' * (len(left) > 1)} not supported by "
                            f"DLCB IR (fallback=False):\n" + "\n".join(
                                f"  '{n.out.name}': {n.attrs['target']} at {n.where} "
                                f"({n.attrs['reason']})" for n in left))


class _Steps:
    """Runs the pipeline's steps, recording each one's wall time under its name."""

    def __init__(self):
        self.timings: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:   # a step run again (a second trace) adds up
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0


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
    consts = _device_constants(g, backend)
    shapes = [tuple(x.shape) for x in examples] + [tuple(c.shape) for c in consts]
    try:
        host.interpret(shapes)
    except ShapeMismatch as err:
        if not widened:
            raise ShapeError(f"the example inputs violate the compiled program: {err}") from None
    return host, plan, consts, shapes


def _device_constants(g: Graph, backend: str) -> list[torch.Tensor]:
    """The graph's constants on the backend's device (the same storage when already there;
    contiguous, so calls need not check them)."""
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "cuda" else "cpu"
    return [c.detach().to(device).contiguous() for _, c in g.constants]


def _static(g: Graph) -> bool:
    """Every input axis a literal: a static thunk (one host-program run, at compile time)."""
    return all(g.solver.classify(d) is DimKind.LITERAL for v in g.inputs for d in v.shape.items)


def _pipeline(g: Graph, bodies: Sequence[KernelBody], host: HostProgram, plan: LaunchPlan,
              passes: Sequence[PassRecord], backend: str, timings: dict[str, float]) -> Pipeline:
    """The stage records of a compile, before the build (no thunk, kernels without launchers)."""
    sol = g.solver.solution()
    mats = {v.id for v in g.materialized()}
    kernels = tuple(Kernel(b, backend, kernel_signatures(b, g.dims, plan.guards,
                                                         index_reads(g, b.out, mats)),
                           config=g.config)
                    for b in bodies)   # the host program's guards (hostgen.guards), once
    return Pipeline(g, sol.constraints, sol.trace, sol.residuals, DimTable.of_graph(g), kernels,
                    host, plan, (), timings, tuple(passes))


def _make_thunk(p: Pipeline, backend: str, shapes) -> tuple[Pipeline, int]:
    """Build the kernels; ``p`` with the thunk, and each kernel bound to its launcher (the
    launchers follow the kernels' order, which is the launch plan's)."""
    launchers, builds = build_kernels([k.body for k in p.kernels], backend, p.config)
    g = p.graph
    args = (p.host_program, p.launch_plan, launchers, [v.dtype for v in g.inputs], backend,
            [v.name for v in g.inputs], len(g.inputs) - len(g.constants), p.config.cuda_graphs)
    thunk = StaticThunk(*args, shapes=shapes) if shapes is not None else DynamicAOTThunk(*args)
    kernels = tuple(replace(k, launcher=ln) for k, ln in zip(p.kernels, launchers))
    return replace(p, thunks=(thunk,), kernels=kernels), builds


def _restore(p: Pipeline, signature: CallSignature, consts: tuple, backend: str,
             shapes) -> CompiledModule:
    p, builds = _make_thunk(p, backend, shapes)
    return CompiledModule(p, signature, builds, consts)


def _sig_text(rank_dtype: tuple) -> str:
    rank, dtype = rank_dtype
    return f"rank {rank} {str(dtype).replace('torch.', '')}"
