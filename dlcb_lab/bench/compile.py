"""Compile-time benchmark: cold, warm and a new shape's first call, per phase, for DLCB and
torch.compile; one (model, system) per process with empty caches (``bench.models``' protocol,
run by ``bench.harness``); a table per (model, system) and the compile targets.

    python -m dlcb_lab.bench.compile [--device cuda|cpu] [--models a,b | --zoo] [--systems a,b]
        [--batches 1,8,32] [--text-shapes 1x32,8x128,32x128] [--res 224] [--reps 3] [--warmup 1]
        [--no-warm] [--tiny] [--timeout 300] [--budget S] [--retry-failed] [--out DIR]
        [--markdown]
    dlcb-lab compile ...            the same

Defaults: the nine models of ``models.DEFAULT_MODELS``; systems ``SYSTEMS`` (``dlcb-dynamic``,
plain ``torch.compile(m)`` and ``torch.compile(m, mode="reduce-overhead")``, the last left out
on the CPU: it needs CUDA graphs); ``--warm`` on (each cell again in a new process over the first
one's caches); images at batch 1, 8, 32 at 224x224 on cuda, 64x64 on cpu (``--res``), text
1x32, 8x128, 32x128; 3 timed calls after 1 warm-up (only the compile and the first calls
matter); ``--zoo``: every ``zoo.MODELS`` model instead (the CPU run). ``--tiny``: tiny
transformers, images at batch 1 and 2, text 1x8 and 2x16, 2 timed calls (a smoke test).
One cell runs at a time (``workers=1``: a compile is host work, and two at once would share the
host's cores).

Output: ``models.csv`` and ``env.json`` in ``--out`` (default ``data/compile/<device>``), as
``python -m dlcb_lab.bench.models`` writes them (its docstring documents every metric). The
folder is resumable: the same command again measures only the cells it lacks (another
configuration is refused), so a run longer than a time limit is the same command repeated;
``--budget S`` starts no cell after the first that, by the slowest cell of its system so far in
this process, would end past S seconds (exit status 3: cells left, run it again). A sweep stopped by SIGTERM
(``timeout``) kills its cell process first and keeps the cells it finished.

``compile_table(df, device)``: ``Tables(table, targets)``. ``table``: one row per (model,
system, res): ``compile_s`` (cold: setup to first result at the first shape, fresh caches),
``warm_compile_s`` (the same in a new process over the first one's caches),
``new_shape_first_call_ms`` (the worst first call at a later shape, the system's recompile
included), ``recompiles`` (after the first shape), the first shape's phases in seconds (DLCB:
``capture_s``, ``lower_s``, ``generalize_s``, ``passes_s``, ``kgen_s``, ``hostgen_s``,
``build_s``; torch.compile: ``dynamo_s``, ``aot_s``, ``inductor_s``) and ``first_call_s`` (the
first call after the setup), ``error`` (the cell's first). ``targets``: ``TARGETS[device]``
measured on that table (DLCB dynamic; ratios over the torch.compile systems of the same run):
``target``, ``measured``, ``op``, ``bound``, ``met`` (NA without rows), ``detail`` (the model that
sets the value).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from . import harness
from . import models as bm

if TYPE_CHECKING:
    import pandas as pd

SYSTEMS = ("dlcb-dynamic", "torch.compile", "torch.compile-cudagraphs")
DLCB = "dlcb-dynamic"
COMPILE = dict(batches=(1, 8, 32), text_shapes=((1, 32), (8, 128), (32, 128)), reps=3, warmup=1)
"""Shapes and timing of a compile run (``TINY_COMPILE`` with ``--tiny``)."""
TINY_COMPILE = dict(batches=(1, 2), text_shapes=((1, 8), (2, 16)), reps=2, warmup=1)
RES = {"cuda": 224, "cpu": 64}
"""Default image side per device."""
DLCB_PHASES = ("capture", "lower", "generalize", "passes", "kgen", "hostgen", "build")
TORCH_PHASES = tuple(bm.TORCH_PHASES)
BUDGET_EXIT = 3

TARGETS = {
    "cuda": (("cold compile: median (s)", "median", "<=", 0.8),
             ("cold compile: worst model (s)", "worst", "<=", 3.0),
             ("cold compile: {system} / DLCB, worst model (x)", "ratio", ">=", 10.0),
             ("recompiles: total over models", "recompiles", "<=", 0),
             ("warm compile: median (s)", "warm", "<=", 0.2),
             ("new shape: worst first call (ms)", "first_call", "<=", 20.0),
             ("cells without a cold compile", "failed", "<=", 0)),
    "cpu": (("cold compile: resnet18 at 64x64 (s)", "resnet18@64", "<=", 1.0),
            ("cold compile: mobilenet_v3_large (s)", "mobilenet_v3_large", "<=", 2.0),
            ("cold compile: worst model (s)", "worst", "<=", 5.0),
            ("cold compile: {system} / DLCB, worst model (x)", "ratio", ">=", 10.0),
            ("cells without a cold compile", "failed", "<=", 0)),
}
"""Per device: (target, what is measured, op, bound) of DLCB dynamic. ``ratio``: one row per
torch.compile system of the run (cold compile_s over DLCB's, the smallest over the models both
compiled); ``failed``: DLCB cells whose first shape has no compile_s."""


class Tables(NamedTuple):
    table: "pd.DataFrame"
    targets: "pd.DataFrame"


def default_systems(device: str) -> tuple[str, ...]:
    """``SYSTEMS`` less those ``device`` cannot run (CUDA-only on the CPU)."""
    return tuple(s for s in SYSTEMS if not bm.skip_reason(s, device))


# --- the table -----------------------------------------------------------------------------------

def _shape_key(df: "pd.DataFrame") -> "pd.Series":
    import pandas as pd

    if df.empty:
        return pd.Series([], index=df.index, dtype=str)
    return df[["batch", "seq", "res"]].astype("Int64").fillna(-1).astype(str).agg(
        "x".join, axis=1)


def compile_table(df: "pd.DataFrame", device: str = "cuda", dlcb: str = DLCB) -> Tables:
    """The long-form rows of a run (``models.COLUMNS``) as one row per (model, system, res) and
    the targets of ``device`` ("cuda" or "cpu") on it (module doc)."""
    import pandas as pd

    err = df["error"].astype(object)   # read back from a CSV without errors: all NaN
    df = df.assign(error=err.where(err.notna(), "").astype(str), _shape=_shape_key(df))
    rows = []
    for (model, system, res), cell in df.groupby(["model", "system", "res"], sort=False,
                                                 dropna=False):   # text: res NA, one cell
        cold = cell[(cell.metric == "compile_s") & cell.value.notna()]
        at_first = cell[cell._shape.isin(cold._shape.iloc[:1])]   # the shape that compiled

        def one(metric: str) -> float:
            v = at_first[(at_first.metric == metric) & at_first.value.notna()].value
            return float(v.iloc[0]) if len(v) else math.nan

        later = set(cell[cell.metric == "recompile_s"]._shape)   # the later shapes that ran
        fc = cell[(cell.metric == "first_call_ms") & cell._shape.isin(later)].value.dropna()
        rc = cell[cell.metric == "recompiles"].value.dropna()
        errs = [e for e in cell.error if e]
        row: dict[str, Any] = dict(
            model=model, system=system, res=res, compile_s=one("compile_s"),
            warm_compile_s=one("warm_compile_s"),
            new_shape_first_call_ms=fc.max() if len(fc) else math.nan,
            recompiles=rc.max() if len(rc) else math.nan)   # cumulative: the last cell's
        for m in dict.fromkeys(at_first.metric):
            if m.startswith("phase_") and m.endswith("_s"):
                row[m[len("phase_"):]] = one(m)
        row["first_call_s"] = one("first_call_ms") / 1e3
        row["error"] = " ".join(errs[0].split())[:160] if errs else ""
        rows.append(row)
    cols = ["model", "system", "res", "compile_s", "warm_compile_s", "new_shape_first_call_ms",
            "recompiles", *[f"{p}_s" for p in DLCB_PHASES], "first_call_s"]
    extra = [f"{p}_s" for p in TORCH_PHASES] + sorted(
        {k for r in rows for k in r} - set(cols) - {f"{p}_s" for p in TORCH_PHASES} - {"error"})
    table = pd.DataFrame(rows, columns=[*cols, *[c for c in extra if any(c in r for r in rows)],
                                        "error"])
    table = table.astype({"res": "Int64"})
    return Tables(table, targets(table, device, dlcb))


def targets(table: "pd.DataFrame", device: str = "cuda", dlcb: str = DLCB) -> "pd.DataFrame":
    """``TARGETS[device]`` measured on ``compile_table``'s table: target, measured, op, bound,
    met (boolean; NA where nothing was measured), detail (the model that sets the value)."""
    import pandas as pd

    if device not in TARGETS:
        raise ValueError(f"device {device!r}: one of {', '.join(TARGETS)}")
    d = table[table.system == dlcb]
    cold = d.set_index("model").compile_s.dropna()

    def name(m: str, r: Any) -> str:
        return m if pd.isna(r) else f"{m} {int(r)}px"

    def worst(s: "pd.Series", largest: bool = True) -> tuple[float, str]:
        s = s.dropna()
        if s.empty:
            return math.nan, ""
        k = s.idxmax() if largest else s.idxmin()
        return float(s[k]), str(k)

    def by_model(m: str, res: int | None = None) -> tuple[float, str]:
        got = d[(d.model == m) & (True if res is None else d.res == res)].dropna(
            subset=["compile_s"])
        if got.empty:
            return math.nan, ""
        r = got.iloc[0]
        return float(r.compile_s), name(r.model, r.res)

    out = []
    for label, what, op, bound in TARGETS[device]:
        if what == "ratio":
            torch_systems = [s for s in dict.fromkeys(table.system)
                             if s.startswith("torch.compile") and table[table.system == s]
                             .compile_s.notna().any()] or ["torch.compile"]
            for s in torch_systems:
                other = table[table.system == s].set_index("model").compile_s.dropna()
                both = other.index.intersection(cold.index)
                v, where = worst(other[both] / cold[both], largest=False)
                out.append((label.format(system=s), v, op, bound, where))
            continue
        if what == "median":
            v, where = (float(cold.median()) if len(cold) else math.nan), f"{len(cold)} models"
        elif what == "worst":
            v, where = worst(cold)
        elif what == "warm":
            w = d.warm_compile_s.dropna()
            v, where = (float(w.median()) if len(w) else math.nan), f"{len(w)} models"
        elif what == "first_call":
            v, where = worst(d.set_index("model").new_shape_first_call_ms)
        elif what == "recompiles":
            rc = d.recompiles.dropna()
            v, where = (float(rc.sum()) if len(rc) else math.nan), \
                ", ".join(d[d.recompiles > 0].model)
        elif what == "failed":
            bad = d[d.compile_s.isna()]
            v, where = (float(len(bad)) if len(d) else math.nan), ", ".join(bad.model)
        elif "@" in what:
            m, r = what.split("@")
            v, where = by_model(m, int(r))
        else:
            v, where = by_model(what)
        out.append((label, v, op, bound, where))
    t = pd.DataFrame(out, columns=["target", "measured", "op", "bound", "detail"])
    met = [(m >= b if op == ">=" else m <= b) if not pd.isna(m) else pd.NA
           for m, op, b in zip(t.measured, t.op, t.bound)]
    t.insert(4, "met", pd.array(met, dtype="boolean"))
    return t


def report(tables: Tables, markdown: bool = False) -> str:
    """The console form: the table, then the targets with met / missed / no data."""
    import pandas as pd

    from . import zoo

    def fmt(t: "pd.DataFrame") -> str:
        return zoo.to_markdown(t) if markdown else \
            t.to_string(index=False, float_format=lambda v: f"{v:.4g}")

    tg = tables.targets.assign(met=[("no data" if m is pd.NA else "met" if m else "missed")
                                    for m in _objects(tables.targets.met)])
    return ("cold / warm compile (s), a new shape's worst first call (ms), recompiles, first "
            "shape's phases (s)\n" + fmt(tables.table) + "\n\ntargets (DLCB dynamic)\n"
            + fmt(tg))


def _objects(col: "pd.Series") -> list[Any]:
    import pandas as pd

    return [pd.NA if pd.isna(v) else bool(v) for v in col]


# --- data ----------------------------------------------------------------------------------------

class Run(NamedTuple):
    name: str
    df: "pd.DataFrame"
    device: str
    env: dict


def load_runs(root: str | Path = "data/compile") -> list[Run]:
    """Every compile run under ``root``: ``<dir>/models.csv`` beside ``<dir>/env.json`` (this
    command's folders) and ``<name>.csv`` beside ``<name>.env.json``; the device from the
    environment's configuration (no environment: cuda if it names a GPU, else cpu)."""
    import pandas as pd

    root = Path(root)
    found = [(p.parent.name, p, p.parent / "env.json") for p in sorted(root.glob("*/models.csv"))]
    found += [(p.stem, p, p.with_suffix(".env.json")) for p in sorted(root.glob("*.csv"))]
    runs = []
    for name, csv, envf in found:
        env = json.loads(envf.read_text()) if envf.exists() else {}
        device = (env.get("config") or {}).get("device") or ("cuda" if env.get("gpu") else "cpu")
        df = pd.read_csv(csv, dtype={"error": str}).fillna({"error": ""})
        runs.append(Run(name, df, "cuda" if device.startswith("cuda") else "cpu", env))
    return runs


# --- the run -------------------------------------------------------------------------------------

def measure(models: Sequence[str], systems: Sequence[str], device: str, out: str | Path,
            res: int | None = None, batches: Sequence[int] | None = None,
            text_shapes: Sequence[tuple[int, int]] | None = None, reps: int | None = None,
            warmup: int | None = None, warm: bool = True, tiny: bool = False,
            timeout: float = 300.0, budget: float | None = None, retry_failed: bool = False,
            log=None) -> tuple["pd.DataFrame", int]:
    """The cells of ``models`` x ``systems`` not yet in ``out`` (``harness.run``, one cell at a
    time), within ``budget`` seconds if given; (every row of ``out``'s models.csv, the number of
    planned cells left unmeasured)."""
    import pandas as pd

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    d = TINY_COMPILE if tiny else COMPILE
    res = res or (bm.TINY_RES if tiny else RES["cuda" if device.startswith("cuda") else "cpu"])
    kw = dict(batches=tuple(batches or d["batches"]),
              text_shapes=tuple(map(tuple, text_shapes or d["text_shapes"])),
              reps=d["reps"] if reps is None else reps,
              warmup=d["warmup"] if warmup is None else warmup,
              seqs=bm.shape_defaults(tiny, seqs=None)["seqs"], device=device, tiny=tiny,
              warm=warm, timeout=timeout, retry_failed=retry_failed, workers=1, progress=False,
              log=log)
    harness._check_names(models, systems)
    if device.startswith("cuda") and not __import__("torch").cuda.is_available():
        raise ValueError("device cuda but torch sees no CUDA device")
    cfg = bm.Config(device=device, batches=kw["batches"], seqs=tuple(kw["seqs"]),
                    text_shapes=kw["text_shapes"], tiny=tiny, reps=kw["reps"],
                    warmup=kw["warmup"], warm=warm)
    folder = Path(out)
    cells = harness.plan(models, systems, (res,), cfg)
    done = harness._resume(folder, cfg, retry_failed) if folder.exists() else {}
    todo = [c for c in cells if c not in done]
    spent: dict[str, float] = {}
    t0, left = time.monotonic(), 0
    for i, c in enumerate(todo):
        guess = spent.get(c.system, max(spent.values(), default=0.0))
        if budget is not None and i and time.monotonic() - t0 + guess > budget:
            left = len(todo) - i
            log(f"budget of {budget:g} s: {left} of {len(cells)} cells left; run the same "
                f"command again")
            break
        t = time.monotonic()
        harness.run(models=[c.model], systems=[c.system], resolutions=(c.res or res,),
                    out=folder, **kw)
        spent[c.system] = max(spent.get(c.system, 0.0), time.monotonic() - t)
        log(f"{c}: {time.monotonic() - t:.0f} s ({i + 1} of {len(todo)})")
    folder.mkdir(parents=True, exist_ok=True)
    env = bm.environment(cfg, list(models), list(systems))
    env["compile"] = dict(res=res, budget=budget, cells_left=left)
    (folder / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    csv = folder / "models.csv"
    if todo and csv.exists():   # cell by cell, each call put its cell first: plan order again
        done = harness._resume(folder, cfg, False)
        harness._write(csv, [r for c in harness._order(done, cells) for r in done[c]])
    df = pd.read_csv(csv, dtype={"error": str}).fillna({"error": ""}) if csv.exists() else \
        bm.frame([])
    return df, left


def add_args(ap: argparse.ArgumentParser) -> None:
    """The options of ``python -m dlcb_lab.bench.compile`` and ``dlcb-lab compile``."""
    ap.formatter_class = bm.DefaultsHelp
    c, t = COMPILE, TINY_COMPILE
    pairs = lambda v: ",".join(f"{b}x{s}" for b, s in v)   # noqa: E731
    ap.add_argument("--models", help=f"comma-separated: zoo.MODELS names, bert, gpt2 (default: "
                                     f"{', '.join(bm.DEFAULT_MODELS)})")
    ap.add_argument("--zoo", action="store_true", help="every zoo.MODELS model (the CPU run)")
    ap.add_argument("--systems", help=f"comma-separated, of models.SYSTEMS (default: "
                                      f"{', '.join(SYSTEMS)}; on cpu the CUDA-only ones left out)")
    ap.add_argument("--device", choices=["cuda", "cpu"],
                    help="(default: cuda if torch sees a GPU, else cpu)")
    ap.add_argument("--batches", help=f"image batches, in run order (default: "
                                      f"{bm._csv(c['batches'])}; --tiny: {bm._csv(t['batches'])})")
    ap.add_argument("--text-shapes", help=f"text BxS, in run order (default: "
                                          f"{pairs(c['text_shapes'])}; --tiny: "
                                          f"{pairs(t['text_shapes'])})")
    ap.add_argument("--res", type=int, help=f"image side (default: {RES['cuda']} on cuda, "
                                            f"{RES['cpu']} on cpu; --tiny: {bm.TINY_RES})")
    ap.add_argument("--reps", type=int, help=f"timed calls per shape (default: {c['reps']}; "
                                             f"--tiny: {t['reps']})")
    ap.add_argument("--warmup", type=int, help=f"untimed calls before them (default: "
                                               f"{c['warmup']}; --tiny: {t['warmup']})")
    ap.add_argument("--no-warm", dest="warm", action="store_false",
                    help="no second process over the first one's caches (default: warm on)")
    ap.add_argument("--tiny", action="store_true", help="a CPU smoke test: tiny transformers, "
                                                        "the --tiny shapes")
    ap.add_argument("--timeout", type=float, default=300.0, help="s per cell process")
    ap.add_argument("--budget", type=float,
                    help="s: start no cell that would end past it (exit status 3 when cells "
                         "are left) (default: none)")
    ap.add_argument("--retry-failed", action="store_true",
                    help="run again the cells whose process crashed or hung")
    ap.add_argument("--out", help="folder: models.csv, env.json (default: data/compile/<device>)")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")


def run_args(a: argparse.Namespace, print_=print) -> int:
    """Measure (``measure``) and print ``report(compile_table(...))``; 3 if ``--budget`` left
    cells."""
    import torch

    from . import zoo

    bm.term_exits()
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    models = list(zoo.MODELS) if a.zoo else bm._names(a.models, bm.DEFAULT_MODELS)
    systems = bm._names(a.systems, default_systems(device))
    out = a.out or f"data/compile/{device}"
    df, left = measure(models, systems, device, out, res=a.res,
                       batches=a.batches and bm._ints(a.batches),
                       text_shapes=bm.text_pairs(a.text_shapes), reps=a.reps, warmup=a.warmup,
                       warm=a.warm, tiny=a.tiny, timeout=a.timeout, budget=a.budget,
                       retry_failed=a.retry_failed)
    print_(f"{out}/models.csv: {len(df)} rows" + (f"; {left} cells left" if left else ""))
    print_(report(compile_table(df, device), a.markdown))
    return BUDGET_EXIT if left else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlcb_lab.bench.compile",
                                 description=__doc__.split("\n\n")[0],
                                 epilog="Metrics: python -c 'import dlcb_lab.bench.models as m; "
                                        "help(m)'; the table and targets: this module's doc.")
    add_args(ap)
    a = ap.parse_args(argv)
    try:
        return run_args(a)
    except ValueError as err:
        ap.error(str(err))
    return 2


if __name__ == "__main__":
    sys.exit(main())
