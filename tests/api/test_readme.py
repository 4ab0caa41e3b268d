"""The README's promises: its quickstart runs as pasted, it stays short, and every relative link in
it and in ``docs/`` names a file that exists.

Each fenced ``python`` block under the ``## Quickstart`` heading runs in a fresh namespace (so each
block must be self-contained, as a reader pastes it) with a temporary working directory (the blocks
write files). A block that imports ``transformers`` is skipped where transformers is missing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINES = 220

_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def section(text: str, heading: str) -> str:
    """The body of the level-2 section ``heading``, up to the next level-2 heading."""
    m = re.search(rf"^## {re.escape(heading)}[ \t]*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"README.md has no '## {heading}' section"
    return m.group(1)


def quickstart_blocks() -> list[str]:
    return _FENCE.findall(section(README.read_text(encoding="utf-8"), "Quickstart"))


def relative_links(path: Path) -> list[str]:
    """Link targets in ``path`` that are not URLs or in-page anchors, without their #fragment.
    Fenced code blocks and inline code are left out (``k[grid, block](*args)`` is no link)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    text = re.sub(r"`[^`\n]*`", "", text)
    out = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue   # http:, https:, mailto:, ...; an anchor in the same page
        out.append(target.split("#", 1)[0])
    return out


def test_quickstart_has_a_torchvision_and_a_transformers_block():
    blocks = quickstart_blocks()
    assert len(blocks) >= 2, f"{len(blocks)} python block(s) under '## Quickstart'"
    assert any("torchvision" in b for b in blocks)
    assert any("transformers" in b for b in blocks)


@pytest.mark.parametrize("i", range(len(quickstart_blocks())))
def test_quickstart_block_runs_as_pasted(i, tmp_path):
    """Each block in a fresh interpreter, as a reader pastes it (the suite's own process has
    torch state other tests set, such as cuDNN's global flags)."""
    block = quickstart_blocks()[i]
    if re.search(r"^\s*(from|import)\s+transformers\b", block, re.M):
        pytest.importorskip("transformers")
    out = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, f"README quickstart block {i + 1}:\n{out.stderr[-3000:]}"


def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (at most {MAX_LINES}): move depth to docs/"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    missing = [t for t in relative_links(path) if not (path.parent / t).exists()]
    assert not missing, f"{path.relative_to(ROOT)}: links to missing files: {missing}"


def test_docs_exist():
    names = {p.name for p in DOCS}
    assert {"index.md", "design.md", "bridge.md", "reliability.md", "benchmarks.md",
            "notebooks.md"} <= names, sorted(names)
