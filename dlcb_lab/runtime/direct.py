"""Direct launches of one generated kernel, numba.cuda style (``cm.pipeline.kernels[i][grid,
block](out, in0, ..)``), checked against the kernel's symbolic signature before anything runs.

A ``KernelSignature`` is one entry point's contract: each buffer (``out``, ``in0``..) with its
dtype and solved shape (dimension expressions), and the int arguments ``numel, params..`` as
expressions. ``DirectKernel.check(*args)`` binds the signature to concrete arguments:

1. arguments (``runtime.args.check_buffer``): torch tensors, numpy arrays (CPU kernels), or any
   ``__cuda_array_interface__`` object (CUDA kernels: numba.cuda device arrays, CuPy...); each
   must have the buffer's dtype (bf16 has no typestr: torch tensors only), live where the kernel
   runs, be C-contiguous, and ``out`` must be writable and overlap no input (the kernels are
   ``__restrict__``);
2. shapes: the signature's binding plan (``dims.bind``, the host program's binder) over the
   buffers' axes, ``out`` first: an axis affine in one unknown monomial (``N``, ``2*N + 1``,
   ``(H + 1) // 2``, ``N*W``) binds it (an exact, non-negative integer solution, else the axis is
   refused), every other axis is checked; a bound atom is checked against its operands once they
   are known. A variable no buffer determines stays unknown;
3. guards: the compiled program's guards (``hostgen.guards``: residual constraints, requirements,
   non-empty ``amax``), checked where the shapes determine them, as the host program checks them
   per call. Conservatively every guard whose dims all appear in the kernel's buffers, so a kernel
   refuses what the program refuses even where another kernel is the one that needs the guard;
4. the int arguments: ``numel``, each param and the index bounds are evaluated as the host program
   evaluates launch slots (``x // 0`` is 0). Ints passed explicitly (all of ``numel, params..``, or
   none) are sources of the binding plan after the buffers: checked where the shapes determine
   them, else they bind (supplying the values no shape determines). The 32-bit entry point is
   taken when every index bound of the kernel (all variants) is known and their maximum
   ``kgen.entries.fits``, as ``Thunk._choose`` decides; else the 64-bit one (of one output per
   thread or group: a direct launch never takes the vectorized or group-of-lanes ones);
5. index tensors (gather-style inputs) hold values within their extent (a device sync on CUDA).

Refusals, all before the launch: ``dl.ArgumentError`` (a TypeError: argument count, an object that
is no array, a malformed int or launch configuration), ``dl.DTypeError`` (dtype),
``dl.DeviceError`` (a ValueError: device, meta tensors), ``dl.LayoutError`` (a ValueError:
contiguity, read-only or overlapping ``out``), ``dl.ShapeMismatch`` (shapes, ints, index values).
Messages name the argument with its IR value (``in1 (%y)``), the axis and the dimension expression.

The launch configuration: the generated kernels are 1-D (``blockIdx.x``, ``threadIdx.x``) and loop
grid-stride over their elements, so any ``grid`` >= 1 and ``block`` in [1, 1024] compute the whole
output (the block-per-output variant needs ``block`` a multiple of 32); ``y``/``z`` extents must be
1. ``forall(numel)`` takes the launcher's own ``geometry``. CPU kernels run the numba function (one
``prange`` iteration per output element, numba's threads): ``grid``/``block`` are validated and
otherwise ignored, ``stream`` must be None or 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..dims import Expr
from ..dims.bind import BindPlan, Source, plan_binding
from ..errors import ArgumentError, ShapeMismatch
from ..hostgen.guards import Guard
from ..ir.dtypes import dtype_of
from ..ir.graph import Value
from ..kgen.abi import abi, magic, pack
from ..kgen.entries import EntryPoint, fits, in_place_inputs
from ..kgen.kir import KernelBody
from .args import Buffer, as_int, check_buffer, check_overlap
from .launchers import CpuLauncher, _flat_array, check_index

__all__ = ["BufferSpec", "KernelSignature", "kernel_signatures", "DirectKernel", "DirectLaunch",
           "BoundLaunch"]

# --- the signature --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BufferSpec:
    """One buffer parameter: code name (``out``, ``in0``..), IR value, dtype and solved shape."""

    name: str
    value: str
    dtype: torch.dtype
    shape: tuple[Expr, ...]

    @property
    def label(self) -> str:
        return f"{self.name} (%{self.value})"

    def __repr__(self) -> str:
        return (f"{self.label}: {dtype_of(self.dtype)!r}"
                f"[{', '.join(repr(d) for d in self.shape)}]")


@dataclass(frozen=True)
class KernelSignature:
    """The launch contract of one entry point (``variant`` 0: one thread per output element; 1:
    one block per output element), read from its ABI (``kgen.abi``): buffers, then ``numel`` and
    ``params`` (code name, expression). ``index_bounds``: every variant's bounds (the 32-bit
    choice is the kernel's, not the variant's); ``index_checks``: (buffer position, extent) of
    index tensors; ``guards``: the program's guards (``hostgen.guards``) over the buffers' dims."""

    entry: str
    variant: int
    cooperative: bool
    buffers: tuple[BufferSpec, ...]
    numel: Expr
    params: tuple[tuple[str, Expr], ...]
    index_bounds: tuple[Expr, ...]
    index_checks: tuple[tuple[int, Expr], ...] = ()
    guards: tuple[Guard, ...] = ()
    divisors: tuple[tuple[str, Expr], ...] = ()
    in_place: tuple[int, ...] = ()
    """Positions of the buffers ``out`` may be (the same memory exactly:
    ``entries.in_place_inputs``)."""

    @property
    def int_names(self) -> tuple[str, ...]:
        return ("numel",) + tuple(n for n, _ in self.params)

    def binding(self, with_ints: bool) -> BindPlan:
        """The binding plan over the buffers' axes (``out`` first) and, ``with_ints``, the int
        arguments (``dims.bind``); built once per signature."""
        plans = self.__dict__.setdefault("_plans", {})
        if with_ints not in plans:
            src = [Source(f"{b.label} axis {k}", e, j, k) for j, b in enumerate(self.buffers)
                   for k, e in enumerate(b.shape)]
            if with_ints:
                exprs = (self.numel,) + tuple(e for _, e in self.params)
                src += [Source(f"int argument {n}", e, j)
                        for j, (n, e) in enumerate(zip(self.int_names, exprs))]
            plans[with_ints] = plan_binding(src)
        return plans[with_ints]

    def __repr__(self) -> str:
        ints = [f"numel = {self.numel!r}"] + [f"{n} = {e!r}" for n, e in self.params]
        return f"{self.entry}({', '.join([repr(b) for b in self.buffers] + ints)})"


def kernel_signatures(body: KernelBody, dims: Callable[[Value], Sequence[Expr]],
                      guards: Sequence[Guard] = (), reads: Sequence[tuple[Value, Expr]] = ()
                      ) -> tuple[KernelSignature, ...]:
    """One signature per variant of ``body``, from its ABI; ``dims(value)`` is the value's solved
    shape (``Graph.dims``); of ``guards`` (``hostgen.guards.graph_guards``), those over the dims
    of the buffers; of the index ``reads`` (``passes.partition.index_reads``), those of index
    tensors among its arguments."""
    bounds = tuple(b for v in body.variants() for b in v.index_bounds)
    out = []
    for i, v in enumerate(body.variants()):
        a = abi(v)
        bufs = tuple(BufferSpec(p.name, p.value.name, p.dtype.torch, tuple(dims(p.value)))
                     for p in a.buffers)
        pos = {p.value.id: j for j, p in enumerate(a.buffers) if p.kind == "in"}
        checks = tuple((pos[x.id], e) for x, e in reads if x.id in pos)
        free = frozenset().union(*(d.free_vars for b in bufs for d in b.shape))
        mine = tuple(gd for gd in guards if gd.free_vars <= free)
        out.append(KernelSignature(v.name, i, v.cooperative, bufs, a.ints[0].expr,
                                   tuple((p.name, p.expr) for p in a.int_params if p.kind == "int"),
                                   bounds, checks, mine,
                                   tuple((p.name, p.expr) for p in a.int_params if p.kind == "div"),
                                   tuple(j + 1 for j in in_place_inputs(v))))
    return tuple(out)


def _as_tensor(a: Buffer) -> torch.Tensor:
    """A torch view of an argument (for index-tensor checks)."""
    x = a.source
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    return torch.as_tensor(x, device="cuda")


# --- launches -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DirectLaunch:
    """A checked launch: the entry point (``_i32`` suffix: 32-bit index arithmetic), ``numel``
    and ``params`` as the kernel receives them, the index bound that decided the width (None: not
    derivable, 64-bit), and ``bindings``: each sub-expression read from the argument shapes, its
    value and the axis (or int argument) it was read from."""

    entry: str
    variant: int
    numel: int
    params: tuple[tuple[str, int], ...]
    narrow: bool
    index_bound: int | None
    bindings: tuple[tuple[str, int, str], ...]
    device: str
    args: tuple = field(default=(), repr=False, compare=False)


class DirectKernel:
    """One entry point of a built kernel, launched as ``k[grid, block](*args)`` or
    ``k[grid, block, stream](*args)`` (numba.cuda's form), ``k.forall(numel)(*args)``, or checked
    without launching by ``k.check(*args)``. ``args``: the buffers ``out, in0, ..`` then,
    optionally, every int argument ``numel, params..`` (checked against the derived values). See
    the module docstring for what is checked and refused."""

    def __init__(self, signature: KernelSignature, launcher: Any):
        self.signature = signature
        self.launcher = launcher
        self.cuda = not isinstance(launcher, CpuLauncher)

    @property
    def backend(self) -> str:
        return "cuda" if self.cuda else "cpu"

    def __getitem__(self, config: tuple) -> "BoundLaunch":
        if not isinstance(config, tuple) or len(config) not in (2, 3):
            raise ArgumentError(f"{self.signature.entry}[...] takes (grid, block) or "
                                f"(grid, block, stream)")
        grid, block = _extent(config[0], "grid", 0), _extent(config[1], "block", 1)
        stream = config[2] if len(config) == 3 else None
        if isinstance(stream, int) and not isinstance(stream, bool) and stream == 0:
            stream = None       # numba's spelling of the default stream: torch's current one
        if self.cuda:
            if block > 1024:
                raise ArgumentError(f"block {block}: at most 1024 threads per block")
            if self.signature.cooperative and block % 32:
                raise ArgumentError(f"block {block}: the block-per-output variant needs a multiple "
                                    f"of 32 threads")
        elif stream is not None:
            raise ArgumentError(f"cpu kernel {self.signature.entry}: no streams (got "
                                f"{type(stream).__name__})")
        return BoundLaunch(self, grid, block, stream)

    def forall(self, numel: int, stream: Any = None) -> "BoundLaunch":
        """Configured with the launcher's ``geometry`` for ``numel`` output elements (the
        thunk's own configuration)."""
        grid, block = self.launcher.geometry(self._entry(False), as_int(numel, "numel"))
        return self[grid, block, stream]

    def _entry(self, narrow: bool) -> EntryPoint:
        """The entry point of the signature's variant a direct launch takes where ``narrow``
        (the index bound ``fits``): of one output per thread or group."""
        return self.launcher.pick(self.signature.variant, 0, narrow, plain=True)

    def __call__(self, *args: Any) -> None:
        e = self.signature.entry
        raise ArgumentError(f"launch with {e}[grid, block](...), {e}[grid, block, stream](...) or "
                            f"{e}.forall(numel)(...)")

    def check(self, *args: Any) -> DirectLaunch:
        """Check ``args`` against the signature and resolve the launch; launches nothing."""
        sig = self.signature
        nb, names = len(sig.buffers), sig.int_names
        if len(args) not in (nb, nb + len(names)):
            bufs = ", ".join(b.name for b in sig.buffers)
            raise ArgumentError(f"{sig.entry} takes {nb} buffers ({bufs}), optionally followed "
                                f"by {len(names)} ints ({', '.join(names)}); got {len(args)} "
                                f"arguments")
        bufs = [check_buffer(x, b.label, b.dtype, self.cuda, b.name == "out", _flat_array)
                for x, b in zip(args, sig.buffers)]
        ints = [as_int(x, n) for x, n in zip(args[nb:], names)]
        check_overlap(bufs, [b.label for b in sig.buffers], sig.in_place)
        devices = {a.device for a in bufs if a.device is not None}
        for a, b in zip(bufs, sig.buffers):
            if len(a.shape) != len(b.shape):
                raise ShapeMismatch(f"{b.label}: rank {len(a.shape)} != {len(b.shape)} "
                                    f"(expected [{', '.join(map(repr, b.shape))}])")
        plan = sig.binding(bool(ints))
        bd = plan.run([a.shape for a in bufs], ints)
        if plan.pending:
            raise ShapeMismatch(plan.undetermined(plan.pending[0]) +
                                ("" if ints else f"; pass the ints ({', '.join(names)})"))
        for gd in sig.guards:
            try:
                why = gd.failure(bd.known)
            except ShapeMismatch as err:      # a non-positive divisor inside the guard
                why = f"{gd.message.format(got='?', want='?')}: {err}"
            if why is not None:
                raise ShapeMismatch(f"{sig.entry}: {why}{bd.why(gd.lhs)}")
        exprs = (sig.numel,) + tuple(e for _, e in sig.params + sig.divisors)
        values = [bd.value(e, True) for e in exprs]
        for n, e, v in zip(names + tuple(n for n, _ in sig.divisors), exprs, values):
            if v is None:
                raise ShapeMismatch(f"{sig.entry}: {n} = {e!r} is not determined by the argument "
                                    f"shapes; pass the ints ({', '.join(names)}) explicitly")
        values[len(names):] = [magic(v) for v in values[len(names):]]
        names += tuple(n for n, _ in sig.divisors)
        bounds = [bd.value(e, True) for e in sig.index_bounds]
        bound = None if None in bounds else max(bounds, default=0)
        entry = self._entry(fits(bound))
        for pos, ext in sig.index_checks:
            x = bd.value(ext, True)
            if x is None:
                raise ShapeMismatch(f"{sig.buffers[pos].label}: the extent {ext!r} its index "
                                    f"values must stay below is not determined by the shapes")
            check_index(_as_tensor(bufs[pos]), x, sig.buffers[pos].label)
        dev = (f"cuda:{devices.pop() if devices else torch.cuda.current_device()}" if self.cuda
               else "cpu")
        return DirectLaunch(sig.entry + entry.suffix, sig.variant, values[0],
                            tuple(zip(names[1:], values[1:])), entry.narrow, bound,
                            tuple((repr(e), v, bd.origin[e]) for e, v in bd.known.items()),
                            dev, tuple(a.obj for a in bufs))

    def launch(self, grid: int, block: int, stream: Any, *args: Any) -> None:
        """Check ``args``, then launch (nothing when the kernel has no elements)."""
        d = self.check(*args)
        if not d.numel:
            return
        if not grid:
            raise ArgumentError(f"grid 0 launches nothing, but {d.entry} has {d.numel} elements")
        argv = pack(d.args[0], d.args[1:], d.numel, [v for _, v in d.params])   # ABI order
        if not self.cuda:
            self.launcher.fn(*argv)
            return
        k = self.launcher.kernels[self._entry(d.narrow)]
        dev = torch.device(d.device).index
        if dev == torch.cuda.current_device():
            k[grid, block, stream](*argv)
        else:
            with torch.cuda.device(dev):
                k[grid, block, stream](*argv)

    def __repr__(self) -> str:
        return f"DirectKernel [{self.backend}] {self.signature!r}"


class BoundLaunch:
    """``k[grid, block(, stream)]``: call it with the kernel's arguments to check and launch."""

    __slots__ = ("kernel", "grid", "block", "stream")

    def __init__(self, kernel: DirectKernel, grid: int, block: int, stream: Any):
        self.kernel, self.grid, self.block, self.stream = kernel, grid, block, stream

    def __call__(self, *args: Any) -> None:
        self.kernel.launch(self.grid, self.block, self.stream, *args)

    def __repr__(self) -> str:
        s = "" if self.stream is None else f", {self.stream!r}"
        return f"{self.kernel.signature.entry}[{self.grid}, {self.block}{s}]"


def _extent(x: Any, what: str, low: int) -> int:
    """A 1-D launch extent: an int, or a tuple of up to 3 ints whose y and z are 1."""
    dims = tuple(x) if isinstance(x, (tuple, list)) else (x,)
    if not 1 <= len(dims) <= 3:
        raise ArgumentError(f"{what} {x!r}: an int or a tuple of 1 to 3 ints")
    dims = tuple(as_int(d, what) for d in dims)
    if any(d != 1 for d in dims[1:]):
        raise ArgumentError(f"{what} {x!r}: generated kernels are 1-D (y and z must be 1)")
    if dims[0] < low:
        raise ArgumentError(f"{what} {x!r}: must be at least {low}")
    return dims[0]
