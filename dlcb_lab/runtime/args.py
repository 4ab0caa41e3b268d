"""The one argument validator of calls and direct launches, before anything runs.

``check_inputs`` validates a thunk's call (``cm(x, y)``): the count, then each input a strided
torch tensor of the compiled dtype on the compiled device, all on one device (the module's
constants included). ``check_buffer`` validates one buffer of a direct kernel launch: a torch
tensor, a numpy array (CPU kernels) or a ``__cuda_array_interface__`` object (CUDA kernels) of the
buffer's dtype, C-contiguous, ``out`` writable. Both share ``check_tensor`` for torch tensors, so a
tensor is refused with the same error and words on either path.

Refusals are ``dl`` errors that keep their builtin bases (``except TypeError`` keeps working):
``ArgumentError`` (TypeError: the count, an object that is no tensor or array, a non-strided
layout, a malformed int or launch extent), ``DTypeError`` (TypeError: dtype), ``DeviceError``
(ValueError: the device, several devices, a meta tensor), ``LayoutError`` (ValueError: not
contiguous, read-only, ``out`` overlapping an input). Messages name the argument (position and
name, or the kernel buffer with its IR value), what was expected and what came.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..errors import ArgumentError, DeviceError, DTypeError, LayoutError

__all__ = ["check_inputs", "check_tensor", "check_buffer", "check_count", "check_overlap",
           "as_int", "Buffer", "what_is"]

_TYPESTR: dict[str, torch.dtype] = {
    "f2": torch.float16, "f4": torch.float32, "f8": torch.float64, "i1": torch.int8,
    "i2": torch.int16, "i4": torch.int32, "i8": torch.int64, "u1": torch.uint8, "b1": torch.bool,
}
"""``__array_interface__``/``__cuda_array_interface__`` typestr (without the byte order) -> torch
dtype, for the dtypes generated kernels handle (bf16 has none)."""


def _name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def what_is(x: Any) -> str:
    """How a refused argument is described: ``numpy.ndarray float32 [2, 3]``, ``list of 2
    items``, ``None``, ``int``."""
    if x is None:
        return "None"
    if isinstance(x, np.ndarray):
        return f"numpy.ndarray {x.dtype} {list(x.shape)}"
    if isinstance(x, torch.Tensor):
        return f"{_name(x.dtype)} tensor {list(x.shape)} on {x.device}"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of {len(x)} items"
    return f"{type(x).__module__}.{type(x).__qualname__}".removeprefix("builtins.")


def check_count(args: Sequence[Any], want: int, what: str, names: Sequence[str]) -> None:
    """``len(args) == want`` (``what``: ``tensor inputs``), else ``ArgumentError`` listing the
    expected names."""
    if len(args) != want:
        raise ArgumentError(f"expected {want} {what} ({', '.join(names)}), got {len(args)}")


def check_tensor(t: Any, label: str, dtype: torch.dtype, device: str,
                 where: str | None = None) -> torch.Tensor:
    """``t`` a strided torch tensor of ``dtype`` on a ``device`` (``cpu``/``cuda``) device
    (``where``: how the expected device is named, default ``device``). Order: kind, layout,
    device (meta included), dtype."""
    where = where or device
    if not isinstance(t, torch.Tensor):
        raise ArgumentError(f"{label}: expected a torch.Tensor, got {what_is(t)}")
    if t.layout is not torch.strided:
        raise ArgumentError(f"{label}: layout {t.layout} unsupported (strided tensors only)")
    if t.device.type == "meta":
        raise DeviceError(f"{label}: on meta, expected {where} (a meta tensor holds no data)")
    if t.device.type != device:
        raise DeviceError(f"{label}: on {t.device}, expected {where}")
    if t.dtype != dtype:
        raise DTypeError(f"{label}: dtype {t.dtype} != compiled {dtype}")
    return t


def check_inputs(args: Sequence[Any], dtypes: Sequence[torch.dtype], names: Sequence[str],
                 device: str, n_user: int) -> list[torch.Tensor]:
    """A thunk call's tensors: ``args`` are the ``n_user`` user inputs then the module's
    constants (already placed and contiguous). Returns them detached and contiguous."""
    check_count(args, len(dtypes), "tensor inputs", names)
    out: list[torch.Tensor] = []
    for i, (t, dt) in enumerate(zip(args[:n_user], dtypes)):
        if not (isinstance(t, torch.Tensor) and t.dtype == dt and t.layout is torch.strided
                and t.device.type == device):   # the labels are built only to refuse
            check_tensor(t, f"input {i} '{names[i]}'", dt, device,
                         f"{out[0].device} (input 0)" if out else device)
        if out and t.device != out[0].device:
            raise DeviceError(f"input {i} '{names[i]}': on {t.device}, but input 0 "
                              f"'{names[0]}' is on {out[0].device} (one device per call)")
        if t.requires_grad:   # inference only: outputs carry no autograd history
            t = t.detach()
        out.append(t if t.is_contiguous() else t.contiguous())
    consts = args[n_user:]
    if consts and out and consts[0].device != out[0].device:
        raise DeviceError(f"inputs on {out[0].device}, the module's parameters on "
                          f"{consts[0].device}")
    out.extend(consts)
    return out


def as_int(x: Any, name: str) -> int:
    """An int argument (numpy integers accepted; bools and floats refused)."""
    if isinstance(x, (bool, np.bool_)):
        raise ArgumentError(f"int argument {name}: expected an int, got a bool")
    try:
        return operator.index(x)
    except TypeError:
        raise ArgumentError(f"int argument {name}: expected an int, got {what_is(x)}") from None


# --- direct-launch buffers ------------------------------------------------------------------------

@dataclass
class Buffer:
    """One checked buffer argument of a direct launch: what the launcher gets, and what the
    shape and overlap checks read."""

    obj: Any                 # a tensor (CUDA), a flat numpy array (CPU), a device address
    shape: tuple[int, ...]
    ptr: int
    nbytes: int
    device: int | None       # a torch CUDA tensor's device index
    source: Any              # the object passed (index-tensor checks read it)


def _c_contiguous(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """C order, ignoring the strides of size-1 axes (torch's and numpy's rule)."""
    if any(d == 0 for d in shape):
        return True
    want = itemsize
    for d, st in zip(reversed(shape), reversed(strides)):
        if d != 1 and st != want:
            return False
        want *= d
    return True


def _typestr_dtype(ts: str) -> torch.dtype | None:
    return _TYPESTR.get(ts[1:]) if ts[:1] in "<|=" else None


def _dtype_error(label: str, dtype: torch.dtype, got: str) -> DTypeError:
    hint = (" (bf16 has no typestr: pass a torch.bfloat16 tensor)"
            if dtype is torch.bfloat16 else "")
    return DTypeError(f"{label}: dtype {got}, the kernel's buffer is {_name(dtype)}{hint}")


def check_buffer(x: Any, label: str, dtype: torch.dtype, cuda: bool, writes: bool,
                 flat) -> Buffer:
    """Check one buffer argument of a direct launch (kind, device, dtype, contiguity; ``writes``:
    writable). ``flat(tensor)``: the flat array a CPU kernel takes."""
    where = "cuda" if cuda else "cpu"
    accepted = ("a torch CUDA tensor, a numba.cuda device array or any __cuda_array_interface__ "
                "object" if cuda else "a torch CPU tensor or a numpy array")
    if isinstance(x, torch.Tensor):
        if x.layout is torch.strided and x.device.type not in ("meta", where):
            raise DeviceError(f"{label}: a tensor on {x.device}; the {where} kernel needs "
                              f"{accepted}")
        try:
            check_tensor(x, label, x.dtype, where)
        except DeviceError as err:
            raise DeviceError(f"{err.msg} ({accepted})") from None
        if x.dtype != dtype:
            raise _dtype_error(label, dtype, _name(x.dtype))
        if not x.is_contiguous():
            raise LayoutError(f"{label}: not contiguous (shape {list(x.shape)}, strides "
                              f"{list(x.stride())}); pass .contiguous()")
        x = x.detach()
        return Buffer(x if cuda else flat(x), tuple(x.shape), x.data_ptr(),
                      x.numel() * x.element_size(), x.device.index if cuda else None, x)
    if isinstance(x, np.ndarray):
        if cuda:
            raise DeviceError(f"{label}: a numpy array (host memory); the cuda kernel needs "
                              f"{accepted}")
        if _typestr_dtype(x.dtype.str) != dtype:
            raise _dtype_error(label, dtype, f"{x.dtype.str!r} ({x.dtype})")
        if not x.flags.c_contiguous:
            raise LayoutError(f"{label}: not C-contiguous (shape {list(x.shape)}, strides "
                              f"{list(x.strides)} bytes); pass np.ascontiguousarray(...)")
        if writes and not x.flags.writeable:
            raise LayoutError(f"{label}: read-only array")
        a = x.reshape(-1)
        if not x.flags.writeable:   # numba's signature takes mutable arrays; inputs are only read
            a = a.copy()
        a = a.view(np.uint16) if dtype is torch.float16 else a
        return Buffer(a, tuple(x.shape), x.__array_interface__["data"][0], x.nbytes, None, x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise ArgumentError(f"{label}: expected {accepted}, got {what_is(x)}")
    if not cuda:
        raise DeviceError(f"{label}: {type(x).__name__} is CUDA memory; the cpu kernel needs "
                          f"{accepted}")
    shape, ts = tuple(int(d) for d in cai["shape"]), cai["typestr"]
    ptr, readonly = cai["data"]
    if _typestr_dtype(ts) != dtype:
        raise _dtype_error(label, dtype, f"typestr {ts!r}")
    if cai.get("mask") is not None:
        raise LayoutError(f"{label}: masked arrays unsupported")
    itemsize = int(ts[2:])
    strides = cai.get("strides")
    if strides is not None and not _c_contiguous(shape, strides, itemsize):
        raise LayoutError(f"{label}: not C-contiguous (shape {list(shape)}, strides "
                          f"{list(strides)} bytes)")
    if writes and readonly:
        raise LayoutError(f"{label}: read-only array")
    n = itemsize
    for d in shape:
        n *= d
    return Buffer(int(ptr or 0), shape, int(ptr or 0), n, None, x)


def check_overlap(bufs: Sequence[Buffer], labels: Sequence[str], same: Sequence[int] = ()
                  ) -> None:
    """The first buffer (``out``) overlaps none of the others (the kernels' ``__restrict__``),
    but may be the very memory of those at positions ``same`` (inputs the kernel reads only at
    the output's own index); all torch CUDA buffers on one device."""
    devices = {a.device for a in bufs if a.device is not None}
    if len(devices) > 1:
        raise DeviceError(f"tensors on several devices {sorted(devices)}")
    o = bufs[0]
    for j, (a, lab) in enumerate(zip(bufs[1:], labels[1:]), 1):
        if j in same and (a.ptr, a.nbytes) == (o.ptr, o.nbytes):
            continue
        if o.nbytes and a.nbytes and a.ptr < o.ptr + o.nbytes and o.ptr < a.ptr + a.nbytes:
            raise LayoutError(f"{labels[0]} overlaps {lab}: the kernel's buffers are "
                              f"__restrict__ (write to a separate buffer)")
