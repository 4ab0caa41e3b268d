"""The kernel ABI, defined once: the ordered parameter list of a generated entry point.

Every entry point (both index widths, both variants, both backends) takes

    out, in0, in1, ..., numel, <int params>...

``out`` and ``inN`` are flat buffers (``out`` written, the inputs read, all ``__restrict__`` on
CUDA) of the kernel's dtypes; ``numel`` is the number of output elements (threads, or blocks for the
block-per-output variant); the int params are the dims the kernel needs at run time, each the value
of a dimension expression the host program computes. Both are ``long long`` on CUDA (``int64`` in
numba). ``abi(k)`` is that list for one ``KernelBody``: the emitters print it (``kgen.emit``), the
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

__all__ = ["ORDER", "Param", "EntryABI", "abi", "pack"]

ORDER = ("out", "in", "numel", "int")
"""The parameter kinds, in the order every entry point takes them."""

_LAUNCH_KIND = {"out": "ptr", "in": "ptr", "numel": "i64", "int": "i64"}
"""How ``runtime.cuda_launch`` packs each kind: a device pointer, a 64-bit integer."""


@dataclass(frozen=True)
class Param:
    """One parameter: code ``name``, ``kind`` (``ORDER``), buffer ``dtype`` and IR ``value``
    (buffers), ``expr`` (``numel`` and int params: the dimension expression it holds)."""

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
        return tuple(p for p in self.params if p.kind == "int")

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
    return EntryABI(k.name, tuple(params))


def pack(out: Any, ins: Sequence[Any], numel: int, params: Sequence[int]) -> tuple:
    """A launch's arguments in ABI order (``ORDER``)."""
    return (out, *ins, numel, *params)
