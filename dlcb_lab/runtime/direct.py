"""Direct launches of one generated kernel, numba.cuda style (``cm.pipeline.kernels[i][grid,
block](out, in0, ..)``), checked against the kernel's symbolic signature before anything runs.

A ``KernelSignature`` is one entry point's contract: each buffer (``out``, ``in0``..) with its
dtype and solved shape (dimension expressions), and the int arguments ``numel, params..`` as
expressions. ``DirectKernel.check(*args)`` binds the signature to concrete arguments:

1. arguments: torch tensors, numpy arrays (CPU kernels), or any ``__cuda_array_interface__``
   object (CUDA kernels: numba.cuda device arrays, CuPy...); each must have the buffer's dtype
   (bf16 has no typestr: torch tensors only), live where the kernel runs, be C-contiguous, and
   ``out`` must be writable and overlap no input (the kernels are ``__restrict__``);
2. shapes: every axis is matched against its expression. Axes are visited in order (``out`` first)
   until none makes progress: an axis whose expression evaluates under what is known is checked;
   an axis affine in one unknown monomial (``N``, ``2*N + 1``, ``(H + 1) // 2``, ``N*W``) binds it
   (an exact, non-negative integer solution, else the axis is refused). Evaluation substitutes known
   sub-expressions (interned, so a buffer's ``(H + 1) // 2`` is the same node inside a parameter's
   ``((H + 1) // 2 + 1) // 2``); a variable no buffer determines stays unknown;
3. guards: the compiled program's residual constraints and requirements (a slice within its axis,
   a window within its padded axis, a non-empty ``amax``), checked where the shapes determine them,
   as the host program checks them per call. Conservatively every guard whose dims all appear in
   the kernel's buffers, so a kernel refuses what the program refuses even where another kernel is
   the one that needs the guard;
4. the int arguments: ``numel``, each param and the index bounds are evaluated as the host program
   evaluates launch slots (``x // 0`` is 0). Ints passed explicitly (all of ``numel, params..``, or
   none) must equal the derived values; they supply the values no shape determines. The 32-bit
   entry point is taken when every index bound of the kernel (all variants, as ``Thunk._choose``
   decides) is known and at most ``NARROW_LIMIT``; else the 64-bit one;
5. index tensors (gather-style inputs) hold values within their extent (a device sync on CUDA).

Refusals, all before the launch: ``TypeError`` (argument count, an object that is no array,
malformed launch configuration), ``dl.DTypeError`` (dtype), ``ValueError`` (device, contiguity,
read-only or overlapping ``out``), ``dl.ShapeMismatch`` (shapes, ints, index values). Messages name
the argument with its IR value (``in1 (%y)``), the axis and the dimension expression.

The launch configuration: the generated kernels are 1-D (``blockIdx.x``, ``threadIdx.x``) and loop
grid-stride over their elements, so any ``grid`` >= 1 and ``block`` in [1, 1024] compute the whole
output (the block-per-output variant needs ``block`` a multiple of 32); ``y``/``z`` extents must be
1. ``forall(numel)`` takes the launcher's own ``geometry``. CPU kernels run the numba function (one
``prange`` iteration per output element, numba's threads): ``grid``/``block`` are validated and
otherwise ignored, ``stream`` must be None or 0.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..dims import Expr, FloorDiv, Lit, Mod, Prod, Sum, Var, prod
from ..errors import DTypeError, ShapeMismatch
from ..ir.dtypes import dtype_of
from ..ir.graph import Graph, Value
from ..ir.ops import reduced_extents
from ..kgen.emit import NARROW
from ..kgen.kir import KernelBody
from .launchers import NARROW_LIMIT, CpuLauncher, _flat_array, check_index

_TYPESTR: dict[str, torch.dtype] = {
    "f2": torch.float16, "f4": torch.float32, "f8": torch.float64, "i1": torch.int8,
    "i2": torch.int16, "i4": torch.int32, "i8": torch.int64, "u1": torch.uint8, "b1": torch.bool,
}
"""``__array_interface__``/``__cuda_array_interface__`` typestr (without the byte order) -> torch
dtype, for the dtypes generated kernels handle (bf16 has none)."""


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
class Guard:
    """A host-program check: ``lhs == rhs`` (``rhs`` set), else ``lhs >= 0`` or, ``positive``,
    ``lhs > 0``; ``what`` says where it comes from."""

    lhs: Expr
    rhs: Expr | None
    what: str
    positive: bool = False

    def failure(self, known: Mapping[Expr, int]) -> str | None:
        """Why the guard fails under ``known``; None when it holds or is undetermined."""
        a = _value(self.lhs, known, False)
        b = None if self.rhs is None else _value(self.rhs, known, False)
        if a is None or (self.rhs is not None and b is None):
            return None
        if self.rhs is not None:
            return None if a == b else f"{self.what}: {self.lhs!r} == {self.rhs!r} (got {a} != {b})"
        if (a > 0) if self.positive else (a >= 0):
            return None
        return f"{self.what}: needs {self.lhs!r} {'>' if self.positive else '>='} 0, got {a}"


def graph_guards(g: Graph) -> tuple[Guard, ...]:
    """The host program's per-call checks that are no axis check (``hostgen.lower``): residual
    constraints, requirements, non-empty ``amax`` reductions."""
    r = g.solver.resolve
    out = [Guard(r(c.lhs), r(c.rhs), f"residual constraint #{c.id} from {c.provenance}")
           for c in g.solver.residuals]
    out += [Guard(r(e), None, str(prov)) for e, prov in g.requirements
            if not isinstance(r(e), Lit)]
    for n in g.nodes:
        if n.op.name == "amax":
            e = prod(reduced_extents(g, n))
            if not isinstance(e, Lit):
                out.append(Guard(e, None, f"amax '{n.out.name}' at {n.where} reduces an empty "
                                          f"range (eager raises)", positive=True))
    return tuple(out)


@dataclass(frozen=True)
class KernelSignature:
    """The launch contract of one entry point (``variant`` 0: one thread per output element; 1:
    one block per output element): buffers, then ``numel`` and ``params`` (code name, expression),
    in the kernel's parameter order. ``index_bounds``: every variant's bounds (the 32-bit choice is
    the kernel's, not the variant's); ``index_checks``: (buffer position, extent) of index
    tensors."""

    entry: str
    variant: int
    cooperative: bool
    buffers: tuple[BufferSpec, ...]
    numel: Expr
    params: tuple[tuple[str, Expr], ...]
    index_bounds: tuple[Expr, ...]
    index_checks: tuple[tuple[int, Expr], ...] = ()
    guards: tuple[Guard, ...] = ()

    @property
    def int_names(self) -> tuple[str, ...]:
        return ("numel",) + tuple(n for n, _ in self.params)

    def __repr__(self) -> str:
        ints = [f"numel = {self.numel!r}"] + [f"{n} = {e!r}" for n, e in self.params]
        return f"{self.entry}({', '.join([repr(b) for b in self.buffers] + ints)})"


def kernel_signatures(body: KernelBody, dims: Callable[[Value], Sequence[Expr]],
                      guards: Sequence[Guard] = ()) -> tuple[KernelSignature, ...]:
    """One signature per variant of ``body``; ``dims(value)`` is the value's solved shape
    (``Graph.dims``); of ``guards`` (``graph_guards``), those over the dims of the buffers."""
    bounds = tuple(b for v in body.variants() for b in v.index_bounds)
    out = []
    for i, v in enumerate(body.variants()):
        bufs = (BufferSpec("out", v.out.name, v.dtype.torch, tuple(dims(v.out))),) + tuple(
            BufferSpec(f"in{j}", x.name, x.dtype, tuple(dims(x))) for j, x in enumerate(v.inputs))
        pos = {x.id: j + 1 for j, x in enumerate(v.inputs)}
        checks = tuple((pos[x.id], e) for x, e in v.index_checks if x.id in pos)
        free = frozenset().union(*(d.free_vars for b in bufs for d in b.shape))
        mine = tuple(gd for gd in guards
                     if (gd.lhs.free_vars | (gd.rhs.free_vars if gd.rhs else frozenset())) <= free)
        out.append(KernelSignature(v.name, i, v.cooperative, bufs, v.numel, v.params, bounds,
                                   checks, mine))
    return tuple(out)


# --- evaluation under partial knowledge -----------------------------------------------------------

def _value(e: Expr, known: Mapping[Expr, int], lenient: bool) -> int | None:
    """``e`` under ``known`` (values of sub-expressions, variables included), or None when it
    depends on an unknown variable. Divisors must be positive (``ShapeMismatch``), unless
    ``lenient`` (launch slots: ``x // 0`` and ``x % 0`` are 0)."""
    hit = known.get(e)
    if hit is not None:
        return hit
    if isinstance(e, Lit):
        return e.value
    if isinstance(e, Var):
        return None
    if isinstance(e, Prod):
        r = 1
        for f in e.factors:
            x = _value(f, known, lenient)
            if x is None:
                return None
            r *= x
        return r
    if isinstance(e, Sum):
        r = e.const
        for m, c in e.terms:
            x = _value(m, known, lenient)
            if x is None:
                return None
            r += c * x
        return r
    if isinstance(e, (FloorDiv, Mod)):
        n, d = _value(e.num, known, lenient), _value(e.den, known, lenient)
        if n is None or d is None:
            return None
        if d <= 0:
            if lenient:
                return 0
            raise ShapeMismatch(f"divisor {e.den!r} = {d} of {e!r} is not positive")
        return n // d if isinstance(e, FloorDiv) else n % d
    raise TypeError(f"cannot evaluate {e!r}")


def _solve(e: Expr, size: int, known: Mapping[Expr, int]) -> tuple[Expr, int | None] | None:
    """If ``e`` is affine in exactly one unknown monomial ``m`` (a product with one unknown factor
    reduces to that factor): ``(m, its value)`` such that ``e == size``, the value None when no
    non-negative integer solves it. None when ``e`` has several unknown monomials."""
    const, terms = (e.const, e.terms) if isinstance(e, Sum) else (0, ((e, 1),))
    rest, unknown = size - const, None
    for m, c in terms:
        x = _value(m, known, False)
        if x is not None:
            rest -= c * x
        elif unknown is not None:
            return None
        else:
            unknown = (m, c)
    if unknown is None:
        return None
    m, c = unknown
    if isinstance(m, Prod):
        free = [f for f in m.factors if _value(f, known, False) is None]
        if len(free) == 1:
            c *= _value(prod(f for f in m.factors if f is not free[0]), known, False)
            m = free[0]
    if c <= 0 or rest % c or rest < 0:
        return m, None
    return m, rest // c


def _sources(e: Expr, origin: Mapping[Expr, str]) -> list[str]:
    """Where the known sub-expressions ``e`` depends on were read: ``N from out (%y) axis 0``."""
    if e in origin:
        return [f"{e!r} from {origin[e]}"]
    return list(dict.fromkeys(s for c in e.children() for s in _sources(c, origin)))


def _why(e: Expr, origin: Mapping[Expr, str]) -> str:
    if e in origin:
        return f" (from {origin[e]})"
    src = [] if isinstance(e, Lit) else _sources(e, origin)
    return f" ({'; '.join(src)})" if src else ""


# --- arguments ------------------------------------------------------------------------------------

@dataclass
class _Arg:
    """One buffer argument, checked: what the launcher gets, and what the checks read."""

    obj: Any                 # what the launcher gets: a tensor, a device address, a flat array
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


def _dtype_error(spec: BufferSpec, got: str) -> DTypeError:
    hint = (" (bf16 has no typestr: pass a torch.bfloat16 tensor)"
            if spec.dtype is torch.bfloat16 else "")
    return DTypeError(f"{spec.label}: dtype {got}, the kernel's buffer is "
                      f"{str(spec.dtype).removeprefix('torch.')}{hint}")


def _convert(x: Any, spec: BufferSpec, cuda: bool) -> _Arg:
    """Check one buffer argument (kind, device, dtype, contiguity; ``out`` writable)."""
    where = "CUDA memory" if cuda else "CPU memory"
    accepted = ("a torch CUDA tensor, a numba.cuda device array or any __cuda_array_interface__ "
                "object" if cuda else "a torch CPU tensor or a numpy array")
    writes = spec.name == "out"
    if isinstance(x, torch.Tensor):
        if x.layout is not torch.strided:
            raise TypeError(f"{spec.label}: layout {x.layout} unsupported (strided tensors only)")
        if x.is_cuda != cuda:
            raise ValueError(f"{spec.label}: a tensor on {x.device}; the "
                             f"{'cuda' if cuda else 'cpu'} kernel needs {where} ({accepted})")
        if x.dtype != spec.dtype:
            raise _dtype_error(spec, str(x.dtype).removeprefix("torch."))
        if not x.is_contiguous():
            raise ValueError(f"{spec.label}: not contiguous (shape {list(x.shape)}, strides "
                             f"{list(x.stride())}); pass .contiguous()")
        x = x.detach()
        return _Arg(x if cuda else _flat_array(x), tuple(x.shape), x.data_ptr(),
                    x.numel() * x.element_size(), x.device.index if cuda else None, x)
    if isinstance(x, np.ndarray):
        if cuda:
            raise ValueError(f"{spec.label}: a numpy array (host memory); the cuda kernel needs "
                             f"{where} ({accepted})")
        if _typestr_dtype(x.dtype.str) != spec.dtype:
            raise _dtype_error(spec, f"{x.dtype.str!r} ({x.dtype})")
        if not x.flags.c_contiguous:
            raise ValueError(f"{spec.label}: not C-contiguous (shape {list(x.shape)}, strides "
                             f"{list(x.strides)} bytes); pass np.ascontiguousarray(...)")
        if writes and not x.flags.writeable:
            raise ValueError(f"{spec.label}: read-only array")
        flat = x.reshape(-1)
        if not x.flags.writeable:   # numba's signature takes mutable arrays; inputs are only read
            flat = flat.copy()
        flat = flat.view(np.uint16) if spec.dtype is torch.float16 else flat
        return _Arg(flat, tuple(x.shape), x.__array_interface__["data"][0], x.nbytes, None, x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise TypeError(f"{spec.label}: expected {accepted}, got {type(x).__name__}")
    if not cuda:
        raise ValueError(f"{spec.label}: {type(x).__name__} is CUDA memory; the cpu kernel needs "
                         f"{where} ({accepted})")
    shape, ts = tuple(int(d) for d in cai["shape"]), cai["typestr"]
    ptr, readonly = cai["data"]
    if _typestr_dtype(ts) != spec.dtype:
        raise _dtype_error(spec, f"typestr {ts!r}")
    if cai.get("mask") is not None:
        raise ValueError(f"{spec.label}: masked arrays unsupported")
    itemsize = int(ts[2:])
    strides = cai.get("strides")
    if strides is not None and not _c_contiguous(shape, strides, itemsize):
        raise ValueError(f"{spec.label}: not C-contiguous (shape {list(shape)}, strides "
                         f"{list(strides)} bytes)")
    if writes and readonly:
        raise ValueError(f"{spec.label}: read-only array")
    n = itemsize
    for d in shape:
        n *= d
    return _Arg(int(ptr or 0), shape, int(ptr or 0), n, None, x)


def _as_tensor(a: _Arg) -> torch.Tensor:
    """A torch view of an argument (for index-tensor checks)."""
    x = a.source
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(x))
    return torch.as_tensor(x, device="cuda")


def _as_int(x: Any, name: str) -> int:
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"int argument {name}: got a bool")
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"int argument {name}: expected an int, got {type(x).__name__}") from None


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
            raise TypeError(f"{self.signature.entry}[...] takes (grid, block) or "
                            f"(grid, block, stream)")
        grid, block = _extent(config[0], "grid", 0), _extent(config[1], "block", 1)
        stream = config[2] if len(config) == 3 else None
        if isinstance(stream, int) and not isinstance(stream, bool) and stream == 0:
            stream = None       # numba's spelling of the default stream: torch's current one
        if self.cuda:
            if block > 1024:
                raise ValueError(f"block {block}: at most 1024 threads per block")
            if self.signature.cooperative and block % 32:
                raise ValueError(f"block {block}: the block-per-output variant needs a multiple "
                                 f"of 32 threads")
        elif stream is not None:
            raise TypeError(f"cpu kernel {self.signature.entry}: no streams (got "
                            f"{type(stream).__name__})")
        return BoundLaunch(self, grid, block, stream)

    def forall(self, numel: int, stream: Any = None) -> "BoundLaunch":
        """Configured with the launcher's ``geometry`` for ``numel`` output elements (the
        thunk's own configuration)."""
        grid, block = self.launcher.geometry(self.signature.variant, _as_int(numel, "numel"))
        return self[grid, block, stream]

    def __call__(self, *args: Any) -> None:
        e = self.signature.entry
        raise TypeError(f"launch with {e}[grid, block](...), {e}[grid, block, stream](...) or "
                        f"{e}.forall(numel)(...)")

    def check(self, *args: Any) -> DirectLaunch:
        """Check ``args`` against the signature and resolve the launch; launches nothing."""
        sig = self.signature
        nb, names = len(sig.buffers), sig.int_names
        if len(args) not in (nb, nb + len(names)):
            bufs = ", ".join(b.name for b in sig.buffers)
            raise TypeError(f"{sig.entry} takes {nb} buffers ({bufs}), optionally followed by "
                            f"{len(names)} ints ({', '.join(names)}); got {len(args)} arguments")
        bufs = [_convert(x, b, self.cuda) for x, b in zip(args, sig.buffers)]
        ints = [_as_int(x, n) for x, n in zip(args[nb:], names)]
        devices = {a.device for a in bufs if a.device is not None}
        if len(devices) > 1:
            raise ValueError(f"{sig.entry}: tensors on several devices {sorted(devices)}")
        o = bufs[0]
        for a, b in zip(bufs[1:], sig.buffers[1:]):
            if o.nbytes and a.nbytes and a.ptr < o.ptr + o.nbytes and o.ptr < a.ptr + a.nbytes:
                raise ValueError(f"{sig.buffers[0].label} overlaps {b.label}: the kernel's "
                                 f"buffers are __restrict__ (write to a separate buffer)")
        for a, b in zip(bufs, sig.buffers):
            if len(a.shape) != len(b.shape):
                raise ShapeMismatch(f"{b.label}: rank {len(a.shape)} != {len(b.shape)} "
                                    f"(expected [{', '.join(map(repr, b.shape))}])")
        known: dict[Expr, int] = {}
        origin: dict[Expr, str] = {}
        pending = [(b, k, e, n) for a, b in zip(bufs, sig.buffers)
                   for k, (e, n) in enumerate(zip(b.shape, a.shape))]
        pending = _settle(pending, known, origin)
        exprs = (sig.numel,) + tuple(e for _, e in sig.params)
        if ints:
            for n, e, given in zip(names, exprs, ints):
                got = _value(e, known, True)
                if got is None:
                    known[e], origin[e] = given, f"int argument {n}"
                elif got != given:
                    raise ShapeMismatch(f"int argument {n} = {given}, but {e!r} = {got} by the "
                                        f"argument shapes{_why(e, origin)}")
            pending = _settle(pending, known, origin)
        if pending:
            b, k, e, n = pending[0]
            free = ", ".join(sorted(e.free_vars))
            raise ShapeMismatch(f"{b.label} axis {k}: cannot check size {n} against {e!r}: "
                                f"{free} not determined by the argument shapes" +
                                ("" if ints else f"; pass the ints ({', '.join(names)})"))
        _verify(known, origin)
        for gd in sig.guards:
            why = gd.failure(known)
            if why is not None:
                raise ShapeMismatch(f"{sig.entry}: {why}{_why(gd.lhs, origin)}")
        values = [_value(e, known, True) for e in exprs]
        for n, e, v in zip(names, exprs, values):
            if v is None:
                raise ShapeMismatch(f"{sig.entry}: {n} = {e!r} is not determined by the argument "
                                    f"shapes; pass the ints ({', '.join(names)}) explicitly")
        bounds = [_value(e, known, True) for e in sig.index_bounds]
        bound = None if None in bounds else max(bounds, default=0)
        narrow = self.cuda and bound is not None and bound <= NARROW_LIMIT
        for pos, ext in sig.index_checks:
            x = _value(ext, known, True)
            if x is None:
                raise ShapeMismatch(f"{sig.buffers[pos].label}: the extent {ext!r} its index "
                                    f"values must stay below is not determined by the shapes")
            check_index(_as_tensor(bufs[pos]), x, sig.buffers[pos].label)
        dev = (f"cuda:{devices.pop() if devices else torch.cuda.current_device()}" if self.cuda
               else "cpu")
        return DirectLaunch(sig.entry + NARROW * narrow, sig.variant, values[0],
                            tuple(zip(names[1:], values[1:])), narrow, bound,
                            tuple((repr(e), v, origin[e]) for e, v in known.items()), dev,
                            tuple(a.obj for a in bufs))

    def launch(self, grid: int, block: int, stream: Any, *args: Any) -> None:
        """Check ``args``, then launch (nothing when the kernel has no elements)."""
        d = self.check(*args)
        if not d.numel:
            return
        if not grid:
            raise ValueError(f"grid 0 launches nothing, but {d.entry} has {d.numel} elements")
        params = [v for _, v in d.params]
        if not self.cuda:
            self.launcher.fn(*d.args, d.numel, *params)
            return
        k = self.launcher.kernels[d.variant, d.narrow]
        dev = torch.device(d.device).index
        if dev == torch.cuda.current_device():
            k[grid, block, stream](*d.args, d.numel, *params)
        else:
            with torch.cuda.device(dev):
                k[grid, block, stream](*d.args, d.numel, *params)

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
        raise TypeError(f"{what} {x!r}: an int or a tuple of 1 to 3 ints")
    dims = tuple(_as_int(d, what) for d in dims)
    if any(d != 1 for d in dims[1:]):
        raise ValueError(f"{what} {x!r}: generated kernels are 1-D (y and z must be 1)")
    if dims[0] < low:
        raise ValueError(f"{what} {x!r}: must be at least {low}")
    return dims[0]


def _settle(pending: list, known: dict[Expr, int], origin: dict[Expr, str]) -> list:
    """Check or bind axes ``(buffer, axis, expression, size)`` until none makes progress;
    returns those that stay undetermined."""
    progress = True
    while pending and progress:
        progress, left = False, []
        for item in pending:
            b, k, e, n = item
            try:
                got = _value(e, known, False)
            except ShapeMismatch as err:
                raise ShapeMismatch(f"{b.label} axis {k}: {err}") from None
            if got is not None:
                if got != n:
                    want = repr(e) if isinstance(e, Lit) else f"{e!r} = {got}"
                    raise ShapeMismatch(f"{b.label} axis {k}: size {n} != {want}"
                                        f"{_why(e, origin)}")
                progress = True
                continue
            solved = _solve(e, n, known)
            if solved is None:
                left.append(item)
                continue
            m, v = solved
            if v is None:
                raise ShapeMismatch(f"{b.label} axis {k}: size {n} != {e!r} for every integer "
                                    f"{m!r} >= 0{_why(e, origin)}")
            known[m], origin[m] = v, f"{b.label} axis {k}"
            progress = True
        pending = left
    return pending


def _verify(known: dict[Expr, int], origin: Mapping[Expr, str]) -> None:
    """Every bound sub-expression that is no variable equals its own evaluation from what else is
    known (a buffer's ``(H + 1) // 2`` bound before another's ``H``)."""
    for m in [m for m in known if not isinstance(m, Var)]:
        v = known.pop(m)
        lenient = origin[m].startswith("int argument")
        try:
            got = _value(m, known, lenient)
        finally:
            known[m] = v
        if got is not None and got != v:
            what = origin[m] + (f" = {v}" if lenient else f": size {v}")
            raise ShapeMismatch(f"{what} != {m!r} = {got}{_why_inner(m, origin)}")


def _why_inner(m: Expr, origin: Mapping[Expr, str]) -> str:
    src = list(dict.fromkeys(s for c in m.children() for s in _sources(c, origin)))
    return f" ({'; '.join(src)})" if src else ""
