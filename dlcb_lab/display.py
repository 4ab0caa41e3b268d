"""The display hook of the stage records: the core's one door to the notebook layer.

Jupyter asks an object for its rendering by calling ``_repr_mimebundle_``; the renderings live in
``dlcb_lab.viz`` (which takes the records and may import anything), so this hook imports
``viz.render`` on first display, inside the call. No other core module imports ``viz``, at module
level or inside a function (``tests/models/test_structure.py``'s layering test): what a record does not
display by itself is a function of it in ``viz`` (``viz.stepper(trace)``, ``viz.dump(pipeline,
directory)``)."""

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
