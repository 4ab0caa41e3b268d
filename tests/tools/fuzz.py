"""Differential fuzzing (issue 16): random graphs of DLCB's ops, compiled once with a dynamic batch
dim and run at several batch sizes against eager.

A *program* is JSON data: a dtype, input specs (shape with ``None`` for the dynamic batch dim,
layout, special values) and a list of steps (an op name, the values it reads, its parameters).
``Program`` interprets it as an ``nn.Module`` (constants as buffers, drawn from the program's seed),
so torch.export captures the same graph a user's module would give. A case passes when every call
matches eager (NaN where eager has NaN) or raises a ``dl`` error before any launch (a refusal); a
wrong value, a shape mismatch or any other exception is a failure. A failure shrinks (the shortest
failing prefix, then each step dropped where the rest stays valid) and is saved as JSON under
``tests/fuzz/fuzz_cases/``; ``tests/fuzz/test_fuzz.py`` replays every saved case and runs a bounded slice.

    python tests/tools/fuzz.py --graphs 10000 [--seed 0] [--device cpu|cuda] [--jobs J]
                         [--save tests/fuzz/fuzz_cases]
"""

from __future__ import annotations

import argparse
import copy
import faulthandler
import hashlib
import json
import random
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

import dlcb_lab as dl
from dlcb_lab.bridge.registry import registrations
from dlcb_lab.errors import DLError

CASES = Path(__file__).resolve().parents[1] / "fuzz" / "fuzz_cases"
VOCAB = 11                # rows of an embedding table (an ids input's range)
BATCHES = (3, 1, 0, 7)   # the compile's example batch first; size one and zero are cases
M_STEPS = (0, 2, None, 1)   # a dynamic last axis M per call: example + step, None: size one
DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
          "bfloat16": torch.bfloat16}
TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-7, atol=1e-9),
       "float16": dict(rtol=1e-2, atol=1e-2), "bfloat16": dict(rtol=4e-2, atol=4e-2)}

# --- ops: name -> (arity, applicable(shapes), params(rng, shapes), apply(values, params, consts)) --
# Shapes are tuples with the batch dim first (its example size); ops keep that dim at axis 0 so the
# program stays dynamic in it. ``consts`` is the Program's constant list (weights, indices). The
# entries are the lowering registry's (``bridge/registry.py``, ``Fuzz``): an elementwise map
# carries its function there; a structured one is drawn below, by the name registered.



def _maps(arity: int) -> dict[str, Callable]:
    """The lowering registry's elementwise fuzzer entries of ``arity`` tensors (``Fuzz.fn``)."""
    return {f.name: f.fn for r in registrations() for f in r.fuzz
            if f.fn is not None and f.arity == arity}


UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = _maps(1)
BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = _maps(2)
SHAPED = {f.name for r in registrations() for f in r.fuzz if f.fn is None}
"""The registry's structured entries: ``_ops`` draws their parameters and constants."""


def _broadcastable(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x == y or y == 1 for x, y in zip(a[1:], b[1:]))


@dataclass
class Op:
    arity: int
    ok: Callable[[list[tuple]], bool]
    params: Callable[[random.Random, list[tuple]], dict]
    apply: Callable[[list[torch.Tensor], dict, list[torch.Tensor]], torch.Tensor]


def _dims(rng: random.Random, rank: int) -> list[int]:
    """A non-empty set of axes, the batch axis among them one time in five, some of them
    negative."""
    axes = list(range(0 if rng.random() < 0.2 else 1, rank))
    return sorted(d - rank if rng.random() < 0.3 else d
                  for d in rng.sample(axes, rng.randint(1, len(axes))))


def _reshape(v, p, c):
    return v[0].reshape(v[0].shape[0], *p["rest"])


def _conv(v, p, c):
    return F.conv2d(v[0], c[p["w"]], c[p["b"]], stride=p["stride"], padding=p["pad"],
                    groups=p["groups"])


def _softmax_written(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax as a model may write it (one row kernel after ``rewrite.softmax_written_out``)."""
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _layer_norm_affine(v, p, c) -> torch.Tensor:
    """layer_norm without its own affine, then a scale and a shift broadcast against it (one row
    kernel after ``rewrite.norm_affine``)."""
    y = F.layer_norm(v[0], v[0].shape[-p["n"]:]) * c[p["w"]]
    return y + c[p["b"]] if p["shift"] else y


def _gated_linear(v, p, c) -> torch.Tensor:
    """A SwiGLU's two projections of one input (one GEMM after ``rewrite.merge_linears``)."""
    return F.silu(F.linear(v[0], c[p["w"]])) * F.linear(v[0], c[p["w"] + 1])


def _ops() -> dict[str, Op]:
    every = lambda s: True   # noqa: E731
    none = lambda r, s: {}   # noqa: E731
    ops: dict[str, Op] = {}
    for name, fn in UNARY.items():
        ops[name] = Op(1, every, none, lambda v, p, c, fn=fn: fn(v[0]))
    for name, fn in BINARY.items():
        ops[name] = Op(2, lambda s: _broadcastable(s[0], s[1]), none,
                       lambda v, p, c, fn=fn: fn(v[0], v[1]))
    for red in ("sum", "mean", "amax", "amin"):
        ops[red] = Op(1, lambda s: len(s[0]) >= 2,
                      lambda r, s: {"dims": _dims(r, len(s[0])), "keep": r.random() < 0.5},
                      lambda v, p, c, red=red: getattr(v[0], red)(p["dims"], keepdim=p["keep"]))
    ops["softmax"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {"dim": r.randrange(1, len(s[0]))},
                        lambda v, p, c: torch.softmax(v[0], p["dim"]))
    ops["softmax_written"] = Op(1, lambda s: len(s[0]) >= 2,
                                lambda r, s: {"dim": r.randrange(1, len(s[0]))},
                                lambda v, p, c: _softmax_written(v[0], p["dim"]))
    ops["log_softmax"] = Op(1, lambda s: len(s[0]) >= 2,
                            lambda r, s: {"dim": r.randrange(-len(s[0]) + 1, 0)},
                            lambda v, p, c: torch.log_softmax(v[0], p["dim"]))
    ops["layer_norm"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {"n": r.randint(
        1, len(s[0]) - 1)}, lambda v, p, c: F.layer_norm(v[0], v[0].shape[-p["n"]:]))
    ops["layer_norm_affine"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {
        "n": r.randint(1, len(s[0]) - 1), "shift": r.random() < 0.7,
        "axes": [a for a in range(1, len(s[0])) if r.random() < 0.5]}, _layer_norm_affine)
    ops["transpose"] = Op(1, lambda s: len(s[0]) >= 3, lambda r, s: {"a": r.sample(range(
        1, len(s[0])), 2)}, lambda v, p, c: v[0].transpose(*p["a"]))
    ops["permute"] = Op(1, lambda s: len(s[0]) >= 3,
                        lambda r, s: {"perm": [0] + r.sample(range(1, len(s[0])), len(s[0]) - 1)},
                        lambda v, p, c: v[0].permute(*p["perm"]))
    ops["flatten"] = Op(1, lambda s: len(s[0]) >= 3, none, lambda v, p, c: v[0].flatten(1))
    ops["unsqueeze"] = Op(1, lambda s: len(s[0]) <= 4, lambda r, s: {"d": r.randint(
        1, len(s[0]))}, lambda v, p, c: v[0].unsqueeze(p["d"]))
    ops["squeeze"] = Op(1, lambda s: any(d == 1 for d in s[0][1:]),
                        lambda r, s: {"d": r.choice([i for i, d in enumerate(s[0]) if d == 1 and i])},
                        lambda v, p, c: v[0].squeeze(p["d"]))
    ops["reshape"] = Op(1, lambda s: len(s[0]) >= 2 and _numel(s[0][1:]) % 2 == 0,
                        lambda r, s: {"rest": [2, _numel(s[0][1:]) // 2]}, _reshape)
    ops["narrow"] = Op(1, lambda s: len(s[0]) >= 2 and max(s[0][1:]) >= 2, _narrow_params,
                       lambda v, p, c: v[0].narrow(p["d"], p["start"], p["len"]))
    ops["flip"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {"dims": _dims(r, len(s[0]))},
                     lambda v, p, c: v[0].flip(p["dims"]))
    ops["cat"] = Op(2, lambda s: len(s[0]) == len(s[1]) >= 2 and s[0][2:] == s[1][2:],
                    none, lambda v, p, c: torch.cat([v[0], v[1]], 1))
    ops["pad"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {"pad": [r.randint(0, 2), r.randint(
        0, 2)], "value": r.choice([0.0, -1.0])},
        lambda v, p, c: F.pad(v[0], p["pad"], value=p["value"]))
    ops["expand"] = Op(1, lambda s: any(d == 1 for d in s[0][1:]), lambda r, s: {"sizes": [
        -1] + [3 if d == 1 else -1 for d in s[0][1:]]}, lambda v, p, c: v[0].expand(*p["sizes"]))
    ops["cast"] = Op(1, every, lambda r, s: {"to": r.choice(["float32", "float64"])},
                     lambda v, p, c: v[0].to(DTYPES[p["to"]]).to(v[0].dtype))
    # library ops, with constant operands drawn by Program
    ops["linear"] = Op(1, lambda s: len(s[0]) >= 1 and s[0][-1] >= 1,
                       lambda r, s: {"out": r.randint(1, 6), "bias": r.random() < 0.7},
                       lambda v, p, c: F.linear(v[0], c[p["w"]], c[p["b"]] if p["bias"] else None))
    ops["gated_linear"] = Op(1, lambda s: len(s[0]) >= 1 and s[0][-1] >= 1,
                             lambda r, s: {"out": r.randint(1, 6)}, _gated_linear)
    ops["matmul"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {"out": r.randint(1, 5)},
                       lambda v, p, c: v[0] @ c[p["w"]])
    ops["conv2d"] = Op(1, lambda s: len(s[0]) == 4 and min(s[0][2:]) >= 3, _conv_params, _conv)
    rank4 = lambda s: len(s[0]) == 4 and min(s[0][2:]) >= 2   # noqa: E731
    ops["max_pool2d"] = Op(1, rank4, lambda r, s: {"k": 2, "stride": r.choice([1, 2]),
                                                   "pad": r.choice([0, 1])},
                           lambda v, p, c: F.max_pool2d(v[0], p["k"], p["stride"], p["pad"]))
    ops["avg_pool2d"] = Op(1, rank4, lambda r, s: {"k": 2, "stride": r.choice([1, 2]),
                                                   "pad": r.choice([0, 1]),
                                                   "incl": r.random() < 0.5},
                           lambda v, p, c: F.avg_pool2d(v[0], p["k"], p["stride"], p["pad"],
                                                        count_include_pad=p["incl"]))
    ops["adaptive_avg_pool2d"] = Op(1, lambda s: len(s[0]) == 4, lambda r, s: {
        "out": r.choice([1, 2])}, lambda v, p, c: F.adaptive_avg_pool2d(v[0], p["out"]))
    ops["upsample"] = Op(1, lambda s: len(s[0]) == 4 and min(s[0][2:]) >= 1, lambda r, s: {
        "mode": r.choice(["nearest", "bilinear"])},
        lambda v, p, c: F.interpolate(v[0], scale_factor=2, mode=p["mode"]))
    ops["cumsum"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {"d": r.randrange(1, len(s[0]))},
                       lambda v, p, c: torch.cumsum(v[0], p["d"]))
    ops["cumprod"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {"d": r.randrange(1, len(s[0]))},
                        lambda v, p, c: torch.cumprod(v[0], p["d"]))
    ops["roll"] = Op(1, lambda s: len(s[0]) >= 2, lambda r, s: {"d": r.randrange(1, len(s[0])),
                                                               "n": r.randint(-3, 3)},
                     lambda v, p, c: torch.roll(v[0], p["n"], p["d"]))
    ops["bmm"] = Op(2, lambda s: len(s[0]) == len(s[1]) >= 3 and s[0] == s[1],
                    none, lambda v, p, c: v[0] @ v[1].transpose(-1, -2))
    ops["sdpa"] = Op(1, lambda s: len(s[0]) >= 3, lambda r, s: {"causal": r.random() < 0.5},
                     lambda v, p, c: F.scaled_dot_product_attention(v[0], v[0], v[0],
                                                                    is_causal=p["causal"]))
    ops["embedding"] = Op(1, lambda s: False, lambda r, s: {"dim": r.choice([2, 4])},
                          lambda v, p, c: F.embedding(v[0], c[p["w"]]))
    ops["index_select"] = Op(1, lambda s: any(d >= 1 for d in s[0][1:]), lambda r, s: {
        "d": (d := r.choice([i for i in range(1, len(s[0])) if s[0][i] >= 1])),
        "idx": [r.randrange(s[0][d]) for _ in range(r.randint(1, 4))]},
        lambda v, p, c: v[0].index_select(p["d"], c[p["i"]]))
    drawn = set(ops) - set(UNARY) - set(BINARY)
    assert drawn == SHAPED, f"registry and fuzzer differ: {sorted(drawn ^ SHAPED)}"
    return ops


def _numel(s) -> int:
    n = 1
    for d in s:
        n *= d
    return n


def _narrow_params(r: random.Random, s: list[tuple]) -> dict:
    d = r.choice([i for i in range(1, len(s[0])) if s[0][i] >= 2])
    start = r.randrange(s[0][d])
    return {"d": d, "start": start, "len": r.randint(1, s[0][d] - start)}


def _conv_params(r: random.Random, s: list[tuple]) -> dict:
    cin = s[0][1]
    groups = r.choice([g for g in (1, cin) if cin % g == 0])
    return {"out": cin if groups > 1 else r.randint(1, 5), "k": r.choice([1, 3]),
            "stride": r.choice([1, 2]), "pad": r.choice([0, 1]), "groups": groups}


OPS = _ops()


# --- programs --------------------------------------------------------------------------------------

@dataclass
class Case:
    seed: int
    dtype: str
    inputs: list[dict]       # {"shape": [None, ...], "layout": ..., "special": ...}
    steps: list[dict]        # {"op": name, "args": [value ids], "p": params}
    note: str = ""
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"seed": self.seed, "dtype": self.dtype, "inputs": self.inputs,
                           "steps": self.steps, "note": self.note, **self.extra}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Case":
        d = json.loads(text)
        known = {k: d.pop(k) for k in ("seed", "dtype", "inputs", "steps", "note")}
        return cls(**known, extra=d)


class Program(torch.nn.Module):
    """A case as a module: its constants are buffers drawn from the case's seed."""

    def __init__(self, case: Case, shapes: list[tuple]):
        super().__init__()
        self.case = case
        g = torch.Generator().manual_seed(case.seed)
        dt = DTYPES[case.dtype]
        consts: list[torch.Tensor] = []
        self.params: list[dict] = []
        for st in case.steps:
            p = dict(st["p"])
            s = [shapes[a] for a in st["args"]]
            if st["op"] == "linear":
                p["w"], p["b"] = len(consts), len(consts) + 1
                consts += [torch.randn(p["out"], s[0][-1], generator=g).to(dt),
                           torch.randn(p["out"], generator=g).to(dt)]
            elif st["op"] == "gated_linear":
                p["w"] = len(consts)
                consts += [torch.randn(p["out"], s[0][-1], generator=g).to(dt) for _ in "gu"]
            elif st["op"] == "matmul":
                p["w"] = len(consts)
                consts.append(torch.randn(s[0][-1], p["out"], generator=g).to(dt))
            elif st["op"] == "conv2d":
                p["w"], p["b"] = len(consts), len(consts) + 1
                consts += [torch.randn(p["out"], s[0][1] // p["groups"], p["k"], p["k"],
                                       generator=g).to(dt) / p["k"],
                           torch.randn(p["out"], generator=g).to(dt)]
            elif st["op"] == "layer_norm_affine":   # [1, ...]: varies along p["axes"]
                shape = [d if a in p["axes"] else 1 for a, d in enumerate(s[0])]
                p["w"], p["b"] = len(consts), len(consts) + 1
                consts += [torch.randn(shape, generator=g).to(dt),
                           torch.randn(shape, generator=g).to(dt)]
            elif st["op"] == "embedding":
                p["w"] = len(consts)
                consts.append(torch.randn(VOCAB, p["dim"], generator=g).to(dt))
            elif st["op"] == "index_select":
                p["i"] = len(consts)
                consts.append(torch.tensor(p["idx"]))
            self.params.append(p)
            shapes.append(_shape_of(st, s, p, consts))
        for i, c in enumerate(consts):
            self.register_buffer(f"c{i}", c)
        self.n_consts = len(consts)

    def forward(self, *xs):
        consts = [getattr(self, f"c{i}") for i in range(self.n_consts)]
        vals = list(xs)
        for st, p in zip(self.case.steps, self.params):
            vals.append(OPS[st["op"]].apply([vals[a] for a in st["args"]], p, consts))
        return vals[-1]


def _shape_of(st: dict, s: list[tuple], p: dict, consts: list[torch.Tensor]) -> tuple:
    """A step's output shape at the example batch, by running it on zeros (meta would do, but
    some ops' meta kernels differ)."""
    if st["op"] == "embedding":
        return (*s[0], p["dim"])
    xs = [torch.zeros(sh) for sh in s]
    return tuple(OPS[st["op"]].apply(xs, p, [c.float() if c.is_floating_point() else c
                                             for c in consts]).shape)


def generate(seed: int, max_steps: int = 6) -> Case:
    """A random case: 1–3 inputs of one batch dim (dynamic), rank 2–4, some dims of size one
    (and a few of size zero), in three cases of ten the last axis dynamic as well (``"M=<example
    size>"`` in the shape), steps drawn until ``max_steps`` or no op applies."""
    r = random.Random(seed)
    dtype = r.choices(list(DTYPES), weights=[6, 2, 1, 1])[0]
    rank = r.randint(2, 4)
    base = [0 if r.random() < 0.04 else r.choice([1, 2, 3, 4, 5, 8]) for _ in range(rank - 1)]
    dyn_m = base[-1] > 1 and r.random() < 0.3   # the last axis dynamic too (M)
    inputs = []
    if r.random() < 0.15:   # token ids [N, L] into a table of VOCAB rows; one call out of range
        inputs.append({"shape": [None, r.choice([1, 3, 5])], "layout": "contiguous",
                       "special": None, "ids": VOCAB})
    for _ in range(r.randint(1, 3)):
        rest = [1 if r.random() < 0.2 else d for d in base]
        if dyn_m and rest[-1] != 1:
            rest[-1] = f"M={rest[-1]}"
        inputs.append({"shape": [None, *rest],
                       "layout": r.choices(["contiguous", "transposed", "strided"],
                                           weights=[6, 2, 2])[0],
                       "special": r.choices([None, "nan", "inf"], weights=[8, 1, 1])[0]})
    shapes = [example_shape(i) for i in inputs]
    n_in, steps = len(shapes), []
    ids = [i for i, spec in enumerate(inputs) if "ids" in spec]
    for i in ids:   # ids are only looked up: the embedding is their one reader
        steps.append({"op": "embedding", "args": [i], "p": {"dim": r.choice([2, 4])}})
        shapes.append((*shapes[i], steps[-1]["p"]["dim"]))
    usable = [i for i in range(len(shapes)) if i not in ids]
    for _ in range(r.randint(1, max_steps)):
        again = [k for k, st in enumerate(steps) if st["op"] != "embedding"]
        if again and r.random() < 0.15:   # a step written twice, both read: computed once
            k = r.choice(again)
            twice = [dict(steps[k]), {"op": "add", "args": [n_in + k, len(shapes)], "p": {}}]
            trial = shapes[:n_in]
            try:
                Program(Case(seed, dtype, inputs, steps + twice), trial)
            except Exception:   # noqa: BLE001 - the two do not broadcast: draw on
                pass
            else:
                steps += twice
                shapes = trial
                usable.append(len(shapes) - 1)
                continue
        names = list(OPS)
        r.shuffle(names)
        for name in names:
            op = OPS[name]
            picks = [r.choice(usable) for _ in range(op.arity)]
            if op.arity == 2 and r.random() < 0.5:   # often combine with the latest value
                picks[0] = len(shapes) - 1
            if not op.ok([shapes[a] for a in picks]):
                continue
            trial = shapes[:n_in]
            try:
                step = {"op": name, "args": picks, "p": op.params(r, [shapes[a] for a in picks])}
                Program(Case(seed, dtype, inputs, steps + [step]), trial)   # appends the shapes
            except Exception:   # noqa: BLE001 - an invalid draw (a shape rule): draw another
                continue
            steps.append(step)
            shapes = trial
            usable.append(len(shapes) - 1)
            break
    return Case(seed, dtype, inputs, steps)


def _size(d, batch: int, m_step: int | None) -> int:
    """An input axis's size in a call: ``None`` the batch, ``"M=<k>"`` the dynamic last axis (its
    example size ``k`` plus ``m_step``; ``m_step`` None: size one), else the literal."""
    if d is None:
        return batch
    if isinstance(d, str):
        return 1 if m_step is None else int(d[2:]) + m_step
    return d


def example_shape(spec: dict) -> tuple:
    return tuple(_size(d, BATCHES[0], M_STEPS[0]) for d in spec["shape"])


def make_inputs(case: Case, batch: int, device: str, m_step: int | None = 0
                ) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(case.seed * 31 + batch)
    dt = DTYPES[case.dtype]
    out = []
    for spec in case.inputs:
        shape = [_size(d, batch, m_step) for d in spec["shape"]]
        if "ids" in spec:   # at batch 7 one id is past the table (eager and DLCB refuse)
            ids = torch.randint(0, spec["ids"], shape, generator=g)
            if batch == 7:
                ids.view(-1)[-1] = spec["ids"]
            out.append(ids.to(device))
            continue
        x = torch.randn(shape, generator=g).to(dt)
        if spec["special"] and x.numel():
            flat = x.view(-1)
            flat[torch.randint(0, flat.numel(), (max(1, flat.numel() // 7),), generator=g)] = \
                float("nan") if spec["special"] == "nan" else float("inf")
        x = x.to(device)
        if spec["layout"] == "transposed" and x.dim() >= 2:
            x = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        elif spec["layout"] == "strided":
            x = torch.repeat_interleave(x, 2, dim=-1)[..., ::2]
        out.append(x)
    return out


# --- running and shrinking -------------------------------------------------------------------------

@dataclass
class Outcome:
    status: str              # "pass", "refused", "fail"
    detail: str = ""
    calls: int = 0


def run_case(case: Case, device: str = "cpu") -> Outcome:
    """Compile the case's live steps (what its output depends on: a compiler owes nothing to a
    dead step, not even eager's error in it) and check each call against eager."""
    case = _cone(case)
    shapes = [example_shape(i) for i in case.inputs]
    try:
        m = Program(case, list(shapes)).to(device).eval()
    except Exception as err:   # noqa: BLE001
        return Outcome("invalid", f"{type(err).__name__}: {err}")
    dyn = {i: {0: "N"} | {k: "M" for k, d in enumerate(spec["shape"]) if isinstance(d, str)}
           for i, spec in enumerate(case.inputs)}
    ex = make_inputs(case, BATCHES[0], device)
    try:
        with torch.no_grad():
            m(*ex)
    except Exception as err:   # noqa: BLE001 - eager itself refuses: not a DLCB case
        return Outcome("invalid", f"eager: {type(err).__name__}: {err}")
    try:
        cm = dl.compile(m, ex, dynamic=dyn, backend=device)
    except DLError as err:
        return Outcome("refused", f"compile: {type(err).__name__}: {str(err).splitlines()[0]}")
    except Exception as err:   # noqa: BLE001
        return Outcome("fail", f"compile raised {type(err).__name__}: {err}\n"
                               + traceback.format_exc(limit=-4))
    calls = 0
    twin = copy.deepcopy(m).cpu() if device != "cpu" else None
    for n, m_step in zip(BATCHES, M_STEPS):
        xs = make_inputs(case, n, device, m_step)
        with torch.no_grad():
            try:
                want = _eager(m, xs, twin)
            except Exception as eager_err:   # noqa: BLE001 - eager refuses the call: so must DLCB
                try:
                    cm(*xs)
                except DLError:
                    continue
                except Exception as err:   # noqa: BLE001
                    return Outcome("fail", f"batch {n}: eager refuses ({type(eager_err).__name__}"
                                           f"), DLCB raised {type(err).__name__}: {err}", calls)
                return Outcome("fail", f"batch {n}: eager refuses ({type(eager_err).__name__}: "
                                       f"{str(eager_err)[:120]}), DLCB answered", calls)
            try:
                got = cm(*xs)
            except DLError as err:
                if n == 0 or "empty" in str(err):
                    continue
                return Outcome("fail", f"batch {n}: refused a call eager runs: "
                                       f"{type(err).__name__}: {str(err).splitlines()[0]}", calls)
            except Exception as err:   # noqa: BLE001
                return Outcome("fail", f"batch {n}: {type(err).__name__}: {err}\n"
                                       + traceback.format_exc(limit=-4), calls)
        calls += 1
        if got.shape != want.shape or got.dtype != want.dtype:
            return Outcome("fail", f"batch {n}: got {got.dtype} {list(got.shape)}, eager "
                                   f"{want.dtype} {list(want.shape)}", calls)
        try:
            torch.testing.assert_close(got, want, equal_nan=True, **TOL[case.dtype])
        except AssertionError as err:
            if not _matches_another_oracle(m, xs, got, want, case.dtype):
                return Outcome("fail", f"batch {n}: values differ: {str(err).splitlines()[0]} "
                                       f"{' '.join(str(err).splitlines()[1:3])}", calls)
    return Outcome("pass", calls=calls)


def _eager(m: torch.nn.Module, xs: list[torch.Tensor], twin: torch.nn.Module | None
           ) -> torch.Tensor:
    """Eager's result, raising where eager refuses the call. On CUDA an index out of its axis is
    a device-side assert that ends the process, not an error: the CPU ``twin`` tells it first."""
    if twin is not None:
        try:
            twin(*[x.cpu() for x in xs])
        except IndexError:
            raise
        except RuntimeError as err:
            if "index" in str(err):
                raise
    return m(*xs)


def _matches_another_oracle(m: torch.nn.Module, xs: list[torch.Tensor], got: torch.Tensor,
                            want: torch.Tensor, dtype: str) -> bool:
    """Where eager disagrees, eager's other answers: eager on contiguous copies of the inputs
    (CPU SDPA picks its kernel by strides, and with NaN inputs the math kernel and the flash
    kernel leave NaN in different places), then the program in float64 on the CPU (CUDA's
    float64 hardsigmoid and hardswish multiply by ``1.0f / 6.0f``, a float constant 3e-8 off
    1/6, and are no reference for float64 cases): as a whole where an
    input is not finite (CPU float32 gelu of inf: inf through torch's scalar path, NaN through
    its vectorized one), else element by element beside eager (a discontinuous op, ``sign`` or
    ``floor``, of a value that is 0 or an integer up to rounding: ``sign(layer_norm(x))`` where
    an element equals its row's mean takes 0 or +-1 by the last bit of the mean, and float32
    eager, float64 eager and DLCB's double accumulators each land on their own side). DLCB
    matching either is right."""
    tol = TOL[dtype]

    def close(w: torch.Tensor) -> bool:
        try:
            torch.testing.assert_close(got, w.to(got.dtype), equal_nan=True, **tol)
        except AssertionError:
            return False
        return True

    with torch.no_grad():
        if close(m(*[x.contiguous() for x in xs])):
            return True
        w64 = copy.deepcopy(m).cpu().double()(
            *[x.cpu().double() if x.is_floating_point() else x.cpu() for x in xs]).to(got.device)
    if not all(torch.isfinite(x).all() for x in xs if x.is_floating_point()):
        return close(w64)
    if not got.is_floating_point() or got.shape != w64.shape:
        return False
    near = [torch.isclose(got, w.to(got.dtype), equal_nan=True, **tol) for w in (want, w64)]
    return bool((near[0] | near[1]).all())


def _cone(case: Case) -> Case:
    """The steps (and inputs) the last step depends on, renumbered."""
    n_in = len(case.inputs)
    need = {n_in + len(case.steps) - 1}
    for i in range(len(case.steps) - 1, -1, -1):
        if n_in + i in need:
            need.update(case.steps[i]["args"])
    keep = [i for i in range(len(case.steps)) if n_in + i in need]
    used = [k for k in range(n_in) if k in need] or [0]
    remap = {k: j for j, k in enumerate(used)} | \
        {n_in + i: len(used) + j for j, i in enumerate(keep)}
    steps = [{**case.steps[i], "args": [remap[a] for a in case.steps[i]["args"]]} for i in keep]
    return Case(case.seed, case.dtype, [case.inputs[k] for k in used], steps, case.note,
                case.extra)


def shrink(case: Case, device: str = "cpu") -> Case:
    """A smaller case that still fails: the shortest failing prefix (its last step the output),
    its dependency cone, then each step dropped (readers rewired to its first operand) and each
    input's layout and special values made plain, while the case still fails."""
    for k in range(1, len(case.steps) + 1):
        c = _cone(Case(case.seed, case.dtype, case.inputs, case.steps[:k]))
        if run_case(c, device).status == "fail":
            case = c
            break
    changed = True
    while changed:
        changed = False
        for i in range(len(case.steps) - 1):
            n_in = len(case.inputs)
            src = case.steps[i]["args"][0]
            steps = [{**s, "args": [src if a == n_in + i else a - (a > n_in + i)
                                    for a in s["args"]]}
                     for j, s in enumerate(case.steps) if j != i]
            c = _cone(Case(case.seed, case.dtype, case.inputs, steps))
            if run_case(c, device).status == "fail":
                case, changed = c, True
                break
        for j, spec in enumerate(case.inputs):
            for key, plain in (("layout", "contiguous"), ("special", None)):
                if spec[key] != plain:
                    inputs = [dict(s) for s in case.inputs]
                    inputs[j][key] = plain
                    c = Case(case.seed, case.dtype, inputs, case.steps)
                    if run_case(c, device).status == "fail":
                        case, changed = c, True
    return case


def save(case: Case, detail: str, folder: Path = CASES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"dtype": case.dtype, "inputs": case.inputs, "steps": case.steps},
                      sort_keys=True)
    path = folder / f"case_{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    case.note = detail.splitlines()[0][:300]
    path.write_text(case.to_json() + "\n")
    return path


def run_range(start: int, graphs: int, device: str, steps: int, folder: Path,
              no_shrink: bool, progress: Path | None = None) -> tuple[dict[str, int], int]:
    """Graphs ``start .. start + graphs - 1``: their statuses counted, failures shrunk and saved,
    and the compiled calls checked. With ``progress``, lines ``begin I`` before graph I is
    generated, ``case I JSON`` once it is, and ``end I STATUS CALLS`` after it, so that a parent
    can tell which graph a dead process ran and at which point."""
    counts: dict[str, int] = {}
    calls = 0
    t0 = time.perf_counter()
    log = open(progress, "a") if progress else None
    for i in range(start, start + graphs):
        if log:
            print(f"begin {i}", file=log, flush=True)
        case = generate(i, steps)
        if log:
            print(f"case {i} {json.dumps(case.to_json())}", file=log, flush=True)
        out = run_case(case, device)
        counts[out.status] = counts.get(out.status, 0) + 1
        calls += out.calls
        if out.status == "refused":
            print(f"graph {i}: refused: {out.detail[:200]}", flush=True)
        if out.status == "fail":
            small = case if no_shrink else shrink(case, device)
            detail = run_case(small, device).detail or out.detail
            path = save(small, detail, folder)
            print(f"graph {i}: FAIL -> {path.name}: {detail.splitlines()[0][:200]}", flush=True)
        if log:
            print(f"end {i} {out.status} {out.calls}", file=log, flush=True)
        if (i + 1 - start) % 50 == 0:
            print(f"graphs {start}..{i}: {calls} calls, {counts}, {time.perf_counter() - t0:.0f} s",
                  flush=True)
    return counts, calls


def run_isolated(start: int, graphs: int, options: list[str], folder: Path,
                 child: list[str] | None = None) -> tuple[dict[str, int], int]:
    """Graphs ``start ..`` in a child process (``--progress``). A child that dies (a signal, an
    abort in a driver) while it runs a graph is a ``crash`` of that graph: its case is saved
    unshrunk (a shrink would need a process per try). One that dies while it generates the
    graph is an ``eager_crash``: the generator runs the ops in eager PyTorch (torch 2.11's CPU
    float16 SDPA with a size-0 axis traps on an integer division), so nothing DLCB did is at
    fault, and the case, never written, is not run again here. Either way a new child goes on
    after it. ``child``: the command before the arguments (this script by default)."""
    import subprocess
    import tempfile

    counts: dict[str, int] = {}
    calls, end = 0, start + graphs
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "progress"
        while start < end:
            log.write_text("")
            rc = subprocess.run([*(child or [sys.executable, str(Path(__file__).resolve())]),
                                 "--seed", str(start), "--graphs", str(end - start),
                                 "--progress", str(log), *options],
                                start_new_session=True).returncode   # its signals stay its own
            begun, case = None, None
            for line in log.read_text().splitlines():
                word, i, rest = (line.split(maxsplit=2) + [""])[:3]
                if word == "begin":
                    begun, case = int(i), None
                elif word == "case":
                    case = Case.from_json(json.loads(rest))
                else:
                    begun, start = None, int(i) + 1
                    status, n = rest.split()
                    counts[status] = counts.get(status, 0) + 1
                    calls += int(n)
            if begun is None:
                if start < end:   # died before its first graph: not a graph's fault
                    raise RuntimeError(f"fuzz child for graphs {start}.. exited {rc} before its "
                                       f"first graph")
                break
            kind = "crash" if case else "eager_crash"
            counts[kind] = counts.get(kind, 0) + 1
            where = f" -> {save(case, f'process died (exit status {rc})', folder).name}" \
                if case else " while generating it (eager PyTorch)"
            print(f"graph {begun}: {kind.upper()} (exit status {rc}){where}", flush=True)
            start = begun + 1
    return counts, calls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--steps", type=int, default=6, help="most steps per graph")
    ap.add_argument("--save", type=Path, default=CASES, help="folder for shrunk failing cases")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes, each a contiguous share of the graphs (one GPU: they share it)")
    ap.add_argument("--progress", type=Path, help=argparse.SUPPRESS)   # a child of --jobs
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    if not faulthandler.is_enabled():   # (pytest enables its own)
        faulthandler.enable()   # a fatal signal prints every thread's Python stack
    if a.progress:
        run_range(a.seed, a.graphs, a.device, a.steps, a.save, a.no_shrink, a.progress)
        return 0
    jobs = max(1, min(a.jobs, a.graphs))
    share = [a.graphs // jobs + (j < a.graphs % jobs) for j in range(jobs)]
    starts = [a.seed + sum(share[:j]) for j in range(jobs)]
    if jobs == 1:
        results = [run_range(a.seed, a.graphs, a.device, a.steps, a.save, a.no_shrink)]
    else:   # one child process per share, each watched by a thread of this one
        from concurrent.futures import ThreadPoolExecutor

        options = ["--device", a.device, "--steps", str(a.steps), "--save", str(a.save)] + \
            ["--no-shrink"] * a.no_shrink
        with ThreadPoolExecutor(jobs) as ex:
            results = list(ex.map(lambda st, n: run_isolated(st, n, options, a.save),
                                  starts, share))
    counts: dict[str, int] = {}
    for c, _ in results:
        for k, v in c.items():
            counts[k] = counts.get(k, 0) + v
    calls = sum(n for _, n in results)
    print(f"done: {a.graphs} graphs, {calls} compiled calls checked, {counts}, "
          f"{time.perf_counter() - t0:.0f} s")
    return 1 if counts.get("fail") or counts.get("crash") else 0


if __name__ == "__main__":
    sys.exit(main())
