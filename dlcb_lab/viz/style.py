"""HTML building blocks shared by every rendering: escaping, tables, row folding, anchors and the
inline stylesheet.

The stylesheet holds up inside a host page's own CSS. JupyterLab's rendered-HTML rules
(``:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td { text-align: right }``, cell padding and
borders, ``pre``/``code`` backgrounds and wrapping, zebra rows, ``table-layout: fixed``) carry two
classes; every rule here is scoped by ``SCOPE`` (the root class three times, so three classes) and
resets each property such a host sets on the elements we emit (table, tr, th, td, pre, code,
details, summary, ul, headings, svg).

Colours are CSS variables. Text and background take the host theme's variables first
(JupyterLab's ``--jp-*``, VS Code's ``--vscode-*``), else a palette of our own; the palette (and
the literal / named / residual colours, which must differ from the foreground) follows, in order of
precedence: the host's declared theme (JupyterLab's ``data-jp-theme-light`` on ``<body>``, VS
Code's ``vscode-light``/``vscode-dark`` body class), else ``prefers-color-scheme``. The root paints
its own background, so text stays legible on a host whose theme we cannot see."""

from __future__ import annotations

import html as _html
import re
import uuid
from typing import Iterable, Sequence, TypeVar

SCOPE = ".dlcb.dlcb.dlcb"
"""The selector prefix of every rule: three classes outrank a host's two-class rules."""

LIGHT = {"fg": "#1f2328", "bg": "#ffffff", "muted": "#59636e", "border": "#d0d7de",
         "head": "rgba(127,127,127,.12)", "literal": "#8250df", "named": "#1a7f37",
         "residual": "#bc4c00", "library": "#0969da", "generated": "#1a7f37", "fail": "#cf222e",
         "input": "#9a6700", "highlight": "#d4a72c", "c-kw": "#cf222e", "c-com": "#59636e",
         "c-lit": "#0550ae", "c-str": "#0a3069", "c-fn": "#8250df", "c-pre": "#953800"}
"""The light palette (GitHub's light colours; each text colour has contrast ≥ 4.5 on ``bg``)."""
DARK = {"fg": "#e6edf3", "bg": "#0d1117", "muted": "#9198a1", "border": "#3d444d",
        "head": "rgba(127,127,127,.18)", "literal": "#bc8cff", "named": "#3fb950",
        "residual": "#f0883e", "library": "#58a6ff", "generated": "#3fb950", "fail": "#ff7b72",
        "input": "#d29922", "highlight": "#d4a72c", "c-kw": "#ff7b72", "c-com": "#9198a1",
        "c-lit": "#79c0ff", "c-str": "#a5d6ff", "c-fn": "#d2a8ff", "c-pre": "#ffa657"}
"""The dark palette (GitHub's dark colours; contrast ≥ 4.5 on ``bg`` and on JupyterLab's dark
``#111111``)."""


def _palette(p: dict[str, str]) -> str:
    return " ".join(f"--dl-p-{k}: {v};" for k, v in p.items())


_HOST_LIGHT = '[data-jp-theme-light="true"] .dlcb, body.vscode-light .dlcb'
_HOST_DARK = ('[data-jp-theme-light="false"] .dlcb, body.vscode-dark .dlcb, '
              "body.vscode-high-contrast:not(.vscode-high-contrast-light) .dlcb")

_RULES = """
.dlcb { LIGHT }
@media (prefers-color-scheme: dark) { .dlcb { DARK } }
HOST_LIGHT { LIGHT }
HOST_DARK { DARK }
S { --dl-fg: var(--jp-content-font-color1, var(--vscode-editor-foreground, var(--dl-p-fg)));
  --dl-bg: var(--jp-layout-color0, var(--vscode-editor-background, var(--dl-p-bg)));
  --dl-muted: var(--jp-content-font-color2, var(--dl-p-muted));
  --dl-border: var(--jp-border-color1, var(--dl-p-border));
  --dl-head: var(--dl-p-head);
  --dl-literal: var(--dl-p-literal); --dl-named: var(--dl-p-named);
  --dl-residual: var(--dl-p-residual); --dl-library: var(--dl-p-library);
  --dl-generated: var(--dl-p-generated); --dl-fail: var(--dl-p-fail);
  --dl-input: var(--dl-p-input); --dl-highlight: var(--dl-p-highlight);
  color: var(--dl-fg); background: var(--dl-bg); text-align: left;
  font-family: var(--jp-ui-font-family, system-ui, sans-serif); font-size: 13px;
  line-height: 1.4; }
S table { border-collapse: collapse; border-spacing: 0; border: none; table-layout: auto;
  width: auto; margin: 4px 0; color: inherit; background: transparent; font-size: inherit; }
S thead, S tbody, S tr { border: none; background: transparent; text-align: left;
  vertical-align: top; }
S tbody tr:nth-child(odd), S tbody tr:nth-child(even), S tbody tr:hover { background: transparent; }
S th, S td { border: 1px solid var(--dl-border); padding: 2px 8px; text-align: left;
  vertical-align: top; white-space: normal; line-height: 1.35; max-width: none; color: inherit;
  font-size: inherit; }
S th { background: var(--dl-head); font-weight: 600; }
S pre, S code { font-family: var(--jp-code-font-family, ui-monospace, monospace); border: none;
  background: transparent; color: inherit; padding: 0; font-size: inherit; line-height: inherit; }
S pre { margin: 0; white-space: pre; }
S code { white-space: inherit; }
S .muted { color: var(--dl-muted); }
S h2, S h3, S h4 { font-weight: 600; font-style: normal; line-height: 1.3; color: inherit; }
S h2 { font-size: 18px; margin: 4px 0; }
S h3 { font-size: 15px; margin: 10px 0 4px; }
S h4 { font-size: 13px; margin: 8px 0 2px; }
S a { color: var(--dl-library); text-decoration: none; } S a:hover { text-decoration: underline; }
S .dl-literal { color: var(--dl-literal); } S .dl-named { color: var(--dl-named); }
S .dl-residual { color: var(--dl-residual); } S .dl-library { color: var(--dl-library); }
S .dl-generated { color: var(--dl-generated); } S .dl-fail { color: var(--dl-fail); }
S .dl-ok { color: var(--dl-named); }
S .dl-badge { display: inline-block; padding: 0 6px; border: 1px solid currentColor;
  border-radius: 8px; font-size: 11px; line-height: 16px; white-space: nowrap; }
S .dl-error { border-left: 3px solid var(--dl-fail); padding: 4px 8px; margin: 4px 0; }
S .dl-bar { display: inline-block; height: 10px; background: var(--dl-library);
  vertical-align: middle; }
S ul { margin: 2px 0 6px; padding-left: 22px; list-style: disc; }
S li { margin: 0; }
S details { display: block; margin: 4px 0; } S summary { display: list-item; cursor: pointer; }
S :target, S :target > summary { outline: 2px solid var(--dl-highlight); outline-offset: 1px; }
S .dl-more > summary { color: var(--dl-muted); font-style: italic; }
S svg { max-width: none; height: auto; }
S .dl-tabs { display: flex; flex-wrap: wrap; }
S .dl-tabs > input { position: absolute; opacity: 0; width: 0; height: 0; margin: 0; }
S .dl-tabs > label { order: 0; padding: 4px 12px; margin: 0 2px -1px 0; cursor: pointer;
  border: 1px solid var(--dl-border); border-radius: 4px 4px 0 0; background: var(--dl-head); }
S .dl-tabs > .dl-panel { order: 1; width: 100%; display: none; padding: 6px 2px;
  border-top: 1px solid var(--dl-border); overflow-x: auto; }
S .dl-tabs > input:checked + label { background: var(--dl-bg); font-weight: 600;
  border-bottom-color: var(--dl-bg); }
S .dl-tabs > input:focus-visible + label { outline: 2px solid var(--dl-library); }
S .dl-tabs > input:checked + label + .dl-panel { display: block; }
S .dl-tabs:has(> .dl-panel :target) > .dl-panel { display: none; }
S .dl-tabs:has(> .dl-panel :target) > .dl-panel:has(:target) { display: block; }
S details:target::details-content { content-visibility: visible; display: block; }
"""
"""``S`` is ``SCOPE``. The last three rules follow a link (``#dlcb-kernel-…``) without a script:
the panel holding the target shows instead of the checked one, and a closed ``<details>`` that is
the target shows its content (where ``::details-content`` is supported)."""


def scoped(rules: str) -> str:
    """``rules`` with ``S`` (a selector's leading scope) spelled as ``SCOPE``."""
    return re.sub(r"(^|[\s,{}])S(?=[\s.:\[{])", lambda m: m.group(1) + SCOPE, rules)


CSS = scoped(_RULES.replace("HOST_LIGHT", _HOST_LIGHT).replace("HOST_DARK", _HOST_DARK)
             .replace("LIGHT", _palette(LIGHT)).replace("DARK", _palette(DARK)))
"""The stylesheet every fragment carries (``block``)."""

PAGE_CSS = """
:root { color-scheme: light dark; }
body.dl-page { margin: 0; background: LIGHT_BG; }
@media (prefers-color-scheme: dark) { body.dl-page { background: DARK_BG; } }
body.dl-page > .dlcb { padding: 8px 14px; min-height: 100vh; box-sizing: border-box; }
""".replace("LIGHT_BG", LIGHT["bg"]).replace("DARK_BG", DARK["bg"])
"""A standalone page (``page``): follows ``prefers-color-scheme`` up to its edges."""

FOLD_ROWS = 50
"""Tables longer than this show the first ``FOLD_ROWS`` rows and fold the rest (``fold_rows``)."""

T = TypeVar("T")


def fold_rows(rows: Sequence[T], limit: int = FOLD_ROWS) -> tuple[Sequence[T], Sequence[T]]:
    """(shown, folded): all of ``rows`` when they are at most ``limit``, else the first ``limit``
    and the rest. ``more_rows`` renders the folded part."""
    if len(rows) <= limit:
        return rows, rows[:0]
    return rows[:limit], rows[limit:]


def kernel_id(name: str) -> str:
    """The anchor of a kernel's section in the report: ``dlcb-kernel-<kernel name>``."""
    return f"dlcb-kernel-{name}"


def kernel_link(name: str, text: str | None = None) -> str:
    """A link to the kernel's section in the report (``kernel_id``), shown as ``<code>``."""
    return f'<a href="#{esc(kernel_id(name))}"><code>{esc(name if text is None else text)}</code></a>'


def esc(x: object) -> str:
    return _html.escape(str(x), quote=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], raw: bool = False) -> str:
    """An HTML table; cells are escaped unless ``raw`` (then they are HTML already)."""
    cell = (lambda c: str(c)) if raw else esc
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def folded_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
                 limit: int = FOLD_ROWS, raw: bool = False) -> str:
    """``table`` showing the first ``limit`` rows (``fold_rows``); the rest fold under a visible
    "N more rows" (``more_rows``)."""
    shown, rest = fold_rows(rows, limit)
    return table(headers, shown, raw) + more_rows(headers, rest, raw)


def more_rows(headers: Sequence[str], rest: Sequence[Sequence[object]], raw: bool = False) -> str:
    """The folded rows of a table (``fold_rows``) under a closed "N more rows" marker; empty when
    there are none."""
    if not len(rest):
        return ""
    return (f'<details class="dl-more"><summary>{len(rest)} more '
            f'{"row" if len(rest) == 1 else "rows"}</summary>{table(headers, rest, raw)}'
            "</details>")


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


_STYLE = re.compile(r"<style>(.*?)</style>", re.S)


def styles_once(html: str) -> str:
    """``html`` with every ``<style>`` element that repeats an earlier one's rules removed: a page
    that embeds many renderings (each a ``block`` with its own stylesheet) carries each
    stylesheet once. The rules are scoped to the root class, so the first copy serves every
    later fragment."""
    seen: set[str] = set()

    def keep(m: re.Match) -> str:
        if m.group(1) in seen:
            return ""
        seen.add(m.group(1))
        return m.group(0)

    return _STYLE.sub(keep, html)


def page(title: str, html: str) -> str:
    """A standalone HTML page: ``html`` as a ``block``, following ``prefers-color-scheme``; each
    stylesheet once (``styles_once``)."""
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f'<meta name="color-scheme" content="light dark"><title>{esc(title)}</title>'
            f'<style>{PAGE_CSS}</style></head><body class="dl-page">'
            f'{styles_once(block(html))}</body></html>\n')
