"""The host program (paper §2.2.4): a flat instruction list that, before any launch, reads the input
shapes, binds named dims, checks every shape constraint (input axes and residual constraints), and
computes the launch slots (buffer shapes, thread counts, kernel int params).

Instructions (``op, dst, a, b``) work on an integer register file:

    rank   -, arg, rank        check len(shape[arg]) == rank
    load   dst, arg, axis      r[dst] = shape[arg][axis]
    const  dst, value          r[dst] = value
    add    dst, a, b           r[dst] = r[a] + r[b]
    mul    dst, a, b           r[dst] = r[a] * r[b]
    fdiv   dst, a, b           r[dst] = r[a] // r[b]    (checked: r[b] > 0)
    mod    dst, a, b           r[dst] = r[a] % r[b]     (checked: r[b] > 0)
    check  msg, a, b           r[a] == r[b] or raise ShapeMismatch(messages[msg])

``interpret`` runs the list; ``compile`` turns the same list into one Python function (the fast
path used by thunks). Both raise ``ShapeMismatch`` naming the dimension and the constraint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..dims import Constraint, Expr, FloorDiv, Lit, Mod, Prod, Sum, Var, lit


class ShapeMismatch(ValueError):
    """An input shape violates a compiled shape constraint (raised before any kernel launch)."""


@dataclass(frozen=True)
class Instr:
    op: str
    dst: int
    a: int = 0
    b: int = 0

    def __repr__(self) -> str:
        return f"{self.op:<6} {self.dst:>3} {self.a:>3} {self.b:>3}"


@dataclass(frozen=True)
class HostProgram:
    """Instructions, check messages, and the registers holding each named output slot."""

    instrs: tuple[Instr, ...]
    messages: tuple[str, ...]
    slots: dict[str, int]
    n_regs: int
    n_args: int

    def interpret(self, shapes: Sequence[Sequence[int]]) -> list[int]:
        r = [0] * self.n_regs
        for ins in self.instrs:
            op = ins.op
            if op == "load":
                r[ins.dst] = shapes[ins.a][ins.b]
            elif op == "const":
                r[ins.dst] = ins.a
            elif op == "add":
                r[ins.dst] = r[ins.a] + r[ins.b]
            elif op == "mul":
                r[ins.dst] = r[ins.a] * r[ins.b]
            elif op in ("fdiv", "mod"):
                if r[ins.b] <= 0:
                    raise ShapeMismatch(f"divisor of a dimension expression is {r[ins.b]} "
                                        f"(must be positive)")
                r[ins.dst] = r[ins.a] // r[ins.b] if op == "fdiv" else r[ins.a] % r[ins.b]
            elif op == "check":
                if r[ins.a] != r[ins.b]:
                    raise ShapeMismatch(self.messages[ins.dst].format(got=r[ins.a], want=r[ins.b]))
            elif op == "rank":
                if len(shapes[ins.a]) != ins.b:
                    raise ShapeMismatch(self.messages[ins.dst].format(got=len(shapes[ins.a])))
            else:  # pragma: no cover
                raise ValueError(op)
        return r

    def compile(self) -> Callable[[Sequence[Sequence[int]]], list[int]]:
        """The instruction list as one straight-line Python function ``f(shapes) -> registers``."""
        lines = ["def host(shapes):"]
        if self.n_args:
            lines.append("    if len(shapes) != %d:" % self.n_args)
            lines.append("        raise ShapeMismatch(f'expected %d inputs, got {len(shapes)}')"
                         % self.n_args)
        for ins in self.instrs:
            d, a, b = ins.dst, ins.a, ins.b
            if ins.op == "load":
                lines.append(f"    r{d} = shapes[{a}][{b}]")
            elif ins.op == "const":
                lines.append(f"    r{d} = {a}")
            elif ins.op in ("add", "mul"):
                lines.append(f"    r{d} = r{a} {'+' if ins.op == 'add' else '*'} r{b}")
            elif ins.op in ("fdiv", "mod"):
                lines.append(f"    if r{b} <= 0: raise ShapeMismatch("
                             f"f'divisor of a dimension expression is {{r{b}}} (must be positive)')")
                lines.append(f"    r{d} = r{a} {'//' if ins.op == 'fdiv' else '%'} r{b}")
            elif ins.op == "check":
                lines.append(f"    if r{a} != r{b}: raise ShapeMismatch(M[{d}].format(got=r{a}, "
                             f"want=r{b}))")
            elif ins.op == "rank":
                lines.append(f"    if len(shapes[{a}]) != {b}: raise ShapeMismatch("
                             f"M[{d}].format(got=len(shapes[{a}])))")
        used = sorted({i.dst for i in self.instrs if i.op not in ("check", "rank")})
        lines.append(f"    return [{', '.join(f'r{i}' if i in used else '0' for i in range(self.n_regs))}]")
        ns = {"ShapeMismatch": ShapeMismatch, "M": self.messages}
        exec(compile("\n".join(lines), "<dlcb host program>", "exec"), ns)
        return ns["host"]

    def __repr__(self) -> str:
        lines = [f"HostProgram: {len(self.instrs)} instructions, {self.n_regs} registers"]
        for i, ins in enumerate(self.instrs):
            note = ""
            if ins.op in ("check", "rank"):
                note = "  ; " + self.messages[ins.dst].split("\n")[0]
            lines.append(f"  {i:>3}: {ins!r}{note}")
        lines += [f"  slot {name} = r{r}" for name, r in self.slots.items()]
        return "\n".join(lines)


class HostBuilder:
    """Emit instructions; expressions are compiled once per node (interned => CSE)."""

    def __init__(self, n_args: int) -> None:
        self.instrs: list[Instr] = []
        self.messages: list[str] = []
        self.slots: dict[str, int] = {}
        self.env: dict[Expr, int] = {}   # expression -> register holding it
        self.n = 0
        self.n_args = n_args

    def reg(self) -> int:
        self.n += 1
        return self.n - 1

    def emit(self, op: str, a: int = 0, b: int = 0) -> int:
        d = self.reg()
        self.instrs.append(Instr(op, d, a, b))
        return d

    def load(self, arg: int, axis: int) -> int:
        return self.emit("load", arg, axis)

    def bind(self, v: Var, r: int) -> None:
        self.env[v] = r

    def message(self, text: str) -> int:
        self.messages.append(text)
        return len(self.messages) - 1

    def check_rank(self, arg: int, rank: int, text: str) -> None:
        self.instrs.append(Instr("rank", self.message(text), arg, rank))

    def check(self, a: int, b: int, text: str) -> None:
        self.instrs.append(Instr("check", self.message(text), a, b))

    def expr(self, e: Expr) -> int:
        hit = self.env.get(e)
        if hit is not None:
            return hit
        if isinstance(e, Lit):
            r = self.emit("const", e.value)
        elif isinstance(e, Var):
            raise KeyError(f"dimension {e.name} is not bound by any input axis")
        elif isinstance(e, Prod):
            r = self.expr(e.factors[0])
            for f in e.factors[1:]:
                r = self.emit("mul", r, self.expr(f))
        elif isinstance(e, Sum):
            r = self.expr(lit(e.const)) if e.const else None
            for m, c in e.terms:
                t = self.expr(m)
                if c != 1:
                    t = self.emit("mul", t, self.expr(lit(c)))
                r = t if r is None else self.emit("add", r, t)
        elif isinstance(e, FloorDiv):
            r = self.emit("fdiv", self.expr(e.num), self.expr(e.den))
        elif isinstance(e, Mod):
            r = self.emit("mod", self.expr(e.num), self.expr(e.den))
        else:
            raise TypeError(f"host program cannot compute {e!r}")
        self.env[e] = r
        return r

    def slot(self, name: str, e: Expr) -> int:
        r = self.expr(e)
        self.slots[name] = r
        return r

    def build(self) -> HostProgram:
        return HostProgram(tuple(self.instrs), tuple(self.messages), dict(self.slots), self.n,
                           self.n_args)


def escape(text: str) -> str:
    """``text`` made literal inside a message template (user source lines may hold braces)."""
    return text.replace("{", "{{").replace("}", "}}")


def residual_message(c: Constraint) -> str:
    return (f"residual constraint #{c.id} violated: {c.lhs!r} == {c.rhs!r} "
            f"(got {{got}} != {{want}}) from {escape(str(c.provenance))}")
