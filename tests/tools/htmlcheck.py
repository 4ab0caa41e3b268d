"""HTML checks shared by the rendering tests: tag balance, self-containedness, visible text,
headings and the source lines shown in code listings; and headless Chromium for what only a
browser shows (screenshots, computed styles and colours through an injected probe)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from html import unescape
from html.parser import HTMLParser
from pathlib import Path

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Parsed(HTMLParser):
    """Tag balance (every non-void element closed in order; ``errors``), every tag with its
    attributes, ``headings`` (level or "stage", text), visible ``text`` (no style/script bodies)
    and ``src``: the text of ``dl-src`` cells (listed source lines) per ``data-lang``."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.headings: list[tuple[str, str]] = []
        self.src: dict[str, list[str]] = {}
        self.chunks: list[str] = []
        self._heading: list[str] | None = None
        self._in_src = 0
        self._lang = ""
        self.feed(html)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed: {self.stack[-5:]}")
        self.text = "".join(self.chunks)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag in VOID:
            return
        self.stack.append(tag)
        if tag in ("h2", "h3", "h4"):
            self._heading = ["stage" if a.get("class") == "dl-stage" else tag]
        if tag == "table":
            self._lang = a.get("data-lang", "")
        if tag == "td" and a.get("class") == "dl-src":
            self._in_src = len(self.stack)
            self.src.setdefault(self._lang, []).append("")

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        if self._in_src == len(self.stack):
            self._in_src = 0
        self.stack.pop()
        if self._heading is not None and tag in ("h2", "h3", "h4"):
            self.headings.append((self._heading[0], "".join(self._heading[1:]).strip()))
            self._heading = None

    def handle_data(self, data):
        if self.stack and self.stack[-1] in ("style", "script"):
            return
        self.chunks.append(data)
        if self._heading is not None:
            self._heading.append(data)
        if self._in_src:
            self.src[self._lang][-1] += data


def check_html(html: str) -> Parsed:
    """Well formed and self-contained: no external script, stylesheet, image or font."""
    p = Parsed(html)
    assert not p.errors, p.errors[:5]
    for tag, attrs in p.tags:
        assert tag != "link", "external stylesheet"
        assert not (tag == "script" and "src" in attrs), "external script"
        for k in ("src", "href", "xlink:href", "data"):
            v = (attrs.get(k) or "").strip().lower()
            assert not v.startswith(("http:", "https:", "//")), f"<{tag} {k}={v}>"
    assert "@import" not in html and not re.search(r"url\(\s*['\"]?\s*(https?:)?//", html, re.I)
    return p


# -- headless Chromium -----------------------------------------------------------------------------
def chromium() -> str | None:
    """The Chromium (or Chrome) executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run_chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """Headless Chromium, offline: no GPU, no background networking, no first-run UI."""
    flags = ["--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-dev-shm-usage", "--disable-background-networking",
             "--disable-extensions", "--disable-sync", "--no-default-browser-check"]
    if os.geteuid() == 0:
        flags.append("--no-sandbox")
    return subprocess.run([chromium(), *flags, *args], capture_output=True, text=True,
                          timeout=timeout)


def png_spread(path: Path) -> tuple[tuple[int, int], float]:
    """(size, spread): the pixel standard deviation (PIL), or without PIL the number of distinct
    byte values in the decompressed, filtered scanlines (a blank page filters to a handful)."""
    try:
        from PIL import Image, ImageStat
    except ImportError:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        pos, idat, size = 8, b"", (0, 0)
        while pos < len(data):
            n, kind = struct.unpack(">I4s", data[pos:pos + 8])
            body = data[pos + 8:pos + 8 + n]
            if kind == b"IHDR":
                size = struct.unpack(">II", body[:8])
            elif kind == b"IDAT":
                idat += body
            pos += 12 + n
        return size, float(len(set(zlib.decompress(idat))))
    with Image.open(path) as im:
        return im.size, max(ImageStat.Stat(im.convert("L")).stddev)


PROBE_JS = r"""
window.addEventListener("load", () => {
  const rgba = c => { const m = c.match(/[\d.]+/g) || [0, 0, 0, 0];
    return [+m[0], +m[1], +m[2], m.length > 3 ? +m[3] : 1]; };
  const background = el => {   // the first ancestor background that is mostly opaque
    for (let e = el; e; e = e.parentElement) {
      const c = getComputedStyle(e).backgroundColor;
      if (rgba(c)[3] >= 0.5) return c;
    }
    const root = getComputedStyle(document.documentElement).backgroundColor;
    return rgba(root)[3] >= 0.5 ? root : "rgb(255, 255, 255)";
  };
  const charBox = (td, k) => {   // the box of the k-th character of td's text
    const w = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    let n, seen = 0;
    while ((n = w.nextNode())) {
      if (seen + n.length > k) {
        const r = document.createRange();
        r.setStart(n, k - seen); r.setEnd(n, k - seen + 1);
        return r.getBoundingClientRect();
      }
      seen += n.length;
    }
    return null;
  };
  document.querySelectorAll(".dlcb details").forEach(d => { d.open = true; });
  document.querySelectorAll(".dlcb .dl-tabs > .dl-panel").forEach(p => {
    p.style.display = "block"; });
  const out = {listings: [], colors: [], svg: [],
               page: [getComputedStyle(document.body).color, background(document.body)]};
  document.querySelectorAll("table.dl-code").forEach(t => {
    const cell = t.closest(".jp-Cell");
    const rows = [];
    t.querySelectorAll("td.dl-src").forEach(td => {
      const cs = getComputedStyle(td), r = td.getBoundingClientRect();
      const text = td.textContent, k = text.search(/\S/);
      let x = null, cw = null;
      if (k >= 0) {
        const c = charBox(td, k);
        x = c.left - (r.left + parseFloat(cs.paddingLeft) + parseFloat(cs.borderLeftWidth));
        cw = c.width;
      }
      rows.push({text, align: cs.textAlign, ws: cs.whiteSpace, vis: cs.visibility,
                 w: r.width, h: r.height, x, cw, color: cs.color, bg: background(td)});
    });
    out.listings.push({cell: cell ? cell.id : "", lang: t.dataset.lang, rows});
  });
  for (const cls of ["dl-literal", "dl-named", "dl-residual", "dl-library", "dl-fail", "muted",
                     "dl-c-kw", "dl-c-com", "dl-c-lit", "dl-c-str", "dl-c-fn", "dl-c-pre"]) {
    Array.from(document.querySelectorAll(".dlcb ." + cls)).slice(0, 20).forEach(e => {
      if (e.getBoundingClientRect().width > 0)
        out.colors.push({cls, color: getComputedStyle(e).color, bg: background(e)});
    });
  }
  document.querySelectorAll(".dlcb .dl-svg svg").forEach(s => {
    const bg = background(s.parentElement);
    Array.from(s.querySelectorAll("text")).slice(0, 60).forEach(t => {
      out.svg.push({text: t.textContent, fill: getComputedStyle(t).fill, bg});
    });
  });
  const pre = document.createElement("pre");
  pre.id = "dlcb-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
"""
"""Injected before ``</body>``: opens every ``.dlcb`` ``<details>`` and shows every tab panel,
then writes into the DOM (a
``<pre id="dlcb-probe">``, JSON) what ``--dump-dom`` cannot show: per code listing line
(``td.dl-src``) its computed text-align, white-space, visibility, box, the x offset of its first
non-blank character from the cell's content edge and that character's width, its colour and the
background behind it; the colours of the kind, muted and syntax classes; the fill of the inline SVG
texts."""


def probe(page: Path, *args: str) -> dict:
    """Load ``page`` (with ``PROBE_JS`` injected into a copy) in headless Chromium and return the
    probe's JSON; ``args``: more Chromium flags (``--force-dark-mode``)."""
    html = page.read_text(encoding="utf-8")
    html = re.sub(r"<script[^>]*\ssrc=\"https?://[^\"]*\"[^>]*>\s*</script>", "", html)  # offline
    probed = page.with_name(page.stem + ".probe.html")
    probed.write_text(html.replace("</body>", f"<script>{PROBE_JS}</script></body>"),
                      encoding="utf-8")
    r = run_chromium("--virtual-time-budget=10000", "--window-size=1400,900", *args,
                     "--dump-dom", probed.as_uri())
    m = re.search(r'<pre id="dlcb-probe">(.*?)</pre>', r.stdout, re.S)
    assert m, f"no probe output: {r.stderr[-2000:]}"
    return json.loads(unescape(m.group(1)))


def rgb(css: str) -> tuple[float, float, float, float]:
    """A computed colour (``rgb(…)``/``rgba(…)``, as getComputedStyle returns it) as r, g, b, a."""
    v = [float(x) for x in re.findall(r"[\d.]+", css)]
    return (v[0], v[1], v[2], v[3] if len(v) > 3 else 1.0)


def contrast(fg: str, bg: str) -> float:
    """WCAG 2 contrast ratio of ``fg`` over the opaque ``bg`` (``fg``'s alpha blended first)."""
    f, b = rgb(fg), rgb(bg)
    mix = [f[3] * f[i] + (1 - f[3]) * b[i] for i in range(3)]

    def lum(c):
        s = [x / 255 for x in c]
        s = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in s]
        return 0.2126 * s[0] + 0.7152 * s[1] + 0.0722 * s[2]

    hi, lo = sorted((lum(mix), lum(b[:3])), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def check_listing(rows: list[dict], where: str = "") -> None:
    """Every line of a probed code listing is shown as written: left-aligned, whitespace kept
    (``pre``), visible with a box, its first non-blank character indented by exactly its leading
    blanks (one character width each), legible (contrast ≥ 4.5 against its background)."""
    assert rows, f"{where}: an empty listing"
    for i, r in enumerate(rows):
        line = f"{where} line {i + 1} {r['text'][:60]!r}"
        assert r["align"] in ("left", "start"), f"{line}: text-align {r['align']}"
        assert r["ws"] == "pre", f"{line}: white-space {r['ws']}"
        assert r["vis"] == "visible" and r["w"] > 0 and r["h"] > 0, f"{line}: not shown"
        if r["x"] is not None:
            lead = len(r["text"]) - len(r["text"].lstrip(" "))
            assert abs(r["x"] - lead * r["cw"]) <= 1 + 0.25 * r["cw"], \
                f"{line}: starts at {r['x']:.1f}px, {lead} blanks of {r['cw']:.1f}px expected"
        assert contrast(r["color"], r["bg"]) >= 4.5, f"{line}: {r['color']} on {r['bg']}"
