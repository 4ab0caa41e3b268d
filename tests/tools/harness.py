"""Helpers shared by the end-to-end and error tests: eager comparison, a per-module compile cache
(parametrized by backend and device) and a spy that counts kernel launches and output allocations."""

from __future__ import annotations

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.runtime import thunks as thunks_mod

from models import NanProp

TOL = dict(rtol=1e-5, atol=1e-5)
TOL_16 = {torch.float16: 2 * 2.0**-10, torch.bfloat16: 2 * 2.0**-7}
"""16-bit outputs: two units in the last place (each op rounds as eager does; only accumulators
of different widths differ)."""


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def check_eager(case, cm, ins):
    """Call ``cm`` and the eager module on ``ins`` and compare every output (shape, dtype, device,
    values). Synchronizes first when the outputs live on a CUDA device."""
    got = as_tuple(cm(*ins))
    want = as_tuple(case.module()(*ins))
    if any(t.is_cuda for t in got + want):
        torch.cuda.synchronize()
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, f"output {k}: shape {tuple(a.shape)} != eager {tuple(b.shape)}"
        assert a.dtype == b.dtype and a.device == b.device
        # outputs are freshly allocated by the thunk, so poisoning them is impossible; instead a
        # kernel that skips elements or reads garbage shows up as NaN where eager has none
        assert not (a.isnan() & ~b.isnan()).any(), f"output {k}: NaN where eager has none"
        tol = dict(rtol=TOL_16[b.dtype], atol=TOL_16[b.dtype]) if b.dtype in TOL_16 else TOL
        torch.testing.assert_close(a, b, **tol, msg=lambda m: f"output {k}: {m}")


def eager_or_refused(cm, m, inputs, match: str) -> None:
    """``cm`` on each one-tensor input: eager's result where eager takes it; where eager raises,
    a ``ShapeMismatch`` matching ``match`` (the host program's check, before any launch)."""
    for x in inputs:
        try:
            want = m(x)
        except RuntimeError:
            with pytest.raises(dl.ShapeMismatch, match=match):
                cm(x)
            continue
        torch.testing.assert_close(cm(x), want)


def check_nan_propagation(backend, device):
    """Compile ``NanProp`` for ``backend`` and compare with eager on inputs holding NaNs."""
    g = torch.Generator().manual_seed(7)
    mk = lambda n: (torch.randn(n, 5, generator=g).to(device),   # noqa: E731
                    torch.randn(n, 5, generator=g).to(device))
    cm = dl.compile(NanProp(), mk(3), dynamic={0: {0: "N"}, 1: {0: "N"}}, backend=backend)
    x, y = mk(6)
    x[0, 1] = x[2, 4] = y[3, 0] = y[2, 4] = float("nan")
    for a, b in zip(cm(x, y), NanProp()(x, y)):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


class Compiled:
    """Lazily compile each (case, spec, dtype) once, for one backend and device."""

    def __init__(self, backend="cpu", device="cpu"):
        self.backend = backend
        self.device = device
        self._cms = {}

    def get(self, case, spec="dynamic", dtype=torch.float32):
        key = (case.name, spec, dtype)
        if key not in self._cms:
            dyn = {"dynamic": case.dynamic, "dynamic2": case.dynamic2, "static": False}[spec]
            ex = case.inputs(3, case.m if spec == "dynamic2" else None, device=self.device,
                             dtype=dtype)
            self._cms[key] = dl.compile(case.module(), ex, dynamic=dyn, backend=self.backend)
        return self._cms[key]


class Spy:
    """Wrap a thunk's launchers and ``torch.empty`` (as the thunk sees it) to count launches and
    output allocations. The thunk runs plain launches (a CUDA-graph replay launches nothing)."""

    def __init__(self, cm, monkeypatch):
        self.thunk = cm.pipeline.thunks[0]
        monkeypatch.setattr(self.thunk, "graphs", None)
        self.launches = 0
        self.allocs = 0

        spy = self

        class wrap:  # counts launches, keeps the launcher's variant choice
            def __init__(self, f):
                self.f = f

            def __getattr__(self, name):   # choose, pick, geometry: the launcher's own
                return getattr(self.f, name)

            def __call__(self, *a):
                spy.launches += 1
                return self.f(*a)

        monkeypatch.setattr(self.thunk, "launchers", [wrap(f) for f in self.thunk.launchers])
        real_empty = torch.empty

        def empty(*a, **kw):
            self.allocs += 1
            return real_empty(*a, **kw)

        monkeypatch.setattr(thunks_mod.torch, "empty", empty)
        self.calls0 = self.thunk.calls

    def assert_untouched(self):
        assert self.launches == 0, "a kernel was launched"
        assert self.allocs == 0, "an output was allocated"
        assert self.thunk.calls == self.calls0


class Recorder:
    """Stands in for a launcher: records (variant, numel, params, narrow, width) of each launch,
    then launches it."""

    def __init__(self, f, log):
        self.f, self.log = f, log

    def __getattr__(self, name):   # choose, pick, geometry: the launcher's own
        return getattr(self.f, name)

    def __call__(self, entry, numel, out, ins, params):
        self.log.append((entry.variant, numel, tuple(params), entry.narrow, entry.per))
        return self.f(entry, numel, out, ins, params)


def force_launch(monkeypatch, how: str) -> None:
    """Force every reduction kernel onto one of its entry points: ``thread`` (one thread per
    output), ``block`` (one block per output), or ``warp`` (one warp per output where the kernel
    has that entry point and its 32-bit index applies, else the block), whatever its extent."""
    from dlcb_lab.runtime.launchers import CudaLauncher

    monkeypatch.setattr(CudaLauncher, "choose", lambda self, numel, extent, narrow=False:
                        0 if how == "thread" else int(1 in self.variants))
    monkeypatch.setattr(CudaLauncher, "_lanes_serve", lambda self, entry, numel, extent:
                        how == "warp")   # any extent (at 32-bit index: ``serves``)
