"""The notebook layer: renderings of every stage object (HTML, SVG via graphviz, LaTeX via sympy),
the solver stepper (a self-contained HTML slider; ipywidgets in a live kernel), the pipeline
report and the named-file dump. The HTML holds up inside JupyterLab's stylesheet and follows light
and dark themes (``style``).

The renderings take the records; the compiler core never imports this package. A record's one
door here is its display hook (``display.Rich``: ``_repr_mimebundle_`` and ``to_html`` import
``viz.render`` on first use). What a record does not display by itself is a function of it here:

- ``stepper(trace)``: an ipywidgets stepper over a ``SolverTrace`` (``solve.stepper``);
- ``dump(pipeline, directory)``: one compile as named files (``files.dump``).
"""

from .files import dump
from .solve import stepper

__all__ = ["dump", "stepper"]
