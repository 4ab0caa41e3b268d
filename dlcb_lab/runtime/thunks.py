"""Thunks (paper §2.3): one call interface over generated kernels.

``StaticThunk`` serves exactly the traced shapes (host program evaluated once at build time);
``DynamicAOTThunk`` serves any shapes of the traced ranks and dtypes: it runs the host program
(binding named dims, checking constraints, computing launch slots), allocates outputs and launches.
Both validate operands (count, tensor, layout, dtype, device: ``runtime.args.check_inputs``, ``dl``
errors) before anything else. One step walker (``Thunk._walk``) goes over the launch plan and
decides each step (variant, index width); ``__call__`` runs what it yields (at the entry point
the launcher picks for it), and
``Thunk.launches(shapes)`` reports it without running anything: the host program's trace, then per
step the kernel variant, entry point, element count and int params, or the library call and its
arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from ..display import Rich
from ..errors import ShapeMismatch
from ..hostgen.lower import KernelLaunch, LaunchPlan, LibraryCall, Operand, Src, VariantLaunch
from ..hostgen.program import HostProgram, HostTrace
from ..kgen.entries import fits
from .args import check_inputs
from .graphs import DEFAULT_CAPACITY, GraphCache
from .launchers import check_index, check_indices


@dataclass(frozen=True)
class StepLaunch:
    """One step of a call for concrete shapes. Kernels: ``name`` the entry point the launcher
    picks (the variant's name and the entry's suffix, ``kgen.entries``: ``_i32`` the 32-bit index
    one, ``_v`` the vectorized one, ``_w`` the group-of-lanes one), ``narrow`` its index width,
    ``variant`` 0 one thread per output element (``width`` outputs per thread: > 1 vectorized,
    taking the pointers as aligned) or 1 one block per output element (``width`` > 1: that many
    per block, a group of lanes each), ``numel`` the elements (0: not launched),
    ``params`` the int params by code name, ``grid``/``block`` the launch configuration
    (``launcher.geometry``: blocks and threads per block on CUDA, ``(numel, 1)`` prange iterations
    on CPU), ``kernel`` the kernel it is an entry point of. Library calls: ``name`` the op,
    ``params`` its keyword arguments. ``frees``: buffers dropped after the step; ``in_place``:
    the buffer (one of them) the kernel's output overwrites (``KernelLaunch.in_place``)."""

    index: int
    kind: str                          # "kernel" or "library"
    name: str
    out: str
    shape: tuple[int, ...]
    params: tuple[tuple[str, Any], ...]
    frees: tuple[str, ...]
    numel: int | None = None
    variant: int | None = None
    narrow: bool | None = None
    extent: int | None = None
    index_bound: int | None = None
    grid: int | None = None
    block: int | None = None
    width: int | None = None
    kernel: str | None = None
    in_place: str = ""


@dataclass(frozen=True)
class LaunchTrace(Rich):
    """``Thunk.launches``: the host trace and, when it passes, every step the call makes."""

    thunk_kind: str
    device: str
    host: HostTrace
    steps: tuple[StepLaunch, ...]
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        lines = [f"LaunchTrace [{self.thunk_kind}, {self.device}] {list(self.host.shapes)}: "
                 + ("ok" if self.ok else f"FAILED: {self.error}")]
        for s in self.steps:
            ps = ", ".join(f"{k}={v!r}" for k, v in s.params)
            how = (f"numel {s.numel} variant {s.variant} {'32' if s.narrow else '64'}-bit "
                   f"grid {s.grid} block {s.block}" if s.kind == "kernel" else "library")
            lines.append(f"  {s.index:>3} {s.name} -> %{s.out} {list(s.shape)} {how} ({ps})"
                         + (f" frees {', '.join(s.frees)}" if s.frees else ""))
        return "\n".join(lines)


class Thunk(Rich):
    kind = "abstract"

    def __init__(self, host: HostProgram, plan: LaunchPlan, launchers: Sequence,
                 in_dtypes: Sequence[torch.dtype], device: str, in_names: Sequence[str],
                 n_user: int | None = None, graphs: int = DEFAULT_CAPACITY):
        """``n_user``: inputs checked per call (the rest are the compiled module's constants,
        placed and made contiguous once at compile time); default all. ``graphs``: the CUDA-graph
        LRU's capacity (``Config.cuda_graphs``; 0: no replay)."""
        self.host = host
        self.plan = plan
        self.launchers = list(launchers)
        self.in_dtypes = tuple(in_dtypes)
        self.device = device
        self.in_names = tuple(in_names)
        self.n_user = len(self.in_dtypes) if n_user is None else n_user
        self._run_host = host.compile()
        self.calls = 0
        cap = graphs if device == "cuda" else 0
        checks = [c for st in plan.steps if isinstance(st, KernelLaunch) for c in st.index_checks]
        self.input_checks = tuple(dict.fromkeys(
            (o.index, reg, what) for o, reg, what in checks + list(plan.index_checks)
            if o.src is Src.INPUT))
        """Index checks on the call's inputs (token ids, say): ``(input position, extent
        register, what)``, run before the call's first launch (with those of values of no
        elements, ``LaunchPlan.index_checks``); those on computed index tensors run before the
        kernel that reads them."""
        self.graphs = GraphCache(self, cap) if cap else None
        """CUDA-graph replay per shape signature (``runtime.graphs``); None on CPU or with
        ``graphs=0``."""

    def _check_args(self, args: tuple) -> list[torch.Tensor]:
        """The call's tensors (``runtime.args.check_inputs``)."""
        return check_inputs(args, self.in_dtypes, self.in_names, self.device, self.n_user)

    def _registers(self, tensors: list[torch.Tensor]) -> list[int]:
        return self._run_host([t.shape for t in tensors])

    def _shape_error(self, shapes: Sequence[Sequence[int]]) -> str | None:
        """Why shapes the host program accepts are refused anyway (a static thunk's shapes)."""
        return None

    def _choose(self, step: KernelLaunch, launcher, r: Sequence[int]
                ) -> tuple[int, VariantLaunch, bool, int]:
        """(variant index, variant, whether its index bound allows a 32-bit entry point,
        reduced extent or 0) of a kernel step with elements."""
        narrow = fits(r[step.index_bound])
        extent = 0 if step.extent is None else r[step.extent]
        v = launcher.choose(r[step.numel], extent, narrow) if step.extent is not None else 0
        return v, step.variants[v], narrow, extent

    def _walk(self, r: Sequence[int]) -> Iterator[tuple]:
        """The one step walker over the launch plan, for registers ``r`` (``__call__`` runs what
        it yields, ``launches`` reports it): per step, in order, ``(index, step, frees, shape,
        launch)`` with ``shape`` the output buffer's, ``launch`` None for a library call, else
        ``(launcher, numel, variant index, variant, narrow, reduced extent)`` (variant 0 when
        ``numel`` is 0: nothing is launched)."""
        bufs = self.plan.buffers
        kernels = iter(self.launchers)     # one launcher per kernel step, in plan order
        for i, (step, frees) in enumerate(zip(self.plan.steps, self.plan.frees)):
            shape = [r[k] for k in bufs[step.out].shape_regs]
            if isinstance(step, LibraryCall):
                yield i, step, frees, shape, None
                continue
            launcher = next(kernels)
            n = r[step.numel]
            choice = self._choose(step, launcher, r) if n else (0, step.variants[0], False, 0)
            yield i, step, frees, shape, (launcher, n, *choice)

    def launches(self, shapes: Sequence[Sequence[int]]) -> LaunchTrace:
        """What a call with input ``shapes`` (one per input, constants included) does, decided as
        ``__call__`` decides it (the same walker); nothing is allocated or launched. Never
        raises: a shape the call refuses gives ``error`` (the ``ShapeMismatch`` message) and no
        steps."""
        trace = self.host.trace(shapes)
        error = trace.error or self._shape_error(trace.shapes)
        if error is not None:
            return LaunchTrace(self.kind, self.device, trace, (), error)
        r, plan, out = trace.registers, self.plan, []
        for i, step, frees, shape, launch in self._walk(r):
            common = dict(index=i, out=plan.buffers[step.out].value, shape=tuple(shape),
                          frees=tuple(plan.buffers[j].value for j in frees))
            if launch is not None and step.in_place is not None:
                common["in_place"] = plan.buffers[step.in_place].value
            if launch is None:
                out.append(StepLaunch(kind="library", name=step.op.name,
                                      params=tuple(step.kwargs(r).items()), **common))
                continue
            launcher, n, v, var, narrow, extent = launch
            e = launcher.pick(v, n, narrow, extent=extent)
            grid, block = launcher.geometry(e, n)
            out.append(StepLaunch(kind="kernel", name=var.name + e.suffix,
                                  params=tuple(zip(var.param_names, (r[p] for p in var.params))),
                                  numel=n, variant=v, narrow=e.narrow,
                                  index_bound=r[step.index_bound],
                                  extent=None if step.extent is None else r[step.extent],
                                  grid=grid, block=block, width=e.per,
                                  kernel=step.variants[0].name, **common))
        return LaunchTrace(self.kind, self.device, trace, tuple(out), None)

    def __call__(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        tensors = self._check_args(args)
        r = self._registers(tensors)
        out = self._run(tensors, r) if self.graphs is None else self.graphs(tensors, r)
        self.calls += 1
        return out

    def _run(self, tensors: list[torch.Tensor], r: Sequence[int], checks: bool = True,
             at: list[int] | None = None) -> tuple[torch.Tensor, ...]:
        """Plain launches of the plan for checked ``tensors`` and registers ``r``. ``checks``:
        run the index checks (off while a CUDA graph is captured: ``runtime.graphs``); ``at``
        collects the index of each step begun (a failed capture names its step)."""
        dev = tensors[0].device if tensors else torch.device(self.device)
        plan = self.plan
        bufs: list[torch.Tensor | None] = [None] * len(plan.buffers)

        def get(o: Operand) -> torch.Tensor:
            if o.src is Src.INPUT:
                return tensors[o.index]
            t = bufs[o.index]
            if t is None:   # literally zero-size: no step fills it
                b = plan.buffers[o.index]
                t = bufs[o.index] = torch.empty([r[k] for k in b.shape_regs], dtype=b.dtype,
                                                device=dev)
            return t

        if checks:
            check_indices([(tensors[i], r[reg], what) for i, reg, what in self.input_checks])
        for i, step, frees, shape, launch in self._walk(r):
            if at is not None:
                at.append(i)
            if launch is None:
                bufs[step.out] = _library(step, [get(o) for o, _ in step.operands], r, shape)
            else:
                launcher, n, v, var, narrow, extent = launch
                for o, reg, what in step.index_checks if checks else ():
                    if o.src is not Src.INPUT:   # inputs: checked above
                        check_index(get(o), r[reg], what)
                if step.in_place is None:
                    out = torch.empty(shape, dtype=plan.buffers[step.out].dtype, device=dev)
                else:   # that operand dies here: the kernel overwrites it
                    out = get(Operand(Src.BUFFER, step.in_place)).view(shape)
                bufs[step.out] = out
                if n:
                    ins = [get(o) for o in var.operands]
                    launcher(launcher.pick(v, n, narrow, out, ins, extent), n, out, ins,
                             [r[p] for p in var.params])
            for j in frees:
                bufs[j] = None
        return tuple(get(o) for o in plan.outputs)

    def __repr__(self) -> str:
        n_lib = len(self.plan.steps) - len(self.launchers)
        return (f"{type(self).__name__}({len(self.launchers)} kernels, {n_lib} library calls, "
                f"{self.device}, inputs {list(self.in_names[:4])}"
                f"{f' + {len(self.in_names) - 4} more' if len(self.in_names) > 4 else ''}, "
                f"{len(self.host.instrs)} host instructions)")


def _library(step: LibraryCall, operands: list[torch.Tensor], r: list[int], shape: list[int]
             ) -> torch.Tensor:
    """Run a library call on its operands (views applied) and check the result's shape against
    the host program's."""
    ins = []
    for t, (_, views) in zip(operands, step.operands):
        for view in views:
            t = view.apply(t, r)
        ins.append(t)
    out = step.op.reference(*ins, **step.kwargs(r))
    if list(out.shape) != shape:   # pragma: no cover - a bug in an op's shape rule
        raise RuntimeError(f"{step.op.name} returned shape {list(out.shape)}, the host program "
                           f"computed {shape}")
    return out if out.is_contiguous() else out.contiguous()


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
            raise ShapeMismatch(self._shape_error([tuple(t.shape) for t in tensors]))
        return self._fixed

    def _shape_error(self, shapes):
        shapes = tuple(tuple(s) for s in shapes)
        return None if shapes == self.shapes else f"static thunk compiled for {self.shapes}"
