"""Thunks (paper §2.3): one call interface over generated kernels.

``StaticThunk`` serves exactly the traced shapes (host program evaluated once at build time);
``DynamicAOTThunk`` serves any shapes of the traced ranks and dtypes: it runs the host program
(binding named dims, checking constraints, computing launch slots), allocates outputs and launches.
Both validate operands (count, tensor, layout, dtype, device) before anything else.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..errors import ShapeMismatch
from ..hostgen.lower import LaunchPlan, Src
from ..hostgen.program import HostProgram
from .launchers import NARROW_LIMIT


class Thunk:
    kind = "abstract"

    def __init__(self, host: HostProgram, plan: LaunchPlan, launchers: Sequence,
                 in_dtypes: Sequence[torch.dtype], device: str, in_names: Sequence[str]):
        self.host = host
        self.plan = plan
        self.launchers = list(launchers)
        self.in_dtypes = tuple(in_dtypes)
        self.device = device
        self.in_names = tuple(in_names)
        self._run_host = host.compile()
        self._narrow_ok = device == "cuda"
        self.calls = 0

    def _check_args(self, args: tuple) -> list[torch.Tensor]:
        if len(args) != len(self.in_dtypes):
            raise TypeError(f"expected {len(self.in_dtypes)} tensor inputs "
                            f"({', '.join(self.in_names)}), got {len(args)}")
        out = []
        for i, (t, dt) in enumerate(zip(args, self.in_dtypes)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"input {i} '{self.in_names[i]}': expected a torch.Tensor, got "
                                f"{type(t).__name__}")
            if t.layout is not torch.strided:
                raise TypeError(f"input {i} '{self.in_names[i]}': layout {t.layout} unsupported "
                                f"(strided tensors only)")
            if t.dtype != dt:
                raise TypeError(f"input {i} '{self.in_names[i]}': dtype {t.dtype} != compiled {dt}")
            if t.device.type != self.device or (out and t.device != out[0].device):
                where = f"{out[0].device} (input 0)" if out else self.device
                raise ValueError(f"input {i} '{self.in_names[i]}': on {t.device}, expected {where}")
            if t.requires_grad:   # inference only: outputs carry no autograd history
                t = t.detach()
            out.append(t if t.is_contiguous() else t.contiguous())
        return out

    def _registers(self, tensors: list[torch.Tensor]) -> list[int]:
        return self._run_host([t.shape for t in tensors])

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        tensors = self._check_args(args)
        r = self._registers(tensors)
        dev = tensors[0].device if tensors else torch.device(self.device)
        bufs = [torch.empty([r[k] for k in b.shape_regs], dtype=b.dtype, device=dev)
                for b in self.plan.buffers]
        for launcher, k in zip(self.launchers, self.plan.kernels):
            n = r[k.numel]
            if n == 0:
                continue
            v = launcher.choose(n, r[k.extent]) if k.extent is not None else 0
            var = k.variants[v]
            ins = [tensors[o.index] if o.src is Src.INPUT else bufs[o.index] for o in var.operands]
            launcher(v, n, bufs[k.out], ins, [r[p] for p in var.params],
                     self._narrow_ok and r[k.index_bound] <= NARROW_LIMIT)
        self.calls += 1
        return tuple(bufs[o.index] for o in self.plan.outputs)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self.launchers)} kernels, {self.device}, inputs "
                f"{list(self.in_names)}, {len(self.host.instrs)} host instructions)")


class DynamicAOTThunk(Thunk):
    """Parameterized kernels for known rank and dtype; any sizes satisfying the constraints."""

    kind = "dynamic"


class StaticThunk(Thunk):
    """Kernels specialized to one shape per input; launch slots precomputed."""

    kind = "static"

    def __init__(self, *a, shapes: Sequence[Sequence[int]], **kw):
        super().__init__(*a, **kw)
        self.shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        self._fixed = self.host.interpret(self.shapes)

    def _registers(self, tensors):
        if tuple(tuple(t.shape) for t in tensors) != self.shapes:
            self._run_host([t.shape for t in tensors])  # raises the precise mismatch
            raise ShapeMismatch(f"static thunk compiled for {self.shapes}")
        return self._fixed
