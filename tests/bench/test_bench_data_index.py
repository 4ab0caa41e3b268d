"""``data/`` holds results, indexed: ``data/README.md``'s file table names every file under
``data/`` once (path relative to ``data/``, what it holds, the command, the commit that added
it), names no file that is not there, and ``data/`` holds no scripts."""

from __future__ import annotations

import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "data"
SCRIPTS = (".py", ".sh", ".cu", ".cuh", ".c", ".cpp", ".ipynb")


def _rows() -> list[list[str]]:
    """The cells of each row of the table under ``## Files``."""
    text = (DATA / "README.md").read_text(encoding="utf-8").split("\n## Files\n", 1)[1]
    return [[c.strip() for c in ln.strip().strip("|").split(" | ")]
            for ln in text.splitlines() if ln.startswith("| `")]


def _files() -> set[str]:
    return {p.relative_to(DATA).as_posix() for p in DATA.rglob("*") if p.is_file()}


def _indexed() -> list[str]:
    return [r[0].strip("`") for r in _rows()]


def test_every_file_is_indexed_and_every_row_names_a_file():
    indexed = _indexed()
    assert len(indexed) == len(set(indexed)), "a file indexed twice"
    files = _files()
    assert not files - set(indexed), f"not in data/README.md: {sorted(files - set(indexed))}"
    assert not set(indexed) - files, f"indexed but missing: {sorted(set(indexed) - files)}"


def test_each_row_says_what_how_and_which_commit():
    rows = _rows()
    assert rows
    for r in rows:
        assert len(r) == 4 and all(r), r
        assert re.fullmatch(r"[0-9a-f]{7,40}", r[3]), r


def test_data_holds_no_scripts():
    scripts = sorted(f for f in _files() if f.endswith(SCRIPTS))
    assert not scripts, f"scripts under data/ (a method belongs in dlcb_lab.bench): {scripts}"


FIGURE_INPUTS = {f"bench/{d}/models.csv" for d in (
    "h200_stage4", "h200_stage4b", "text_h200", "zoo_h200", "zoo_h200_c", "zoo_h200_d",
    "zoo_h200_e")}


def test_the_figures_inputs_stay_where_they_are_read():
    """``dlcb-lab figures`` and the notebooks ``05_fig2_throughput``, ``06_fig3_compile_time``
    read ``bench/*/models.csv``: moving one of these sweeps changes the figures."""
    sweeps = {p.relative_to(DATA).as_posix() for p in DATA.glob("bench/*/models.csv")}
    assert sweeps == FIGURE_INPUTS and sweeps <= set(_indexed())
