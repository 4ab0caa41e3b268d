"""dlcb_lab: ahead-of-time compilation for dynamic-shape deep learning (DLCB) as a research toolkit.

    import dlcb_lab as dl
    cm = dl.compile(module, example_inputs, dynamic={0: {0: "N"}}, backend="auto")
    y = cm(x)
    cm.pipeline   # .graph, .constraints, .solver_trace, .dims, .kernels, .host_program, .thunks
"""

from .api import CompiledModule, Pipeline, compile
from .dims import Contradiction
from .errors import (DLError, DTypeError, ShapeError, ShapeMismatch, SpecError, UnsupportedOp)

__all__ = ["compile", "CompiledModule", "Pipeline", "DLError", "ShapeError", "Contradiction",
           "ShapeMismatch", "UnsupportedOp", "DTypeError", "SpecError"]
