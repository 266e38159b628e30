"""Converters of ONNX ops that map to ODLA's nn ops (odla_ops_nn.h)."""

from __future__ import annotations

import math

import numpy as np

from ... import ops
from ...types import (ElementType as E, MemoryLayout as L, ReductionMode, RnnDirection,
                      RnnGateOrder, RnnOutputs, RnnWeightFormat, TfIdfMode, ValueType as VT)
from .registry import Node, constant, converter, dims, rank, scalar, static_dims, widened

CF = L.CHANNELS_FIRST


# -- windows: convolution and pooling ----------------------------------------------------------

def _window_padding(node: Node, x, kernel, strides, dilations):
    """(front, back) paddings per spatial dim from ``pads`` or ``auto_pad``."""
    spatial = len(kernel)
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        return [0] * spatial, [0] * spatial
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        sizes = static_dims(node, x)[2:]
        totals = [max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
                  for n, k, s, d in zip(sizes, kernel, strides, dilations)]
        small = [t // 2 for t in totals]
        large = [t - h for t, h in zip(totals, small)]
        return (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    pads = node.attr("pads") or [0] * (2 * spatial)
    return list(pads[:spatial]), list(pads[spatial:])


def _window(node: Node, x, kernel_dims):
    spatial = rank(x) - 2
    kernel = list(node.attr("kernel_shape") or kernel_dims)
    strides = list(node.attr("strides") or [1] * spatial)
    dilations = list(node.attr("dilations") or [1] * spatial)
    front, back = _window_padding(node, x, kernel, strides, dilations)
    return kernel, strides, dilations, front, back


def convolution(node: Node, x, w, b=None, value_id=None):
    """ONNX's Conv of ``x`` and ``w`` by the node's window attributes."""
    _, strides, dilations, front, back = _window(node, x, dims(w)[2:])
    return ops.nn.conv(x, CF, node.attr("group", 1), w, L.OIS, strides, dilations, front, back,
                       bias=b, value_id=value_id)


@converter("Conv")
def conv(node: Node):
    return convolution(node, node.input(0), node.input(1), node.input(2), node.id)


@converter("ConvTranspose")
def conv_transpose(node: Node):
    x, w, b = node.input(0), node.input(1), node.input(2)
    group = node.attr("group")
    spatial = rank(x) - 2
    kernel = list(node.attr("kernel_shape") or dims(w)[2:])
    strides = list(node.attr("strides") or [1] * spatial)
    dilations = list(node.attr("dilations") or [1] * spatial)
    extra = list(node.attr("output_padding") or [0] * spatial)
    output_shape = node.attr("output_shape")
    auto_pad = node.attr("auto_pad", "NOTSET")
    sizes = dims(x)[2:]
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        sizes = static_dims(node, x)[2:]
        wanted = list(output_shape)[-spatial:] if output_shape else [n * s for n, s in
                                                                     zip(sizes, strides)]
        totals = [s * (n - 1) + e + (k - 1) * d + 1 - o
                  for n, s, e, k, d, o in zip(sizes, strides, extra, kernel, dilations, wanted)]
        if auto_pad == "SAME_UPPER":
            front = [t // 2 for t in totals]
        else:
            front = [t - t // 2 for t in totals]
        back = [t - f for t, f in zip(totals, front)]
    else:
        front, back = _window_padding(node, x, kernel, strides, dilations)
    # A negative back padding (an output_shape past the natural size) is more output.
    extra = [e - min(b, 0) for e, b in zip(extra, back)]
    back = [max(b, 0) for b in back]
    if any(f < 0 for f in front):
        raise node.unsupported(f"front paddings {front} are negative")
    output_dims = None
    if any(extra):
        natural = [s * (n - 1) + (k - 1) * d + 1 - f - bk for n, s, k, d, f, bk in
                   zip(static_dims(node, x)[2:], strides, kernel, dilations, front, back)]
        output_dims = [dims(x)[0], dims(w)[1] * group] + [n + e for n, e in zip(natural, extra)]
    return ops.nn.de_conv(x, CF, group, w, L.IOS, strides, dilations, front, back, bias=b,
                          output_dims=output_dims, value_id=node.id)


def _ceil_mode_padding(node: Node, x, kernel, strides, dilations, front, back):
    """Back paddings grown so that a window covers the input's tail (ONNX ceil_mode)."""
    if not node.attr("ceil_mode", 0):
        return back
    grown = []
    for n, k, s, d, f, b in zip(static_dims(node, x)[2:], kernel, strides, dilations, front, back):
        extent = (k - 1) * d + 1
        count = math.ceil((n + f + b - extent) / s) + 1
        if (count - 1) * s >= n + f:  # the last window would start in the padding
            count -= 1
        grown.append(b + max((count - 1) * s + extent - (n + f + b), 0))
    return grown


class _PoolWindow:
    """A pooling node's window: kernel, strides, dilations and paddings, the back paddings
    grown for ceil_mode (``back``) and as declared (``declared_back``)."""

    def __init__(self, node: Node):
        self.x = node.input(0)
        self.kernel, self.strides, self.dilations, self.front, self.declared_back = \
            _window(node, self.x, None)
        self.back = _ceil_mode_padding(node, self.x, self.kernel, self.strides, self.dilations,
                                       self.front, self.declared_back)

    @property
    def dilated(self) -> bool:
        return any(d != 1 for d in self.dilations)

    def parts(self, node: Node, x, fill):
        """Per kernel offset, the strided slice of the padded ``x`` that meets that offset of
        every window, and the slices of the padded spatial grid it takes; the padding holds
        ``fill``. Composed pooling serves what ODLA's pools cannot say (dilations, indices,
        ceil_mode with padding counted)."""
        shape = static_dims(node, x)
        counts = [(f + n + b - (k - 1) * d - 1) // s + 1 for f, n, b, k, d, s in
                  zip(self.front, shape[2:], self.back, self.kernel, self.dilations,
                      self.strides)]
        # Offsets whose every window position lies in ceil_mode's overhang (past the input
        # and its declared padding) add only the fill: skipped, so a kernel far larger than
        # its input (transformers' EfficientNet pools 7x7 with a 1280x1280 window) costs
        # what its input has, not millions of slices; and the padding stops where the last
        # slice ends, not gigabytes of zeros further.
        reach = [min(k, -(-(f + n + b) // d)) for k, f, n, b, d in
                 zip(self.kernel, self.front, shape[2:], self.declared_back, self.dilations)]
        back = [min(b, max(0, (r - 1) * d + (c - 1) * s + 1 - f - n)) for b, r, d, c, s, f, n in
                zip(self.back, reach, self.dilations, counts, self.strides, self.front,
                    shape[2:])]
        inside = np.pad(np.ones(shape[2:], bool), list(zip(self.front, back)))
        padded = ops.process.pad(x, [0, 0, *self.front], [0, 0, *back])
        if fill != 0:
            padded = ops.math.select(constant(inside), padded, scalar(x, fill))
        for offset in np.ndindex(*reach):
            begin = [o * d for o, d in zip(offset, self.dilations)]
            end = [b + (c - 1) * s + 1 for b, c, s in zip(begin, counts, self.strides)]
            part = ops.process.slice(padded, [0, 0, *begin], [*shape[:2], *end],
                                     [1, 1, *self.strides])
            yield part, tuple(slice(b, e, s) for b, e, s in zip(begin, end, self.strides))

    def pool(self, node: Node, x, combine, fill):
        """The slices of ``parts`` folded by ``combine``, and per output cell how many input
        cells its window covers and how many input or declared padding cells (not the
        overhang ceil_mode adds)."""
        spatial = static_dims(node, x)[2:]
        inputs = np.pad(np.ones(spatial), list(zip(self.front, self.back)))
        declared = np.pad(np.ones([n + f + d for n, f, d in zip(spatial, self.front,
                                                                self.declared_back)]),
                          [(0, b - d) for b, d in zip(self.back, self.declared_back)])
        result, input_cells, declared_cells = None, 0, 0
        for part, window in self.parts(node, x, fill):
            result = part if result is None else combine(result, part)
            input_cells = input_cells + inputs[window]
            declared_cells = declared_cells + declared[window]
        return result, input_cells, declared_cells

    def max_with_indices(self, node: Node):
        """Max pooling and, per output, the flat index into the input of its (first)
        largest element, counted row-major (or column-major by ``storage_order``)."""
        shape = static_dims(node, self.x)
        positions = np.indices(shape)
        # Each input cell's flat index, laid out on the padded grid (padding never wins).
        flat = np.ravel_multi_index(positions, shape,
                                    order="F" if node.attr("storage_order", 0) else "C")
        flat = np.pad(flat, [(0, 0), (0, 0)] + list(zip(self.front, self.back)))
        best, index = None, None
        for part, window in self.parts(node, self.x, -np.inf):
            where = constant(flat[(slice(None), slice(None)) + window].astype(np.int64))
            if best is None:
                best, index = part, where
                continue
            better = ops.math.greater(part, best)
            best, index = ops.math.select(better, part, best), ops.math.select(better, where, index)
        return best, index


def _averaged(node: Node, w: _PoolWindow, total, input_cells, declared_cells, value_id=None):
    divisor = declared_cells if node.attr("count_include_pad", 0) else input_cells
    return ops.math.div(total, constant(divisor.astype(w.x.type.dtype)), value_id=value_id)


@converter("MaxPool")
def max_pool(node: Node):
    w = _PoolWindow(node)
    if node.wants(1):
        values, indices = w.max_with_indices(node)
        return [ops.process.cast(values, values.element_type, value_id=node.id),
                ops.process.cast(indices, indices.element_type, value_id=node.ids[1])]
    if w.dilated:
        result, _, _ = w.pool(node, w.x, ops.math.max, -np.inf)
        return ops.process.cast(result, result.element_type, value_id=node.id)
    return ops.nn.max_pool(w.x, CF, w.kernel, w.strides, w.front, w.back, value_id=node.id)


@converter("AveragePool")
def average_pool(node: Node):
    w = _PoolWindow(node)
    include = bool(node.attr("count_include_pad", 0))
    if w.dilated or (include and w.back != w.declared_back):
        return _averaged(node, w, *w.pool(node, w.x, ops.math.add, 0), value_id=node.id)
    return ops.nn.average_pool(w.x, CF, w.kernel, w.strides, w.front, w.back, include,
                               value_id=node.id)


@converter("LpPool")
def lp_pool(node: Node):
    w = _PoolWindow(node)
    x = w.x
    p = float(node.attr("p"))
    powered = ops.math.pow(ops.math.abs(x), scalar(x, p))
    if w.dilated or w.back != w.declared_back:
        window_sum, _, _ = w.pool(node, powered, ops.math.add, 0)
    else:
        window_sum = ops.math.mul(ops.nn.average_pool(powered, CF, w.kernel, w.strides, w.front,
                                                      w.back, True),
                                  scalar(x, float(np.prod(w.kernel))))
    return ops.math.pow(window_sum, scalar(x, 1.0 / p), value_id=node.id)


def _global_pool(op):
    def convert(node: Node):
        x = node.input(0)
        axes = list(range(2, rank(x)))
        return op(x, len(axes), axes, True, value_id=node.id)

    return convert


converter("GlobalAveragePool")(_global_pool(ops.math.reduce_mean))
converter("GlobalMaxPool")(_global_pool(ops.math.reduce_max))


@converter("MaxRoiPool")
def max_roi_pool(node: Node):
    x, rois = node.inputs
    height, width = node.attr("pooled_shape")
    output_dim = (dims(rois)[0], dims(x)[1], height, width)
    return ops.nn.roi_max_pool(x, CF, rois, height, width, node.attr("spatial_scale"), output_dim,
                               value_id=node.id)


@converter("RoiAlign")
def roi_align(node: Node):
    x, rois, batch_indices = node.inputs
    batch_column = ops.process.reshape(ops.process.cast(batch_indices, rois.element_type), (-1, 1))
    rois_with_batch = ops.process.concat([batch_column, rois], 1)
    height, width = node.attr("output_height"), node.attr("output_width")
    output_dim = (dims(rois)[0], dims(x)[1], height, width)
    return ops.nn.roi_align(x, CF, rois_with_batch, node.attr("sampling_ratio"),
                            node.attr("spatial_scale"), output_dim, value_id=node.id,
                            mode=node.attr("mode"),
                            half_pixel=node.attr("coordinate_transformation_mode") == "half_pixel")


# -- activations -------------------------------------------------------------------------------

def _activation(op, *attr_names):
    def convert(node: Node):
        return op(node.input(0), *(node.attr(a) for a in attr_names), value_id=node.id)

    return convert


for _op_type, _op, _attrs in (
    ("Relu", ops.nn.relu, ()), ("Sigmoid", ops.nn.sigmoid, ()), ("Softplus", ops.nn.softplus, ()),
    ("Softsign", ops.nn.softsign, ()), ("HardSwish", ops.nn.hard_swish, ()),
    ("Elu", ops.nn.elu, ("alpha",)), ("Celu", ops.nn.celu, ("alpha",)),
    ("LeakyRelu", ops.nn.leaky_relu, ("alpha",)),
    ("ThresholdedRelu", ops.nn.thresholded_relu, ("alpha",)),
    ("Selu", ops.nn.selu, ("alpha", "gamma")),
    ("HardSigmoid", ops.nn.hard_sigmoid, ("alpha", "beta")),
    ("Shrink", ops.nn.shrink, ("bias", "lambd")), ("Swish", ops.nn.swish, ("alpha",)),
):
    converter(_op_type)(_activation(_op, *_attrs))


@converter("Gelu")
def gelu(node: Node):
    return ops.nn.gelu(node.input(0), node.attr("approximate") == "tanh", value_id=node.id)


@converter("PRelu")
def prelu(node: Node):
    return ops.nn.prelu(node.input(0), node.input(1), value_id=node.id)


@converter("Mish")
def mish(node: Node):
    x = node.input(0)
    return ops.math.mul(x, ops.math.tanh(ops.nn.softplus(x)), value_id=node.id)


def _softmax_like(op):
    """Softmax, LogSoftmax and Hardmax: before opset 13 over the input coerced to 2-d at
    ``axis``, from 13 on along ``axis``."""
    def convert(node: Node):
        x = node.input(0)
        axis = node.attr("axis") % max(rank(x), 1)
        if node.opset >= 13 or axis == rank(x) - 1:
            return op(x, axis, value_id=node.id)
        shape = static_dims(node, x)
        flat = ops.process.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
        return ops.process.reshape(op(flat, 1), shape, value_id=node.id)

    return convert


converter("Softmax")(_softmax_like(ops.nn.softmax))
converter("LogSoftmax")(_softmax_like(ops.nn.log_softmax))
converter("Hardmax")(_softmax_like(ops.nn.hardmax))


# -- normalizations ----------------------------------------------------------------------------

@converter("BatchNormalization")
def batch_normalization(node: Node):
    if node.opset < 9 and node.attr("spatial", 1) == 0:
        raise node.unsupported("spatial=0 (per-activation statistics)")
    x, scale, offset, mean, var = node.inputs[:5]
    if not node.attr("training_mode", 0):
        return ops.nn.batch_normalization(x, CF, mean, var, node.attr("epsilon"), scale, offset,
                                          value_id=node.id)
    # Training: normalized by the batch's statistics, which also update the running ones.
    axes = [0] + list(range(2, rank(x)))
    batch_mean = ops.math.reduce_mean(x, len(axes), axes, False)
    centered = ops.math.sub(x, ops.process.reshape(batch_mean, [-1] + [1] * (rank(x) - 2)))
    batch_var = ops.math.reduce_mean(ops.math.mul(centered, centered), len(axes), axes, False)
    y = ops.nn.batch_normalization(x, CF, batch_mean, batch_var, node.attr("epsilon"), scale,
                                   offset, value_id=node.id)
    momentum = node.attr("momentum")

    def running(old, new, index):
        return ops.math.add(ops.math.mul(old, scalar(old, momentum)),
                            ops.math.mul(new, scalar(new, 1 - momentum)),
                            value_id=node.ids[index] if node.wants(index) else None)

    return [y, running(mean, batch_mean, 1), running(var, batch_var, 2)]


@converter("InstanceNormalization")
def instance_normalization(node: Node):
    x, scale, offset = node.inputs
    return ops.nn.instance_normalization(x, CF, node.attr("epsilon"), scale, offset,
                                         value_id=node.id)


@converter("GroupNormalization")
def group_normalization(node: Node):
    x, scale, offset = node.inputs
    groups = node.attr("num_groups")
    if node.opset < 21:  # scale and bias per group, not yet per channel
        repeats = dims(x)[1] // groups
        scale, offset = (constant(np.repeat(node.array(i), repeats)) for i in (1, 2))
    return ops.nn.group_normalization(x, CF, groups, node.attr("epsilon"), scale, offset,
                                      value_id=node.id)


@converter("LRN")
def lrn(node: Node):
    return ops.nn.lrn(node.input(0), CF, node.attr("size"), node.attr("alpha"), node.attr("beta"),
                      node.attr("bias"), value_id=node.id)


@converter("LpNormalization")
def lp_normalization(node: Node):
    return ops.nn.lp_normalize(node.input(0), node.attr("p"), CF, 1, [node.attr("axis")], 0.0,
                               value_id=node.id)


@converter("MeanVarianceNormalization")
def mean_variance_normalization(node: Node):
    axes = node.attr("axes")
    return ops.nn.layer_norm(node.input(0), len(axes), axes, 0.0, value_id=node.id)


@converter("LayerNormalization")
def layer_normalization(node: Node):
    x, scale, offset = node.input(0), node.input(1), node.input(2)
    axis = node.attr("axis") % rank(x)
    axes = list(range(axis, rank(x)))
    epsilon = node.attr("epsilon")
    y = ops.nn.layer_norm(x, len(axes), axes, epsilon, scale, offset, value_id=node.id)
    if not (node.wants(1) or node.wants(2)):
        return y
    mean = ops.math.reduce_mean(x, len(axes), axes, True, value_id=node.ids[1] or None)
    centered = ops.math.sub(x, mean)
    variance = ops.math.reduce_mean(ops.math.mul(centered, centered), len(axes), axes, True)
    inv_std = ops.math.rsqrt(ops.math.add(variance, scalar(x, epsilon)),
                             value_id=node.ids[2] if node.wants(2) else None)
    return [y, mean, inv_std]


@converter("RMSNormalization")
def rms_normalization(node: Node):
    x, scale = node.input(0), node.input(1)
    axis = node.attr("axis") % rank(x)
    axes = list(range(axis, rank(x)))
    mean_square = ops.math.reduce_mean(ops.math.mul(x, x), len(axes), axes, True)
    inv_rms = ops.math.rsqrt(ops.math.add(mean_square, scalar(x, node.attr("epsilon"))))
    return ops.math.mul(ops.math.mul(x, inv_rms), scale, value_id=node.id)


@converter("Dropout")
def dropout(node: Node):
    x = node.input(0)
    training = bool(node.array(2, False))
    if training and float(node.array(1, np.float32(0.5))) != 0:
        raise node.unsupported("training mode; ODLA has no random dropout")
    results = [x]
    if node.wants(1):
        shape = static_dims(node, x)
        results.append(node.constant_output(np.ones(shape, bool), 1))
    return results


# -- selection and detection -------------------------------------------------------------------

@converter("TopK")
def topk(node: Node):
    x = node.input(0)
    k = node.attr("k") if node.opset < 10 else int(node.array(1).reshape(-1)[0])
    return ops.nn.topk(x, k, node.attr("largest", 1), node.attr("sorted", 1), node.attr("axis"),
                       x.type, VT(E.INT64, ()), [i or None for i in node.ids][:2])


@converter("NonMaxSuppression")
def non_max_suppression(node: Node):
    boxes, scores = node.input(0), node.input(1)
    max_per_class = int(node.array(2, np.zeros(1)).reshape(-1)[0])
    iou = float(node.array(3, np.zeros(1)).reshape(-1)[0])
    score = float(node.array(4, np.array([-np.inf])).reshape(-1)[0])
    if max_per_class == 0:
        return node.constant_output(np.zeros((0, 3), np.int64))
    if node.attr("center_point_box"):  # (x center, y center, width, height) to corners
        center = ops.process.slice(boxes, (0, 0, 0), (*dims(boxes)[:2], 2), (1, 1, 1))
        size = ops.process.slice(boxes, (0, 0, 2), (*dims(boxes)[:2], 4), (1, 1, 1))
        half = ops.math.mul(size, scalar(boxes, 0.5))
        corners = ops.process.concat([ops.math.sub(center, half), ops.math.add(center, half)], 2)
        boxes = ops.process.gather(corners, constant(np.array([1, 0, 3, 2], np.int64)), 2)
    return ops.nn.nms(boxes, scores, max_per_class, iou, score, VT(E.INT64, (-1, 3)),
                      value_id=node.id)


# -- recurrent layers --------------------------------------------------------------------------
_DIRECTIONS = {"forward": RnnDirection.FORWARD, "reverse": RnnDirection.REVERSE,
               "bidirectional": RnnDirection.BIDIRECTIONAL}
_DEFAULT_ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"],
                        "RNN": ["Tanh"]}


def _recurrent(node: Node, build):
    """Checks what ODLA's recurrent layers cannot express, runs ``build(x, outputs, ids)``
    on the sequence-major input and brings the results back to the node's layout."""
    direction = _DIRECTIONS[node.attr("direction")]
    defaults = _DEFAULT_ACTIVATIONS[node.op_type]
    activations = [a.decode() for a in node.attr("activations") or ()]
    if activations and activations != defaults * (len(activations) // len(defaults)):
        raise node.unsupported(f"activations {activations}; ODLA uses {defaults}")
    if node.attr("clip") is not None or node.attr("input_forget", 0) or node.attr("activation_alpha"):
        raise node.unsupported("clip, input_forget or activation parameters")
    batch_major = node.attr("layout", 0) == 1
    x = node.input(0)
    if batch_major:
        x = ops.process.transpose(x, (1, 0, 2))
    state_outputs = [node.wants(i) for i in range(1, len(node.ids))]
    wanted = RnnOutputs.HIDDEN_STATE if any(state_outputs) else RnnOutputs.NO_STATE
    if node.op_type == "LSTM" and len(state_outputs) > 1 and state_outputs[1]:
        wanted = RnnOutputs.HIDDEN_CELL_STATE
    results = build(x, direction, wanted)
    if batch_major:
        results = [ops.process.transpose(results[0], (2, 0, 1, 3))] + \
                  [ops.process.transpose(r, (1, 0, 2)) for r in results[1:]]
    return results


def _rnn_initial(node: Node, index: int):
    value = node.input(index)
    if value is not None and node.attr("layout", 0) == 1:
        value = ops.process.transpose(value, (1, 0, 2))
    return value


@converter("LSTM")
def lstm(node: Node):
    w, r = node.input(1), node.input(2)
    return _recurrent(node, lambda x, direction, outputs: ops.nn.lstm(
        x, RnnWeightFormat.LDGOI, RnnGateOrder.IOFC, dims(w), w, r, node.input(3),
        node.input(4), _rnn_initial(node, 5), _rnn_initial(node, 6), node.input(7),
        node.attr("hidden_size"), direction, outputs))


@converter("GRU")
def gru(node: Node):
    w, r = node.input(1), node.input(2)
    return _recurrent(node, lambda x, direction, outputs: ops.nn.gru(
        x, RnnWeightFormat.LDGOI, RnnGateOrder.URO, dims(w), w, r, node.input(3),
        node.input(4), _rnn_initial(node, 5), node.attr("hidden_size"), direction,
        node.attr("linear_before_reset", 0), outputs))


@converter("RNN")
def rnn(node: Node):
    w, r = node.input(1), node.input(2)
    return _recurrent(node, lambda x, direction, outputs: ops.nn.rnn(
        x, RnnWeightFormat.LDGOI, dims(w), w, r, node.input(3), node.input(4),
        _rnn_initial(node, 5), node.attr("hidden_size"), direction, outputs))


# -- text --------------------------------------------------------------------------------------
_TFIDF_MODES = {"TF": TfIdfMode.TF, "IDF": TfIdfMode.IDF, "TFIDF": TfIdfMode.TFIDF}


@converter("TfIdfVectorizer")
def tfidf_vectorizer(node: Node):
    if node.attr("pool_strings"):
        raise node.unsupported("pool_strings; ODLA tensors hold no strings")

    x = node.input(0)
    indices = list(node.attr("ngram_indexes"))
    weights = node.attr("weights")
    size = max(indices) + 1
    output_shape = (dims(x)[0], size) if rank(x) == 2 else (size,)
    return ops.nn.tfidf_vectorize(
        x, node.attr("min_gram_length"), node.attr("max_gram_length"),
        node.attr("max_skip_count"), _TFIDF_MODES[node.attr("mode")],
        constant(np.int64(node.attr("pool_int64s"))), constant(np.int64(node.attr("ngram_counts"))),
        constant(np.int64(indices)), constant(np.float32(weights)) if weights else None,
        output_shape, value_id=node.id)


# -- losses ------------------------------------------------------------------------------------
_REDUCTIONS = {"none": ReductionMode.NONE, "mean": ReductionMode.MEAN,
               "sum": ReductionMode.SUM}
# A label no class has: ONNX's "no ignore_index".
_NO_IGNORED_LABEL = np.iinfo(np.int32).min


def _negative_log_likelihood(node: Node, log_probabilities, value_id):
    ignored = node.attr("ignore_index")
    return ops.nn.negative_log_likeli_hood_loss(
        log_probabilities, node.input(1), _NO_IGNORED_LABEL if ignored is None else ignored,
        _REDUCTIONS[node.attr("reduction")], node.input(2), value_id=value_id)


@converter("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(node: Node):
    return _negative_log_likelihood(node, node.input(0), node.id)


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(node: Node):
    log_probabilities = ops.nn.log_softmax(node.input(0), 1,
                                           value_id=node.ids[1] if node.wants(1) else None)
    return [_negative_log_likelihood(node, log_probabilities, node.id), log_probabilities]


@converter("SwiGLU")
def swiglu(node: Node):
    gate, linear = node.input(0), node.input(1)
    return ops.math.mul(ops.nn.swish(gate, node.attr("alpha", 1.0)), linear, value_id=node.id)


@converter("CausalConvWithState")
def causal_conv_with_state(node: Node):
    """A depthwise 1-d convolution over the past state followed by the input; the new state
    is the last (kernel - 1) positions of that sequence."""
    x = node.input(0)
    batch, channels, _ = static_dims(node, x)
    kernel = dims(node.input(1))[2]
    past = node.input(3)
    if past is None:
        past = constant(np.zeros((batch, channels, kernel - 1), x.type.dtype))
    sequence = ops.process.concat([past, x], 2)
    # 16-bit floats in float32, as onnxruntime computes them.
    y = ops.nn.conv(widened(sequence), CF, channels, widened(node.input(1)), L.OIS, [1], [1],
                    [0], [0], bias=widened(node.input(2)))
    if node.attr("activation", "none") in ("silu", "swish"):
        y = ops.nn.swish(y)
    output = ops.process.cast(y, x.element_type, value_id=node.id)
    length = dims(sequence)[2]
    state = ops.process.slice(sequence, [0, 0, length - (kernel - 1)], [batch, channels, length],
                              [1, 1, 1], value_id=node.ids[1] if node.wants(1) else None)
    return [output, state]


@converter("AffineGrid")
def affine_grid(node: Node):
    """theta (N, 2, 3) or (N, 3, 4) applied to the evenly spaced positions of a grid of
    ``size``: one matrix product with a constant grid in homogeneous coordinates."""
    theta = node.input(0)
    spatial = [int(n) for n in node.array(1)[2:]]
    align = node.attr("align_corners", 0)

    def positions(n):
        return np.linspace(-1, 1, n) if align else (np.arange(n) * 2 + 1) / n - 1

    # x varies fastest, along the last spatial axis; then y (then z).
    axes = np.meshgrid(*[positions(n) for n in spatial], indexing="ij")
    grid = np.stack([a.reshape(-1) for a in reversed(axes)] + [np.ones(int(np.prod(spatial)))],
                    axis=1)[None].astype(theta.type.dtype)
    points = ops.math.batch_mat_mul(constant(grid), False, theta, True)
    return ops.process.reshape(points, [dims(theta)[0], *spatial, len(spatial)], value_id=node.id)
