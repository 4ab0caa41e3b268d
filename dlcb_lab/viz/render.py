"""Rendering registry: one function per stage-object type, returning a ``Rendering``. Renderer
modules register with ``@renders(Type)``; ``bundle`` imports them on first use."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .style import page

RENDERER_MODULES = ("tables", "report", "diagrams", "code", "solve")   # call @renders
_RENDERERS: dict[type, Callable[[object], "Rendering"]] = {}
_loaded = False


@dataclass(frozen=True)
class Rendering:
    """``html``: a self-contained fragment (inline CSS through ``style.CSS`` variables, no external
    URL); ``svg``: a diagram, if the object has one; ``latex``: for dimension expressions."""

    html: str
    svg: str | None = None
    latex: str | None = None
    title: str = ""


def renders(*types: type):
    def deco(fn):
        for t in types:
            _RENDERERS[t] = fn
        return fn
    return deco


def render(obj: object) -> Rendering:
    global _loaded
    if not _loaded:
        for m in RENDERER_MODULES:
            importlib.import_module(f"{__package__}.{m}")
        _loaded = True
    for t in type(obj).__mro__:
        fn = _RENDERERS.get(t)
        if fn is not None:
            return fn(obj)
    raise TypeError(f"no rendering for {type(obj).__name__}")


def bundle(obj: object, include=None, exclude=None) -> dict[str, str]:
    r = render(obj)
    out = {"text/plain": repr(obj), "text/html": r.html}
    if r.svg is not None:
        out["image/svg+xml"] = r.svg
    if r.latex is not None:
        out["text/latex"] = r.latex
    if include:
        out = {k: v for k, v in out.items() if k in include}
    if exclude:
        out = {k: v for k, v in out.items() if k not in exclude}
    return out


def write_html(obj: object, path: str | Path) -> Path:
    r = render(obj)
    p = Path(path)
    p.write_text(page(r.title or type(obj).__name__, r.html), encoding="utf-8")
    return p
