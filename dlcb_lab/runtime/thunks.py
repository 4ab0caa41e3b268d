"""Thunks (paper §2.3): one call interface over generated kernels.

``StaticThunk`` serves exactly the traced shapes (host program evaluated once at build time);
``DynamicAOTThunk`` serves any shapes of the traced ranks and dtypes: it runs the host program
(binding named dims, checking constraints, computing launch slots), allocates outputs and launches.
Both validate operands (count, tensor, dtype, device) before anything else.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..hostgen.lower import LaunchPlan
from ..hostgen.program import HostProgram, ShapeMismatch


class Thunk:
    kind = "abstract"

    def __init__(self, host: HostProgram, plan: LaunchPlan,
                 launchers: Sequence["CpuLauncher | CudaLauncher"], in_dtypes: Sequence[torch.dtype], device: str, in_names: Sequence[str]):
        self.host = host
        self.plan = plan
        self.launchers = list(launchers)
        self.in_dtypes = tuple(in_dtypes)
        self.device = device
        self.in_names = tuple(in_names)
        self._run_host = host.compile()
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
        narrow = self.device == "cuda" and \
            max((t.numel() for t in (*tensors, *bufs)), default=0) <= NARROW_LIMIT
        for launcher, k in zip(self.launchers, self.plan.kernels):
            n = r[k.numel]
            if n == 0:
                continue
            v = launcher.choose(n, r[k.extent]) if k.extent is not None else 0
            operands, params = k.variants[v]
            ins = [tensors[j] if kind == "in" else bufs[j] for kind, j in operands]
            launcher(v, n, bufs[k.out], ins, [r[p] for p in params], narrow)
        self.calls += 1
        return tuple(bufs[j] for _, j in self.plan.outputs)

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


# --- launchers ------------------------------------------------------------------------------------

class CpuLauncher:
    """numba kernel ``fn(out, *ins, numel, *params)`` over flat views of CPU tensors."""

    def __init__(self, fn):
        self.fn = fn

    def choose(self, numel: int, extent: int) -> int:
        return 0

    def __call__(self, variant, numel, out, ins, params, narrow=False):
        self.fn(out.view(-1).numpy(), *[a.view(-1).numpy() for a in ins], numel, *params)


BLOCK = 256
MAX_GRID = 1 << 16


NARROW_LIMIT = (1 << 31) - (1 << 25)   # int32 index math: numel and t + grid-stride step fit


class CudaLauncher:
    """``CudaKernel``s ``(out, *ins, numel, *params)`` by (variant, narrow): variant 0 one thread
    per output element (grid-stride), variant 1 (reductions) one block per output element; narrow
    the 32-bit index entry point. The cooperative variant is chosen when the reduced extent is
    large enough to occupy a block and either the outputs alone would not fill the GPU or the
    extent is long."""

    def __init__(self, kernels: dict, sm_count: int = 132):
        self.kernels = kernels
        self.fill = sm_count * 2048 // BLOCK * BLOCK  # threads resident on the whole GPU

    def choose(self, numel: int, extent: int) -> int:
        if (1, False) not in self.kernels or extent < 64:
            return 0
        return 1 if (numel < self.fill or extent >= 4096) else 0

    def __call__(self, variant, numel, out, ins, params, narrow=False):
        k = self.kernels[variant, narrow]
        grid = numel if variant else -(-numel // BLOCK)
        k[min(MAX_GRID, grid), BLOCK](out, *ins, numel, *params)
