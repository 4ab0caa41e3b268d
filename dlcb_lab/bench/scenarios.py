"""Measurement scenarios: every method the benchmarks use, by name, with its command.

    python -m dlcb_lab.bench.scenarios list
    python -m dlcb_lab.bench.scenarios kernels MODEL [--systems dlcb-dynamic,dlcb-static]
        [--batches 1,8,32] [--res 224 | --seqs .. | --text-shapes ..] [--tiny] [--device cuda]
        [--reps 20] [--warmup 5] [--top 30] [--out DIR]
    python -m dlcb_lab.bench.scenarios first-call MODEL [--system dlcb-dynamic] [--batches ..]
        [--res ..] [--tiny] [--device cuda] [--top 15] [--out DIR]

``SCENARIOS`` names each method and the command that runs it. Most are metrics of the sweep
(``dlcb-lab bench``: one (model, system) per process with empty caches, ``bench.models``
documents each metric); two run here, in one process with empty caches
(``models.fresh_caches``), on ``bench.models``' modules, inputs and systems:

``kernels`` (``kernels``, ``kernel_times``): the time per call of every kernel each system
launches at each shape, from torch.profiler over ``reps`` calls after ``warmup`` plain ones; the
systems side by side (by default DLCB dynamic, compiled once at the first shape, against a
static compile per shape). On CUDA each kernel's device time (CUPTI sees generated ``dlcb_k*``
and library kernels alike); on the CPU each ATen operator's self CPU time (the profiler does not
see numba kernels, so a DLCB module's generated kernels are absent there).

``first-call`` (``first_call``): a new shape's first calls and what the first one does on the
host. The system is set up and called three times at each shape in turn (the first shape's
setup is the cold compile); the first call at each shape runs under torch.profiler (CPU, and
CUDA on cuda), so its time includes the profiler's per-op cost. Then, at the same shape, the
first and second calls of two eager copies built at the start: NCHW and, for images,
channels-last (the layout DLCB's convolutions run in), each meeting the shape for the first time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from . import models as bm

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Scenario:
    command: str
    measures: str
    metrics: tuple[str, ...] = ()
    """The ``bench.models`` metrics (``models.csv`` rows) it gives; none: its own table."""


SCENARIOS = {
    "sweep": Scenario(
        "dlcb-lab bench",
        "latency per shape over --reps calls (CUDA events on cuda): the median and its spread",
        ("ms", "ms_min", "ms_max")),
    "dynamic-vs-static": Scenario(
        "dlcb-lab bench --systems dlcb-dynamic --paired",
        "DLCB dynamic and a static compile at the same shape, timed in turn in one process "
        "(5 rounds)", ("paired_ms", "paired_static_ms")),
    "cold-compile": Scenario(
        "dlcb-lab bench --systems dlcb-dynamic,dlcb-static",
        "setup to first result in a fresh process with empty caches, each step of dl.compile, "
        "a later shape's recompile; torch.compile's phases (dynamo, aot, inductor)",
        ("compile_s", "phase_<step>_s", "recompile_s")),
    "warm-compile": Scenario(
        "dlcb-lab bench --systems dlcb-dynamic,torch.compile-dynamic --warm",
        "the cold compile again in a new process over the first one's caches (a restarted "
        "service)", ("warm_compile_s", "warm_phase_<step>_s")),
    "compile": Scenario(
        "python -m dlcb_lab.bench.compile",
        "cold, warm (caches kept, a new process) and a new shape's first call per phase, DLCB "
        "dynamic against torch.compile (default and reduce-overhead), one cell at a time; a "
        "table per (model, system) and the compile targets",
        ("compile_s", "warm_compile_s", "first_call_ms", "recompiles", "phase_<step>_s")),
    "new-shape": Scenario(
        "dlcb-lab bench --systems eager,dlcb-dynamic",
        "each later shape's first call, and eager's first call there in the same process",
        ("first_call_ms", "first_call_cold_ms")),
    "memory": Scenario(
        "dlcb-lab bench --systems eager,dlcb-dynamic --device cuda",
        "device memory peak over the cell above what was resident, and the resident weights "
        "and inputs", ("peak_mb", "resident_mb")),
    "kernels": Scenario(
        "python -m dlcb_lab.bench.scenarios kernels MODEL",
        "each kernel's time and launches per call (torch.profiler), systems side by side"),
    "first-call": Scenario(
        "python -m dlcb_lab.bench.scenarios first-call MODEL",
        "setup and calls 1-3 at each shape, call 1 profiled (host operators by self CPU time); "
        "eager NCHW and channels-last first calls beside"),
    "host-split": Scenario(
        "python -m dlcb_lab.bench.profile --models MODEL",
        "one compiled call's wall, host-program, generated-kernel and library time (CUDA)"),
    "bandwidth": Scenario(
        "python -m dlcb_lab.bench.bandwidth --backend cuda",
        "memory-bound subgraphs against a device copy of the same bytes (pct_copy)"),
    "graphs": Scenario(
        "python -m dlcb_lab.bench.graphs",
        "CUDA-graph replay on and off, eager as one graph, a new signature's first calls"),
    "overhead": Scenario(
        "python -m dlcb_lab.bench.overhead",
        "per-call latency of a small compiled module against eager and torch.compile"),
}


# --- kernels -------------------------------------------------------------------------------------

def kernel_times(fn: Callable[[], Any], reps: int = 20, warmup: int = 5,
                 cuda: bool | None = None) -> "pd.DataFrame":
    """Per kernel ``fn`` launches: ``kernel`` (its name), ``us`` (time per call), ``calls``
    (launches per call), from torch.profiler over ``reps`` calls after ``warmup`` unprofiled
    ones; slowest first. ``cuda`` (default: torch sees a GPU): device kernels and their device
    time; else ATen operators and their self CPU time (see the module doc)."""
    import pandas as pd
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available() if cuda is None else cuda
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            fn()
        sync()
    rows = []
    for e in prof.key_averages():
        if cuda:
            if e.device_type != torch.autograd.DeviceType.CUDA:
                continue
            us = getattr(e, "self_device_time_total", None)
            us = e.self_cuda_time_total if us is None else us
        else:
            us = e.self_cpu_time_total
        rows.append(dict(kernel=e.key, us=us / reps, calls=e.count / reps))
    df = pd.DataFrame(rows, columns=["kernel", "us", "calls"])
    return df.sort_values("us", ascending=False, kind="stable").reset_index(drop=True)


def _config(device: str | None, tiny: bool, **shape: Any) -> bm.Config:
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    text_shapes = shape.pop("text_shapes", None)
    d = bm.shape_defaults(tiny, **{k: shape.get(k) for k in ("batches", "seqs", "res", "reps",
                                                             "warmup")})
    cfg = bm.Config(device=device, tiny=tiny, text_shapes=text_shapes, **d)
    if cfg.cuda and not torch.cuda.is_available():
        raise ValueError("device cuda but torch sees no CUDA device")
    return cfg


def _key(model: str, shape: bm.Shape) -> dict[str, Any]:
    b, s, r = shape
    return dict(model=model, batch=b, seq=s, res=r)


def kernels(model: str, systems: Sequence[str] = ("dlcb-dynamic", "dlcb-static"),
            batches: Sequence[int] | None = None, seqs: Sequence[int] | None = None,
            text_shapes: Sequence[tuple[int, int]] | None = None, res: int | None = None,
            device: str | None = None, tiny: bool = False, reps: int = 20,
            warmup: int = 5) -> "pd.DataFrame":
    """The ``kernels`` scenario (module doc): long form, one row per (shape, system, kernel):
    model, batch, seq, res, system, kernel, us, calls. Each system runs the model's shapes in
    order on its own copy of the module, set up at each shape as in a sweep cell
    (``models.make_system``)."""
    import pandas as pd

    cfg = _config(device, tiny, batches=batches, seqs=seqs, text_shapes=text_shapes, res=res,
                  reps=reps, warmup=warmup)
    shapes = cfg.shapes(model)
    frames = []
    with bm.fresh_caches():
        for system in systems:
            if bm.skip_reason(system, cfg.device):
                raise ValueError(bm.skip_reason(system, cfg.device))
            with bm.system_context(system, cfg):
                sysm = bm.make_system(system, bm.build(model, tiny).to(cfg.device), cfg.device)
                for i, shape in enumerate(shapes):
                    fn = sysm.setup(bm.make_inputs(model, shape, cfg.device, 1 + i))
                    k = kernel_times(fn, cfg.reps, cfg.warmup, cfg.cuda)
                    frames.append(k.assign(**_key(model, shape), system=system))
    cols = ["model", "batch", "seq", "res", "system", "kernel", "us", "calls"]
    df = pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)
    return df.astype({"batch": "Int64", "seq": "Int64", "res": "Int64"})


def side_by_side(df: "pd.DataFrame", top: int | None = None) -> "pd.DataFrame":
    """``kernels``' rows as one row per (shape, kernel), ``<system> us`` and ``<system> n``
    columns (in the systems' order), the kernels whose times differ most between the systems
    first in each shape (then the slowest); ``top``: that many per shape."""
    import pandas as pd

    systems = list(dict.fromkeys(df["system"]))
    keys = ["model", "batch", "seq", "res"]
    out = []
    for _, g in df.groupby(keys, sort=False, dropna=False):
        w = g.pivot_table(index=[*keys, "kernel"], columns="system", values=["us", "calls"],
                          aggfunc="first", dropna=False)
        t = pd.DataFrame(index=w.index)
        for s in systems:
            t[f"{s} us"] = w["us"][s] if s in w["us"] else float("nan")
            t[f"{s} n"] = w["calls"][s] if s in w["calls"] else float("nan")
        us = t[[f"{s} us" for s in systems]].fillna(0)
        order = pd.DataFrame({"diff": us.max(axis=1) - us.min(axis=1), "max": us.max(axis=1)})
        t = t.loc[order.sort_values(["diff", "max"], ascending=False, kind="stable").index]
        out.append(t.head(top) if top else t)
    return pd.concat(out).reset_index() if out else pd.DataFrame()


# --- a new shape's first call --------------------------------------------------------------------

def _wall_ms(fn: Callable[[], Any], cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def first_call(model: str, system: str = "dlcb-dynamic", batches: Sequence[int] | None = None,
               seqs: Sequence[int] | None = None,
               text_shapes: Sequence[tuple[int, int]] | None = None, res: int | None = None,
               device: str | None = None, tiny: bool = False, top: int = 15
               ) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """The ``first-call`` scenario (module doc): ``(times, ops)``. ``times``: model, batch, seq,
    res, system, step, ms; the system's steps ``setup``, ``call 1`` (profiled), ``call 2``,
    ``call 3``, then ``eager-copy`` and ``eager-channels-last`` (images) ``call 1``,
    ``call 2``.
    ``ops``: the ``top`` host operators of the system's first call at each shape by self CPU
    time: model, batch, seq, res, op, self_cpu_ms, calls."""
    import pandas as pd
    from torch.profiler import ProfilerActivity, profile

    cfg = _config(device, tiny, batches=batches, seqs=seqs, text_shapes=text_shapes, res=res)
    if bm.skip_reason(system, cfg.device):
        raise ValueError(bm.skip_reason(system, cfg.device))
    shapes, dev, cuda = cfg.shapes(model), cfg.device, cfg.cuda
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    times: list[dict[str, Any]] = []
    ops: list[dict[str, Any]] = []
    with bm.fresh_caches(), bm.system_context(system, cfg):
        sysm = bm.make_system(system, bm.build(model, tiny).to(dev), dev)
        eager = {"eager-copy": bm.build(model, tiny).to(dev)}
        if model not in bm.TEXT:
            eager["eager-channels-last"] = bm.build(model, tiny).to(
                dev, memory_format=torch.channels_last)
        for i, shape in enumerate(shapes):
            args = bm.make_inputs(model, shape, dev, 1 + i)
            key = _key(model, shape)
            t0 = time.perf_counter()
            fn = sysm.setup(args)
            if cuda:
                torch.cuda.synchronize()
            times.append(dict(key, system=system, step="setup",
                              ms=(time.perf_counter() - t0) * 1e3))
            with profile(activities=acts) as prof:
                ms = _wall_ms(fn, cuda)
            times.append(dict(key, system=system, step="call 1", ms=ms))
            for n in (2, 3):
                times.append(dict(key, system=system, step=f"call {n}", ms=_wall_ms(fn, cuda)))
            ev = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
            ops += [dict(key, op=e.key, self_cpu_ms=e.self_cpu_time_total / 1e3, calls=e.count)
                    for e in ev]
            for name, m in eager.items():
                x = args if name == "eager-copy" else \
                    tuple(a.contiguous(memory_format=torch.channels_last) for a in args)
                for n in (1, 2):
                    times.append(dict(key, system=name, step=f"call {n}",
                                      ms=_wall_ms(lambda: m(*x), cuda)))
    keys, ints = ["model", "batch", "seq", "res"], {"batch": "Int64", "seq": "Int64",
                                                    "res": "Int64"}
    return (pd.DataFrame(times, columns=[*keys, "system", "step", "ms"]).astype(ints),
            pd.DataFrame(ops, columns=[*keys, "op", "self_cpu_ms", "calls"]).astype(ints))


# --- CLI -----------------------------------------------------------------------------------------

def _shape_args(ap: argparse.ArgumentParser) -> None:
    f, t = bm.FULL, bm.TINY
    ap.add_argument("model", help="a zoo.MODELS name, bert or gpt2")
    bm.shape_args(ap)
    ap.add_argument("--res", type=int, help=f"image side (default: {f['res']}; --tiny: "
                                            f"{t['res']})")
    ap.add_argument("--tiny", action="store_true", help="tiny transformers, --tiny shapes")
    ap.add_argument("--device", choices=["cuda", "cpu"],
                    help="(default: cuda if torch sees a GPU, else cpu)")
    ap.add_argument("--out", help="folder for the CSVs and env.json (default: none written)")


def _shape_kw(a) -> dict[str, Any]:
    ints = lambda s: s and bm._ints(s)   # noqa: E731
    return dict(batches=ints(a.batches), seqs=ints(a.seqs),
                text_shapes=bm.text_pairs(a.text_shapes), res=a.res, device=a.device,
                tiny=a.tiny)


def _save(out: str | None, a, frames: dict[str, "pd.DataFrame"]) -> None:
    if not out:
        return
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for name, df in frames.items():
        df.to_csv(folder / f"{name}.csv", index=False)
    env = bm.environment(None, [a.model], [])
    env["scenario"] = {k: v for k, v in vars(a).items()}
    (folder / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    print(f"wrote {', '.join(f'{n}.csv' for n in frames)} and env.json to {folder}",
          file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlcb_lab.bench.scenarios",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="scenario", required=True)
    sub.add_parser("list", help="every scenario and its command")
    k = sub.add_parser("kernels", help="time per kernel per call, systems side by side",
                       formatter_class=bm.DefaultsHelp)
    _shape_args(k)
    k.add_argument("--systems", default="dlcb-dynamic,dlcb-static", help="comma-separated")
    k.add_argument("--reps", type=int, default=20, help="profiled calls per shape")
    k.add_argument("--warmup", type=int, default=5, help="plain calls before them")
    k.add_argument("--top", type=int, default=30, help="kernels printed per shape")
    f = sub.add_parser("first-call", help="a new shape's first calls, the first profiled",
                       formatter_class=bm.DefaultsHelp)
    _shape_args(f)
    f.add_argument("--system", default="dlcb-dynamic", choices=bm.SYSTEMS)
    f.add_argument("--top", type=int, default=15, help="host operators kept per shape")
    a = ap.parse_args(argv)
    fmt = dict(index=False, float_format=lambda v: f"{v:.4g}")
    if a.scenario == "list":
        for name, s in SCENARIOS.items():
            rows = f" ({', '.join(s.metrics)})" if s.metrics else ""
            print(f"{name:18} {s.command}\n{'':18} {s.measures}{rows}")
        return 0
    try:
        if a.scenario == "kernels":
            df = kernels(a.model, bm._names(a.systems, ()), reps=a.reps, warmup=a.warmup,
                         **_shape_kw(a))
            _save(a.out, a, {"kernels": df})
            print(side_by_side(df, a.top).to_string(**fmt))
        else:
            times, ops = first_call(a.model, a.system, top=a.top, **_shape_kw(a))
            _save(a.out, a, {"first_call": times, "first_call_ops": ops})
            print(times.to_string(**fmt))
            print(ops.to_string(**fmt))
    except ValueError as err:
        ap.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
