"""What the lowering registry (``bridge/registry.py``) and the IR op registry cover, and that each
entry says how it is tested (``docs/contributing.md``: where to add an op)."""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.bridge import aten  # noqa: F401  (registers every lowering)
from dlcb_lab.bridge.registry import LOWERINGS, registrations
from dlcb_lab.ir.ops import OPS, OpKind, Ops
from dlcb_lab.kgen import spellings

PACKAGE = pathlib.Path(dl.__file__).parent
PASS_ONLY = {"eager"}
"""IR ops no lowering registers (the bridge's eager fallback makes ``eager`` itself)."""


def test_every_registration_is_tested_or_says_why():
    """Every registration names its OpInfo samples or why none, its fuzzer entries or why none,
    and the IR ops it emits (registered ones)."""
    bad = []
    for r in registrations():
        if bool(r.opinfo) == bool(r.no_opinfo):
            bad.append(f"{r.packets}: OpInfo names {r.opinfo} xor a reason {r.no_opinfo!r}")
        if bool(r.fuzz) == bool(r.no_fuzz):
            bad.append(f"{r.packets}: fuzzer entries {r.fuzz} xor a reason {r.no_fuzz!r}")
        bad += [f"{r.packets}: {op!r} is no registered IR op" for op in r.ir
                if OPS.get(op.name) is not op]
    assert not bad, "\n".join(bad)


def test_packets_are_aten_and_distinct():
    for name, r in LOWERINGS.items():
        assert isinstance(getattr(torch.ops.aten, name), torch._ops.OpOverloadPacket), name
        assert name in r.packets
    fuzz = [f.name for r in registrations() for f in r.fuzz]
    assert len(fuzz) == len(set(fuzz)), "a fuzzer entry registered twice"


def test_every_ir_op_is_reached_and_spelled():
    """Every IR op is emitted by some registration (but ``PASS_ONLY``), and every elementwise op
    carries both spellings (``kgen.spellings`` derives its tables from them)."""
    emitted = {op.name for r in registrations() for op in r.ir}
    assert set(OPS) - emitted - PASS_ONLY == set(), sorted(set(OPS) - emitted - PASS_ONLY)
    assert spellings.spelling_problems() == []
    for name, op in OPS.items():
        if op.kind is OpKind.ELEMENTWISE:
            assert op.cuda and op.numba, name


def test_the_registry_lists_what_it_covers():
    """The coverage the contributor guide describes: one registration per packet family, the
    OpInfo names they give ``tests/ops/test_opinfo.py``, the fuzzer entries ``tests/tools/fuzz.py`` draws."""
    regs = list(registrations())
    assert len(LOWERINGS) >= 165 and len(regs) >= 150
    names = {n for r in regs for n in r.opinfo}
    assert {"add", "nn.functional.conv2d", "softmax", "__getitem__", "atan"} <= names
    assert {f.name for r in regs for f in r.fuzz} >= {"relu", "add", "conv2d", "softmax"}


def test_ops_are_named_by_constants_in_the_sources():
    """No op is named by a string in ``Graph.apply`` calls, and every ``Ops.<name>`` in the
    sources is a registered op (a typo fails here, before any lowering meets it)."""
    bad = []
    for path in PACKAGE.rglob("*.py"):
        src = path.read_text()
        bad += [f"{path.name}: apply({m}" for m in re.findall(r'\.apply\(("\w+")', src)]
        bad += [f"{path.name}: Ops.{m}" for m in re.findall(r"\bOps\.(\w+)", src)
                if m not in OPS]
    assert not bad, bad
    with pytest.raises(AttributeError, match="no IR op 'addd'"):
        Ops.addd   # noqa: B018
