"""Lowering of ODLA computations to Relax, TVM's graph IR.

The ODLA layer hands operands as opaque handles (Relax expressions) and plain attributes;
this package knows nothing of devices, targets or files. Importing it loads nothing of TVM:
the run-time checks compiled modules call (checks) are registered with TVM's runtime when it
loads; the lowering itself is imported, with the compiler, at its first use.
"""

import importlib
from typing import TYPE_CHECKING

from toolchain import compiling_attributes, when_tvm_ffi_loads

from .checks import is_check_call, register_checks
from .errors import (REFUSED_DATA, DivisionByZero, DivisionOverflow, IndexOutOfRange,
                     LoweringError, ShapeMismatch, ValueOutOfRange)

when_tvm_ffi_loads(register_checks)

if TYPE_CHECKING:  # the names below, for editors and type checkers (tests/test_rules.py)
    from toolchain.relax_ir import computed_constant, constant_view, op_names

    from .custom_ops import register_custom_op
    from .graph import DYNAMIC_DIM, GraphBuilder, constant, dtype_of, shape_of
    from .integer_products import compute_in_integers
    from .precision import PRECISIONS, reduce_precision
    from .registry import register, registered_ops

# name -> the module defining it, imported (after toolchain.load_compiler) on first use.
_LOWERING = {
    "computed_constant": "toolchain.relax_ir", "constant_view": "toolchain.relax_ir",
    "op_names": "toolchain.relax_ir",
    "register_custom_op": ".custom_ops",
    "DYNAMIC_DIM": ".graph", "GraphBuilder": ".graph", "constant": ".graph",
    "dtype_of": ".graph", "shape_of": ".graph",
    "compute_in_integers": ".integer_products",
    "PRECISIONS": ".precision", "reduce_precision": ".precision",
    "register": ".registry", "registered_ops": ".registry",
}


_lowering = compiling_attributes(__name__, _LOWERING)


def __getattr__(name: str):
    value = _lowering(name)
    importlib.import_module(".graph", __name__)  # registers every emitter
    return value


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
    "compute_in_integers",
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
