"""The paper's figures from ``bench.models`` long-form results (matplotlib, loaded on use).

    fig2(df)       throughput: speedup over eager per image model, one panel per batch size
    fig2_text(df)  the transformers: speedup over eager per (batch, sequence), one panel a model
    fig3(df)       compile time: cold compile per model and system (log scale), the recompile a
                   new shape costs, and DLCB's compile phases stacked
    write(df, out) all of them as PNG and SVG under ``out`` (``dlcb-lab figures``)
    targets(df)    Stage 4's latency, compile and memory targets against the rows (a table)

Paper, §5: DLCB static 1.10x and dynamic 0.92x eager in geomean over the TorchVision zoo (Fig. 2);
compile time median 0.84 s against torch.compile's 9.4 s (Fig. 3). Those are drawn as reference
lines. ``load(paths)`` concatenates CSVs (a later file's cell replaces an earlier one's).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from .models import SYSTEMS, TEXT

if TYPE_CHECKING:
    import pandas as pd

PAPER_SPEEDUP = {"dlcb-static": 1.10, "dlcb-dynamic": 0.92}
PAPER_COMPILE_S = {"DLCB (paper)": 0.84, "torch.compile (paper)": 9.4}
COLORS = {"eager-cudagraph": "#9e9e9e", "torch.compile": "#5c6bc0",
          "torch.compile-static": "#90caf9",
          "torch.compile-dynamic": "#42a5f5", "torch.compile-cudagraphs": "#1565c0",
          "dlcb-static": "#ffb74d", "dlcb-dynamic": "#e65100"}
CELL = ["model", "system", "batch", "seq", "res"]


def load(paths: Iterable[str | Path]) -> "pd.DataFrame":
    """The rows of the CSVs; where two files hold the same (model, system, shape, metric), the
    later file's row."""
    import pandas as pd

    frames = [pd.read_csv(p, dtype={"error": str}).fillna({"error": ""}) for p in paths]
    if not frames:
        raise ValueError("no results: give one or more models.csv files")
    df = pd.concat(frames, ignore_index=True)
    return df.drop_duplicates(CELL + ["metric"], keep="last").reset_index(drop=True)


def speedups(df: "pd.DataFrame") -> "pd.DataFrame":
    """``eager ms / system ms`` per (model, batch, seq, res) and system (long form: columns
    model, batch, seq, res, system, speedup)."""
    ms = df[(df.metric == "ms") & df.value.notna()]
    keys = ["model", "batch", "seq", "res"]
    eager = ms[ms.system == "eager"].set_index(keys).value.rename("eager")
    other = ms[ms.system != "eager"].join(eager, on=keys)
    other = other.assign(speedup=other.eager / other.value)
    return other.dropna(subset=["speedup"])[keys + ["system", "speedup"]]


def _geomean(xs) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def _systems(present: Iterable[str]) -> list[str]:
    present = set(present)
    return [s for s in SYSTEMS if s in present and s != "eager"]


def _plt():
    import matplotlib.pyplot as plt   # headless: matplotlib falls back to Agg by itself

    return plt


def _log_y(ax, unit: str) -> None:
    """A log y axis labelled in plain numbers (``2x``, ``0.5 s``); minor ticks at 2 and 5."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}{unit}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(
        lambda v, _: f"{v:g}{unit}" if f"{v:.0e}"[0] in "25" else ""))
    ax.tick_params(axis="y", which="minor", labelsize=7)


def _bars(ax, groups: Sequence[str], systems: Sequence[str], value) -> None:
    """Grouped bars: one group per ``groups`` label, one bar per system (``value(group,
    system)``, NaN: no bar)."""
    width = 0.8 / max(1, len(systems))
    for j, s in enumerate(systems):
        xs = [i + (j - (len(systems) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(xs, [value(g, s) for g in groups], width, label=s, color=COLORS.get(s))
    ax.set_xticks(range(len(groups)), groups, rotation=35, ha="right", fontsize=8)


def fig2(df: "pd.DataFrame"):
    """Speedup over eager per image model, one panel per batch size; the geomean of each system
    in the legend, the paper's DLCB static and dynamic geomeans as dashed lines."""
    plt = _plt()
    sp = speedups(df)
    sp = sp[~sp.model.isin(TEXT)]
    if sp.empty:
        raise ValueError("no image-model rows with eager and another system timed")
    batches = sorted(sp.batch.dropna().unique())
    systems = _systems(sp.system)
    models = list(dict.fromkeys(sp.model))
    panel = max(4.2, 0.3 * len(models))   # inches: about a third of one per model group
    fig, axes = plt.subplots(1, len(batches), figsize=(panel * len(batches) + 1, 4.2),
                             squeeze=False, sharey=True)
    for ax, b in zip(axes[0], batches):
        at = sp[sp.batch == b].set_index(["model", "system"]).speedup
        _bars(ax, models, systems, lambda m, s: at.get((m, s), math.nan))
        for s in systems:
            g = _geomean(at.xs(s, level="system")) if s in at.index.get_level_values(1) \
                else math.nan
            if not math.isnan(g):
                ax.axhline(g, color=COLORS.get(s), lw=1, ls=":")
        for s, v in PAPER_SPEEDUP.items():
            ax.axhline(v, color=COLORS[s], lw=1, ls="--")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_title(f"batch {int(b)}")
        _log_y(ax, "x")
    axes[0][0].set_ylabel("speedup over eager (log)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    geo = {s: _geomean(sp[sp.system == s].speedup) for s in systems}
    labels = [f"{s} (geomean {geo[s]:.2f}x)" for s in labels]
    fig.legend(handles, labels, loc="upper center", ncol=min(3, len(labels)), fontsize=8,
               frameon=False)
    fig.text(0.99, 0.01, "dashed: paper's DLCB static 1.10x, dynamic 0.92x; dotted: geomean",
             ha="right", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 0.88))
    return fig


def fig2_text(df: "pd.DataFrame"):
    """The transformers: speedup over eager per (batch x sequence), one panel per model (one
    DLCB compile serves every shape)."""
    plt = _plt()
    sp = speedups(df)
    sp = sp[sp.model.isin(TEXT)]
    if sp.empty:
        raise ValueError("no transformer rows with eager and another system timed")
    models = list(dict.fromkeys(sp.model))
    systems = _systems(sp.system)
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models) + 1, 4.2), squeeze=False)
    for ax, m in zip(axes[0], models):
        d = sp[sp.model == m]
        shapes = list(dict.fromkeys(f"{int(b)}x{int(s)}" for b, s in zip(d.batch, d.seq)))
        at = {(f"{int(b)}x{int(q)}", s): v for b, q, s, v in
              zip(d.batch, d.seq, d.system, d.speedup)}
        _bars(ax, shapes, systems, lambda g, s: at.get((g, s), math.nan))
        ax.axhline(1.0, color="black", lw=0.8)
        _log_y(ax, "x")
        ax.set_title(m)
        ax.set_xlabel("batch x sequence")
    axes[0][0].set_ylabel("speedup over eager (log)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(3, len(labels)), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    return fig


def fig3(df: "pd.DataFrame"):
    """Compile time: cold compile per model and system (log), the median recompile at a new
    shape, and DLCB's compile phases stacked per model (from ``phase_<step>_s`` rows)."""
    plt = _plt()
    cold = df[(df.metric == "compile_s") & df.value.notna() & (df.system != "eager")]
    if cold.empty:
        raise ValueError("no compile_s rows of a compiling system")
    systems = [s for s in _systems(cold.system) if s != "eager-cudagraph"]
    models = list(dict.fromkeys(cold.model))
    re = df[(df.metric == "recompile_s") & df.value.notna()]
    phases = df[df.metric.str.startswith("phase_") & (df.system == "dlcb-dynamic")]
    # one panel a row, as wide as the model groups need (about 0.4 inch each)
    fig, axes = plt.subplots(3, 1, figsize=(max(8.0, 0.4 * len(models) + 3), 12))
    at = cold.groupby(["model", "system"]).value.first()
    _bars(axes[0], models, systems, lambda m, s: at.get((m, s), math.nan))
    for (label, v), ls in zip(PAPER_COMPILE_S.items(), ("--", ":")):
        axes[0].axhline(v, color="black", lw=0.8, ls=ls, label=label)
    _log_y(axes[0], " s")
    axes[0].set_ylabel("cold compile (log)")
    axes[0].set_title("first shape: capture to first result")
    axes[0].legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    at = re.groupby(["model", "system"]).value.median()
    _bars(axes[1], models, systems, lambda m, s: at.get((m, s), math.nan))
    _log_y(axes[1], " s")
    axes[1].set_ylabel("recompile (log)")
    axes[1].set_title("a new shape: median recompile (DLCB dynamic: the call)")
    timed = [m for m in models if m in set(phases.model)]   # runs with phase rows
    if timed:
        pm = phases.groupby(["model", "metric"]).value.first()
        bottom = [0.0] * len(timed)
        for st in dict.fromkeys(phases.metric):
            vals = [pm.get((m, st), 0.0) for m in timed]
            axes[2].bar(range(len(timed)), vals, 0.6, bottom=bottom,
                        label=st.removeprefix("phase_").removesuffix("_s"))
            bottom = [a + b for a, b in zip(bottom, vals)]
        axes[2].set_xticks(range(len(timed)), timed, rotation=35, ha="right", fontsize=8)
        axes[2].legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[2].set_ylabel("s")
    axes[2].set_title("DLCB dynamic: compile phases")
    fig.tight_layout()
    return fig


def write(df: "pd.DataFrame", out: str | Path) -> list[Path]:
    """Every figure ``df`` has rows for, as ``<name>.png`` and ``<name>.svg`` under ``out``;
    the paths written."""
    plt = _plt()
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in (("fig2_throughput", fig2), ("fig2_transformers", fig2_text),
                       ("fig3_compile_time", fig3)):
        try:
            fig = make(df)
        except ValueError:   # no rows for this figure
            continue
        for ext in ("png", "svg"):
            p = folder / f"{name}.{ext}"
            with plt.rc_context({"svg.hashsalt": name}):   # the same data, the same file
                fig.savefig(p, dpi=120, metadata={"Date": None} if ext == "svg" else None)
            written.append(p)
        plt.close(fig)
    return written


def headline(df: "pd.DataFrame") -> "pd.DataFrame":
    """The numbers the figures show, beside the paper's: geomean speedup over eager per system
    (image models, transformers) and median cold compile per system."""
    import pandas as pd

    sp = speedups(df)
    rows = []
    for s in _systems(sp.system):
        d = sp[sp.system == s]
        rows.append(dict(system=s,
                         speedup_images=_geomean(d[~d.model.isin(TEXT)].speedup),
                         speedup_transformers=_geomean(d[d.model.isin(TEXT)].speedup),
                         paper_speedup=PAPER_SPEEDUP.get(s, math.nan)))
    out = pd.DataFrame(rows)
    cold = df[(df.metric == "compile_s") & df.value.notna()].groupby("system").value.median()
    out["median_compile_s"] = out.system.map(cold)
    return out


def targets(df: "pd.DataFrame") -> "pd.DataFrame":
    """Issue 14's targets for DLCB dynamic ("dynamic") measured on ``df`` (image models: speedups
    over eager at every batch; text, the transformers: over every batch x sequence): ``target``,
    ``measured`` (NaN without the rows), ``bound`` and ``met``; a ratio of two systems' geomeans
    over the cells both have times for; memory: the worst model's ratio. Cells of different
    systems in a sweep ran minutes apart, so the dynamic-to-static ratio here is looser than one
    timed alternately in one process."""
    import pandas as pd

    sp = speedups(df)
    img, txt = sp[~sp.model.isin(TEXT)], sp[sp.model.isin(TEXT)]

    def gm(d, system):
        return _geomean(d[d.system == system].speedup)

    def vs(d, system, other):   # over the cells both have a time for
        key = pd.Series([repr(tuple(t)) for t in d[shape].itertuples(index=False)], d.index)
        both = set(key[d.system == system]) & set(key[d.system == other])
        return gm(d[key.isin(both)], system) / gm(d[key.isin(both)], other)

    def cells(metric, system):
        return df[(df.metric == metric) & (df.system == system) & df.value.notna()].value

    ms = df[(df.metric == "ms") & df.value.notna()].set_index(CELL).value
    ratio = (ms.xs("dlcb-dynamic", level="system") / ms.xs("dlcb-static", level="system")
             ).dropna() if {"dlcb-dynamic", "dlcb-static"} <= set(df.system) else pd.Series(dtype=float)
    shape = ["model", "batch", "seq", "res"]
    pm, ps = (df[(df.metric == k) & df.value.notna()].set_index(shape).value
              for k in ("paired_ms", "paired_static_ms"))
    ratio = (pm / ps).dropna().combine_first(ratio)   # timed in turn in one process: these win
    at32 = df[df.metric.isin(["peak_mb", "resident_mb"]) & (df.batch == 32)
              & ~df.model.isin(TEXT)].pivot_table(index="model", columns=["metric", "system"],
                                                  values="value")

    def mem(total: bool) -> float:
        try:
            peak = at32["peak_mb"] + (at32["resident_mb"] if total else 0)
            return (peak["dlcb-dynamic"] / peak["eager"]).max()
        except KeyError:   # no such rows
            return math.nan

    dyn = "dlcb-dynamic"
    later = df[df.metric == "recompile_s"].set_index(CELL).index   # cells at a shape not compiled
    first = df[(df.system == dyn) & (df.metric == "first_call_ms")]
    first = first[first.set_index(CELL).index.isin(later)]
    cold = df[df.metric == "first_call_cold_ms"]   # eager's first call: in DLCB's own process
    cold = cold[cold.system == dyn].set_index(shape).value.combine_first(   # where it has one
        cold[cold.system == "eager"].set_index(shape).value)
    vs_eager = (first.set_index(shape).value / cold).dropna()
    rc = df[(df.metric == "recompiles") & (df.system == dyn) & df.value.notna()]
    recompiles = rc.groupby("model").value.max().sum(min_count=1)   # cumulative per cell
    rows = [
        ("images: dynamic / reduce-overhead (geomean)", vs(img, dyn, "torch.compile-cudagraphs"),
         ">=", 1.0),
        ("images: dynamic over eager (geomean)", gm(img, dyn), ">=", 2.5),
        ("images: slowest dynamic cell over eager",
         img[img.system == dyn].speedup.min(), ">=", 1.0),
        ("images: worst dynamic / static time (cell)", ratio.max(), "<=", 1.05),
        ("text: dynamic / torch.compile dynamic (geomean)", vs(txt, dyn, "torch.compile-dynamic"),
         ">=", 1.0),
        ("text: dynamic / reduce-overhead (geomean)", vs(txt, dyn, "torch.compile-cudagraphs"),
         ">=", 1.0),
        ("new shape: worst first call (ms)", first.value.max(), "<=", 20.0),
        # eager at a shape it has not run builds its cuDNN plans and loads cuBLAS kernels too
        ("new shape: worst first call / eager's first call there", vs_eager.max(), "<=", 1.0),
        ("cold compile: median (s)", cells("compile_s", dyn).median(), "<=", 0.5),
        ("cold compile: worst (s)", cells("compile_s", dyn).max(), "<=", 2.0),
        ("recompiles: total over models", recompiles, "<=", 0),
        # the weights and inputs included (resident_mb), and above them (peak_mb alone: DLCB's
        # own constants, folded and NHWC, and its graph pools against eager's activations)
        ("memory at 32, weights included: dynamic / eager", mem(True), "<=", 1.1),
        ("memory above weights at 32: dynamic / eager", mem(False), "<=", 1.1),
    ]
    out = pd.DataFrame(rows, columns=["target", "measured", "op", "bound"])
    ok = [(m >= b if op == ">=" else m <= b) if not pd.isna(m) else math.nan
          for m, op, b in zip(out.measured, out.op, out.bound)]
    return out.assign(met=pd.array(ok, dtype="boolean"))
