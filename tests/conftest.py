import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

# Kernels compiled by the tests go to a private cache (numba's on-disk cache stays warm across runs).
os.environ.setdefault("DLCB_CACHE_DIR", os.path.join(tempfile.gettempdir(), "dlcb_test_cache"))
# pytest-xdist already runs a worker per core: numba builds stay in-process (one test covers more)
os.environ.setdefault("DLCB_NUMBA_WORKERS", "1")
# Every compile runs the whole pipeline (the program cache has its own tests, which turn it on)
os.environ.setdefault("DLCB_PROGRAM_CACHE", "0")
# Tests are layered by stage (tests/<stage>/); the shared helpers (harness, models, fuzz, ...) live
# in tests/tools and are imported by their module names.
sys.path.insert(0, str(Path(__file__).parent / "tools"))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
