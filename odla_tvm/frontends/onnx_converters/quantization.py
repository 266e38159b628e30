"""Converters of ONNX's quantization ops, onto ODLA's Quantize and Dequantize
(odla_ops_quantization.h) and the math ops around them."""

from __future__ import annotations

import numpy as np

import odla_tvm as odla

from .registry import Node, constant, converter, element_type, rank


def _axis(node: Node, x) -> int:
    return node.attr("axis", 1) % max(rank(x), 1)


@converter("QuantizeLinear")
def quantize_linear(node: Node):
    x, scale, zero_point = node.input(0), node.input(1), node.input(2)
    if node.attr("block_size", 0):
        raise node.unsupported("blocked quantization")
    if zero_point is not None:
        target = zero_point.element_type
    elif node.attr("output_dtype"):
        target = element_type(node.attr("output_dtype"))
    else:
        target = odla.ElementType.UINT8
    return odla.quantize(x, scale, zero_point, _axis(node, x), target, value_id=node.id)


@converter("DequantizeLinear")
def dequantize_linear(node: Node):
    x, scale, zero_point = node.input(0), node.input(1), node.input(2)
    if node.attr("block_size", 0):
        raise node.unsupported("blocked quantization")
    return odla.dequantize(x, scale, zero_point, _axis(node, x), scale.element_type,
                           value_id=node.id)


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(node: Node):
    """uint8 quantization with scale and zero point from the data's range (including 0)."""
    x = node.input(0)
    axes = list(range(rank(x)))
    zero = constant(np.zeros((), x.type.dtype))
    low = odla.min(odla.reduce_min(x, len(axes), axes, False), zero)
    high = odla.max(odla.reduce_max(x, len(axes), axes, False), zero)
    scale = odla.div(odla.sub(high, low), constant(np.asarray(255, x.type.dtype)),
                     value_id=node.ids[1] or None)
    zero_point = odla.cast(odla.clamp(odla.round_half_to_even(odla.neg(odla.div(low, scale))),
                                      0, 255), odla.ElementType.UINT8,
                           value_id=node.ids[2] or None)
    y = odla.quantize(x, scale, zero_point, 0, odla.ElementType.UINT8, value_id=node.id)
    return [y, scale, zero_point]


def _integer_operand(x, zero_point):
    """``x - zero_point`` in int32, where integer matrix products accumulate."""
    wide = odla.cast(x, odla.ElementType.INT32)
    if zero_point is None:
        return wide
    if rank(zero_point) == 1 and rank(x) >= 2:  # per-row zero points of the left operand
        zero_point = odla.reshape(zero_point, (-1, 1))
    return odla.sub(wide, odla.cast(zero_point, odla.ElementType.INT32))


@converter("MatMulInteger")
def mat_mul_integer(node: Node):
    a = _integer_operand(node.input(0), node.input(2))
    b = _integer_operand(node.input(1), node.input(3))
    return odla.batch_mat_mul(a, False, b, False, value_id=node.id)


@converter("QLinearMatMul")
def q_linear_mat_mul(node: Node):
    a_x, a_scale, a_zero, b_x, b_scale, b_zero, y_scale, y_zero = node.inputs
    # Per-axis scales are per row of A and per column of B.
    a = odla.dequantize(a_x, a_scale, a_zero, rank(a_x) - 2, a_scale.element_type)
    b = odla.dequantize(b_x, b_scale, b_zero, rank(b_x) - 1, b_scale.element_type)
    product = odla.batch_mat_mul(a, False, b, False)
    return odla.quantize(product, y_scale, y_zero, 0, y_zero.element_type, value_id=node.id)
