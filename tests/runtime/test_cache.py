"""The kernel caches check what they read back from disk: a truncated, emptied, garbage or edited
numba module file, a corrupt numba index/data file and a corrupt cubin are all rebuilt, and several
processes filling one fresh (or corrupt) cache folder at once all get the same, right kernels.

Every test gets its own ``DLCB_CACHE_DIR``. ``load_numba_module`` memoizes modules per process, so
the tests drop that memo (and the ``sys.modules`` entry) before each load to exercise the disk path.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import subprocess
import sys
import time

import pytest

from dlcb_lab.runtime import numba_cpu
from dlcb_lab.runtime.cache import cache_dir, content_key
from dlcb_lab.runtime.numba_cpu import load_numba_module
from dlcb_lab.runtime.nvrtc import compile_cubin, nvrtc_compile_count

NUMBA_SRC = '''\
# dlcb_lab tests/runtime/test_cache.py: one tiny cached kernel whose result shows which source was compiled
from numba import njit


@njit("float64()", cache=True)
def f():
    return 1.0
'''

CUDA_SRC = r"""
extern "C" __global__ void add1(float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1.0f;
}
"""


def _key(source: str) -> str:
    return content_key(source)[:24]


def _forget(source: str = NUMBA_SRC) -> None:
    """Drop this process's memo of ``source`` so the next load reads the cache folder."""
    numba_cpu._LOADED.pop(_key(source), None)
    sys.modules.pop(f"dlcb_lab_generated_{_key(source)}", None)


def _module_file(source: str = NUMBA_SRC) -> pathlib.Path:
    return cache_dir("numba") / f"dlcb_{_key(source)}.py"


def _load(source: str = NUMBA_SRC):
    _forget(source)
    mod, new = load_numba_module(source)
    assert new
    return mod


def _numba_files(mod, suffix: str) -> list[pathlib.Path]:
    """The numba cache files (``.nbi`` index / ``.nbc`` data) of ``mod``'s kernel ``f``."""
    stem = pathlib.Path(mod.__file__).stem
    return sorted(pathlib.Path(mod.f.stats.cache_path).glob(f"{stem}.*{suffix}"))


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DLCB_CACHE_DIR", str(tmp_path / "cache"))
    _forget()
    yield tmp_path / "cache"
    _forget()


# --- the numba module file ------------------------------------------------------------------------

BROKEN_PY = {
    "truncated": NUMBA_SRC[: NUMBA_SRC.index("    return")].encode(),  # a crash mid-write
    "empty": b"",
    "garbage": b"\x00\xff\xfe garbage \x80\x81" * 40,
}


@pytest.mark.parametrize("kind", list(BROKEN_PY))
def test_broken_module_file_is_rewritten(kind):
    path = _module_file()
    path.write_bytes(BROKEN_PY[kind])
    mod = _load()
    assert mod.f() == 1.0
    assert path.read_text() == NUMBA_SRC
    assert sys.modules[mod.__name__] is mod


def test_edited_module_file_is_not_trusted():
    assert _load().f() == 1.0
    path = _module_file()
    path.write_text(NUMBA_SRC.replace("return 1.0", "return 2.0"))  # valid, same size, wrong
    mod = _load()
    assert mod.f() == 1.0
    assert path.read_text() == NUMBA_SRC


# --- numba's own cache files (index .nbi, data .nbc, in __pycache__ beside the module) -----------

@pytest.mark.parametrize("how", ["truncated", "garbage"])
@pytest.mark.parametrize("suffix", [".nbi", ".nbc"])
def test_corrupt_numba_cache_file_is_rebuilt(suffix, how):
    mod = _load()
    assert mod.f() == 1.0 and sum(mod.f.stats.cache_misses.values()) == 1
    files = _numba_files(mod, suffix)
    assert len(files) == 1, files
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2] if how == "truncated" else b"\x93garbage" * 64)

    mod = _load()  # numba unpickles the corrupt file: the first import fails, the retry rebuilds
    assert mod.f() == 1.0
    assert sum(mod.f.stats.cache_misses.values()) == 1  # compiled afresh ...
    mod = _load()
    assert mod.f() == 1.0
    assert sum(mod.f.stats.cache_hits.values()) == 1  # ... and the rebuilt cache files are good


def test_import_that_keeps_failing_names_the_file_and_leaves_no_module():
    source = NUMBA_SRC.replace("return 1.0", "return no_such_global")
    name = f"dlcb_lab_generated_{_key(source)}"
    _forget(source)
    with pytest.raises(RuntimeError) as info:
        load_numba_module(source)
    assert isinstance(info.value, numba_cpu.NumbaModuleLoadError)
    assert str(_module_file(source)) in str(info.value) and "no_such_global" in str(info.value)
    assert name not in sys.modules and _key(source) not in numba_cpu._LOADED
    assert _module_file(source).read_text() == source


# --- the cubin cache ------------------------------------------------------------------------------

BROKEN_CUBIN = {
    "truncated": lambda b: b[: len(b) // 2],
    "garbage": lambda b: b"\xde\xad\xbe\xef" * 256,
    "empty": lambda b: b"",
    "flipped-byte": lambda b: b[:-1] + bytes([b[-1] ^ 0x01]),
}


@pytest.mark.parametrize("kind", list(BROKEN_CUBIN))
def test_corrupt_cubin_is_recompiled(tmp_cache, kind):
    cubin = compile_cubin(CUDA_SRC, arch="sm_90")
    assert cubin.startswith(b"\x7fELF")
    (path,) = (tmp_cache / "cubin").glob("*.cubin")
    path.write_bytes(BROKEN_CUBIN[kind](path.read_bytes()))
    n0 = nvrtc_compile_count()
    assert compile_cubin(CUDA_SRC, arch="sm_90") == cubin
    assert nvrtc_compile_count() == n0 + 1  # recompiled, not served from the broken file ...
    assert compile_cubin(CUDA_SRC, arch="sm_90") == cubin
    assert nvrtc_compile_count() == n0 + 1  # ... and the rewritten entry is a hit again


# --- several processes, one cache folder ----------------------------------------------------------

# The children skip ``dlcb_lab/__init__`` (it imports torch: seconds per process) by registering a
# bare package for ``dlcb_lab``; the runtime modules need nothing from it. They report "ready", wait
# for the go file so they all hit the cache at the same moment, then load the module and compile.
CHILD = r"""
import hashlib, json, os, sys, time, types
pkg = types.ModuleType("dlcb_lab"); pkg.__path__ = [sys.argv[1]]; sys.modules["dlcb_lab"] = pkg
from dlcb_lab.runtime.numba_cpu import load_numba_module
from dlcb_lab.runtime.nvrtc import compile_cubin, nvrtc_compile_count, nvrtc_version
nvrtc_version()
numba_src, cuda_src, go = json.loads(sys.argv[2])
print("ready", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.005)
mod, _ = load_numba_module(numba_src)
cubin = compile_cubin(cuda_src, arch="sm_90")
print(json.dumps({"f": mod.f(), "sha": hashlib.sha256(cubin).hexdigest(),
                  "elf": cubin.startswith(b"\x7fELF"), "nvrtc": nvrtc_compile_count()}), flush=True)
"""


def _run_children(n: int, tmp_path: pathlib.Path) -> list[dict]:
    pkg_dir = str(pathlib.Path(numba_cpu.__file__).resolve().parents[1])
    go = tmp_path / "go"
    args = [sys.executable, "-c", CHILD, pkg_dir, json.dumps([NUMBA_SRC, CUDA_SRC, str(go)])]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    try:
        for p in procs:
            line = p.stdout.readline()
            assert line.strip() == "ready", line + p.stderr.read()
        go.touch()
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


@pytest.mark.parametrize("n,start", [(4, "fresh"), (8, "fresh"), (4, "corrupt")])
def test_concurrent_processes_share_one_cache(tmp_path, tmp_cache, n, start):
    expected_sha = None
    if start == "corrupt":  # every entry present but broken: all children repair it at once
        expected_sha = hashlib.sha256(compile_cubin(CUDA_SRC, arch="sm_90")).hexdigest()
        (cubin_file,) = (tmp_cache / "cubin").glob("*.cubin")
        cubin_file.write_bytes(cubin_file.read_bytes()[:100])
        mod = _load()
        for f in _numba_files(mod, ".nbi") + _numba_files(mod, ".nbc"):
            f.write_bytes(b"garbage")
        _module_file().write_text(NUMBA_SRC.replace("return 1.0", "return 2.0"))
        _forget()
    t0 = time.perf_counter()
    results = _run_children(n, tmp_path)
    print(f"{n} processes ({start} cache): {time.perf_counter() - t0:.1f} s")
    assert all(r["f"] == 1.0 and r["elf"] for r in results), results
    assert len({r["sha"] for r in results}) == 1, results
    assert all(r["nvrtc"] in (0, 1) for r in results), results
    # what they left behind is a complete, valid cache: hits for this process
    n0 = nvrtc_compile_count()
    cubin = compile_cubin(CUDA_SRC, arch="sm_90")
    assert nvrtc_compile_count() == n0 and hashlib.sha256(cubin).hexdigest() == results[0]["sha"]
    if expected_sha is not None:
        assert results[0]["sha"] == expected_sha
    assert _module_file().read_text() == NUMBA_SRC
    mod = _load()
    assert mod.f() == 1.0 and sum(mod.f.stats.cache_hits.values()) == 1
    assert not [p for p in tmp_cache.rglob("*") if ".tmp" in p.name]  # no temp files left over


def _generated(tmp_path, monkeypatch):
    """A real model's numba module source and its distinct kernels (name, size), compiled into
    a fresh cache folder."""
    import torch

    import dlcb_lab as dl
    from dlcb_lab.kgen.emit import numba_kernel
    from dlcb_lab.runtime.build import cpu_module, distinct

    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(c, c + 1, 3, padding=1),
                                                  torch.nn.BatchNorm2d(c + 1), act())
                              for c, act in zip(range(3, 9), [torch.nn.ReLU, torch.nn.SiLU,
                                                              torch.nn.Hardswish,
                                                              torch.nn.Sigmoid, torch.nn.GELU,
                                                              torch.nn.Tanh])]).eval()
    cm = dl.compile(m, (torch.randn(2, 3, 8, 8),), backend="cpu",
                    config={"capture_cache": False})
    bodies = [k.body for k in cm.pipeline.kernels]
    rep = distinct(bodies, "cpu")
    kernels = [(b.name, len(numba_kernel(b))) for i, b in enumerate(bodies) if rep[i] == i]
    monkeypatch.setenv("DLCB_CACHE_DIR", str(tmp_path / "shares"))
    monkeypatch.setattr(numba_cpu, "MIN_SHARE", 2)
    source = cpu_module(bodies)[0]
    _forget(source)   # the compile loaded it: the test loads it again, from the new folder
    return source, kernels


def test_kernels_compile_in_shares_across_processes(tmp_path, monkeypatch):
    """``numba_workers``: this process compiles one share, worker processes the others, each
    into numba's cache; after it every kernel is cached and the import loads them all."""
    source, kernels = _generated(tmp_path, monkeypatch)
    assert len(kernels) >= 6
    path = (cache_dir("numba") / f"dlcb_{content_key(source)[:24]}.py").absolute()
    path.write_text(source)
    assert numba_cpu._cached(path) == 0
    numba_cpu._compile_shares(path, source, kernels, workers=3)
    assert numba_cpu._cached(path) == len(kernels)
    assert numba_cpu._ONLY is None and numba_cpu._module_name(path) not in sys.modules
    mod, fresh = load_numba_module(source, kernels, workers=3)
    assert fresh and all(getattr(mod, n).signatures for n, _ in kernels)


def test_a_failed_worker_costs_only_time(tmp_path, monkeypatch, caplog):
    source, kernels = _generated(tmp_path, monkeypatch)
    monkeypatch.setattr(numba_cpu, "_WORKER", "import sys; sys.exit(3)")
    mod, _ = load_numba_module(source, kernels, workers=2)
    assert "exited with 3" in caplog.text
    assert all(getattr(mod, n).signatures for n, _ in kernels)   # the import compiled them
