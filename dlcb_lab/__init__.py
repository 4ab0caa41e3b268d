"""dlcb_lab: ahead-of-time compilation for dynamic-shape deep learning (DLCB) as a research toolkit.

    import dlcb_lab as dl
    cm = dl.compile(module, example_inputs, dynamic={0: {0: "N"}}, backend="auto")
    y = cm(x)     # or cm(x=x): called as the module's forward
    cm.pipeline   # .graph, .constraints, .solver_trace, .dims, .kernels, .host_program, .thunks
    dl.explore(module, example_inputs, dynamic=...)   # every stage in a notebook (cm.report())
    cm.save("m.dlcb"); dl.load("m.dlcb")             # an artifact; no kernel builds on load
"""

from .api import CompiledModule, compile
from .artifact import load
from .dims import Contradiction
from .errors import (ArgumentError, ArtifactError, BuildError, DeviceError, DLError, DTypeError,
                     LayoutError, ShapeError, ShapeMismatch, SpecError, UnsupportedOp)
from .records import Kernel, Pipeline

__all__ = ["compile", "explore", "load", "ArtifactError", "CompiledModule", "Pipeline", "Kernel", "DLError", "ShapeError",
           "Contradiction", "ShapeMismatch", "UnsupportedOp", "DTypeError", "SpecError",
           "ArgumentError", "DeviceError", "LayoutError", "BuildError"]


def __getattr__(name: str):
    if name == "bench":   # the benchmark harness, loaded on first use (the core never imports it)
        import importlib

        return importlib.import_module(".bench", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def explore(model, example_inputs, **compile_kwargs):
    """``compile(model, example_inputs, **compile_kwargs)`` and its report: every stage (graph,
    constraints, solver trace, dims, kernels, host program with the trace of the example call,
    launch plan, passes) as pure-CSS tabs in a notebook, or ``.to_html(path)`` for a standalone
    page. Imports the notebook layer (``dlcb_lab.viz``)."""
    import torch

    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else \
        tuple(example_inputs)
    return compile(model, inputs, **compile_kwargs).report(*inputs)
