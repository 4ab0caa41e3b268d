"""dlcb_lab: ahead-of-time compilation for dynamic-shape deep learning (DLCB) as a research toolkit.

    import dlcb_lab as dl
    cm = dl.compile(module, example_inputs, dynamic={0: {0: "N"}}, backend="auto")
    y = cm(x)
    cm.pipeline   # .graph, .constraints, .solver_trace, .dims, .kernels, .host_program, .thunks
    dl.explore(module, example_inputs, dynamic=...)   # every stage in a notebook (cm.report())
"""

from .api import CompiledModule, Pipeline, compile
from .dims import Contradiction
from .errors import (DLError, DTypeError, ShapeError, ShapeMismatch, SpecError, UnsupportedOp)

__all__ = ["compile", "explore", "CompiledModule", "Pipeline", "DLError", "ShapeError",
           "Contradiction", "ShapeMismatch", "UnsupportedOp", "DTypeError", "SpecError"]


def explore(model, example_inputs, **compile_kwargs):
    """``compile(model, example_inputs, **compile_kwargs)`` and its report: every stage (graph,
    constraints, solver trace, dims, kernels, host program with the trace of the example call,
    launch plan, passes) as pure-CSS tabs in a notebook, or ``.to_html(path)`` for a standalone
    page. Imports the notebook layer (``dlcb_lab.viz``)."""
    import torch

    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else \
        tuple(example_inputs)
    return compile(model, inputs, **compile_kwargs).report(*inputs)
