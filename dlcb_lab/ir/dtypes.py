"""Element types the generated kernels handle, and how each is spelled in CUDA C++ and numba."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import UnsupportedOp


@dataclass(frozen=True)
class DType:
    """One element type; ``kind`` is ``"float"``, ``"int"`` or ``"bool"``. ``ctype``/``nptype``
    spell the type of a buffer element; a register holding a value is of type ``reg``.

    16-bit floats (fp16, bf16) are *reduced*: buffers store 16 bits (a 2-byte struct in CUDA, a
    ``uint16`` array in numba, converted on load and store), registers hold float (opmath), and
    every op's result is rounded to 16 bits, as eager rounds each op's output."""

    torch: torch.dtype
    tag: str
    ctype: str
    nptype: str
    kind: str

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def reduced(self) -> bool:
        return self.torch in (torch.float16, torch.bfloat16)

    @property
    def reg(self) -> "DType":
        """The type of a register holding a value of this type (float for reduced floats)."""
        return F32 if self.reduced else self

    @property
    def nbtype(self) -> str:
        """numba's name of the type (array signatures)."""
        return "boolean" if self.kind == "bool" else self.nptype

    def py_value(self, v: bool | int | float) -> bool | int | float:
        return {"float": float, "int": int, "bool": bool}[self.kind](v)

    def cuda_literal(self, v: bool | int | float) -> str:
        """``v`` as a CUDA C++ constant of this type."""
        if self.reduced:
            return F32.cuda_literal(v)
        v = self.py_value(v)
        if self.kind == "bool":
            return "true" if v else "false"
        if self.kind == "int":   # -2**63 has no literal: the literal 2**63 overflows
            return f"(({self.ctype})({v + 1}LL - 1))" if v < -2**62 else f"(({self.ctype}){v}LL)"
        if math.isinf(v) or math.isnan(v):
            c = "NAN" if math.isnan(v) else "INFINITY" if v > 0 else "(-INFINITY)"
            return c if self.ctype == "double" else f"((float){c})"
        return repr(v) + ("f" if self.ctype == "float" else "")

    def py_literal(self, v: bool | int | float) -> str:
        """``v`` as a numba constant of this type."""
        if self.reduced:
            return F32.py_literal(v)
        v = self.py_value(v)
        if self.kind == "float" and (math.isinf(v) or math.isnan(v)):
            return f"np.{self.nptype}({'np.nan' if math.isnan(v) else 'np.inf' if v > 0 else '-np.inf'})"
        if self.kind == "int" and v < -2**62:
            return f"np.{self.nptype}({v + 1} - 1)"
        return repr(v) if self.kind == "bool" else f"np.{self.nptype}({v!r})"

    def __repr__(self) -> str:
        return self.tag


DTYPES: dict[torch.dtype, DType] = {d.torch: d for d in (
    DType(torch.float32, "f32", "float", "float32", "float"),
    DType(torch.float64, "f64", "double", "float64", "float"),
    DType(torch.float16, "f16", "dlcb_f16", "uint16", "float"),
    DType(torch.bfloat16, "bf16", "dlcb_bf16", "uint16", "float"),
    DType(torch.int64, "i64", "long long", "int64", "int"),
    DType(torch.int32, "i32", "int", "int32", "int"),
    DType(torch.int16, "i16", "short", "int16", "int"),
    DType(torch.int8, "i8", "signed char", "int8", "int"),
    DType(torch.uint8, "u8", "unsigned char", "uint8", "int"),
    DType(torch.bool, "b8", "bool", "bool_", "bool"),
)}
F32, F64, I64 = DTYPES[torch.float32], DTYPES[torch.float64], DTYPES[torch.int64]


def dtype_of(t: torch.dtype) -> DType:
    """The ``DType`` of a torch dtype; ``UnsupportedOp`` for the others (complex, unsigned 16-64 bit, float8...)."""
    d = DTYPES.get(t)
    if d is None:
        raise UnsupportedOp(f"dtype {t} unsupported (supported: "
                            f"{', '.join(str(k).removeprefix('torch.') for k in DTYPES)})")
    return d
