"""Load generated numba modules from files under the cache folder, so numba's on-disk cache
(``cache=True``) works across processes. Kernels carry explicit signatures and compile at import."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

from .cache import cache_dir, content_key

_LOADED: dict[str, ModuleType] = {}


def load_numba_module(source: str) -> tuple[ModuleType, bool]:
    """Import ``source`` as a module (content-addressed file). Returns (module, newly_loaded)."""
    key = content_key(source)[:24]
    mod = _LOADED.get(key)
    if mod is not None:
        return mod, False
    folder = cache_dir("numba")
    path = folder / f"dlcb_{key}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    name = f"dlcb_lab_generated_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    _LOADED[key] = mod
    return mod, True
