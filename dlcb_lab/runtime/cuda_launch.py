"""Load cubins and launch their kernels numba.cuda-style: ``kernel[grid, block, stream](*args)``.

The back half of the ``cuda`` backend (the front half is :mod:`dlcb_lab.runtime.nvrtc`). Built on
``cuda.core`` (imported lazily, so this module imports on a GPU-less machine). A launch is
``cuda.core.launch(stream, LaunchConfig, Kernel, *args)``; on the H200 that costs about 4.5 µs of
host time, less than one eager torch op, so everything here is arranged to add little on top:
argument converters are chosen once per kernel, ``LaunchConfig`` objects are cached per
(grid, block), ``cuda.core`` stream wrappers are cached per raw stream handle, and the launch itself
does a couple of dict lookups plus one converter call per argument.

Nothing on the launch path checks that tensors live on the launching device or have the dtype the
kernel expects: the generated host program owns those guards.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["CudaKernel", "CudaModule", "cuda_available"]

Dims = int | tuple[int, ...]

# Filled on first load (see _core); kept as module globals so the hot path pays no import/attr cost.
_launch: Callable[..., None] | None = None
_LaunchConfig: Any = None
_CoreStream: Any = None
_Device: Any = None

_STREAMS: dict[tuple[int, int], Any] = {}  # (raw stream handle, device) -> cuda.core Stream
_CONFIGS: dict[tuple[Dims, Dims], Any] = {}  # (grid, block) -> LaunchConfig, or None for empty grid
_MAX_CONFIGS = 4096  # dynamic shapes make grids vary; forget them all past this many

_get_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
_raw_stream: Callable[[int], int] | None = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (the ``auto`` backend's switch)."""
    return torch.cuda.is_available()


def _core() -> None:
    """Import ``cuda.core`` once and bind what the hot path uses to module globals."""
    global _launch, _LaunchConfig, _CoreStream, _Device
    if _launch is None:
        from cuda.core import Device, LaunchConfig, Stream, launch

        _LaunchConfig, _CoreStream, _Device, _launch = LaunchConfig, Stream, Device, launch


def _device(dev: int) -> Any:
    """``cuda.core`` Device ``dev``, made current on this thread (it shares torch's primary context)."""
    _core()
    d = _Device(dev)
    d.set_current()
    return d


# --- argument converters: one per parameter kind, picked once per kernel -------------------------


def _as_ptr(x: Any) -> int:
    """Device address of a torch tensor, a ``__cuda_array_interface__`` object, or a raw int."""
    if isinstance(x, torch.Tensor):
        return x.data_ptr()
    if isinstance(x, int):
        return x
    if x is None:
        return 0
    try:
        return x.__cuda_array_interface__["data"][0]
    except AttributeError:
        raise TypeError(f"cannot pass {type(x).__name__} as a device pointer") from None


# cuda.core packs a Python int as intptr_t (8 bytes) and a Python float as double, so i64/f64 need
# no numpy scalar; operator.index also rejects floats passed where an integer is meant.
_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "ptr": _as_ptr,
    "i64": operator.index,
    "i32": np.int32,
    "f32": np.float32,
    "f64": float,
}


def _stream_of(obj: Any, dev: int) -> Any:
    """A cached ``cuda.core`` Stream for ``obj``: a cuda.core Stream (as is), a torch.cuda.Stream, or
    anything with ``__cuda_stream__``. The wrapper keeps ``obj`` alive, so its handle is not reused."""
    _core()
    if isinstance(obj, _CoreStream):
        return obj
    if isinstance(obj, torch.cuda.Stream):
        key = (obj.cuda_stream, obj.device_index)
    else:
        key = (int(obj.__cuda_stream__()[1]), dev)
    s = _STREAMS.get(key)
    if s is None:
        s = _STREAMS[key] = _device(key[1]).create_stream(obj)
    return s


def _current_stream(dev: int) -> Any:
    """torch's current stream on ``dev``, as a cached ``cuda.core`` Stream."""
    if _raw_stream is not None:
        s = _STREAMS.get((_raw_stream(dev), dev))
        if s is not None:
            return s
    return _stream_of(torch.cuda.current_stream(dev), dev)


def _config(grid: Dims, block: Dims) -> Any:
    """Cached LaunchConfig for (grid, block); None when the grid has no blocks."""
    key = (grid, block)
    try:
        return _CONFIGS[key]
    except KeyError:
        pass
    except TypeError:  # unhashable (e.g. a list): normalise, no caching
        return _make_config(tuple(grid) if not isinstance(grid, int) else grid,
                            tuple(block) if not isinstance(block, int) else block)
    if len(_CONFIGS) >= _MAX_CONFIGS:
        _CONFIGS.clear()
    cfg = _CONFIGS[key] = _make_config(grid, block)
    return cfg


def _make_config(grid: Dims, block: Dims) -> Any:
    _core()
    dims = (grid,) if isinstance(grid, int) else grid
    if any(d == 0 for d in dims):
        return None
    return _LaunchConfig(grid=grid, block=block)


# --- modules and kernels ----------------------------------------------------------------------------


class CudaModule:
    """A cubin (from :func:`~dlcb_lab.runtime.nvrtc.compile_cubin`) and the kernels it exports.

    Loading is lazy and per device: the first launch on device ``d`` makes ``d`` current in
    ``cuda.core`` (torch's primary context) and loads the cubin there via
    ``ObjectCode.from_cubin``. ``kernel_names`` (the ``extern "C"`` names) is checked by
    :meth:`kernel` when given.
    """

    def __init__(self, cubin: bytes, kernel_names: Sequence[str] = (), *, name: str = "dlcb"):
        self.cubin = bytes(cubin)
        self.kernel_names = tuple(kernel_names)
        self.name = name
        self._code: dict[int, Any] = {}  # device -> cuda.core ObjectCode

    def get_function(self, name: str, dev: int | None = None) -> Any:
        """The ``cuda.core`` Kernel ``name`` loaded on device ``dev`` (default: torch's current)."""
        dev = _get_device() if dev is None else dev
        code = self._code.get(dev)
        if code is None:
            _device(dev)
            from cuda.core import ObjectCode

            code = self._code[dev] = ObjectCode.from_cubin(self.cubin, name=self.name)
        return code.get_kernel(name)

    def kernel(self, name: str, signature: Sequence[str]) -> CudaKernel:
        """A launchable handle on kernel ``name`` whose parameters have the kinds in ``signature``
        (each one of ``"ptr"``, ``"i64"``, ``"i32"``, ``"f32"``, ``"f64"``, in C parameter order)."""
        if self.kernel_names and name not in self.kernel_names:
            raise KeyError(f"{name!r} is not among this module's kernels {self.kernel_names}")
        return CudaKernel(self, name, signature)

    def __repr__(self) -> str:
        return f"CudaModule({self.name!r}, {len(self.cubin)} B cubin, kernels={list(self.kernel_names)})"


class CudaKernel:
    """One kernel of a :class:`CudaModule` with its parameter kinds; launch as
    ``k[grid, block](*args)`` on torch's current stream or ``k[grid, block, stream](*args)``.

    ``grid``/``block`` are ints or tuples of up to 3 ints; a grid with a zero dimension is a no-op
    (the driver would reject it). Arguments are converted by kind: ``"ptr"`` takes a torch tensor,
    any ``__cuda_array_interface__`` object, a raw int address or None; scalars are packed at the
    exact C width (``i32`` as int32, ``f32`` as float32, ...).
    """

    __slots__ = ("module", "name", "signature", "_conv", "_nargs", "_kernels")

    def __init__(self, module: CudaModule, name: str, signature: Sequence[str]):
        bad = [s for s in signature if s not in _CONVERTERS]
        if bad:
            raise ValueError(f"unknown parameter kinds {bad}; expected one of {sorted(_CONVERTERS)}")
        self.module, self.name, self.signature = module, name, tuple(signature)
        self._conv = tuple(_CONVERTERS[s] for s in self.signature)
        self._nargs = len(self.signature)
        self._kernels: dict[int, Any] = {}  # device -> cuda.core Kernel

    def __getitem__(self, launch_cfg: tuple) -> _BoundLaunch:
        if len(launch_cfg) == 2:
            grid, block = launch_cfg
            stream = None
        elif len(launch_cfg) == 3:
            grid, block, stream = launch_cfg
        else:
            raise TypeError(f"{self.name}[...] takes (grid, block) or (grid, block, stream)")
        return _BoundLaunch(self, _config(grid, block), stream)

    def __repr__(self) -> str:
        return f"CudaKernel({self.name}({', '.join(self.signature)}))"


class _BoundLaunch:
    """``kernel[grid, block(, stream)]``: call it with the kernel's arguments to launch."""

    __slots__ = ("k", "config", "stream")

    def __init__(self, k: CudaKernel, config: Any, stream: Any):
        self.k, self.config, self.stream = k, config, stream

    def __call__(self, *args: Any) -> None:
        k = self.k
        if len(args) != k._nargs:
            raise TypeError(
                f"kernel {k.name}({', '.join(k.signature)}) takes {k._nargs} arguments, got {len(args)}"
            )
        if self.config is None:  # empty grid
            return
        dev = _get_device()
        kern = k._kernels.get(dev)
        if kern is None:
            kern = k._kernels[dev] = k.module.get_function(k.name, dev)
        stream = _current_stream(dev) if self.stream is None else _stream_of(self.stream, dev)
        _launch(stream, self.config, kern, *[c(a) for c, a in zip(k._conv, args)])
