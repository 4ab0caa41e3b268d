"""The lowering registry: one registration per ATen overload packet, in ATen schema (the model is
Inductor's ``register_lowering``). A registration holds what the rest of the project needs to know
of an op in one place:

- the lowering ``fn(cx, *args, **kwargs)``, its parameters the ATen schema's of every overload it
  serves (``self`` arrives as ``input``; ``bridge.aten`` binds a node's arguments to them);
- ``ir``: the IR ops it emits (``OpDef`` constants of ``ir.ops.Ops``);
- ``opinfo``: the names of PyTorch's OpInfo entries (``op_db``) whose samples test it
  (``tests/ops/test_opinfo.py`` runs them), or ``no_opinfo``, why none;
- ``fuzz``: its entries in the differential fuzzer (``tests/tools/fuzz.py``): an elementwise map
  carries its torch function (the fuzzer draws it on any shape), a structured one only its name
  (its parameters and constants are drawn by the fuzzer's own table); or ``no_fuzz``, why none.

Packets are ``torch.ops.aten`` objects (a misspelt packet fails at import); in-place forms
(``relu_``) resolve to their functional packet and are functionalized by the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from ..ir.ops import OpDef

aten = torch.ops.aten


@dataclass(frozen=True)
class Fuzz:
    """A fuzzer entry (``tests/tools/fuzz.py``): ``fn`` an elementwise map of ``arity`` tensors, drawn on
    any shape; None: a structured entry the fuzzer's ``SHAPED`` table draws."""

    name: str
    fn: Callable | None = None
    arity: int = 1


@dataclass(frozen=True)
class Lowering:
    """One registration: the packets ``fn`` lowers and what tests them."""

    packets: tuple[str, ...]
    fn: Callable
    ir: tuple[OpDef, ...]
    opinfo: tuple[str, ...] = ()
    fuzz: tuple[Fuzz, ...] = ()
    slow: bool = False
    """Its OpInfo samples run under ``-m slow`` only (suite time)."""
    no_opinfo: str = ""
    no_fuzz: str = ""


UNLISTED = "not in the OpInfo run yet"
"""``no_opinfo`` of a registration whose OpInfo entry is not run yet: a gap, not a reason."""
NOT_FUZZED = "not drawn by the fuzzer yet"
"""``no_fuzz`` of a registration the fuzzer does not draw yet: a gap, not a reason."""

LOWERINGS: dict[str, Lowering] = {}
"""ATen overload packet name -> its registration."""


def register(*packets, ir: tuple[OpDef, ...] = (), opinfo: tuple[str, ...] = (),
             fuzz: tuple = (), slow: bool = False, no_opinfo: str = "",
             no_fuzz: str = "") -> Callable:
    """Decorator: the function lowers ``packets`` (``aten.<packet>``; aliases share it). A
    ``fuzz`` item may be a bare name (a structured entry)."""
    def deco(fn: Callable) -> Callable:
        entry = Lowering(tuple(p.__name__ for p in packets), fn, tuple(ir), tuple(opinfo),
                         tuple(Fuzz(f) if isinstance(f, str) else f for f in fuzz), slow,
                         no_opinfo, no_fuzz)
        for name in entry.packets:
            if name in LOWERINGS:
                raise ValueError(f"ATen packet {name!r} registered twice")
            LOWERINGS[name] = entry
        return fn
    return deco


def registrations() -> Iterator[Lowering]:
    """Every registration once, in registration order."""
    seen: set[int] = set()
    for entry in LOWERINGS.values():
        if id(entry) not in seen:
            seen.add(id(entry))
            yield entry


def lookup(packet: str) -> tuple[Callable, bool] | None:
    """(lowering, in place) of an ATen packet name, or None when none is registered."""
    if packet in LOWERINGS:
        return LOWERINGS[packet].fn, False
    if packet.endswith("_") and not packet.startswith("_") and packet[:-1] in LOWERINGS:
        return LOWERINGS[packet[:-1]].fn, True
    return None
