"""CUDA-graph replay (§2.3 thunks): a thunk's whole call, generated kernels and library calls,
captured as one CUDA graph per input-shape signature and replayed.

The host program resolves every shape and launch slot before any launch, so a call's launches are
a function of its input shapes alone: one graph per shape signature serves every later call of
those shapes. Per thunk, a ``GraphCache``:

- **When**: the first call of a signature in each thread runs plain launches (the warm-up: the
  thread's own cuBLAS/cuDNN handles, which a capture cannot create, lazy module loads, and every
  index check); the next captures and replays; later calls replay.
- **Whether**: a replay saves host launches but copies the inputs in and the outputs out. Per
  signature, before its first call, a cost model compares the launches saved (the plan's steps
  less the replay and its copies, ``LAUNCH_US`` each) with the copies' device time (bytes read
  and written at ``COPY_BYTES_PER_US``); where the copies cost more (one large memory-bound
  kernel, a language model's logits at a long sequence), the signature stays on plain launches
  and ``plain`` says why.
- **Inputs**: copied into static buffers the graph was captured against (one device copy per user
  input; the module's constants are captured in place: they never change).
- **Outputs**: copied out of the graph's pool after each replay, so a result the caller keeps is
  never overwritten by a later call (one device copy per output).
- **Index checks** (values of an index tensor within its axis): on a tensor computed from the
  module's constants and the shapes alone, the warm-up's check holds for every call of the
  signature; on a user input, the check runs before each replay. An index tensor computed from
  user input values cannot be checked inside a graph: such a thunk is not captured, and
  ``refused`` says which step.
- **Bounded**: an LRU of ``capacity`` graphs (``Config.cuda_graphs``; ``0`` turns replay off). The
  graphs of one thunk share one memory pool (replays of one thunk are serialized, and outputs are
  copied out before the next replay); the capture stream's cuBLAS workspace is one of the pool's
  blocks, not a second process-long allocation (``_pooled_blas_workspaces``).
- **Threads**: a module shared by threads serializes its captures and replays under one lock
  (the static input buffers and the pool are one per thunk), and each replay's stream waits for
  the previous replay's copy-out, whichever stream that ran on. A capture runs alone: another
  thread's launch, cuDNN call or allocation meanwhile invalidates it (``thread_local`` capture
  mode notwithstanding), so every plain run and replay of any compiled module in the process
  holds ``GATE`` shared, and a capture holds it exclusively. Other GPU work of the process that
  does not go through a compiled module can still spoil a capture: that signature falls back.
- **Fallback**: a capture that fails (an eager step that synchronizes or copies from host memory,
  say) leaves the signature on plain launches; ``refused`` maps the signature to the reason,
  naming the step. A capture that could not begin, or that was invalidated from outside (its
  steps all ran), is spoiled: retried on later calls, ``RETRIES`` times. Later captures use a fresh pool and stream.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Sequence

import torch

from ..config import Config
from ..hostgen.lower import KernelLaunch, LibraryCall, Src, _reads
from .launchers import check_indices

if TYPE_CHECKING:
    from .thunks import Thunk

DEFAULT_CAPACITY = Config.cuda_graphs
"""Graphs per thunk (``Config.cuda_graphs``, ``DLCB_CUDA_GRAPHS``)."""
LAUNCH_US = 4.0
"""Host time one plain launch costs and a replay saves (the H200 measured 5-20 us per step of a
plain call; the low end, so replay is chosen only where it clearly pays)."""
RETRIES = 3
"""Spoiled captures of one signature (not begun, or invalidated from outside) before it stays
plain."""
COPY_BYTES_PER_US = 3.0e6
"""Device copy rate for the cost model: 3 TB/s (the H200 copies at 3.8)."""


class _Gate:
    """Shared/exclusive: many threads run (shared) while none captures; a capture (exclusive)
    waits for runs in progress and holds later ones back. Shared is reentrant per thread."""

    def __init__(self):
        self._cond = threading.Condition()
        self._running = 0
        self._capturing = False
        self._waiting = 0   # captures waiting: new runs let them go first
        self._depth = threading.local()

    @contextmanager
    def shared(self):
        depth = getattr(self._depth, "n", 0)
        if not depth:
            with self._cond:
                while self._capturing or self._waiting:
                    self._cond.wait()
                self._running += 1
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth
            if not depth:
                with self._cond:
                    self._running -= 1
                    if not self._running:
                        self._cond.notify_all()

    @contextmanager
    def exclusive(self):
        if getattr(self._depth, "n", 0):
            raise RuntimeError("a CUDA-graph capture inside a compiled module's run")
        with self._cond:
            self._waiting += 1
            while self._capturing or self._running:
                self._cond.wait()
            self._waiting -= 1
            self._capturing = True
        try:
            yield
        finally:
            with self._cond:
                self._capturing = False
                self._cond.notify_all()


GATE = _Gate()
"""Every compiled module's GPU runs (shared) against captures (exclusive); see the module doc."""


class _Entry:
    __slots__ = ("graph", "inputs", "outputs")

    def __init__(self, graph, inputs, outputs):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs


class GraphCache:
    """The CUDA graphs of one thunk, keyed by (device, user input shapes); see the module doc."""

    def __init__(self, thunk: "Thunk", capacity: int = DEFAULT_CAPACITY):
        self.thunk = thunk
        self.capacity = capacity
        self.graphs: OrderedDict[tuple, _Entry] = OrderedDict()
        self.warm: set[tuple] = set()
        """(signature, thread) pairs that ran plain launches once (see the module doc)."""
        self.refused: dict[tuple, str] = {}
        self.plain: dict[tuple, str] = {}
        """Signatures the cost model keeps on plain launches, with the estimate (see ``_costs_more``)."""
        self.spoiled: dict[tuple, int] = {}
        """Spoiled captures (``_failed``), per signature."""
        self.captures = self.replays = self.evictions = 0
        self._lock = threading.Lock()
        self._done = torch.cuda.Event()
        self._pool = None
        self._stream = None
        why = _unreplayable(thunk)
        if why is not None:
            self.refused[()] = why   # every signature

    def stats(self) -> dict[str, Any]:
        return {"captures": self.captures, "replays": self.replays, "evictions": self.evictions,
                "cached": len(self.graphs), "capacity": self.capacity,
                "refused": dict(self.refused), "plain": dict(self.plain),
                "spoiled": sum(self.spoiled.values())}

    def clear(self) -> None:
        """Drop every graph (their memory returns to the pool)."""
        self.graphs.clear()

    def __call__(self, tensors: list[torch.Tensor], r: Sequence[int]) -> tuple[torch.Tensor, ...]:
        """The call's outputs: by replay, else by the thunk's plain launches (replay off, a first
        call of this signature, a refused one, or a capture of the caller's in progress)."""
        if self.capacity > 0 and () not in self.refused \
                and not torch.cuda.is_current_stream_capturing():
            with self._lock:
                out = self._replay(tensors, r)
            if out is not None:
                return out
        with GATE.shared():
            return self.thunk._run(tensors, r)

    def _replay(self, tensors: list[torch.Tensor], r: Sequence[int]
                ) -> tuple[torch.Tensor, ...] | None:
        n = self.thunk.n_user
        key = (tensors[0].device.index if tensors else None,
               *(tuple(t.shape) for t in tensors[:n]))
        entry = self.graphs.get(key)
        if entry is None:
            if key in self.refused or key in self.plain:
                return None
            if (key, threading.get_ident()) not in self.warm:
                self.warm.add((key, threading.get_ident()))
                why = self._costs_more(tensors, r)
                if why is not None:
                    self.plain[key] = why
                return None
            entry = self._capture(key, tensors, r)
            if entry is None:
                return None
        else:
            self.graphs.move_to_end(key)
        check_indices([(tensors[i], r[reg], what) for i, reg, what in self.thunk.input_checks])
        stream = torch.cuda.current_stream(tensors[0].device if tensors else None)
        with GATE.shared():
            stream.wait_event(self._done)   # the last replay, on whichever stream, has copied out
            for s, t in zip(entry.inputs, tensors[:n]):
                s.copy_(t)
            entry.graph.replay()
            outs = tuple(o.clone() for o in entry.outputs)
            self._done.record(stream)
        self.replays += 1
        return outs

    def _costs_more(self, tensors: list[torch.Tensor], r: Sequence[int]) -> str | None:
        """Why a replay of this signature would cost more than plain launches, or None."""
        plan, n = self.thunk.plan, self.thunk.n_user
        moved = sum(t.numel() * t.element_size() for t in tensors[:n])
        for o in plan.outputs:
            if o.src is Src.INPUT:
                moved += tensors[o.index].numel() * tensors[o.index].element_size()
            else:
                b = plan.buffers[o.index]
                moved += math.prod(r[k] for k in b.shape_regs) * b.dtype.itemsize
        saved = len(plan.steps) - 1 - n - len(plan.outputs)   # less the replay and its copies
        copy_us = 2 * moved / COPY_BYTES_PER_US                # each byte read and written
        if saved * LAUNCH_US > copy_us:
            return None
        return (f"plain launches: a replay would save {max(saved, 0)} launches "
                f"(~{max(saved, 0) * LAUNCH_US:.0f} us) and copy {moved / 1e6:.3g} MB in and out "
                f"(~{copy_us:.0f} us)")

    def _capture(self, key: tuple, tensors: list[torch.Tensor], r: Sequence[int]
                 ) -> _Entry | None:
        dev = tensors[0].device if tensors else torch.device("cuda")
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
            self._stream = torch.cuda.Stream(dev)
        n = self.thunk.n_user
        static = [t.clone() for t in tensors[:n]]
        graph = torch.cuda.CUDAGraph()
        at: list[int] = []
        err: Exception | None = None
        step_failed = False
        self._stream.wait_stream(torch.cuda.current_stream(dev))
        with GATE.exclusive(), torch.cuda.stream(self._stream), _pooled_blas_workspaces():
            try:
                graph.capture_begin(pool=self._pool, capture_error_mode="thread_local")
            except Exception as e:   # noqa: BLE001 - no capture began: retried later
                err = e
            else:
                try:
                    outs = self.thunk._run(static + list(tensors[n:]), r, checks=False, at=at)
                except Exception as e:   # noqa: BLE001 - a step that cannot be captured, named
                    err, step_failed = e, True
                try:
                    graph.capture_end()
                except Exception as e:   # noqa: BLE001 - the capture was spoiled
                    err = err or e
            if err is not None:
                _reset_capture_state(self._stream)
        torch.cuda.current_stream(dev).wait_stream(self._stream)
        if err is not None:
            self._failed(key, err, at if step_failed else None)
            return None
        self.captures += 1
        entry = self.graphs[key] = _Entry(graph, static, outs)
        while len(self.graphs) > self.capacity:
            self.graphs.popitem(last=False)
            self.evictions += 1
        return entry

    def _failed(self, key: tuple, err: Exception, at: list[int] | None) -> None:
        """A failed capture: a step that raised refuses the signature for good (``refused``
        names it); a capture that could not begin, or whose steps all ran but that ended
        invalidated (GPU work of the process outside compiled modules, meanwhile), is retried on
        later calls, ``RETRIES`` times, before the signature is refused. Later captures use a fresh pool and stream."""
        self._pool = self._stream = None
        why = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        if at is not None:
            where = f" at {_step_name(at[-1], self.thunk.plan.steps[at[-1]])}" if at else ""
            self.refused[key] = f"capture failed{where}: {why}"
            return
        self.spoiled[key] = self.spoiled.get(key, 0) + 1
        if self.spoiled[key] > RETRIES:
            self.refused[key] = f"capture spoiled {self.spoiled[key]} times: {why}"

    def __repr__(self) -> str:
        s = self.stats()
        return (f"GraphCache({s['cached']}/{s['capacity']} graphs, {s['captures']} captures, "
                f"{s['replays']} replays, {s['evictions']} evictions"
                + (f", refused {len(s['refused'])}" if s["refused"] else "") + ")")


@contextmanager
def _pooled_blas_workspaces():
    """cuBLAS keeps one workspace per (handle, stream), allocated at its first matmul and held for
    the process: captured on the side stream, it would stay allocated beside the default stream's
    (64 MiB on the H200, counted against every model with a matmul). Cleared before the capture,
    the side stream's workspace is allocated inside the capture, from the graph's pool; cleared
    after it, that block is free in the pool like any intermediate, which the graph's replays
    (serialized per pool) keep using. The default stream's workspace is reallocated, from the
    allocator's cache, at its next matmul. Inductor's CUDA-graph trees do the same."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None) or (lambda: None)
    clear()
    try:
        yield
    finally:
        clear()


def _reset_capture_state(stream) -> None:
    """After a failed capture, torch's CUDA generator still believes it is capturing (its capture
    epilogue did not run), and every later random op on the device raises. One empty capture
    runs the prologue and epilogue again and leaves it as before."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # "The CUDA Graph is empty"
        g.capture_begin(capture_error_mode="thread_local")
        g.capture_end()
    del g


def _step_name(i: int, step) -> str:
    if isinstance(step, LibraryCall):
        return f"step {i} (library call {step.op.name})"
    return f"step {i} (kernel {step.variants[0].name})"


def _unreplayable(thunk: "Thunk") -> str | None:
    """Why no replay can run the thunk's index checks, or None: an index tensor computed from user
    input values (those on user inputs run before each replay, ``Thunk.input_checks``; those on
    tensors computed from constants and shapes alone hold once the warm-up checked them). Taint:
    user inputs carry their values; a buffer carries them when any step operand it is computed
    from does; constants and shapes do not."""
    plan, n = thunk.plan, thunk.n_user
    tainted: set[int] = set()   # buffer positions

    def carries(o) -> bool:
        return o.index < n if o.src is Src.INPUT else o.index in tainted

    for i, step in enumerate(plan.steps):
        if any(carries(o) for o in _reads(step)):
            tainted.add(step.out)
        if not isinstance(step, KernelLaunch):
            continue
        for o, _, what in step.index_checks:
            if o.src is not Src.INPUT and carries(o):
                return (f"{_step_name(i, step)}: {what} is computed from input values and "
                        f"checked per call (a graph cannot check it)")
    return None
