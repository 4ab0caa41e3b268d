"""HTML checks shared by the rendering tests: tag balance, self-containedness, visible text,
headings and the source lines shown in code listings."""

from __future__ import annotations

import re
from html.parser import HTMLParser

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
