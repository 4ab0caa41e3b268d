"""The notebook layer: renderings of every stage object (HTML, SVG via graphviz, LaTeX via sympy),
the solver stepper (a self-contained HTML slider; ipywidgets in a live kernel) and the pipeline
report. The HTML holds up inside JupyterLab's stylesheet and follows light and dark themes
(``style``). Imported lazily by ``dlcb_lab.display``."""
