"""ODLA math ops (odla_ops_math.h). Each adds one op to the current computation."""

from __future__ import annotations

from ..computation import Value
from ._args import apply, ints, invalid, number


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
exp = _unary("Exp", "exp", "Element-wise e**x.")
log = _unary("Log", "log", "Element-wise natural logarithm.")
neg = _unary("Neg", "neg", "Element-wise negation.")
sqrt = _unary("Sqrt", "sqrt", "Element-wise square root.")
tanh = _unary("Tanh", "tanh", "Element-wise hyperbolic tangent.")

add = _binary("Add", "add", "lhs + rhs.")
sub = _binary("Sub", "sub", "lhs - rhs.")
mul = _binary("Mul", "mul", "lhs * rhs.")
div = _binary("Div", "div", "lhs / rhs (integers: truncated toward zero, as in C).")
pow = _binary("Pow", "pow", "lhs ** rhs.")
max = _binary("Max", "max", "Element-wise maximum.")
min = _binary("Min", "min", "Element-wise minimum.")


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


def _reduce(op_name: str, python_name: str, doc: str):
    def op(input: Value, num_of_axes: int, axes, keep_dims: bool, output_dims=None,
           value_id: str | None = None) -> Value:
        axes = ints(op_name, "axes", axes, 0)
        if int(num_of_axes) != len(axes):
            raise invalid(op_name, f"num_of_axes is {num_of_axes}; axes {axes} has {len(axes)}")
        return apply(op_name, {"input": input}, {"axes": axes, "keep_dims": bool(keep_dims)},
                     value_id, output_dims)

    op.__name__ = op.__qualname__ = python_name
    op.__doc__ = doc
    return op


reduce_max = _reduce("ReduceMax", "reduce_max", "Maximum over ``axes``.")
reduce_mean = _reduce("ReduceMean", "reduce_mean", "Mean over ``axes``.")
reduce_sum = _reduce("ReduceSum", "reduce_sum", "Sum over ``axes``.")
