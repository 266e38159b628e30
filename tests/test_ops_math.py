"""The ODLA math ops beyond the foundation set, compiled for the host CPU, against NumPy
references written here on several shapes, attributes and element types. Each case also
checks that the value type ODLA reports when the op is created is the result's."""

from __future__ import annotations

import math

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import OdlaError, Status
from odla_tvm import ValueType as VT

try:
    from .test_ops import BINARY_CASES, F32, I32, I64, case, check, data, positive, run_op
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from test_ops import BINARY_CASES, F32, I32, I64, case, check, data, positive, run_op

F64 = np.float64


def in_float64(fn):
    """A reference computed in float64 and returned in the input's dtype."""
    return lambda x: np.asarray(fn(x.astype(F64))).astype(x.dtype)


def round_half_away(x):
    return (np.sign(x) * np.floor(np.abs(x.astype(F64)) + 0.5)).astype(x.dtype)


_erf = np.vectorize(math.erf, otypes=[F64])

# name: (odla op, reference, input data (shape, dtype) -> array)
UNARY = {
    "acos": (odla.acos, in_float64(np.arccos), lambda s, t: np.tanh(data(s, t, 1)).astype(t)),
    "acosh": (odla.acosh, in_float64(np.arccosh), lambda s, t: (1 + positive(s, 1)).astype(t)),
    "asin": (odla.asin, in_float64(np.arcsin), lambda s, t: np.tanh(data(s, t, 1)).astype(t)),
    "asinh": (odla.asinh, in_float64(np.arcsinh), lambda s, t: data(s, t, 1)),
    "atan": (odla.atan, in_float64(np.arctan), lambda s, t: data(s, t, 1) * 3),
    "atanh": (odla.atanh, in_float64(np.arctanh), lambda s, t: np.tanh(data(s, t, 1)).astype(t)),
    "ceil": (odla.ceil, np.ceil, lambda s, t: data(s, t, 1) * 3),
    "cos": (odla.cos, in_float64(np.cos), lambda s, t: data(s, t, 1) * 3),
    "cosh": (odla.cosh, in_float64(np.cosh), lambda s, t: data(s, t, 1)),
    "erf": (odla.erf, in_float64(_erf), lambda s, t: data(s, t, 1)),
    "floor": (odla.floor, np.floor, lambda s, t: data(s, t, 1) * 3),
    "reciprocal": (odla.reciprocal, in_float64(np.reciprocal), lambda s, t: positive(s, 1).astype(t)),
    "round": (odla.round, round_half_away, lambda s, t: (np.round(data(s, t, 1) * 6) / 2).astype(t)),
    "round_half_to_even": (odla.round_half_to_even, np.round,
                           lambda s, t: (np.round(data(s, t, 1) * 6) / 2).astype(t)),
    "rsqrt": (odla.rsqrt, in_float64(lambda x: 1 / np.sqrt(x)), lambda s, t: positive(s, 1).astype(t)),
    "sign": (odla.sign, np.sign, lambda s, t: np.where(data(s, t, 2) > 0.5, 0, data(s, t, 1)).astype(t)),
    "sin": (odla.sin, in_float64(np.sin), lambda s, t: data(s, t, 1) * 3),
    "sinh": (odla.sinh, in_float64(np.sinh), lambda s, t: data(s, t, 1)),
    "tan": (odla.tan, in_float64(np.tan), lambda s, t: data(s, t, 1)),
    "is_nan": (odla.is_nan, np.isnan,
               lambda s, t: np.where(data(s, t, 2) > 0.5, np.nan, data(s, t, 1)).astype(t)),
    "not_": (odla.not_, np.logical_not, lambda s, t: np.where(data(s, t, 2) > 0.5, 0, data(s, t, 1)).astype(t)),
}


@pytest.mark.parametrize("shape", [case("2x3x4", (2, 3, 4)), case("17", (17,)), case("scalar", ())])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32(name, shape):
    op, reference, make = UNARY[name]
    x = make(shape, F32)
    check(run_op(op, {"x": x}), reference(x), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", ["acos", "erf", "round", "sinh", "rsqrt"])
def test_unary_float64(name):
    op, reference, make = UNARY[name]
    x = make((3, 5), F64)
    check(run_op(op, {"x": x}), reference(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [I32, I64], ids=["int32", "int64"])
@pytest.mark.parametrize("name", ["ceil", "floor", "round", "round_half_to_even", "sign", "not_",
                                  "is_nan"])
def test_unary_int(name, dtype):
    op, reference, _ = UNARY[name]
    x = data((3, 5), dtype, seed=1, low=-3, high=4)
    check(run_op(op, {"x": x}), reference(x))


def test_round_halfway_cases():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 0.49999997, -3.0], F32)
    check(run_op(odla.round, {"x": x}), np.array([1, 2, 3, -1, -2, -3, 2, 0, -3], F32))
    check(run_op(odla.round_half_to_even, {"x": x}), np.array([0, 2, 2, -0, -2, -2, 2, 0, -3], F32))


def test_not_bool():
    x = data((4, 3), np.bool_, seed=1)
    check(run_op(odla.not_, {"x": x}), ~x)


# -- element-wise binary ops -----------------------------------------------------------------

def squared_difference(a, b):
    acc = F64 if np.issubdtype(a.dtype, np.floating) else I64
    return ((a.astype(acc) - b) ** 2).astype(a.dtype)


def logical(fn):
    return lambda a, b: fn(a != 0, b != 0)


BINARY = {
    "equal": (odla.equal, np.equal),
    "not_equal": (odla.not_equal, np.not_equal),
    "greater": (odla.greater, np.greater),
    "greater_or_equal": (odla.greater_or_equal, np.greater_equal),
    "less": (odla.less, np.less),
    "less_or_equal": (odla.less_or_equal, np.less_equal),
    "and_": (odla.and_, logical(np.logical_and)),
    "or_": (odla.or_, logical(np.logical_or)),
    "xor": (odla.xor, logical(np.logical_xor)),
    "squared_difference": (odla.squared_difference, squared_difference),
}
@pytest.mark.parametrize("dtype, lhs_shape, rhs_shape", BINARY_CASES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype, lhs_shape, rhs_shape):
    op, reference = BINARY[name]
    # Few distinct values, so that equal elements (and zeros) occur.
    lhs = data(lhs_shape, I32, seed=1, low=-2, high=3).astype(dtype)
    rhs = data(rhs_shape, I32, seed=2, low=-2, high=3).astype(dtype)
    check(run_op(op, {"lhs": lhs, "rhs": rhs}), reference(lhs, rhs))


@pytest.mark.parametrize("name", ["and_", "or_", "xor", "equal"])
def test_binary_bool(name):
    op, reference = BINARY[name]
    lhs, rhs = data((3, 4), np.bool_, seed=1), data((4,), np.bool_, seed=2)
    check(run_op(op, {"lhs": lhs, "rhs": rhs}), reference(lhs, rhs))


@pytest.mark.parametrize("fmod", [0, 1], ids=["sign_of_divisor", "fmod"])
@pytest.mark.parametrize("dtype", [F32, I32, I64], ids=["float32", "int32", "int64"])
def test_mod(dtype, fmod):
    lhs = (data((4, 5), dtype, seed=1) * (3 if dtype is F32 else 1)).astype(dtype)
    rhs = data((5,), dtype, seed=2, low=1, high=5)
    rhs = np.where(np.arange(5) % 2 == 0, rhs, -rhs).astype(dtype)
    if dtype is F32:
        rhs = np.where(np.abs(rhs) < 0.5, 1.5, rhs).astype(F32)
    expected = np.fmod(lhs, rhs) if fmod else np.mod(lhs, rhs)
    check(run_op(lambda a, b: odla.mod(a, b, fmod), {"lhs": lhs, "rhs": rhs}), expected)


@pytest.mark.parametrize("dtype", [np.uint8, I32, np.uint32], ids=["uint8", "int32", "uint32"])
@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
def test_shift(left, dtype):
    x = data((3, 4), dtype, seed=1, low=0, high=120)
    amount = data((4,), dtype, seed=2, low=0, high=7)
    expected = np.left_shift(x, amount) if left else np.right_shift(x, amount)
    check(run_op(lambda x, s: odla.shift(x, s, left), {"x": x, "s": amount}), expected.astype(dtype))


@pytest.mark.parametrize("detect_pos, detect_neg", [(True, True), (True, False), (False, True),
                                                    (False, False)])
def test_is_inf(detect_pos, detect_neg):
    x = np.array([[np.inf, -np.inf, 0.0], [np.nan, 3.5, -np.inf]], F32)
    expected = (np.isposinf(x) & detect_pos) | (np.isneginf(x) & detect_neg)
    check(run_op(lambda x: odla.is_inf(x, detect_pos, detect_neg), {"x": x}), expected)


def test_is_inf_int():
    x = data((2, 3), I32, seed=1)
    check(run_op(lambda x: odla.is_inf(x, True, True), {"x": x}), np.zeros((2, 3), bool))


@pytest.mark.parametrize("shapes, dtype", [
    case("one_input", [(2, 3)], F32),
    case("two_same_shape", [(2, 3), (2, 3)], F32),
    case("three_broadcast", [(2, 1, 4), (3, 1), (4,)], F32),
    case("float64", [(5,), (5,)], F64),
])
def test_mean(shapes, dtype):
    inputs = {f"x{i}": data(s, dtype, seed=i) for i, s in enumerate(shapes)}
    total = sum(x.astype(F64) for x in inputs.values())
    check(run_op(lambda *xs: odla.mean(xs), inputs), (total / len(shapes)).astype(dtype))


@pytest.mark.parametrize("cond_shape, a_shape, b_shape, cond_dtype, dtype", [
    case("same_shape", (3, 4), (3, 4), (3, 4), np.bool_, F32),
    case("broadcast_all", (3, 1), (1, 4), (4,), np.bool_, F32),
    case("int_condition", (2, 3), (2, 3), (), I32, I64),
    case("float_condition", (5,), (5,), (5,), F32, I32),
])
def test_select(cond_shape, a_shape, b_shape, cond_dtype, dtype):
    condition = data(cond_shape, I32, seed=3, low=0, high=2).astype(cond_dtype)
    a, b = data(a_shape, dtype, seed=1), data(b_shape, dtype, seed=2)
    expected = np.where(condition != 0, a, b)
    check(run_op(odla.select, {"c": condition, "a": a, "b": b}), expected)


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("exclusive, reverse", [(False, False), (True, False), (False, True),
                                                (True, True)])
@pytest.mark.parametrize("dtype", [F32, I32], ids=["float32", "int32"])
def test_cum_sum(dtype, exclusive, reverse, axis):
    x = data((3, 4), dtype, seed=1)
    v = np.flip(x, axis) if reverse else x
    sums = np.cumsum(v.astype(F64 if dtype is F32 else I64), axis=axis)
    if exclusive:
        sums = sums - v
    expected = (np.flip(sums, axis) if reverse else sums).astype(dtype)
    check(run_op(lambda x: odla.cum_sum(x, axis, exclusive, reverse), {"x": x}), expected,
          rtol=1e-5, atol=1e-5)


def test_cum_sum_axis_as_constant_value():
    x = data((2, 5), seed=1)
    axis = np.array(1, I64)
    result = run_op(lambda x, axis: odla.cum_sum(x, axis, False, False), {"x": x, "axis": axis},
                    constants=("axis",))
    check(result, np.cumsum(x.astype(F64), axis=1).astype(F32))


# -- linear algebra ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape, dtype", [
    case("3x3", (3, 3), F32), case("batch_2x4x4", (2, 4, 4), F32), case("1x1", (1, 1), F32),
    case("batch_2x1x3x3_float64", (2, 1, 3, 3), F64),
])
def test_det(shape, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(odla.det, {"x": x}), np.linalg.det(x.astype(F64)).astype(dtype),
          rtol=1e-4, atol=1e-5)


def test_det_singular_and_pivoting():
    x = np.array([[[1, 2], [2, 4]], [[0, 1], [1, 0]], [[0, 0], [0, 0]]], F32)
    check(run_op(odla.det, {"x": x}), np.array([0, -1, 0], F32))


@pytest.mark.parametrize("shape, dtype", [
    case("3x3", (3, 3), F32), case("batch_2x4x4", (2, 4, 4), F32), case("1x1", (1, 1), F32),
    case("float64", (2, 5, 5), F64),
])
def test_inverse(shape, dtype):
    x = data(shape, dtype, seed=1) + 2 * np.eye(shape[-1], dtype=dtype)
    check(run_op(odla.inverse, {"x": x}), np.linalg.inv(x.astype(F64)).astype(dtype),
          rtol=1e-4, atol=1e-4)


def test_inverse_needs_pivoting():
    x = np.array([[0, 1, 2], [1, 0, 3], [4, -3, 8]], F32)
    check(run_op(odla.inverse, {"x": x}), np.linalg.inv(x.astype(F64)).astype(F32), atol=1e-5)


@pytest.mark.parametrize("equation, shapes", [
    case("matmul", "ij,jk->ik", [(2, 3), (3, 4)]),
    case("batch_matmul", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    case("transpose", "ij->ji", [(3, 5)]),
    case("diagonal", "ii->i", [(4, 4)]),
    case("trace", "ii", [(3, 3)]),
    case("outer", "i,j->ij", [(3,), (4,)]),
    case("implicit_output", "ij,jk", [(2, 3), (3, 2)]),
    case("ellipsis", "...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]),
    case("three_operands", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
])
def test_einsum(equation, shapes):
    inputs = {f"x{i}": data(s, seed=i) for i, s in enumerate(shapes)}
    expected = np.einsum(equation, *[x.astype(F64) for x in inputs.values()]).astype(F32)
    check(run_op(lambda *xs: odla.einsum(xs, equation), inputs), expected, rtol=1e-4, atol=1e-5)


# -- index of extreme elements ---------------------------------------------------------------

def arg_extreme(x, axis, keep_dims, last_index, largest, dtype):
    v = x if largest else -x.astype(F64 if np.issubdtype(x.dtype, np.floating) else I64)
    flipped = np.flip(v, axis) if last_index else v
    indices = np.argmax(flipped, axis=axis)
    if last_index:
        indices = x.shape[axis] - 1 - indices
    if keep_dims:
        indices = np.expand_dims(indices, axis)
    return indices.astype(dtype)


@pytest.mark.parametrize("axis, keep_dims", [(0, False), (1, True), (-1, False), (2, True)])
@pytest.mark.parametrize("last_index", [False, True], ids=["first", "last"])
@pytest.mark.parametrize("op_name", ["arg_max", "arg_min"])
def test_arg_extreme(op_name, last_index, axis, keep_dims):
    x = data((3, 4, 5), I32, seed=1, low=-2, high=3)  # few values: ties along every axis
    out_type = VT(E.INT32, ())
    op = getattr(odla, op_name)
    expected = arg_extreme(x, axis, keep_dims, last_index, op_name == "arg_max", I32)
    check(run_op(lambda x: op(x, axis, keep_dims, last_index, out_type), {"x": x}), expected)


@pytest.mark.parametrize("out_element_type, dtype", [(E.INT64, I64), (E.INT32, I32)])
def test_arg_max_float_and_output_type(out_element_type, dtype):
    x = data((4, 6), seed=1)
    out_type = VT(out_element_type, (4,))  # a given shape is checked against the result's
    check(run_op(lambda x: odla.arg_max(x, 1, False, False, out_type), {"x": x}),
          np.argmax(x, 1).astype(dtype))


def test_arg_max_refuses_a_float_output_type():
    comp = odla.create_computation()
    try:
        x = odla.create_argument(VT(E.FLOAT32, (3,)))
        with pytest.raises(OdlaError) as err:
            odla.arg_max(x, 0, False, False, VT(E.FLOAT32, ()))
        assert err.value.status == Status.UNSUPPORTED_DATATYPE and "integer" in err.value.message
    finally:
        odla.destroy_computation(comp)


# -- reductions --------------------------------------------------------------------------------

def reduced(fn):
    """A reference reducing over ``axes`` (all when empty) in float64 or int64."""
    def reference(x, axes, keep_dims):
        acc = F64 if np.issubdtype(x.dtype, np.floating) else I64
        axis = tuple(axes) if axes else None
        return np.asarray(fn(x.astype(acc), axis, keep_dims)).astype(x.dtype)

    return reference


def log_sum_exp(v, axis, keep_dims):
    peak = np.max(v, axis=axis, keepdims=True)
    total = np.log(np.sum(np.exp(v - peak), axis=axis, keepdims=True)) + peak
    return total if keep_dims else np.squeeze(total, axis=axis)


REDUCE = {
    "reduce_min": reduced(lambda v, a, k: np.min(v, axis=a, keepdims=k)),
    "reduce_prod": reduced(lambda v, a, k: np.prod(v, axis=a, keepdims=k)),
    "reduce_sum_square": reduced(lambda v, a, k: np.sum(v * v, axis=a, keepdims=k)),
    "reduce_log_sum": reduced(lambda v, a, k: np.log(np.sum(v, axis=a, keepdims=k))),
    "reduce_log_sum_exp": reduced(log_sum_exp),
}
REDUCE_AXES = [
    case("axis1_keep", (1,), True),
    case("axes0_2_drop", (0, 2), False),
    case("all_axes_listed_drop", (0, 1, 2), False),
    case("no_axes_means_all_keep", (), True),
]


@pytest.mark.parametrize("axes, keep_dims", REDUCE_AXES)
@pytest.mark.parametrize("op_name", sorted(REDUCE))
def test_reduce_float(op_name, axes, keep_dims):
    x = positive((3, 4, 5), seed=1, low=0.5, high=1.5) if op_name == "reduce_log_sum" \
        else data((3, 4, 5), seed=1)
    if op_name == "reduce_log_sum_exp":
        x = x * 40  # large enough that exp overflows float32 without the maximum subtracted
    op = getattr(odla, op_name)
    check(run_op(lambda x: op(x, len(axes), axes, keep_dims), {"x": x}),
          REDUCE[op_name](x, axes, keep_dims), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op_name", ["reduce_min", "reduce_prod", "reduce_sum_square"])
def test_reduce_int(op_name):
    x = data((3, 4, 5), I32, seed=1, low=-3, high=4)
    op = getattr(odla, op_name)
    check(run_op(lambda x: op(x, 1, (1,), False), {"x": x}), REDUCE[op_name](x, (1,), False))


@pytest.mark.parametrize("epsilon", [0.0, 0.25])
@pytest.mark.parametrize("axes, keep_dims", REDUCE_AXES)
@pytest.mark.parametrize("op_name", ["reduce_l1", "reduce_l2"])
def test_reduce_norm(op_name, axes, keep_dims, epsilon):
    x = data((3, 4, 5), seed=1)
    axis = tuple(axes) if axes else None
    v = x.astype(F64)
    if op_name == "reduce_l1":
        expected = np.sum(np.abs(v), axis=axis, keepdims=keep_dims) + epsilon
    else:
        expected = np.sqrt(np.sum(v * v, axis=axis, keepdims=keep_dims) + epsilon)
    op = getattr(odla, op_name)
    check(run_op(lambda x: op(x, len(axes), axes, keep_dims, epsilon), {"x": x}),
          np.asarray(expected).astype(F32), rtol=1e-5, atol=1e-5)


def test_reduce_checks_num_of_axes():
    comp = odla.create_computation()
    try:
        x = odla.create_argument(VT(E.FLOAT32, (3, 4)))
        with pytest.raises(OdlaError) as err:
            odla.reduce_l2(x, 2, (1,), False, 0.0)
        assert err.value.status == Status.INVALID_PARAM and "num_of_axes" in err.value.message
    finally:
        odla.destroy_computation(comp)


def test_binary_refuses_mixed_element_types():
    comp = odla.create_computation()
    try:
        a = odla.create_argument(VT(E.FLOAT32, (3,)))
        b = odla.create_argument(VT(E.INT32, (3,)))
        with pytest.raises(OdlaError) as err:
            odla.less(a, b)
        assert "float32, int32" in err.value.message
    finally:
        odla.destroy_computation(comp)
