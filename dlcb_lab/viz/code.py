"""Kernel renderings: highlighted CUDA C++ and numba source with line numbers, each index line
annotated with the dimension expression it computes and each load with its coordinates and the
reverse transforms behind them; the ptxas resource usage of each entry point of the CUDA source,
with the launch it makes (NVRTC, computed when rendered); the coordinate map as a table.

Highlighting is pygments' lexers with our own token classes coloured through CSS variables
(JupyterLab's editor colours first), so the fragment needs no external stylesheet and follows the
theme. The CUDA listing is exactly ``Kernel.cuda_source`` (prelude folded, not omitted)."""

from __future__ import annotations

import functools
import re
from typing import Mapping, Sequence

from pygments import lex
from pygments.lexers import CppLexer, PythonLexer
from pygments.token import Comment, Keyword, Name, Number, String, _TokenType

from ..records import Kernel
from ..ir.dtypes import dtype_of
from ..kgen.emit import CUDA_PRELUDE
from ..kgen.entries import EntryPoint, entries
from ..kgen.kir import CoordMap, IdxDivMod, IdxProd, IdxSum, KernelBody, Load, Loop
from .diagrams import dim_text
from .render import Rendering, renders
from .style import block, esc, kernel_link, scoped, table

CODE_CSS = scoped("""
S { --dl-c-kw: var(--jp-mirror-editor-keyword-color, var(--dl-p-c-kw));
  --dl-c-com: var(--jp-mirror-editor-comment-color, var(--dl-p-c-com));
  --dl-c-lit: var(--jp-mirror-editor-number-color, var(--dl-p-c-lit));
  --dl-c-str: var(--jp-mirror-editor-string-color, var(--dl-p-c-str));
  --dl-c-fn: var(--jp-mirror-editor-def-color, var(--dl-p-c-fn));
  --dl-c-pre: var(--jp-mirror-editor-meta-color, var(--dl-p-c-pre)); }
S table.dl-code { border-collapse: collapse; margin: 2px 0; table-layout: auto; }
S table.dl-code tr, S table.dl-code tbody tr:nth-child(odd),
S table.dl-code tbody tr:nth-child(even) { background: transparent; }
S table.dl-code td { border: none; padding: 0 6px; vertical-align: top; line-height: 1.35;
  text-align: left; }
S table.dl-code td.dl-ln { color: var(--dl-muted); text-align: right; user-select: none;
  white-space: nowrap; }
S table.dl-code td.dl-src { white-space: pre; text-align: left; font-family:
  var(--jp-code-font-family, ui-monospace, monospace); font-size: 12px; }
S table.dl-code td.dl-note { color: var(--dl-muted); font-size: 11px; white-space: nowrap; }
S table.dl-code tr.dl-ann td.dl-src { background: rgba(127,127,127,.08); }
S .dl-c-kw { color: var(--dl-c-kw); } S .dl-c-com { color: var(--dl-c-com); font-style: italic; }
S .dl-c-lit { color: var(--dl-c-lit); } S .dl-c-str { color: var(--dl-c-str); }
S .dl-c-fn { color: var(--dl-c-fn); } S .dl-c-pre { color: var(--dl-c-pre); }
""")
"""Listings: line numbers right-aligned, source cells left-aligned with whitespace kept."""

_CUDA_WORDS = re.compile(r"__\w+__|threadIdx|blockIdx|blockDim|gridDim")


def _token_class(tt: _TokenType, text: str) -> str:
    if tt in Name and _CUDA_WORDS.fullmatch(text):
        return "dl-c-kw"
    cls = _CLASSES.get(tt)
    if cls is None:
        cls = _CLASSES[tt] = _type_class(tt)
    return cls


_CLASSES: dict[_TokenType, str] = {}


def _type_class(tt: _TokenType) -> str:
    if tt in Comment.Preproc or tt in Comment.PreprocFile:
        return "dl-c-pre"
    if tt in Comment:
        return "dl-c-com"
    if tt in Keyword:
        return "dl-c-kw"
    if tt in String:
        return "dl-c-str"
    if tt in Number:
        return "dl-c-lit"
    if tt in Name.Function or tt in Name.Class or tt in Name.Decorator:
        return "dl-c-fn"
    return ""


@functools.lru_cache(maxsize=16)
def highlight_lines(source: str, language: str) -> tuple[str, ...]:
    """``source`` highlighted, one HTML string per line of ``source.split("\\n")`` (a token that
    spans lines is split, so each line's spans are closed). ``language``: "cuda" or "python".

    No text node is whitespace only (except a blank line's): a run of blanks joins the next
    token, inside its span. HTML rewriters collapse whitespace-only text between tags to one space
    (BeautifulSoup 4.13+, which nbconvert's HTML export runs), which would strip indentation."""
    lexer = (CppLexer if language == "cuda" else PythonLexer)(stripnl=False, ensurenl=False)
    lines: list[str] = []
    cur: list[str] = []
    blank = ""          # blanks waiting for the next token of the line
    for tt, text in lex(source, lexer):
        cls = _token_class(tt, text)
        parts = text.split("\n")
        for i, part in enumerate(parts):
            if part and not part.strip():
                blank += part
            elif part:
                part, blank = blank + part, ""
                if cls and cur and cur[-1].startswith(f'<span class="{cls}">') and \
                        cur[-1].endswith("</span>"):   # one span for a run of one class
                    cur[-1] = cur[-1][:-7] + esc(part) + "</span>"
                else:
                    cur.append(f'<span class="{cls}">{esc(part)}</span>' if cls else esc(part))
            if i < len(parts) - 1:
                lines.append(_close_line(cur, blank))
                cur, blank = [], ""
    lines.append(_close_line(cur, blank))
    return tuple(lines)


def _close_line(cur: list[str], blank: str) -> str:
    """A highlighted line's HTML; trailing blanks go inside its last token."""
    if blank and cur:
        last = cur[-1]
        cur[-1] = (last[:-7] + esc(blank) + "</span>" if last.endswith("</span>")
                   else last + esc(blank))
        blank = ""
    return "".join(cur) + esc(blank)


def _cuda_lines(source: str) -> tuple[str, ...]:
    """``highlight_lines(source, "cuda")``; the prelude, shared by every kernel, is highlighted
    once (it ends with a complete line, so the lexer restarts cleanly after it)."""
    head = CUDA_PRELUDE + "\n"
    if source.startswith(head):
        return highlight_lines(head, "cuda")[:-1] + highlight_lines(source[len(head):], "cuda")
    return highlight_lines(source, "cuda")


# -- what each line computes -----------------------------------------------------------------------
def _walk(stmts):
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from _walk(s.body)


def _step(op: str, transform: str) -> str:
    """``sum (reduce loop)``; the transform alone when it names the op (``reshape (div/mod)``)."""
    return transform if transform.startswith(op) else f"{op} ({transform})"


def _via_text(path: Sequence[tuple[str, str]]) -> str:
    return "via " + " → ".join(_step(op, t) for op, t in path) if path else "read as is"


def line_notes(body: KernelBody) -> dict[str, str]:
    """Per identifier the kernel declares: an HTML note. Index temporaries: the dimension
    expression (``IdxSum``/``IdxProd``/``IdxDivMod.expr``); loads: the buffer's coordinates and
    the reverse transforms that produced them (``CoordMap.via``); loop variables: the extent."""
    cm = body.coord_map
    notes: dict[str, str] = {}
    for s in _walk(body.stmts):
        if isinstance(s, (IdxSum, IdxProd, IdxDivMod)):
            notes[s.name] = f"<code>{esc(dim_text(s.expr))}</code>"
        elif isinstance(s, Load):
            notes.setdefault(s.name, f"load <code>in{s.buf}</code>")
    for k, temp in enumerate(cm.temps):
        buf, coords = cm.loads[k]
        via = cm.via[k] if k < len(cm.via) else ()
        notes[temp] = (f"<code>{esc(buf)}[{esc(', '.join(map(repr, coords)))}]</code> "
                       f'<span class="dl-named">{esc(_via_text(via))}</span>')
    for name, ext in cm.loops:
        notes[name[1:] if name.startswith("_") else name] = f"loop <code>{esc(name)} &lt; " \
                                                           f"{esc(ext)}</code>"
    return notes


_DECL = {
    "cuda": re.compile(r"^\s*(?:const\s+)?(?:[A-Za-z_][\w:<>]*\s+)+(\w+)\s*=(?!=)"),
    "python": re.compile(r"^\s*(\w+)\s*=(?!=)"),
}
_LOOP = {
    "cuda": re.compile(r"^\s*for \((?:[A-Za-z_][\w ]*\s)?(\w+) ="),
    "python": re.compile(r"^\s*for (\w+) in "),
}


def _declared(line: str, language: str) -> str | None:
    m = _LOOP[language].match(line) or _DECL[language].match(line)
    return m.group(1) if m else None


def _sections(k: Kernel) -> tuple[int, list[tuple[int, KernelBody]]]:
    """(lines of prelude, [(first line, variant body)]) of ``k.cuda_source``; one section over
    the whole source when its layout is not prelude + variants."""
    parts = k.cuda_parts
    head = CUDA_PRELUDE + "\n"
    if k.cuda_source != head + "\n\n".join(parts):
        return 0, [(0, k.body)]
    start = head.count("\n")
    out = []
    for v, part in zip(k.body.variants(), parts):
        out.append((start, v))
        start += part.count("\n") + 2
    return head.count("\n"), out


def code_table(source: str, language: str, sections: Sequence[tuple[int, KernelBody]],
               first: int = 0, last: int | None = None,
               html: Sequence[str] | None = None) -> str:
    """Lines ``[first, last)`` of ``source`` as a table: number, highlighted code (``dl-src``
    cells, in order, hold exactly the source text), note (a line without one has no third cell).
    ``sections``: (first line, body) whose ``line_notes`` annotate the lines from there on.
    ``html``: the highlighted lines, if at hand (default ``highlight_lines``)."""
    lines = source.split("\n")
    html = highlight_lines(source, language) if html is None else html
    last = len(lines) if last is None else last
    bounds = sorted(sections, key=lambda s: s[0])
    rows = []
    notes: dict[str, str] = {}
    j = 0
    for i in range(first, last):
        while j < len(bounds) and bounds[j][0] <= i:
            notes = line_notes(bounds[j][1])
            j += 1
        name = _declared(lines[i], language) if i >= (bounds[0][0] if bounds else 0) else None
        note = notes.get(name, "") if name else ""
        cls = ' class="dl-ann"' if note else ""
        rows.append(f'<tr{cls}><td class="dl-ln">{i + 1}</td><td class="dl-src">{html[i]}</td>'
                    + (f'<td class="dl-note">{note}</td>' if note else "") + "</tr>")
    return (f'<table class="dl-code" data-lang="{esc(language)}"><tbody>{"".join(rows)}'
            "</tbody></table>")


def load_lines(source: str, body: KernelBody, start: int = 0, language: str = "cuda"
               ) -> dict[str, str]:
    """Per load temporary of ``body``: the source line (from line ``start``) that declares it;
    ``language``: "cuda" or "python" (numba)."""
    want = set(body.coord_map.temps)
    out: dict[str, str] = {}
    for line in source.split("\n")[start:]:
        name = _declared(line, language)
        if name in want and name not in out:
            out[name] = line.strip()
    return out


# -- resource usage --------------------------------------------------------------------------------
def usage_html(source: str, points: Sequence[EntryPoint] = ()) -> str:
    """ptxas's report for every entry point of ``source`` (``runtime.nvrtc.resource_usage``), each
    with the launch it makes where ``points`` (the kernel's ``kgen.entries.EntryPoint``s) describe
    it, or why there is none (no NVRTC here, or a compile error)."""
    try:
        from ..runtime.nvrtc import device_arch, resource_usage

        arch = device_arch()
        usage = resource_usage(source, arch=arch)
    except Exception as err:   # no NVRTC on this machine, or the source does not compile
        return f'<div class="muted">resource usage unavailable: {esc(type(err).__name__)}: ' \
               f"{esc(str(err).splitlines()[0] if str(err) else '')}</div>"
    how = {e.name: e.describe() for e in points}
    rows = [(f"<code>{esc(u.entry)}</code>", u.registers, u.stack_frame, u.spill_stores,
             u.spill_loads, u.shared, u.constant, u.barriers, esc(how.get(u.entry, "")))
            for u in usage.values()]
    return (f'<div class="muted">ptxas ({esc(arch)}), per entry point; bytes unless noted</div>'
            + table(["entry point", "registers", "stack", "spill stores", "spill loads",
                     "shared (smem)", "constant (cmem)", "barriers", "launch"], rows, raw=True))


# -- coordinate maps -------------------------------------------------------------------------------
def coord_map_html(cm: CoordMap, lines: Mapping[str, str] | None = None,
                   language: str = "CUDA") -> str:
    """``cm`` as tables: output coordinates, loops, and per load its buffer coordinates and the
    reverse transforms (output inward) that produced them; ``lines``: load temporary -> the line
    of ``language`` that reads it, shown when given."""
    oc = table(["output coordinate", "from the thread index"],
               [(f"<code>{esc(n)}</code>", f"<code>{esc(e)}</code>") for n, e in cm.out_coords],
               raw=True)
    loops = table(["loop variable", "extent"],
                  [(f"<code>{esc(n)}</code>", f"<code>{esc(e)}</code>") for n, e in cm.loops],
                  raw=True) if cm.loops else ""
    head = ["load", "buffer", "coordinates", "reverse transforms (output → load)"]
    if lines:
        head.append(language)
    rows = []
    for k, (buf, coords) in enumerate(cm.loads):
        via = cm.via[k] if k < len(cm.via) else ()
        temp = cm.temps[k] if k < len(cm.temps) else ""
        steps = " → ".join(esc(_step(op, t)) for op, t in via) or \
            '<span class="muted">read as is</span>'
        row = [f"<code>{esc(temp)}</code>", f"<code>%{esc(buf)}</code>",
               f"<code>[{esc(', '.join(map(repr, coords)))}]</code>", steps]
        if lines:
            row.append(f"<code>{esc(lines.get(temp, ''))}</code>")
        rows.append(row)
    return (f"<div><b>Coordinate map</b> of <code>%{esc(cm.out)}</code>: "
            f"{len(cm.out_coords)} output coordinates, {len(cm.loops)} loops, "
            f"{len(cm.loads)} loads</div>" + oc + loops + table(head, rows, raw=True))


@renders(CoordMap)
def render_coord_map(cm: CoordMap) -> Rendering:
    return Rendering(block(coord_map_html(cm)), title=f"CoordMap {cm.out}")


# -- kernels ---------------------------------------------------------------------------------------
def _details(summary: str, html: str, open_: bool) -> str:
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>{html}</details>"


def _signature(k: Kernel) -> str:
    b = k.body
    rows = [("<code>out</code>", f"<code>%{esc(b.out.name)}</code>", esc(b.dtype))]
    rows += [(f"<code>in{i}</code>", f"<code>%{esc(v.name)}</code>", esc(dtype_of(v.dtype)))
             for i, v in enumerate(b.inputs)]
    rows.append(("<code>numel</code>", f"<code>{esc(b.numel)}</code>", "threads"))
    rows += [(f"<code>{esc(n)}</code>", f"<code>{esc(e)}</code>", "host-computed")
             for n, e in b.params]
    rows += [(f"<code>{esc(n)}</code>", f"<code>magic({esc(e)})</code>",
              "divisor (32-bit: multiply-high and shift)") for n, e in b.divisors]
    return table(["parameter", "holds", ""], rows, raw=True)


PRELUDE_ID = "dlcb-cuda-prelude"
"""The anchor of the CUDA prelude's one listing in the report (``prelude_html``)."""


def prelude_html() -> str:
    """The CUDA prelude every kernel's translation unit starts with (index types, 16-bit
    conversions, block reductions), as one closed section with the anchor ``PRELUDE_ID``."""
    head = CUDA_PRELUDE + "\n"
    n = head.count("\n")
    listing = code_table(head, "cuda", [], 0, n, _cuda_lines(head))
    return (f'<details id="{PRELUDE_ID}"><summary><b>CUDA prelude</b> (lines 1–{n} of every '
            f"kernel's CUDA source, shown once)</summary>{listing}</details>")


LANGUAGES = {"cuda": "CUDA C++", "cpu": "numba"}
"""A backend's language, as a kernel's listing names it."""


def kernel_html(k: Kernel, usage: bool = True, prelude: bool = True, style: bool = True,
                other: bool = True, same_as: str | None = None) -> str:
    """The kernel: signature, coordinate map (with each load's CUDA line), CUDA source with ptxas
    resource usage (``usage``: one NVRTC compile, some 0.5 s, unless cached), numba source. The
    backend's language is open, the other folded. ``prelude``: the CUDA prelude's lines as a
    folded listing; else a link to its one listing in the page (``prelude_html``; line numbers
    stay those of ``k.cuda_source``). ``style``: carry ``CODE_CSS`` (a page that already has it
    passes False).

    A page of many kernels (the report) lists the code that ran, once: without ``other`` only
    the backend's language is listed (the coordinate map shows each load's line in it), and a
    line says where the other is; ``same_as``, the name of an earlier kernel of the same code
    (``runtime.build.distinct``, whose build this kernel launches), stands for the listings with
    a link to that kernel's."""
    gpu = k.backend == "cuda"
    variants = len(k.body.variants())
    head = (f"<div><b>Kernel</b> <code>{esc(k.name)}</code> [{esc(k.backend)}]"
            + (f' <span class="muted">(+ cooperative variant <code>{esc(k.body.variant.name)}'
               "</code>: one block per output element)</span>" if variants > 1 else "")
            + "</div>")
    css = f"<style>{CODE_CSS}</style>" if style else ""
    lang = LANGUAGES.get(k.backend, k.backend)
    if same_as is not None:
        note = (f'<div class="dl-same">code: the same {esc(lang)} as {kernel_link(same_as)} '
                "(less names and comments): this kernel launches that kernel's build; the "
                "listing is there</div>")
        return css + "".join([head, _signature(k), coord_map_html(k.coord_map), note])
    if not other:
        if gpu:
            src = k.cuda_source
            n_pre, sections = _sections(k)
            listing = _cuda_listing(k, src, n_pre, sections, usage, prelude)
            loads = load_lines(src, k.body, sections[0][0])
        else:
            src = k.numba_source
            listing = code_table(src, "python", [(0, k.body)])
            loads = load_lines(src, k.body, 0, "python")
        where = ("the kernel's own display (<code>pipeline.kernels[i]</code>) and "
                 "<code>dlcb_lab.viz.dump</code>")
        elsewhere = (f'<div class="muted">its numba form: {where} (<code>{esc(k.name)}.py'
                     "</code>)</div>" if gpu else
                     f'<div class="muted">its CUDA C++ (what the cuda backend compiles, checked '
                     f"by NVRTC): {where} (<code>{esc(k.name)}.cu</code>)</div>")
        title = f"<b>{esc(lang)}</b>" + (" (compiles with NVRTC as shown" + (
            "" if prelude or not n_pre else ", after the prelude") + ")" if gpu else "")
        return css + "".join([head, _signature(k),
                              coord_map_html(k.coord_map, loads, "CUDA" if gpu else "numba"),
                              _details(title, listing, True), elsewhere])
    src = k.cuda_source
    n_pre, sections = _sections(k)
    loads = load_lines(src, k.body, sections[0][0])
    cuda = _cuda_listing(k, src, n_pre, sections, usage, prelude)
    numba = code_table(k.numba_source, "python", [(0, k.body)])
    parts = [head, _signature(k), coord_map_html(k.coord_map, loads),
             _details("<b>CUDA C++</b> (compiles with NVRTC as shown"
                      + ("" if prelude or not n_pre else ", after the prelude") + ")", cuda, gpu),
             _details("<b>numba</b>", numba, not gpu)]
    return css + "".join(parts)


def _cuda_listing(k: Kernel, src: str, n_pre: int, sections, usage: bool, prelude: bool) -> str:
    """``k.cuda_source`` as a listing, ptxas's resource usage first (``usage``); the prelude
    folded (``prelude``) or linked to its one listing in the page."""
    hl = _cuda_lines(src)
    if not n_pre:
        pre = ""
    elif prelude:
        pre = _details(f"prelude (lines 1–{n_pre})", code_table(src, "cuda", sections, 0, n_pre, hl),
                       False)
    else:
        pre = (f'<div class="muted">lines 1–{n_pre}: the <a href="#{PRELUDE_ID}">CUDA prelude</a>, '
               "shared by every kernel and listed once</div>")
    usage_table = usage_html(src, entries(k.body)) if usage else ""
    return usage_table + pre + code_table(src, "cuda", sections, n_pre, html=hl)


@renders(Kernel)
def render_kernel(k: Kernel) -> Rendering:
    return Rendering(block(kernel_html(k)), title=f"Kernel {k.name}")

