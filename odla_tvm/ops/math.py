"""ODLA math ops (odla_ops_math.h). Each adds one op to the current computation."""

from __future__ import annotations

import numpy as np

from ..computation import Value
from ..types import OdlaError, Status, ValueType, checked, numpy_dtype
from ._args import apply, constant_ints, ints, invalid, number


def _unary(op_name: str, python_name: str, doc: str):
    def op(input: Value, value_id: str | None = None) -> Value:
        return apply(op_name, {"input": input}, {}, value_id)

    op.__name__ = op.__qualname__ = python_name
    op.__doc__ = doc
    return op


def _binary(op_name: str, python_name: str, doc: str):
    def op(lhs: Value, rhs: Value, value_id: str | None = None) -> Value:
        return apply(op_name, {"lhs": lhs, "rhs": rhs}, {}, value_id)

    op.__name__ = op.__qualname__ = python_name
    op.__doc__ = doc + " Operands broadcast like NumPy and must share an element type."
    return op


abs = _unary("Abs", "abs", "Element-wise absolute value.")
acos = _unary("ACos", "acos", "Element-wise arc cosine.")
acosh = _unary("ACosh", "acosh", "Element-wise inverse hyperbolic cosine.")
asin = _unary("ASin", "asin", "Element-wise arc sine.")
asinh = _unary("ASinh", "asinh", "Element-wise inverse hyperbolic sine.")
atan = _unary("ATan", "atan", "Element-wise arc tangent.")
atanh = _unary("ATanh", "atanh", "Element-wise inverse hyperbolic tangent.")
ceil = _unary("Ceil", "ceil", "Element-wise smallest integral value not below x.")
cos = _unary("Cos", "cos", "Element-wise cosine.")
cosh = _unary("Cosh", "cosh", "Element-wise hyperbolic cosine.")
erf = _unary("Erf", "erf", "Element-wise Gauss error function.")
exp = _unary("Exp", "exp", "Element-wise e**x.")
floor = _unary("Floor", "floor", "Element-wise largest integral value not above x.")
log = _unary("Log", "log", "Element-wise natural logarithm.")
neg = _unary("Neg", "neg", "Element-wise negation.")
not_ = _unary("Not", "not_", "Element-wise logical negation (x == 0): a BOOL result.")
reciprocal = _unary("Reciprocal", "reciprocal", "Element-wise 1 / x.")
round = _unary("Round", "round", "Element-wise nearest integral value, halfway cases away from "
               "zero (as ODLA specifies; see round_half_to_even for ONNX's Round).")
round_half_to_even = _unary(
    "RoundHalfToEven", "round_half_to_even",
    "Element-wise nearest integral value, halfway cases to even (ONNX's Round). An odla-tvm "
    "extension: ODLA's Round rounds halfway cases away from zero.")
rsqrt = _unary("Rsqrt", "rsqrt", "Element-wise 1 / sqrt(x).")
sign = _unary("Sign", "sign", "Element-wise -1, 0 or 1, in the input's element type.")
sin = _unary("Sin", "sin", "Element-wise sine.")
sinh = _unary("Sinh", "sinh", "Element-wise hyperbolic sine.")
sqrt = _unary("Sqrt", "sqrt", "Element-wise square root.")
tan = _unary("Tan", "tan", "Element-wise tangent.")
tanh = _unary("Tanh", "tanh", "Element-wise hyperbolic tangent.")
is_nan = _unary("IsNaN", "is_nan", "Element-wise x is NaN: a BOOL result.")

add = _binary("Add", "add", "lhs + rhs.")
sub = _binary("Sub", "sub", "lhs - rhs.")
mul = _binary("Mul", "mul", "lhs * rhs.")
div = _binary("Div", "div", "lhs / rhs (integers: truncated toward zero, as in C).")
pow = _binary("Pow", "pow", "lhs ** rhs (integers: computed in float64 and truncated, as "
              "onnxruntime does).")
max = _binary("Max", "max", "Element-wise maximum.")
min = _binary("Min", "min", "Element-wise minimum.")
squared_difference = _binary("SquaredDifference", "squared_difference", "(lhs - rhs) ** 2.")
equal = _binary("Equal", "equal", "lhs == rhs: a BOOL result.")
not_equal = _binary("NotEqual", "not_equal", "lhs != rhs: a BOOL result.")
greater = _binary("Greater", "greater", "lhs > rhs: a BOOL result.")
greater_or_equal = _binary("GreaterOrEqual", "greater_or_equal", "lhs >= rhs: a BOOL result.")
less = _binary("Less", "less", "lhs < rhs: a BOOL result.")
less_or_equal = _binary("LessOrEqual", "less_or_equal", "lhs <= rhs: a BOOL result.")
and_ = _binary("And", "and_", "Logical and (non-zero is true): a BOOL result.")
or_ = _binary("Or", "or_", "Logical or (non-zero is true): a BOOL result.")
xor = _binary("Xor", "xor", "Logical exclusive or (non-zero is true): a BOOL result.")


def mod(lhs: Value, rhs: Value, fmod: int, value_id: str | None = None) -> Value:
    """Element-wise remainder: with ``fmod`` non-zero C's fmod (the sign of lhs, ONNX fmod=1),
    else the sign of rhs (Python's %, ONNX fmod=0)."""
    return apply("Mod", {"lhs": lhs, "rhs": rhs}, {"fmod": bool(fmod)}, value_id)


def shift(input: Value, shift_amount: Value, is_left_shift: bool,
          value_id: str | None = None) -> Value:
    """Element-wise bit shift of an integer value by ``shift_amount`` bits (right shifts of
    signed values fill with the sign bit). An amount that is negative or at least the bit
    width leaves only the fill: -1 for a right shift of a negative value, else 0."""
    return apply("Shift", {"input": input, "shift_amount": shift_amount},
                 {"left": bool(is_left_shift)}, value_id)


def is_inf(input: Value, detect_pos: bool, detect_neg: bool, value_id: str | None = None) -> Value:
    """Element-wise x is +inf (when ``detect_pos``) or -inf (when ``detect_neg``): a BOOL result."""
    return apply("IsInf", {"input": input},
                 {"detect_pos": bool(detect_pos), "detect_neg": bool(detect_neg)}, value_id)


def mean(inputs, value_id: str | None = None) -> Value:
    """Element-wise mean of ``inputs`` (broadcasting like NumPy, one element type)."""
    return apply("Mean", {}, {}, value_id, variadic=tuple(inputs))


def select(condition: Value, a: Value, b: Value, output_dims=None,
           value_id: str | None = None) -> Value:
    """Where ``condition`` (non-zero is true) then ``a`` else ``b``, broadcasting all three."""
    return apply("Select", {"condition": condition, "a": a, "b": b}, {}, value_id, output_dims)


def cum_sum(input: Value, axis, exclusion: bool, reverse: bool,
            value_id: str | None = None) -> Value:
    """Running sums along ``axis`` (a constant value or an int); ``exclusion`` leaves each
    element out of its own sum, ``reverse`` sums from the end."""
    (axis,) = constant_ints("CumSum", "axis", axis)
    return apply("CumSum", {"input": input},
                 {"axis": axis, "exclusive": bool(exclusion), "reverse": bool(reverse)}, value_id)


def det(input: Value, output_shape=None, value_id: str | None = None) -> Value:
    """Determinants of the square matrices in the last two dims (batch dims kept)."""
    return apply("Det", {"input": input}, {}, value_id, output_shape)


def inverse(input: Value, value_id: str | None = None) -> Value:
    """Inverses of the square matrices in the last two dims."""
    return apply("Inverse", {"input": input}, {}, value_id)


def einsum(inputs, equation: str, output_dims=None, value_id: str | None = None) -> Value:
    """Einstein summation of ``inputs`` by ``equation`` (NumPy's notation, "..." included)."""
    if not isinstance(equation, str) or not equation:
        raise invalid("Einsum", f"equation is {equation!r}; expected a string like 'ij,jk->ik'")
    return apply("Einsum", {}, {"equation": equation}, value_id, output_dims,
                 variadic=tuple(inputs))


def _arg_reduce(op_name: str, python_name: str, doc: str):
    def op(input: Value, axis: int, keep_dims: bool, return_last_index: bool,
           output_value_type: ValueType, value_id: str | None = None) -> Value:
        checked(output_value_type, ValueType, f"{op_name}: output_value_type",
                "a ValueType with an integer element type")
        dtype = numpy_dtype(output_value_type.element_type)
        if not np.issubdtype(dtype, np.integer):
            raise OdlaError(
                Status.UNSUPPORTED_DATATYPE,
                f"{op_name}: output_value_type is {output_value_type}; expected an integer "
                "element type",
            )
        (axis,) = ints(op_name, "axis", [axis])
        attrs = {"axis": axis, "keep_dims": bool(keep_dims),
                 "last_index": bool(return_last_index), "dtype": str(dtype)}
        # An undefined (empty) shape in output_value_type leaves the result's shape unchecked.
        output_dims = output_value_type.shape if len(output_value_type.shape) else None
        return apply(op_name, {"input": input}, attrs, value_id, output_dims)

    op.__name__ = op.__qualname__ = python_name
    op.__doc__ = doc
    return op


arg_max = _arg_reduce("ArgMax", "arg_max", "Indices of the largest elements along ``axis``; "
                      "ties give the first index, or the last with ``return_last_index``.")
arg_min = _arg_reduce("ArgMin", "arg_min", "Indices of the smallest elements along ``axis``; "
                      "ties give the first index, or the last with ``return_last_index``.")


def clamp(input: Value, lo: float, hi: float, value_id: str | None = None) -> Value:
    """min(max(input, lo), hi)."""
    attrs = {"lo": number("Clamp", "lo", lo), "hi": number("Clamp", "hi", hi)}
    return apply("Clamp", {"input": input}, attrs, value_id)


def gemm(A: Value, A_transpose: bool, B: Value, B_transpose: bool, alpha: float, beta: float,
         C: Value | None = None, output_dims=None, value_id: str | None = None) -> Value:
    """alpha * op(A) @ op(B) + beta * C, op transposing where asked; C broadcasts."""
    attrs = dict(a_transpose=bool(A_transpose), b_transpose=bool(B_transpose),
                 alpha=number("Gemm", "alpha", alpha), beta=number("Gemm", "beta", beta))
    return apply("Gemm", {"A": A, "B": B, "C": C}, attrs, value_id, output_dims)


def batch_mat_mul(A: Value, A_transpose: bool, B: Value, B_transpose: bool, output_dims=None,
                  value_id: str | None = None) -> Value:
    """Matrix product over the last two dims, batch dims broadcasting."""
    attrs = dict(a_transpose=bool(A_transpose), b_transpose=bool(B_transpose))
    return apply("BatchMatMul", {"A": A, "B": B}, attrs, value_id, output_dims)


def _reduce_attrs(op_name: str, num_of_axes: int, axes, keep_dims: bool) -> dict:
    axes = ints(op_name, "axes", axes, 0)
    if int(num_of_axes) != len(axes):
        raise invalid(op_name, f"num_of_axes is {num_of_axes}; axes {axes} has {len(axes)}")
    return {"axes": axes, "keep_dims": bool(keep_dims)}


def _reduce(op_name: str, python_name: str, doc: str):
    def op(input: Value, num_of_axes: int, axes, keep_dims: bool, output_dims=None,
           value_id: str | None = None) -> Value:
        return apply(op_name, {"input": input}, _reduce_attrs(op_name, num_of_axes, axes, keep_dims),
                     value_id, output_dims)

    op.__name__ = op.__qualname__ = python_name
    op.__doc__ = doc + " Empty ``axes`` reduce over every axis."
    return op


reduce_log_sum = _reduce("ReduceLogSum", "reduce_log_sum", "log of the sum over ``axes``.")
reduce_log_sum_exp = _reduce("ReduceLogSumExp", "reduce_log_sum_exp",
                             "log of the sum of exp over ``axes`` (computed stably).")
reduce_max = _reduce("ReduceMax", "reduce_max", "Maximum over ``axes``.")
reduce_mean = _reduce("ReduceMean", "reduce_mean", "Mean over ``axes``.")
reduce_min = _reduce("ReduceMin", "reduce_min", "Minimum over ``axes``.")
reduce_prod = _reduce("ReduceProd", "reduce_prod", "Product over ``axes``.")
reduce_sum = _reduce("ReduceSum", "reduce_sum", "Sum over ``axes``.")
reduce_sum_square = _reduce("ReduceSumSquare", "reduce_sum_square", "Sum of squares over ``axes``.")


def _norm_reduce(op_name: str, python_name: str, doc: str):
    def op(input: Value, num_of_axes: int, axes, keep_dims: bool, epsilon: float,
           output_dims=None, value_id: str | None = None) -> Value:
        attrs = _reduce_attrs(op_name, num_of_axes, axes, keep_dims)
        attrs["epsilon"] = number(op_name, "epsilon", epsilon)
        return apply(op_name, {"input": input}, attrs, value_id, output_dims)

    op.__name__ = op.__qualname__ = python_name
    op.__doc__ = doc + " ``epsilon`` is added as in oneDNN's norm_lp_sum; 0 gives ONNX's norm."
    return op


reduce_l1 = _norm_reduce("ReduceL1", "reduce_l1", "Sum of absolute values over ``axes`` + epsilon.")
reduce_l2 = _norm_reduce("ReduceL2", "reduce_l2", "sqrt(sum of squares over ``axes`` + epsilon).")
