"""On-disk cache locations and content-addressed keys for compiled artifacts (cubins, numba files)."""

from __future__ import annotations

import hashlib
import os
import pathlib

__all__ = ["cache_dir", "content_key"]


def cache_dir(sub: str = "") -> pathlib.Path:
    """The cache root (``$DLCB_CACHE_DIR``, else ``~/.cache/dlcb_lab``), or its ``sub`` folder.

    Read from the environment on every call, so tests can point it at a temporary folder; the folder
    is created on demand.
    """
    root = os.environ.get("DLCB_CACHE_DIR") or pathlib.Path.home() / ".cache" / "dlcb_lab"
    path = pathlib.Path(root).expanduser() / sub if sub else pathlib.Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def content_key(*parts: str | bytes) -> str:
    """SHA-256 hex digest of ``parts``; each part is length-prefixed, so ("ab", "c") != ("a", "bc")."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
