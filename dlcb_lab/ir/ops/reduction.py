"""Reductions: a loop over a window per output element. ``sum``/``mean``/``amax`` reduce whole
axes; the pools reduce a (strided, dilated, padded) window of the last two axes, whose output
extents are floor-division expressions of the input dims (never specialized to the traced value).
Padding and ``ceil_mode`` overhang are guards: a guarded-out element is skipped."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import torch
import torch.nn.functional as F

from ...dims import Expr, Lit, Shape, lit, prod, shape
from ...errors import ShapeError
from .core import Coords, Guarded, OpDef, OpKind, Window, in_bounds, register

if TYPE_CHECKING:
    from ..graph import Graph, Node


class Combine(enum.Enum):
    SUM = "sum"   # accumulated in double (floats) or int64 (integers), from 0
    MAX = "max"   # NaN-propagating, from the lowest value; an empty extent is an error (as eager)


@dataclass(frozen=True)
class Reduction:
    """Scalar semantics of a reduction; ``mean`` divides the sum by the window's count."""

    combine: Combine
    mean: bool = False


REDUCTIONS: dict[str, Reduction] = {}


def _register(name: str, red: Reduction, infer, reverse, reference, window, sample=None) -> None:
    REDUCTIONS[name] = red
    register(OpDef(name, OpKind.REDUCE, infer, reverse, reference, window=window, sample=sample,
                   floating=sample is not None))


# --- sum / mean / amax over axes ---------------------------------------------------------------

def _infer_reduce(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    axes, keep = node.attrs["dims"], node.attrs["keepdim"]
    if len(set(axes)) != len(axes) or not all(0 <= a < x.rank for a in axes):
        raise ShapeError(f"axes {list(axes)} are not distinct axes of rank {x.rank}")
    return shape(lit(1) if a in axes else d for a, d in enumerate(x.shape) if keep or a not in axes)


def _reverse_reduce(g: "Graph", node: "Node", coords: Coords, *, loops: Coords = (), **_
                    ) -> list[Coords]:
    (x,) = node.inputs
    axes, keep = node.attrs["dims"], node.attrs["keepdim"]
    it = iter(loops)
    out: Coords = []
    j = 0
    for a in range(x.rank):
        if a in axes:
            out.append(next(it))
            j += keep
        else:
            out.append(coords[j])
            j += 1
    return [out]


def reduced_extents(g: "Graph", node: "Node") -> list[Expr]:
    (x,) = node.inputs
    dims = g.dims(x)
    return [dims[a] for a in node.attrs["dims"]]


def _window_reduce(g: "Graph", node: "Node", coords: Coords) -> Window:
    ext = tuple(reduced_extents(g, node))
    return Window(ext, ext, prod(ext))


def _ref_reduce(fn: Callable, x: torch.Tensor, dims: Sequence[int], keepdim: bool) -> torch.Tensor:
    if not dims:   # IR: reduce over no axis (torch's dim=() would mean every axis)
        return fn(x.unsqueeze(0), dim=0)
    return fn(x, dim=tuple(dims), keepdim=keepdim)


for _name, _fn, _red in (("sum", torch.sum, Reduction(Combine.SUM)),
                         ("mean", torch.mean, Reduction(Combine.SUM, mean=True)),
                         ("amax", torch.amax, Reduction(Combine.MAX))):
    _register(_name, _red, _infer_reduce, _reverse_reduce, functools.partial(_ref_reduce, _fn),
              _window_reduce)


# --- pooling over the last two axes ------------------------------------------------------------

def pool_extent(g: "Graph", node: "Node", d: Expr, k: int, s: int, p: int, dil: int,
                ceil: bool, axis: str) -> Expr:
    """Output extent of a pooling/convolution window over an axis of extent ``d`` (torch's
    formula); runtime requirements keep at least one window: in the (padded) axis, or in ceil
    mode one that starts inside the axis or its left padding (it may overhang the right end: a
    2-wide window with stride 3 over an axis of 1)."""
    eff = dil * (k - 1) + 1
    if k < 1 or s < 1 or dil < 1 or p < 0:
        raise ShapeError(f"{axis}: kernel {k}, stride {s}, padding {p}, dilation {dil}")
    if not ceil:
        g.require(d + 2 * p - eff, node, f"{axis}: padded extent {d!r} + 2*{p} holds the "
                                         f"window ({eff})")
        return (d + 2 * p - eff) // s + 1
    g.require(d + 2 * p - eff + s - 1, node, f"{axis}: ceil mode: padded extent {d!r} + 2*{p} "
                                             f"reaches the window ({eff}) within stride {s}")
    g.require(d + p - 1, node, f"{axis}: ceil mode: a window starts before {d!r} + {p}")
    if isinstance(d, Lit):
        out = -(-(d.value + 2 * p - eff) // s) + 1
        return lit(out - 1 if (out - 1) * s >= d.value + p else out)
    n = d + 2 * p - eff
    out = (n + s - 1) // s + 1
    if p + s <= eff:   # the last window always starts inside the axis
        return out
    # torch drops a last window starting in the right padding: (out - 1)*s >= d + p, i.e.
    # r >= eff - p with r = (out - 1)*s - n = (-n) mod s in [0, s); here 0 < eff - p < s, so
    # the drop is (r + s - (eff - p)) // s, in {0, 1}
    r = (s - n % s) % s
    return out - (r + s - (eff - p)) // s


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _pool_params(node: "Node"):
    a = node.attrs
    return (_pair(a["kernel_size"]), _pair(a["stride"]), _pair(a["padding"]),
            _pair(a.get("dilation", 1)), a["ceil_mode"])


def spatial_axes(node: "Node", rank: int) -> tuple[int, int]:
    """The (H, W) axes of a pooling op's input and result: the last two, or (1, 2) when its
    ``layout`` is "NHWC" (``passes.channels_last``: [N, H, W, C], a rank-4 input)."""
    return (1, 2) if node.attrs.get("layout", "NCHW") == "NHWC" else (rank - 2, rank - 1)


def layout_reference(ref):
    """``ref`` (an NCHW pooling reference) taking ``layout="NHWC"`` operands too."""
    def run(x, *args, layout: str = "NCHW", **kwargs):
        if layout == "NCHW":
            return ref(x, *args, **kwargs)
        return ref(x.permute(0, 3, 1, 2), *args, **kwargs).permute(0, 2, 3, 1)
    run.__doc__ = ref.__doc__
    return run


def infer_pool(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    if x.rank not in (3, 4):
        raise ShapeError(f"pooling needs a rank-3 or rank-4 input, got rank {x.rank}")
    k, s, p, dil, ceil = _pool_params(node)
    if any(2 * p[i] > k[i] for i in range(2)):
        raise ShapeError(f"padding {p} exceeds half the kernel {k}")
    dims = list(g.dims(x))
    for i, (a, name) in enumerate(zip(spatial_axes(node, x.rank), ("H", "W"))):
        dims[a] = pool_extent(g, node, dims[a], k[i], s[i], p[i], dil[i], ceil,
                              f"axis {a} ({name})")
    return shape(dims)


def _reverse_pool(g: "Graph", node: "Node", coords: Coords, *, loops: Coords = (), **_
                  ) -> list[Guarded]:
    (x,) = node.inputs
    k, s, p, dil, ceil = _pool_params(node)
    out = list(coords)
    axes = spatial_axes(node, x.rank)
    for i, a in enumerate(axes):
        out[a] = coords[a] * s[i] - p[i] + loops[i] * dil[i]
    return [in_bounds(out, g.dims(x), axes)]


def _window_pool(g: "Graph", node: "Node", coords: Coords) -> Window:
    k, s, p, dil, ceil = _pool_params(node)
    a = node.attrs
    if node.op.name == "max_pool2d":
        count: Expr | None = lit(k[0] * k[1])   # unused (max)
    elif a.get("divisor_override"):
        count = lit(a["divisor_override"])
    elif a.get("count_include_pad", True):
        count = lit(k[0] * k[1])
        if ceil:   # torch clips the last window at the padded extent
            (x,) = node.inputs
            dims, (h, w) = g.dims(x), spatial_axes(node, x.rank)
            count = _clipped_count(dims[h], coords[h], k[0], s[0], p[0]) * \
                _clipped_count(dims[w], coords[w], k[1], s[1], p[1])
    else:
        count = None   # the elements in the input
    return Window((lit(k[0]), lit(k[1])), (lit(k[0]), lit(k[1])), count)


def _clipped_count(d: Expr, o: Expr, k: int, s: int, p: int) -> Expr:
    """Elements of window ``o`` inside the padded axis ``[-p, d + p)``: ``k``, or
    ``d + 2p - o*s`` for the one window ceil_mode adds past the last full one (it starts inside
    the axis or its left padding, so the count is positive). ``(o + 1) // (full + 2)`` is 1
    exactly for that window, ``full = (d + 2p - k) // s`` the last full window: -1 where the
    axis is shorter than the window (``pool_extent`` keeps ``full >= -1``)."""
    last = (o + 1) // ((d + 2 * p - k) // s + 2)
    return k + last * (d + 2 * p - k - o * s)


def _sample_pool(**attrs):
    def sample(n: int) -> tuple[tuple, dict]:
        x = torch.randn(n, 3, 9, 8, generator=torch.Generator().manual_seed(n))
        return (x,), dict(attrs)
    return sample


def _ref_max_pool(x, kernel_size, stride, padding, dilation, ceil_mode):
    return F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)


def _ref_avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad=True,
                  divisor_override=None):
    return F.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override)


_register("max_pool2d", Reduction(Combine.MAX), infer_pool, _reverse_pool,
          layout_reference(_ref_max_pool),
          _window_pool, _sample_pool(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1),
                                     dilation=(1, 1), ceil_mode=True))
_register("avg_pool2d", Reduction(Combine.SUM, mean=True), infer_pool, _reverse_pool,
          layout_reference(_ref_avg_pool), _window_pool,
          _sample_pool(kernel_size=(3, 2), stride=(2, 1), padding=(1, 1), ceil_mode=False,
                       count_include_pad=False, divisor_override=None))


# --- adaptive average pooling: window [o*D//n, ceil((o+1)*D/n)) for n outputs ------------
# (an output size None keeps the axis: n = D, a window of one element)

def _infer_adaptive(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    if x.rank not in (3, 4):
        raise ShapeError(f"adaptive pooling needs a rank-3 or rank-4 input, got rank {x.rank}")
    dims = list(g.dims(x))
    for a, o in zip(spatial_axes(node, x.rank), node.attrs["output_size"]):
        g.require(dims[a] - 1, node, f"axis {a} of extent {dims[a]!r} is not empty")
        if o is not None:   # None: the input's extent (a window of one element)
            dims[a] = lit(o)
    return shape(dims)


def _adaptive_bounds(d: Expr, o: Expr, n_out: int) -> tuple[Expr, Expr]:
    """(window start, window end) of output ``o`` of ``n_out`` over an axis of extent ``d``."""
    return (o * d) // n_out, ((o + 1) * d + n_out - 1) // n_out


def _window_adaptive(g: "Graph", node: "Node", coords: Coords) -> Window:
    (x,) = node.inputs
    dims = g.dims(x)
    ext, bounds = [], []
    for a, n_out in zip(spatial_axes(node, x.rank), node.attrs["output_size"]):
        if n_out is None:
            ext.append(lit(1))
            bounds.append(lit(1))
            continue
        lo, hi = _adaptive_bounds(dims[a], coords[a], n_out)
        ext.append(hi - lo)
        bounds.append(dims[a] if n_out == 1 else dims[a] // n_out + 2)
    return Window(tuple(ext), tuple(bounds), ext[0] * ext[1])


def _reverse_adaptive(g: "Graph", node: "Node", coords: Coords, *, loops: Coords = (), **_
                      ) -> list[Coords]:
    (x,) = node.inputs
    dims = g.dims(x)
    out = list(coords)
    for i, (a, n_out) in enumerate(zip(spatial_axes(node, x.rank), node.attrs["output_size"])):
        out[a] = coords[a] + loops[i] if n_out is None else \
            _adaptive_bounds(dims[a], coords[a], n_out)[0] + loops[i]
    return [out]


def _ref_adaptive(x, output_size):
    return F.adaptive_avg_pool2d(x, tuple(output_size))


_register("adaptive_avg_pool2d", Reduction(Combine.SUM, mean=True), _infer_adaptive,
          _reverse_adaptive, layout_reference(_ref_adaptive), _window_adaptive,
          _sample_pool(output_size=(4, 3)))


# --- prefix_sum: torch.cumsum as a generated reduction (out[c] sums x over j <= c[dim]) --------
#
# One thread per output element loops over its prefix: O(extent) work per element, so the bridge
# uses it for short axes, integer dtypes (the library cumsum takes floats only) and arange's
# count (a sum of the constant 1 in int64, whose loop compilers reduce to a multiplication).
# Sums accumulate in double (floats) or int64, as eager's CPU cumsum does.

def infer_along(g: "Graph", node: "Node") -> Shape:
    """The input's shape, for an op along axis ``dim`` (cumsum, cumprod): the axis checked."""
    (x,) = node.inputs
    a = node.attrs["dim"]
    if not 0 <= a < max(x.rank, 1):
        raise ShapeError(f"{node.op.name} axis {a} of a rank-{x.rank} tensor")
    return shape(g.dims(x))


def _reverse_prefix(g: "Graph", node: "Node", coords: Coords, *, loops: Coords = (), **_
                    ) -> list[Coords]:
    (x,) = node.inputs
    out = list(coords)
    if x.rank:
        out[node.attrs["dim"]] = loops[0]
    return [out]


def _window_prefix(g: "Graph", node: "Node", coords: Coords) -> Window:
    (x,) = node.inputs
    if not x.rank:   # a 0-d cumsum is the element itself
        return Window((lit(1),), (lit(1),), None)
    a = node.attrs["dim"]
    return Window((coords[a] + 1,), (g.dims(x)[a],), None)


def _ref_prefix(x: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cumsum(x, dim)


def _sample_prefix(n: int) -> tuple[tuple, dict]:
    return (torch.randn(n, 3, 5, generator=torch.Generator().manual_seed(n)),), {"dim": 2}


REDUCTIONS["prefix_sum"] = Reduction(Combine.SUM)
register(OpDef("prefix_sum", OpKind.REDUCE, infer_along, _reverse_prefix, _ref_prefix,
               window=_window_prefix, sample=_sample_prefix))
