"""HTML building blocks shared by every rendering: escaping, tables, and the inline stylesheet.
Colours are CSS variables with JupyterLab's (``--jp-*``) and VS Code's (``--vscode-*``) theme
variables first, so light and dark themes and a static nbconvert export all read well."""

from __future__ import annotations

import html as _html
import uuid
from typing import Iterable, Sequence

CSS = """
.dlcb { --dl-fg: var(--jp-content-font-color1, var(--vscode-editor-foreground, #1f2328));
  --dl-bg: var(--jp-layout-color0, var(--vscode-editor-background, #ffffff));
  --dl-muted: var(--jp-content-font-color2, #656d76);
  --dl-border: var(--jp-border-color1, #d0d7de);
  --dl-head: var(--jp-layout-color2, rgba(127,127,127,.12));
  --dl-literal: #8250df; --dl-named: #1a7f37; --dl-residual: #bc4c00;
  --dl-library: #0969da; --dl-generated: #1a7f37; --dl-fail: #cf222e;
  color: var(--dl-fg); font-family: var(--jp-ui-font-family, system-ui, sans-serif); font-size: 13px; }
.dlcb table { border-collapse: collapse; margin: 4px 0; }
.dlcb th, .dlcb td { border: 1px solid var(--dl-border); padding: 2px 8px; text-align: left;
  vertical-align: top; }
.dlcb th { background: var(--dl-head); }
.dlcb code, .dlcb pre { font-family: var(--jp-code-font-family, ui-monospace, monospace); }
.dlcb .muted { color: var(--dl-muted); }
.dlcb h2 { font-size: 18px; margin: 4px 0; }
.dlcb h3 { font-size: 15px; margin: 10px 0 4px; }
.dlcb h4 { font-size: 13px; margin: 8px 0 2px; }
.dlcb .dl-literal { color: var(--dl-literal); } .dlcb .dl-named { color: var(--dl-named); }
.dlcb .dl-residual { color: var(--dl-residual); } .dlcb .dl-library { color: var(--dl-library); }
.dlcb .dl-generated { color: var(--dl-generated); } .dlcb .dl-fail { color: var(--dl-fail); }
.dlcb .dl-ok { color: var(--dl-named); }
.dlcb .dl-badge { display: inline-block; padding: 0 6px; border: 1px solid currentColor;
  border-radius: 8px; font-size: 11px; line-height: 16px; white-space: nowrap; }
.dlcb .dl-error { border-left: 3px solid var(--dl-fail); padding: 4px 8px; margin: 4px 0; }
.dlcb .dl-bar { display: inline-block; height: 10px; background: var(--dl-library);
  vertical-align: middle; }
.dlcb ul { margin: 2px 0 6px; padding-left: 22px; }
.dlcb details { margin: 4px 0; } .dlcb summary { cursor: pointer; }
.dlcb .dl-tabs { display: flex; flex-wrap: wrap; }
.dlcb .dl-tabs > input { position: absolute; opacity: 0; width: 0; height: 0; }
.dlcb .dl-tabs > label { order: 0; padding: 4px 12px; margin: 0 2px -1px 0; cursor: pointer;
  border: 1px solid var(--dl-border); border-radius: 4px 4px 0 0; background: var(--dl-head); }
.dlcb .dl-tabs > .dl-panel { order: 1; width: 100%; display: none; padding: 6px 2px;
  border-top: 1px solid var(--dl-border); overflow-x: auto; }
.dlcb .dl-tabs > input:checked + label { background: var(--dl-bg); font-weight: 600;
  border-bottom-color: var(--dl-bg); }
.dlcb .dl-tabs > input:focus-visible + label { outline: 2px solid var(--dl-library); }
.dlcb .dl-tabs > input:checked + label + .dl-panel { display: block; }
"""


def esc(x: object) -> str:
    return _html.escape(str(x), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], raw: bool = False) -> str:
    """An HTML table; cells are escaped unless ``raw`` (then they are HTML already)."""
    cell = (lambda c: str(c)) if raw else esc
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def folded_table(headers: Sequence[str], rows: Sequence[Sequence[object]], limit: int = 200,
                 raw: bool = False) -> str:
    """``table`` showing the first ``limit`` rows; the rest fold under a visible "N hidden"."""
    if len(rows) <= limit:
        return table(headers, rows, raw)
    return table(headers, rows[:limit], raw) + details(
        f"{len(rows) - limit} more rows hidden", table(headers, rows[limit:], raw))


def badge(text: str, kind: str = "") -> str:
    """A small coloured label; ``kind`` one of literal, named, residual, library, generated, ok,
    fail (the stylesheet's colours)."""
    return f'<span class="dl-badge dl-{esc(kind)}">{esc(text)}</span>'


def details(summary: str, html: str, open: bool = False) -> str:
    """A folded section (``<details>``): ``summary`` is text, ``html`` the folded content."""
    return (f"<details{' open' if open else ''}><summary>{esc(summary)}</summary>{html}"
            f"</details>")


def tabs(panels: Sequence[tuple[str, str]], checked: int = 0) -> str:
    """Pure-CSS tabs (radio inputs, no script: they work in a static HTML export). ``panels``:
    (label text, panel HTML); each group gets a fresh radio-group name."""
    group = f"dl-tabs-{uuid.uuid4().hex[:10]}"
    out = []
    for i, (label, html) in enumerate(panels):
        tid = f"{group}-{i}"
        out.append(f'<input type="radio" name="{group}" id="{tid}"'
                   f'{" checked" if i == checked else ""}><label for="{tid}">{esc(label)}</label>'
                   f'<div class="dl-panel">{html}</div>')
    return f'<div class="dl-tabs">{"".join(out)}</div>'


def block(html: str) -> str:
    """A fragment that carries its own stylesheet (what ``_repr_mimebundle_`` returns)."""
    return f'<div class="dlcb"><style>{CSS}</style>{html}</div>'


def page(title: str, html: str) -> str:
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"</head><body>{block(html)}</body></html>\n")
