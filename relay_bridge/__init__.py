"""Lowering of ODLA computations to Relax, TVM's graph IR.

The ODLA layer hands operands as opaque handles (Relax expressions) and plain attributes;
this package knows nothing of devices, targets or files.
"""

# First: importing toolchain loads TVM with torch hidden (toolchain.load_tvm).
from toolchain.relax_ir import computed_constant, constant_view, op_names

from .custom_ops import register_custom_op
from .errors import (REFUSED_DATA, DivisionByZero, DivisionOverflow, IndexOutOfRange,
                     LoweringError, ShapeMismatch, ValueOutOfRange)
from .graph import DYNAMIC_DIM, GraphBuilder, constant, dtype_of, shape_of
from .kernels import is_check_call
from .precision import PRECISIONS, reduce_precision
from .registry import register, registered_ops

__all__ = [
    "DYNAMIC_DIM",
    "DivisionByZero",
    "DivisionOverflow",
    "GraphBuilder",
    "IndexOutOfRange",
    "LoweringError",
    "PRECISIONS",
    "REFUSED_DATA",
    "ShapeMismatch",
    "ValueOutOfRange",
    "constant",
    "computed_constant",
    "constant_view",
    "dtype_of",
    "is_check_call",
    "op_names",
    "register",
    "reduce_precision",
    "register_custom_op",
    "registered_ops",
    "shape_of",
]
