"""Library ops: computed by a vendor library through the ATen op in ``reference`` (cuDNN/cuBLAS
on CUDA, oneDNN/MKL on CPU), on materialized operands, with runtime shapes. Their bias, folded
batch norm, residual add and activation are separate elementwise ops in the IR, fused into the
generated kernel that consumes the library result (its epilogue); where eager rounds the sum
once (16 bits), the addend is the library call's (linear's bias, baddbmm's input)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from ...dims import Expr, Lit, Shape, as_expr, lit, shape
from ...errors import ShapeError, UnsupportedOp
from .core import OpDef, OpKind, register
from .elementwise import broadcast_dims
from .reduction import infer_along, infer_pool, pool_extent

if TYPE_CHECKING:
    from ..graph import Graph, Node


def _library(name: str, infer, reference, sample, out_dtype: torch.dtype | None = None,
             integer_backends: tuple[str, ...] = ()) -> None:
    register(OpDef(name, OpKind.LIBRARY, infer, None, reference, sample=sample,
                   out_dtype=out_dtype, integer_backends=integer_backends))


def _literal(e: Expr, what: str) -> int:
    if not isinstance(e, Lit):
        raise UnsupportedOp(f"{what} is symbolic ({e!r}); it must be a literal")
    return e.value


def _rng(n: int) -> torch.Generator:
    return torch.Generator().manual_seed(n)


# --- conv2d (bias separate) -------------------------------------------------------------------
#
# ``layout`` "NCHW" (as torch): input [N, C, H, W], weight [O, C/g, kh, kw], result [N, O, H', W'];
# "NHWC" (``passes.channels_last``): input [N, H, W, C], weight [O, kh, kw, C/g], result
# [N, H', W', O], each row-major: the reference hands cuDNN/oneDNN channels-last tensors (the
# permuted views below), which it reads and writes without a layout conversion.

CONV_AXES = {"NCHW": (0, 1, 2, 3), "NHWC": (0, 3, 1, 2)}
"""Per layout, the positions of (N, C, H, W) in the input and result and of (O, C/g, kh, kw) in
the weight."""


def _infer_conv(g: "Graph", node: "Node") -> Shape:
    x, w = node.inputs
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(f"conv2d needs a rank-4 input and weight, got ranks {x.rank}, {w.rank}")
    a = node.attrs
    groups = a["groups"]
    axes = CONV_AXES[a.get("layout", "NCHW")]
    dx, dw = g.dims(x), g.dims(w)
    n, c, h, wd = (dx[i] for i in axes)
    o, ci, kh, kw = (dw[i] for i in axes)
    g.constrain(c, ci * groups, node, f"input channels (axis {axes[1]}) == weight axis "
                                      f"{axes[1]} x groups {groups}")
    if _literal(o, "output channels") % groups:
        raise ShapeError(f"{o!r} output channels not divisible by groups {groups}")
    k = (_literal(kh, "kernel height"), _literal(kw, "kernel width"))
    dims = [g.solver.resolve(n), o]
    for i, (d, name) in enumerate(((h, "H"), (wd, "W"))):
        if a["padding"] == "same":
            if a["stride"][i] != 1:
                raise ShapeError("padding='same' needs stride 1")
            dims.append(g.solver.resolve(d))
        else:
            dims.append(pool_extent(g, node, g.solver.resolve(d), k[i], a["stride"][i],
                                    a["padding"][i], a["dilation"][i], False,
                                    f"axis {axes[2 + i]} ({name})"))
    out = [lit(0)] * 4
    for i, d in zip(axes, dims):
        out[i] = d
    return shape(out)


def _ref_conv(x, w, stride, padding, dilation, groups, layout="NCHW"):
    if layout == "NCHW":
        return F.conv2d(x, w, None, stride, padding, dilation, groups)
    y = F.conv2d(x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2), None, stride, padding, dilation,
                 groups)
    return y.permute(0, 2, 3, 1)


def _sample_conv(n: int):
    g = _rng(n)
    return ((torch.randn(n, 4, 9, 8, generator=g), torch.randn(6, 2, 3, 2, generator=g)),
            {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2})


_library("conv2d", _infer_conv, _ref_conv, _sample_conv)


# --- matmul (torch.matmul: 1-D operands and broadcast batch axes) -----------------------------

def _infer_matmul(g: "Graph", node: "Node") -> Shape:
    a, b = node.inputs
    if a.rank == 0 or b.rank == 0:
        raise ShapeError("matmul operands must have rank >= 1")
    da, db = list(g.dims(a)), list(g.dims(b))
    ka = da[-1]
    kb = db[0] if b.rank == 1 else db[-2]
    g.constrain(ka, kb, node, f"contraction: operand 0 axis {a.rank - 1} with operand 1 axis "
                              f"{0 if b.rank == 1 else b.rank - 2}")
    rows = [] if a.rank == 1 else [da[-2]]
    cols = [] if b.rank == 1 else [db[-1]]
    batch = broadcast_dims(g, node, [(0, da[:-2]), (1, db[:-2])])
    return shape([g.solver.resolve(d) for d in batch + rows + cols])


def _sample_matmul(n: int):
    g = _rng(n)
    return (torch.randn(n, 1, 3, 5, generator=g), torch.randn(4, 5, 2, generator=g)), {}


_library("matmul", _infer_matmul, torch.matmul, _sample_matmul)


# --- linear (x @ w.T, bias separate) ----------------------------------------------------------

def _infer_linear(g: "Graph", node: "Node") -> Shape:
    """x [..., K] @ W[O, K].T (+ b [O], an optional third operand: ``rewrite``'s
    ``linear_bias`` moves a bias into the library call where no kernel would fuse it)."""
    x, w, *b = node.inputs
    if x.rank < 1 or w.rank != 2 or (b and b[0].rank != 1):
        raise ShapeError(f"linear needs an input of rank >= 1, a rank-2 weight and a rank-1 "
                         f"bias, got ranks {[v.rank for v in node.inputs]}")
    dx, dw = g.dims(x), g.dims(w)
    g.constrain(dx[-1], dw[1], node, f"in_features: input axis {x.rank - 1} with weight axis 1")
    if b:
        g.constrain(g.dims(b[0])[0], dw[0], node, "bias axis 0 with out_features (weight axis 0)")
    return shape([*(g.solver.resolve(d) for d in dx[:-1]), dw[0]])


def _ref_linear(x, w, b=None):
    return F.linear(x, w, b)


def _sample_linear(n: int):
    g = _rng(n)
    return (torch.randn(n, 3, 5, generator=g), torch.randn(4, 5, generator=g)), {}


_library("linear", _infer_linear, _ref_linear, _sample_linear)


# --- baddbmm (beta * input + alpha * batch1 @ batch2, in one call) -----------------------------

def _infer_baddbmm(g: "Graph", node: "Node") -> Shape:
    """batch1 [B, M, K] @ batch2 [B, K, N] -> [B, M, N] (no batch broadcast, as in torch);
    ``input`` broadcasts to the result (torch expands it: each non-1 axis is the result's)."""
    x, a, b = node.inputs
    if a.rank != 3 or b.rank != 3 or x.rank > 3:
        raise ShapeError(f"baddbmm needs rank-3 batch1 and batch2 and an input of rank <= 3, "
                         f"got ranks {x.rank}, {a.rank}, {b.rank}")
    da, db = g.dims(a), g.dims(b)
    g.constrain(da[0], db[0], node, "batch: batch1 axis 0 with batch2 axis 0")
    g.constrain(da[2], db[1], node, "contraction: batch1 axis 2 with batch2 axis 1")
    out = (da[0], da[1], db[2])
    for k, d in enumerate(g.dims(x), 3 - x.rank):
        if g.solver.resolve(d) is not lit(1):
            g.constrain(d, out[k], node, f"input axis {k + x.rank - 3} with result axis {k} "
                                         f"(input broadcasts to the result)")
    return shape([g.solver.resolve(d) for d in out])


def _ref_baddbmm(x, a, b, beta=1, alpha=1):
    return torch.baddbmm(x, a, b, beta=beta, alpha=alpha)


def _sample_baddbmm(n: int):
    """In float16: the bridge lowers a float32 baddbmm to a matmul and elementwise ops."""
    g = _rng(n)
    return (tuple(torch.randn(*s, generator=g).half() for s in ((1, 5), (n, 3, 4), (n, 4, 5))),
            {"beta": 0.5, "alpha": 2.0})


_library("baddbmm", _infer_baddbmm, _ref_baddbmm, _sample_baddbmm, integer_backends=("cpu",))


# --- scaled dot-product attention (optional additive/boolean mask operand) --------------------

def _infer_sdpa(g: "Graph", node: "Node") -> Shape:
    """q [..., L, E], k [..., S, E], v [..., S, Ev] (batch axes broadcast, as in torch), optional
    mask broadcasting to [..., L, S] -> [..., L, Ev]."""
    q, k, v, *mask = node.inputs
    if min(q.rank, k.rank, v.rank) < 2:
        raise ShapeError(f"q, k, v need rank >= 2, got {q.rank}, {k.rank}, {v.rank}")
    dq, dk, dv = g.dims(q), g.dims(k), g.dims(v)
    if node.attrs.get("enable_gqa") and min(q.rank, k.rank, v.rank) >= 3:
        # grouped-query attention: k and v share a head count (axis -3) dividing q's
        hq, hk = dq[-3], dk[-3]
        g.constrain(hk, dv[-3], node, "enable_gqa: k heads (axis -3) with v heads")
        hk = g.solver.resolve(hk)
        if not (isinstance(hq, Lit) and isinstance(hk, Lit)):   # a ratio needs literal counts
            g.constrain(hq, hk, node, "enable_gqa: q heads (axis -3) with k, v heads (a "
                                      "symbolic head count is not grouped)")
            hq = g.solver.resolve(hq)
        elif hk.value == 0 or hq.value % hk.value:
            raise ShapeError(f"enable_gqa: q heads {hq!r} not a multiple of k, v heads {hk!r}")
        batch = [*broadcast_dims(g, node, [(0, dq[:-3]), (1, dk[:-3]), (2, dv[:-3])]), hq]
    else:
        batch = broadcast_dims(g, node, [(0, dq[:-2]), (1, dk[:-2]), (2, dv[:-2])])
    g.constrain(dq[-1], dk[-1], node, "embedding: q last axis with k last axis")
    g.constrain(dk[-2], dv[-2], node, "sequence: k axis -2 with v axis -2")
    if mask:
        bcast = broadcast_dims(g, node, [(0, [*batch, dq[-2], dk[-2]]), (3, g.dims(mask[0]))])
        if len(bcast) != len(batch) + 2:
            raise ShapeError(f"attn_mask of rank {mask[0].rank} > {len(batch) + 2}")
    out = [g.solver.resolve(d) for d in (*batch, dq[-2], dv[-1])]
    if node.attrs.get("layout") == "NLHD":
        if len(out) != 4:
            raise ShapeError(f"layout NLHD needs rank-4 operands, got rank {len(out)}")
        out = [out[i] for i in SDPA_NLHD]
    return shape(out)


SDPA_NLHD = (0, 2, 1, 3)
"""``layout="NLHD"`` (``passes.rewrite``'s ``sdpa_heads_inner``): the result as [N, L, H, D], the
memory order of the CUDA attention kernels' output (flash, memory-efficient, cuDNN), which torch
returns as a transposed [N, H, L, D] view."""


def _ref_sdpa(q, k, v, attn_mask=None, *, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False, layout: str = "NHLD"):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask, 0.0, is_causal, scale=scale,
                                         **({"enable_gqa": True} if enable_gqa else {}))
    return out.permute(*SDPA_NLHD) if layout == "NLHD" else out


def _sample_sdpa(n: int):
    g = _rng(n)
    return ((torch.randn(n, 2, 5, 4, generator=g), torch.randn(n, 2, 6, 4, generator=g),
             torch.randn(n, 2, 6, 3, generator=g)), {"is_causal": False, "scale": None})


_library("sdpa", _infer_sdpa, _ref_sdpa, _sample_sdpa)


# --- max_pool2d's indices (the values are the generated max_pool2d reduction) ------------------

def _ref_pool_indices(x, kernel_size, stride, padding, dilation, ceil_mode):
    """Per output element, the flat index into the input's H*W plane of the window's maximum, as
    ATen computes it (the last NaN, else the first maximum)."""
    return F.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[1]


def _sample_pool_indices(n: int):
    return ((torch.randn(n, 3, 9, 8, generator=_rng(n)),),
            {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 1), "dilation": (1, 2),
             "ceil_mode": False})


_library("max_pool2d_indices", infer_pool, _ref_pool_indices, _sample_pool_indices, torch.int64)


# --- cumsum over a long axis (floating dtypes; bridge: ``prefix_sum`` for short axes and ints) ---

def _ref_cumsum(x, dim):
    return torch.cumsum(x, dim)


def _sample_cumsum(n: int):
    return (torch.randn(n, 3, 5, generator=_rng(n)),), {"dim": 0}


_library("cumsum", infer_along, _ref_cumsum, _sample_cumsum)


# --- cumprod (every dtype: ATen's CPU and CUDA kernels take integers, promoted to int64 unless
#     ``dtype`` names the result's; the input is cast to it first, as torch) -------------------

def _ref_cumprod(x, dim, dtype=None):
    return torch.cumprod(x, dim, dtype=dtype)


def _sample_cumprod(n: int):
    return (torch.rand(n, 3, 5, generator=_rng(n)) + 0.5,), {"dim": 2}


_library("cumprod", infer_along, _ref_cumprod, _sample_cumprod, integer_backends=("cpu", "cuda"))


# --- upsample (F.interpolate: nearest, nearest-exact, linear/bilinear/trilinear, bicubic) -------
#
# One op for every mode and 1-3 spatial axes: input [N, C, *spatial], result [N, C, *size].
# ``size`` is the output's spatial extents (literals or dimension expressions, filled at run
# time); ``scales`` per spatial axis the scale factor ATen computes source coordinates with when
# the user gave it (None: from the sizes), as F.interpolate passes them; ``mode`` "nearest",
# "nearest-exact", "linear" (1-3 axes) or "cubic" (2 axes); ``align_corners`` for the last two
# (None for the nearest modes); ``antialias`` (linear and cubic on 2 axes) ATen's
# ``_upsample_*_aa`` filter.

UPSAMPLE = {("nearest", 1): "upsample_nearest1d", ("nearest", 2): "upsample_nearest2d",
            ("nearest", 3): "upsample_nearest3d", ("nearest-exact", 1): "_upsample_nearest_exact1d",
            ("nearest-exact", 2): "_upsample_nearest_exact2d",
            ("nearest-exact", 3): "_upsample_nearest_exact3d", ("linear", 1): "upsample_linear1d",
            ("linear", 2): "upsample_bilinear2d", ("linear", 3): "upsample_trilinear3d",
            ("cubic", 2): "upsample_bicubic2d"}
"""(mode, spatial axes) -> the ATen op computing it (``_aa`` appended for ``antialias``); the
bridge lowers each of these packets (``bridge.ops.library``)."""


def upsample_aten(mode: str, k: int, antialias: bool = False) -> str:
    """The ATen op of ``mode`` over ``k`` spatial axes; ``UnsupportedOp`` when there is none."""
    name = UPSAMPLE.get((mode, k))
    if name is None or antialias and (k != 2 or mode not in ("linear", "cubic")):
        raise UnsupportedOp(f"upsample mode {mode!r} over {k} spatial axes"
                            f"{' with antialias' if antialias else ''} (ATen has none)")
    return f"_{name}_aa" if antialias else name


def _infer_upsample(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    a = node.attrs
    k = len(a["size"])
    upsample_aten(a["mode"], k, a.get("antialias", False))
    if x.rank != k + 2:
        raise ShapeError(f"upsample over {k} spatial axes needs a rank-{k + 2} input "
                         f"[N, C, {', '.join('DHW'[3 - k:])}], got rank {x.rank}")
    n, c, *spatial = g.dims(x)
    for axis, d, o in zip("DHW"[3 - k:], spatial, a["size"]):   # torch rejects empty ones
        g.require(as_expr(d) - 1, node, f"upsample input {axis} {d!r} >= 1")
        g.require(as_expr(o) - 1, node, f"upsample output {axis} {o!r} >= 1")
    return shape([g.solver.resolve(n), g.solver.resolve(c), *a["size"]])


def _sizes(size) -> list[int]:
    """The output extents as ints (a dimension expression without a value, as in the dtype
    probe on one-element operands, as 1)."""
    return [d.value if isinstance(d, Lit) else 1 if isinstance(d, Expr) else int(d)
            for d in size]


def _ref_upsample(x, size, scales, mode, align_corners=None, antialias=False):
    fn = getattr(torch.ops.aten, upsample_aten(mode, len(size), antialias))
    corners = () if align_corners is None else (align_corners,)
    return fn(x, _sizes(size), *corners, *(scales or (None,) * len(size)))


def _sample_upsample(n: int):
    return ((torch.randn(n, 2, 3, 5, generator=_rng(n)),),
            {"size": (5, 7), "scales": (None, 1.5), "mode": "cubic", "align_corners": False})


_library("upsample", _infer_upsample, _ref_upsample, _sample_upsample, integer_backends=("cpu",))
