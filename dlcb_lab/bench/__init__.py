"""Benchmarks (results are pandas DataFrames): ``run`` is the sweep harness
(``bench.harness.run``); ``models``, ``zoo``, ``graphs``, ``bandwidth``, ``overhead`` the
single benchmarks; ``compile`` the compile-time run (cold, warm, a new shape's first call, per
phase) and its targets; ``scenarios`` names every measurement method with its command and runs the
per-kernel and first-call profiles."""


def __getattr__(name: str):
    if name == "run":   # loaded on first use: the harness imports torch, pandas and the models
        from .harness import run

        return run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
