"""Dimension expressions, constraints and the fixed-point solver (paper §3)."""

from .bind import BindPlan, Binding, Source, evaluate, plan_binding
from .bounds import BOUNDS_RULES
from .bounds import simplify as simplify_bounded
from .constraints import Constraint, Constraints, Contradiction, Provenance, ShapeError
from .expr import (DIVMOD_RULES, LENIENT, STRICT, Expr, ExprLike, FloorDiv, Ints, Lit, Mod, Prod,
                   Shape, Sum, Var, ZeroDivisor, as_expr, interpret, lit, operands, prod, shape, var)
from .solver import (RULES, DimKind, RuleContext, Solution, Solver, SolverTrace, TraceRecord,
                     kind_of, solve)

__all__ = [
    "Expr", "ExprLike", "FloorDiv", "Lit", "Mod", "Prod", "Shape", "Sum", "Var", "as_expr", "lit",
    "prod", "shape", "var", "Constraint", "Contradiction", "Provenance", "ShapeError", "RULES",
    "DimKind", "Solution", "Solver", "SolverTrace", "TraceRecord", "solve", "simplify_bounded",
    "Constraints", "DIVMOD_RULES", "BOUNDS_RULES", "RuleContext", "kind_of",
    "BindPlan", "Binding", "Source", "evaluate", "plan_binding",
    "interpret", "operands", "Ints", "ZeroDivisor", "STRICT", "LENIENT",
]
