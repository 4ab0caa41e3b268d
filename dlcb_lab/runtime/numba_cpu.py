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
import sys
import threading
from types import ModuleType

from ..errors import BuildError
from .cache import atomic_write, cache_dir, content_key

__all__ = ["NumbaModuleLoadError", "load_numba_module", "unvectorized"]

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


def unvectorized(*args, **kwargs):
    """``numba.njit(*args, **kwargs)`` compiling with LLVM's loop vectorizer off, for kernels
    with a max reduction: vectorizing a loop whose unrolled body chains 13 to 49
    NaN-propagating maxima takes LLVM (numba 0.68) seconds to hours (14: 5 s; 16 to 40: over
    20 s; ``norm(x, -inf)`` of a 5x5 sample never finished; 50 is not unrolled: 0.2 s).
    Generated modules load one at a time (``_LOCK``), so the switch is theirs while it is off."""
    import numba

    def wrap(fn):
        saved = numba.config.LOOP_VECTORIZE
        numba.config.LOOP_VECTORIZE = False
        try:
            return numba.njit(*args, **kwargs)(fn)
        finally:
            numba.config.LOOP_VECTORIZE = saved
    return wrap


def load_numba_module(source: str) -> tuple[ModuleType, bool]:
    """Import ``source`` as a module (content-addressed file). Returns (module, newly_loaded).

    ``newly_loaded`` is False when this process already loaded the same source (an in-process memo,
    keyed by the source hash alone); otherwise the module comes from the verified cache file, see
    the module docstring.
    """
    key = content_key(source)[:24]
    with _LOCK:
        mod = _LOADED.get(key)
        if mod is not None:
            return mod, False
        path = (cache_dir("numba") / f"dlcb_{key}.py").absolute()  # numba keys its cache by it
        name = f"dlcb_lab_generated_{key}"
        data = source.encode()
        _ensure_file(path, data)
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

