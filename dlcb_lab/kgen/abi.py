"""The kernel ABI, defined once: the ordered parameter list of a generated entry point.

Every entry point (both index widths, both variants, both backends) takes

    out, in0, in1, ..., numel, <int params>..., <divisors>...

``out`` and ``inN`` are flat buffers (``out`` written, the inputs read, ``__restrict__`` on CUDA
but for an input ``out`` may overwrite, ``entries.in_place_inputs``) of the kernel's dtypes;
``numel`` is the number of output elements (threads, or blocks for the block-per-output variant);
the int params are the dims the kernel needs at run time, each the value of a dimension
expression the host program computes; a divisor param holds ``magic(d)`` for a
runtime divisor ``d`` of the kernel's index arithmetic (its 32-bit entry points divide by a
multiply-high and a shift; the 64-bit ones and numba ignore it). All are ``long long`` on CUDA
(``int64`` in numba). ``abi(k)`` is that list for one ``KernelBody``: the emitters print it (``kgen.emit``), the
launchers pack by it (``pack``), direct launches check arguments against it
(``runtime.direct``), ``hostgen.lower`` fills its slots, and the CUDA launcher's argument packing is
its ``launch_kinds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..dims import Expr
from ..errors import BuildError
from ..ir.dtypes import DType, dtype_of

__all__ = ["ORDER", "Param", "EntryABI", "abi", "pack", "magic", "magic_div"]

ORDER = ("out", "in", "numel", "int", "div")
"""The parameter kinds, in the order every entry point takes them."""

_LAUNCH_KIND = {"out": "ptr", "in": "ptr", "numel": "i64", "int": "i64", "div": "i64"}
"""How ``runtime.cuda_launch`` packs each kind: a device pointer, a 64-bit integer."""


@dataclass(frozen=True)
class Param:
    """One parameter: code ``name``, ``kind`` (``ORDER``), buffer ``dtype`` and IR ``value``
    (buffers), ``expr`` (``numel`` and int params: the dimension expression it holds; divisor
    params: the divisor, the param holding ``magic`` of it)."""

    name: str
    kind: str
    dtype: DType | None = None
    value: Any = None
    expr: Expr | None = None

    @property
    def is_buffer(self) -> bool:
        return self.kind in ("out", "in")


@dataclass(frozen=True)
class EntryABI:
    """The parameter list of entry point ``entry`` (``ORDER``)."""

    entry: str
    params: tuple[Param, ...]

    def __post_init__(self) -> None:
        ranks = [ORDER.index(p.kind) for p in self.params]
        if ranks != sorted(ranks) or ranks[:1] != [0] or ranks.count(0) != 1 \
                or ranks.count(2) != 1:
            raise BuildError(f"{self.entry}: parameters out of ABI order: "
                             f"{[p.kind for p in self.params]}")

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_buffer)

    @property
    def inputs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.kind == "in")

    @property
    def ints(self) -> tuple[Param, ...]:
        """``numel`` then the int params."""
        return tuple(p for p in self.params if not p.is_buffer)

    @property
    def int_params(self) -> tuple[Param, ...]:
        """The int params and the divisor params (every int after ``numel``)."""
        return tuple(p for p in self.params if p.kind in ("int", "div"))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def launch_kinds(self) -> tuple[str, ...]:
        """``runtime.cuda_launch.CudaKernel``'s signature: ``ptr`` per buffer, ``i64`` per int."""
        return tuple(_LAUNCH_KIND[p.kind] for p in self.params)


def abi(k) -> EntryABI:
    """The ABI of ``KernelBody`` ``k`` (one variant: ``k.variants()`` lists them)."""
    params = [Param("out", "out", k.dtype, k.out)]
    params += [Param(f"in{i}", "in", dtype_of(v.dtype), v) for i, v in enumerate(k.inputs)]
    params.append(Param("numel", "numel", expr=k.numel))
    params += [Param(n, "int", expr=e) for n, e in k.params]
    params += [Param(n, "div", expr=e) for n, e in k.divisors]
    return EntryABI(k.name, tuple(params))


def pack(out: Any, ins: Sequence[Any], numel: int, params: Sequence[int]) -> tuple:
    """A launch's arguments in ABI order (``ORDER``)."""
    return (out, *ins, numel, *params)


def magic(d: int) -> int:
    """The divisor param of runtime divisor ``d``: ``shift << 32 | m`` with ``shift`` the least
    ``s`` such that ``2**s >= d`` and ``m = 2**32 * (2**s - d) // d + 1`` (fits in 32 bits), so
    that ``n // d == (umulhi(n, m) + n) >> shift`` for every ``0 <= n < 2**31`` (``magic_div``;
    the CUDA prelude's ``dlcb_udiv``). ``d < 1`` (a kernel without elements) gives ``magic(1)``;
    ``d >= 2**31`` exceeds every such ``n``: ``m = 0``, ``shift = 31``, quotient 0."""
    if d >= 1 << 31:
        return 31 << 32
    d = max(d, 1)
    s = (d - 1).bit_length()
    return s << 32 | ((1 << 32) * ((1 << s) - d) // d + 1)


def magic_div(n: int, packed: int) -> int:
    """``n // d`` for ``0 <= n < 2**31`` from ``packed = magic(d)``, as the 32-bit entry points
    compute it (32-bit unsigned arithmetic throughout)."""
    m, s = packed & 0xFFFFFFFF, packed >> 32
    return (((n * m) >> 32) + n) >> s
