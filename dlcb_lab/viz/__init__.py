"""The notebook layer: renderings of every stage object (HTML, SVG via graphviz, LaTeX via sympy),
the solver stepper (ipywidgets) and the pipeline report. Imported lazily by ``dlcb_lab.display``."""
