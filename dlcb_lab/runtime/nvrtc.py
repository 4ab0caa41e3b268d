"""CUDA C++ → cubin with NVRTC, cached on disk; needs no GPU and no driver.

This is the front half of the ``cuda`` backend: every generated kernel source goes through
:func:`compile_cubin`, so CI on a GPU-less machine still rejects invalid CUDA. We call
``cuda.bindings.nvrtc`` directly (``cuda.core``'s ``Program`` also compiles cubins without a driver,
but its ``arch=None`` default and its PTX path query the driver). Compiling straight to SASS (a
cubin for one ``sm_XY``) skips the driver's PTX JIT at load time; the price is one cubin per arch,
which the cache key records.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pathlib
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Sequence

from ..errors import BuildError, SpecError
from .cache import atomic_write, cache_dir, content_key

__all__ = [
    "CudaCompileError",
    "ResourceUsage",
    "compile_cubin",
    "compile_cubin_later",
    "compile_cubins",
    "wait_background",
    "device_arch",
    "include_dirs",
    "nvrtc_compile_count",
    "nvrtc_compile_seconds",
    "nvrtc_version",
    "resource_usage",
]

_PROGRAM_NAME = "dlcb_kernels.cu"
_log = logging.getLogger(__name__)
_compile_count = 0
_compile_seconds = 0.0
_count_lock = threading.Lock()


class CudaCompileError(BuildError):
    """NVRTC rejected a source (a ``dl.BuildError``, so a ``RuntimeError``). ``str(err)`` is the
    NVRTC log followed by the numbered source lines the log points at (``>`` marks the line named
    by a diagnostic); ``.log`` and ``.source`` hold the raw pieces."""

    def __init__(self, log: str, source: str, options: tuple[str, ...] = ()):
        self.log, self.source, self.options = log, source, options
        lines = source.splitlines()
        hit = {int(m) for m in re.findall(rf"{re.escape(_PROGRAM_NAME)}\((\d+)\)", log)}
        shown = sorted({n for h in hit for n in (h - 1, h, h + 1) if 1 <= n <= len(lines)})
        excerpt, prev = [], 0
        for n in shown:
            if prev and n != prev + 1:
                excerpt.append("   ...")
            excerpt.append(f"{'>' if n in hit else ' '}{n:5d} | {lines[n - 1]}")
            prev = n
        msg = f"NVRTC compilation failed (options: {' '.join(options)})\n{log.rstrip()}"
        if excerpt:
            msg += "\n--- source ---\n" + "\n".join(excerpt)
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.log, self.source, self.options))


def _check(result: tuple) -> tuple:
    """Unwrap a ``cuda.bindings.nvrtc`` return tuple, raising on a non-success status."""
    from cuda.bindings import nvrtc

    err, *rest = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, name = nvrtc.nvrtcGetErrorString(err)
        raise BuildError(f"NVRTC call failed: {name.decode() if isinstance(name, bytes) else name}")
    return tuple(rest)


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library that ``cuda.bindings`` loaded (pip wheel or toolkit)."""
    from cuda.bindings import nvrtc

    major, minor = _check(nvrtc.nvrtcVersion())
    return int(major), int(minor)


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """Folders holding ``cuda_fp16.h`` and friends: the nvidia pip wheels (found by
    ``cuda.pathfinder``), then ``$CUDA_HOME``/``$CUDA_PATH``, then ``/usr/local/cuda``. NVRTC's
    built-in headers cover ``<nv/target>`` and the ``cuda_runtime`` basics, so the cudart include
    folder alone is enough for the fp16/bf16 headers."""
    found: list[str] = []
    try:
        from cuda import pathfinder

        find = getattr(pathfinder, "find_nvidia_header_directory", None)
        if find is not None:
            found += [d for d in (find("cudart"),) if d]
    except Exception:  # an older or absent pathfinder is not fatal: fall back below
        pass
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            found.append(os.path.join(os.environ[env], "include"))
    found.append("/usr/local/cuda/include")
    out: list[str] = []
    for d in found:
        if os.path.isfile(os.path.join(d, "cuda_fp16.h")) and d not in out:
            out.append(d)
    return tuple(out[:1])  # one header set only: mixing toolkit versions breaks the headers


def nvrtc_compile_count() -> int:
    """How many NVRTC compilations this process ran, failed ones included (cache hits excluded)."""
    return _compile_count


def nvrtc_compile_seconds() -> float:
    """Wall time spent inside NVRTC compilations in this process (cache hits excluded)."""
    return _compile_seconds


def _normalize_arch(arch: str) -> str:
    arch = arch.strip()
    if arch.isdigit():
        return f"sm_{arch}"
    if not arch.startswith("sm_"):
        raise SpecError(f"compile_cubin needs a real architecture such as 'sm_90', got {arch!r}")
    return arch


def _nvrtc_compile(source: str, options: tuple[str, ...]) -> bytes:
    """One NVRTC compilation to cubin; raises :class:`CudaCompileError` with the log on failure."""
    return _nvrtc_run(source, options)[0]


def _nvrtc_run(source: str, options: tuple[str, ...]) -> tuple[bytes, str]:
    """One NVRTC compilation: (cubin, program log); :class:`CudaCompileError` on failure."""
    from cuda.bindings import nvrtc

    (prog,) = _check(nvrtc.nvrtcCreateProgram(source.encode(), _PROGRAM_NAME.encode(), 0, [], []))
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog))
            buf = bytes(size)   # a fresh object: `b" " * 1` is the interned constant b" "
            _check(nvrtc.nvrtcGetProgramLog(prog, buf))
            raise CudaCompileError(buf.rstrip(b"\x00").decode(errors="replace"), source, options)
        (size,) = _check(nvrtc.nvrtcGetCUBINSize(prog))
        cubin = bytes(size)
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin))
        (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog))
        log = bytes(size)
        _check(nvrtc.nvrtcGetProgramLog(prog, log))
        return cubin, log.rstrip(b"\x00").decode(errors="replace")
    finally:
        _check(nvrtc.nvrtcDestroyProgram(prog))


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas reports for one entry point: registers per thread, bytes of stack frame, of
    spill stores and loads, of static shared memory (``smem``), of constant memory (``cmem``, all
    banks), and named barriers."""

    entry: str
    registers: int
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared: int = 0
    constant: int = 0
    barriers: int = 0


@functools.lru_cache(maxsize=32)
def resource_usage(source: str, *, arch: str = "sm_90",
                   options: tuple[str, ...] = ()) -> dict[str, ResourceUsage]:
    """Per entry point of ``source``, the resources ptxas reports when compiling it for ``arch``
    (NVRTC with ``--ptxas-options=-v``; no GPU needed). The ptxas log is cached on disk under
    ``cache_dir("ptxas")``, keyed like cubins (source, arch, options, NVRTC version)."""
    global _compile_count, _compile_seconds
    arch = _normalize_arch(arch)
    major, minor = nvrtc_version()
    key = content_key(source, arch, "\x00".join(options), f"nvrtc-{major}.{minor}", "ptxas-v")
    path = cache_dir("ptxas") / f"{key}.log"
    try:
        usage = parse_ptxas_log(path.read_text(encoding="utf-8"))
        if usage or "__global__" not in source:   # else an entry without entry points: redo
            return usage
    except (OSError, UnicodeDecodeError):
        pass
    flags = (f"--gpu-architecture={arch}", "-std=c++17", *(f"-I{d}" for d in include_dirs()),
             *options, "--ptxas-options=-v")
    t0 = time.perf_counter()
    try:
        _, log = _nvrtc_run(source, flags)
    finally:
        _compile_seconds += time.perf_counter() - t0
        _compile_count += 1
    atomic_write(path, log.encode())
    return parse_ptxas_log(log)


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_PROPS = re.compile(r"Function properties for (\S+)")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")


def parse_ptxas_log(log: str) -> dict[str, ResourceUsage]:
    """``ResourceUsage`` per entry function named in a ptxas ``-v`` log (NVRTC program log)."""
    fields: dict[str, dict[str, int]] = {}
    entry = props = None
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            entry = m.group(1)
            fields[entry] = {"registers": 0}
        elif m := _PTXAS_PROPS.search(line):
            props = m.group(1)
        elif (m := _PTXAS_FRAME.search(line)) and props in fields:
            for k, v in zip(("stack_frame", "spill_stores", "spill_loads"), m.groups()):
                fields[props][k] = int(v)
        elif (m := _PTXAS_USED.search(line)) and entry is not None:
            f = fields[entry]
            f["registers"] = int(m.group(1))
            if b := re.search(r"used (\d+) barriers", line):
                f["barriers"] = int(b.group(1))
            if sm := re.search(r"(\d+) bytes smem", line):
                f["shared"] = int(sm.group(1))
            f["constant"] = sum(int(x) for x in re.findall(r"(\d+) bytes cmem\[\d+\]", line))
    return {e: ResourceUsage(e, **f) for e, f in fields.items()}


# Cache file layout (see compile_cubin): magic, SHA-256 of the cubin, the cubin.
_CUBIN_MAGIC = b"dlcb-cubin-v1\n\x00\x00"  # 16 bytes; bump the version if the layout changes
_HEADER = len(_CUBIN_MAGIC) + hashlib.sha256().digest_size


def compile_cubin(source: str, *, arch: str = "sm_90", options: tuple[str, ...] = ()) -> bytes:
    """Compile a CUDA C++17 translation unit to a cubin for ``arch`` (e.g. ``"sm_90"``).

    Kernels should be ``extern "C"`` so their names survive unmangled. ``options`` are extra NVRTC
    flags (e.g. ``("-lineinfo", "--use_fast_math")``). The cubin is cached under
    ``cache_dir("cubin")``, keyed by (source, arch, options, NVRTC version); a hit returns the same
    bytes without calling NVRTC. Batch a model's kernels into one source: an NVRTC call costs tens
    of ms whatever the source size, since most of it is front-end start-up and header parsing.

    Cache file format: ``<key>.cubin`` holds ``_CUBIN_MAGIC`` (16 bytes), then the SHA-256 digest
    of the cubin (32 bytes), then the cubin itself (an ELF file, so strip the first 48 bytes
    before handing one to ``cuobjdump``). The file is written atomically (temp file +
    ``os.replace``) and checked on every read: a missing header, a wrong digest or a short file
    (a crash mid-write by an older version, disk corruption, a hand edit) counts as a miss, so
    NVRTC runs again and the entry is rewritten.
    """
    global _compile_count, _compile_seconds
    arch = _normalize_arch(arch)
    major, minor = nvrtc_version()
    key = content_key(source, arch, "\x00".join(options), f"nvrtc-{major}.{minor}")
    path = cache_dir("cubin") / f"{key}.cubin"
    cached = _read_cached_cubin(path)
    if cached is not None:
        return cached
    flags = (f"--gpu-architecture={arch}", "-std=c++17", *(f"-I{d}" for d in include_dirs()), *options)
    t0 = time.perf_counter()
    try:
        cubin = _nvrtc_compile(source, flags)
    finally:
        with _count_lock:
            _compile_seconds += time.perf_counter() - t0
            _compile_count += 1
    atomic_write(path, _CUBIN_MAGIC + hashlib.sha256(cubin).digest() + cubin)
    return cubin


def compile_cubins(sources: Sequence[str], *, arch: str = "sm_90",
                   options: tuple[str, ...] = ()) -> list[bytes]:
    """:func:`compile_cubin` of each source, in parallel threads (NVRTC releases the GIL: two
    halves of mobilenet_v3_large's kernels compile in 2.9 s on two threads, 6.1 s on one); the
    first failure is raised."""
    if len(sources) <= 1:
        return [compile_cubin(s, arch=arch, options=options) for s in sources]
    with ThreadPoolExecutor(min(len(sources), os.cpu_count() or 1)) as pool:
        return list(pool.map(lambda s: compile_cubin(s, arch=arch, options=options), sources))


_background: ThreadPoolExecutor | None = None
_pending: set[Future] = set()
_background_lock = threading.Lock()


def compile_cubin_later(source: str, *, arch: str = "sm_90", options: tuple[str, ...] = ()
                        ) -> Future:
    """:func:`compile_cubin` on a background thread (one pool per process, a thread per CPU):
    a ``Future`` of the cubin, for code no call may need soon (the 64-bit index entry points,
    ``runtime.build``), so a compile returns without waiting for it. Interpreter exit waits for
    the pending compiles (their cubins enter the cache)."""
    global _background
    with _background_lock:
        if _background is None:
            _background = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="dlcb-nvrtc")
        fut = _background.submit(compile_cubin, source, arch=arch, options=options)
        _pending.add(fut)
    fut.add_done_callback(_pending.discard)
    return fut


def wait_background() -> None:
    """Wait for every :func:`compile_cubin_later` submitted so far (its errors stay with its
    future)."""
    with _background_lock:
        pending = list(_pending)
    wait(pending)


def _read_cached_cubin(path: pathlib.Path) -> bytes | None:
    """The cubin stored at ``path`` if the file exists and its digest checks out, else ``None``."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:  # unreadable entry: recompile and try to replace it
        _log.warning("cubin cache: cannot read %s (%s); recompiling", path, err)
        return None
    n = len(_CUBIN_MAGIC)
    magic, digest, cubin = data[:n], data[n:_HEADER], data[_HEADER:]
    if magic == _CUBIN_MAGIC and cubin and digest == hashlib.sha256(cubin).digest():
        return cubin
    _log.warning("cubin cache: %s fails its header/digest check (corrupt, truncated or written by "
                 "an older version); recompiling", path)
    return None


def device_arch() -> str:
    """``"sm_XY"`` of the current CUDA device per torch (H200 → ``"sm_90"``); ``"sm_90"`` without a GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:
        pass
    return "sm_90"
