"""Lowerings of ODLA's quantization ops (odla_ops_quantization.h)."""

from __future__ import annotations

from tvm import relax, tirx
from tvm.relax import op as R

from ..errors import LoweringError
from ..registry import register
from .common import check_axis, check_integer, is_float


def _quantization_params(emit, x, scale, zero_point, axis, scale_dtype, zero_point_dtype):
    """``scale`` and ``zero_point`` in the dtypes Relax's (de)quantize want, checked to be
    per-tensor (one element) or per-axis (one per index of ``axis``)."""
    if x.ty.ndim:
        check_axis(x, axis)
    if not is_float(scale):
        raise LoweringError(f"scale is {scale.ty.dtype}; expected a floating-point element type")
    size = x.ty.shape.values[axis] if x.ty.ndim else 1
    for name, param in (("scale", scale), ("zero_point", zero_point)):
        if param is None:
            continue
        dims = param.ty.shape.values
        per_tensor = all(isinstance(d, tirx.IntImm) and int(d) == 1 for d in dims)
        per_axis = len(dims) == 1 and (not isinstance(size, tirx.IntImm) or dims[0] == size)
        if not (per_tensor or per_axis):
            raise LoweringError(f"{name} is {param.ty}; expected one element, or a 1-D value "
                                f"with one per index of axis {axis} of {x.ty}")
    if scale.ty.dtype != scale_dtype:
        scale = emit(R.astype(scale, scale_dtype))
    if zero_point is None:
        zero_point = relax.const(0, zero_point_dtype)
    elif zero_point.ty.dtype != zero_point_dtype:
        check_integer(zero_point, "zero_point")
        zero_point = emit(R.astype(zero_point, zero_point_dtype))
    return scale, zero_point


# Relax's quantize takes float16 or float32 data and its dequantize computes in float32, so
# float64 data is quantized, and float64 results dequantized, through float32.
_COMPUTED_AS = {"float64": "float32"}


@register("Quantize")
def quantize(emit, x, scale, zero_point, *, axis, dtype):
    if not is_float(x):
        raise LoweringError(f"input is {x.ty.dtype}; expected a floating-point element type")
    computed_as = _COMPUTED_AS.get(str(x.ty.dtype), str(x.ty.dtype))
    scale, zero_point = _quantization_params(emit, x, scale, zero_point, axis, computed_as, dtype)
    if computed_as != x.ty.dtype:
        x = emit(R.astype(x, computed_as))
    return R.quantize(x, scale, zero_point, axis % x.ty.ndim if x.ty.ndim else 0, dtype)


@register("Dequantize")
def dequantize(emit, x, scale, zero_point, *, axis, dtype):
    check_integer(x, "input")
    scale, zero_point = _quantization_params(emit, x, scale, zero_point, axis, "float32",
                                             str(x.ty.dtype))
    computed_as = _COMPUTED_AS.get(dtype, dtype)
    y = emit(R.dequantize(x, scale, zero_point, axis % x.ty.ndim if x.ty.ndim else 0, computed_as))
    return y if computed_as == dtype else R.astype(y, dtype)
