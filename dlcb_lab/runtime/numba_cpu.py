"""Load generated numba modules from files under the cache folder, so numba's on-disk cache
(``cache=True``) works across processes. Kernels carry explicit signatures and compile at import.

The cache is checked, not trusted. ``cache_dir("numba")/dlcb_<key>.py`` is named by a hash of its
source; on every disk load the file's bytes are compared with the source we were asked to load,
and a missing, truncated, emptied, garbage or edited file is rewritten (atomically: temp file +
``os.replace``) before the import. The module is executed from that verified in-memory source
(no ``.pyc`` is written or read). If the import still fails (typically a corrupt numba index
``.nbi`` or data ``.nbc`` file, which numba unpickles without checking), the module's numba cache
files (``__pycache__/dlcb_<key>.*``, plus their ``$NUMBA_CACHE_DIR`` counterparts) are deleted, the
file is rewritten and the import retried once; a second failure raises
:class:`NumbaModuleLoadError` naming the file. A failed import never leaves its half-initialized
module in ``sys.modules``.
"""

from __future__ import annotations

import importlib.util
import logging
import pathlib
import subprocess
import sys
import threading
from types import ModuleType
from typing import Sequence

from ..errors import BuildError
from .cache import atomic_write, cache_dir, content_key

__all__ = ["NumbaModuleLoadError", "kernel_jit", "load_numba_module"]

_LOADED: dict[str, ModuleType] = {}
_LOCK = threading.RLock()  # one loader at a time per process (numba compiles under a lock anyway)
_log = logging.getLogger(__name__)


class NumbaModuleLoadError(BuildError):
    """A generated numba module failed to import even after its cache entry was rebuilt (a
    ``dl.BuildError``, so a ``RuntimeError``); ``.path`` is the module's file."""

    def __init__(self, msg: str, path: pathlib.Path):
        super().__init__(msg)
        self.path = path

    def __reduce__(self):
        return (type(self), (self.msg, self.path))


_ONLY: frozenset[str] | None = None
"""While a share of a module is compiled (``_compile_share``): the kernels it holds; the others
stay plain Python functions (compiled by another process, loaded from numba's cache later)."""


def kernel_jit(signature: str, *, vectorize: bool = True, **options):
    """The decorator of a generated kernel: ``numba.njit(signature, **options)``.
    ``vectorize=False`` (a kernel with a max reduction) compiles with LLVM's loop vectorizer off:
    vectorizing a loop whose unrolled body chains 13 to 49 NaN-propagating maxima takes LLVM
    (numba 0.68) seconds to hours (14: 5 s; 16 to 40: over 20 s; ``norm(x, -inf)`` of a 5x5
    sample never finished; 50 is not unrolled: 0.2 s). Generated modules load one at a time
    (``_LOCK``), so the switch is theirs while it is off."""
    import numba

    def wrap(fn):
        if _ONLY is not None and fn.__name__ not in _ONLY:
            return fn
        saved = numba.config.LOOP_VECTORIZE
        numba.config.LOOP_VECTORIZE = saved and vectorize
        try:
            return numba.njit(signature, **options)(fn)
        finally:
            numba.config.LOOP_VECTORIZE = saved
    return wrap


def load_numba_module(source: str, kernels: Sequence[tuple[str, int]] = (),
                      workers: int = 1) -> tuple[ModuleType, bool]:
    """Import ``source`` as a module (content-addressed file). Returns (module, newly_loaded).

    ``newly_loaded`` is False when this process already loaded the same source (an in-process memo,
    keyed by the source hash alone); otherwise the module comes from the verified cache file, see
    the module docstring. ``kernels`` (name, source size) and ``workers``: where numba's cache
    lacks them, the kernels are first compiled in ``workers`` shares at once (``_compile_shares``).
    """
    key = content_key(source)[:24]
    with _LOCK:
        mod = _LOADED.get(key)
        if mod is not None:
            return mod, False
        path = (cache_dir("numba") / f"dlcb_{key}.py").absolute()  # numba keys its cache by it
        name = _module_name(path)
        data = source.encode()
        _ensure_file(path, data)
        _compile_shares(path, source, kernels, workers)
        try:
            mod = _exec_module(name, path, source)
        except Exception as first:
            removed = _purge_numba_cache(path)
            _log.warning("numba cache: importing %s failed (%s: %s); deleted %d numba cache "
                         "file(s), retrying", path, type(first).__name__, first, len(removed))
            atomic_write(path, data)
            try:
                mod = _exec_module(name, path, source)
            except Exception as second:
                raise NumbaModuleLoadError(
                    f"cannot load generated numba module {path} (the first attempt raised "
                    f"{type(first).__name__}; the file was then rewritten from its source and "
                    f"{len(removed)} numba cache file(s) deleted before this second attempt): "
                    f"{type(second).__name__}: {second}", path) from second
        _LOADED[key] = mod
        return mod, True


def _ensure_file(path: pathlib.Path, data: bytes) -> None:
    """Make ``path`` hold exactly ``data``: (re)write it atomically if it is missing or differs."""
    try:
        if path.read_bytes() == data:
            return
        _log.warning("numba cache: %s does not match its source (truncated, corrupt or edited); "
                     "rewriting it", path)
    except FileNotFoundError:
        pass
    except OSError as err:
        _log.warning("numba cache: cannot read %s (%s); rewriting it", path, err)
    atomic_write(path, data)


def _exec_module(name: str, path: pathlib.Path, source: str) -> ModuleType:
    """Run ``source`` as module ``name`` whose ``__file__`` is ``path`` (numba's cache locator and
    source stamp go by that file). On failure nothing is left in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    code = compile(source, str(path), "exec", dont_inherit=True)
    sys.modules[name] = mod
    try:
        exec(code, mod.__dict__)
    except BaseException:
        if sys.modules.get(name) is mod:
            del sys.modules[name]
        raise
    return mod


MIN_SHARE = 6
"""Kernels per share at least: a worker process costs about 0.5 s to start (Python, numba)."""

_WORKER = """
import sys, types
pkg = types.ModuleType("dlcb_lab")   # the runtime alone: no torch, no compiler
pkg.__path__ = [sys.argv[1]]
sys.modules["dlcb_lab"] = pkg
from dlcb_lab.runtime.numba_cpu import _compile_share
_compile_share(sys.argv[2], sys.argv[3].split(","))
"""


def _compile_shares(path: pathlib.Path, source: str, kernels: Sequence[tuple[str, int]],
                    workers: int) -> None:
    """Compile the kernels numba's cache lacks in ``workers`` shares at once, each writing the
    cache: this process compiles the first share, worker processes the others (at least
    ``MIN_SHARE`` kernels each, balanced by source size); the import that follows loads them
    all from the cache. A worker that fails costs only time: the import compiles what it left."""
    n = min(workers, len(kernels) // MIN_SHARE)
    if n < 2 or _cached(path) >= len(kernels):
        return
    shares: list[list[str]] = [[] for _ in range(n)]
    load = [0] * n
    for name, size in sorted(kernels, key=lambda k: -k[1]):
        j = load.index(min(load))
        shares[j].append(name)
        load[j] += size
    pkg = str(pathlib.Path(__file__).resolve().parents[1])
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, pkg, str(path), ",".join(share)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for share in shares[1:]]
    try:
        _compile_share(str(path), shares[0], source)
    finally:
        for p in procs:
            _, err = p.communicate()
            if p.returncode:
                _log.warning("numba worker for %s exited with %d: %s", path.name, p.returncode,
                             err.decode(errors="replace")[-500:])


def _compile_share(path: str, names: Sequence[str], source: str | None = None) -> None:
    """Run module ``path`` with only ``names`` compiled (numba writes their cache files)."""
    global _ONLY
    path_ = pathlib.Path(path)
    source = path_.read_text() if source is None else source
    _ONLY = frozenset(names)
    name = _module_name(path_)   # numba's cache records it: the import's own
    try:
        _exec_module(name, path_, source)
    finally:
        _ONLY = None
        sys.modules.pop(name, None)


def _module_name(path: pathlib.Path) -> str:
    return f"dlcb_lab_generated_{path.stem.removeprefix('dlcb_')}"


def _cached(path: pathlib.Path) -> int:
    """How many functions of module ``path`` numba's cache holds (index files)."""
    return sum(1 for folder in _numba_cache_dirs(path) for f in folder.glob(f"{path.stem}.*.nbi"))


def _numba_cache_dirs(path: pathlib.Path) -> list[pathlib.Path]:
    """Folders where numba may keep the cache files of functions defined in ``path``: the in-tree
    ``__pycache__`` and, when ``$NUMBA_CACHE_DIR`` is set, numba's per-folder subpath under it."""
    dirs = [path.parent / "__pycache__"]
    try:
        from numba.core import config
        from numba.core.caching import _CacheLocator

        if config.CACHE_DIR:
            sub = _CacheLocator.get_suitable_cache_subpath(str(path))
            dirs.insert(0, pathlib.Path(config.CACHE_DIR) / sub)
    except Exception:  # numba internals moved: the in-tree folder is still covered
        pass
    return dirs


def _purge_numba_cache(path: pathlib.Path) -> list[pathlib.Path]:
    """Delete the numba cache files (index ``.nbi``, data ``.nbc``) and any stale bytecode of the
    module at ``path``; returns what was deleted. In-flight temp files of other processes
    (``*.tmp.*``) are left alone so their atomic renames do not fail."""
    removed = []
    for folder in _numba_cache_dirs(path):
        for f in folder.glob(f"{path.stem}.*"):
            if ".tmp." in f.name or not f.is_file():
                continue
            try:
                f.unlink()
                removed.append(f)
            except FileNotFoundError:
                pass
    return removed

