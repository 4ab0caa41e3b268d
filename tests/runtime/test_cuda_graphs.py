"""CUDA-graph replay per shape signature (``runtime.graphs``): captures, replays, eviction, fallback,
a shape change between replays, outputs the caller keeps, inputs changed in place, index checks
on replayed calls. Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.runtime import graphs

pytestmark = pytest.mark.gpu
DEV = "cuda"


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = self.conv(x).relu()
        return self.fc(y.mean((2, 3))).softmax(-1)


@pytest.fixture
def net():
    torch.manual_seed(0)
    m = ConvNet().to(DEV).eval()
    cm = dl.compile(m, (torch.randn(2, 3, 16, 16, device=DEV),),
                    dynamic={0: {0: "N", 2: "H", 3: "W"}}, backend="cuda")
    return m, cm


def _x(n, h=16, w=16):
    return torch.randn(n, 3, h, w, device=DEV)


def _check(m, cm, x):
    with torch.no_grad():
        want = m(x)
    got = cm(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    return got


def test_first_call_plain_second_captures_then_replays(net):
    m, cm = net
    x = _x(4)
    for _ in range(4):
        _check(m, cm, x)
    g = cm.stats()["graphs"]
    assert g == {"captures": 1, "replays": 3, "evictions": 0}, g
    assert cm.stats()["calls"] == 4
    assert cm.stats()["compiles"] == 1


def test_shape_change_between_replays(net):
    m, cm = net
    shapes = [(2, 16, 16), (5, 8, 12), (2, 16, 16), (5, 8, 12), (1, 16, 16), (2, 16, 16),
              (5, 8, 12), (1, 16, 16)]
    for s in shapes:
        _check(m, cm, _x(*s))
    g = cm.stats()["graphs"]
    assert g["captures"] == 3 and g["replays"] == 5 and g["evictions"] == 0, g
    assert cm.stats()["compiles"] == 1 and cm.stats()["jit_builds"] == 0


def test_outputs_kept_by_the_caller_are_not_overwritten(net):
    m, cm = net
    x1, x2 = _x(3), _x(3)
    cm(x1), cm(x1)   # warm-up and capture
    y1 = _check(m, cm, x1)
    y2 = _check(m, cm, x2)     # same graph, other values
    with torch.no_grad():
        torch.testing.assert_close(y1, m(x1), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(y2, m(x2), rtol=1e-5, atol=1e-5)
    assert y1.data_ptr() != y2.data_ptr()
    assert cm.stats()["graphs"]["replays"] >= 3


def test_inputs_changed_in_place_are_read_anew(net):
    m, cm = net
    x = _x(3)
    cm(x), cm(x)
    x.mul_(-2.0).add_(1.0)   # the caller's buffer changes; the graph reads its own copy
    _check(m, cm, x)
    x = x[:, :, ::2, ::2]    # and a non-contiguous input of a new shape
    for _ in range(3):
        _check(m, cm, x)


def test_lru_eviction(net):
    m, cm = net
    cm._thunk.graphs.capacity = 2
    for _ in range(2):
        for n in (1, 2, 3):
            _check(m, cm, _x(n))
            _check(m, cm, _x(n))
    g = cm.stats()["graphs"]
    assert g["evictions"] >= 1 and len(cm._thunk.graphs.graphs) == 2, g


def test_off_by_environment(monkeypatch):
    monkeypatch.setenv("DLCB_CUDA_GRAPHS", "0")
    m = ConvNet().to(DEV).eval()
    cm = dl.compile(m, (_x(2),), dynamic={0: {0: "N"}}, backend="cuda")
    for _ in range(3):
        _check(m, cm, _x(2))
    assert cm._thunk.graphs is None and cm.stats()["graphs"]["replays"] == 0
    monkeypatch.setenv("DLCB_CUDA_GRAPHS", "many")
    with pytest.raises(ValueError, match="DLCB_CUDA_GRAPHS='many'"):
        dl.compile(m, (_x(2),), dynamic={0: {0: "N"}}, backend="cuda")


class Embed(torch.nn.Module):   # a gather, a library call and kernels: replay pays
    def __init__(self, shift=False):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.fc = torch.nn.Linear(4, 4)
        self.shift = shift

    def forward(self, ids):
        return self.fc(self.emb(ids + 1 if self.shift else ids) * 2).softmax(-1) + 1


def test_index_check_on_an_input_runs_before_each_replay():
    m = Embed().to(DEV).eval()
    ids = torch.randint(0, 10, (2, 5), device=DEV)
    cm = dl.compile(m, (ids,), dynamic={0: {0: "B", 1: "S"}}, backend="cuda")
    for _ in range(3):
        torch.testing.assert_close(cm(ids), m(ids))
    assert cm.stats()["graphs"]["replays"] >= 1
    bad = ids.clone()
    bad[1, 3] = 10
    with pytest.raises(dl.ShapeMismatch, match=r"index values in \[\d+, 10\], outside \[0, 10\)"):
        cm(bad)
    torch.cuda.synchronize()   # no illegal access was launched


def test_index_computed_from_input_values_is_refused_by_name():
    """An index tensor computed from input values cannot be checked inside a graph: the thunk
    stays on plain launches, which check it per call, and says which step."""
    m = Embed(shift=True).to(DEV).eval()
    ids = torch.randint(0, 9, (2, 5), device=DEV)
    cm = dl.compile(m, (ids,), dynamic={0: {0: "B"}}, backend="cuda")
    for _ in range(3):
        torch.testing.assert_close(cm(ids), m(ids))
    why = cm._thunk.graphs.refused[()]
    assert "computed from input values" in why and "step" in why, why
    assert cm.stats()["graphs"]["replays"] == 0
    with pytest.raises(dl.ShapeMismatch, match="outside"):
        cm(torch.full((2, 5), 9, device=DEV))


class Histogram(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):   # histc (an eager step) with min == max == 0 reads x's range first
        return self.fc(torch.histc(x.relu(), bins=4) + 1).softmax(-1) * 2


def test_capture_failure_falls_back_and_names_the_step():
    m = Histogram().to(DEV).eval()
    x = torch.randn(64, device=DEV)
    cm = dl.compile(m, (x,), dynamic={0: {0: "N"}}, backend="cuda")
    for n in (64, 64, 64, 100, 100):
        x = torch.randn(n, device=DEV)
        torch.testing.assert_close(cm(x), m(x))
    refused = cm._thunk.graphs.refused
    assert cm.stats()["graphs"]["replays"] == 0
    assert len(refused) == 2, refused   # each signature tried once
    assert all(why.startswith("capture failed at step 1 (library call eager)")
               for why in refused.values()), refused
    torch.randn(8, device=DEV)   # the generator is not left capturing
    torch.testing.assert_close(cm(x), m(x))


def test_a_failed_capture_leaves_the_device_usable(net, monkeypatch):
    """A capture that fails anyway (here a sync the warm-up did not see) falls back to plain
    launches for its signature, names the step, and leaves torch's CUDA state as it was: random
    ops and other captures still work."""
    m, cm = net
    x = _x(3)
    cm(x)   # warm-up
    real = cm._thunk._run

    def syncing(tensors, r, checks=True, at=None):
        out = real(tensors, r, checks, at)
        out[0].sum().item()
        return out

    monkeypatch.setattr(cm._thunk, "_run", syncing)
    _check(m, cm, x)
    why = cm._thunk.graphs.refused[(x.device.index, tuple(x.shape))]
    assert why.startswith("capture failed at step"), why
    monkeypatch.undo()
    torch.randn(8, device=DEV)   # the generator is not left capturing
    y = _x(2)
    for _ in range(3):
        _check(m, cm, y)
    assert cm.stats()["graphs"]["replays"] >= 1, cm._thunk.graphs.refused


def test_a_capture_that_cannot_begin_runs_plain_and_is_retried(net, monkeypatch):
    """``capture_begin`` itself raising (the fault injected here) reaches no caller: the call
    runs on plain launches, the signature is retried ``RETRIES`` times, then refused by name."""
    m, cm = net
    x = _x(5)
    cm(x)   # warm-up

    begin = torch.cuda.CUDAGraph.capture_begin

    def refuse(self, *args, **kwargs):   # the capture of the call; not the empty reset capture
        if kwargs.get("pool") is not None:
            raise RuntimeError("injected: operation not permitted when stream is capturing")
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", refuse)
    for _ in range(graphs.RETRIES + 2):
        _check(m, cm, x)
    key = (x.device.index, tuple(x.shape))
    assert cm._thunk.graphs.spoiled[key] == graphs.RETRIES + 1
    assert cm._thunk.graphs.refused[key].startswith(
        f"capture spoiled {graphs.RETRIES + 1} times: RuntimeError: injected"), \
        cm._thunk.graphs.refused
    monkeypatch.undo()
    torch.randn(8, device=DEV)   # the generator is not left capturing
    y = _x(2)
    for _ in range(3):
        _check(m, cm, y)
    assert cm.stats()["graphs"]["replays"] >= 1


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2 + 1


def test_one_large_kernel_stays_on_plain_launches():
    """A replay would copy 64 MB in and out to save no launch: the cost model keeps the signature
    plain and says why; a small call of a many-step module replays."""
    cm = dl.compile(Scale(), (torch.randn(4, 8, device=DEV),), dynamic={0: {0: "N"}},
                    backend="cuda")
    x = torch.randn(1 << 22, 8, device=DEV)
    for _ in range(3):
        torch.testing.assert_close(cm(x), x * 2 + 1)
    g = cm._thunk.graphs
    assert cm.stats()["graphs"]["captures"] == 0 and len(g.plain) == 1, g.stats()
    assert "save 0 launches" in g.plain[(x.device.index, tuple(x.shape))]


def test_threads_sharing_a_module_get_their_own_results(net):
    """Eight threads, each on its own stream, call one compiled module (two shapes, so captures
    and replays of both interleave): every result is eager's for that thread's input (the
    static input buffers and the pool are one per thunk: replays are serialized)."""
    import threading

    m, cm = net
    xs = [_x(2 + i % 2) for i in range(8)]
    with torch.no_grad():
        want = [m(x) for x in xs]
    torch.cuda.synchronize()   # inputs and references are made on the default stream; each
    bad: list = []             # thread reads them from its own (under racecheck: one read early)

    def work(i):
        with torch.cuda.stream(torch.cuda.Stream()):
            for _ in range(20):
                got = cm(xs[i])
                torch.cuda.current_stream().synchronize()
                if not torch.allclose(got, want[i], rtol=1e-5, atol=1e-5):
                    bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad
    g = cm.stats()["graphs"]
    assert g["captures"] == 2 and g["replays"] >= 100, g


def test_memory_flat_across_calls_at_varying_shapes(net):
    """10,000 calls at 12 batch sizes in turn through an LRU of 8 graphs (the worst case: each
    signature's graph is evicted before it comes back, so every call captures anew): after the
    warm-up, device memory allocated (within the size difference of the 8 graphs cached at the
    start and at the end) and the Python heap do not grow; evictions are counted."""
    import gc
    import tracemalloc

    m, cm = net
    xs = [_x(n) for n in range(1, 13)]
    cm._thunk.graphs.capacity = 8
    for _ in range(3):   # plain, capture, and the pool at its size for every signature
        for x in xs:
            cm(x)
    torch.cuda.synchronize()
    gc.collect()
    dev0 = torch.cuda.memory_allocated()
    ours = [tracemalloc.Filter(True, "*dlcb_lab*", all_frames=True)]

    def traced() -> int:   # allocations made under a dlcb_lab frame: not xdist's own thread's
        return sum(t.size for t in tracemalloc.take_snapshot().filter_traces(ours).traces)

    tracemalloc.start(64)
    try:
        base = traced()
        for i in range(10_000):
            cm(xs[i % len(xs)])
        torch.cuda.synchronize()
        gc.collect()
        host = traced() - base
    finally:
        tracemalloc.stop()
    dev = torch.cuda.memory_allocated() - dev0
    g = cm._thunk.graphs.stats()
    assert g["evictions"] >= 10_000 and g["cached"] == 8, g
    assert dev < 1 << 20 and host < 64 * 1024, (dev, host)   # the last 8 graphs: other sizes
    _check(m, cm, xs[5])



def test_capture_leaves_no_second_cublas_workspace():
    """cuBLAS allocates a workspace per stream at its first matmul there and holds it: a capture
    on the side stream would keep one beside the default stream's (32 MiB and more on Hopper).
    After a capture of two matmuls, with the default stream's workspace in use again (an eager
    matmul), device memory allocated has grown by the static input and the outputs alone."""
    from dlcb_lab.hostgen.lower import LibraryCall

    lin = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                              torch.nn.Softmax(-1)).to(DEV).eval()
    x = torch.randn(8, 64, device=DEV)
    cm = dl.compile(lin, (x,), dynamic={0: {0: "N"}}, backend="cuda")
    assert sum(isinstance(s, LibraryCall) for s in cm._thunk.plan.steps) == 2
    with torch.no_grad():
        lin(x)                      # the default stream's workspace
        cm(x)                       # plain
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        y = cm(x)                   # capture, then replay
        lin(x)                      # the default stream's workspace, again
        torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    assert cm.stats()["graphs"]["captures"] == 1
    held = x.numel() * x.element_size() + 2 * y.numel() * y.element_size()   # + the caller's y
    assert grown <= held + (1 << 20), (grown, held)
