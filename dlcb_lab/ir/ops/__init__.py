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



class OpSet:
    """Every registered op as an attribute (``Ops.add`` is ``OPS["add"]``, looked up on use): code
    names ops by these constants, never by strings; ``OpDef.name`` is for display and
    serialization (``tests/ops/test_registry.py`` checks every ``Ops.<name>`` in the sources)."""

    def __init__(self, ops: dict[str, OpDef]):
        object.__setattr__(self, "_ops", ops)

    def __getattr__(self, name: str) -> OpDef:
        try:
            return self._ops[name]
        except KeyError:
            raise AttributeError(f"no IR op {name!r}") from None

    def __dir__(self) -> list[str]:
        return sorted(self._ops)


Ops = OpSet(OPS)

__all__ = ["OPS", "Ops", "Coords", "Guard", "Guarded", "OpDef", "OpKind", "Scalar", "Window",
           "check_backend", "delinearize", "in_bounds", "infer_dtypes", "is_scalar",
           "linear_index", "op_def",
           "register", "data_and_index", "broadcast_coords", "broadcast_dims", "REDUCTIONS", "Combine", "Reduction",
           "pool_extent", "reduced_extents", "ROW_KINDS", "RowKind"]
