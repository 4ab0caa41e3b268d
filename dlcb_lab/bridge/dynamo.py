"""TorchDynamo backend: ``torch.compile(model, backend="dlcb")``.

Registered by the ``torch_dynamo_backends`` entry point (pyproject.toml), so ``torch.compile``
finds it without importing dlcb_lab first. Dynamo hands ``dlcb`` each captured graph (a torch-level
``fx.GraphModule``) and its example inputs; ``dlcb`` compiles it once with ``dl.compile`` and
returns a callable taking Dynamo's full argument list.

Dims: an input tensor axis whose fake size is a symbol of Dynamo's shape environment (``s0``,
marked or made dynamic by automatic dynamic shapes) becomes the DLCB named dim of that symbol's
name; the same symbol is the same dim. A SymInt placeholder whose symbol is some tensor input's
axis is rebuilt inside the graph as that axis's size (``x.size(k)``), so DLCB receives tensors only
and the callable drops the int arguments. One DLCB compile thus serves every value Dynamo's guards
admit; Dynamo's own recompiles (a guard failure, the first shape change under automatic dynamic)
are new graphs, each compiled once.

Fallback: a graph DLCB cannot take (a ``dl`` error from ``dl.compile``, a symbol no tensor axis
carries, a non-tensor output, autograd, mixed devices) runs as ``gm.forward`` (eager); so does a
call DLCB refuses before launching (``ShapeMismatch``: a constraint stricter than Dynamo's guards;
``LayoutError``, ...) and a call whose baked-in scalar changed (below).
Each graph's outcome is a ``GraphRecord`` in ``LOG``.

Parameters and buffers: Dynamo passes them as graph inputs (unguarded with its default
``inline_inbuilt_nn_modules``: another instance of the same module class reuses the graph), so by
default they stay DLCB inputs of static shape, read at each call, and no compile-time rewrite sees
their values (batch norm is computed, not folded into the convolution). ``freeze=True`` bakes them
in as DLCB constants (folding applies); a call passing another tensor in their place runs eagerly,
and changes to their values after the compile (an optimizer step, ``load_state_dict``) are not
seen, as with ``torch.jit.freeze``.

Scalars: under ``dynamic=True`` Dynamo passes an unspecialized Python float
(a float argument, a module's ``eps`` or ``momentum``) as a 0-d tensor read by ``.item()``, with no
guard on its value (Dynamo may still recompile on a module attribute's change). DLCB takes no
scalar inputs, so the example value is baked in; a call with another value runs eagerly.

Options (``torch.compile(..., options={...})``): ``backend`` ("auto", "cpu", "cuda"; default the
inputs' device), ``fallback`` (default True; False re-raises the ``dl`` error), ``strict``
(``dl.compile``'s, default True), ``freeze`` (default False, above).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.fx as fx

from ..errors import BuildError, DLError, SpecError

__all__ = ["dlcb", "optimize", "Optimized", "GraphRecord", "LOG", "records", "compiles",
           "clear_log"]

_OPTIONS = ("backend", "fallback", "strict", "freeze")


@dataclass
class GraphRecord:
    """One graph Dynamo handed the backend. ``graph_id``: order of arrival (0, 1, ...);
    ``compile_id``: Dynamo's (as in ``TORCH_LOGS``); ``nodes``: its op nodes (call_*);
    ``compiled``: True if DLCB runs it, False if eager; ``reason``: why eager (else "");
    ``dims``: {Dynamo argument position: {axis: dim name}}; ``dropped``: the positions of the int
    and baked-in scalar arguments the callable does not pass to DLCB; ``calls``; ``eager_calls``:
    calls run eagerly although compiled (a changed scalar, a ``dl`` error of the call),
    ``last_mismatch`` the last one's reason; ``compile_s``: the DLCB compile's time; ``module``:
    the ``dl.CompiledModule`` (None if eager)."""

    graph_id: int
    compile_id: str
    nodes: int
    compiled: bool = False
    reason: str = ""
    backend: str = ""
    dims: dict[int, dict[int, str]] = field(default_factory=dict)
    dropped: tuple[int, ...] = ()
    calls: int = 0
    eager_calls: int = 0
    last_mismatch: str = ""
    compile_s: float = 0.0
    module: Any = None

    def __repr__(self) -> str:
        what = f"dlcb[{self.backend}] dims={self.dims}" if self.compiled else \
            f"eager ({self.reason})"
        return f"GraphRecord({self.graph_id}, {self.nodes} nodes, {what}, calls={self.calls})"


LOG: list[GraphRecord] = []


def records() -> list[GraphRecord]:
    """The log: one record per graph, in arrival order."""
    return list(LOG)


def compiles() -> int:
    """DLCB compiles so far (graphs that run compiled)."""
    return sum(r.compiled for r in LOG)


def clear_log() -> None:
    LOG.clear()


def dlcb(gm: fx.GraphModule, example_inputs: Sequence[Any], *, mode: str | None = None,
         options: Mapping[str, Any] | None = None) -> Callable:
    """The Dynamo backend: ``gm`` compiled by DLCB, or ``gm.forward`` on a refusal (recorded in
    ``LOG``). ``mode`` is accepted and ignored (DLCB has one mode)."""
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(_OPTIONS))
    if unknown:
        raise SpecError(f"torch.compile(backend='dlcb', options=...): unknown option(s) "
                        f"{unknown}; expected {list(_OPTIONS)}")
    rec = GraphRecord(len(LOG), _compile_id(),
                      sum(n.op.startswith("call_") for n in gm.graph.nodes))
    LOG.append(rec)
    try:
        plan = _plan(gm, example_inputs, bool(opts.get("freeze", False)))
        backend = opts.get("backend") or _device_backend(plan.examples)
    except _Eager as why:
        rec.reason = str(why)
        return _eager(gm, rec)
    import dlcb_lab as dl

    t0 = time.perf_counter()
    try:
        # Outside Dynamo's tracing context: export would otherwise reuse Dynamo's fake mode and
        # shape env, adding its own guards to the frame's (which then fail on the frame itself).
        with torch._guards.tracing(None):
            cm = dl.compile(plan.module, plan.examples, dynamic=plan.spec or False,
                            backend=backend, strict=opts.get("strict", True))
    except DLError as err:
        if not opts.get("fallback", True):
            raise
        rec.reason = f"{type(err).__name__}: {err}"
        return _eager(gm, rec)
    rec.compile_s = time.perf_counter() - t0
    rec.compiled, rec.backend, rec.module = True, backend, cm
    rec.dims = {plan.tensors[j]: axes for j, axes in plan.spec.items()}
    rec.dropped = plan.dropped
    return _runner(gm, cm, rec, plan)


# --- dl.optimize: one Dynamo graph, one DLCB compile, across batch and resolution ---------------

class Optimized:
    """``dl.optimize(model)``: ``torch.compile(model, backend="dlcb", dynamic=True)``, whose
    Dynamo traces run size-obliviously and without duck sizing (torch's
    ``backed_size_oblivious`` and ``use_duck_shape=False``, set only while Dynamo compiles a
    frame of this call): a size-1 axis is not specialized to 1 and axes of equal size are not
    one symbol, so the first graph Dynamo hands the backend already has every size symbolic and
    one DLCB compile serves every batch and resolution Dynamo's guards admit. Called as the
    model; ``compiled`` is torch.compile's module."""

    def __init__(self, model: torch.nn.Module, options: Mapping[str, Any] | None = None):
        self.model = model
        self.compiled = torch.compile(model, backend="dlcb", dynamic=True,
                                      options=dict(options) if options else None)
        _install_callbacks()

    def __call__(self, *args, **kwargs):
        global _DEPTH
        _DEPTH += 1
        try:
            return self.compiled(*args, **kwargs)
        finally:
            _DEPTH -= 1

    def __repr__(self) -> str:
        return f"Optimized({type(self.model).__name__}, {compiles()} DLCB compiles in LOG)"


def optimize(model: torch.nn.Module, **options: Any) -> Optimized:
    """``model`` compiled through Dynamo with the DLCB backend so that one DLCB compile serves
    every batch and resolution (``Optimized``); ``options`` are the backend's (``backend``,
    ``fallback``, ``strict``, ``freeze``)."""
    return Optimized(model, options)


_DEPTH = 0          # calls of an ``Optimized`` in progress
_SAVED: list = []   # the shape settings a Dynamo compile inside one replaced
_INSTALLED = False


def _install_callbacks() -> None:
    """Dynamo's compile start and end callbacks (``torch._dynamo.callback_handler``), once:
    inside an ``Optimized`` call, the compile traces size-obliviously without duck sizing."""
    global _INSTALLED
    if _INSTALLED:
        return
    handler = torch._dynamo.callback_handler
    handler.register_start_callback(_on_start)
    handler.register_end_callback(_on_end)
    _INSTALLED = True


def _on_start(_args: Any) -> None:
    import torch.fx.experimental._config as fx_config

    if _DEPTH:
        _SAVED.append((fx_config.backed_size_oblivious, fx_config.use_duck_shape))
        fx_config.backed_size_oblivious, fx_config.use_duck_shape = True, False


def _on_end(_args: Any) -> None:
    import torch.fx.experimental._config as fx_config

    if _SAVED:
        fx_config.backed_size_oblivious, fx_config.use_duck_shape = _SAVED.pop()


# --- planning: which arguments DLCB receives, which dims are named --------------------------------

class _Eager(Exception):
    """A reason to run the graph eagerly, found before ``dl.compile``."""


@dataclass
class _Plan:
    module: fx.GraphModule            # gm with int placeholders rebuilt from tensor sizes
    examples: tuple[torch.Tensor, ...]
    tensors: tuple[int, ...]          # positions of Dynamo's arguments DLCB receives
    dropped: tuple[int, ...]          # positions of the int and scalar arguments
    scalars: tuple[tuple[int, Any], ...]   # (position, value) of each scalar baked in
    frozen: tuple[tuple[int, torch.Tensor], ...]   # (position, tensor) of each one baked in
    spec: dict[int, dict[int, str]]   # DLCB input position -> {axis: dim name}


def _plan(gm: fx.GraphModule, example_inputs: Sequence[Any], freeze: bool = False) -> _Plan:
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(example_inputs):
        raise _Eager(f"{len(phs)} placeholders but {len(example_inputs)} example inputs")
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                       for x in example_inputs):
        raise _Eager("grad mode is on and an input requires grad: DLCB compiles inference only "
                     "(call under torch.no_grad() or torch.inference_mode())")
    tensors, ints, examples = [], [], []
    spec: dict[int, dict[int, str]] = {}
    where: dict[Any, tuple[fx.Node, int]] = {}   # sympy symbol -> (tensor placeholder, axis)
    scalars: dict[fx.Node, tuple[int, Any]] = {}   # unspecialized Python scalars, baked in
    frozen: dict[fx.Node, tuple[int, torch.Tensor]] = {}   # parameters and buffers, baked in
    for i, (n, ex) in enumerate(zip(phs, example_inputs)):
        val = n.meta.get("example_value", ex)
        if _is_scalar(n, ex):
            scalars[n] = (i, ex.item())
        elif freeze and _is_static(ex):
            frozen[n] = (i, ex)
        elif isinstance(ex, torch.Tensor):
            if isinstance(ex, torch._subclasses.FakeTensor) or type(ex) not in (
                    torch.Tensor, torch.nn.Parameter):
                raise _Eager(f"input {i} '{n.name}' is a {type(ex).__name__}, not a plain tensor")
            axes = {}
            for k, s in enumerate(getattr(val, "shape", ex.shape)):
                e = _expr(s)
                if e is None:
                    continue
                if not e.is_Symbol:
                    raise _Eager(f"input {i} '{n.name}' axis {k}: size {e} is an expression, "
                                 f"not one symbol")
                axes[k] = _dim_name(e)
                where.setdefault(e, (n, k))
            if axes:
                spec[len(tensors)] = axes
            tensors.append(i)
            examples.append(ex)
        elif isinstance(ex, (int, torch.SymInt)) and not isinstance(ex, bool):
            ints.append((i, n, _expr(val if isinstance(val, torch.SymInt) else ex)))
        else:
            raise _Eager(f"input {i} '{n.name}' is a {type(ex).__name__} (tensor and int "
                         f"inputs only)")
    for i, n, e in ints:
        if e is None or not e.is_Symbol or e not in where:
            raise _Eager(f"int input {i} '{n.name}' = {e if e is not None else 'constant'}: "
                         f"not the size of any tensor input's axis, so DLCB cannot derive it")
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    for j, o in enumerate(outs):
        v = o.meta.get("example_value") if isinstance(o, fx.Node) else o
        if not isinstance(v, torch.Tensor):
            raise _Eager(f"output {j} is {type(v).__name__}, not a tensor")
    if not outs:
        raise _Eager("the graph has no outputs")
    module = _tensor_only(gm, {n: where[e] for _, n, e in ints}, scalars, frozen)
    dropped = [i for i, _, _ in ints] + [i for i, _ in scalars.values()] + \
        [i for i, _ in frozen.values()]
    return _Plan(module, tuple(examples), tuple(tensors), tuple(sorted(dropped)),
                 tuple(scalars.values()), tuple(frozen.values()), spec)


def _is_static(ex: Any) -> bool:
    """A module's parameter or buffer as Dynamo passes it (a static input)."""
    return isinstance(ex, torch.nn.Parameter) or \
        getattr(ex, "_dynamo_static_input_type", None) is not None


def _is_scalar(n: fx.Node, ex: Any) -> bool:
    """A Python float or int Dynamo left unspecialized (``dynamic=True``: a module's ``eps``,
    ``momentum``) and passes as a 0-d tensor, read in the graph by ``.item()`` only."""
    arg = n.meta.get("grapharg")
    return bool(getattr(arg, "pass_arg_as_tensor", False)) and isinstance(ex, torch.Tensor) \
        and ex.dim() == 0 and n.users and all(u.op == "call_method" and u.target == "item"
                                              for u in n.users)


def _expr(s: Any):
    """The sympy expression of a symbolic size; None for a static one."""
    if isinstance(s, torch.SymInt):
        e = s.node.expr
        return None if e.is_Integer else e
    return None


def _dim_name(sym) -> str:
    """A DLCB dim name for a Dynamo symbol (an identifier not starting with '_')."""
    name = str(sym)
    return name if name.isidentifier() and not name.startswith("_") else \
        "d_" + re.sub(r"\W", "_", name).strip("_")


def _tensor_only(gm: fx.GraphModule, sizes: Mapping[fx.Node, tuple[fx.Node, int]],
                 scalars: Mapping[fx.Node, tuple[int, Any]],
                 frozen: Mapping[fx.Node, tuple[int, torch.Tensor]]) -> fx.GraphModule:
    """``gm`` with each int placeholder replaced by the size it equals (``tensor.size(axis)``),
    each scalar's ``.item()`` by its example value and each frozen tensor by an attribute (a
    constant of the exported program), so that its inputs are DLCB's tensors only; ``gm`` itself
    unchanged. Always a fresh ``GraphModule``: Dynamo's may be lazy
    (``forward(*args)`` until first recompiled), which export would bind as one argument."""
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    out = g.graph_copy(gm.graph, env)
    g.output(out)
    phs = [env[n] for n in gm.graph.nodes if n.op == "placeholder"]
    with g.inserting_after(phs[-1] if phs else None):
        for n, (t, k) in sizes.items():
            size = g.call_method("size", (env[t], k))
            env[n].replace_all_uses_with(size)
    for n, (_, value) in scalars.items():
        for item in list(env[n].users):
            for u in list(item.users):
                u.args, u.kwargs = fx.node.map_aggregate(
                    (u.args, u.kwargs), lambda a: value if a is item else a)
            g.erase_node(item)
    attrs = {n.target: _attr(gm, n.target) for n in g.nodes if n.op in ("get_attr",
                                                                         "call_module")}
    with g.inserting_after(phs[-1] if phs else None):
        for n, (i, t) in frozen.items():
            attrs[f"frozen_{i}"] = t.detach()
            env[n].replace_all_uses_with(g.get_attr(f"frozen_{i}"))
    for n in [*sizes, *scalars, *frozen]:
        g.erase_node(env[n])
    return fx.GraphModule(attrs, g, class_name=type(gm).__name__)


def _attr(obj: Any, target: str) -> Any:
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _device_backend(examples: Sequence[torch.Tensor]) -> str:
    devices = {x.device for x in examples}
    if len(devices) > 1:
        raise _Eager(f"inputs on several devices: {sorted(map(str, devices))}")
    dev = next(iter(devices), torch.device("cpu"))
    if dev.type == "cuda":
        if dev.index is not None and dev.index != torch.cuda.current_device():
            raise _Eager(f"inputs on {dev}, but the current CUDA device is "
                         f"{torch.cuda.current_device()}")
        return "cuda"
    if dev.type != "cpu":
        raise _Eager(f"inputs on {dev} (DLCB serves cpu and cuda)")
    return "cpu"


def _compile_id() -> str:
    try:
        cid = torch._guards.CompileContext.current_compile_id()
    except Exception:
        cid = None
    return str(cid) if cid is not None else ""


# --- the callables -------------------------------------------------------------------------------

def _eager(gm: fx.GraphModule, rec: GraphRecord) -> Callable:
    def run(*args):
        rec.calls += 1
        return gm.forward(*args)

    return run


def _runner(gm: fx.GraphModule, cm, rec: GraphRecord, plan: _Plan) -> Callable:
    """Dynamo's argument list -> the DLCB module's tensors -> gm's output structure."""
    pick, scalars, frozen = plan.tensors, plan.scalars, plan.frozen

    def run(*args):
        rec.calls += 1
        for i, t in frozen:   # another module instance reusing the graph runs eagerly
            if args[i] is not t:
                rec.eager_calls += 1
                rec.last_mismatch = f"input {i}: not the parameter or buffer frozen at compile"
                return gm.forward(*args)
        for i, v in scalars:   # unguarded by Dynamo: a changed value runs eagerly
            if args[i].item() != v:
                rec.eager_calls += 1
                rec.last_mismatch = f"scalar input {i} is {args[i].item()}, compiled for {v}"
                return gm.forward(*args)
        try:
            return cm(*[args[i] for i in pick])   # gm's own output structure (export's)
        except DLError as err:   # refused before any launch: stricter than Dynamo's guards
            if isinstance(err, BuildError):
                raise
            rec.eager_calls += 1
            rec.last_mismatch = f"{type(err).__name__}: {err}"
            return gm.forward(*args)

    return run
