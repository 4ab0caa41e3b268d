"""Random dimension-expression trees as plain tuples (``("+", a, b)``, ``("//", a, d)``, a
variable name or an int), as the dims tests draw them with hypothesis, and their fold."""

from __future__ import annotations

from typing import Any, Mapping

OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
       "//": lambda x, y: x // y, "%": lambda x, y: x % y}


def fold(t: Any, names: Mapping[str, Any]) -> Any:
    """The tree ``t`` computed with Python's operators over ``names`` (variable name -> value: an
    ``Expr`` builds the expression, an int evaluates it); int leaves stay Python ints, so an
    ``Expr`` tree exercises the reflected operators too."""
    if isinstance(t, int):
        return t
    if isinstance(t, str):
        return names[t]
    op, x, y = t
    return OPS[op](fold(x, names), fold(y, names))
