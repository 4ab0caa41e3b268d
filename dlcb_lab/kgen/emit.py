"""Emitters: one kernel IR (``kir``), two languages (paper §4.4).

``cuda``: CUDA C++. A thread-per-output kernel walks its outputs in a grid-stride loop; a
cooperative (block-per-output) reduction kernel splits the reduced range over the block's threads
and combines with warp shuffles. Named dims and host-computed residual dims are ``long long``
parameters; literals stay literals, so NVRTC strength-reduces their ``/`` and ``%``. Each variant
is one body template and an ``extern "C"`` function per entry point ``kgen.entries`` describes
(index width, outputs per thread or group: see ``cuda_kernel``).
``cpu``: a numba ``@njit`` function, one ``prange`` iteration per CUDA thread, compiled eagerly
for an explicit signature. ``parallel=True`` (``Config.numba_parallel``) runs the iterations on
all cores but costs about 6x the compile time (some 2 s per kernel), so it is off by default.
The text each language needs beyond structure (preludes, each elementwise op's spelling) lives in
``kgen.spellings``.

Kernel parameter order (both backends): ``out, in0, in1, ..., numel, <int params>...``, defined
once in ``kgen.abi``.
"""

from __future__ import annotations

from dataclasses import replace
from functools import singledispatchmethod
from typing import Sequence

import torch

from ..ir.dtypes import F64, DType, dtype_of
from ..ir.ops import Combine, Reduction, RowKind
from .abi import abi
from .entries import (NARROW, ROW_CACHE, EntryPoint, entries, in_place_inputs, variant_entries,
                      warp_cache)
from .kir import (AccInit, Accumulate, BlockReduce, Compute, DivMod, Finish, IdxCast, IdxClamp,
                  IdxDivMod, IdxProd, IdxSum, Imm, KernelBody, Load, Loop, Pred, Ref,
                  RowAccumulate, RowCombine, RowInit, RowOutput, RowStats, Select, Store, StoreAt)
from .spellings import CUDA_PRELUDE, PY_PRELUDE, check_spellings, spelling

check_spellings()   # every registered elementwise op is spelled in both languages

BOOL = dtype_of(torch.bool)

WIDTHS = ("", NARROW)
"""The entry points a module has by default: both index widths (``kgen.entries``)."""


def all_variants(kernels: Sequence[KernelBody]) -> list[KernelBody]:
    """Each kernel followed by its launch-time alternative, if any."""
    return [v for k in kernels for v in k.variants()]


def signature(k: KernelBody) -> tuple[str, ...]:
    """Launch signature for ``runtime.cuda_launch.CudaKernel`` (``kgen.abi``)."""
    return abi(k).launch_kinds


def in_dtypes(k: KernelBody) -> list[DType]:
    return [p.dtype for p in abi(k).inputs]


def param_names(k: KernelBody) -> list[str]:
    return list(abi(k).names)


NOTE_CHARS = 160
"""Longest dimension expression an index statement's comment spells out; a longer one is cut
(``...``). Under dynamic resolutions an index's expression nests every div/mod it is built from:
Swin-T's were up to 42,000 characters, 93 % of an 11 MB module."""


def _note(e) -> str:
    text = repr(e)
    return text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS - 3] + "..."


def _header(k: KernelBody, comment: str) -> list[str]:
    """Comment lines naming what each buffer and int parameter holds (user names live here)."""
    a = abi(k)
    lines = [f"{comment} {p.name} = %{p.value.name} ({p.dtype!r})" for p in a.buffers]
    lines += [f"{comment} {p.name} = " + (f"magic({p.expr!r})" if p.kind == "div" else repr(p.expr))
              for p in a.int_params]
    return lines


class _Printer:
    """Walks a statement list. ``stmt`` has one overload per statement class, shared by both
    languages; a language supplies ``let`` (a declaration) and the spellings that differ."""

    indent = "  "
    loop_tail = ""

    def __init__(self, k: KernelBody):
        self.k = k
        self.acc = F64   # the row accumulators' type (``RowInit.acc``)

    def block(self, stmts, ind: str) -> list[str]:
        out = []
        for s in stmts:
            if isinstance(s, Loop):
                out += self.loop(s, ind)
            else:
                out.append(ind + self.stmt(s))
        return out

    def loop(self, s: Loop, ind: str) -> list[str]:
        return [ind + p for p in self.loop_pragmas(s)] + [ind + self.loop_head(s)] + \
            self.block(s.body, ind + self.indent) + ([ind + self.loop_tail] if self.loop_tail else [])

    @singledispatchmethod
    def stmt(self, s) -> str:  # pragma: no cover
        raise TypeError(f"no spelling for {type(s).__name__}")

    @stmt.register
    def _(self, s: IdxSum) -> str:
        out = " + ".join(n if c == 1 else f"({c}) * {n}" if c < 0 else f"{c} * {n}"
                         for c, n in s.terms)
        out = f"{out} - {-s.const}" if s.const < 0 else f"{out} + {s.const}" if s.const else out
        return self.let(None, s.name, out, _note(s.expr))

    @stmt.register
    def _(self, s: IdxProd) -> str:
        return self.let(None, s.name, " * ".join(s.factors), _note(s.expr))

    @stmt.register
    def _(self, s: IdxDivMod) -> str:
        return self.let(None, s.name, self.divmod(s), _note(s.expr))

    @stmt.register
    def _(self, s: IdxCast) -> str:
        return self.let(None, s.name, self.index_cast(s.value))

    @stmt.register
    def _(self, s: IdxClamp) -> str:
        return self.let(None, s.name, self.clamp(s.value, s.hi))

    @stmt.register
    def _(self, s: Pred) -> str:
        terms = ([s.parent] if s.parent else []) + [f"{lo} <= {e}" for e, lo in s.lower] + \
            [f"{e} < {hi}" for e, hi in s.upper]
        return self.let(BOOL, s.name, f" {self.and_} ".join(terms))

    @stmt.register
    def _(self, s: Load) -> str:
        load = self.load(s)
        if s.dtype.reduced:
            load = f"{self.widen(s.dtype)}({load})"
        if s.pred:
            load = self.ternary(s.pred, load, self.literal(s.dtype, 0))
        return self.let(s.dtype, s.name, load)

    @stmt.register
    def _(self, s: Select) -> str:
        out = self.operand(s.default, s.dtype)
        for p, ref in reversed(s.alts):
            out = self.ternary(p, self.operand(ref, s.dtype), out)
        return self.let(s.dtype, s.name, out)

    @stmt.register
    def _(self, s: Compute) -> str:
        op, args = self.compute(s)
        code = self.template(op).format(*args, z=self.literal(s.compute, 0))
        return self.let(s.dtype, s.name, self.result(s, code))

    @stmt.register
    def _(self, s: AccInit) -> str:
        return self.let(s.acc, s.name, _init(s.red, s.acc, self.literal), const=False)

    @stmt.register
    def _(self, s: Accumulate) -> str:
        if s.red.combine is Combine.SUM:
            line = self.add_to(s.name, s.value)
        else:
            line = self.assign(s.name, f"{self.max_fn}({s.name}, {self.cast(s.acc, s.value)})")
        return self.when(s.pred, line) if s.pred else line

    @stmt.register
    def _(self, s: BlockReduce) -> str:
        return self.block_reduce(s)

    @stmt.register
    def _(self, s: Finish) -> str:
        return self.let(s.dtype, s.name, self.finish(s))

    @stmt.register
    def _(self, s: Store) -> str:
        return self.store(self.narrow(s.value))

    @stmt.register
    def _(self, s: RowInit) -> str:
        self.acc = s.acc
        return self.row_init(s.kind)

    @stmt.register
    def _(self, s: RowAccumulate) -> str:
        v = self.to_acc(s.value)
        if s.kind is RowKind.NORM:
            return self.row_norm_add(v)
        return self.row_lse_add(v)

    @stmt.register
    def _(self, s: RowCombine) -> str:
        return self.row_combine(s.kind)

    @stmt.register
    def _(self, s: RowStats) -> str:
        return self.row_stats(s)

    @stmt.register
    def _(self, s: RowOutput) -> str:
        v = self.to_acc(s.value)
        if s.kind is RowKind.SOFTMAX:
            y = f"{self.exp}({v} - rm) / rs"
        elif s.kind is RowKind.LOG_SOFTMAX:
            y = f"{v} - rlse"
        else:
            y = f"({v} - rmean) * rrstd"
            if s.weight:
                y = f"{y} * {self.to_acc(s.weight)}"
            if s.bias:
                y = f"{y} + {self.to_acc(s.bias)}"
        return self.let(s.dtype, s.name, self.cast(s.dtype, y))

    @stmt.register
    def _(self, s: StoreAt) -> str:
        return self.assign(f"out[{s.index}]", self.narrow(s.value))

    def compute(self, s: Compute) -> tuple[str, list[str]]:
        """The op spelled for ``s`` and its operands in the compute dtype."""
        return s.op, [self.operand(a, s.compute.reg) for a in s.args]

    def load(self, s: Load) -> str:
        """The buffer element ``s`` reads."""
        return f"in{s.buf}[{s.index}]"

    def operand(self, a: Ref | Imm, c: DType) -> str:
        """``a`` converted to the compute dtype ``c`` (a register type)."""
        if isinstance(a, Imm):
            return self.literal(c, a.value)
        return a.name if a.dtype.reg == c else self.cast(c, a.name)

    def narrow(self, value: str) -> str:
        """``value`` (a register) as the output buffer's element."""
        t = self.k.dtype
        return f"{self.narrow_fn}{t.tag}({value})" if t.reduced else value

    def widen(self, t: DType) -> str:
        """The function reading a buffer element of reduced type ``t`` into a float register."""
        return f"{self.widen_fn}{t.tag}"

    def round(self, t: DType, code: str) -> str:
        """``code`` rounded to the reduced float ``t``, in a float register."""
        return f"{self.widen(t)}({self.narrow_fn}{t.tag}({self.cast(t.reg, code)}))"


# --- CUDA C++ ---------------------------------------------------------------------------------------

def _init(red: Reduction, acc: DType, literal) -> str:
    """The identity of ``red`` in accumulator type ``acc`` (a float or int64 for max)."""
    if red.combine is Combine.SUM:
        return literal(acc, 0)
    return literal(acc, float("-inf") if acc.is_float else -2**63)


class _Cuda(_Printer):
    loop_tail = "}"
    max_fn = "dlcb_max"
    narrow_fn, widen_fn = "dlcb_to_", "dlcb_from_"
    and_ = "&&"
    exp = "dlcb_exp"

    def to_acc(self, v: str) -> str:
        return f"({self.acc.ctype})({v})"

    def compute(self, s: Compute) -> tuple[str, list[str]]:
        """As the base, except a float division by a Python number: CUDA eager multiplies by the
        divisor's reciprocal, taken in the compute dtype (``div_true_kernel_cuda``), and so does
        the kernel, to match it bit for bit."""
        d = s.args[1] if s.op == "div" else None
        if not (isinstance(d, Imm) and s.compute.is_float):
            return super().compute(s)
        t = s.compute.reg.torch
        inv = (torch.ones((), dtype=t) / torch.tensor(d.value, dtype=t)).item()
        return "mul", [self.operand(s.args[0], s.compute.reg), self.literal(s.compute.reg, inv)]

    def row_init(self, kind: RowKind) -> str:
        t = self.acc.ctype
        if kind is RowKind.NORM:
            return f"{t} rs1 = 0, rs2 = 0;"
        return f"{t} rm = -INFINITY, rs = 0;"

    def row_norm_add(self, v: str) -> str:
        return f"{{ const double xv = {v}; rs1 += xv; rs2 += xv * xv; }}"

    def row_lse_add(self, v: str) -> str:
        return f"dlcb_lse_merge(rm, rs, {v}, ({self.acc.ctype})1);"

    def row_combine(self, kind: RowKind) -> str:
        if kind is RowKind.NORM:
            return "rs1 = dlcb_group_allsum<G>(rs1); rs2 = dlcb_group_allsum<G>(rs2);"
        return "dlcb_group_lse<G>(rm, rs);"

    def row_stats(self, s: RowStats) -> str:
        if s.kind is RowKind.NORM:
            # not fmax: it drops a NaN variance (a row holding an infinity), eager keeps it
            return (f"const double rmean = rs1 / (double){s.count}; const double rvar = "
                    f"rs2 / (double){s.count} - rmean * rmean; const double rrstd = "
                    f"rsqrt((rvar < 0.0 ? 0.0 : rvar) + {s.eps!r});")
        if s.kind is RowKind.LOG_SOFTMAX:
            return f"const {self.acc.ctype} rlse = rm + dlcb_log(rs);"
        return "// softmax: rm, rs"

    def ternary(self, cond: str, a: str, b: str) -> str:
        return f"({cond} ? {a} : {b})"

    def index_cast(self, value: str) -> str:
        return f"(I)({value})"

    def clamp(self, value: str, hi: str) -> str:
        return f"dlcb_min<I>(dlcb_max<I>({value}, 0), {hi} - 1)"

    def when(self, cond: str, line: str) -> str:
        return f"if ({cond}) {line}"

    def literal(self, t: DType, v) -> str:
        return t.cuda_literal(v)

    def cast(self, t: DType, code: str) -> str:
        return self.round(t, code) if t.reduced else f"(({t.ctype})({code}))"

    def template(self, op: str) -> str:
        return spelling("cuda", op)

    def let(self, t: DType | None, name: str, value: str, comment: str = "",
            const: bool = True) -> str:
        """A declaration; ``t`` None is the index type ``I``."""
        ty = "I" if t is None else t.reg.ctype
        line = f"{'const ' if const else ''}{ty} {name} = {value};"
        return f"{line}  // {comment}" if comment else line

    def assign(self, name: str, value: str) -> str:
        return f"{name} = {value};"

    def add_to(self, name: str, value: str) -> str:
        return f"{name} += {value};"

    def divmod(self, s: IdxDivMod) -> str:
        div = s.op is DivMod.FLOORDIV
        if s.floor:  # C truncates; floor semantics only matter when num may be negative
            return f"{'dlcb_fdiv' if div else 'dlcb_fmod'}<I>({s.num}, {s.den})"
        if s.magic:  # a runtime divisor: a multiply-high and a shift at 32 bits
            return f"{'dlcb_udiv' if div else 'dlcb_umod'}<I>({s.num}, {s.den}, {s.magic})"
        return f"{s.num} {'/' if div else '%'} {s.den}"

    def result(self, s: Compute, code: str) -> str:
        return code if s.dtype == s.compute and not s.dtype.reduced else self.cast(s.dtype, code)

    def finish(self, s: Finish) -> str:
        return self.cast(s.dtype, f"{s.acc} / (double){s.count}" if s.red.mean else s.acc)

    def block_reduce(self, s: BlockReduce) -> str:
        ty = s.acc.ctype
        fn = "dlcb_sum_op()" if s.red.combine is Combine.SUM else "dlcb_max_op()"
        init = _init(s.red, s.acc, self.literal)
        return f"{s.name} = dlcb_group_reduce<G, {ty}>({s.name}, ({ty}){init}, {fn});"

    def store(self, value: str) -> str:
        return f"{'if (lane == 0) ' if self.k.cooperative else ''}out[t] = {value};"

    def loop(self, s: Loop, ind: str) -> list[str]:
        """As the base, except a window: a thread's inner loop of literal extent at most
        ``SPLIT_MAX`` that ends in its one accumulation runs as two unrolled loops, the first
        computing every term into a register array, the second folding them in. With the terms
        and the fold interleaved, ptxas issued each predicated load after the previous term's
        double add (convnext_tiny's 7x7 depthwise convolution over runtime H and W on an H100:
        8.6 us, the static kernel 5.9; terms first, 6.2)."""
        fold = _split_fold(s)
        if fold is None:
            return super().loop(s, ind)
        acc, ty = fold
        terms, inner = f"{s.var}v", ind + self.indent
        term = self.ternary(acc.pred, acc.value, _init(acc.red, ty.reg, self.literal)) \
            if acc.pred else acc.value   # the combine's identity where the term is masked
        head = [f"{ind}#pragma unroll", ind + self.loop_head(s)]
        return ([f"{ind}{ty.reg.ctype} {terms}[{s.extent}];"] + head +
                self.block(s.body[:-1], inner) + [f"{inner}{terms}[{s.var}] = {term};", ind + "}"] +
                head + [inner + self.stmt(replace(acc, value=f"{terms}[{s.var}]", pred="")),
                        ind + "}"])

    def loop_pragmas(self, s: Loop) -> list[str]:
        """A block's strided loop over a reduced range is unrolled 4 times, so a thread may have
        four loads in flight (the H200's layer norm row kernel: 105 -> 87 us at 205 MB; the
        plain block reductions, at about half a copy's bandwidth, unchanged)."""
        return ["#pragma unroll 4"] if s.cooperative else []

    def loop_head(self, s: Loop) -> str:
        if s.cooperative:
            return f"for (I {s.var} = lane; {s.var} < {s.extent}; {s.var} += gsize) {{"
        return f"for (I {s.var} = 0; {s.var} < {s.extent}; ++{s.var}) {{"


SPLIT_MAX = 16
"""Longest literal inner loop ``_Cuda.loop`` splits into terms and their fold."""


def _split_fold(s: Loop) -> tuple[Accumulate, DType] | None:
    """The accumulation ending ``s`` and its term's dtype, where ``_Cuda.loop`` splits ``s``."""
    if s.cooperative or not s.extent.isdigit() or int(s.extent) > SPLIT_MAX or not s.body:
        return None
    acc, rest = s.body[-1], s.body[:-1]
    if not isinstance(acc, Accumulate) or any(
            isinstance(b, (Loop, Accumulate, StoreAt)) for b in rest):
        return None
    ty = next((b.dtype for b in rest if isinstance(b, (Load, Select, Compute))
               and b.name == acc.value), None)
    if ty is None or acc.pred and not (ty.is_float or acc.red.combine is Combine.SUM):
        return None   # no identity to stand for a masked integer max's term
    return acc, ty


class _CudaVector(_Cuda):
    """The per-element statements of one of a thread's ``per`` outputs (``j``) in a vectorized
    entry point: loads at ``t`` of the inputs it reads as vectors (``vectors``) read lane ``j`` of
    the vector loaded before the lane loop, the store writes lane ``j`` of the output vector."""

    def __init__(self, k: KernelBody, vectors: set[int]):
        super().__init__(k)
        self.vectors = vectors

    def load(self, s: Load) -> str:
        return f"vin{s.buf}.v[j]" if s.buf in self.vectors and s.index == "t" and not s.pred \
            else super().load(s)

    def store(self, value: str) -> str:
        return f"vout.v[j] = {value};"


class _CudaRowCached(_Cuda):
    """A block-per-row kernel's passes with the row in registers ``rc``: each cooperative loop
    is ``ROW_CACHE`` unrolled strides of the block. The first pass loads every element of the
    thread's share (predicated, so all its loads are in flight at once) and folds the cached
    values into the accumulators after; the second reads ``rc`` back (its recomputation of the
    element is dead code, dropped by the compiler). A softmax row is folded as eager's kernels
    fold it: its max, then the sum of ``exp(x - max)`` (kept in ``rc`` for softmax), so one
    ``exp`` per element instead of the online merge's two and the output's third. (The plain
    block reductions stay on their loop: cached the same way, they made NVRTC and ptxas take
    half as long again on mobilenet_v3_small.)"""

    def __init__(self, k: KernelBody, kind: RowKind, acc: DType):
        super().__init__(k)
        self.kind, self.acc, self.extent = kind, acc, ""
        self.rc_type = k.dtype.reg.ctype if kind is RowKind.NORM else acc.ctype
        """The cached elements' type: the output's register type; softmax keeps ``exp``
        values, in the accumulator type."""

    def block(self, stmts, ind: str) -> list[str]:
        out = []
        for s in stmts:
            if isinstance(s, RowCombine) and s.kind is not RowKind.NORM:
                out += self.lse_combine(s.kind, ind)
                continue
            if not isinstance(s, Loop):
                out.append(ind + self.stmt(s))
                continue
            self.extent = s.extent
            folds = [b for b in s.body if isinstance(b, RowAccumulate)]
            body = self.block([b for b in s.body if b not in folds], "")
            body += [f"rc[k] = ({self.rc_type})({b.value});" for b in folds]
            out += self.cached_loop(body, ind, s.var)
            if folds:
                out += self.cached_loop([self.stmt(replace(b, value="rc[k]")) for b in folds],
                                        ind)
        return out

    def cached_loop(self, body: list[str], ind: str, var: str = "") -> list[str]:
        """``body`` for each of the thread's ``RC`` strides of the row (``k``) that lies inside
        it, unrolled; ``var``, if named, is the element's index in the row."""
        lines = [f"{ind}#pragma unroll", f"{ind}for (I k = 0; k < RC; ++k) {{"]
        if var:
            lines += [f"{ind}  const I {var} = lane + k * gsize;",
                      f"{ind}  if ({var} < {self.extent}) {{"] + \
                [f"{ind}    {b}" for b in body] + [f"{ind}  }}"]
        else:
            lines += [f"{ind}  if (lane + k * gsize < {self.extent}) {b}"
                      for b in body]
        return lines + [f"{ind}}}"]

    def lse_combine(self, kind: RowKind, ind: str) -> list[str]:
        t, keep = self.acc.ctype, kind is RowKind.SOFTMAX
        body = [f"{{ const {t} e = {self.exp}(rc[k] - rm); rs += e;"
                + (" rc[k] = e;" if keep else "") + " }"]
        return [f"{ind}rm = dlcb_group_allmax<G>(rm);"] + self.cached_loop(body, ind) + \
            [f"{ind}rs = dlcb_group_allsum<G>(rs);"]

    def stmt(self, s) -> str:
        if isinstance(s, RowAccumulate) and s.kind is not RowKind.NORM:
            return f"rm = {self.max_fn}(rm, {s.value});"
        if isinstance(s, RowOutput):
            s = replace(s, value="rc[k]")
            if s.kind is RowKind.SOFTMAX:   # rc holds exp(x - rm)
                return self.let(s.dtype, s.name, self.cast(s.dtype, "rc[k] / rs"))
        return super().stmt(s)


def _row_passes(k: KernelBody, ind: str) -> list[str]:
    """A block-per-row kernel's statements: those before its first pass, then the passes with
    the row in registers where it fits (``RC`` elements a thread: ``ROW_CACHE`` for the block,
    ``warp_cache`` for a warp), else reading the row twice."""
    first = next((i for i, s in enumerate(k.stmts) if isinstance(s, Loop)), None)
    init = next((s for s in k.stmts if isinstance(s, RowInit)), None)
    plain = _Cuda(k)
    if not k.cooperative or first is None or init is None:
        return plain.block(k.stmts, ind)
    head, inner = plain.block(k.stmts[:first], ind), ind + "  "
    cached = _CudaRowCached(k, init.kind, plain.acc)
    return head + [f"{ind}constexpr int RC = G ? {warp_cache(k)} : {ROW_CACHE};",
                   f"{ind}if ({k.stmts[first].extent} <= RC * gsize) {{",
                   f"{inner}{cached.rc_type} rc[RC];"] + \
        cached.block(k.stmts[first:], inner) + [f"{ind}}} else {{"] + \
        plain.block(k.stmts[first:], inner) + [f"{ind}}}"]


def _vector_body(k: KernelBody, params: list[str], e: EntryPoint) -> list[str]:
    """``name_vbody<I>`` of vectorized entry point ``e``: ``e.per`` consecutive outputs per
    thread, ``numel`` a multiple of it and every vector access aligned (the launcher checks
    both); the inputs ``e.loads`` lists are read as vectors."""
    w, a, vectors = e.per, abi(k), [b for b, _ in e.loads]
    vec = {p.name: f"dlcb_vec<{p.dtype.ctype}, {w}>" for p in a.buffers}
    lines = ["template <typename I>", f"__device__ __forceinline__ void {k.name}_vbody("
             f"{', '.join(params)}) {{",
             "  const I step = (I)gridDim.x * blockDim.x;",
             f"  const I nv = numel / {w};",
             "  for (I u = (I)blockIdx.x * blockDim.x + threadIdx.x; u < nv; u += step) {"]
    lines += [f"    const {vec[f'in{b}']} vin{b} = reinterpret_cast<const {vec[f'in{b}']}*>"
              f"(in{b})[u];" for b in vectors]
    lines += [f"    {vec['out']} vout;", "    #pragma unroll",
              f"    for (int j = 0; j < {w}; ++j) {{", f"      const I t = u * {w} + j;"]
    lines += _CudaVector(k, set(vectors)).block(k.stmts, "      ")
    return lines + ["    }", f"    reinterpret_cast<{vec['out']}*>(out)[u] = vout;", "  }", "}"]


def cuda_kernel(k: KernelBody, widths: Sequence[str] = WIDTHS) -> str:
    """The kernel body as a template over the index type ``I`` and, per entry point it has among
    the suffixes ``widths`` (``kgen.entries.variant_entries``), an ``extern "C"`` function with
    the same ``long long`` parameters calling it at the entry's index type: ``name`` (64-bit
    index arithmetic) and ``name_i32`` (32-bit, much cheaper ``/`` and ``%``; the launcher uses
    it when every index bound fits); ``name_v`` (a 32-bit vectorized body) and ``name_w`` (a
    block-per-output body run by ``EntryPoint.lanes`` lanes of a warp per output). A
    block-per-output body is also a template over ``G``, its group of threads per output: the
    block (0) or ``G`` lanes of a warp."""
    a = abi(k)
    alias = {f"in{i}" for i in in_place_inputs(k)}
    alias |= {"out"} if alias else set()
    bufs = [f"{'' if p.kind == 'out' else 'const '}{p.dtype.ctype}*"
            f"{'' if p.name in alias else ' __restrict__'} {p.name}" for p in a.buffers]
    ints = [p.name for p in a.ints]
    wide = {p.name for p in a.params if p.kind == "div"}   # long long at both widths
    names = [p.name for p in a.buffers]
    head = _header(k, "//")
    params = bufs + [f"const {'long long' if n in wide else 'I'} {n}" for n in ints]
    if k.cooperative:
        head.append("// one group of threads per output element (G > 0: G lanes of a warp, else "
                    "the block); the group's threads split the reduction")
        lines = head + ["template <typename I, unsigned G>",
                        f"__device__ __forceinline__ void {k.name}_body({', '.join(params)}) {{",
                        "  constexpr unsigned L = G ? G : 1;   // a group's lanes in one warp",
                        "  const unsigned lane = G ? threadIdx.x % L : threadIdx.x;",
                        "  const unsigned gsize = G ? G : blockDim.x;   // threads per group",
                        "  const I per = G ? (I)(blockDim.x / L) : (I)1;   // outputs per block",
                        "  for (I t = (I)blockIdx.x * per + (G ? (I)(threadIdx.x / L) : (I)0); "
                        "t < numel; t += (I)gridDim.x * per) {"]
    else:
        head.append("// one thread per output element")
        lines = head + ["template <typename I>",
                        f"__device__ __forceinline__ void {k.name}_body({', '.join(params)}) {{",
                        "  const I step = (I)gridDim.x * blockDim.x;",
                        "  for (I t = (I)blockIdx.x * blockDim.x + threadIdx.x; t < numel; "
                        "t += step) {"]
    lines += _row_passes(k, "    ")
    lines += ["  }", "}"]
    chosen = variant_entries(k, 0, widths)
    lines += [ln for e in chosen if e.vector for ln in _vector_body(k, params, e)]
    sig = ", ".join(bufs + [f"long long {n}" for n in ints])
    for e in chosen:
        args = ", ".join(names + [f"(int){n}" if e.narrow and n not in wide else n
                                  for n in ints])
        body = "_vbody" if e.vector else "_body"
        targs = f"{e.index_type}, {e.lanes}" if k.cooperative else e.index_type
        lines += [f'extern "C" __global__ void {e.name}({sig}) {{',
                  f"  {k.name}{body}<{targs}>({args});", "}"]
    return "\n".join(lines)


def entry_points(kernels: Sequence[KernelBody], widths: Sequence[str] = WIDTHS) -> list[str]:
    """The ``extern "C"`` kernel names of a module (every variant's entry points among the
    suffixes ``widths``: ``kgen.entries.entries``)."""
    return [e.name for k in kernels for e in entries(k, widths)]


def cuda_module(kernels: Sequence[KernelBody], widths: Sequence[str] = WIDTHS) -> str:
    """One translation unit for the kernels and their variants, with their entry points among the
    suffixes ``widths`` (one NVRTC call); compiles alone."""
    return CUDA_PRELUDE + "\n" + "\n\n".join(cuda_kernel(k, widths)
                                              for k in all_variants(kernels)) + "\n"


# --- numba (CPU) ------------------------------------------------------------------------------------

class _Numba(_Printer):
    indent = "    "
    max_fn = "_max"
    narrow_fn, widen_fn = "_to_", "_from_"
    and_ = "and"
    exp = "math.exp"

    def to_acc(self, v: str) -> str:   # double whatever ``RowInit.acc`` says
        return f"np.float64({v})"

    def row_init(self, kind: RowKind) -> str:
        return "rs1, rs2 = 0.0, 0.0" if kind is RowKind.NORM else "rm, rs = -np.inf, 0.0"

    def row_norm_add(self, v: str) -> str:
        return f"rs1, rs2 = rs1 + {v}, rs2 + {v} * {v}"

    def row_lse_add(self, v: str) -> str:
        return f"rm, rs = _lse_merge(rm, rs, {v}, 1.0)"

    def row_combine(self, kind: RowKind) -> str:  # pragma: no cover
        raise TypeError("numba kernels have no cooperative variant")

    def row_stats(self, s: RowStats) -> str:
        if s.kind is RowKind.NORM:
            return (f"rmean = rs1 / {s.count}; rrstd = 1.0 / np.sqrt(max(rs2 / {s.count} - "
                    f"rmean * rmean, 0.0) + {s.eps!r})")
        if s.kind is RowKind.LOG_SOFTMAX:
            return "rlse = rm + np.log(rs)"
        return "pass  # softmax: rm, rs"

    def ternary(self, cond: str, a: str, b: str) -> str:
        return f"({a} if {cond} else {b})"

    def index_cast(self, value: str) -> str:
        return f"np.int64({value})"

    def clamp(self, value: str, hi: str) -> str:
        return f"min(max({value}, 0), {hi} - 1)"

    def when(self, cond: str, line: str) -> str:
        return f"if {cond}: {line}"

    def literal(self, t: DType, v) -> str:
        return t.py_literal(v)

    def cast(self, t: DType, code: str) -> str:
        return self.round(t, code) if t.reduced else f"np.{t.nptype}({code})"

    def template(self, op: str) -> str:
        return spelling("numba", op)

    def let(self, t: DType | None, name: str, value: str, comment: str = "",
            const: bool = True) -> str:
        line = f"{name} = {value}"
        return f"{line}  # {comment}" if comment else line

    def assign(self, name: str, value: str) -> str:
        return f"{name} = {value}"

    def add_to(self, name: str, value: str) -> str:
        return f"{name} = {name} + {value}"

    def divmod(self, s: IdxDivMod) -> str:   # Python's // and % are floor semantics
        return f"{s.num} {s.op.value} {s.den}"

    def result(self, s: Compute, code: str) -> str:   # numba widens small ints; math.* -> double
        return self.cast(s.dtype, code)

    def finish(self, s: Finish) -> str:
        return self.cast(s.dtype, f"{s.acc} / {s.count}" if s.red.mean else s.acc)

    def block_reduce(self, s: BlockReduce) -> str:  # pragma: no cover
        raise TypeError("numba kernels have no cooperative variant")

    def store(self, value: str) -> str:
        return f"out[t] = {value}"

    def loop_pragmas(self, s: Loop) -> list[str]:
        return []

    def loop_head(self, s: Loop) -> str:
        return f"for {s.var} in range({s.extent}):"


def numba_signature(k: KernelBody) -> str:
    a = abi(k)
    arrs = [f"{p.dtype.nbtype}[::1]" for p in a.buffers]
    return "void(" + ", ".join(arrs + ["int64"] * len(a.ints)) + ")"


def _has_max(stmts) -> bool:
    return any(_has_max(s.body) if isinstance(s, Loop) else
               isinstance(s, Accumulate) and s.red.combine is Combine.MAX for s in stmts)


def numba_kernel(k: KernelBody, parallel: bool = False) -> str:
    """The numba function (``parallel``: numba's, ``Config.numba_parallel``); a kernel with a max
    reduction compiles with LLVM's loop vectorizer off (``runtime.numba_cpu.kernel_jit``)."""
    off = ", vectorize=False" if _has_max(k.stmts) else ""
    lines = _header(k, "#") + [
        f'@_kernel("{numba_signature(k)}"{off}, parallel={parallel}, cache=True, '
        f'error_model="numpy")',
        f"def {k.name}({', '.join(param_names(k))}):",
        "    for t in prange(numel):",
    ]
    lines += _Numba(k).block(k.stmts, "        ")
    return "\n".join(lines)


def numba_module(kernels: Sequence[KernelBody], parallel: bool = False) -> str:
    return PY_PRELUDE + "\n\n" + "\n\n\n".join(numba_kernel(k, parallel) for k in kernels) + "\n"
