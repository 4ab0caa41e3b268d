"""TorchVision model zoo through ``dl.compile``: one compile per model, checked against eager at
several batch sizes and resolutions, plus an H200 latency/memory benchmark.

    python -m dlcb_lab.bench.zoo [--models a,b] [--backend cpu|cuda] [--out f.csv] [--markdown]
    python -m dlcb_lab.bench.zoo --gpu [--models a,b] [--out f.csv] [--markdown]

Models are randomly initialised (``weights=None``, seed 0) and in eval mode. CNNs are compiled
with batch, height and width dynamic (``N``, ``H``, ``W``), ``swin_t`` too (checked at 224x192
and 256x160: at height 256 its last stage spans two windows, the other side of a branch its code
takes on sizes, run by a variant); ``vit_b_16`` and ``vit_tiny`` with batch only (resolution fixed: ViT's
positional embedding has one length). Error metric: ``max |compiled - eager| / max |eager|`` over all outputs and
checked shapes (``rel_error``), computed with TF32 off (``fp32_math``).

``--dtype float16|bfloat16`` runs model and input in that dtype. Each op then rounds to 16 bits,
in eager and compiled alike, but the two round at different points (BN folded into the conv
weight, different cuDNN algorithms), so the 16-bit outputs are compared through a third: the
fp32 model. A reduced-precision check passes when the compiled model's error against fp32 is at
most ``HALF_SLACK`` times eager's own (plus ``TOL``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import dlcb_lab as dl

if TYPE_CHECKING:
    import pandas as pd

TOL = 1e-4       # CPU acceptance bound on the relative error
GPU_TOL = 1e-3   # CUDA: cuDNN/cuBLAS pick their algorithms per shape and per call site
HALF_SLACK = 2.0   # fp16/bf16: compiled error vs the fp32 model <= HALF_SLACK * eager's + TOL

Res = tuple[int, int]   # (H, W)
CNN_DYNAMIC = {0: {0: "N", 2: "H", 3: "W"}}
BATCH_DYNAMIC = {0: {0: "N"}}


@dataclass(frozen=True)
class ModelSpec:
    """``build()`` returns a fresh eval-mode model with seed-0 weights. ``dynamic`` is the
    ``dl.compile`` spec for the single image input; ``native`` its ImageNet resolution;
    ``test_res`` two small (H, W) the model admits, used by the CPU checks (equal and ``native``
    when the resolution is fixed). ``variants``: the most variants the checks may compile (Swin:
    the other side of its branch on the resolution)."""

    name: str
    build: Callable[[], torch.nn.Module]
    dynamic: Mapping[int, Mapping[int, str]]
    native: int
    test_res: tuple[Res, Res]
    variants: int = 0
    min_res: int = 1   # the smallest side it runs at (inception_v3: 75, torchvision's own)

    @property
    def dims(self) -> tuple[str, ...]:
        """Dim names declared dynamic, in axis order."""
        return tuple(d for _, d in sorted(self.dynamic[0].items()))

    @property
    def fixed_res(self) -> bool:
        return "H" not in self.dims


def _seeded(ctor: Callable[[], torch.nn.Module]) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return ctor().eval()
    return build


def _tv(arch: str, **kw) -> Callable[[], torch.nn.Module]:
    def ctor():
        import torchvision

        m = getattr(torchvision.models, arch)(weights=None, **kw)
        return _redraw_vit_head(m) if arch.startswith("vit") else m
    return _seeded(ctor)


def _redraw_vit_head(m: torch.nn.Module) -> torch.nn.Module:
    """torchvision zero-initialises the ViT classifier weight, so every output would be 0 and the
    check vacuous: redraw it from N(0, 0.02^2)."""
    with torch.no_grad():
        torch.nn.init.normal_(m.heads.head.weight, std=0.02)
    return m


def _vit_tiny() -> torch.nn.Module:
    import torchvision

    return _redraw_vit_head(torchvision.models.VisionTransformer(
        image_size=64, patch_size=16, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
        num_classes=10))


_SMALL: tuple[Res, Res] = ((64, 80), (96, 72))


def _cnn(name: str, native: int = 224, test_res: tuple[Res, Res] = _SMALL, min_res: int = 1,
         **kw) -> ModelSpec:
    return ModelSpec(name, _tv(name, **kw), CNN_DYNAMIC, native, test_res, min_res=min_res)


def _fixed(name: str, build: Callable[[], torch.nn.Module], res: int) -> ModelSpec:
    return ModelSpec(name, build, BATCH_DYNAMIC, res, ((res, res), (res, res)))


MODELS: dict[str, ModelSpec] = {s.name: s for s in [
    _cnn("resnet18"),
    _cnn("resnet50"),
    _cnn("resnext50_32x4d"),
    _cnn("wide_resnet50_2"),
    _cnn("mobilenet_v2"),
    _cnn("mobilenet_v3_small"),
    _cnn("mobilenet_v3_large"),
    _cnn("efficientnet_b0"),
    _cnn("efficientnet_v2_s"),
    _cnn("densenet121"),
    _cnn("squeezenet1_1"),
    _cnn("shufflenet_v2_x1_0"),
    _cnn("mnasnet1_0"),
    _cnn("regnet_x_400mf"),
    _cnn("regnet_y_400mf"),
    _cnn("vgg11_bn"),
    _cnn("alexnet"),
    _cnn("googlenet", aux_logits=False, init_weights=False),
    _cnn("inception_v3", native=299, test_res=((80, 96), (112, 88)), min_res=75,
         aux_logits=False, init_weights=False),
    _cnn("convnext_tiny"),
    _fixed("vit_b_16", _tv("vit_b_16"), 224),
    ModelSpec("swin_t", _tv("swin_t"), CNN_DYNAMIC, 224, ((224, 192), (256, 160)), variants=1),
    _fixed("vit_tiny", _seeded(_vit_tiny), 64),
]}

FAST = ("resnet18", "mobilenet_v3_small", "squeezenet1_1", "shufflenet_v2_x1_0", "vit_tiny")


def make_input(batch: int, res: Res, device: str | torch.device = "cpu",
               seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A deterministic ``[batch, 3, H, W]`` image batch (drawn in float32 on CPU, then moved)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, *res, generator=g).to(device, dtype)


def check_shapes(batches: Sequence[int], resolutions: Sequence[Res]) -> list[tuple[int, Res]]:
    """Batches paired with resolutions cyclically: (b0, r0), (b1, r1), (b2, r0), ..."""
    return [(b, resolutions[i % len(resolutions)]) for i, b in enumerate(batches)]


def _outputs(y: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(y, torch.Tensor):
        return (y,)
    if isinstance(y, (tuple, list)):
        return tuple(t for x in y for t in _outputs(x))
    raise TypeError(f"model output of type {type(y).__name__} is not a tensor or tuple")


def rel_error(got: Any, want: Any) -> float:
    """``max |got - want| / max |want|`` over all outputs (in float64); ``inf`` if any output's
    count, shape or dtype differs from eager, if a value is not finite, or if ``want`` is all
    zeros (a vacuous check)."""
    got, want = _outputs(got), _outputs(want)
    if len(got) != len(want):
        return math.inf
    num = den = 0.0
    for a, b in zip(got, want):
        if a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        if b.numel() == 0:
            continue
        a, b = a.detach().cpu().double(), b.detach().cpu().double()
        d, m = (a - b).abs().max().item(), b.abs().max().item()
        if not (math.isfinite(d) and math.isfinite(m)):   # Python's max() drops a NaN
            return math.inf
        num, den = max(num, d), max(den, m)
    return num / den if den > 0 else math.inf


@dataclass(frozen=True)
class Errors:
    """``vs_eager``: compiled vs eager in the model's dtype. For fp16/bf16 also ``vs_fp32``
    (compiled vs the fp32 model) and ``eager_vs_fp32`` (eager's own rounding error); ``ok`` is
    then ``vs_fp32 <= HALF_SLACK * eager_vs_fp32 + TOL``, else ``vs_eager <= tol``."""

    vs_eager: float
    vs_fp32: float | None = None
    eager_vs_fp32: float | None = None

    def ok(self, tol: float) -> bool:
        if self.vs_fp32 is None:
            return self.vs_eager <= tol
        return self.vs_fp32 <= HALF_SLACK * self.eager_vs_fp32 + TOL

    @property
    def note(self) -> str:
        """Why a passing 16-bit check says little: eager's own 16-bit output is degenerate
        (overflow: its error against fp32 is 0.5 or more, so the bound is loose)."""
        if self.eager_vs_fp32 is not None and self.eager_vs_fp32 >= 0.5:
            return f"eager's 16-bit output is degenerate (error vs fp32 {self.eager_vs_fp32:.2g})"
        return ""

    def worst(self, other: "Errors | None") -> "Errors":
        """The element-wise maximum (``None`` counts as no error yet)."""
        if other is None:
            return self
        pick = lambda a, b: None if a is None else max(a, b)
        return Errors(max(self.vs_eager, other.vs_eager), pick(self.vs_fp32, other.vs_fp32),
                      pick(self.eager_vs_fp32, other.eager_vs_fp32))


def errors(got: Any, want: Any, want32: Any = None) -> Errors:
    """``Errors`` of one call; ``want32`` (the fp32 model's output) only for 16-bit models."""
    if want32 is None:
        return Errors(rel_error(got, want))
    up = lambda y: tuple(t.float() for t in _outputs(y))
    return Errors(rel_error(got, want), rel_error(up(got), want32), rel_error(up(want), want32))


# --- counting ----------------------------------------------------------------------------------

class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not (func.is_view or func.overloadpacket.__name__.startswith("empty")):
            self.ops += 1
        return func(*args, **(kwargs or {}))


def eager_ops(model: torch.nn.Module, x: torch.Tensor) -> int:
    """ATen ops one eager call (``no_grad``) dispatches, as a ``TorchDispatchMode`` sees them:
    below autograd and after CompositeImplicit decompositions, so ``conv2d`` counts once (as
    ``convolution``) and ``linear`` once (as ``addmm``). Views (output aliases an input) and
    ``empty*`` allocations launch no kernel and are not counted. A proxy for eager kernel
    launches: one cuDNN/cuBLAS call may launch several kernels."""
    counter = _OpCounter()
    with torch.no_grad(), counter:
        model(x)
    return counter.ops


def _kind(x: Any) -> str:
    return str(getattr(x, "value", x))


def partition_counts(cm: dl.CompiledModule) -> tuple[int, int, int]:
    """(library thunks, generated kernels, launches per call).

    From ``cm.pipeline.partition`` when the compiler provides it (a per-thunk table, via
    ``.to_frame()`` or as rows with ``kind`` in {"library", "generated"} and ``launches``): rows
    of each kind are counted and ``launches`` summed. Otherwise the static estimate: graph nodes of
    kind ``library`` (one call each), ``len(pipeline.kernels)`` generated kernels (one launch each,
    zero-size launches not subtracted)."""
    part = getattr(cm.pipeline, "partition", None)
    if part is not None:
        if hasattr(part, "to_frame"):
            rows = [(_kind(k), int(n)) for k, n in zip(part.to_frame()["kind"],
                                                       part.to_frame()["launches"])]
        else:
            rows = [(_kind(r.kind), int(r.launches)) for r in part]
        lib = sum(k == "library" for k, _ in rows)
        gen = sum(k == "generated" for k, _ in rows)
        return lib, gen, sum(n for _, n in rows)
    lib = sum(_kind(n.op.kind) == "library" for n in cm.pipeline.graph.nodes)
    gen = len(cm.pipeline.kernels)
    return lib, gen, lib + gen


def generalized_dims(cm: dl.CompiledModule, spec: ModelSpec) -> tuple[str, ...]:
    """Declared dynamic dims of the image input that the solve left symbolic (named or residual,
    not literal) in ``cm.pipeline.dims``."""
    x = cm.pipeline.graph.inputs[0].name
    rows = {r.axis: r for r in cm.pipeline.dims.of(x)}
    return tuple(d for a, d in sorted(spec.dynamic[0].items()) if _kind(rows[a].kind) != "literal")


# --- CPU / correctness check --------------------------------------------------------------------

def _describe(err: BaseException) -> str:
    """``Type: message`` on one line (lines joined by `` | ``, cut at 600 characters); for an error
    that is not a ``DLError`` (a crash rather than a refusal) also the innermost frame,
    ``(file.py:line in func)``."""
    msg = " | ".join(ln.strip() for ln in str(err).strip().splitlines() if ln.strip())
    out = f"{type(err).__name__}: {msg}"[:600]
    tb = traceback.extract_tb(err.__traceback__)
    if tb and not isinstance(err, dl.DLError):
        f = tb[-1]
        out += f" ({os.path.basename(f.filename)}:{f.lineno} in {f.name})"
    return out


@contextlib.contextmanager
def fp32_math():
    """cuBLAS and cuDNN in full fp32 (TF32 off) inside; the previous flags are restored after.
    Correctness checks run under it (library thunks call the same ATen ops, so both sides get
    it); timings do not."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:   # cudnn's flags through its context manager (setting them may be locked globally)
        with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=False):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _sync(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _variant_builds(cm: dl.CompiledModule) -> int:
    """Kernels built by variants (a call on the other side of a branch on sizes, or at a size 1
    the general program refuses: compiled once, on that call)."""
    return sum(v.stats()["kernel_builds"] for v in cm.variants.values()
               if isinstance(v, dl.CompiledModule))


def compile_model(name: str, backend: str = "cpu", batch: int = 1, res: Res | None = None,
                  device: str | None = None, model: torch.nn.Module | None = None,
                  dtype: torch.dtype = torch.float32, dynamic: Any = None) -> dl.CompiledModule:
    """``dl.compile`` of ``model`` (default: a fresh ``MODELS[name].build()`` in ``dtype``) with
    ``dynamic`` (default: the spec's dynamic dims; ``"auto"``) and example input
    ``[batch, 3, *res]`` (default: the first test resolution)."""
    spec = MODELS[name]
    device = device or ("cuda" if backend == "cuda" else "cpu")
    model = (spec.build() if model is None else model).to(device, dtype)
    x = make_input(batch, res or spec.test_res[0], device, dtype=dtype)
    return dl.compile(model, (x,), dynamic=spec.dynamic if dynamic is None else dynamic,
                      backend=backend)


def check_model(name: str, backend: str = "cpu", batches: Sequence[int] = (1, 3, 5),
                resolutions: Sequence[Res] | None = None, device: str | None = None,
                cm: dl.CompiledModule | None = None, tol: float = TOL,
                dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """Compile ``name`` once (example input: first batch and resolution; or reuse ``cm``), run it
    and a separately built eager copy on ``check_shapes(batches, resolutions)`` under
    ``no_grad``, and return one row. ``ok`` requires: compile and every call succeed, every
    declared dim stays symbolic, ``Errors.ok(tol)``, ``compiles == 1`` (plus at most
    ``spec.variants`` variants) and ``kernel_builds``
    unchanged by the calls. Exceptions are caught and reported in ``error`` (stage first)."""
    spec = MODELS[name]
    device = device or ("cuda" if backend == "cuda" else "cpu")
    resolutions = list(resolutions or spec.test_res)
    shapes = check_shapes(batches, resolutions)
    half = dtype != torch.float32
    row: dict[str, Any] = dict(
        model=name, backend=backend, dtype=str(dtype).removeprefix("torch."),
        shapes=" ".join(f"{b}x{h}x{w}" for b, (h, w) in shapes),
        dims="", library_thunks=None, generated_kernels=None, launches=None, eager_ops=None,
        max_rel_err=None, fp32_err=None, eager_fp32_err=None, compile_s=None, compiles=None,
        kernel_builds=None, kernel_builds_after=None, ok=False, error="", note="")
    stage = "build"
    try:
        ref = spec.build().to(device, dtype)
        ref32 = spec.build().to(device) if half else None
        stage = "eager"
        row["eager_ops"] = eager_ops(ref, make_input(*shapes[0], device, dtype=dtype))
        stage = "compile"
        if cm is None:
            t0 = time.perf_counter()
            cm = compile_model(name, backend, *shapes[0], device=device, dtype=dtype)
            row["compile_s"] = time.perf_counter() - t0
        else:
            row["compile_s"] = cm.stats()["compile_s"]
        stage = "inspect"
        st = cm.stats()
        row["compiles"], row["kernel_builds"] = st["compiles"], st["kernel_builds"] - \
            _variant_builds(cm)
        dims = generalized_dims(cm, spec)
        row["dims"] = ",".join(dims)
        lib, gen, launches = partition_counts(cm)
        row.update(library_thunks=lib, generated_kernels=gen, launches=launches)
        worst = None
        for i, (b, res) in enumerate(shapes):
            stage = f"run {b}x{res[0]}x{res[1]}"
            x = make_input(b, res, device, seed=1 + i)
            with torch.no_grad(), fp32_math():
                got = cm(x.to(dtype))
                want = ref(x.to(dtype))
                want32 = ref32(x) if half else None
            _sync(device)
            worst = errors(got, want, want32).worst(worst)
            row.update(max_rel_err=worst.vs_eager, fp32_err=worst.vs_fp32,
                       eager_fp32_err=worst.eager_vs_fp32, note=worst.note)
        st = cm.stats()
        row["kernel_builds_after"] = st["kernel_builds"] - _variant_builds(cm)
        row["variants"] = st["variants"]
        problems = []
        if dims != spec.dims:
            problems.append(f"dims {set(spec.dims) - set(dims)} pinned to literals")
        if not worst.ok(tol):
            problems.append(f"max_rel_err {worst.vs_eager:.3g} > {tol:g}" if not half else
                            f"fp32_err {worst.vs_fp32:.3g} > {HALF_SLACK:g} x eager's "
                            f"{worst.eager_vs_fp32:.3g} + {TOL:g}")
        if st["compiles"] != 1 + st["variants"] or st["variants"] > spec.variants:
            problems.append(f"compiles == {st['compiles']} ({st['variants']} variants, "
                            f"{spec.variants} expected at most)")
        if row["kernel_builds_after"] != row["kernel_builds"]:
            problems.append(f"kernel_builds {row['kernel_builds']} -> "
                            f"{row['kernel_builds_after']} across calls")
        row["ok"] = not problems
        row["error"] = "; ".join(problems)
    except Exception as err:   # one model's failure must not stop a sweep
        row["error"] = f"{stage}: {_describe(err)}"
    return row


def sweep(names: Iterable[str], backend: str = "cpu", log: Callable[[str], None] | None = None,
          **kw) -> "pd.DataFrame":
    """``check_model`` for each name (``kw`` passed on); one row per model."""
    import pandas as pd

    rows = []
    for name in names:
        rows.append(check_model(name, backend=backend, **kw))
        if log:
            r = rows[-1]
            log(f"{name}: {'ok' if r['ok'] else 'FAIL'} err={r['max_rel_err']} {r['error']}")
    df = pd.DataFrame(rows)
    ints = ["library_thunks", "generated_kernels", "launches", "eager_ops", "compiles", "variants",
            "kernel_builds", "kernel_builds_after"]
    return df.astype({c: "Int64" for c in ints})


# --- GPU benchmark -------------------------------------------------------------------------------

def event_times_ms(fn: Callable[[], Any], reps: int, warmup: int) -> list[float]:
    """The CUDA-event time of each of ``reps`` calls after ``warmup`` untimed ones, from just
    before to just after the call (host launch gaps included: the stream idles while the host is
    still launching), in ms."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
           for _ in range(reps)]
    for start, end in evs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in evs]


def _event_median_ms(fn: Callable[[], Any], reps: int, warmup: int) -> float:
    """Median of ``event_times_ms``."""
    return statistics.median(event_times_ms(fn, reps, warmup))


def peak_mb(fn: Callable[[], Any]) -> float:
    """Peak CUDA memory one call allocates above what is resident before it (weights, input), in
    MiB; the caching allocator is emptied and the peak counter reset first."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


@contextlib.contextmanager
def _cache_dir(path: str):
    old = os.environ.get("DLCB_CACHE_DIR")
    os.environ["DLCB_CACHE_DIR"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("DLCB_CACHE_DIR", None)
        else:
            os.environ["DLCB_CACHE_DIR"] = old


GPU_COLUMNS = ["model", "dtype", "batch", "res", "dlcb_ms", "eager_ms", "ratio", "compile_s",
               "peak_mb_dlcb", "peak_mb_eager", "max_rel_err", "fp32_err", "eager_fp32_err", "ok",
               "error", "note"]


def _gpu_model(name: str, batches: Sequence[int], reps: int, warmup: int, peak_batch: int,
               tol: float, dtype: torch.dtype) -> list[dict[str, Any]]:
    spec = MODELS[name]
    res = (spec.native, spec.native)
    half = dtype != torch.float32
    base = dict(model=name, dtype=str(dtype).removeprefix("torch."), res=spec.native,
                compile_s=None)
    try:
        ref = spec.build().to("cuda", dtype)
        ref32 = spec.build().cuda() if half else None
        t0 = time.perf_counter()
        cm = compile_model(name, "cuda", batches[0], res, device="cuda", dtype=dtype)
        torch.cuda.synchronize()
        base["compile_s"] = time.perf_counter() - t0
        builds = cm.stats()["kernel_builds"]
    except Exception as err:
        return [dict(base, batch=b, ok=False, error=f"compile: {_describe(err)}")
                for b in batches]
    rows = []
    for b in batches:
        row = dict(base, batch=b, ok=False, error="")
        try:
            x32 = make_input(b, res, "cuda", seed=1)
            x = x32.to(dtype)
            with torch.no_grad():
                with fp32_math():
                    err = errors(cm(x), ref(x), ref32(x32) if half else None)
                    row.update(max_rel_err=err.vs_eager, fp32_err=err.vs_fp32,
                               eager_fp32_err=err.eager_vs_fp32, note=err.note)
                row["dlcb_ms"] = _event_median_ms(lambda: cm(x), reps, warmup)
                row["eager_ms"] = _event_median_ms(lambda: ref(x), reps, warmup)
                row["ratio"] = row["dlcb_ms"] / row["eager_ms"]
                if b == peak_batch:
                    row["peak_mb_eager"] = peak_mb(lambda: ref(x))
                    row["peak_mb_dlcb"] = peak_mb(lambda: cm(x))
            problems = []
            if not err.ok(tol):
                problems.append(f"error {err} beyond tolerance")
            if cm.stats()["kernel_builds"] != builds:
                problems.append("kernel_builds changed across calls")
            row["ok"], row["error"] = not problems, "; ".join(problems)
        except Exception as err:
            row["error"] = f"run batch {b}: {_describe(err)}"
        rows.append(row)
    return rows


def gpu_bench(names: Iterable[str], batches: Sequence[int] = (1, 8, 32), reps: int = 50,
              warmup: int = 10, peak_batch: int = 32, tol: float = GPU_TOL,
              log: Callable[[str], None] | None = None,
              dtype: torch.dtype = torch.float32) -> "pd.DataFrame":
    """Per model: one ``backend="cuda"`` compile at the native resolution (example batch
    ``batches[0]``; kernel cache pointed at an empty folder, so ``compile_s`` is cold), then per
    batch: the relative error against a separately built eager copy (``<= tol``, under
    ``fp32_math``; the tolerance still allows for cuDNN's per-shape algorithm choice), median
    CUDA-event latency of DLCB and eager (``ratio = dlcb_ms / eager_ms``), and, at
    ``peak_batch``, ``peak_mb`` of one call of each, measured separately. One row per
    (model, batch), columns ``GPU_COLUMNS``; failures land in ``error``."""
    import pandas as pd

    rows = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="dlcb_zoo_") as cold, _cache_dir(cold):
            got = _gpu_model(name, batches, reps, warmup, peak_batch, tol, dtype)
            torch.cuda.empty_cache()
        rows += got
        if log:
            for r in got:
                log(f"{name} N={r['batch']}: {'ok' if r['ok'] else 'FAIL'} "
                    f"dlcb {r.get('dlcb_ms')} ms eager {r.get('eager_ms')} ms {r['error']}")
    return pd.DataFrame(rows, columns=GPU_COLUMNS)


# --- CLI -----------------------------------------------------------------------------------------

def to_markdown(df: "pd.DataFrame") -> str:
    """A Markdown pipe table (``df.to_markdown`` when ``tabulate`` is installed); floats to 3
    significant digits, missing values blank."""
    try:
        return df.to_markdown(index=False, floatfmt=".3g")
    except ImportError:
        pass
    import pandas as pd

    def fmt(v: Any) -> str:
        if v is None or (not isinstance(v, str) and pd.isna(v)):
            return ""
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(map(str, df.columns)) + " |",
             "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines)


def format_table(df, markdown: bool = False) -> str:
    """``to_markdown(df)`` when asked, else ``df.to_string()``."""
    return to_markdown(df) if markdown else df.to_string(index=False)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated names (default: all); 'fast' for FAST")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--gpu", action="store_true",
                    help="latency/memory benchmark at native resolution (backend cuda)")
    ap.add_argument("--batches", help="comma-separated batch sizes (default 1,3,5; --gpu 1,8,32)")
    ap.add_argument("--reps", type=int, default=50, help="timed calls per measurement (--gpu)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--out", help="write the table as CSV")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    if a.models in (None, "all"):
        names = list(MODELS)
    elif a.models == "fast":
        names = list(FAST)
    else:
        names = [n.strip() for n in a.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown models {unknown}; choose from {', '.join(MODELS)}")
    kw = {"batches": tuple(int(b) for b in a.batches.split(","))} if a.batches else {}
    kw["dtype"] = getattr(torch, a.dtype)
    log = lambda s: print(s, file=sys.stderr, flush=True)
    if a.gpu:
        df = gpu_bench(names, reps=a.reps, log=log, **kw)
    else:
        df = sweep(names, backend=a.backend, log=log, **kw)
    if a.out:
        df.to_csv(a.out, index=False)
    shown = df.assign(error=df["error"].fillna("").str.slice(0, 100))   # the CSV keeps it whole
    print(format_table(shown, a.markdown))
    return 0 if df["ok"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
