"""Compiled-module artifacts (``dlcb_lab.artifact``): save in one process, load in another with an
empty kernel cache and no kernel build; corrupt, truncated, other-version and malicious
artifacts are ``ArtifactError``s."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch
import torch.nn as nn

import dlcb_lab as dl
from dlcb_lab.artifact import FORMAT_VERSION, ArtifactDeviceError, load, save
from dlcb_lab.errors import ArtifactError, DeviceError
from dlcb_lab.kgen.entries import entries

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Net(nn.Module):
    """Parameters and buffers (conv, folded BN, linear), a library call, a reduction, a row op."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)

    def forward(self, x, y):
        h = torch.relu(self.bn(self.conv(x)))
        return self.fc(h.mean((2, 3))) + y, torch.softmax(h.flatten(1), -1)


DYNAMIC = {"x": {0: "N", 2: "H", 3: "W"}}


def _net() -> Net:
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():   # non-trivial running stats, so the BN fold matters
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
    return net


def _inputs(n: int, h: int, w: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, h, w, generator=g), torch.randn(1, 5, generator=g)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(eager module, compiled module, artifact path) of a cpu compile."""
    net = _net()
    cm = dl.compile(net, _inputs(2, 8, 8, 0), dynamic=DYNAMIC, backend="cpu")
    path = save(cm, tmp_path_factory.mktemp("artifact") / "net.dlcb")
    return net, cm, path


_LOADER = textwrap.dedent("""
    import json, sys, torch
    from dlcb_lab.artifact import load
    from dlcb_lab.runtime.nvrtc import nvrtc_compile_count
    path, inputs, out = sys.argv[1:]
    cm = load(path)
    outs = [cm(*xs) for xs in torch.load(inputs)]
    torch.save(outs, out)
    misses = sum(sum(k.launcher.fn.stats.cache_misses.values()) for k in cm.pipeline.kernels
                 if hasattr(k.launcher, "fn"))
    print(json.dumps({"stats": cm.stats(), "numba_misses": misses,
                      "nvrtc": nvrtc_compile_count(), "device": str(outs[0][0].device)}))
""")


def _load_elsewhere(path, calls, tmp_path) -> tuple[dict, list]:
    """Load ``path`` in a new Python process with an empty ``$DLCB_CACHE_DIR`` and numba's cache
    in the default place under it; run it on each input tuple of ``calls``. Returns (its report,
    its outputs)."""
    cache = tmp_path / "empty_cache"
    cache.mkdir()
    torch.save(calls, tmp_path / "inputs.pt")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["DLCB_CACHE_DIR"] = str(cache)
    proc = subprocess.run([sys.executable, "-c", _LOADER, str(path), str(tmp_path / "inputs.pt"),
                           str(tmp_path / "outputs.pt")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    return report, torch.load(tmp_path / "outputs.pt")


def test_load_in_new_process_runs_without_builds(saved, tmp_path):
    net, cm, path = saved
    calls = [_inputs(3, 9, 7, 1), _inputs(6, 8, 12, 2)]   # two batch sizes (and H, W)
    report, outs = _load_elsewhere(path, calls, tmp_path)
    assert report["stats"]["kernel_builds"] == 0
    assert report["numba_misses"] == 0 and report["nvrtc"] == 0
    assert report["stats"]["kernels"] == len(cm.pipeline.kernels) == 3
    with torch.no_grad():
        for xs, got in zip(calls, outs):
            for a, b, e in zip(got, cm(*xs), net(*xs)):
                assert torch.equal(a, b)                      # the same kernels as the original
                torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def test_without_numba_cache_files_load_counts_builds(saved, tmp_path):
    """The counter is numba's: strip the shipped cache files and the new process compiles all
    three kernels (and still computes the same)."""
    net, cm, path = saved
    stripped = tmp_path / "stripped.dlcb"
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(stripped, "w") as out:
        m = json.loads(z.read("manifest.json"))
        keep = [n for n in z.namelist() if "/numba/" not in n and n != "manifest.json"]
        m["members"] = {n: m["members"][n] for n in keep}
        m["units"][0]["numba_files"] = []
        out.writestr("manifest.json", json.dumps(m))
        for n in keep:
            out.writestr(n, z.read(n))
    xs = _inputs(3, 9, 7, 1)
    report, outs = _load_elsewhere(stripped, [xs], tmp_path)
    assert report["stats"]["kernel_builds"] == report["numba_misses"] == 3
    for a, b in zip(outs[0], cm(*xs)):
        assert torch.equal(a, b)


def test_load_same_process_and_errors_kept(saved):
    net, cm, path = saved
    cm2 = load(path)
    assert cm2.stats()["kernel_builds"] == 0 and repr(cm2.signature) == repr(cm.signature)
    xs = _inputs(4, 6, 6, 3)
    for a, b in zip(cm2(*xs), cm2(x=xs[0], y=xs[1])):
        assert torch.equal(a, b)
    with pytest.raises(dl.ShapeMismatch):
        cm2(torch.randn(2, 4, 8, 8), xs[1])   # C is compiled as 3
    assert [type(c).__name__ for c in cm2.pipeline.constraints] == \
        [type(c).__name__ for c in cm.pipeline.constraints]   # the records came along


def test_static_module_roundtrip(tmp_path):
    net = _net()
    xs = _inputs(2, 5, 5, 4)
    cm = load(save(dl.compile(net, xs, dynamic=False, backend="cpu"), tmp_path / "s.dlcb"))
    assert cm.stats()["thunk"] == "static"
    with torch.no_grad():
        for a, e in zip(cm(*xs), net(*xs)):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    with pytest.raises(dl.ShapeMismatch):
        cm(*_inputs(3, 5, 5, 4))


# --- damaged and hostile artifacts ------------------------------------------------------------

def _rewrite(src, dst, manifest=None, members=None, fix_digests=True):
    """Copy artifact ``src`` to ``dst``: ``manifest(m)`` edits the manifest, ``members`` replaces
    member bytes; digests recomputed (so the check under test is not the digest) unless
    ``fix_digests`` is False."""
    with zipfile.ZipFile(src) as z:
        data = {n: z.read(n) for n in z.namelist()}
    m = json.loads(data.pop("manifest.json"))
    data.update(members or {})
    if fix_digests:
        m["members"] = {n: hashlib.sha256(d).hexdigest() for n, d in data.items()}
    if manifest:
        manifest(m)
    with zipfile.ZipFile(dst, "w") as z:
        z.writestr("manifest.json", json.dumps(m))
        for n, d in data.items():
            z.writestr(n, d)
    return dst


def _member_names(path) -> list[str]:
    with zipfile.ZipFile(path) as z:
        return z.namelist()


@pytest.mark.parametrize("member", ["unit0/records.pkl", "tensors.pt", "unit0/kernels.py",
                                    "numba_index"])
def test_corrupt_member_fails_digest(saved, tmp_path, member):
    path = saved[2]
    if member == "numba_index":
        member = next(n for n in _member_names(path) if n.endswith(".nbi"))
    with zipfile.ZipFile(path) as z:
        blob = bytearray(z.read(member))
    blob[len(blob) // 2] ^= 0x01
    bad = _rewrite(path, tmp_path / "bad.dlcb", members={member: bytes(blob)}, fix_digests=False)
    with pytest.raises(ArtifactError, match=f"{member}.*SHA-256"):
        load(bad)


def test_flipped_byte_in_file(saved, tmp_path):
    raw = bytearray(saved[2].read_bytes())
    for pos in (len(raw) // 3, len(raw) // 2, len(raw) - 30):   # member data and zip directory
        bad = bytearray(raw)
        bad[pos] ^= 0xFF
        (tmp_path / "flip.dlcb").write_bytes(bytes(bad))
        with pytest.raises(ArtifactError):
            load(tmp_path / "flip.dlcb")


@pytest.mark.parametrize("keep", [0, 100, 0.5, -22])
def test_truncated_file(saved, tmp_path, keep):
    raw = saved[2].read_bytes()
    n = int(len(raw) * keep) if isinstance(keep, float) else keep % len(raw) if keep else 0
    (tmp_path / "cut.dlcb").write_bytes(raw[:n])
    with pytest.raises(ArtifactError, match="truncated or corrupt"):
        load(tmp_path / "cut.dlcb")


def test_other_versions_refused(saved, tmp_path):
    path = saved[2]
    bad = _rewrite(path, tmp_path / "v1.dlcb", manifest=lambda m: m.update(format_version=1))
    with pytest.raises(ArtifactError,
                       match=f"format version 1; this dlcb_lab reads version {FORMAT_VERSION}"):
        load(bad)
    bad = _rewrite(path, tmp_path / "old.dlcb", manifest=lambda m: m.update(dlcb_lab="0.0.1"))
    with pytest.raises(ArtifactError, match="written by dlcb_lab '0.0.1'"):
        load(bad)
    bad = _rewrite(path, tmp_path / "other.dlcb", manifest=lambda m: m.update(format="npz"))
    with pytest.raises(ArtifactError, match="does not describe a dlcb-artifact"):
        load(bad)


def test_not_an_artifact(tmp_path):
    with zipfile.ZipFile(tmp_path / "plain.zip", "w") as z:
        z.writestr("a.txt", "hello")
    with pytest.raises(ArtifactError, match="no manifest.json at the start"):
        load(tmp_path / "plain.zip")
    with pytest.raises(ArtifactError, match="no such file"):
        load(tmp_path / "missing.dlcb")
    with pytest.raises(ArtifactError, match="takes a CompiledModule"):
        save(object(), tmp_path / "x.dlcb")


class _Evil:
    def __init__(self, target, *args):
        self.target, self.args = target, args

    def __reduce__(self):
        return self.target, self.args


@pytest.mark.parametrize("target", ["os.system", "builtins.eval", "numba_cpu._exec_module",
                                    "torch.load"])
def test_pickle_with_code_is_refused(saved, tmp_path, target):
    marker = tmp_path / "pwned"
    cmd = f"touch {marker}"
    if target == "os.system":
        evil = _Evil(os.system, cmd)
    elif target == "builtins.eval":
        evil = _Evil(eval, f"__import__('os').system({cmd!r})")
    elif target == "torch.load":
        evil = _Evil(torch.load, str(marker))
    else:
        from dlcb_lab.runtime import numba_cpu

        evil = _Evil(numba_cpu._exec_module, "m", str(marker), f"open({str(marker)!r}, 'w')")
    blob = pickle.dumps([1, 2, evil], protocol=2)
    bad = _rewrite(saved[2], tmp_path / "evil.dlcb", members={"unit0/records.pkl": blob})
    with pytest.raises(ArtifactError, match="not an allowed record class"):
        load(bad)
    assert not marker.exists()


def test_cuda_artifact_needs_its_device(saved, tmp_path):
    """A cuda artifact (here: the cpu one relabelled, arch sm_10) without CUDA or on another arch."""
    def to_cuda(m):
        m["backend"] = "cuda"
        m["arch"] = "sm_10"
        m["units"][0].update(backend="cuda", arch="sm_10")

    bad = _rewrite(saved[2], tmp_path / "cuda.dlcb", manifest=to_cuda)
    with pytest.raises(ArtifactDeviceError, match="no CUDA device" if not
                       torch.cuda.is_available() else "cubins for sm_10") as info:
        load(bad)
    assert isinstance(info.value, DeviceError) and isinstance(info.value, ArtifactError)


@pytest.mark.gpu
def test_cuda_artifact_roundtrip_new_process(tmp_path):
    net = _net().cuda()
    xs = tuple(t.cuda() for t in _inputs(2, 8, 8, 0))
    cm = dl.compile(net, xs, dynamic=DYNAMIC, backend="cuda")
    path = save(cm, tmp_path / "net_cuda.dlcb")
    with zipfile.ZipFile(path) as z:   # per NVRTC unit: the 32- and the 64-bit entry points
        assert {"unit0/kernels.0.cubin", "unit0/kernels.0.wide.cubin"} <= set(z.namelist())
    calls = [tuple(t.cuda() for t in _inputs(n, 9, 7, n)) for n in (3, 33)]
    report, outs = _load_elsewhere(path, calls, tmp_path)
    assert report["stats"]["kernel_builds"] == 0 and report["nvrtc"] == 0
    assert report["device"].startswith("cuda")
    with torch.no_grad():
        for xs, got in zip(calls, outs):
            for a, b in zip(got, cm(*xs)):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


class Twice(nn.Module):
    """Two blocks of one code (kernels under two names, one build)."""

    def forward(self, x, y):
        return torch.tanh(x) * 2 + 1, torch.tanh(y) * 2 + 1


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_twin_kernels_share_one_build_through_an_artifact(backend, tmp_path):
    """Kernels of one code are built once and launch that build, also from an artifact loaded
    in a new process with an empty cache (no build there)."""
    dev = "cuda" if backend == "cuda" else "cpu"
    xs = (torch.randn(2, 8, device=dev), torch.randn(3, 8, device=dev))
    cm = dl.compile(Twice(), xs, dynamic={0: {0: "N"}, 1: {0: "M"}}, backend=backend)
    a, b = (k.launcher for k in cm.pipeline.kernels)
    same = (lambda ln: ln.fn) if backend == "cpu" else \
        (lambda ln: next(k.module for e, k in ln.kernels.items() if e.narrow))
    assert same(a) is same(b)
    k = cm.pipeline.kernels[0].body   # its entry points, as runtime.build counts them
    one = 1 if backend == "cpu" else len(entries(k))
    assert cm.stats()["kernel_builds"] == one
    path = save(cm, tmp_path / "twice.dlcb")
    calls = [(torch.randn(5, 8, device=dev), torch.randn(1, 8, device=dev))]
    report, outs = _load_elsewhere(path, calls, tmp_path)
    assert report["stats"]["kernel_builds"] == 0
    for got, want in zip(outs[0], Twice()(*calls[0])):
        torch.testing.assert_close(got, want)
