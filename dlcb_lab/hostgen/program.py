"""The host program (paper §2.2.4): a flat instruction list that, before any launch, reads the input
shapes, binds named dims, checks every shape constraint (input axes, residual constraints, non-empty
reductions), and computes the launch slots (buffer shapes, thread counts, kernel int params, index
bounds).

Instructions ``Instr(op, dst, a, b)`` work on an integer register file; ``INSTRUCTIONS`` defines
each op once, as Python source over its operands: ``{A}``/``{B}`` the registers ``a``/``b``,
``{a}``/``{b}`` immediates, ``{d}`` the destination (for checks: the message index). ``interpret``
evaluates the instructions one by one; ``compile`` joins the same sources into one straight-line
function (the fast path used by thunks). Both raise ``ShapeMismatch`` naming the dimension and the
constraint. ``trace`` evaluates the same instructions for inspection: every register value and
every check, stopping (without raising) at the first failing check with the message it raises.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from ..dims import Expr, FloorDiv, Lit, Mod, Var, interpret, lit, operands
from ..dims.bind import Attainable, Bind, BindPlan, Check, Consistent
from ..display import Rich
from ..errors import ShapeError, ShapeMismatch
from ..kgen.abi import magic


@dataclass(frozen=True)
class OpSpec:
    """One instruction kind: ``fail`` (a condition raising ``ShapeMismatch(message)``, tested
    first) and ``value`` (stored in the destination register); either may be empty."""

    value: str = ""
    fail: str = ""
    message: str = ""


_DIVISOR = "f'divisor of a dimension expression is {{{B}}} (must be positive)'"

INSTRUCTIONS: dict[str, OpSpec] = {
    "load": OpSpec("shapes[{a}][{b}]"),                       # r[d] = shape[a][b]
    "const": OpSpec("{a}"),                                   # r[d] = a
    "add": OpSpec("{A} + {B}"),                               # r[d] = r[a] + r[b]
    "sub": OpSpec("{A} - {B}"),                               # r[d] = r[a] - r[b]
    "mul": OpSpec("{A} * {B}"),                               # r[d] = r[a] * r[b]
    "max": OpSpec("{A} if {A} > {B} else {B}"),               # r[d] = max(r[a], r[b])
    "fdiv": OpSpec("{A} // {B}", "{B} <= 0", _DIVISOR),       # r[d] = r[a] // r[b], r[b] > 0
    "mod": OpSpec("{A} % {B}", "{B} <= 0", _DIVISOR),         # r[d] = r[a] % r[b], r[b] > 0
    "fdiv0": OpSpec("{A} // {B} if {B} > 0 else 0"),         # launch slots: 0 when r[b] <= 0
    "mod0": OpSpec("{A} % {B} if {B} > 0 else 0"),           # (only a kernel of 0 elements has one)
    "magic": OpSpec("magic({A})"),                            # r[d] = kgen.abi.magic(r[a])
    "check": OpSpec("", "{A} != {B}", "M[{d}].format(got={A}, want={B})"),   # r[a] == r[b]
    "positive": OpSpec("", "{A} <= 0", "M[{d}].format(got={A})"),            # r[a] > 0
    "nonneg": OpSpec("", "{A} < 0", "M[{d}].format(got={A})"),               # r[a] >= 0
    "divides": OpSpec("", "{B} <= 0 or {A} < 0 or {A} % {B}",                # r[a] = k*r[b],
                      "M[{d}].format(got={A}, want={B})"),                   # k >= 0, r[b] > 0
    "rank": OpSpec("", "len(shapes[{a}]) != {b}",                            # rank of arg a == b
                   "M[{d}].format(got=len(shapes[{a}]))"),
}
_CHECKS = frozenset(k for k, s in INSTRUCTIONS.items() if not s.value)
_SHORT = {"max": "max({A}, {B})", "fdiv0": "{A} // {B}  (0 if {B} <= 0)",
          "mod0": "{A} % {B}  (0 if {B} <= 0)"}   # ``Instr.text`` of conditional expressions


@dataclass(frozen=True)
class Instr:
    op: str
    dst: int
    a: int = 0
    b: int = 0

    def source(self, reg: Callable[[int], str]) -> tuple[str, str, str]:
        """(fail, message, value) Python sources, registers spelled by ``reg``."""
        spec = INSTRUCTIONS[self.op]
        f = dict(A=reg(self.a), B=reg(self.b), a=self.a, b=self.b, d=self.dst)
        return spec.fail.format(**f), spec.message.format(**f), spec.value.format(**f)

    @property
    def is_check(self) -> bool:
        return self.op in _CHECKS

    def reads(self) -> tuple[int, ...]:
        """The registers this instruction reads (``a`` and/or ``b``, as its ``OpSpec`` uses them)."""
        spec = INSTRUCTIONS[self.op]
        text = spec.value + spec.fail + spec.message
        return tuple(x for x, key in ((self.a, "{A}"), (self.b, "{B}")) if key in text)

    def text(self) -> str:
        """``r3 = r1 * r2``, or for a check ``fail if r4 != r7``."""
        fail, _, value = self.source(lambda i: f"r{i}")
        short = _SHORT.get(self.op)
        if short is not None:
            value = short.format(A=f"r{self.a}", B=f"r{self.b}")
        return f"fail if {fail}" if self.is_check else f"r{self.dst} = {value}"

    def __repr__(self) -> str:
        return f"{self.op:<8} {self.dst:>3} {self.a:>3} {self.b:>3}"


@dataclass(frozen=True)
class HostProgram(Rich):
    """Instructions, check messages, and the registers holding each named output slot.
    ``args``: the graph input each shape argument is; ``regs``: for each register, the dimension
    expression it holds (empty for a load only compared against an expression)."""

    instrs: tuple[Instr, ...]
    messages: tuple[str, ...]
    slots: dict[str, int]
    n_regs: int
    n_args: int
    args: tuple[str, ...] = ()
    regs: tuple[str, ...] = ()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_steps"}   # code objects

    @functools.cached_property
    def _steps(self) -> list:
        def code(src: str):
            return compile(src, "<dlcb host instruction>", "eval") if src else None

        return [tuple(code(s) for s in ins.source(lambda i: f"r[{i}]")) for ins in self.instrs]

    def _execute(self, shapes: Sequence[Sequence[int]], r: list[int]) -> Iterator[str | None]:
        """Evaluate the instructions one at a time into ``r``, yielding per instruction ``None``
        or, for a failing check, its message (then stopping)."""
        ns = {"r": r, "shapes": shapes, "M": self.messages, "magic": magic}
        for ins, (fail, message, value) in zip(self.instrs, self._steps):
            if fail is not None and eval(fail, ns):
                yield eval(message, ns)
                return
            if value is not None:
                r[ins.dst] = eval(value, ns)
            yield None

    def interpret(self, shapes: Sequence[Sequence[int]]) -> list[int]:
        """Evaluate the instructions one at a time (the reference semantics of ``compile``)."""
        r = [0] * self.n_regs
        for failure in self._execute(shapes, r):
            if failure is not None:
                raise ShapeMismatch(failure)
        return r

    def trace(self, shapes: Sequence[Sequence[int]]) -> "HostTrace":
        """Evaluate for concrete input shapes (one per graph input, constants included) and keep
        every step: each instruction's operand and result values, each check passing or failing
        with the message the host program raises. Never raises: evaluation stops at the first
        failure, recorded in ``HostTrace.error``."""
        shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        r = [0] * self.n_regs
        steps: list[TraceStep] = []
        error = None
        if len(shapes) != self.n_args:
            error = f"expected {self.n_args} inputs, got {len(shapes)}"   # as ``compile`` says
        else:
            run = self._execute(shapes, r)
            for i, ins in enumerate(self.instrs):
                reads = tuple((k, r[k]) for k in ins.reads())   # before the write (dst may alias)
                try:
                    failure = next(run)
                except (IndexError, TypeError) as err:   # a constant given a shape of lower rank
                    failure = f"instruction {i} ({ins.text()}): {type(err).__name__}: {err}"
                value = None if ins.is_check or failure is not None else r[ins.dst]
                steps.append(TraceStep(i, ins, reads, value, failure))
                if failure is not None:
                    error = failure
                    break
        written = {s.instr.dst for s in steps if not s.instr.is_check and s.failure is None}
        slots = {name: r[k] for name, k in self.slots.items() if k in written}
        return HostTrace(self, shapes, tuple(steps), tuple(r[k] if k in written else None
                                                           for k in range(self.n_regs)),
                         slots, error)

    def compile(self) -> Callable[[Sequence[Sequence[int]]], list[int]]:
        """The instruction list as one straight-line Python function ``f(shapes) -> registers``."""
        lines = ["def host(shapes):",
                 f"    if len(shapes) != {self.n_args}:",
                 f"        raise ShapeMismatch(f'expected {self.n_args} inputs, got {{len(shapes)}}')"]
        for ins in self.instrs:
            fail, message, value = ins.source(lambda i: f"r{i}")
            if fail:
                lines.append(f"    if {fail}: raise ShapeMismatch({message})")
            if value:
                lines.append(f"    r{ins.dst} = {value}")
        used = {i.dst for i in self.instrs if i.op not in _CHECKS}
        regs = ", ".join(f"r{i}" if i in used else "0" for i in range(self.n_regs))
        lines.append(f"    return [{regs}]")
        ns = {"ShapeMismatch": ShapeMismatch, "M": self.messages, "magic": magic}
        exec(compile("\n".join(lines), "<dlcb host program>", "exec"), ns)
        return ns["host"]

    def __repr__(self) -> str:
        lines = [f"HostProgram: {len(self.instrs)} instructions, {self.n_regs} registers"]
        for i, ins in enumerate(self.instrs):
            note = ""
            if ins.op in _CHECKS:
                note = "  ; " + self.messages[ins.dst].split("\n")[0]
            lines.append(f"  {i:>3}: {ins!r}{note}")
        lines += [f"  slot {name} = r{r}" for name, r in self.slots.items()]
        return "\n".join(lines)


@dataclass(frozen=True)
class TraceStep:
    """One evaluated instruction: the registers it read with their values, the value it stored
    (``None`` for checks) and, for a failing check, the message raised (``failure``)."""

    index: int
    instr: Instr
    reads: tuple[tuple[int, int], ...]
    value: int | None
    failure: str | None = None


@dataclass(frozen=True)
class HostTrace(Rich):
    """``HostProgram.trace``: the instructions evaluated for ``shapes``, up to and including the
    first failing check. ``registers``: final values (``None``: not computed); ``slots``: the
    named launch slots computed; ``error``: the message the thunk raises as ``ShapeMismatch``."""

    program: HostProgram
    shapes: tuple[tuple[int, ...], ...]
    steps: tuple[TraceStep, ...]
    registers: tuple[int | None, ...]
    slots: dict[str, int]
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        n_checks = sum(1 for s in self.steps if s.instr.is_check)
        head = (f"HostTrace {list(self.shapes)}: {len(self.steps)}/{len(self.program.instrs)} "
                f"instructions, {n_checks} checks, "
                + ("ok" if self.ok else f"FAILED: {self.error}"))
        lines = [head]
        for s in self.steps:
            if s.instr.is_check:
                note = "ok" if s.failure is None else f"FAIL {s.failure}"
            else:
                note = f"= {s.value}"
            args = ", ".join(f"r{k}={v}" for k, v in s.reads)
            lines.append(f"  {s.index:>3}: {s.instr.text():<28} {note}"
                         + (f"   ({args})" if args else ""))
        lines += [f"  slot {name} = {v}" for name, v in self.slots.items()]
        return "\n".join(lines)


class HostBuilder:
    """Emit instructions; expressions are compiled once per node (interned => CSE)."""

    def __init__(self, n_args: int, arg_names: Sequence[str] = ()) -> None:
        self.arg_names = tuple(arg_names)
        self.instrs: list[Instr] = []
        self.messages: list[str] = []
        self.slots: dict[str, int] = {}
        self.env: dict[Expr, int] = {}   # expression -> register holding it
        self.magics: dict[int, int] = {}  # register -> register holding its magic
        self.n = 0
        self.n_args = n_args
        self.lenient = False
        """Divisions by a non-positive value give 0 instead of failing: set while computing a
        kernel's launch slots, which matter only when the kernel has elements (a zero divisor in
        its index arithmetic is an extent of a value with no elements)."""
        self.registers = Registers(self)

    def emit(self, op: str, a: int = 0, b: int = 0) -> int:
        d = self.n
        self.n += 1
        self.instrs.append(Instr(op, d, a, b))
        return d

    def load(self, arg: int, axis: int) -> int:
        return self.emit("load", arg, axis)

    def bind(self, e: Expr, r: int) -> None:
        """Register ``r`` holds ``e`` (a dim, or an atom such as ``(H + 1) // 2``)."""
        self.env[e] = r

    def emit_binding(self, plan: BindPlan, check_message: Callable[[int], str]) -> None:
        """The binding plan as instructions (shape sources only): loads, binds (a bare dim is
        its load; ``rest + coef*m`` is ``divides`` then ``fdiv``), checks of sources
        (``check_message(source)``, a template over ``{got}``/``{want}``), of bound atoms
        against their operands and of attainability. Messages name the source and where the
        dims compared come from."""
        loads: dict[int, int] = {}

        def load(i: int) -> int:
            if i not in loads:
                s = plan.sources[i]
                loads[i] = self.load(s.arg, s.axis)
            return loads[i]

        for st in plan.steps:
            s = plan.sources[st.source]
            if s.is_int:
                raise TypeError(f"{s.label}: host programs read shapes only")
            if isinstance(st, Check):
                self.guard("check", check_message(st.source), load(st.source), self.expr(s.expr))
            elif isinstance(st, Bind):
                r = load(st.source)
                if not st.plain:
                    if st.rest is not _ZERO:
                        r = self.emit("sub", r, self.expr(st.rest))
                    coef = self.expr(st.coef)
                    rest = "size" if st.rest is _ZERO else f"size - {_atomic(st.rest)}"
                    self.guard("divides",
                               f"{s.label}: {rest} = {{got}} is no non-negative multiple of "
                               f"{st.coef!r} = {{want}}, so no integer {st.target!r} >= 0 gives "
                               f"size == {s.expr!r}" + _origin(plan, st.rest + st.coef), r, coef)
                    if st.coef is not _ONE:
                        r = self.emit("fdiv", r, coef)
                self.bind(st.target, r)
            elif isinstance(st, Consistent):
                have = self.env[st.target]
                got = operands(st.target, self.registers, self.env, True)
                head = (f"size {{got}} != {st.target!r}" if st.target is s.expr else
                        f"size gives {st.target!r} = {{got}}, but {st.target!r}")
                self.guard("check", f"{s.label}: {head} = {{want}}"
                           + _origin(plan, st.target, operands=True), have, got)
            elif isinstance(st, Attainable):
                r = self.emit("sub", self.env[st.target], self.expr(st.low))
                self.guard("nonneg", f"{s.label}: {st.target!r} is at least {st.low!r} for "
                           f"dims >= 0, but size - {_atomic(st.low)} = {{got}}"
                           + _origin(plan, st.low), r)

    def guard(self, op: str, text: str, a: int = 0, b: int = 0) -> None:
        """A check instruction ``op`` (``check``, ``positive``, ``rank``) failing with ``text``."""
        self.messages.append(text)
        self.instrs.append(Instr(op, len(self.messages) - 1, a, b))

    def expr(self, e: Expr) -> int:
        """The register holding ``e`` (``dims.interpret`` over ``Registers``, memo ``env``)."""
        return interpret(e, self.registers, self.env, True)

    def maximum(self, exprs: Sequence[Expr]) -> int:
        """Register holding the maximum of ``exprs`` (literals folded first)."""
        lits = [e.value for e in exprs if isinstance(e, Lit)]
        rest = [e for e in exprs if not isinstance(e, Lit)]
        regs = [self.expr(e) for e in rest] + ([self.expr(lit(max(lits)))] if lits else [])
        r = regs[0]
        for x in regs[1:]:
            r = self.emit("max", r, x)
        return r

    def slot(self, name: str, e: Expr, divisor: bool = False) -> int:
        """Register holding ``e`` (``divisor``: ``kgen.abi.magic`` of it), named ``name``."""
        r = self.expr(e)
        if divisor:
            if r not in self.magics:
                self.magics[r] = self.emit("magic", r)
            r = self.magics[r]
        self.slots[name] = r
        return r

    def build(self) -> HostProgram:
        regs = [""] * self.n
        for e, r in self.env.items():   # first expression stored in a register names it
            regs[r] = regs[r] or repr(e)
        return HostProgram(tuple(self.instrs), tuple(self.messages), dict(self.slots), self.n,
                           self.n_args, tuple(self.arg_names), tuple(regs))


class Registers:
    """The host program's domain of ``dims.interpret``: an expression's value is the register
    holding it, each node one instruction (``HostBuilder.env`` is the memo: bound dims, and every
    node, literals included, computed once). The zero-divisor policy is compiled: ``fdiv``/``mod``
    fail at run time; under ``HostBuilder.lenient`` (launch slots) ``fdiv0``/``mod0`` give 0."""

    def __init__(self, hb: HostBuilder) -> None:
        self.hb = hb

    def lit(self, e: Lit) -> int:
        r = self.hb.env.get(e)
        if r is None:
            r = self.hb.env[e] = self.hb.emit("const", e.value)
        return r

    def var(self, v: Var) -> int:
        raise ShapeError(f"dimension {v.name} is not bound by any input axis")

    def sum(self, e: Expr, const: int, terms: list) -> int:
        hb = self.hb
        r = hb.expr(lit(const)) if const else None
        for t, c in terms:
            if c != 1:
                t = hb.emit("mul", t, hb.expr(lit(c)))
            r = t if r is None else hb.emit("add", r, t)
        return r

    def prod(self, e: Expr, factors: list) -> int:
        r = factors[0]
        for f in factors[1:]:
            r = self.hb.emit("mul", r, f)
        return r

    def floordiv(self, e: Expr, num: int, den: int) -> int:
        return self.hb.emit("fdiv0" if self.hb.lenient else "fdiv", num, den)

    def mod(self, e: Expr, num: int, den: int) -> int:
        return self.hb.emit("mod0" if self.hb.lenient else "mod", num, den)


_ZERO, _ONE = lit(0), lit(1)


def _atomic(e: Expr) -> str:
    return repr(e) if isinstance(e, (Lit, Var, FloorDiv, Mod)) else f"({e!r})"


def _origin(plan: BindPlan, e: Expr, operands: bool = False) -> str:
    parts = [plan.origin(c) for c in e.children()] if operands else [plan.origin(e)]
    text = "; ".join(p for p in parts if p)
    return escape(f" ({text})") if text else ""


def escape(text: str) -> str:
    """``text`` made literal inside a message template (user source lines may hold braces)."""
    return text.replace("{", "{{").replace("}", "}}")
