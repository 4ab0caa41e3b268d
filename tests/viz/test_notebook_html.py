"""Every notebook as a reader sees it: executed once (nbclient), exported with nbconvert's lab
template (JupyterLab's own stylesheet, light and dark theme) and loaded in headless Chromium.

JupyterLab's rendered-HTML rules (``:not(.jp-RenderedMarkdown).jp-RenderedHTMLCommon td
{text-align: right}``, cell padding, ``pre`` margins, table layout) outrank a plain ``.dlcb td``;
a probe injected into the page (``htmlcheck.PROBE_JS``) reads the computed style and the geometry
of every code-listing line, so a listing shifted right, collapsed or invisible fails here. The
export itself rewrites the HTML (BeautifulSoup collapses whitespace-only text between tags), so
each listing's text in the browser is compared with the source the cell's output holds. The four
notebooks run once, in one kernel (``%reset -f`` between them): this is the suite's execution of
them (05 and 06 run in ``test_figures``), so it runs without Chromium too."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from htmlcheck import Parsed, check_listing, chromium, contrast, png_spread, probe, run_chromium

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
nbconvert = pytest.importorskip("nbconvert")

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
LISTINGS = {"01_tour": {"cuda", "python"}, "03_constraint_graphs": {"python"},
            "04_coordinate_maps": {"cuda", "python"}}
"""Notebooks whose outputs show kernel listings, and the languages shown (03 shows a CPU
compile's report, which lists the numba code that ran and no CUDA)."""

SHOT_CSS = """<style>
.jp-Cell:not(:has(table.dl-code)), .jp-Cell .jp-InputArea { display: none !important; }
</style>"""
"""Screenshots show only the cells with a code listing, outputs only, from the top."""


@pytest.fixture(scope="module")
def executed():
    """(the four notebooks as one executed notebook, cell id -> notebook name). Cell ids get
    their notebook's number as a prefix, so the exported page tells which notebook a listing
    is from."""
    combined = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3",
                                                                  "display_name": "Python 3",
                                                                  "language": "python"}})
    owner: dict[str, str] = {}
    for k, path in enumerate(PATHS):
        nb = nbformat.read(path, as_version=4)
        if k:
            combined.cells.append(nbformat.v4.new_code_cell("%reset -f", id=f"reset-{k}"))
        for c in nb.cells:
            c = nbformat.from_dict(dict(c))
            c.id = f"{path.stem[:2]}-{c.get('id') or len(combined.cells)}"
            owner[c.id] = path.stem
            combined.cells.append(c)
    nbclient.NotebookClient(combined, timeout=600, kernel_name="python3",
                            store_widget_state=False,
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return combined, owner


def test_every_cell_runs(executed):
    """nbclient raised on the first cell error; every code cell ran and none shows a traceback."""
    nb, owner = executed
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert {owner[c.id] for c in code if not c.id.startswith("reset")} == {p.stem for p in PATHS}
    for c in code:
        assert c.execution_count, f"{owner.get(c.id, c.id)}: cell {c.id} did not run"
        assert not [o for o in c.outputs if o.output_type == "error"], owner.get(c.id, c.id)


@pytest.fixture(scope="module")
def browser():
    if chromium() is None:
        pytest.skip("chromium not installed (make chromium, as root)")


@pytest.fixture(scope="module")
def pages(executed, browser, tmp_path_factory):
    """theme -> the exported page (nbconvert lab template)."""
    nb, _ = executed
    out = tmp_path_factory.mktemp("notebooks")
    pages = {}
    for theme in ("light", "dark"):
        html, _ = nbconvert.HTMLExporter(template_name="lab", theme=theme).from_notebook_node(nb)
        pages[theme] = out / f"notebooks.{theme}.html"
        pages[theme].write_text(html, encoding="utf-8")
    return pages


@pytest.fixture(scope="module")
def probes(pages):
    """theme -> what ``htmlcheck.PROBE_JS`` read from the exported page in Chromium (both themes
    at once)."""
    with ThreadPoolExecutor(len(pages)) as pool:
        return dict(zip(pages, pool.map(probe, pages.values())))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_code_listings_read_as_written(executed, probes, theme):
    """Each kernel listing in each notebook's export: every line left-aligned, whitespace kept,
    indented by its leading blanks, visible and legible; the text is the source shown."""
    nb, owner = executed
    got = probes[theme]
    shown: dict[tuple[str, str], list[str]] = {}
    for listing in got["listings"]:
        cell = listing["cell"].removeprefix("cell-id=")
        where = f"{owner.get(cell, '?')} ({theme}, {listing['lang']})"
        check_listing(listing["rows"], where)
        shown.setdefault((cell, listing["lang"]), []).extend(r["text"] for r in listing["rows"])
    # the text each listing shows is the source the cell's output holds, blanks included (an
    # export that collapses whitespace between tags would strip the indentation)
    written: dict[tuple[str, str], list[str]] = {}
    for c in nb.cells:
        for o in c.get("outputs", []):
            for lang, lines in Parsed(o.get("data", {}).get("text/html", "")).src.items():
                written.setdefault((c.id, lang), []).extend(lines)
    assert shown.keys() == written.keys()
    for key, lines in written.items():
        assert shown[key] == lines, f"{owner[key[0]]} cell {key[0]} {key[1]}: text differs"
    seen: dict[str, set[str]] = {}
    for cell, lang in shown:
        seen.setdefault(owner[cell], set()).add(lang)
    assert {k: v for k, v in seen.items() if k in LISTINGS} == LISTINGS, seen
    kernels = [ln for ln in got["listings"] if ln["lang"] == "cuda"
               and any("__global__" in r["text"] for r in ln["rows"])]
    assert kernels and all(any(r["text"].startswith("    ") for r in ln["rows"])
                           for ln in kernels), "kernel bodies are indented"


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_colours_legible_in_both_themes(probes, theme):
    """The literal / named / residual colours and muted text (contrast ≥ 4.5, WCAG AA), the
    syntax colours (≥ 3: they are the host editor theme's own, JupyterLab's dark comment colour
    is 4.1) and the inline diagrams' text (≥ 3), against the background they are drawn on."""
    got = probes[theme]
    body_fg, body_bg = got["page"]
    dark = contrast(body_bg, "rgb(0, 0, 0)") < contrast(body_bg, "rgb(255, 255, 255)")
    assert dark == (theme == "dark"), got["page"]
    kinds = {c["cls"] for c in got["colors"]}
    assert {"dl-literal", "dl-named", "dl-residual", "dl-c-kw"} <= kinds, kinds
    for c in got["colors"]:
        assert contrast(c["color"], c["bg"]) >= (3.0 if c["cls"].startswith("dl-c-") else 4.5), c
    assert got["svg"]
    for t in got["svg"]:
        if t["text"].strip():
            assert contrast(t["fill"], t["bg"]) >= 3.0, t


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_listing_screenshot(pages, theme):
    """A screenshot of the listing cells (outputs only) is not blank; it stays in the test's
    temporary folder for a look."""
    page = pages[theme]
    html = page.read_text(encoding="utf-8")
    html = re.sub(r"<script[^>]*\ssrc=\"https?://[^\"]*\"[^>]*>\s*</script>", "", html)
    shot_page = page.with_name(f"listings.{theme}.html")
    shot_page.write_text(html.replace("</head>", SHOT_CSS + "</head>"), encoding="utf-8")
    shot = page.with_name(f"listings.{theme}.png")
    r = run_chromium(f"--screenshot={shot}", "--window-size=1400,1600",
                     "--virtual-time-budget=5000", shot_page.as_uri())
    assert shot.exists(), r.stderr[-2000:]
    size, spread = png_spread(shot)
    assert size == (1400, 1600) and spread > 10, "the screenshot is blank"
