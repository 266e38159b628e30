"""Converters of ONNX ops that map to ODLA's math ops (odla_ops_math.h)."""

from __future__ import annotations

import functools

import numpy as np

from ... import ops
from ...computation import Value
from ...types import ElementType, ValueType
from .registry import Node, constant, converter, dims, rank, static_dims

_UNARY = {
    "Abs": ops.math.abs, "Acos": ops.math.acos, "Acosh": ops.math.acosh, "Asin": ops.math.asin,
    "Asinh": ops.math.asinh, "Atan": ops.math.atan, "Atanh": ops.math.atanh,
    "Ceil": ops.math.ceil, "Cos": ops.math.cos, "Cosh": ops.math.cosh, "Erf": ops.math.erf,
    "Exp": ops.math.exp, "Floor": ops.math.floor, "Log": ops.math.log, "Neg": ops.math.neg,
    "Not": ops.math.not_, "Reciprocal": ops.math.reciprocal, "Round": ops.math.round_half_to_even,
    "Sign": ops.math.sign, "Sin": ops.math.sin, "Sinh": ops.math.sinh, "Sqrt": ops.math.sqrt,
    "Tan": ops.math.tan, "Tanh": ops.math.tanh, "IsNaN": ops.math.is_nan,
}
_BINARY = {
    "Add": ops.math.add, "Sub": ops.math.sub, "Mul": ops.math.mul, "Div": ops.math.div,
    "Equal": ops.math.equal, "Greater": ops.math.greater,
    "GreaterOrEqual": ops.math.greater_or_equal, "Less": ops.math.less,
    "LessOrEqual": ops.math.less_or_equal, "And": ops.math.and_, "Or": ops.math.or_,
    "Xor": ops.math.xor,
}
# Variadic ONNX ops folded pairwise through a binary ODLA op.
_VARIADIC = {"Max": ops.math.max, "Min": ops.math.min, "Sum": ops.math.add}


def _unary(op):
    return lambda node: op(node.input(0), value_id=node.id)


def _binary(op):
    return lambda node: op(node.input(0), node.input(1), value_id=node.id)


def _variadic(op):
    def convert(node):
        values = [v for v in node.inputs if v is not None]
        if len(values) == 1:
            return values[0]
        partial = functools.reduce(op, values[:-1])
        return op(partial, values[-1], value_id=node.id)

    return convert


for _op_type, _op in _UNARY.items():
    converter(_op_type)(_unary(_op))
for _op_type, _op in _BINARY.items():
    converter(_op_type)(_binary(_op))
for _op_type, _op in _VARIADIC.items():
    converter(_op_type)(_variadic(_op))


@converter("Mean")
def mean(node: Node):
    return ops.math.mean([v for v in node.inputs if v is not None], value_id=node.id)


@converter("Pow")
def pow(node: Node):
    base, exponent = node.inputs
    if exponent.element_type == base.element_type:
        return ops.math.pow(base, exponent, value_id=node.id)
    # ONNX lets the exponent's type differ: an integer base with a float exponent is raised
    # in float64 and truncated, as onnxruntime does; other exponents take the base's type.
    if np.issubdtype(base.type.dtype, np.integer) and \
            np.issubdtype(exponent.type.dtype, np.floating):
        wide = [ops.process.cast(v, ElementType.FLOAT64) for v in (base, exponent)]
        return ops.process.cast(ops.math.pow(*wide), base.element_type, value_id=node.id)
    return ops.math.pow(base, ops.process.cast(exponent, base.element_type), value_id=node.id)


@converter("Mod")
def mod(node: Node):
    return ops.math.mod(node.input(0), node.input(1), node.attr("fmod", 0), value_id=node.id)


@converter("BitShift")
def bit_shift(node: Node):
    left = node.attr("direction") == "LEFT"
    return ops.math.shift(node.input(0), node.input(1), left, value_id=node.id)


@converter("IsInf")
def is_inf(node: Node):
    return ops.math.is_inf(node.input(0), node.attr("detect_positive", 1),
                           node.attr("detect_negative", 1), value_id=node.id)


@converter("Where")
def where(node: Node):
    return ops.math.select(*node.inputs, value_id=node.id)


def _bound(node: Node, index: int, attr: str, limit: float):
    """A Clip bound: a value from an input, a number from an attribute, or ``limit``."""
    if node.opset < 11:
        return node.attr(attr, limit)
    value = node.input(index)
    if value is None:
        return limit
    return float(node.array(index)) if node.is_constant(index) else value


@converter("Clip")
def clip(node: Node):
    x = node.input(0)
    info = np.finfo(x.type.dtype) if np.issubdtype(x.type.dtype, np.floating) \
        else np.iinfo(x.type.dtype)
    lo, hi = _bound(node, 1, "min", info.min), _bound(node, 2, "max", info.max)
    if isinstance(lo, Value) or isinstance(hi, Value):
        lower = x if not isinstance(lo, Value) else ops.math.max(x, lo)
        return ops.math.min(lower, hi, value_id=node.id) if isinstance(hi, Value) \
            else ops.math.clamp(lower, info.min, hi, value_id=node.id)
    return ops.math.clamp(x, lo, hi, value_id=node.id)


@converter("MatMul")
def mat_mul(node: Node):
    return ops.math.batch_mat_mul(node.input(0), False, node.input(1), False, value_id=node.id)


@converter("Gemm")
def gemm(node: Node):
    a, b, c = node.input(0), node.input(1), node.input(2)
    return ops.math.gemm(a, node.attr("transA", 0), b, node.attr("transB", 0),
                         node.attr("alpha", 1.0), node.attr("beta", 1.0), c, value_id=node.id)


@converter("Einsum")
def einsum(node: Node):
    return ops.math.einsum(node.inputs, node.attr("equation"), value_id=node.id)


@converter("Det")
def det(node: Node):
    return ops.math.det(node.input(0), value_id=node.id)


@converter("CumSum")
def cum_sum(node: Node):
    (axis,) = node.ints(1)
    return ops.math.cum_sum(node.input(0), axis, node.attr("exclusive", 0), node.attr("reverse", 0),
                            value_id=node.id)


def _arg_reduce(op):
    def convert(node: Node):
        x = node.input(0)
        axis = node.attr("axis", 0)
        keep = node.attr("keepdims", 1)
        out_dims = list(dims(x))
        out_dims[axis] = 1
        if not keep:
            del out_dims[axis]
        return op(x, axis, keep, node.attr("select_last_index", 0),
                  ValueType(ElementType.INT64, out_dims), value_id=node.id)

    return convert


converter("ArgMax")(_arg_reduce(ops.math.arg_max))
converter("ArgMin")(_arg_reduce(ops.math.arg_min))


def reduce_axes(node: Node, axes_input_since: int) -> list[int] | None:
    """The axes to reduce: all when none are given (None when ``noop_with_empty_axes``
    asks to reduce nothing)."""
    from_input = node.opset >= axes_input_since
    axes = node.ints(1) if from_input else node.attr("axes")
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None
        axes = list(range(rank(node.input(0))))
    return [a % rank(node.input(0)) for a in axes]


def _reduce(op, axes_input_since, *extra):
    def convert(node: Node):
        x = node.input(0)
        axes = reduce_axes(node, axes_input_since)
        if axes is None:
            return x
        return op(x, len(axes), axes, node.attr("keepdims", 1), *extra, value_id=node.id)

    return convert


# ReduceSum took its axes as an input from opset 13, the other reductions from opset 18.
for _op_type, _op, _since in (
    ("ReduceSum", ops.math.reduce_sum, 13), ("ReduceMean", ops.math.reduce_mean, 18),
    ("ReduceMax", ops.math.reduce_max, 18), ("ReduceMin", ops.math.reduce_min, 18),
    ("ReduceProd", ops.math.reduce_prod, 18), ("ReduceLogSum", ops.math.reduce_log_sum, 18),
    ("ReduceLogSumExp", ops.math.reduce_log_sum_exp, 18),
    ("ReduceSumSquare", ops.math.reduce_sum_square, 18),
):
    converter(_op_type)(_reduce(_op, _since))
converter("ReduceL1")(_reduce(ops.math.reduce_l1, 18, 0.0))
converter("ReduceL2")(_reduce(ops.math.reduce_l2, 18, 0.0))


@converter("CumProd")
def cum_prod(node: Node):
    """Running products along an axis of known length: one product per position."""
    x = node.input(0)
    (axis,) = node.ints(1)
    axis %= rank(x)
    length = static_dims(node, x)[axis]
    starts = range(length - 1, -1, -1) if node.attr("reverse", 0) else range(length)
    ones = constant(np.ones([1 if a == axis else d for a, d in enumerate(dims(x))], x.type.dtype))
    running, products = None, {}
    for start in starts:
        begin, end = [0] * rank(x), list(dims(x))
        begin[axis], end[axis] = start, start + 1
        part = ops.process.slice(x, begin, end, [1] * rank(x))
        before = ones if running is None else running
        running = part if running is None else ops.math.mul(running, part)
        products[start] = before if node.attr("exclusive", 0) else running
    return ops.process.concat([products[i] for i in range(length)], axis, value_id=node.id)


@converter("BitwiseNot")
def bitwise_not(node: Node):
    x = node.input(0)
    if np.issubdtype(x.type.dtype, np.unsignedinteger):  # ~x = max - x
        return ops.math.sub(constant(np.asarray(np.iinfo(x.type.dtype).max, x.type.dtype)), x,
                            value_id=node.id)
    # -x - 1
    return ops.math.sub(ops.math.neg(x), constant(np.ones((), x.type.dtype)), value_id=node.id)


def _bitwise(combine):
    """A bitwise op composed bit by bit (ODLA's And, Or and Xor are logical): bit k of each
    operand is (x >> k) mod 2, and the combined bits are shifted back into place."""
    def convert(node: Node):
        a, b = node.input(0), node.input(1)
        dtype = a.type.dtype

        def number(n):
            return constant(np.asarray(n, dtype))

        result = None
        for k in range(np.iinfo(dtype).bits):
            bit_a, bit_b = (ops.math.mod(ops.math.shift(v, number(k), False), number(2), 0)
                            for v in (a, b))
            bits = ops.math.shift(combine(bit_a, bit_b, number), number(k), True)
            result = bits if result is None else ops.math.add(result, bits)
        return ops.process.cast(result, a.element_type, value_id=node.id)

    return convert


converter("BitwiseAnd")(_bitwise(lambda a, b, number: ops.math.mul(a, b)))
converter("BitwiseOr")(_bitwise(
    lambda a, b, number: ops.math.sub(ops.math.add(a, b), ops.math.mul(a, b))))
converter("BitwiseXor")(_bitwise(
    lambda a, b, number: ops.math.mod(ops.math.add(a, b), number(2), 0)))


@converter("Binarizer", domain="ai.onnx.ml")
def binarizer(node: Node):
    x = node.input(0)
    above = ops.math.greater(x, constant(np.asarray(node.attr("threshold", 0.0), x.type.dtype)))
    return ops.process.cast(above, x.element_type, value_id=node.id)
