"""Shape ops: pure coordinate transforms (reshape, permute, slice, expand, roll) and guarded
selections (pad, cat). None computes anything; kgen turns them into index arithmetic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch
import torch.nn.functional as F

from ...dims import Expr, Lit, Shape, as_expr, lit, prod, shape
from ...dims.expr import rounded_up
from ...errors import ShapeError
from .core import Coords, Guard, Guarded, OpDef, OpKind, delinearize, in_bounds, linear_index, \
    register

if TYPE_CHECKING:
    from ..graph import Graph, Node


def _ints(xs: Sequence[Any]) -> list[int]:
    return [x.value if isinstance(x, Lit) else int(x) for x in xs]


# --- reshape ---------------------------------------------------------------------------------

def _infer_reshape(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    target: list = [d.value if isinstance(d, Lit) else d for d in node.attrs["shape"]]
    holes = [i for i, d in enumerate(target) if isinstance(d, int) and d == -1]
    if len(holes) > 1:
        raise ShapeError(f"more than one -1 in {list(node.attrs['shape'])}")
    for i, d in enumerate(target):
        if isinstance(d, bool) or not isinstance(d, (int, Expr)) or (isinstance(d, int)
                                                                      and d < -1):
            raise ShapeError(f"invalid size {d!r} at axis {i} of {list(node.attrs['shape'])}")
    hole = g.fresh_var("r") if holes else None
    if hole is not None:
        target[holes[0]] = hole
        rest = prod(d for i, d in enumerate(target) if i != holes[0])
        g.require(rest - 1, node, f"the sizes beside the -1 of {list(node.attrs['shape'])} "
                  f"multiply to {rest!r} >= 1 (where they multiply to 0, torch refuses the -1: it "
                  f"could be any size)")
    out = shape(target)
    g.constrain(prod(g.dims(x)), out.numel(), node,
                f"numel of input {list(g.dims(x))} == numel of output "
                f"[{', '.join('-1' if d is hole else repr(d) for d in out)}]"
                + (f"; {hole!r} is the -1" if hole is not None else ""))
    dims = [g.solver.resolve(d) for d in out]
    unsolved = {v for d in dims for v in d.free_vars if v.startswith("_")}
    if unsolved:
        where = f"the -1 (axis {holes[0]})" if hole is not None else "a size"
        raise ShapeError(f"cannot derive {where} of {list(node.attrs['shape'])} from input shape "
                         f"{list(g.dims(x))}: it stays {dims[holes[0] if holes else 0]!r}")
    return shape(dims)


def _reverse_reshape(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords]:
    (x,) = node.inputs
    return [delinearize(linear_index(coords, g.dims(node.out)), g.dims(x))]


def _ref_reshape(x: torch.Tensor, shape: Sequence[Any]) -> torch.Tensor:
    return torch.reshape(x, _ints(shape))


register(OpDef("reshape", OpKind.RESHAPE, _infer_reshape, _reverse_reshape, _ref_reshape))


# --- permute --------------------------------------------------------------------------------

def _infer_permute(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    perm = node.attrs["dims"]
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"{list(perm)} is not a permutation of the {x.rank} axes of "
                         f"{list(g.dims(x))}")
    return shape(x.shape[p] for p in perm)


def _reverse_permute(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords]:
    perm = node.attrs["dims"]
    out: Coords = [lit(0)] * len(perm)
    for i, p in enumerate(perm):
        out[p] = coords[i]
    return [out]


def _ref_permute(x: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    return x.permute(*dims)


register(OpDef("permute", OpKind.PERMUTE, _infer_permute, _reverse_permute, _ref_permute))


# --- slice: x[..., start : start + step * length : step, ...] ----------------------------------

def _infer_slice(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    a, start, length, step = (node.attrs[k] for k in ("dim", "start", "length", "step"))
    dims = list(g.dims(x))
    if not 0 <= a < x.rank or step < 1:
        raise ShapeError(f"slice of axis {a} step {step} (rank {x.rank}; step must be positive)")
    # the last element read, start + step * (length - 1), lies in the axis
    g.require(dims[a] - start - step * (length - 1) - 1, node,
              f"slice [{start!r} : +{length!r} : {step}] within axis {a} of extent {dims[a]!r}")
    dims[a] = length
    return shape(dims)


def _reverse_slice(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords]:
    a = node.attrs["dim"]
    out = list(coords)
    out[a] = as_expr(node.attrs["start"]) + coords[a] * node.attrs["step"]
    return [out]


def _ref_slice(x: torch.Tensor, dim: int, start, length, step: int) -> torch.Tensor:
    s, n = _ints((start, length))
    return x.narrow(dim, s, (n - 1) * step + 1 if n else 0)[(slice(None),) * dim +
                                                            (slice(None, None, step),)]


def _sample_slice(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, 7, 5, generator=torch.Generator().manual_seed(n))
    return (x,), {"dim": 1, "start": 1, "length": 3, "step": 2}


register(OpDef("slice", OpKind.TRANSFORM, _infer_slice, _reverse_slice, _ref_slice,
               sample=_sample_slice))


# --- expand: broadcast size-1 axes (and new leading axes) to ``sizes`` ---------------------------

def _infer_expand(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    sizes = list(node.attrs["sizes"])
    if len(sizes) < x.rank:
        raise ShapeError(f"expand to {len(sizes)} axes from rank {x.rank}")
    dims = g.dims(x)
    off = len(sizes) - x.rank
    out = []
    for i, s in enumerate(sizes):
        d = dims[i - off] if i >= off else None
        if isinstance(s, int) and s == -1:
            if d is None:
                raise ShapeError(f"expand: -1 at new leading axis {i}")
            out.append(d)
        elif d is None or d is lit(1):
            out.append(s if isinstance(s, Expr) else lit(s))
        else:
            g.constrain(d, s, node, f"expand axis {i} (size {d!r}, not 1) to {s!r}")
            out.append(g.solver.resolve(d))
    return shape(out)


def _reverse_expand(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords]:
    (x,) = node.inputs
    off = len(coords) - x.rank
    dims, out_dims = g.dims(x), g.dims(node.out)
    return [[lit(0) if dims[k] is lit(1) and out_dims[k + off] is not lit(1) else coords[k + off]
             for k in range(x.rank)]]


def _ref_expand(x: torch.Tensor, sizes: Sequence[Any]) -> torch.Tensor:
    return x.expand(*_ints(sizes))


def _sample_expand(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, 1, 5, generator=torch.Generator().manual_seed(n))
    return (x,), {"sizes": (2, -1, 3, -1)}


register(OpDef("expand", OpKind.TRANSFORM, _infer_expand, _reverse_expand, _ref_expand,
               sample=_sample_expand))


# --- roll: out[c] = x[(c - shift) mod D] along each rolled axis ----------------------------------

def _infer_roll(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    if len(node.attrs["shifts"]) != len(node.attrs["dims"]):
        raise ShapeError("roll: shifts and dims differ in length")
    return shape(g.dims(x))


def _reverse_roll(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords]:
    (x,) = node.inputs
    dims = g.dims(x)
    out = list(coords)
    for s, a in zip(node.attrs["shifts"], node.attrs["dims"]):
        if dims[a].is_lit(0):   # no element to read: a modulus of 0 has no meaning
            continue
        out[a] = (coords[a] + dims[a] - s % dims[a]) % dims[a]
    return [out]


def _ref_roll(x: torch.Tensor, shifts: Sequence[int], dims: Sequence[int]) -> torch.Tensor:
    return torch.roll(x, tuple(shifts), tuple(dims))


def _sample_roll(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, 4, 5, generator=torch.Generator().manual_seed(n))
    return (x,), {"shifts": (-1, 7), "dims": (1, 2)}


register(OpDef("roll", OpKind.TRANSFORM, _infer_roll, _reverse_roll, _ref_roll,
               sample=_sample_roll))


# --- pad (constant): out[c] = x[c - before] where in range, else value -------------------------

def _infer_pad(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    before, after = node.attrs["before"], node.attrs["after"]
    dims = list(g.dims(x))
    if len(before) != x.rank or len(after) != x.rank:
        raise ShapeError(f"pad widths for {len(before)} axes, input rank {x.rank}")
    for a, (b, e) in enumerate(zip(before, after)):
        for w, side in ((b, "before"), (e, "after")):
            g.require(w, node, f"pad width {side} axis {a} is {w!r} (negative pads unsupported)")
        dims[a] = rounded_up(dims[a] + b + e)   # to a multiple: m*((x + m - 1) // m)
    return shape(dims)


def _reverse_pad(g: "Graph", node: "Node", coords: Coords, **_) -> list[Guarded]:
    (x,) = node.inputs
    before, after = node.attrs["before"], node.attrs["after"]
    src = [c - b for c, b in zip(coords, before)]
    padded = [a for a, (b, e) in enumerate(zip(before, after)) if not (b.is_lit(0) and e.is_lit(0))]
    return [in_bounds(src, g.dims(x), padded)]


def _ref_pad(x: torch.Tensor, before: Sequence[Any], after: Sequence[Any], value=0.0
             ) -> torch.Tensor:
    widths = [w for b, e in zip(reversed(_ints(before)), reversed(_ints(after))) for w in (b, e)]
    return F.pad(x, widths, value=value)


def _sample_pad(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, 3, 5, generator=torch.Generator().manual_seed(n))
    return (x,), {"before": (lit(0), lit(1), lit(2)), "after": (lit(0), lit(2), lit(0)),
                  "value": -1.5}


register(OpDef("pad", OpKind.SELECT, _infer_pad, _reverse_pad, _ref_pad, sample=_sample_pad))


# --- window: torch's unfold (sliding windows along one axis, a new trailing axis) with dilation --
#
# window(x, dim=a, size=k, step=s, dilation=d)[..., o, .., i] = x[..., o*s + i*d, ..]
# (``x.unfold(a, d*(k - 1) + 1, s)[..., ::d]``): a convolution's receptive fields as a view, so a
# depthwise convolution is ``sum(window(window(pad(x))) * w)`` over the two window axes.

def _infer_window(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    a, k, st, d = (node.attrs[n] for n in ("dim", "size", "step", "dilation"))
    if not 0 <= a < x.rank or min(k, st, d) < 1:
        raise ShapeError(f"window of axis {a} (rank {x.rank}): size {k}, step {st}, dilation "
                         f"{d} must be positive")
    dims = list(g.dims(x))
    eff = d * (k - 1) + 1
    g.require(dims[a] - eff, node, f"axis {a} of extent {dims[a]!r} holds a window ({eff})")
    dims[a] = (dims[a] - eff) // st + 1
    return shape([*dims, k])


def _reverse_window(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords]:
    a, st, d = (node.attrs[n] for n in ("dim", "step", "dilation"))
    out = list(coords[:-1])
    out[a] = coords[a] * st + coords[-1] * d
    return [out]


def _ref_window(x: torch.Tensor, dim: int, size: int, step: int, dilation: int = 1
                ) -> torch.Tensor:
    return x.unfold(dim, dilation * (size - 1) + 1, step)[..., ::dilation]


def _sample_window(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, 9, 8, generator=torch.Generator().manual_seed(n))
    return (x,), {"dim": 1, "size": 3, "step": 2, "dilation": 1}


register(OpDef("window", OpKind.TRANSFORM, _infer_window, _reverse_window, _ref_window,
               sample=_sample_window))


# --- cat ------------------------------------------------------------------------------------------

def _infer_cat(g: "Graph", node: "Node") -> Shape:
    a = node.attrs["dim"]
    first = node.inputs[0]
    if any(x.rank != first.rank for x in node.inputs) or not 0 <= a < first.rank:
        raise ShapeError(f"cat along axis {a} of ranks {[x.rank for x in node.inputs]}")
    out = list(g.dims(first))
    for i, x in enumerate(node.inputs[1:], 1):
        dims = g.dims(x)
        for k in range(first.rank):
            if k != a:
                g.constrain(out[k], dims[k], node, f"input 0 axis {k} with input {i} axis {k}")
                out[k] = g.solver.resolve(out[k])
    out[a] = sum((g.dims(x)[a] for x in node.inputs[1:]), g.dims(first)[a])
    return shape(out)


def _reverse_cat(g: "Graph", node: "Node", coords: Coords, **_) -> list[Guarded]:
    a = node.attrs["dim"]
    out, off = [], lit(0)
    for x in node.inputs:
        ext = g.dims(x)[a]
        c = list(coords)
        c[a] = coords[a] - off
        out.append(Guarded(c, (Guard(c[a], lit(0), ext),)))
        off = off + ext
    return out


def _ref_cat(*xs: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.cat(xs, dim)


def _sample_cat(n: int) -> tuple[tuple, dict]:
    g = torch.Generator().manual_seed(n)
    return (torch.randn(n, 2, 5, generator=g), torch.randn(n, 3, 5, generator=g)), {"dim": 1}


register(OpDef("cat", OpKind.SELECT, _infer_cat, _reverse_cat, _ref_cat, sample=_sample_cat))


# --- pad_axis: reflect / replicate / circular padding of one axis ----------------------------------
#
# Output coordinate c reads input position i = c - before, mapped into [0, D) by the mode:
#   reflect    i < 0: -i            i >= D: 2(D-1) - i     (mirror about the edge elements)
#   replicate  i < 0: 0             i >= D: D - 1          (clamp)
#   circular   i < 0: i + D         i >= D: i - D          (wrap)
# Each region is a guarded read of the one input (a SELECT with one input), so no clamp or
# absolute value is needed in the index arithmetic. ``dim`` counts from the end (-1: the last
# axis), as F.pad's widths do. ``before``/``after`` may be negative for
# reflect and replicate (the axis is cropped; positions stay relative to the uncropped input, as
# in torch); circular widths are non-negative (the bridge crops first, as torch does).

PAD_MODES = ("reflect", "replicate", "circular")


def _pad_regions(before: Expr, after: Expr) -> tuple[str, ...]:
    """The regions an output of ``pad_axis`` may fall in, in reading order: ``mid`` (the input
    itself), ``low`` (before it) and ``high`` (after it) unless their width is a literal <= 0."""
    return ("mid",) + tuple(r for r, w in (("low", before), ("high", after))
                            if not (isinstance(w, Lit) and w.value <= 0))


def _infer_pad_axis(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    a, b, e, mode = (node.attrs[k] for k in ("dim", "before", "after", "mode"))
    if mode not in PAD_MODES or not -x.rank <= a < 0:
        raise ShapeError(f"pad_axis: mode {mode!r} on axis {a} of a rank-{x.rank} tensor")
    a %= x.rank
    dims = list(g.dims(x))
    d = dims[a]
    out = d + b + e
    if mode == "reflect":   # torch: each width below the axis extent
        for w, side in ((b, "before"), (e, "after")):
            g.require(d - 1 - w, node, f"reflect pad {side} ({w!r}) < extent {d!r} of axis {a}")
    elif mode == "circular":   # torch: the input wraps at most once
        for w, side in ((b, "before"), (e, "after")):
            g.require(w, node, f"circular pad {side} ({w!r}) is not negative")
            g.require(d - w, node, f"circular pad {side} ({w!r}) <= extent {d!r} of axis {a}")
    else:
        g.require(d - 1, node, f"replicate pad of axis {a}: extent {d!r} is not 0")
    if mode != "circular":   # torch: a non-empty output
        g.require(out - 1, node, f"{mode} pad ({b!r}, {e!r}) leaves axis {a} of extent {d!r} "
                                 f"non-empty")
    dims[a] = out
    return shape(dims)


def _reverse_pad_axis(g: "Graph", node: "Node", coords: Coords, **_) -> list[Guarded]:
    (x,) = node.inputs
    a, b, e, mode = (node.attrs[k] for k in ("dim", "before", "after", "mode"))
    a %= x.rank
    dims = g.dims(x)
    d, c = dims[a], coords[a]
    i = c - b
    src = {"reflect": (-i, 2 * d - 2 - i), "replicate": (lit(0), d - 1),
           "circular": (i + d, i - d)}[mode]
    out = []
    for region in _pad_regions(b, e):
        cs = list(coords)
        if region == "mid":
            cs[a], guard = i, Guard(i, lit(0), d)
        elif region == "low":
            cs[a], guard = src[0], Guard(c, lit(0), b)
        else:
            cs[a], guard = src[1], Guard(i - d, lit(0), e)
        out.append(Guarded(cs, (guard,)))
    return out


def _ref_pad_axis(x: torch.Tensor, dim: int, before, after, mode: str) -> torch.Tensor:
    b, e = _ints((before, after))
    try:
        return F.pad(x, [0, 0] * (-dim - 1) + [b, e], mode=mode)
    except (RuntimeError, NotImplementedError):   # ranks and empty axes F.pad rejects
        a = dim % x.dim()
        d = x.shape[a]
        i = torch.arange(-b, d + e)
        idx = {"reflect": torch.where(i < 0, -i, torch.where(i >= d, 2 * d - 2 - i, i)),
               "replicate": i.clamp(0, max(d - 1, 0)), "circular": i % max(d, 1)}[mode]
        return x.index_select(a, idx)


def _sample_pad_axis(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, 3, 5, generator=torch.Generator().manual_seed(n))
    return (x,), {"dim": -1, "before": lit(3), "after": lit(-1), "mode": "reflect"}


register(OpDef("pad_axis", OpKind.SELECT, _infer_pad_axis, _reverse_pad_axis, _ref_pad_axis,
               sample=_sample_pad_axis))


# --- flip: out[c] = x[D - 1 - c] along each flipped axis -------------------------------------------

def _infer_flip(g: "Graph", node: "Node") -> Shape:
    (x,) = node.inputs
    dims = node.attrs["dims"]
    if len(set(dims)) != len(dims) or not all(0 <= a < x.rank for a in dims):
        raise ShapeError(f"flip axes {list(dims)} are not distinct axes of rank {x.rank}")
    return shape(g.dims(x))


def _reverse_flip(g: "Graph", node: "Node", coords: Coords, **_) -> list[Coords]:
    (x,) = node.inputs
    dims = g.dims(x)
    out = list(coords)
    for a in node.attrs["dims"]:
        out[a] = dims[a] - 1 - coords[a]
    return [out]


def _ref_flip(x: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    return torch.flip(x, tuple(dims))


def _sample_flip(n: int) -> tuple[tuple, dict]:
    x = torch.randn(n, 3, 5, generator=torch.Generator().manual_seed(n))
    return (x,), {"dims": (0, 2)}


register(OpDef("flip", OpKind.TRANSFORM, _infer_flip, _reverse_flip, _ref_flip,
               sample=_sample_flip))
