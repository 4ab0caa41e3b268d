"""Faults (issue 16): a process killed (SIGKILL) in the middle of writing an artifact or a cache
entry leaves nothing a later process trusts: the old artifact stays whole and loads, the partial
file beside it is refused, and the cache entry is rebuilt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.artifact import ArtifactError

ROOT = Path(__file__).resolve().parents[2]


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.linspace(-1, 1, 6))

    def forward(self, x):
        return torch.relu(x * self.w + 0.5).sum(-1)


def _killed_midway(script: str, marker: Path, env: dict | None = None) -> None:
    """Run ``script`` in a child process until it writes ``marker`` (it then hangs in the middle
    of its write), and kill it with SIGKILL."""
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        while not marker.exists():
            if p.poll() is not None:
                pytest.fail(f"the child ended before the write: {p.communicate()[1][-2000:]}")
            if time.monotonic() - t0 > 180:
                pytest.fail("the child never reached the write")
            time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()
    assert p.returncode == -signal.SIGKILL


def test_killed_while_saving_leaves_the_old_artifact(tmp_path):
    path, marker = tmp_path / "m.dlcb", tmp_path / "writing"
    x = torch.randn(3, 4, 6)
    cm = dl.compile(Affine(), x, dynamic={0: {0: "N"}}, backend="cpu")
    cm.save(path)
    old = path.read_bytes()
    _killed_midway(f"""
        import time, torch, zipfile
        import dlcb_lab as dl
        from tests.runtime.test_faults import Affine
        cm = dl.compile(Affine(), torch.randn(5, 4, 6), dynamic={{0: {{0: "N"}}}}, backend="cpu")
        real, n = zipfile.ZipFile.writestr, []
        def writestr(self, name, data, *a, **kw):
            real(self, name, data, *a, **kw)
            n.append(name)
            if len(n) == 2:   # the manifest and one member written: stop here
                self.fp.flush()
                open({str(marker)!r}, "w").close()
                time.sleep(600)
        zipfile.ZipFile.writestr = writestr
        cm.save({str(path)!r})
    """, marker)
    assert path.read_bytes() == old
    y = torch.randn(7, 4, 6)
    torch.testing.assert_close(dl.load(path)(y), Affine()(y))
    (partial,) = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert partial.stat().st_size > 0
    with pytest.raises(ArtifactError):
        dl.load(partial)


def test_killed_while_writing_a_cubin_leaves_no_entry(tmp_path, monkeypatch):
    """The cubin cache writes a temp file and renames it: a writer killed with half the bytes
    written leaves the temp file, no entry; the next process compiles and caches the cubin."""
    from dlcb_lab.runtime.nvrtc import compile_cubin, nvrtc_compile_count

    src = 'extern "C" __global__ void k(float* o) { o[threadIdx.x] = 2.0f; }\n'
    cache, marker = tmp_path / "cache", tmp_path / "writing"
    _killed_midway(f"""
        import os, time
        from dlcb_lab.runtime import cache
        real = os.fdopen
        def fdopen(fd, mode="r", *a, **kw):
            f = real(fd, mode, *a, **kw)
            if "w" in mode:
                write = f.write
                def half(data):
                    write(data[:len(data) // 2])
                    f.flush()
                    open({str(marker)!r}, "w").close()
                    time.sleep(600)
                f.write = half
            return f
        cache.os.fdopen = fdopen
        from dlcb_lab.runtime.nvrtc import compile_cubin
        compile_cubin({src!r}, arch="sm_90")
    """, marker, env={"DLCB_CACHE_DIR": str(cache)})
    leftovers = list((cache / "cubin").iterdir())
    assert leftovers and all(p.name.endswith(".tmp") for p in leftovers), leftovers
    monkeypatch.setenv("DLCB_CACHE_DIR", str(cache))
    n0 = nvrtc_compile_count()
    cubin = compile_cubin(src, arch="sm_90")
    assert cubin[:4] == b"\x7fELF" and nvrtc_compile_count() == n0 + 1
    assert compile_cubin(src, arch="sm_90") == cubin and nvrtc_compile_count() == n0 + 1


def test_host_memory_flat_across_calls_at_varying_shapes():
    """2,000 calls of one compiled module at 40 batch sizes and two ranks (a JIT thunk): the
    Python heap, garbage collected, grows by under 16 kB after the warm-up (caches are per
    signature, not per shape; measured here: under 200 bytes)."""
    import gc
    import tracemalloc

    cm = dl.compile(Affine(), torch.randn(3, 4, 6), dynamic={0: {0: "N"}}, backend="cpu")
    xs = [torch.randn(n, 4, 6) for n in range(1, 41)] + [torch.randn(2, 5, 4, 6)]
    for x in xs:   # warm-up: every signature seen once (the rank-4 one compiles)
        cm(x)
    tracemalloc.start()
    try:
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        for i in range(2000):
            cm(xs[i % len(xs)])
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert grown < 16 * 1024, f"{grown} bytes"
    assert cm.stats()["jit_builds"] == 1 and cm.stats()["compiles"] == 2


@pytest.mark.slow
def test_eight_processes_compile_the_zoo_into_one_cache(tmp_path):
    """Eight processes start together on one empty cache, each compiling three TorchVision models
    (numba on the CPU; the same kernels, so they race on every entry) and checking them against
    eager: all succeed, and the cache they leave holds no temp files."""
    script = textwrap.dedent("""
        import sys, torch, torchvision
        import dlcb_lab as dl
        torch.manual_seed(0)
        for name in ("resnet18", "squeezenet1_1", "mobilenet_v3_small"):
            m = getattr(torchvision.models, name)(num_classes=10).eval()
            x = torch.randn(2, 3, 40, 40)
            cm = dl.compile(m, (x,), dynamic={0: {0: "N"}}, backend="cpu")
            y = torch.randn(3, 3, 40, 40)
            with torch.no_grad():
                torch.testing.assert_close(cm(y), m(y), rtol=1e-4, atol=1e-4)
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLCB_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    outs = [p.communicate(timeout=1200) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip().endswith("ok"), err[-3000:]
    assert not [p for p in (tmp_path / "cache").rglob("*") if ".tmp" in p.name]
