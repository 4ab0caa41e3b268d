"""Benchmark sweeps: ``bench.models`` cells over models x systems x resolutions, run by a local
pool of processes or by Ray, resumable, gathered into one long-form DataFrame.

    import dlcb_lab as dl
    df = dl.bench.run(models=["resnet18", "bert"], systems=["eager", "dlcb-dynamic"],
                      batches=(1, 8, 32), resolutions=(224,), dtype="float32", out="data/bench/x")
    dlcb-lab bench --models resnet18,bert --systems eager,dlcb-dynamic --out data/bench/x [--ray]
    dlcb-lab bench --device cpu --tiny --models resnet18,squeezenet1_1 --systems eager,dlcb-dynamic

``--tiny`` (``tiny=True``) is a CPU smoke test: 64x64 images at batches 1 and 2, tiny
transformers at sequences 8 and 16, 10 timed calls (``bench.models.TINY``); the two models and
systems above take about a minute on two cores. ``dlcb-lab bench --help`` gives every default.

**Console.** A line for each cell left untimed, saying why (``skipped <cell>: <system> needs
CUDA ...``, ``failed <cell> (k of n shapes): <reason>``; ``bench.models.untimed``), then
``bench.models.report``: each timed cell's min / median / max ms over its calls, and the
speedups over eager.

A **cell** is one (model, system, resolution) (text models: one (model, system) over every
(batch, sequence) shape): one child process with empty caches (``models.run_process``), so a
crash or a hang costs one cell, recorded as ``ms`` rows whose ``error`` says why (a timeout kills
the cell's process group). Inside a cell the shapes run in order, so a system's recompiles show
as ``recompile_s`` (``bench.models`` documents every column and metric).

**Where cells run.** ``workers`` threads each start one cell process at a time: on CUDA one per
GPU (``CUDA_VISIBLE_DEVICES`` names the worker's GPU), on the CPU one per core by default (each
cell then gets ``cpus // workers`` threads). ``ray``: each cell is a Ray task asking for one GPU
(CUDA) or one CPU, on the cluster at that address (``"auto"``: the one this machine belongs to;
``""``: a local instance started here); the task runs the same child process on its node.

**Resume.** With ``out``, every finished cell's rows are written at once (``models.csv``,
atomically) beside ``env.json`` (``models.environment``). A later run with the same ``out``
skips the cells already there, unless their configuration differs (an error: a sweep is one
configuration) or ``retry_failed`` and the cell's process crashed, hung or was not measured.
A sweep stopped from outside (Ctrl-C; SIGTERM, e.g. ``timeout``, under ``dlcb-lab bench``) kills
its running cells' processes first (``models.kill_cells``), so none keeps the GPU busy under the
resumed sweep's timings; the cells it had finished are in ``models.csv``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import torch

from . import models as bm

if TYPE_CHECKING:
    import pandas as pd

PROCESS_FAILURES = ("process exited", "process killed", "ray task failed")
"""``error`` prefixes of a cell whose process did not finish (``retry_failed`` runs it again)."""


@dataclass(frozen=True)
class Cell:
    model: str
    system: str
    res: int | None   # images; None: a text model (its shapes are the config's text shapes)

    def __str__(self) -> str:
        return f"{self.model} {self.system}" + (f" {self.res}px" if self.res else "")


def plan(models: Sequence[str], systems: Sequence[str], resolutions: Sequence[int],
         cfg: bm.Config) -> list[Cell]:
    """The sweep's cells in run order: model outer, then resolution, then system. A model of
    fixed resolution (``zoo.ModelSpec.fixed_res``) gets one resolution, its own."""
    from . import zoo

    out = []
    for m in models:
        if m in bm.TEXT:
            out += [Cell(m, s, None) for s in systems]
            continue
        spec = zoo.MODELS[m]
        for r in dict.fromkeys([spec.native] if spec.fixed_res else resolutions):
            out += [Cell(m, s, int(r)) for s in systems]
    return out


def _key(r: dict[str, Any]) -> Cell:
    return Cell(str(r["model"]), str(r["system"]), None if r["res"] is None else int(r["res"]))


def _failed(rows: Iterable[dict[str, Any]]) -> bool:
    return any(r["metric"] == "ms" and str(r.get("error") or "").startswith(PROCESS_FAILURES)
               for r in rows)


def run(models: Sequence[str] = bm.DEFAULT_MODELS, systems: Sequence[str] = bm.SYSTEMS,
        batches: Sequence[int] | None = None, resolutions: Sequence[int] | None = None,
        seqs: Sequence[int] | None = None, text_shapes: Sequence[tuple[int, int]] | None = None,
        dtype: str = "float32", device: str | None = None, tiny: bool = False,
        reps: int | None = None, warmup: int | None = None, fp32: bool = False,
        paired: bool = False, warm: bool = False, out: str | Path | None = None,
        workers: int | None = None, ray: str | None = None, timeout: float = 3600.0,
        retry_failed: bool = False, progress: bool = True,
        log: Callable[[str], None] | None = None) -> "pd.DataFrame":
    """Measure every cell of ``plan(models, systems, resolutions)`` (see the module doc); the
    rows of the whole sweep (earlier runs' included, with ``out``) as a DataFrame with
    ``bench.models.COLUMNS``, in plan order. ``batches``, ``resolutions``, ``seqs``, ``reps``,
    ``warmup`` left None take ``bench.models.TINY``'s values if ``tiny``, else ``FULL``'s.
    ``log`` gets one line per cell of this run whose shapes went untimed, saying why
    (``bench.models.untimed``); None: printed above the progress bar while it shows."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    d = bm.shape_defaults(tiny, batches=batches, seqs=seqs, res=None if resolutions is None
                          else tuple(resolutions), reps=reps, warmup=warmup)
    resolutions = d.pop("res")
    resolutions = (resolutions,) if isinstance(resolutions, int) else resolutions
    cfg = bm.Config(device=device, batches=tuple(d["batches"]), seqs=tuple(d["seqs"]),
                    text_shapes=None if text_shapes is None else tuple(map(tuple, text_shapes)),
                    tiny=tiny, reps=d["reps"], warmup=d["warmup"], fp32=fp32, dtype=dtype,
                    paired=paired, warm=warm)
    cfg.torch_dtype   # noqa: B018 - validates dtype
    _check_names(models, systems)
    if cfg.cuda and not torch.cuda.is_available():
        raise ValueError("device cuda but torch sees no CUDA device")
    cells = plan(models, systems, resolutions, cfg)
    done: dict[Cell, list[dict[str, Any]]] = {}
    csv = None
    if out is not None:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        csv = folder / "models.csv"
        done = _resume(folder, cfg, retry_failed)
        (folder / "env.json").write_text(json.dumps(
            bm.environment(cfg, list(models), list(systems)), indent=1) + "\n")
    todo = [c for c in cells if c not in done]
    lock = threading.Lock()
    bar = _bar(len(cells), len(cells) - len(todo), progress)
    note = log or (bar.write if progress else None)

    def finished(cell: Cell, rows: list[dict[str, Any]]) -> None:
        with lock:
            done[cell] = rows
            if csv is not None:
                _write(csv, [r for c in _order(done, cells) for r in done[c]])
            why = bm.untimed(str(cell), rows)
            if why and note:
                note(why)
            bar.set_postfix_str(str(cell), refresh=False)
            bar.update(1)

    try:
        runs = _ray_cells(todo, cfg, timeout, ray) if ray is not None else \
            _pool_cells(todo, cfg, timeout, workers)
        for cell, rows in runs:
            finished(cell, rows)
    finally:
        bar.close()
    return bm.frame([r for c in _order(done, cells) for r in done[c]])


def _check_names(models: Sequence[str], systems: Sequence[str]) -> None:
    from . import zoo

    unknown = [m for m in models if m not in zoo.MODELS and m not in bm.TEXT]
    if unknown:
        raise ValueError(f"unknown models {unknown}: zoo.MODELS names or {', '.join(bm.TEXT)}")
    unknown = [s for s in systems if s not in bm.SYSTEMS]
    if unknown:
        raise ValueError(f"unknown systems {unknown}; choose from {', '.join(bm.SYSTEMS)}")


def _order(done: dict[Cell, list], cells: Sequence[Cell]) -> list[Cell]:
    """Planned cells first (plan order), then earlier runs' others (as found)."""
    planned = [c for c in cells if c in done]
    return planned + [c for c in done if c not in set(planned)]


def _resume(folder: Path, cfg: bm.Config, retry_failed: bool) -> dict[Cell, list[dict]]:
    """The cells ``folder`` already holds, by cell; a configuration other than ``cfg`` is an
    error; with ``retry_failed``, cells whose process failed are left out (run again)."""
    import pandas as pd

    csv, env = folder / "models.csv", folder / "env.json"
    if not csv.exists():
        return {}
    if env.exists():
        old = json.loads(env.read_text()).get("config")
        if old is not None and bm.Config.from_dict(old) != cfg:
            diff = {k: (v, getattr(cfg, k)) for k, v in bm.Config.from_dict(old).__dict__.items()
                    if getattr(cfg, k) != v}
            raise ValueError(f"{folder} holds a sweep of another configuration (saved, now: "
                             f"{diff}): use another out folder")
    df = pd.read_csv(csv, dtype={"error": str}).fillna({"error": ""})
    cells: dict[Cell, list[dict]] = {}
    for r in df.to_dict("records"):
        r.update({k: None if pd.isna(r[k]) else int(r[k]) for k in ("batch", "seq", "res")})
        cells.setdefault(_key(r), []).append(r)
    if retry_failed:
        cells = {c: rows for c, rows in cells.items() if not _failed(rows)}
    return cells


def _write(csv: Path, rows: list[dict[str, Any]]) -> None:
    tmp = csv.with_name(csv.name + ".tmp")
    bm.frame(rows).to_csv(tmp, index=False)
    os.replace(tmp, csv)   # a reader (or a killed sweep) never sees half a file


def _bar(total: int, initial: int, on: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="cell", disable=not on, dynamic_ncols=True)


# --- where cells run -----------------------------------------------------------------------------

def _in_place(cell: Cell, cfg: bm.Config) -> list[dict[str, Any]] | None:
    """A skipped cell's rows (no process needed), else None."""
    if bm.skip_reason(cell.system, cfg.device):
        return bm.run_one(cell.model, cell.system, replace(cfg, res=cell.res))
    return None


def _pool_cells(cells: Sequence[Cell], cfg: bm.Config, timeout: float, workers: int | None
                ) -> Iterator[tuple[Cell, list[dict[str, Any]]]]:
    """Cells on ``workers`` local slots, one child process each, as they finish."""
    if cfg.cuda:
        slots = workers or torch.cuda.device_count()
        envs = [{"CUDA_VISIBLE_DEVICES": str(i % torch.cuda.device_count())}
                for i in range(slots)]
    else:
        slots = workers or os.cpu_count() or 1
        per = str(max(1, (os.cpu_count() or 1) // slots))
        envs = [{} if slots == 1 else {"OMP_NUM_THREADS": per, "NUMBA_NUM_THREADS": per}
                for _ in range(slots)]
    free = list(range(slots))
    lock = threading.Lock()
    stop = threading.Event()

    def one(cell: Cell) -> list[dict[str, Any]]:
        if stop.is_set():
            return []
        with lock:
            slot = free.pop()
        try:
            return bm.run_process(cell.model, cell.system, replace(cfg, res=cell.res), timeout,
                                  envs[slot])
        finally:
            with lock:
                free.append(slot)

    pending = []
    for cell in cells:
        rows = _in_place(cell, cfg)
        if rows is not None:
            yield cell, rows
        else:
            pending.append(cell)
    with ThreadPoolExecutor(slots, thread_name_prefix="dlcb-bench") as pool:
        futs = {pool.submit(one, c): c for c in pending}
        try:
            while futs:
                ready, _ = wait(futs, return_when=FIRST_COMPLETED)
                for f in ready:
                    yield futs.pop(f), f.result()
        except BaseException:   # stopped from outside: no cell process outlives the sweep
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            while bm.kill_cells() or not all(f.done() for f in futs):
                time.sleep(0.05)   # again until none runs: a slot may start one before stop
            raise


def _ray_cells(cells: Sequence[Cell], cfg: bm.Config, timeout: float, address: str
               ) -> Iterator[tuple[Cell, list[dict[str, Any]]]]:
    """Cells as Ray tasks (one GPU or one CPU each) on the cluster at ``address`` ("": a local
    instance), as they finish; a task Ray could not run gives the cell's error rows."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    task = ray.remote(num_gpus=1 if cfg.cuda else 0, num_cpus=1, max_retries=0)(bm.run_process)
    try:
        refs = {}
        for cell in cells:
            rows = _in_place(cell, cfg)
            if rows is not None:
                yield cell, rows
            else:
                c = replace(cfg, res=cell.res)
                refs[task.remote(cell.model, cell.system, c, timeout)] = (cell, c)
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            cell, c = refs.pop(ready[0])
            try:
                rows = ray.get(ready[0])
            except Exception as err:   # noqa: BLE001 - a lost node or worker: this cell only
                why = f"ray task failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}"
                rows = [bm._row(cell.model, cell.system, s, "ms", None, why)
                        for s in c.shapes(cell.model)]
            yield cell, rows
    finally:
        if started:
            ray.shutdown()


def main_args(ap) -> None:
    """The ``dlcb-lab bench`` options (``cli``); every help line ends with its default
    (``bench.models.DefaultsHelp``)."""
    ap.formatter_class = bm.DefaultsHelp
    bm.config_args(ap)
    ap.add_argument("--res", help=f"image sides, comma-separated (default: {bm.FULL['res']}; "
                                  f"--tiny: {bm.TINY['res']})")
    ap.add_argument("--out", default="data/bench/sweep", help="folder: models.csv, env.json")
    ap.add_argument("--workers", type=int,
                    help="local slots (default: one per GPU, or one per CPU core)")
    ap.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                    help="cells as Ray tasks on the cluster at ADDRESS; no ADDRESS: a local "
                         "instance (default: off, local processes)")
    ap.add_argument("--retry-failed", action="store_true",
                    help="run again the cells whose process crashed or hung")


def main(a, log: Callable[[str], None] = print) -> int:
    """``dlcb-lab bench``: the sweep (a line for each cell left untimed, and why), then the
    spread of each cell's times and the speedups (``bench.models.report``)."""
    bm.term_exits()
    ints = lambda s: s and bm._ints(s)   # noqa: E731 - None stays None: the default
    df = run(models=bm._names(a.models, bm.DEFAULT_MODELS),
             systems=bm._names(a.systems, bm.SYSTEMS), batches=ints(a.batches),
             resolutions=ints(a.res), seqs=ints(a.seqs), text_shapes=bm.text_pairs(a.text_shapes),
             dtype=a.dtype, device=a.device, tiny=a.tiny, reps=a.reps, warmup=a.warmup,
             fp32=a.fp32, paired=a.paired, warm=a.warm, out=a.out, workers=a.workers, ray=a.ray,
             timeout=a.timeout, retry_failed=a.retry_failed)
    log(f"{a.out}/models.csv: {len(df)} rows, {df[df.metric == 'ms'].value.notna().sum()} "
        f"timed cells of {int((df.metric == 'ms').sum())}")
    log(bm.report(df, a.markdown))
    return 0


__all__ = ["Cell", "plan", "run", "PROCESS_FAILURES"]
