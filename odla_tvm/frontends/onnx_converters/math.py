"""Converters of ONNX ops that map to ODLA's math ops (odla_ops_math.h)."""

from __future__ import annotations

import functools

import numpy as np

import odla_tvm as odla

from ...types import ElementType, ValueType
from .registry import Node, constant, converter, dims, rank, static_dims

_UNARY = {
    "Abs": odla.abs, "Acos": odla.acos, "Acosh": odla.acosh, "Asin": odla.asin,
    "Asinh": odla.asinh, "Atan": odla.atan, "Atanh": odla.atanh, "Ceil": odla.ceil,
    "Cos": odla.cos, "Cosh": odla.cosh, "Erf": odla.erf, "Exp": odla.exp, "Floor": odla.floor,
    "Log": odla.log, "Neg": odla.neg, "Not": odla.not_, "Reciprocal": odla.reciprocal,
    "Round": odla.round_half_to_even, "Sign": odla.sign, "Sin": odla.sin, "Sinh": odla.sinh,
    "Sqrt": odla.sqrt, "Tan": odla.tan, "Tanh": odla.tanh, "IsNaN": odla.is_nan,
}
_BINARY = {
    "Add": odla.add, "Sub": odla.sub, "Mul": odla.mul, "Div": odla.div,
    "Equal": odla.equal, "Greater": odla.greater, "GreaterOrEqual": odla.greater_or_equal,
    "Less": odla.less, "LessOrEqual": odla.less_or_equal, "And": odla.and_, "Or": odla.or_,
    "Xor": odla.xor,
}
# Variadic ONNX ops folded pairwise through a binary ODLA op.
_VARIADIC = {"Max": odla.max, "Min": odla.min, "Sum": odla.add}


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
    return odla.mean([v for v in node.inputs if v is not None], value_id=node.id)


@converter("Pow")
def pow(node: Node):
    base, exponent = node.inputs
    if exponent.element_type == base.element_type:
        return odla.pow(base, exponent, value_id=node.id)
    # ONNX lets the exponent's type differ: an integer base with a float exponent is raised
    # in float64 and truncated, as onnxruntime does; other exponents take the base's type.
    if np.issubdtype(base.type.dtype, np.integer) and \
            np.issubdtype(exponent.type.dtype, np.floating):
        wide = [odla.cast(v, ElementType.FLOAT64) for v in (base, exponent)]
        return odla.cast(odla.pow(*wide), base.element_type, value_id=node.id)
    return odla.pow(base, odla.cast(exponent, base.element_type), value_id=node.id)


@converter("Mod")
def mod(node: Node):
    return odla.mod(node.input(0), node.input(1), node.attr("fmod", 0), value_id=node.id)


@converter("BitShift")
def bit_shift(node: Node):
    left = node.attr("direction") == "LEFT"
    return odla.shift(node.input(0), node.input(1), left, value_id=node.id)


@converter("IsInf")
def is_inf(node: Node):
    return odla.is_inf(node.input(0), node.attr("detect_positive", 1),
                       node.attr("detect_negative", 1), value_id=node.id)


@converter("Where")
def where(node: Node):
    return odla.select(*node.inputs, value_id=node.id)


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
    if isinstance(lo, odla.Value) or isinstance(hi, odla.Value):
        lower = x if not isinstance(lo, odla.Value) else odla.max(x, lo)
        return odla.min(lower, hi, value_id=node.id) if isinstance(hi, odla.Value) \
            else odla.clamp(lower, info.min, hi, value_id=node.id)
    return odla.clamp(x, lo, hi, value_id=node.id)


@converter("MatMul")
def mat_mul(node: Node):
    return odla.batch_mat_mul(node.input(0), False, node.input(1), False, value_id=node.id)


@converter("Gemm")
def gemm(node: Node):
    a, b, c = node.input(0), node.input(1), node.input(2)
    return odla.gemm(a, node.attr("transA", 0), b, node.attr("transB", 0),
                     node.attr("alpha", 1.0), node.attr("beta", 1.0), c, value_id=node.id)


@converter("Einsum")
def einsum(node: Node):
    return odla.einsum(node.inputs, node.attr("equation"), value_id=node.id)


@converter("Det")
def det(node: Node):
    return odla.det(node.input(0), value_id=node.id)


@converter("CumSum")
def cum_sum(node: Node):
    (axis,) = node.ints(1)
    return odla.cum_sum(node.input(0), axis, node.attr("exclusive", 0), node.attr("reverse", 0),
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


converter("ArgMax")(_arg_reduce(odla.arg_max))
converter("ArgMin")(_arg_reduce(odla.arg_min))


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
    ("ReduceSum", odla.reduce_sum, 13), ("ReduceMean", odla.reduce_mean, 18),
    ("ReduceMax", odla.reduce_max, 18), ("ReduceMin", odla.reduce_min, 18),
    ("ReduceProd", odla.reduce_prod, 18), ("ReduceLogSum", odla.reduce_log_sum, 18),
    ("ReduceLogSumExp", odla.reduce_log_sum_exp, 18),
    ("ReduceSumSquare", odla.reduce_sum_square, 18),
):
    converter(_op_type)(_reduce(_op, _since))
converter("ReduceL1")(_reduce(odla.reduce_l1, 18, 0.0))
converter("ReduceL2")(_reduce(odla.reduce_l2, 18, 0.0))


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
        part = odla.slice(x, begin, end, [1] * rank(x))
        before = ones if running is None else running
        running = part if running is None else odla.mul(running, part)
        products[start] = before if node.attr("exclusive", 0) else running
    return odla.concat([products[i] for i in range(length)], axis, value_id=node.id)


@converter("BitwiseNot")
def bitwise_not(node: Node):
    x = node.input(0)
    if np.issubdtype(x.type.dtype, np.unsignedinteger):  # ~x = max - x
        return odla.sub(constant(np.asarray(np.iinfo(x.type.dtype).max, x.type.dtype)), x,
                        value_id=node.id)
    return odla.sub(odla.neg(x), constant(np.ones((), x.type.dtype)), value_id=node.id)  # -x - 1


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
            bit_a, bit_b = (odla.mod(odla.shift(v, number(k), False), number(2), 0)
                            for v in (a, b))
            bits = odla.shift(combine(bit_a, bit_b, number), number(k), True)
            result = bits if result is None else odla.add(result, bits)
        return odla.cast(result, a.element_type, value_id=node.id)

    return convert


converter("BitwiseAnd")(_bitwise(lambda a, b, number: odla.mul(a, b)))
converter("BitwiseOr")(_bitwise(lambda a, b, number: odla.sub(odla.add(a, b), odla.mul(a, b))))
converter("BitwiseXor")(_bitwise(lambda a, b, number: odla.mod(odla.add(a, b), number(2), 0)))


@converter("Binarizer", domain="ai.onnx.ml")
def binarizer(node: Node):
    x = node.input(0)
    above = odla.greater(x, constant(np.asarray(node.attr("threshold", 0.0), x.type.dtype)))
    return odla.cast(above, x.element_type, value_id=node.id)
