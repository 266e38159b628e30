"""ODLA nn ops (odla_ops_nn.h). Each adds one op to the current computation."""

from __future__ import annotations

from ..computation import Value
from ..types import MemoryLayout
from ._args import apply, channels_last, ints, invalid, kernel_layout, number


def _conv_attrs(op_name, input_layout, group, kernel_layout_, strides, dilations,
                paddings_front, paddings_back):
    if int(group) < 1:
        raise invalid(op_name, f"group is {group!r}; expected >= 1")
    return dict(
        channels_last=channels_last(op_name, input_layout),
        kernel_layout_name=kernel_layout(op_name, kernel_layout_),
        group=int(group),
        strides=ints(op_name, "strides", strides, 1),
        dilations=ints(op_name, "dilations", dilations, 1),
        paddings_front=ints(op_name, "paddings_front", paddings_front, 0),
        paddings_back=ints(op_name, "paddings_back", paddings_back, 0),
    )


def conv(input: Value, input_layout: MemoryLayout, group: int, kernel: Value,
         kernel_layout: MemoryLayout, strides, dilations, paddings_front, paddings_back,
         bias: Value | None = None, output_dims=None, value_id: str | None = None) -> Value:
    """N-d convolution (1-3 spatial dims), optionally adding a per-channel ``bias``."""
    attrs = _conv_attrs("Conv", input_layout, group, kernel_layout, strides, dilations,
                        paddings_front, paddings_back)
    return apply("Conv", {"input": input, "kernel": kernel, "bias": bias}, attrs, value_id,
                 output_dims)


def de_conv(input: Value, input_layout: MemoryLayout, group: int, kernel: Value,
            kernel_layout: MemoryLayout, strides, dilations, paddings_front, paddings_back,
            bias: Value | None = None, output_dims=None, value_id: str | None = None) -> Value:
    """Transposed convolution; ``output_dims``, when given, picks the output size."""
    attrs = _conv_attrs("DeConv", input_layout, group, kernel_layout, strides, dilations,
                        paddings_front, paddings_back)
    attrs["output_dims"] = None if output_dims is None else ints("DeConv", "output_dims", output_dims, 1)
    return apply("DeConv", {"input": input, "kernel": kernel, "bias": bias}, attrs, value_id,
                 output_dims)


def batch_normalization(input: Value, input_layout: MemoryLayout, mean: Value, var: Value,
                        epsilon: float, scale: Value | None = None, offset: Value | None = None,
                        scalar_scale: float = 1.0, scalar_offset: float = 0.0,
                        value_id: str | None = None) -> Value:
    """Inference batch normalization; ``scalar_scale``/``scalar_offset`` apply where
    ``scale``/``offset`` are None."""
    op = "BatchNormalization"
    attrs = dict(channels_last=channels_last(op, input_layout), epsilon=number(op, "epsilon", epsilon),
                 scalar_scale=number(op, "scalar_scale", scalar_scale),
                 scalar_offset=number(op, "scalar_offset", scalar_offset))
    if attrs["epsilon"] < 0:
        raise invalid(op, f"epsilon is {epsilon}; expected >= 0")
    return apply(op, {"input": input, "mean": mean, "var": var, "scale": scale, "offset": offset},
                 attrs, value_id)


def _pool_attrs(op_name, input_layout, window_dims, strides, paddings_front, paddings_back):
    return dict(
        channels_last=channels_last(op_name, input_layout),
        window=ints(op_name, "window_dims", window_dims, 1),
        strides=ints(op_name, "strides", strides, 1),
        paddings_front=ints(op_name, "paddings_front", paddings_front, 0),
        paddings_back=ints(op_name, "paddings_back", paddings_back, 0),
    )


def max_pool(input: Value, input_layout: MemoryLayout, window_dims, strides, paddings_front,
             paddings_back, output_dims=None, value_id: str | None = None) -> Value:
    attrs = _pool_attrs("MaxPool", input_layout, window_dims, strides, paddings_front, paddings_back)
    return apply("MaxPool", {"input": input}, attrs, value_id, output_dims)


def average_pool(input: Value, input_layout: MemoryLayout, window_dims, strides, paddings_front,
                 paddings_back, padding_included: bool, output_dims=None,
                 value_id: str | None = None) -> Value:
    """Average pooling; ``padding_included`` counts padded cells in each window's divisor."""
    attrs = _pool_attrs("AveragePool", input_layout, window_dims, strides, paddings_front,
                        paddings_back)
    attrs["padding_included"] = bool(padding_included)
    return apply("AveragePool", {"input": input}, attrs, value_id, output_dims)


def relu(input: Value, value_id: str | None = None) -> Value:
    return apply("Relu", {"input": input}, {}, value_id)


def leaky_relu(input: Value, alpha: float, value_id: str | None = None) -> Value:
    return apply("LeakyRelu", {"input": input}, {"alpha": number("LeakyRelu", "alpha", alpha)},
                 value_id)


def sigmoid(input: Value, value_id: str | None = None) -> Value:
    return apply("Sigmoid", {"input": input}, {}, value_id)


def gelu(input: Value, use_approx: bool = False, value_id: str | None = None) -> Value:
    """0.5 x (1 + erf(x / sqrt 2)); the tanh approximation when ``use_approx``."""
    return apply("Gelu", {"input": input}, {"use_approx": bool(use_approx)}, value_id)


def softmax(input: Value, axis: int, value_id: str | None = None) -> Value:
    return apply("Softmax", {"input": input}, {"axis": _axis("Softmax", input, axis)}, value_id)


def log_softmax(input: Value, axis: int, value_id: str | None = None) -> Value:
    return apply("LogSoftmax", {"input": input}, {"axis": _axis("LogSoftmax", input, axis)},
                 value_id)


def _axis(op_name, input, axis) -> int:
    (axis,) = ints(op_name, "axis", [axis])
    rank = input.shape.size if isinstance(input, Value) else 0
    if isinstance(input, Value) and not -rank <= axis < rank:
        raise invalid(op_name, f"axis is {axis}; expected -{rank}..{rank - 1} for {input.type}")
    return axis
