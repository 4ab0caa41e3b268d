"""One configuration of a compile (``dl.Config``): the switches, each with an environment variable
that gives its default (``SWITCHES``; docs/design.md, "Configuration").

``Config.from_env(**overrides)`` reads the variables when a compile starts (never at import);
``dl.compile(..., config=...)`` takes a mapping of overrides over them or a whole ``Config``
(``resolve``). The compile passes its ``Config`` down (the graph's passes read ``Graph.config``,
the build and each ``records.Kernel`` their own), records it in the ``Pipeline`` and saves it in
an artifact, so a variant compiled later, a loaded artifact and the report use the same switches.

``cache_dir`` is process-wide (the NVRTC and numba caches every compile of the process shares,
which the benchmark harness sets for its child processes): always ``$DLCB_CACHE_DIR`` (else
``~/.cache/dlcb_lab``), read through ``Config`` (``runtime.cache.cache_dir``), recorded, not
overridable per call."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Mapping

from .errors import SpecError

__all__ = ["Config", "Switch", "SWITCHES", "resolve"]


def _graphs(raw: str) -> int:
    try:
        return max(int(raw.strip()), 0)
    except ValueError:
        raise SpecError(f"DLCB_CUDA_GRAPHS={raw!r}: expected a graph count (0 turns replay "
                        f"off)") from None


@dataclass(frozen=True)
class Switch:
    """One field of ``Config``: its environment variable, how a set variable reads, and what the
    switch does."""

    name: str
    env: str
    parse: Callable[[str], Any]
    effect: str


SWITCHES = (
    Switch("cache_dir", "DLCB_CACHE_DIR", str,
           "the kernel cache (cubins, ptxas logs, numba modules); process-wide"),
    Switch("vectorize", "DLCB_VECTORIZE", lambda v: v != "0",
           "False (env 0): no vectorized entry points (_v) are built"),
    Switch("cuda_graphs", "DLCB_CUDA_GRAPHS", _graphs,
           "the CUDA-graph LRU per thunk (graphs); 0: replay off"),
    Switch("numba_parallel", "DLCB_NUMBA_PARALLEL", lambda v: v == "1",
           "True (env 1): numba kernels with parallel=True (about 6x the compile time)"),
    Switch("channels_last", "DLCB_CHANNELS_LAST", lambda v: v != "0",
           "False (env 0): convolutions stay NCHW"),
    Switch("depthwise", "DLCB_DEPTHWISE", lambda v: "library" if v == "library" else "generated",
           "'library': float32 depthwise convolutions through cuDNN, not generated"),
    Switch("numba_workers", "DLCB_NUMBA_WORKERS", int,
           "processes that compile a CPU build's numba kernels at once; 0: the CPUs"),
    Switch("fast_capture", "DLCB_FAST_CAPTURE", lambda v: v != "0",
           "False (env 0): every module is traced by torch.export with symbolic sizes"),
    Switch("capture_cache", "DLCB_CAPTURE_CACHE", lambda v: v != "0",
           "False (env 0): every compile traces (no capture cache, artifact.capture)"),
    Switch("program_cache", "DLCB_PROGRAM_CACHE", lambda v: v != "0",
           "False (env 0): every compile runs the passes, kgen and the build (no program cache, "
           "artifact.program; it needs the capture cache's key)"),
)
_BY_NAME = {s.name: s for s in SWITCHES}
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "vectorize": (lambda v: isinstance(v, bool), "a bool"),
    "cuda_graphs": (lambda v: type(v) is int and v >= 0, "a graph count >= 0"),
    "numba_parallel": (lambda v: isinstance(v, bool), "a bool"),
    "channels_last": (lambda v: isinstance(v, bool), "a bool"),
    "depthwise": (lambda v: v in ("generated", "library"), "'generated' or 'library'"),
    "numba_workers": (lambda v: type(v) is int and v >= 0, "a process count >= 0"),
    "fast_capture": (lambda v: isinstance(v, bool), "a bool"),
    "capture_cache": (lambda v: isinstance(v, bool), "a bool"),
    "program_cache": (lambda v: isinstance(v, bool), "a bool"),
}


def _env(name: str) -> tuple[Any, bool]:
    """Switch ``name`` as the environment sets it, and whether it does (an unset or blank
    variable: the default)."""
    s = _BY_NAME[name]
    raw = os.environ.get(s.env, "")
    return (s.parse(raw), True) if raw.strip() else (DEFAULTS[name], False)


@dataclass(frozen=True)
class Config:
    """The switches of one compile (``SWITCHES``: field, environment variable, effect). Built as
    ``Config(...)``: the built-in defaults but where given; ``Config.from_env(...)``: the
    environment's but where given. ``cache_dir`` is the process's (``$DLCB_CACHE_DIR``), read when
    the config is made. ``sources``: per field, where its value came from (``source``)."""

    cache_dir: str = field(init=False, compare=False)
    vectorize: bool = True
    cuda_graphs: int = 8
    numba_parallel: bool = False
    channels_last: bool = True
    depthwise: str = "generated"
    numba_workers: int = 0
    fast_capture: bool = True
    capture_cache: bool = True
    program_cache: bool = True
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for name, (ok, what) in _CHECKS.items():
            if not ok(getattr(self, name)):
                raise SpecError(f"Config.{name} must be {what}, not {getattr(self, name)!r}")
        root, from_env = _env("cache_dir")
        object.__setattr__(self, "cache_dir", root)
        if from_env and "cache_dir" not in dict(self.sources):
            object.__setattr__(self, "sources", self.sources + (("cache_dir", "env"),))

    @classmethod
    def from_env(cls, **overrides: Any) -> "Config":
        """The environment's switches (an unset variable: the default), ``overrides`` (field ->
        value) over them."""
        bad = sorted(set(overrides) - set(_CHECKS))
        if bad:
            raise SpecError(f"config: no switch {', '.join(map(repr, bad))}" + (
                " (cache_dir is process-wide: set $DLCB_CACHE_DIR)" if "cache_dir" in bad else "")
                + f"; the switches are {', '.join(_CHECKS)}")
        values, sources = {}, []
        for name in _CHECKS:
            value, set_ = _env(name)
            values[name] = overrides.get(name, value)
            if name in overrides or set_:
                sources.append((name, "call" if name in overrides else "env"))
        return cls(**values, sources=tuple(sources))

    def source(self, name: str) -> str:
        """Where field ``name`` came from: ``"call"`` (``dl.compile``'s ``config``), ``"env"`` (its
        environment variable) or ``"default"``."""
        got = dict(self.sources).get(name)
        return got or ("default" if getattr(self, name) == DEFAULTS[name] else "call")

    def rows(self) -> list[tuple[str, Any, Any, str]]:
        """(field, value, default, source) per switch, in ``SWITCHES`` order."""
        return [(s.name, getattr(self, s.name), DEFAULTS[s.name], self.source(s.name))
                for s in SWITCHES]

    def changed(self) -> dict[str, Any]:
        """The switches that differ from their defaults (``cache_dir`` aside), by field."""
        return {n: v for n, v, d, _ in self.rows() if v != d and n != "cache_dir"}


DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(Config) if f.name in _CHECKS}
DEFAULTS["cache_dir"] = "~/.cache/dlcb_lab"


def resolve(config: "Config | Mapping[str, Any] | None") -> Config:
    """The configuration ``dl.compile(..., config=config)`` compiles with: ``None``: the
    environment's (``Config.from_env()``); a mapping: its overrides over the environment's; a
    ``Config``: itself."""
    if config is None:
        return Config.from_env()
    if isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return Config.from_env(**config)
    raise SpecError(f"config must be a dl.Config or a mapping of switches, not "
                    f"{type(config).__name__}")
