"""Notebook display hook for the stage objects. The renderings live in ``dlcb_lab.viz``, imported on
first display only: the compiler core never imports the notebook layer."""

from __future__ import annotations

from pathlib import Path


class Rich:
    """Mixin: ``_repr_mimebundle_`` (text/plain, self-contained text/html, and image/svg+xml or
    text/latex where the object has one) and ``to_html(path)`` (a standalone page)."""

    __slots__ = ()

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        from .viz.render import bundle

        return bundle(self, include, exclude)

    def to_html(self, path: str | Path) -> Path:
        from .viz.render import write_html

        return write_html(self, path)
