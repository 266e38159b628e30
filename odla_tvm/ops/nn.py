"""ODLA nn ops (odla_ops_nn.h). Each adds one op to the current computation."""

from __future__ import annotations

from ..computation import Value
from ..types import (
    MemoryLayout,
    ReductionMode,
    RnnDirection,
    RnnGateOrder,
    RnnOutputs,
    RnnWeightFormat,
    TfIdfMode,
    ValueType,
    odla_enum,
)
from ._args import apply, apply_values, channels_last, ints, invalid, kernel_layout, number


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


# -- element-wise activations ------------------------------------------------------------------

def _activation(op_name, input, value_id, **params):
    attrs = {name: number(op_name, name, value) for name, value in params.items()}
    return apply(op_name, {"input": input}, attrs, value_id)


def celu(input: Value, alpha: float, value_id: str | None = None) -> Value:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1))."""
    if number("Celu", "alpha", alpha) == 0:
        raise invalid("Celu", "alpha is 0; expected a non-zero number")
    return _activation("Celu", input, value_id, alpha=alpha)


def elu(input: Value, alpha: float, value_id: str | None = None) -> Value:
    """x < 0 ? alpha (exp(x) - 1) : x."""
    return _activation("Elu", input, value_id, alpha=alpha)


def hard_sigmoid(input: Value, alpha: float, beta: float, value_id: str | None = None) -> Value:
    """max(0, min(1, alpha x + beta))."""
    return _activation("HardSigmoid", input, value_id, alpha=alpha, beta=beta)


def hard_swish(input: Value, value_id: str | None = None) -> Value:
    """x max(0, min(1, x / 6 + 1 / 2))."""
    return _activation("HardSwish", input, value_id)


def swish(input: Value, alpha: float = 1.0, value_id: str | None = None) -> Value:
    """x sigmoid(alpha x)."""
    return _activation("Swish", input, value_id, alpha=alpha)


def selu(input: Value, alpha: float, gamma: float, value_id: str | None = None) -> Value:
    """x <= 0 ? gamma (alpha exp(x) - alpha) : gamma x."""
    return _activation("Selu", input, value_id, alpha=alpha, gamma=gamma)


def shrink(input: Value, bias: float, lambd: float, value_id: str | None = None) -> Value:
    """x < -lambd ? x + bias : x > lambd ? x - bias : 0."""
    if number("Shrink", "lambd", lambd) < 0:
        raise invalid("Shrink", f"lambd is {lambd}; expected >= 0")
    return _activation("Shrink", input, value_id, bias=bias, lambd=lambd)


def softplus(input: Value, value_id: str | None = None) -> Value:
    """ln(exp(x) + 1)."""
    return _activation("Softplus", input, value_id)


def softsign(input: Value, value_id: str | None = None) -> Value:
    """x / (1 + |x|)."""
    return _activation("Softsign", input, value_id)


def thresholded_relu(input: Value, alpha: float, value_id: str | None = None) -> Value:
    """x > alpha ? x : 0."""
    return _activation("ThresholdedRelu", input, value_id, alpha=alpha)


def prelu(input: Value, slope: Value, value_id: str | None = None) -> Value:
    """x < 0 ? slope x : x, ``slope`` broadcasting to ``input`` like NumPy."""
    return apply("PRelu", {"input": input, "slope": slope}, {}, value_id)


def hardmax(input: Value, axis: int, value_id: str | None = None) -> Value:
    """1 where the first largest element along ``axis`` is, 0 elsewhere."""
    return apply("Hardmax", {"input": input}, {"axis": _axis("Hardmax", input, axis)}, value_id)


# -- normalizations ----------------------------------------------------------------------------

def _epsilon(op_name, epsilon) -> float:
    epsilon = number(op_name, "epsilon", epsilon)
    if epsilon < 0:
        raise invalid(op_name, f"epsilon is {epsilon}; expected >= 0")
    return epsilon


def lrn(input: Value, input_layout: MemoryLayout, window_size: int, alpha: float, beta: float,
        bias: float, value_id: str | None = None) -> Value:
    """Local response normalization across channels:
    x / (bias + alpha / window_size * sum of x^2 over the window) ^ beta."""
    op = "LRN"
    (size,) = ints(op, "window_size", [window_size], 1)
    attrs = dict(channels_last=channels_last(op, input_layout), window_size=size,
                 alpha=number(op, "alpha", alpha), beta=number(op, "beta", beta),
                 bias=number(op, "bias", bias))
    return apply(op, {"input": input}, attrs, value_id)


def _affine_attrs(op_name, input_layout, epsilon, scalar_scale, scalar_offset):
    return dict(channels_last=channels_last(op_name, input_layout),
                epsilon=_epsilon(op_name, epsilon),
                scalar_scale=number(op_name, "scalar_scale", scalar_scale),
                scalar_offset=number(op_name, "scalar_offset", scalar_offset))


def group_normalization(input: Value, input_layout: MemoryLayout, groups: int, epsilon: float,
                        scale: Value | None = None, offset: Value | None = None,
                        scalar_scale: float = 1.0, scalar_offset: float = 0.0,
                        value_id: str | None = None) -> Value:
    """Normalizes each group of ``groups`` channel groups per instance, then applies the
    per-channel ``scale`` and ``offset`` (``scalar_scale``/``scalar_offset`` where None)."""
    op = "GroupNormalization"
    attrs = _affine_attrs(op, input_layout, epsilon, scalar_scale, scalar_offset)
    (attrs["groups"],) = ints(op, "groups", [groups], 1)
    return apply(op, {"input": input, "scale": scale, "offset": offset}, attrs, value_id)


def instance_normalization(input: Value, input_layout: MemoryLayout, epsilon: float,
                           scale: Value | None = None, offset: Value | None = None,
                           scalar_scale: float = 1.0, scalar_offset: float = 0.0,
                           value_id: str | None = None) -> Value:
    """scale (x - mean) / sqrt(variance + epsilon) + offset, mean and variance per channel
    per instance; ``scalar_scale``/``scalar_offset`` apply where ``scale``/``offset`` are None."""
    op = "InstanceNormalization"
    attrs = _affine_attrs(op, input_layout, epsilon, scalar_scale, scalar_offset)
    return apply(op, {"input": input, "scale": scale, "offset": offset}, attrs, value_id)


def _axes(op_name, axes_size, axes) -> tuple[int, ...]:
    axes = ints(op_name, "axes", axes)
    if int(axes_size) != len(axes):
        raise invalid(op_name, f"axes_size is {axes_size}; axes {axes} has {len(axes)}")
    if not axes:
        raise invalid(op_name, "axes is empty; expected at least one axis")
    return axes


def lp_normalize(input: Value, p: int, input_layout: MemoryLayout, axes_size: int, axes,
                 epsilon: float, scale: Value | None = None, value_id: str | None = None) -> Value:
    """x / (sum |x|^p + epsilon) ^ (1/p) over ``axes`` (0 where that norm is 0), times the
    per-channel ``scale`` when given."""
    op = "LpNormalize"
    (p,) = ints(op, "p", [p], 1)
    attrs = dict(p=p, channels_last=channels_last(op, input_layout),
                 axes=_axes(op, axes_size, axes), epsilon=_epsilon(op, epsilon))
    return apply(op, {"input": input, "scale": scale}, attrs, value_id)


def layer_norm(input: Value, axes_size: int, axes, epsilon: float, scale: Value | None = None,
               offset: Value | None = None, value_id: str | None = None) -> Value:
    """(x - mean) / sqrt(variance + epsilon) over ``axes``, times ``scale`` plus ``offset``
    (both broadcasting like NumPy; None: 1 and 0)."""
    op = "LayerNorm"
    attrs = dict(axes=_axes(op, axes_size, axes), epsilon=_epsilon(op, epsilon))
    return apply(op, {"input": input, "scale": scale, "offset": offset}, attrs, value_id)


# -- selection and detection -------------------------------------------------------------------

def _element_type(op_name, name, value_type, allowed=None) -> str:
    """The dtype of ``value_type`` (an ODLA ValueType), one of ``allowed`` when given."""
    if not isinstance(value_type, ValueType):
        raise invalid(op_name, f"{name} is a {type(value_type).__name__}; expected a ValueType")
    dtype = str(value_type.dtype)
    if allowed is not None and dtype not in allowed:
        raise invalid(op_name, f"{name} has element type {value_type.element_type.name}; "
                               f"expected one of {', '.join(allowed)}")
    return dtype


def topk(input: Value, K: int, largest: bool, sorted: bool, axis: int, output_value_type,
         output_value_index_type, value_ids=None) -> list[Value]:
    """[values, indices] of the ``K`` largest (or smallest) elements along ``axis``; ties go
    to the lower index."""
    op = "TopK"
    (k,) = ints(op, "K", [K], 0)
    value_dtype = _element_type(op, "output_value_type", output_value_type)
    if isinstance(input, Value) and value_dtype != str(input.type.dtype):
        raise invalid(op, f"output_value_type is {output_value_type}; expected the input's "
                          f"element type {input.type.element_type.name}")
    index_dtype = _element_type(op, "output_value_index_type", output_value_index_type,
                                ("int32", "int64"))
    attrs = dict(k=k, largest=bool(largest), sorted=bool(sorted), axis=_axis(op, input, axis),
                 index_dtype=index_dtype)
    return apply_values(op, {"input": input}, attrs, value_ids)


def nms(boxes: Value, scores: Value, max_num_outputs: int, iou_threshold: float,
        score_threshold: float, output_value_type, value_id: str | None = None) -> Value:
    """Non-max suppression per batch and class. ``boxes``: (batch, boxes, 4) corners
    (y1, x1, y2, x2); ``scores``: (batch, classes, boxes). Returns the (selected, 3) rows
    (batch, class, box index), at most ``max_num_outputs`` per batch and class."""
    op = "NMS"
    (max_num,) = ints(op, "max_num_outputs", [max_num_outputs], 0)
    attrs = dict(max_num_outputs=max_num, iou_threshold=number(op, "iou_threshold", iou_threshold),
                 score_threshold=number(op, "score_threshold", score_threshold),
                 dtype=_element_type(op, "output_value_type", output_value_type,
                                     ("int32", "int64")))
    return apply(op, {"boxes": boxes, "scores": scores}, attrs, value_id)


def _roi_attrs(op_name, input_layout, scale, output_dim):
    dims = ints(op_name, "output_dim", output_dim, 1)
    if len(dims) != 4:
        raise invalid(op_name, f"output_dim is {dims}; expected 4 dims (rois, channels, height, "
                               "width in the input's layout)")
    last = channels_last(op_name, input_layout)
    return dict(channels_last=last, spatial_scale=number(op_name, "scale", scale),
                pooled_size=dims[1:3] if last else dims[2:4])


def roi_align(input: Value, input_layout: MemoryLayout, rois: Value, sampling_ratio: int,
              scale: float, output_dim, value_id: str | None = None, *, mode: str = "avg",
              half_pixel: bool = False) -> Value:
    """Bilinear ROI pooling of 4-d ``input`` over ``rois`` (num_rois, 5): batch index, x1, y1,
    x2, y2, scaled by ``scale``. ``sampling_ratio`` points per bin side (0: adaptive);
    ``mode`` "avg" or "max"; ``half_pixel`` shifts pixel coordinates by -0.5."""
    op = "ROIAlign"
    if mode not in ("avg", "max"):
        raise invalid(op, f"mode is {mode!r}; expected 'avg' or 'max'")
    attrs = _roi_attrs(op, input_layout, scale, output_dim)
    (attrs["sampling_ratio"],) = ints(op, "sampling_ratio", [sampling_ratio], 0)
    attrs.update(mode=mode, half_pixel=bool(half_pixel))
    return apply(op, {"input": input, "rois": rois}, attrs, value_id, output_dim)


def roi_max_pool(input: Value, input_layout: MemoryLayout, rois: Value, win_h: int, win_w: int,
                 scale: float, output_dim, value_id: str | None = None) -> Value:
    """Max ROI pooling of 4-d ``input`` over ``rois`` (num_rois, 5): batch index, x1, y1, x2,
    y2, scaled by ``scale``, into ``win_h`` x ``win_w`` bins."""
    op = "ROIMaxPool"
    attrs = _roi_attrs(op, input_layout, scale, output_dim)
    window = ints(op, "win_h, win_w", [win_h, win_w], 1)
    if window != attrs["pooled_size"]:
        raise invalid(op, f"win_h, win_w are {window}; output_dim {tuple(output_dim)} has "
                          f"bins {attrs['pooled_size']}")
    return apply(op, {"input": input, "rois": rois}, attrs, value_id, output_dim)


# -- recurrent networks ------------------------------------------------------------------------

def _rnn_attrs(op_name, weight_format, weight_dims, hidden_size, direction, outputs):
    (hidden,) = ints(op_name, "hidden_size", [hidden_size], 1)
    outputs = odla_enum(RnnOutputs, outputs, f"{op_name} outputs")
    return dict(
        weight_format=odla_enum(RnnWeightFormat, weight_format, f"{op_name} weight_format").name,
        weight_dims=None if weight_dims is None else ints(op_name, "weight_dims", weight_dims, 1),
        hidden_size=hidden,
        direction=odla_enum(RnnDirection, direction, f"{op_name} direction").name,
        hidden_state=outputs in (RnnOutputs.HIDDEN_STATE, RnnOutputs.HIDDEN_CELL_STATE),
        cell_state=outputs in (RnnOutputs.CELL_STATE, RnnOutputs.HIDDEN_CELL_STATE),
    )


def _gate_order(op_name, gate_order, allowed):
    order = odla_enum(RnnGateOrder, gate_order, f"{op_name} gate_order")
    if order not in allowed:
        raise invalid(op_name, f"gate_order is {order.name}; expected one of "
                               f"{', '.join(o.name for o in allowed)}")
    return order.name


_LSTM_ORDERS = (RnnGateOrder.IOFC, RnnGateOrder.IFCO, RnnGateOrder.IFOC, RnnGateOrder.ICOF)


def lstm(input: Value, weight_format: RnnWeightFormat, gate_order: RnnGateOrder, weight_dims,
         W: Value, R: Value, B: Value | None, sequence_lens: Value | None,
         initial_h: Value | None, initial_c: Value | None, P: Value | None, hidden_size: int,
         direction: RnnDirection, outputs: RnnOutputs, value_ids=None) -> list[Value]:
    """One LSTM layer over ``input`` (seq, batch, input). Weights as in ONNX: ``W``
    (directions, 4 hidden, input), ``R`` (directions, 4 hidden, hidden) in ``weight_format``
    and ``gate_order``; ``B`` (directions, 8 hidden: input then recurrence biases, or 4 hidden
    summed); ``P`` peepholes (directions, 3 hidden: input, output, forget). Returns the output
    sequence (seq, directions, batch, hidden), then the last hidden and/or cell state
    (directions, batch, hidden) as ``outputs`` asks."""
    op = "LSTM"
    attrs = _rnn_attrs(op, weight_format, weight_dims, hidden_size, direction, outputs)
    attrs["gate_order"] = _gate_order(op, gate_order, _LSTM_ORDERS)
    operands = {"input": input, "W": W, "R": R, "B": B, "sequence_lens": sequence_lens,
                "initial_h": initial_h, "initial_c": initial_c, "P": P}
    return apply_values(op, operands, attrs, value_ids)


def gru(input: Value, weight_format: RnnWeightFormat, gate_order: RnnGateOrder, weight_dims,
        W: Value, R: Value, B: Value | None, sequence_lens: Value | None,
        initial_h: Value | None, hidden_size: int, direction: RnnDirection,
        linear_before_reset: bool, outputs: RnnOutputs, value_ids=None) -> list[Value]:
    """One GRU layer (gates update, reset, hidden: ``gate_order`` URO); shapes as for
    ``lstm`` with 3 gates. Returns the output sequence, then the last hidden state when
    ``outputs`` asks for it."""
    op = "GRU"
    attrs = _rnn_attrs(op, weight_format, weight_dims, hidden_size, direction, outputs)
    attrs["gate_order"] = _gate_order(op, gate_order, (RnnGateOrder.URO,))
    attrs["linear_before_reset"] = bool(linear_before_reset)
    operands = {"input": input, "W": W, "R": R, "B": B, "sequence_lens": sequence_lens,
                "initial_h": initial_h}
    return apply_values(op, operands, attrs, value_ids)


def rnn(input: Value, weight_format: RnnWeightFormat, weight_dims, W: Value, R: Value,
        B: Value | None, sequence_lens: Value | None, initial_h: Value | None,
        hidden_size: int, direction: RnnDirection, outputs: RnnOutputs,
        value_ids=None) -> list[Value]:
    """One tanh RNN layer; shapes as for ``lstm`` with 1 gate. Returns the output sequence,
    then the last hidden state when ``outputs`` asks for it."""
    op = "RNN"
    attrs = _rnn_attrs(op, weight_format, weight_dims, hidden_size, direction, outputs)
    operands = {"input": input, "W": W, "R": R, "B": B, "sequence_lens": sequence_lens,
                "initial_h": initial_h}
    return apply_values(op, operands, attrs, value_ids)


# -- text and attention ------------------------------------------------------------------------

def tfidf_vectorize(input: Value, min_gram_length: int, max_gram_length: int,
                    max_skip_count: int, mode: TfIdfMode, pool: Value, gram_counts: Value,
                    output_indices: Value, weights: Value | None, output_shape,
                    value_id: str | None = None) -> Value:
    """Counts the n-grams of ``pool`` (constant integers; ``gram_counts``: where the n-grams
    of each length start) in each row of ``input``, as ONNX's TfIdfVectorizer; counts land at
    ``output_indices`` and are weighted by ``weights`` in IDF and TFIDF modes."""
    op = "TFIDFVectorize"
    lo, hi, skip = ints(op, "min_gram_length, max_gram_length, max_skip_count",
                        [min_gram_length, max_gram_length, max_skip_count], 0)
    if not 1 <= lo <= hi:
        raise invalid(op, f"gram lengths are {lo}..{hi}; expected 1 <= min <= max")
    attrs = dict(min_gram_length=lo, max_gram_length=hi, max_skip_count=skip,
                 mode=odla_enum(TfIdfMode, mode, "TFIDFVectorize mode").name)
    operands = {"input": input, "pool": pool, "gram_counts": gram_counts,
                "output_indices": output_indices, "weights": weights}
    return apply(op, operands, attrs, value_id, output_shape)


def multi_head_attention(input: Value, mask: Value | None, q_weight: Value, q_bias: Value,
                         k_weight: Value, k_bias: Value, v_weight: Value, v_bias: Value,
                         num_heads: int, filler: float = -10000.0,
                         value_id: str | None = None) -> Value:
    """Self-attention of ``input`` (batch, seq, hidden) with ``num_heads`` heads: projections
    ``input @ weight + bias``; ``mask`` (batch, seq), 0 at unused positions, adds ``filler``
    to their scores. Returns the heads' outputs concatenated (batch, seq, hidden)."""
    op = "MultiHeadAttention"
    (heads,) = ints(op, "num_heads", [num_heads], 1)
    operands = {"input": input, "mask": mask, "q_weight": q_weight, "q_bias": q_bias,
                "k_weight": k_weight, "k_bias": k_bias, "v_weight": v_weight, "v_bias": v_bias}
    return apply(op, operands, {"num_heads": heads, "filler": number(op, "filler", filler)},
                 value_id)


def negative_log_likeli_hood_loss(input: Value, gt: Value, ignored: int, reduction: ReductionMode,
                                  weight: Value | None = None, output_shape=None,
                                  value_id: str | None = None) -> Value:
    """Negative log likelihood of the labels ``gt`` (N, d...) under the log-probabilities
    ``input`` (N, C, d...), as ONNX's NegativeLogLikelihoodLoss: per element
    -input[n, gt[n, ...], ...] * weight[gt], 0 where gt equals ``ignored``; MEAN divides the
    sum by the weights of the labels counted."""
    op = "NegativeLogLikeliHoodLoss"
    (ignored,) = ints(op, "ignored", [ignored])
    mode = odla_enum(ReductionMode, reduction, f"{op} reduction")
    return apply(op, {"input": input, "gt": gt, "weight": weight},
                 {"ignored": ignored, "reduction": mode.name.lower()}, value_id, output_shape)
