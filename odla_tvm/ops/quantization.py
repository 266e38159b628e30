"""ODLA quantization ops (odla_ops_quantization.h). Each adds one op to the current computation."""

from __future__ import annotations

import numpy as np

from ..computation import Value
from ..types import ElementType, OdlaError, Status, numpy_dtype
from ._args import apply, ints


def _target_dtype(op_name: str, target_data_type: ElementType, kind, expected: str) -> str:
    try:
        dtype = numpy_dtype(target_data_type)
    except OdlaError as err:
        raise OdlaError(Status.UNSUPPORTED_DATATYPE, f"{op_name}: {err.message}") from None
    if not np.issubdtype(dtype, kind):
        raise OdlaError(
            Status.UNSUPPORTED_DATATYPE,
            f"{op_name}: target_data_type is {ElementType(target_data_type).name}; expected {expected}",
        )
    return str(dtype)


def quantize(input: Value, scale: Value, zero_point: Value | None, axis: int,
             target_data_type: ElementType, value_id: str | None = None) -> Value:
    """saturate(round(input / scale) + zero_point) in the integer ``target_data_type``,
    rounding halfway cases to even (ONNX's QuantizeLinear). ``scale`` and ``zero_point``
    (None: 0) are scalars, or 1-D with one entry per index of ``axis`` (per-axis)."""
    dtype = _target_dtype("Quantize", target_data_type, np.integer, "an integer type (INT8, UINT8, ...)")
    (axis,) = ints("Quantize", "axis", [axis])
    return apply("Quantize", {"input": input, "scale": scale, "zero_point": zero_point},
                 {"axis": axis, "dtype": dtype}, value_id)


def dequantize(input: Value, scale: Value, zero_point: Value | None, axis: int,
               target_data_type: ElementType, value_id: str | None = None) -> Value:
    """(input - zero_point) * scale in the floating-point ``target_data_type``; ``scale`` and
    ``zero_point`` (None: 0) as for ``quantize``."""
    dtype = _target_dtype("Dequantize", target_data_type, np.floating,
                          "a floating-point type (FLOAT32, ...)")
    (axis,) = ints("Dequantize", "axis", [axis])
    return apply("Dequantize", {"input": input, "scale": scale, "zero_point": zero_point},
                 {"axis": axis, "dtype": dtype}, value_id)
