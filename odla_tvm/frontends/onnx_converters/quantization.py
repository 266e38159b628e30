"""Converters of ONNX's quantization ops, onto ODLA's Quantize and Dequantize
(odla_ops_quantization.h) and the math ops around them."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...types import ElementType, numpy_dtype
from .nn import convolution
from .registry import Node, constant, converter, element_type, rank, static_dims


def _axis(node: Node, x) -> int:
    return node.attr("axis", 1) % max(rank(x), 1)


def _blocks_spread(node: Node, x, value, axis: int):
    """A per-block ``value`` (one entry per block of ``block_size`` along ``axis``) repeated
    over each block: the shape of ``x``."""
    if value is None:
        return None
    size = node.attr("block_size")
    shape = static_dims(node, value)
    split = shape[:axis + 1] + (1,) + shape[axis + 1:]
    spread = shape[:axis + 1] + (size,) + shape[axis + 1:]
    repeated = ops.process.expand_dims(ops.process.reshape(value, split), spread)
    return ops.process.reshape(repeated, static_dims(node, x))


@converter("QuantizeLinear")
def quantize_linear(node: Node):
    x, scale, zero_point = node.input(0), node.input(1), node.input(2)
    if zero_point is not None:
        target = zero_point.element_type
    elif node.attr("output_dtype"):
        target = element_type(node.attr("output_dtype"))
    else:
        target = ElementType.UINT8
    axis = _axis(node, x)
    if not node.attr("block_size", 0):
        return ops.quantization.quantize(x, scale, zero_point, axis, target, value_id=node.id)
    # Blocked: saturate(round(x / scale) + zero point) with the scales spread over the blocks.
    scale = _blocks_spread(node, x, scale, axis)
    levels = ops.math.round_half_to_even(ops.math.div(x, scale))
    if zero_point is not None:
        levels = ops.math.add(levels, ops.process.cast(_blocks_spread(node, x, zero_point, axis),
                                                       x.element_type))
    limits = np.iinfo(numpy_dtype(target))
    return ops.process.cast(ops.math.clamp(levels, limits.min, limits.max), target,
                            value_id=node.id)


@converter("DequantizeLinear")
def dequantize_linear(node: Node):
    x, scale, zero_point = node.input(0), node.input(1), node.input(2)
    axis = _axis(node, x)
    if not node.attr("block_size", 0):
        return ops.quantization.dequantize(x, scale, zero_point, axis, scale.element_type,
                                           value_id=node.id)
    # Blocked: (x - zero point) * scale with both spread over the blocks.
    values = ops.process.cast(x, scale.element_type)
    if zero_point is not None:
        values = ops.math.sub(values, ops.process.cast(_blocks_spread(node, x, zero_point, axis),
                                                       scale.element_type))
    return ops.math.mul(values, _blocks_spread(node, x, scale, axis), value_id=node.id)


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(node: Node):
    """uint8 quantization with scale and zero point from the data's range (including 0)."""
    x = node.input(0)
    axes = list(range(rank(x)))
    zero = constant(np.zeros((), x.type.dtype))
    low = ops.math.min(ops.math.reduce_min(x, len(axes), axes, False), zero)
    high = ops.math.max(ops.math.reduce_max(x, len(axes), axes, False), zero)
    scale = ops.math.div(ops.math.sub(high, low), constant(np.asarray(255, x.type.dtype)),
                         value_id=node.ids[1] or None)
    levels = ops.math.round_half_to_even(ops.math.neg(ops.math.div(low, scale)))
    zero_point = ops.process.cast(ops.math.clamp(levels, 0, 255), ElementType.UINT8,
                                  value_id=node.ids[2] or None)
    y = ops.quantization.quantize(x, scale, zero_point, 0, ElementType.UINT8, value_id=node.id)
    return [y, scale, zero_point]


def _integer_operand(x, zero_point, per_row: bool = False):
    """``x - zero_point`` in int32, where integer matrix products accumulate (made of the 8
    bits again when compiling: relay_bridge.integer_products). A 1-D zero point is one per
    row with ``per_row`` (MatMulInteger's A), else one per index of the last axis."""
    wide = ops.process.cast(x, ElementType.INT32)
    if zero_point is None:
        return wide
    if per_row and rank(zero_point) == 1 and rank(x) >= 2:
        zero_point = ops.process.reshape(zero_point, (-1, 1))
    return ops.math.sub(wide, ops.process.cast(zero_point, ElementType.INT32))


@converter("MatMulInteger")
def mat_mul_integer(node: Node):
    a = _integer_operand(node.input(0), node.input(2), per_row=True)
    b = _integer_operand(node.input(1), node.input(3))
    return ops.math.batch_mat_mul(a, False, b, False, value_id=node.id)


@converter("QLinearMatMul")
def q_linear_mat_mul(node: Node):
    a_x, a_scale, a_zero, b_x, b_scale, b_zero, y_scale, y_zero = node.inputs
    # Per-axis scales are per row of A and per column of B.
    a = ops.quantization.dequantize(a_x, a_scale, a_zero, rank(a_x) - 2, a_scale.element_type)
    b = ops.quantization.dequantize(b_x, b_scale, b_zero, rank(b_x) - 1, b_scale.element_type)
    product = ops.math.batch_mat_mul(a, False, b, False)
    return ops.quantization.quantize(product, y_scale, y_zero, 0, y_zero.element_type,
                                     value_id=node.id)


@converter("ConvInteger")
def conv_integer(node: Node):
    """The convolution of x - x_zero_point and w - w_zero_point, accumulated in int32."""
    x = _integer_operand(node.input(0), node.input(2))
    w_zero = node.input(3)
    if w_zero is not None and rank(w_zero) == 1:  # one zero point per output channel
        w_zero = ops.process.reshape(w_zero, (-1,) + (1,) * (rank(node.input(1)) - 1))
    return convolution(node, x, _integer_operand(node.input(1), w_zero), value_id=node.id)


@converter("QLinearConv")
def q_linear_conv(node: Node):
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias = (node.input(i)
                                                                    for i in range(9))
    real_x = ops.quantization.dequantize(x, x_scale, x_zero, 1, x_scale.element_type)
    # per output channel
    real_w = ops.quantization.dequantize(w, w_scale, w_zero, 0, w_scale.element_type)
    real_bias = None if bias is None else \
        ops.math.mul(ops.process.cast(bias, x_scale.element_type), ops.math.mul(x_scale, w_scale))
    y = convolution(node, real_x, real_w, real_bias)
    return ops.quantization.quantize(y, y_scale, y_zero, 1, y_zero.element_type, value_id=node.id)
