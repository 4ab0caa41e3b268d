"""The test folders a change touches, in pipeline order: ``python tests/tools/stages.py [REV]``
prints them (``make test-changed`` runs them before anything else). A file under
``dlcb_lab/<package>/`` maps to that package's folders below, a top-level module to ``tests/api``,
a test file to its own folder; a change outside both (docs, data) maps to none.

Changed files: ``git diff --name-only REV`` (default ``HEAD``) and untracked files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORDER = ("dims", "ops", "bridge", "passes", "kgen", "runtime", "models", "api", "viz", "bench",
         "fuzz")
"""The folders of ``tests/``, in the order of the pipeline they test."""
PACKAGE_TESTS = {"dims": ("dims",), "ir": ("ops",), "bridge": ("bridge", "ops"),
                 "passes": ("passes",), "kgen": ("kgen",), "hostgen": ("kgen", "models"),
                 "runtime": ("runtime",), "artifact": ("runtime",), "viz": ("viz",),
                 "bench": ("bench",)}


def folders(paths: list[str]) -> list[str]:
    """The test folders for changed ``paths`` (repository-relative), in ``ORDER``."""
    hit: set[str] = set()
    for p in paths:
        parts = Path(p).parts
        if parts[:1] == ("dlcb_lab",):
            hit.update(PACKAGE_TESTS.get(parts[1], ()) if len(parts) > 2 else ("api",))
        elif parts[:1] == ("tests",) and len(parts) > 2 and parts[1] in ORDER:
            hit.add(parts[1])
    return [f"tests/{d}" for d in ORDER if d in hit]


def changed(rev: str = "HEAD") -> list[str]:
    def git(*args: str) -> list[str]:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.split()
    return git("diff", "--name-only", rev) + git("ls-files", "--others", "--exclude-standard")


if __name__ == "__main__":
    print(" ".join(folders(changed(*sys.argv[1:2]))))
