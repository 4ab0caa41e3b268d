"""On-disk cache locations and content-addressed keys for compiled artifacts (cubins, numba files).

Cache files are never trusted: every writer goes through :func:`atomic_write` (so a reader never
sees a half-written file), and every reader checks what it read (the numba loader compares the
module file with its source, the cubin cache checks a SHA-256 digest stored with the cubin) and
rebuilds the entry on any mismatch.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile

from ..config import Config

__all__ = ["atomic_write", "cache_dir", "content_key"]


def cache_dir(sub: str = "") -> pathlib.Path:
    """The cache root (``Config().cache_dir``: ``$DLCB_CACHE_DIR``, else ``~/.cache/dlcb_lab``),
    or its ``sub`` folder.

    Process-wide, read from the environment on every call, so tests can point it at a temporary
    folder; the folder is created on demand.
    """
    root = pathlib.Path(Config().cache_dir).expanduser()
    path = root / sub if sub else root
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


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a uniquely named temp file in its folder + ``os.replace``.

    Readers (other threads or processes) see either the old file or the complete new one, never a
    partial file; concurrent writers of the same content are harmless (the last rename wins).
    """
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
