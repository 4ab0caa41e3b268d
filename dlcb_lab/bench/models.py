"""Model benchmark: TorchVision models, BERT and GPT-2 under eager, CUDA graphs, torch.compile and
DLCB; one (model, system) per process with empty caches; one long-form CSV.

    python -m dlcb_lab.bench.models [--device cuda|cpu] [--models a,b] [--systems a,b]
        [--batches 1,8,32] [--seqs 32,128,512 | --text-shapes 1x32,8x128] [--res 224] [--tiny]
        [--dtype float32] [--reps 30] [--warmup 5] [--out data/bench] [--markdown] [--in-process]

``--tiny`` is a smoke test that runs on a laptop CPU: tiny transformers and, unless given,
``TINY`` in place of ``FULL`` (batches 1 and 2 at 64x64, sequences 8 and 16, 10 timed calls).

Models. TorchVision names of ``zoo.MODELS`` (``weights=None``, seed 0, eval; input
``zoo.make_input(batch, (res, res))``; a fixed-resolution model such as ``vit_b_16`` always at
its native resolution) and ``bert``, ``gpt2`` (``bridge.text_model``, random weights, seed 0,
last hidden state; ``--tiny``: 2 layers, width 32; inputs ``(input_ids, attention_mask)``, ids
uniform in [0, 1000), the last 3 positions of row 0 masked). Default ``DEFAULT_MODELS``.
Shapes: images ``--batches`` at ``--res`` (224; ``TINY_RES`` with ``--tiny``); text
``--batches`` x ``--seqs`` (batch outer) or the pairs ``--text-shapes``. They run in that
order: "first shape" and "later shape" below refer to it. Shape i's input has seed 1 + i.

Systems (``SYSTEMS``; ``CUDA_ONLY`` ones give skipped rows on cpu):
  eager                     the module
  eager-cudagraph           per shape: 3 eager calls on a side stream, torch.cuda.CUDAGraph
                            capture (own pool), then replays; CUDA only
  torch.compile             torch.compile(m), the default (dynamic=None): Inductor compiles
                            static at the first shape and recompiles with dynamic sizes at the
                            first shape that differs
  torch.compile-static      torch.compile(m, dynamic=False): Inductor recompiles per shape
  torch.compile-dynamic     torch.compile(m, dynamic=True)
  torch.compile-cudagraphs  torch.compile(m, mode="reduce-overhead"); CUDA only
  dlcb-static               dl.compile(m, x, dynamic=False) per shape: one compile per shape
  dlcb-dynamic              one dl.compile(m, x_first, dynamic="auto") for every shape
torch.compile runs with ``recompile_limit = RECOMPILE_LIMIT`` (the default 8 would silently send
a 9th shape to eager).

Protocol. Each (model, system) runs in ``python -m dlcb_lab.bench.models --one ...`` with
DLCB_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR and
NUMBA_CACHE_DIR set to new empty folders (``--in-process``: same folders, one process). All under
``no_grad``, with torch's math flags as eager runs (cuDNN convolutions in TF32, cuBLAS matmuls in
fp32; ``--fp32``: TF32 off everywhere, ``zoo.fp32_math``), the same for timing and check (a flip
between them would invalidate captured graphs and trip torch.compile's global-state guards);
``cudnn.benchmark`` as torch leaves it (off). A separately
built eager copy computes the reference output of every shape first (so CUDA, cuBLAS and cuDNN
are initialised before any system is timed), and is dropped. Then per shape: the system's setup
for it (torch.compile wrapper, dl.compile or graph capture; none for eager), the first call,
the check of its result, ``--warmup`` untimed calls, ``--reps`` timed calls, one peak-memory
call. A failure is caught per shape (at the first shape: for all shapes) and a crashed, killed or
timed-out process gives rows for the shapes it did not report.

CSV (``models.csv``; ``COLUMNS``): model, system, batch, seq (text; empty for images), res
(images; empty for text), metric, value, error (empty, or why the value is missing or suspect).
Every (model, system, shape) cell has an ``ms`` row; its value is empty when the cell was not
measured and ``error`` then says why (``skipped: ...``, ``<stage> <shape>: <Type>: <message>``,
``process exited with <rc>: <stderr tail>``). Metrics of a measured cell:
  ms             median of --reps calls: CUDA-event time around one call on cuda
                 (``zoo.event_times_ms``, host launch gaps included), perf_counter on cpu
                 (``time_calls``)
  ms_min, ms_max the fastest and the slowest of those calls (the spread the median hides)
  compile_s      first shape: wall s (synchronized) from the start of the setup to the first
                 result: the cold compile (capture, lowering, kernel builds) plus the first call.
                 eager: the first call alone
  recompile_s    later shapes: the same window at that shape: dlcb-static its dl.compile,
                 eager-cudagraph its capture, torch.compile the recompile inside the call,
                 dlcb-dynamic and eager the call alone (so ~0)
  first_call_ms  wall ms of the first call at the shape after its setup (torch.compile compiles
                 inside the call: its compile is included; eager's is warm for cuDNN: the
                 reference outputs, computed in the setup at every shape, built cuDNN's plans
                 for its NCHW convolutions, where DLCB's channels-last ones are built in its
                 first call, about 1.2 ms a convolution on the H200)
  paired_ms, paired_static_ms   dlcb-dynamic with ``--paired``: its median time and a static
                 compile's at the shape, timed in turn in one process (``_paired``)
  first_call_cold_ms   every system's process: the first call of its eager reference copy at
                 each shape, none of its cuDNN plans or cuBLAS kernels loaded yet (the first
                 shape's also initialises CUDA's libraries): what eager pays at a new shape, in
                 the same process as the system's first_call_ms
  max_rel_err    ``zoo.rel_error`` of that first result vs eager's (max |y - y_eager| / max
                 |y_eager| over all outputs; inf on shape/dtype mismatch or non-finite values);
                 ``error`` set when above ``Config.tol`` (fp32: ``zoo.GPU_TOL`` on cuda,
                 ``zoo.TOL`` on cpu; 16 bits: ``DTYPES``)
  peak_mb        cuda only: the device memory peak over the cell (setup, first call, warm-up,
                 timed calls) above what was resident before the system's first setup (the
                 module's weights, the inputs, the reference outputs), MiB; so a graph pool
                 held from an earlier shape's capture counts, and DLCB's own constants do
  resident_mb    cuda only: the module's parameters and buffers and the call's inputs, MiB
                 (peak_mb + resident_mb: the call's peak with the weights it needs)
  recompiles     cumulative, read after the cell's calls. torch.compile: Dynamo graphs compiled
                 since the end of the first shape (``counters["stats"]["unique_graphs"]``
                 difference; a graph break makes a recompile count twice); DLCB: sum of
                 ``cm.stats()["compiles"]`` over its modules minus 1 (dlcb-dynamic: size-1
                 variants + JIT signatures, 0 when one compile served all; dlcb-static: one per
                 later shape, plus variants)
  graphs, graph_breaks   torch.compile: ``unique_graphs``; sum of ``counters["graph_break"]``
  variants, jit_builds, kernel_builds   DLCB: ``cm.stats()`` summed over its modules
  capture_hits   DLCB: its compiles that read the capture cache (``artifact.capture``) instead
                 of tracing (0 in a cold process: its caches are new); ``program_hits``:
                 those that loaded the finished program (``artifact.program``: no passes, kgen
                 or build; phases ``capture``, the key, and ``load``); ``capture_fast``: its
                 compiles captured by the fast path (``bridge.fast``: a static export)
  phase_<step>_s  DLCB, at a shape whose setup compiled: wall s of each step of that
                 ``dl.compile`` (``cm.pipeline.timings``: capture (torch.export), lower,
                 generalize, passes, kgen, hostgen, build (NVRTC of the 32-bit index entry
                 points and the launchers; the 64-bit ones compile in the background)).
                 torch.compile, at a shape whose calls compiled: ``dynamo`` (bytecode capture
                 and guards), ``aot`` (AOTAutograd's trace and partition), ``inductor``
                 (lowering, code generation and the kernel builds), from Dynamo's own
                 ``compile_times`` (``TORCH_PHASES``)
  warm_compile_s, warm_phase_<step>_s   with ``--warm``: compile_s and the phases of the first
                 shape in a second process over the first one's caches (DLCB's kernel and
                 capture caches, Inductor's and Triton's), as a restarted service compiles;
                 ``warm_capture_hits`` and ``warm_program_hits`` (DLCB) say whether its compile
                 read the capture cache and loaded the program

``env.json`` (``environment``): versions (python, torch, CUDA, cuDNN, torchvision,
transformers, numpy, pandas, numba, dlcb-lab), GPU name, count, capability, memory, driver; CPU,
core count, torch threads, OS (``platform.platform()``); ``commit`` (``git rev-parse HEAD``) and
``dirty`` (tracked files modified); UTC time; the run's models, systems and ``Config``. No
hostname.

``summary(df)``: speedup ``eager ms / system ms`` per (model, batch, seq, res), one column per
non-eager system of ``df`` (blank where it has no time), last row ``model == "geomean"``
(geometric mean over the cells where the system has a time, so one with failed cells averages
over fewer). ``spread(df)``: per timed cell, the min / median / max ms over its calls. The
CLI prints both, ``--markdown`` as Markdown tables, else as text.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import torch

import dlcb_lab as dl
from dlcb_lab.bench import bridge, zoo

if TYPE_CHECKING:
    import pandas as pd

TEXT = ("bert", "gpt2")
DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0",
                  "squeezenet1_1", "convnext_tiny", "vit_b_16", *TEXT)
SYSTEMS = ("eager", "eager-cudagraph", "torch.compile", "torch.compile-static",
           "torch.compile-dynamic", "torch.compile-cudagraphs", "dlcb-static", "dlcb-dynamic")
CUDA_ONLY = {"eager-cudagraph": "CUDA graphs",
             "torch.compile-cudagraphs": 'CUDA graphs (mode="reduce-overhead")'}
COLUMNS = ["model", "system", "batch", "seq", "res", "metric", "value", "error"]
RECOMPILE_LIMIT = 64
TINY_RES = 64
FULL = dict(batches=(1, 8, 32), seqs=(32, 128, 512), res=224, reps=30, warmup=5)
"""The shapes and timing of a run; ``TINY`` with ``--tiny`` (the option a run names wins)."""
TINY = dict(batches=(1, 2), seqs=(8, 16), res=TINY_RES, reps=10, warmup=2)
WARMUP_GRAPH = 3   # eager calls on a side stream before a CUDA graph capture

Shape = tuple[int, "int | None", "int | None"]   # (batch, seq, res)


@dataclass(frozen=True)
class Config:
    """What every (model, system) process runs; ``res`` None: 224, or ``TINY_RES`` if tiny;
    ``text_shapes`` None: ``batches`` x ``seqs``."""

    device: str = "cuda"
    batches: tuple[int, ...] = (1, 8, 32)
    seqs: tuple[int, ...] = (32, 128, 512)
    text_shapes: tuple[tuple[int, int], ...] | None = None
    res: int | None = None
    tiny: bool = False
    reps: int = 30
    warmup: int = 5
    fp32: bool = False
    """TF32 off in cuBLAS and cuDNN for the whole run; False: torch's defaults (cuDNN convolutions
    in TF32, cuBLAS matmuls in fp32), as eager runs them."""
    dtype: str = "float32"
    """The model's floating parameters and the image inputs in this dtype (``DTYPES``)."""
    paired: bool = False
    """dlcb-dynamic: after its cells, time it against a static compile per shape in the same
    process, alternately (``paired_ms``)."""
    warm: bool = False
    """Run each (model, system) process a second time over the first one's caches, as a service
    restarts (``warm_compile_s``, ``warm_phase_<step>_s``)."""

    @property
    def torch_dtype(self) -> torch.dtype:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r}: one of {', '.join(DTYPES)}")
        return getattr(torch, self.dtype)

    @property
    def tol(self) -> float:
        """The bound on ``max_rel_err`` against eager in the same dtype."""
        return DTYPES[self.dtype] or (zoo.GPU_TOL if self.cuda else zoo.TOL)

    @property
    def cuda(self) -> bool:
        return torch.device(self.device).type == "cuda"

    def shapes(self, model: str) -> list[Shape]:
        """The model's shapes in run order, as (batch, seq, res): images at ``res`` (a
        fixed-resolution model at its native one; at least the model's ``zoo`` ``min_res``:
        inception_v3 at 75 where 64 is asked)."""
        if model in TEXT:
            pairs = self.text_shapes or [(b, s) for b in self.batches for s in self.seqs]
            return [(int(b), int(s), None) for b, s in pairs]
        spec = zoo.MODELS[model]
        res = spec.native if spec.fixed_res else max(self.res or (TINY_RES if self.tiny else 224),
                                                     spec.min_res)
        return [(int(b), None, res) for b in self.batches]

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        d = dict(d, batches=tuple(d["batches"]), seqs=tuple(d["seqs"]))
        if d.get("text_shapes") is not None:
            d["text_shapes"] = tuple(tuple(p) for p in d["text_shapes"])
        return cls(**d)


DTYPES = {"float32": None, "float16": 1e-2, "bfloat16": 4e-2}
"""Dtypes a run takes, with their ``max_rel_err`` bound against eager in that dtype (None:
``zoo.GPU_TOL`` on cuda, ``zoo.TOL`` on cpu; 16 bits: every op rounds, so a fused kernel and
eager's op-by-op rounding differ by a few units of the format's precision)."""


def skip_reason(system: str, device: str) -> str:
    """Why ``system`` cannot run on ``device`` ('' if it can)."""
    if system in CUDA_ONLY and torch.device(device).type != "cuda":
        return f"skipped: {system} needs CUDA ({CUDA_ONLY[system]}); device is {device}"
    return ""


# --- models and inputs ---------------------------------------------------------------------------

def build(model: str, tiny: bool = False) -> torch.nn.Module:
    """A fresh eval-mode module with seed-0 weights (on CPU)."""
    if model in TEXT:
        return zoo._seeded(lambda: bridge.text_model(model, tiny))()
    return zoo.MODELS[model].build()


def make_inputs(model: str, shape: Shape, device: str, seed: int,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    """The call arguments at ``shape``: an image batch (in ``dtype``), or (input_ids,
    attention_mask)."""
    batch, seq, res = shape
    if model not in TEXT:
        return (zoo.make_input(batch, (res, res), device, seed=seed, dtype=dtype),)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 1000, (batch, seq), generator=g)
    mask = torch.ones_like(ids)
    k = min(3, seq - 1)
    if k > 0:
        mask[0, -k:] = 0
    return ids.to(device), mask.to(device)


# --- systems -------------------------------------------------------------------------------------

class _System:
    """``setup(args)``: what the system does for a shape before its first call; returns the
    call. ``counts()``: cumulative count metrics."""

    def __init__(self, m: torch.nn.Module, device: str):
        self.m, self.device = m, device

    def setup(self, args: tuple) -> Callable[[], Any]:
        return lambda: self.m(*args)

    def counts(self) -> dict[str, float]:
        return {}

    def phases(self) -> dict[str, float]:
        """Seconds per step of a compile the last ``setup`` made (none: empty)."""
        return {}


class _CudaGraph(_System):
    def __init__(self, m, device):
        super().__init__(m, device)
        self.graphs: list[tuple[torch.cuda.CUDAGraph, Any]] = []   # kept alive

    def setup(self, args):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_GRAPH):
                self.m(*args)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = self.m(*args)
        self.graphs.append((g, out))

        def replay():
            g.replay()
            return out
        return replay


TORCH_PHASES = {"dynamo": ("_compile.compile_inner", "OutputGraph.call_user_compiler"),
                "aot": ("OutputGraph.call_user_compiler", "compile_fx_inner"),
                "inductor": ("compile_fx_inner", None)}
"""torch.compile's phases from Dynamo's ``compile_times`` (seconds summed per function): the
first function's time less the second's (the phase it calls)."""


def torch_compile_seconds() -> dict[str, float]:
    """Dynamo's ``compile_times``, summed over every compile of this process so far, per
    ``TORCH_PHASES`` phase."""
    from torch._dynamo.utils import compile_times

    names, secs = compile_times(repr="csv", aggregate=True)
    t = dict(zip(names, map(float, secs)))
    return {k: t.get(a, 0.0) - t.get(b, 0.0) for k, (a, b) in TORCH_PHASES.items()}


class _TorchCompile(_System):
    def __init__(self, m, device, **kw):
        super().__init__(m, device)
        self.kw, self.fn, self.first = kw, None, None
        self.seen = torch_compile_seconds()

    def phases(self):
        """The phases of the compiles since the last reading (none: empty)."""
        now, seen = torch_compile_seconds(), self.seen
        self.seen = now
        spent = {k: now[k] - seen[k] for k in now}
        return spent if any(v > 0 for v in spent.values()) else {}

    def setup(self, args):
        if self.fn is None:
            self.fn = torch.compile(self.m, **self.kw)
        return lambda: self.fn(*args)

    def counts(self):
        from torch._dynamo.utils import counters

        graphs = counters["stats"]["unique_graphs"]
        if self.first is None:
            self.first = graphs
        return dict(recompiles=graphs - self.first, graphs=graphs,
                    graph_breaks=sum(counters["graph_break"].values()))


class _Dlcb(_System):
    def __init__(self, m, device, dynamic):
        super().__init__(m, device)
        self.dynamic, self.cms = dynamic, []
        self.backend = "cuda" if torch.device(device).type == "cuda" else "cpu"

    def setup(self, args):
        self.compiled = self.dynamic is False or not self.cms
        if self.compiled:
            self.cms.append(dl.compile(self.m, args, dynamic=self.dynamic, backend=self.backend))
        cm = self.cms[-1]
        return lambda: cm(*args)

    def phases(self):
        return dict(self.cms[-1].pipeline.timings) if self.compiled else {}

    def counts(self):
        st = [cm.stats() for cm in self.cms]
        tot = lambda k: sum(s.get(k, 0) for s in st)
        return dict(recompiles=tot("compiles") - 1, variants=tot("variants"),
                    jit_builds=tot("jit_builds"), kernel_builds=tot("kernel_builds"),
                    capture_hits=sum(s["capture"] == "hit" for s in st),
                    capture_fast=sum(s["capture_path"] == "fast" for s in st),
                    program_hits=sum(s["program"] == "hit" for s in st))


def make_system(system: str, m: torch.nn.Module, device: str) -> _System:
    makers = {
        "eager": lambda: _System(m, device),
        "eager-cudagraph": lambda: _CudaGraph(m, device),
        "torch.compile": lambda: _TorchCompile(m, device),
        "torch.compile-static": lambda: _TorchCompile(m, device, dynamic=False),
        "torch.compile-dynamic": lambda: _TorchCompile(m, device, dynamic=True),
        "torch.compile-cudagraphs": lambda: _TorchCompile(m, device, mode="reduce-overhead"),
        "dlcb-static": lambda: _Dlcb(m, device, False),
        "dlcb-dynamic": lambda: _Dlcb(m, device, "auto"),
    }
    if system not in makers:
        raise ValueError(f"unknown system {system!r}; choose from {', '.join(SYSTEMS)}")
    return makers[system]()


# --- one (model, system) -------------------------------------------------------------------------

def time_calls(fn: Callable[[], Any], reps: int, warmup: int, cuda: bool) -> list[float]:
    """The time of each of ``reps`` calls after ``warmup`` untimed ones, in ms: CUDA events
    around each call (``zoo.event_times_ms``) on cuda, ``perf_counter`` on the CPU."""
    if cuda:
        return zoo.event_times_ms(fn, reps, warmup)
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return ts


def timing_rows(model: str, system: str, shape: "Shape", times: Sequence[float]
                ) -> list[dict[str, Any]]:
    """``ms`` (the median), ``ms_min`` and ``ms_max`` of one cell's timed calls."""
    return [_row(model, system, shape, "ms", statistics.median(times)),
            _row(model, system, shape, "ms_min", min(times)),
            _row(model, system, shape, "ms_max", max(times))]


def _label(shape: Shape) -> str:
    b, s, r = shape
    return f"{b}x{s}" if s is not None else f"{b}x{r}x{r}"


def _row(model: str, system: str, shape: Shape, metric: str, value: Any,
         error: str = "") -> dict[str, Any]:
    b, s, r = shape
    return dict(model=model, system=system, batch=b, seq=s, res=r, metric=metric,
                value=math.nan if value is None else float(value), error=error)


def _cell(model: str, system: str, sysm: _System, i: int, shape: Shape, args: tuple,
          want: Any, cfg: Config, stage: list[str], base: int = 0) -> list[dict[str, Any]]:
    """One shape's rows; ``base``: device bytes resident before the system's first setup."""
    cuda, sync = cfg.cuda, (torch.cuda.synchronize if cfg.cuda else (lambda: None))
    stage[0] = f"setup {_label(shape)}"
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    fn = sysm.setup(args)
    sync()
    t1 = time.perf_counter()
    stage[0] = f"first call {_label(shape)}"
    y = fn()
    sync()
    t2 = time.perf_counter()
    stage[0] = f"check {_label(shape)}"
    err = zoo.rel_error(y, want)
    del y
    stage[0] = f"timing {_label(shape)}"
    rows = timing_rows(model, system, shape, time_calls(fn, cfg.reps, cfg.warmup, cuda))
    rows += [_row(model, system, shape, "compile_s" if i == 0 else "recompile_s", t2 - t0),
            _row(model, system, shape, "first_call_ms", (t2 - t1) * 1e3)]
    tol = cfg.tol
    rows.append(_row(model, system, shape, "max_rel_err", err,
                     "" if err <= tol else f"max_rel_err {err:.3g} > tolerance {tol:g}"))
    if cuda:   # over the setup, the first call, the warm-up and the timed calls
        sync()
        rows.append(_row(model, system, shape, "peak_mb",
                         (torch.cuda.max_memory_allocated() - base) / 2**20))
        held = [*sysm.m.parameters(), *sysm.m.buffers(), *args]
        rows.append(_row(model, system, shape, "resident_mb",
                         sum(t.numel() * t.element_size() for t in held) / 2**20))
    rows += [_row(model, system, shape, k, v) for k, v in sysm.counts().items()]
    rows += [_row(model, system, shape, f"phase_{k}_s", v) for k, v in sysm.phases().items()]
    return rows


@contextlib.contextmanager
def system_context(system: str, cfg: Config):
    """What a system's calls run under: ``no_grad``, TF32 off with ``cfg.fp32``; torch.compile
    systems: Dynamo reset (before and after) with its counters cleared and ``recompile_limit``
    at ``RECOMPILE_LIMIT``."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        if cfg.fp32:
            stack.enter_context(zoo.fp32_math())
        if system.startswith("torch.compile"):
            from torch._dynamo.utils import counters

            torch._dynamo.reset()
            counters.clear()
            stack.enter_context(torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT))
            stack.callback(torch._dynamo.reset)
        yield


def run_one(model: str, system: str, cfg: Config,
            sink: Callable[[list[dict]], None] | None = None) -> list[dict[str, Any]]:
    """The rows of one (model, system) in this process (caches as they are: ``run`` gives each
    call fresh ones). ``sink`` receives each cell's rows as soon as they exist."""
    shapes = cfg.shapes(model)
    rows: list[dict[str, Any]] = []

    def emit(new: list[dict]) -> None:
        rows.extend(new)
        if sink:
            sink(new)

    def fail(shape: Shape, why: str) -> None:
        emit([_row(model, system, shape, "ms", None, why)])

    reason = skip_reason(system, cfg.device)
    if reason:
        for shape in shapes:
            fail(shape, reason)
        return rows
    with system_context(system, cfg):
        stage = ["build"]
        try:
            dt = cfg.torch_dtype
            m = build(model, cfg.tiny).to(cfg.device, dt)
            stage[0] = "eager reference"
            ref = build(model, cfg.tiny).to(cfg.device, dt)
            inputs = [make_inputs(model, s, cfg.device, 1 + i, dt) for i, s in enumerate(shapes)]
            wants, cold = [], []
            for x in inputs:   # each shape's first call of the reference copy, timed
                t0 = time.perf_counter()
                wants.append(ref(*x))
                if cfg.cuda:
                    torch.cuda.synchronize()
                cold.append((time.perf_counter() - t0) * 1e3)
            del ref
            sysm = make_system(system, m, cfg.device)
            base = torch.cuda.memory_allocated() if cfg.cuda else 0
        except Exception as err:
            why = f"{stage[0]}: {zoo._describe(err)}"
            for shape in shapes:
                fail(shape, why)
            return rows
        emit([_row(model, system, sh, "first_call_cold_ms", t) for sh, t in zip(shapes, cold)])
        first_failed = ""
        for i, (shape, args, want) in enumerate(zip(shapes, inputs, wants)):
            if first_failed:
                fail(shape, f"not run: the first shape failed ({first_failed})")
                continue
            try:
                emit(_cell(model, system, sysm, i, shape, args, want, cfg, stage, base))
            except Exception as err:
                why = f"{stage[0]}: {zoo._describe(err)}"
                fail(shape, why)
                if i == 0:
                    first_failed = why[:300]
        if cfg.paired and system == "dlcb-dynamic" and not first_failed:
            for shape, args in zip(shapes, inputs):
                try:
                    emit(_paired(model, sysm, shape, args, cfg))
                except Exception as err:
                    emit([_row(model, system, shape, "paired_ms", None, f"paired: "
                                                                        f"{zoo._describe(err)}")])
    return rows


PAIRED_ROUNDS = 5


def _paired(model: str, sysm: "_Dlcb", shape: Shape, args: tuple, cfg: Config
            ) -> list[dict[str, Any]]:
    """DLCB dynamic (its one compile) against ``dl.compile(..., dynamic=False)`` at ``shape``, in
    turn, ``PAIRED_ROUNDS`` rounds of a median of ``cfg.reps`` calls (after ``cfg.warmup``) each:
    rows ``paired_ms`` (the dynamic module) and ``paired_static_ms``, medians over the rounds.
    Cells of the two systems run minutes apart on a noisy machine; this is the ratio itself."""
    dyn = sysm.cms[0]
    static = dl.compile(sysm.m, args, dynamic=False, backend=sysm.backend)

    def median(fn):
        return statistics.median(time_calls(fn, cfg.reps, cfg.warmup, cfg.cuda))
    times: dict[str, list[float]] = {"paired_ms": [], "paired_static_ms": []}
    for _ in range(PAIRED_ROUNDS):
        times["paired_ms"].append(median(lambda: dyn(*args)))
        times["paired_static_ms"].append(median(lambda: static(*args)))
    return [_row(model, "dlcb-dynamic", shape, k, statistics.median(v)) for k, v in times.items()]


# --- many (model, system) ------------------------------------------------------------------------

CACHE_VARS = {"DLCB_CACHE_DIR": "dlcb", "TORCHINDUCTOR_CACHE_DIR": "inductor",
              "TRITON_CACHE_DIR": "triton", "NUMBA_CACHE_DIR": "numba"}
"""The cache folders a cell starts empty: environment variable -> subfolder of its root."""


def cache_env(root: str) -> dict[str, str]:
    """The environment variables pointing every cache of ``CACHE_VARS`` under ``root``."""
    return {k: os.path.join(root, sub) for k, sub in CACHE_VARS.items()}


@contextlib.contextmanager
def fresh_caches():
    """New empty DLCB, Inductor, Triton and numba cache folders for the duration (environment
    variables of this process); yields the temporary root."""
    with tempfile.TemporaryDirectory(prefix="dlcb_bench_") as root:
        old = {k: os.environ.get(k) for k in CACHE_VARS}
        os.environ.update(cache_env(root))
        try:
            yield root
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _tail(path: Path, lines: int = 6, chars: int = 800) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    got = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(got)[-chars:]


_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


def kill_cells() -> int:
    """SIGKILL the process group of every cell process of this process still running; their
    number. A sweep stopped from outside (Ctrl-C, SIGTERM) calls it: a cell process runs in its
    own session, so neither signal reaches it, and one left running would share the GPU with the
    next sweep's timings."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for proc in live:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return len(live)


def term_exits() -> None:
    """SIGTERM raises ``SystemExit(143)`` in the main thread (CLI entry points), so the sweep
    kills its cell processes (``run_process``, ``kill_cells``) instead of dying on the spot."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def run_process(model: str, system: str, cfg: Config, timeout: float,
                env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One (model, system) in a child process with empty caches (``env``: more variables for
    it, e.g. ``CUDA_VISIBLE_DEVICES``); a crash, a non-zero exit or the ``timeout`` (its process
    group killed) gives ``ms`` rows with the reason for the shapes it did not report. With
    ``cfg.warm`` a second child over the same caches gives the ``warm_`` rows. Touches no state
    of this process, so threads may run several at once."""
    with tempfile.TemporaryDirectory(prefix="dlcb_bench_") as root:
        rows = _cell_process(model, system, cfg, timeout, env, root)
        if cfg.warm and not untimed(model, rows):
            first = cfg.shapes(model)[0]
            again = _cell_process(model, system, replace(cfg, warm=False), timeout, env, root,
                                  "warm")
            rows += [dict(r, metric=f"warm_{r['metric']}") for r in again
                     if (r["batch"], r["seq"], r["res"]) == first
                     and (r["metric"] in ("compile_s", "capture_hits", "program_hits")
                          or r["metric"].startswith("phase_") or r["error"])]
        return rows


def _cell_process(model: str, system: str, cfg: Config, timeout: float,
                  env: dict[str, str] | None, root: str, tag: str = "") -> list[dict[str, Any]]:
    """The rows of one child process over the caches under ``root`` (``tag``: its files')."""
    out, errf = Path(root) / f"rows{tag}.jsonl", Path(root) / f"stderr{tag}.txt"
    job = json.dumps(dict(model=model, system=system, rows=str(out), config=asdict(cfg)))
    cmd = [sys.executable, "-m", "dlcb_lab.bench.models", "--one", job]
    child = {**os.environ, **cache_env(root), **(env or {})}
    with open(errf, "w") as fe:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fe, env=child,
                                start_new_session=True)
        with _LIVE_LOCK:
            _LIVE.add(proc)
        try:
            rc = proc.wait(timeout=timeout)
            why = f"process exited with {rc}" if rc else ""
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)   # its own session: it and its workers
            proc.wait()
            why = f"process killed after the {timeout:g} s timeout"
        except BaseException:   # this thread interrupted (Ctrl-C, SIGTERM by term_exits)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc)
    got = [json.loads(ln) for ln in out.read_text().splitlines()] if out.exists() else []
    if why:
        why = f"{why}: {_tail(errf)}"
        done = {(r["batch"], r["seq"], r["res"]) for r in got if r["metric"] == "ms"}
        got += [_row(model, system, s, "ms", None, why) for s in cfg.shapes(model)
                if s not in done]
    return got


def untimed(cell: str, rows: Sequence[dict[str, Any]], width: int = 240) -> str:
    """One line saying why ``cell``'s shapes have no time ('' when all have one):
    ``skipped <cell>: <why>`` when the system cannot run on this device, else ``failed <cell>
    (<k> of <n> shapes): <why>`` (the first untimed shape's reason, cut to ``width``)."""
    ms = [r for r in rows if r["metric"] == "ms"]
    bad = [r for r in ms if r["value"] is None or r["value"] != r["value"]]   # None or NaN
    if not bad:
        return ""
    why = " ".join(str(bad[0]["error"] or "no time and no reason recorded").split())
    if why.startswith("skipped: ") and len(bad) == len(ms):
        line = f"skipped {cell}: {why[len('skipped: '):]}"
    else:
        line = f"failed {cell} ({len(bad)} of {len(ms)} shapes): {why}"
    return line if len(line) <= width else line[:width - 3] + "..."


def frame(rows: Iterable[dict[str, Any]]) -> "pd.DataFrame":
    import pandas as pd

    df = pd.DataFrame(list(rows), columns=COLUMNS)
    df = df.astype({"batch": "Int64", "seq": "Int64", "res": "Int64", "value": "float64"})
    df["error"] = df["error"].fillna("").astype(str)
    return df


def run(models: Sequence[str], systems: Sequence[str] = SYSTEMS, cfg: Config = Config(),
        isolate: bool = True, timeout: float = 3600.0,
        log: Callable[[str], None] | None = None, save: Path | None = None) -> "pd.DataFrame":
    """Every (model, system) with fresh caches: in its own process (``isolate``) or in this one;
    the rows as a DataFrame with ``COLUMNS``, also written to the CSV ``save`` after each cell
    (a sweep stopped from outside keeps what it measured)."""
    unknown = [m for m in models if m not in zoo.MODELS and m not in TEXT]
    if unknown:
        raise ValueError(f"unknown models {unknown}: zoo.MODELS names or {', '.join(TEXT)}")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown systems {unknown}; choose from {', '.join(SYSTEMS)}")
    rows: list[dict[str, Any]] = []
    for model in models:
        for system in systems:
            t0 = time.perf_counter()
            if skip_reason(system, cfg.device):
                got = run_one(model, system, cfg)
            elif isolate:
                got = run_process(model, system, cfg, timeout)
            else:
                with fresh_caches():
                    got = run_one(model, system, cfg)
            rows += got
            if save is not None:
                frame(rows).to_csv(save, index=False)
            if log:
                errs = sorted({r["error"][:160] for r in got if r["error"]})
                log(untimed(f"{model} {system}", got)
                    or f"{model} {system}: {time.perf_counter() - t0:.1f} s"
                    + (f"; {' / '.join(errs)}" if errs else ""))
    return frame(rows)


# --- summary, environment ------------------------------------------------------------------------

def summary(df: "pd.DataFrame") -> "pd.DataFrame":
    """Speedup ``eager ms / system ms`` per cell (one column per non-eager system, in
    ``SYSTEMS`` order), and a last row ``model == "geomean"``: per system, the geometric mean
    over the cells where it has a time."""
    import numpy as np
    import pandas as pd

    keys = [k for k in ("model", "batch", "seq", "res") if k in df.columns]
    ms = df[(df["metric"] == "ms") & df["value"].notna()]
    nums = [k for k in keys if k != "model"]
    ms = ms.assign(**{k: ms[k].astype("Int64").fillna(-1) for k in nums})   # NA keys survive
    t = ms.pivot_table(index=keys, columns="system", values="value", aggfunc="first")
    t = t.reindex(columns=list(dict.fromkeys([*t.columns, *df["system"]])))   # untimed: blank
    seen = {m: i for i, m in enumerate(dict.fromkeys(ms["model"]))}   # models in run order
    t = t.sort_index(key=lambda ix: ix.map(seen) if ix.name == "model" else ix)
    if "eager" not in t.columns:
        raise ValueError("summary needs the eager system's ms rows")
    order = [s for s in SYSTEMS if s in t.columns and s != "eager"] + \
        sorted(s for s in t.columns if s not in SYSTEMS)
    sp = t[order].rdiv(t["eager"], axis=0)
    geo = {s: float(np.exp(np.log(sp[s].dropna()).mean())) if sp[s].notna().any() else math.nan
           for s in order}
    out = sp.reset_index()
    out.columns.name = None
    out = pd.concat([out, pd.DataFrame([dict(model="geomean", **geo)])], ignore_index=True)
    for k in nums:
        out[k] = out[k].astype("Int64").mask(out[k] == -1)
    return out


SPREAD = ("min_ms", "median_ms", "max_ms")


def spread(df: "pd.DataFrame") -> "pd.DataFrame":
    """Per timed cell, in the rows' order: model, batch, seq, res, system and ``SPREAD``, the
    fastest, median and slowest of its timed calls (metrics ``ms_min``, ``ms``, ``ms_max``;
    blank where rows predate ``ms_min`` and ``ms_max``)."""
    import pandas as pd

    keys = ["model", "batch", "seq", "res", "system"]
    col = {"ms_min": "min_ms", "ms": "median_ms", "ms_max": "max_ms"}
    t = df[df["metric"].isin(list(col)) & df["value"].notna()]
    rows = []
    for k, g in t.groupby(keys, sort=False, dropna=False):
        v = {col[m]: x for m, x in zip(g["metric"], g["value"])}
        if "median_ms" in v:
            rows.append({**dict(zip(keys, k)), **{c: v.get(c, math.nan) for c in SPREAD}})
    out = pd.DataFrame(rows, columns=[*keys, *SPREAD])
    return out.astype({k: "Int64" for k in ("batch", "seq", "res")})


def report(df: "pd.DataFrame", markdown: bool = False) -> str:
    """The console summary of a run: ``spread`` (ms per call: min / median / max over each
    timed cell's calls), then ``summary`` (speedups over eager's median), each under a title."""
    def table(t: "pd.DataFrame") -> str:
        return zoo.to_markdown(t) if markdown else \
            t.to_string(index=False, float_format=lambda v: f"{v:.4g}")

    sp = spread(df)
    out = [f"ms per call over each cell's timed calls ({len(sp)} cells): min / median / max\n"
           + (table(sp) if len(sp) else "(no timed cell)")]
    ms = df[(df["metric"] == "ms") & df["value"].notna()]
    if (ms["system"] == "eager").any():
        out.append("speedup over eager (eager's median ms / the system's)\n"
                   + table(summary(df)))
    else:
        out.append("no eager times: no speedup summary")
    return "\n\n".join(out)


def _cmd(*cmd: str, cwd: str | None = None) -> str | None:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _cpu_name() -> str:
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def environment(cfg: Config | None = None, models: Sequence[str] = (),
                systems: Sequence[str] = ()) -> dict[str, Any]:
    """The run's environment as JSON-able data (see the module docstring); no hostname."""
    import importlib.metadata as md

    def ver(pkg: str) -> str | None:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    repo = str(Path(__file__).resolve().parents[2])
    commit = _cmd("git", "rev-parse", "HEAD", cwd=repo)
    status = _cmd("git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no",
                  cwd=repo) if commit else None
    try:
        cudnn = torch.backends.cudnn.version()
    except Exception:
        cudnn = None
    env: dict[str, Any] = dict(
        python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda,
        cudnn=cudnn, torchvision=ver("torchvision"), transformers=ver("transformers"),
        numpy=ver("numpy"), pandas=ver("pandas"), numba=ver("numba"), dlcb_lab=ver("dlcb-lab"),
        gpu=None, gpu_count=0, gpu_capability=None, gpu_memory_gib=None, driver=None,
        cpu=_cpu_name(), cpu_count=os.cpu_count(), torch_threads=torch.get_num_threads(),
        os=platform.platform(), commit=commit, dirty=None if status is None else bool(status),
        utc=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        fp32_math=bool(cfg and cfg.fp32), recompile_limit=RECOMPILE_LIMIT,
        models=list(models), systems=list(systems), config=asdict(cfg) if cfg else None)
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        drv = _cmd("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
        env.update(gpu=p.name, gpu_count=torch.cuda.device_count(),
                   gpu_capability=f"{p.major}.{p.minor}",
                   gpu_memory_gib=round(p.total_memory / 2**30, 1),
                   driver=drv.splitlines()[0].strip() if drv else None)
    return env


# --- CLI -----------------------------------------------------------------------------------------

def _child(job: str) -> int:
    j = json.loads(job)
    with open(j["rows"], "a") as f:
        def sink(rows):
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.flush()
        run_one(j["model"], j["system"], Config.from_dict(j["config"]), sink)
    return 0


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


def _names(s: str | None, default: Sequence[str]) -> list[str]:
    return list(default) if s in (None, "", "all") else [x.strip() for x in s.split(",")
                                                          if x.strip()]


def _csv(v: Iterable[Any]) -> str:
    return ",".join(map(str, v))


class DefaultsHelp(argparse.HelpFormatter):
    """Help that ends every option with its default: ``(default: <value>)`` unless the help
    states its own ``(default: ...)``; ``off`` for a flag."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or not action.option_strings or \
                action.default is argparse.SUPPRESS:
            return text
        return text + (" (default: off)" if action.nargs == 0 else " (default: %(default)s)")


def config_args(ap: argparse.ArgumentParser) -> None:
    """The options ``python -m dlcb_lab.bench.models`` and ``dlcb-lab bench`` share (each adds
    its own ``--res`` and ``--out``); ``shape_defaults`` fills the ones left out."""
    f, t = FULL, TINY
    ap.add_argument("--models", help=f"comma-separated: zoo.MODELS names, bert, gpt2 (default: "
                                     f"{', '.join(DEFAULT_MODELS)})")
    ap.add_argument("--systems", help=f"comma-separated (default: {', '.join(SYSTEMS)})")
    ap.add_argument("--device", choices=["cuda", "cpu"],
                    help="(default: cuda if torch sees a GPU, else cpu)")
    shape_args(ap)
    ap.add_argument("--tiny", action="store_true",
                    help="a CPU smoke test: 2-layer, width-32 transformers and the --tiny "
                         "defaults of the shape and timing options")
    ap.add_argument("--reps", type=int, help=f"timed calls per shape (default: {f['reps']}; "
                                             f"--tiny: {t['reps']})")
    ap.add_argument("--warmup", type=int, help=f"untimed calls before them (default: "
                                               f"{f['warmup']}; --tiny: {t['warmup']})")
    ap.add_argument("--dtype", default="float32", choices=list(DTYPES),
                    help="the model's parameters and the image inputs")
    ap.add_argument("--fp32", action="store_true", help="TF32 off in cuBLAS and cuDNN")
    ap.add_argument("--paired", action="store_true",
                    help="dlcb-dynamic: also time it against a static compile in turn "
                         "(paired_ms, paired_static_ms)")
    ap.add_argument("--warm", action="store_true",
                    help="run each (model, system) again over the first run's caches, as a "
                         "service restarts (warm_compile_s, warm_phase_<step>_s)")
    ap.add_argument("--timeout", type=float, default=3600.0,
                    help="s per (model, system) process")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")


def shape_args(ap: argparse.ArgumentParser) -> None:
    """``--batches``, ``--seqs`` and ``--text-shapes``, as every bench command spells them."""
    f, t = FULL, TINY
    ap.add_argument("--batches", help=f"comma-separated (default: {_csv(f['batches'])}; "
                                      f"--tiny: {_csv(t['batches'])})")
    ap.add_argument("--seqs", help=f"text: sequence lengths, each at every batch (default: "
                                   f"{_csv(f['seqs'])}; --tiny: {_csv(t['seqs'])})")
    ap.add_argument("--text-shapes", help="text: BxS pairs instead, e.g. 1x32,8x128 (default: "
                                          "--batches x --seqs)")


def shape_defaults(tiny: bool, **given: Any) -> dict[str, Any]:
    """``given`` (batches, seqs, res, reps, warmup) with each None replaced by ``TINY``'s value
    if ``tiny``, else ``FULL``'s."""
    d = TINY if tiny else FULL
    return {k: d[k] if v is None else v for k, v in given.items()}


def text_pairs(s: str | None) -> tuple[tuple[int, int], ...] | None:
    """``"1x32,8x128"`` -> ((1, 32), (8, 128)); None stays None."""
    if not s:
        return None
    return tuple((int(b), int(q)) for b, q in (p.lower().split("x") for p in s.split(",")))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlcb_lab.bench.models",
                                 description=__doc__.split("\n\n")[0], formatter_class=DefaultsHelp,
                                 epilog="Columns and metrics: see the module docstring "
                                        "(python -c 'import dlcb_lab.bench.models as m; "
                                        "help(m)').")
    config_args(ap)
    ap.add_argument("--res", type=int, help=f"image side (default: {FULL['res']}; --tiny: "
                                            f"{TINY['res']})")
    ap.add_argument("--out", default="data/bench", help="folder for models.csv and env.json")
    ap.add_argument("--in-process", action="store_true",
                    help="no subprocess per (model, system) (caches still fresh; debugging)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        return _child(a.one)
    d = shape_defaults(a.tiny, batches=a.batches and _ints(a.batches),
                       seqs=a.seqs and _ints(a.seqs), res=a.res, reps=a.reps, warmup=a.warmup)
    cfg = Config(device=a.device or ("cuda" if torch.cuda.is_available() else "cpu"),
                 text_shapes=text_pairs(a.text_shapes), tiny=a.tiny, fp32=a.fp32, dtype=a.dtype,
                 paired=a.paired, warm=a.warm, **d)
    if cfg.cuda and not torch.cuda.is_available():
        ap.error("--device cuda but torch sees no CUDA device")
    models, systems = _names(a.models, DEFAULT_MODELS), _names(a.systems, SYSTEMS)
    log = lambda s: print(s, file=sys.stderr, flush=True)
    term_exits()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "env.json").write_text(json.dumps(environment(cfg, models, systems), indent=1) + "\n")
    try:
        df = run(models, systems, cfg, isolate=not a.in_process, timeout=a.timeout, log=log,
                 save=out / "models.csv")
    except ValueError as err:
        ap.error(str(err))
    log(f"wrote {out / 'models.csv'} ({len(df)} rows) and {out / 'env.json'}")
    print(report(df, a.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())

