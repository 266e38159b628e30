"""ODLA Quantize and Dequantize, compiled for the host CPU, against NumPy references written
here: per-tensor and per-axis scales and zero points, int8 and uint8 (and wider) targets,
halfway cases rounded to even, saturation."""

from __future__ import annotations

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import OdlaError, Status
from odla_tvm import ValueType as VT

try:
    from .test_ops import F32, I32, case, check, data, run_op
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from test_ops import F32, I32, case, check, data, run_op

I8, U8, F64, F16 = np.int8, np.uint8, np.float64, np.float16
TARGETS = {I8: E.INT8, U8: E.UINT8, np.int16: E.INT16, I32: E.INT32, F32: E.FLOAT32, F64: E.FLOAT64,
           F16: E.FLOAT16}


def along(param, axis, rank):
    """A per-axis parameter shaped to broadcast along ``axis`` of a rank-``rank`` value."""
    param = np.asarray(param, F64)
    if param.size == 1:
        return param.reshape(())
    shape = [1] * rank
    shape[axis] = -1
    return param.reshape(shape)


def quantize_reference(x, scale, zero_point, axis, dtype):
    zero = 0 if zero_point is None else along(zero_point, axis, x.ndim)
    q = np.round(x.astype(F64) / along(scale, axis, x.ndim)) + zero  # np.round: halves to even
    limits = np.iinfo(dtype)
    return np.clip(q, limits.min, limits.max).astype(dtype)


def dequantize_reference(x, scale, zero_point, axis, dtype):
    zero = 0 if zero_point is None else along(zero_point, axis, x.ndim)
    return ((x.astype(F64) - zero) * along(scale, axis, x.ndim)).astype(dtype)


def halves(shape, seed, dtype=F32):
    """Multiples of 0.25 (ties after dividing by the power-of-two scales used here), some large
    enough to saturate."""
    return (data(shape, I32, seed, low=-1200, high=1200) / 4).astype(dtype)


@pytest.mark.parametrize("x_shape, scale, zero_point, axis, dtype, x_dtype", [
    case("per_tensor_int8", (3, 4), np.array(0.5, F32), np.array(-3, I8), 0, I8, F32),
    case("per_tensor_uint8", (2, 3, 4), np.array(2.0, F32), np.array(128, U8), 1, U8, F32),
    case("no_zero_point", (5, 2), np.array(0.25, F32), None, 0, I8, F32),
    case("one_element_1d_params", (4, 3), np.array([0.5], F32), np.array([10], U8), 1, U8, F32),
    case("per_axis0", (3, 4), np.array([0.5, 1.0, 4.0], F32), np.array([0, 5, -7], I8), 0, I8, F32),
    case("per_axis1_uint8", (2, 3, 2), np.array([0.25, 2.0, 1.0], F32),
         np.array([0, 100, 255], U8), 1, U8, F32),
    case("per_axis_last_negative", (2, 4), np.array([1, 2, 4, 8], F32), np.array([1, 2, 3, 4], I8),
         -1, I8, F32),
    case("int16_target", (3, 3), np.array(0.125, F32), np.array(1000, np.int16), 0, np.int16, F32),
    case("int32_zero_point_for_int8", (3, 3), np.array(0.5, F32), np.array(2, I32), 0, I8, F32),
    case("float64_input", (3, 2), np.array(0.5, F64), np.array(-1, I8), 0, I8, F64),
    case("float16_input", (4,), np.array(0.5, F16), np.array(3, U8), 0, U8, F16),
])
def test_quantize(x_shape, scale, zero_point, axis, dtype, x_dtype):
    x = halves(x_shape, seed=1, dtype=x_dtype)
    inputs = {"x": x, "scale": scale}
    if zero_point is not None:
        inputs["zero_point"] = zero_point
    expected = quantize_reference(x, scale, zero_point, axis, dtype)
    result = run_op(lambda x, s, z=None: odla.quantize(x, s, z, axis, TARGETS[dtype]), inputs)
    check(result, expected)


def test_quantize_rounds_halfway_cases_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300.0, -300.0], F32)
    result = run_op(lambda x, s: odla.quantize(x, s, None, 0, E.INT8),
                    {"x": x, "s": np.array(1.0, F32)})
    check(result, np.array([0, 2, 2, 0, -2, -2, 127, -128], I8))


@pytest.mark.parametrize("x_dtype, scale, zero_point, axis, dtype", [
    case("int8_per_tensor", I8, np.array(0.5, F32), np.array(-3, I8), 0, F32),
    case("uint8_per_axis", U8, np.array([0.5, 0.25, 2.0], F32), np.array([128, 0, 7], U8), 1, F32),
    case("int32_no_zero_point", I32, np.array(0.125, F32), None, 0, F32),
    case("int8_to_float64", I8, np.array([1.5, 0.5], F32), np.array([1, -1], I8), 0, F64),
    case("uint8_to_float16", U8, np.array(0.25, F32), np.array(100, U8), 0, F16),
])
def test_dequantize(x_dtype, scale, zero_point, axis, dtype):
    x = data((2, 3), x_dtype, seed=1, low=np.iinfo(x_dtype).min // 2 if x_dtype is not U8 else 0,
             high=np.iinfo(x_dtype).max // 2)
    inputs = {"x": x, "scale": scale}
    if zero_point is not None:
        inputs["zero_point"] = zero_point
    expected = dequantize_reference(x, scale, zero_point, axis, dtype)
    result = run_op(lambda x, s, z=None: odla.dequantize(x, s, z, axis, TARGETS[dtype]), inputs)
    check(result, expected, rtol=1e-3 if dtype is F16 else 1e-6)


def test_round_trip_within_half_a_step():
    x = data((4, 5), seed=1)
    scale, zero_point = np.array([0.02, 0.05, 0.1, 0.2], F32), np.array([0, 10, -10, 3], I8)

    def build(x, s, z):
        return odla.dequantize(odla.quantize(x, s, z, 0, E.INT8), s, z, 0, E.FLOAT32)

    out, vtype = run_op(build, {"x": x, "s": scale, "z": zero_point}, constants=("s", "z"))
    assert vtype == VT(E.FLOAT32, (4, 5))
    zero = zero_point[:, None].astype(F64)
    clipped = np.clip(x, (-128 - zero) * scale[:, None], (127 - zero) * scale[:, None])
    assert np.all(np.abs(out - clipped) <= scale[:, None] / 2 + 1e-6)


@pytest.mark.parametrize("op_name, input_type, target, words", [
    case("quantize_to_float", "quantize", E.FLOAT32, E.FLOAT32, "an integer type"),
    case("dequantize_to_int", "dequantize", E.INT8, E.INT8, "a floating-point type"),
])
def test_refuses_target_types(op_name, input_type, target, words):
    comp = odla.create_computation()
    try:
        x = odla.create_argument(VT(input_type, (3,)))
        scale = odla.create_argument(VT(E.FLOAT32, ()))
        with pytest.raises(OdlaError) as err:
            getattr(odla, op_name)(x, scale, None, 0, target)
        assert err.value.status == Status.UNSUPPORTED_DATATYPE and words in err.value.message
    finally:
        odla.destroy_computation(comp)


def test_refuses_a_scale_that_fits_no_axis():
    comp = odla.create_computation()
    try:
        x = odla.create_argument(VT(E.FLOAT32, (3, 4)))
        scale = odla.create_argument(VT(E.FLOAT32, (4,)))
        with pytest.raises(OdlaError) as err:
            odla.quantize(x, scale, None, 0, E.INT8)
        assert err.value.status == Status.INVALID_PARAM and "per index of axis 0" in err.value.message
    finally:
        odla.destroy_computation(comp)
