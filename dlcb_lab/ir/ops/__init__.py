"""The op registry, split by family: ``core`` (``OpDef``, kinds, the dtype rule), ``elementwise``,
``shape`` (coordinate transforms and guarded selections), ``index`` (index-dependent reads), ``normalization`` (row-wise, one kernel each),
``reduction`` (axis reductions and pools), ``library`` (vendor-library ops) and ``eager`` (an ATen op
run by PyTorch: the bridge's fallback). Importing the package registers every op."""

from . import eager, elementwise, index, library, normalization, reduction, shape  # noqa: F401
from .core import (OPS, Coords, Guard, Guarded, OpDef, OpKind, Scalar, Window, check_backend,
                   delinearize, in_bounds, infer_dtypes, is_scalar, linear_index, op_def, register)
from .elementwise import broadcast_coords, broadcast_dims
from .index import data_and_index
from .normalization import ROW_KINDS, RowKind
from .reduction import REDUCTIONS, Combine, Reduction, pool_extent, reduced_extents

__all__ = ["OPS", "Coords", "Guard", "Guarded", "OpDef", "OpKind", "Scalar", "Window",
           "check_backend", "delinearize", "in_bounds", "infer_dtypes", "is_scalar",
           "linear_index", "op_def",
           "register", "data_and_index", "broadcast_coords", "broadcast_dims", "REDUCTIONS", "Combine", "Reduction",
           "pool_extent", "reduced_extents", "ROW_KINDS", "RowKind"]
