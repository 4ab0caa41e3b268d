"""The errors dlcb_lab raises. Every refusal is a ``DLError``; compile-time errors name the op, the
IR value and the user's source line, run-time errors the input, axis and constraint at fault.
Run-time errors are raised by the host program before any output is allocated or kernel launched.
"""

from __future__ import annotations


class DLError(Exception):
    """Base of dlcb_lab's errors. ``op``, ``node`` and ``where`` (the user's source line) locate the
    fault; ``str`` puts them before the message."""

    def __init__(self, msg: str, *, op: str = "", node: str = "", where: str = ""):
        super().__init__(msg)
        self.msg, self.op, self.node, self.where = msg, op, node, where

    def locate(self, op: str, node: str, where: str) -> "DLError":
        """Fill in the location if the raise site did not know it; returns ``self``."""
        if not self.where:
            self.op, self.node, self.where = self.op or op, self.node or node, where
        return self

    def __str__(self) -> str:
        head = self.op + (f" '{self.node}'" if self.node else "")
        if self.where:
            head += f" at {self.where}"
        return f"{head}: {self.msg}" if head else self.msg

    def __reduce__(self):
        return (_rebuild, (type(self), self.msg, self.op, self.node, self.where))


def _rebuild(cls, msg, op, node, where):
    err = cls.__new__(cls)
    DLError.__init__(err, msg, op=op, node=node, where=where)
    return err


class ShapeError(DLError, ValueError):
    """Operand shapes are incompatible, or a shape cannot be derived (raised at compile time)."""


class UnsupportedOp(DLError, NotImplementedError):
    """The traced program uses an op, argument, dtype or layout DLCB does not lower."""


class DTypeError(DLError, TypeError):
    """Operand dtypes an op rejects (as torch eager would)."""


class SpecError(DLError, ValueError):
    """A malformed argument to ``dl.compile`` (``dynamic``, ``backend``, example inputs)."""


class ShapeMismatch(DLError, ValueError):
    """An input shape violates a compiled shape constraint (raised before any kernel launch)."""


class ArgumentError(DLError, TypeError):
    """A call's arguments do not fit what was compiled: their number, an unknown or repeated
    keyword, an object that is no tensor (or array), an unsupported layout, a malformed launch
    configuration (raised before any launch)."""


class DeviceError(DLError, ValueError):
    """An argument lives on the wrong device, or the arguments on several devices."""


class LayoutError(DLError, ValueError):
    """An argument's memory does not fit a generated kernel's buffer: not contiguous, read-only,
    or overlapping the output (direct launches)."""


class BuildError(DLError, RuntimeError):
    """Building generated code failed (NVRTC compile, numba module load): a bug in dlcb_lab's
    code generation or the toolchain, never in the user's program."""


class ArtifactError(DLError, ValueError):
    """A compiled-module artifact cannot be saved or loaded (corrupt, other version, refused)."""
