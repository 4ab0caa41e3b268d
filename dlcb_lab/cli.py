"""``dlcb-lab``: the command line.

    dlcb-lab bench [options]     a benchmark sweep (``bench.harness``; ``dlcb-lab bench -h``)
    dlcb-lab compile [options]   cold, warm and first-call compile times per phase, DLCB against
                                 torch.compile, and the compile targets (``bench.compile``)
    dlcb-lab figures [CSV ...]   Fig. 2 and Fig. 3 as PNG and SVG, the headline numbers and
                                 Stage 4's targets (``bench.figures``)
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dlcb-lab", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    from .bench import harness

    bench = sub.add_parser("bench", help="a benchmark sweep: models x systems x shapes",
                           description=harness.__doc__.split("\n\n")[0])
    harness.main_args(bench)
    from .bench import compile as bcompile

    comp = sub.add_parser("compile", help="compile times per phase and the compile targets",
                          description=bcompile.__doc__.split("\n\n")[0])
    bcompile.add_args(comp)
    figs = sub.add_parser("figures", help="the paper's figures from benchmark CSVs",
                          formatter_class=harness.bm.DefaultsHelp)
    figs.add_argument("csv", nargs="*", help=f"models.csv files; where two hold the same cell, "
                                             f"the later wins (default: {DEFAULT_DATA}/*/"
                                             "models.csv)")
    figs.add_argument("--out", default="data/figures", help="folder for the PNG and SVG files")
    a = ap.parse_args(argv)
    try:
        if a.command == "compile":
            return bcompile.run_args(a)
        return harness.main(a) if a.command == "bench" else _figures(a)
    except ValueError as err:
        ap.error(str(err))
    return 2


DEFAULT_DATA = "data/bench"


def _figures(a) -> int:
    from pathlib import Path

    from .bench import figures

    paths = a.csv or sorted(Path(DEFAULT_DATA).glob("*/models.csv"))
    df = figures.load(paths)
    for p in figures.write(df, a.out):
        print(p)
    print(figures.headline(df).to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(figures.targets(df).to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
