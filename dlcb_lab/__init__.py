"""dlcb_lab: ahead-of-time compilation for dynamic-shape deep learning (DLCB) as a research toolkit.

    import dlcb_lab as dl
    cm = dl.compile(module, args, kwargs)   # dynamic="auto": the dims the program admits free
    y = cm(x)     # or cm(x=x): called as the module is, returns what it returns
    cm.pipeline   # .graph, .constraints, .solver_trace, .dims, .kernels, .host_program, .thunks
    dl.optimize(module)           # torch.compile through Dynamo, one DLCB compile for all shapes
    dl.explore(module, args)      # every stage in a notebook (cm.report())
    cm.save("m.dlcb"); dl.load("m.dlcb")             # an artifact; no kernel builds on load
    dl.compile(module, args, config={"channels_last": False})   # switches: dl.Config
"""

from .api import Auto, CompiledModule, auto, compile
from .artifact import load
from .config import Config
from .dims import Contradiction
from .errors import (ArgumentError, ArtifactError, BuildError, DeviceError, DLError, DTypeError,
                     LayoutError, ShapeError, ShapeMismatch, SpecError, UnsupportedOp)
from .records import Kernel, Pipeline

__all__ = ["compile", "auto", "Auto", "Config", "optimize", "explore", "load", "ArtifactError", "CompiledModule", "Pipeline", "Kernel", "DLError", "ShapeError",
           "Contradiction", "ShapeMismatch", "UnsupportedOp", "DTypeError", "SpecError",
           "ArgumentError", "DeviceError", "LayoutError", "BuildError"]


def __getattr__(name: str):
    if name == "optimize":   # through Dynamo (torch.compile), loaded on first use
        from .bridge.dynamo import optimize

        return optimize
    if name in ("bench", "viz"):   # the benchmark harness and the notebook layer, loaded on
        import importlib           # first use (the core never imports them)

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def explore(model, args=(), kwargs=None, **compile_kwargs):
    """``compile(model, args, kwargs, **compile_kwargs)`` and its report: every stage (graph,
    constraints, solver trace, dims, kernels, host program with the trace of the example call,
    launch plan, passes) as pure-CSS tabs in a notebook, or ``.to_html(path)`` for a standalone
    page. Imports the notebook layer (``dlcb_lab.viz``)."""
    import torch

    args = (args,) if isinstance(args, torch.Tensor) else tuple(args)
    cm = compile(model, args, kwargs, **compile_kwargs)
    return cm.report(*cm.signature.bind(args, kwargs or {}))
