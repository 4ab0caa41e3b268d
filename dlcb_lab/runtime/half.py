"""fp16 / bf16 for numba kernels: numba has no 16-bit float type, so buffers are ``uint16`` arrays
of the bits and registers are float32. ``from_*`` widens exactly; ``to_*`` rounds to nearest even
(fp16 through LLVM's ``fptrunc``, bf16 in integer arithmetic; NaN stays NaN)."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


@intrinsic
def _f16_bits_to_f32(typingctx, bits):
    def codegen(context, builder, sig, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


@intrinsic
def _f32_to_f16_bits(typingctx, x):
    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


@intrinsic
def _u32_as_f32(typingctx, bits):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.uint32), codegen


@intrinsic
def _f32_as_u32(typingctx, x):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.uint32(types.float32), codegen


@njit(inline="always")
def from_f16(bits):
    return _f16_bits_to_f32(np.uint16(bits))


@njit(inline="always")
def to_f16(x):
    return _f32_to_f16_bits(np.float32(x))


@njit(inline="always")
def from_bf16(bits):
    return _u32_as_f32(np.uint32(bits) << np.uint32(16))


@njit(inline="always")
def to_bf16(x):
    u = np.int64(_f32_as_u32(np.float32(x)))
    if (u & 0x7FFFFFFF) > 0x7F800000:
        return np.uint16(0x7FC0)
    return np.uint16((u + 0x7FFF + ((u >> 16) & 1)) >> 16)
