"""Lowerings of ODLA's nn ops (odla_ops_nn.h)."""

from __future__ import annotations

import itertools

import numpy as np
from tvm import relax, tirx, topi
from tvm.ir.expr import Constant
from tvm.relax import op as R

from ..errors import LoweringError
from ..registry import register
from .common import accumulation_dtype, checked_verdict, dim_verdict, narrowed, widened
from .layout import (
    check_window,
    data_layout,
    kernel_layout,
    kernel_permutation,
    spatial_dims,
    spatial_rank,
    to_channels_first_order,
    to_channels_last_order,
)

_CONV = {1: R.nn.conv1d, 2: R.nn.conv2d, 3: R.nn.conv3d}
_CONV_TRANSPOSE = {1: R.nn.conv1d_transpose, 2: R.nn.conv2d_transpose, 3: R.nn.conv3d_transpose}
_MAX_POOL = {1: R.nn.max_pool1d, 2: R.nn.max_pool2d, 3: R.nn.max_pool3d}
_AVG_POOL = {1: R.nn.avg_pool1d, 2: R.nn.avg_pool2d, 3: R.nn.avg_pool3d}


def _add_channel_bias(emit, y, bias, rank, channels_last):
    """Adds a per-channel vector along the channel axis of ``y``."""
    if bias is None:
        return y
    if not channels_last:
        bias = emit(R.reshape(bias, [-1] + [1] * rank))
    return emit(R.add(y, bias))


def _kernel_spatial(kernel, rank, layout):
    start = 0 if layout.startswith("S") else 2
    return [int(d) for d in kernel.ty.shape.values[start : start + rank]]


@register("Conv")
def conv(emit, x, kernel, bias, *, channels_last, kernel_layout_name, group, strides,
         dilations, paddings_front, paddings_back):
    rank = spatial_rank(x)
    check_window(spatial_dims(x, channels_last), _kernel_spatial(kernel, rank, kernel_layout_name),
                 strides, dilations, paddings_front, paddings_back)
    y = emit(_CONV[rank](
        x, kernel, strides=tuple(strides), padding=tuple(paddings_front) + tuple(paddings_back),
        dilation=tuple(dilations), groups=group,
        data_layout=data_layout(rank, channels_last),
        kernel_layout=kernel_layout(rank, kernel_layout_name), out_dtype=accumulation_dtype(x),
    ))
    y = narrowed(emit, y, str(x.ty.dtype))
    return _add_channel_bias(emit, y, bias, rank, channels_last)


def _output_padding(natural, output_dims, channels_last, strides, dilations):
    """The output padding that grows the natural channels-first output of a transposed
    convolution to ODLA's ``output_dims`` (given in the input's layout)."""
    rank = len(natural) - 2
    natural = [int(n) for n in natural]
    out_spatial = output_dims[1:-1] if channels_last else output_dims[2:]
    extra = [int(o) - n for o, n in zip(out_spatial, natural[2:])]
    if any(e < 0 or e >= max(s, d) for e, s, d in zip(extra, strides, dilations)):
        if channels_last:
            natural = [natural[i] for i in to_channels_last_order(rank)]
        raise LoweringError(
            f"output_dims {tuple(output_dims)} cannot be reached; the natural output is "
            f"{tuple(natural)} and output padding must be below the stride"
        )
    return tuple(extra)


@register("DeConv")
def deconv(emit, x, kernel, bias, *, channels_last, kernel_layout_name, group, strides,
           dilations, paddings_front, paddings_back, output_dims):
    rank = spatial_rank(x)
    # TOPI lowers transposed convolutions only for channels-first data and IOS kernels,
    # so other layouts are permuted to those and the result back.
    if channels_last:
        x = emit(R.permute_dims(x, to_channels_first_order(rank)))
    if kernel_layout_name != "IOS":
        kernel = emit(R.permute_dims(kernel, kernel_permutation(rank, kernel_layout_name, "IOS")))
    op = _CONV_TRANSPOSE[rank]
    args = dict(strides=tuple(strides), padding=tuple(paddings_front) + tuple(paddings_back),
                dilation=tuple(dilations), groups=group, data_layout=data_layout(rank, False),
                kernel_layout=kernel_layout(rank, "IOS"))
    if output_dims is not None:
        # ODLA gives the output shape; TVM wants the extra output padding that yields it.
        natural = emit(op(x, kernel, **args)).ty.shape.values
        args["output_padding"] = _output_padding(natural, output_dims, channels_last, strides,
                                                 dilations)
    y = emit(op(x, kernel, **args))
    if channels_last:
        y = emit(R.permute_dims(y, to_channels_last_order(rank)))
    return _add_channel_bias(emit, y, bias, rank, channels_last)


@register("BatchNormalization")
def batch_normalization(emit, x, mean, var, scale, offset, *, channels_last, epsilon,
                        scalar_scale, scalar_offset):
    rank = x.ty.ndim - 2
    dtype = x.ty.dtype
    # y = (x - mean) * scale / sqrt(var + eps) + offset, with the per-channel factor and shift
    # computed once: here when the parameters are constants (an inference model's are), else
    # in the graph.
    scale = scale if scale is not None else relax.const(scalar_scale, dtype)
    offset = offset if offset is not None else relax.const(scalar_offset, dtype)
    per_channel = [-1] + [1] * rank if not channels_last and rank > 0 else None
    folded = _folded_batch_norm(mean, var, scale, offset, epsilon, str(dtype), per_channel)
    if folded is not None:
        factor, shift = folded
    else:
        inv_std = emit(R.rsqrt(emit(R.add(var, relax.const(epsilon, dtype)))))
        factor = emit(R.multiply(scale, inv_std))
        shift = emit(R.subtract(offset, emit(R.multiply(mean, factor))))
        if per_channel:
            factor = emit(R.reshape(factor, per_channel))
            shift = emit(R.reshape(shift, per_channel))
    return emit(R.add(emit(R.multiply(x, factor)), shift))


def _folded_batch_norm(mean, var, scale, offset, epsilon, dtype, shape):
    """The factor and shift of a batch norm whose parameters are all constants, computed in
    float64, rounded once and reshaped to ``shape`` (None: as they are), as constants; None
    otherwise. Without this, every run would recompute them: TVM's default build does not
    fold constants."""
    parameters = (mean, var, scale, offset)
    if not all(isinstance(p, Constant) for p in parameters) or dtype not in ("float32", "float64"):
        return None
    m, v, s, o = (p.value.numpy().astype(np.float64) for p in parameters)
    factor = s / np.sqrt(v + epsilon)
    shift = o - m * factor
    common = np.broadcast_shapes(factor.shape, shift.shape)
    factor, shift = np.broadcast_to(factor, common), np.broadcast_to(shift, common)
    if shape is not None:
        factor, shift = factor.reshape(shape), shift.reshape(shape)
    return relax.const(factor.astype(dtype), dtype), relax.const(shift.astype(dtype), dtype)


def _pool(emit, pool_ops, x, channels_last, window, strides, paddings_front, paddings_back, **extra):
    rank = spatial_rank(x)
    check_window(spatial_dims(x, channels_last), window, strides, [1] * rank,
                 paddings_front, paddings_back)
    return pool_ops[rank](
        x, pool_size=tuple(window), strides=tuple(strides),
        padding=tuple(paddings_front) + tuple(paddings_back),
        layout=data_layout(rank, channels_last), **extra,
    )


@register("MaxPool")
def max_pool(emit, x, *, channels_last, window, strides, paddings_front, paddings_back):
    return _pool(emit, _MAX_POOL, x, channels_last, window, strides, paddings_front, paddings_back)


@register("AveragePool")
def average_pool(emit, x, *, channels_last, window, strides, paddings_front, paddings_back,
                 padding_included):
    return _pool(emit, _AVG_POOL, x, channels_last, window, strides, paddings_front,
                 paddings_back, count_include_pad=padding_included)


@register("Relu")
def relu(emit, x):
    return R.nn.relu(x)


@register("LeakyRelu")
def leaky_relu(emit, x, *, alpha):
    return R.nn.leakyrelu(x, alpha)


@register("Sigmoid")
def sigmoid(emit, x):
    return R.sigmoid(x)


@register("Gelu")
def gelu(emit, x, *, use_approx):
    return R.nn.gelu_tanh(x) if use_approx else R.nn.gelu(x)


def _softmax_like(relax_op):
    """``relax_op`` over ``axis``, computed in the accumulation dtype and rounded once."""
    def lower(emit, x, *, axis):
        return narrowed(emit, emit(relax_op(widened(emit, x), axis)), str(x.ty.dtype))

    return lower


register("Softmax")(_softmax_like(R.nn.softmax))
register("LogSoftmax")(_softmax_like(R.nn.log_softmax))


# -- element-wise activations ------------------------------------------------------------------

def _const(x, value):
    """A scalar in ``x``'s dtype (relax.const alone would pick float32 or int32)."""
    return relax.const(value, str(x.ty.dtype))


def _hard_sigmoid(emit, x, alpha, beta):
    linear = emit(R.add(emit(R.multiply(x, _const(x, alpha))), _const(x, beta)))
    return emit(R.minimum(emit(R.maximum(linear, _const(x, 0.0))), _const(x, 1.0)))


@register("Celu")
def celu(emit, x, *, alpha):
    expm1 = emit(R.subtract(emit(R.exp(emit(R.divide(x, _const(x, alpha))))), _const(x, 1.0)))
    negative = emit(R.minimum(emit(R.multiply(expm1, _const(x, alpha))), _const(x, 0.0)))
    return R.add(emit(R.maximum(x, _const(x, 0.0))), negative)


@register("Elu")
def elu(emit, x, *, alpha):
    expm1 = emit(R.subtract(emit(R.exp(x)), _const(x, 1.0)))
    negative = emit(R.multiply(expm1, _const(x, alpha)))
    return R.where(emit(R.less(x, _const(x, 0.0))), negative, x)


@register("HardSigmoid")
def hard_sigmoid(emit, x, *, alpha, beta):
    return _hard_sigmoid(emit, x, alpha, beta)


@register("HardSwish")
def hard_swish(emit, x):
    return R.multiply(x, _hard_sigmoid(emit, x, 1.0 / 6.0, 0.5))


@register("Swish")
def swish(emit, x, *, alpha):
    scaled = x if alpha == 1.0 else emit(R.multiply(x, _const(x, alpha)))
    return R.multiply(x, emit(R.sigmoid(scaled)))


@register("Selu")
def selu(emit, x, *, alpha, gamma):
    negative = emit(R.multiply(emit(R.subtract(emit(R.exp(x)), _const(x, 1.0))),
                               _const(x, alpha * gamma)))
    positive = emit(R.multiply(x, _const(x, gamma)))
    return R.where(emit(R.less_equal(x, _const(x, 0.0))), negative, positive)


@register("Shrink")
def shrink(emit, x, *, bias, lambd):
    below = emit(R.where(emit(R.less(x, _const(x, -lambd))), emit(R.add(x, _const(x, bias))),
                         _const(x, 0)))
    return R.where(emit(R.greater(x, _const(x, lambd))), emit(R.subtract(x, _const(x, bias))),
                   below)


@register("Softplus")
def softplus(emit, x):
    # max(x, 0) + log1p(exp(-|x|)); Relax has no log1p, so log(u) * e / (u - 1) with
    # u = 1 + e keeps its precision where e is small (Goldberg's trick).
    e = emit(R.exp(emit(R.negative(emit(R.abs(x))))))
    u = emit(R.add(e, _const(x, 1.0)))
    log1p = emit(R.where(emit(R.equal(u, _const(x, 1.0))), e,
                         emit(R.divide(emit(R.multiply(emit(R.log(u)), e)),
                                       emit(R.subtract(u, _const(x, 1.0)))))))
    return R.add(emit(R.maximum(x, _const(x, 0.0))), log1p)


@register("Softsign")
def softsign(emit, x):
    return R.divide(x, emit(R.add(emit(R.abs(x)), _const(x, 1.0))))


@register("ThresholdedRelu")
def thresholded_relu(emit, x, *, alpha):
    return R.where(emit(R.greater(x, _const(x, alpha))), x, _const(x, 0))


@register("PRelu")
def prelu(emit, x, slope):
    return R.where(emit(R.less(x, _const(x, 0))), emit(R.multiply(x, slope)), x)


def _static_dim(x, axis, what):
    dim = x.ty.shape.values[axis]
    if not isinstance(dim, tirx.IntImm):
        raise LoweringError(f"{what}: axis {axis} of {x.ty} is dynamic; expected a static size")
    return int(dim)


@register("Hardmax")
def hardmax(emit, x, *, axis):
    axis %= x.ty.ndim
    depth = _static_dim(x, axis, "Hardmax")
    first_largest = emit(R.argmax(x, axis, keepdims=True))
    positions = relax.const(np.arange(depth).reshape([-1] + [1] * (x.ty.ndim - axis - 1)),
                            str(first_largest.ty.dtype))
    return R.astype(emit(R.equal(positions, first_largest)), str(x.ty.dtype))


# -- normalizations ----------------------------------------------------------------------------

def _channel_axis(x, channels_last):
    return x.ty.ndim - 1 if channels_last else 1


def _per_channel(emit, v, x, channels_last):
    """A per-channel vector shaped to broadcast along the channel axis of ``x``."""
    if channels_last or v.ty.ndim != 1:
        return v
    return emit(R.reshape(v, [-1] + [1] * (x.ty.ndim - 2)))


def _affine(emit, y, x, scale, offset, scalar_scale, scalar_offset, channels_last):
    """y * scale + offset per channel, the scalars standing in for absent vectors."""
    scale = _const(y, scalar_scale) if scale is None else _per_channel(emit, scale, x, channels_last)
    offset = (_const(y, scalar_offset) if offset is None
              else _per_channel(emit, offset, x, channels_last))
    return emit(R.add(emit(R.multiply(y, scale)), offset))


def _standardize(emit, x, axes, epsilon):
    """(x - mean) / sqrt(variance + epsilon) over ``axes`` (two passes, for accuracy)."""
    centered = emit(R.subtract(x, emit(R.mean(x, axes, keepdims=True))))
    variance = emit(R.mean(emit(R.multiply(centered, centered)), axes, keepdims=True))
    return emit(R.multiply(centered, emit(R.rsqrt(emit(R.add(variance, _const(x, epsilon)))))))


@register("LRN")
def lrn(emit, x, *, channels_last, window_size, alpha, beta, bias):
    axis = _channel_axis(x, channels_last)
    channels = x.ty.shape.values[axis]
    front = (window_size - 1) // 2
    widths = [0] * (2 * x.ty.ndim)
    widths[2 * axis: 2 * axis + 2] = [front, window_size - 1 - front]
    squares = emit(R.nn.pad(emit(R.multiply(x, x)), widths))
    window_sum = emit(R.strided_slice(squares, [axis], [0], [channels]))
    for k in range(1, window_size):
        shifted = emit(R.strided_slice(squares, [axis], [k], [channels + k]))
        window_sum = emit(R.add(window_sum, shifted))
    scaled = emit(R.add(emit(R.multiply(window_sum, _const(x, alpha / window_size))),
                        _const(x, bias)))
    return R.divide(x, emit(R.power(scaled, _const(x, beta))))


@register("InstanceNormalization")
def instance_normalization(emit, x, scale, offset, *, channels_last, epsilon, scalar_scale,
                           scalar_offset):
    spatial = list(range(1, x.ty.ndim - 1)) if channels_last else list(range(2, x.ty.ndim))
    if not spatial:
        raise LoweringError(f"input {x.ty} has no spatial dims; expected rank >= 3")
    y = _standardize(emit, x, spatial, epsilon)
    return _affine(emit, y, x, scale, offset, scalar_scale, scalar_offset, channels_last)


@register("GroupNormalization")
def group_normalization(emit, x, scale, offset, *, channels_last, groups, epsilon,
                        scalar_scale, scalar_offset):
    axis = _channel_axis(x, channels_last)
    channels = _static_dim(x, axis, "GroupNormalization")
    if channels % groups:
        raise LoweringError(f"{channels} channels do not split into {groups} groups")
    dims = list(x.ty.shape.values)
    grouped = dims[:axis] + [groups, channels // groups] + dims[axis + 1:]
    y = emit(R.reshape(x, grouped))
    # Every axis but batch and group: the spatial ones and the channels within a group.
    axes = [a for a in range(1, len(grouped)) if a != axis]
    y = emit(R.reshape(_standardize(emit, y, axes, epsilon), dims))
    return _affine(emit, y, x, scale, offset, scalar_scale, scalar_offset, channels_last)


@register("LayerNorm")
def layer_norm(emit, x, scale, offset, *, axes, epsilon):
    _check_axes(x, axes)
    y = _standardize(emit, x, list(axes), epsilon)
    if scale is not None:
        y = emit(R.multiply(y, scale))
    return y if offset is None else R.add(y, offset)


def _check_axes(x, axes):
    rank = x.ty.ndim
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        raise LoweringError(f"axes {bad} out of range for {x.ty}; expected -{rank}..{rank - 1}")


@register("LpNormalize")
def lp_normalize(emit, x, scale, *, p, channels_last, axes, epsilon):
    _check_axes(x, axes)
    magnitude = emit(R.abs(x))
    powered = magnitude if p == 1 else emit(R.power(magnitude, _const(x, float(p))))
    total = emit(R.add(emit(R.sum(powered, list(axes), keepdims=True)), _const(x, epsilon)))
    norm = total if p == 1 else emit(R.power(total, _const(x, 1.0 / p)))
    y = emit(R.where(emit(R.equal(norm, _const(x, 0))), _const(x, 0), emit(R.divide(x, norm))))
    return y if scale is None else R.multiply(y, _per_channel(emit, scale, x, channels_last))


# -- selection and detection -------------------------------------------------------------------

# Element types TVM's CPU sort lacks, and the int type whose order its sort keys take.
_SORT_KEYS = {"int16": "int32", "uint16": "int32", "uint32": "int64", "uint64": "int64"}


@register("TopK")
def topk(emit, x, *, k, largest, sorted, axis, index_dtype):
    x = _k_fits(emit, x, k, axis)
    # TOPI's topk is built on a stable sort, so ties keep the lower index first; the
    # result is sorted whether or not ``sorted`` asks for it.
    dtype = str(x.ty.dtype)
    if dtype not in _SORT_KEYS:
        both = emit(R.topk(x, k, axis, "both", largest, index_dtype))
        return [relax.TupleGetItem(both, 0), relax.TupleGetItem(both, 1)]
    # TVM's CPU sort lacks this dtype: the indices come from order-preserving int keys.
    key_dtype = _SORT_KEYS[dtype]
    if dtype == "uint64":  # flipping the top bit maps 0..2**64-1 onto -2**63..2**63-1
        keys = emit(R.bitwise_xor(emit.te(topi.reinterpret, x, key_dtype),
                                  relax.const(np.iinfo(np.int64).min, key_dtype)))
    else:
        keys = emit(R.astype(x, key_dtype))
    indices = emit(R.topk(keys, k, axis, "indices", largest, index_dtype))
    return [emit(R.gather_elements(x, indices, axis)), indices]


def _k_fits(emit, x, k: int, axis: int):
    """``x`` once K is known to be at most its length along ``axis`` (TOPI's topk would read
    past the axis): at build time for a static axis; else checked at run time, ``x`` scaled
    by one plus the check's zero verdict (exact for every element, -0.0 and NaN included) so
    that the sort runs after the check."""
    size = x.ty.shape.values[axis]
    if isinstance(size, tirx.IntImm):
        if k > int(size):
            raise LoweringError(f"K is {k}, more than the {int(size)} elements along axis {axis}")
        return x
    verdict = dim_verdict(emit, x, axis, k, np.iinfo(np.int64).max,
                          f"TopK {emit.value_id!r}: K {k} is out of range; expected at most "
                          f"{{dim}}, the length of axis {axis} of its input")
    one = emit(R.add(emit(R.astype(verdict, str(x.ty.dtype))), relax.const(1, str(x.ty.dtype))))
    return emit(R.multiply(x, one))


@register("NMS")
def nms(emit, boxes, scores, *, max_num_outputs, iou_threshold, score_threshold, dtype):
    if boxes.ty.ndim != 3 or scores.ty.ndim != 3:
        raise LoweringError(f"boxes {boxes.ty} and scores {scores.ty}; expected (batch, boxes, "
                            "4) and (batch, classes, boxes)")
    scores = _scores_fit(emit, boxes, scores)
    # More than the boxes is all of them: TOPI takes the count as an int32 constant (2**40
    # failed to compile) and sizes its output by it, so it is cut to a static boxes' count.
    # (Where that is known at run time only, a huge count is a failure to allocate.)
    boxes_count = boxes.ty.shape.values[1]
    most = min(max_num_outputs, int(boxes_count) if isinstance(boxes_count, tirx.IntImm)
               else np.iinfo(np.int32).max)
    selected = emit(R.vision.all_class_non_max_suppression(
        boxes, scores, relax.const(most, "int64"),
        relax.const(iou_threshold, "float32"), relax.const(score_threshold, "float32")))
    # Rows past the number of detections are padding; keep the first ``count``.
    rows, count = emit(relax.TupleGetItem(selected, 0)), emit(relax.TupleGetItem(selected, 1))
    end = emit(R.concat([emit(R.astype(count, "int64")), relax.const([3], "int64")], 0))
    kept = emit(R.dynamic_strided_slice(rows, relax.const([0, 0], "int64"), end,
                                        relax.const([1, 1], "int64")))
    return R.astype(kept, dtype)


def _scores_fit(emit, boxes, scores):
    """``scores`` once their batch and box counts are known to be the boxes' (TOPI reads
    boxes by the indices of scores unchecked, and emits those indices): at build time where
    both dims are static; else checked at run time, the verdicts added into the scores (a
    zero; a score of -0.0 becomes 0.0, which compares alike) so that NMS runs after them."""
    corners = boxes.ty.shape.values[2]
    if isinstance(corners, tirx.IntImm) and int(corners) != 4:
        raise LoweringError(f"boxes are {boxes.ty}; expected 4 coordinates per box")
    for box_axis, score_axis, name in ((0, 0, "batch"), (1, 2, "box count")):
        want, have = boxes.ty.shape.values[box_axis], scores.ty.shape.values[score_axis]
        if isinstance(want, tirx.IntImm) and isinstance(have, tirx.IntImm):
            if int(want) != int(have):
                raise LoweringError(f"scores {scores.ty} have a {name} of {int(have)}; expected "
                                    f"the {int(want)} of boxes {boxes.ty}")
            continue
        verdict = dim_verdict(emit, scores, score_axis, want, want,
                              f"NMS {emit.value_id!r}: {name} {{dim}} of the scores is out of "
                              f"range; expected {{least}}, the {name} of the boxes")
        scores = emit(R.add(scores, emit(R.astype(verdict, str(scores.ty.dtype)))))
    return scores


def _roi_layout(x, channels_last):
    if x.ty.ndim != 4:
        raise LoweringError(f"input {x.ty}; expected rank 4 (batch, channels, height, width)")
    return "NHWC" if channels_last else "NCHW"


def _checked_rois(emit, x, rois, op: str):
    """``rois`` once their batch indices (column 0, truncated as TOPI reads them) are
    checked to lie in [0, batch-1]: TOPI reads the input through them unchecked."""
    batch = emit(R.astype(emit(R.strided_slice(rois, [1], [0], [1])), "int64"))
    what = f"{op} {emit.value_id!r}, the batch indices of its ROIs"
    verdict = checked_verdict(emit, batch, [x.ty.shape.values[0]], what, negative=False)
    # Adding the verdict (a zero) orders the ROI kernel after the check.
    return emit(R.add(rois, emit(R.astype(verdict, str(rois.ty.dtype)))))


@register("ROIAlign")
def roi_align(emit, x, rois, *, channels_last, spatial_scale, pooled_size, sampling_ratio, mode,
              half_pixel):
    layout = _roi_layout(x, channels_last)
    rois = _checked_rois(emit, x, rois, "ROIAlign")
    if half_pixel:
        # TOPI's "aligned" only lifts the minimum ROI size of 1; the half-pixel shift of the
        # corners is applied here, in ROI coordinates.
        shift = np.array([0] + [0.5 / spatial_scale] * 4, str(rois.ty.dtype))
        rois = emit(R.subtract(rois, relax.const(shift)))
    # TOPI treats a sampling ratio <= 0 as adaptive, as ONNX does for 0.
    return R.vision.roi_align(x, rois, tuple(pooled_size), spatial_scale,
                              sampling_ratio or -1, half_pixel, layout, mode)


@register("ROIMaxPool")
def roi_max_pool(emit, x, rois, *, channels_last, spatial_scale, pooled_size):
    return R.vision.roi_pool(x, _checked_rois(emit, x, rois, "ROIMaxPool"), tuple(pooled_size),
                             spatial_scale, _roi_layout(x, channels_last))


# -- text and attention ------------------------------------------------------------------------

def _constant_array(value, name):
    if not isinstance(value, Constant):
        raise LoweringError(f"{name} is computed at run time; expected a constant")
    return value.value.numpy()


def _pool_ngrams(pool, gram_counts, min_length, max_length):
    """(length, global n-gram index of the first, n-grams as rows) for each length in range;
    ``gram_counts`` lists where the n-grams of length 1, 2, ... start in ``pool``."""
    starts = [int(s) for s in gram_counts] + [len(pool)]
    groups, first_index = [], 0
    for length, (begin, end) in enumerate(itertools.pairwise(starts), start=1):
        grams = pool[begin:end].reshape(-1, length)
        if min_length <= length <= max_length and len(grams):
            groups.append((length, first_index, grams))
        first_index += len(grams)
    return groups, first_index


@register("TFIDFVectorize")
def tfidf_vectorize(emit, x, pool, gram_counts, output_indices, weights, *, min_gram_length,
                    max_gram_length, max_skip_count, mode):
    if x.ty.ndim not in (1, 2):
        raise LoweringError(f"input {x.ty}; expected (items,) or (rows, items)")
    rows = x if x.ty.ndim == 2 else emit(R.expand_dims(x, [0]))
    width = _static_dim(rows, 1, "TFIDFVectorize")
    groups, total = _pool_ngrams(_constant_array(pool, "pool"),
                                 _constant_array(gram_counts, "gram_counts"),
                                 min_gram_length, max_gram_length)
    indices = _constant_array(output_indices, "output_indices").astype("int64")
    if len(indices) != total:
        raise LoweringError(f"output_indices has {len(indices)} entries; the pool has {total} "
                            "n-grams")
    # Counts of every pool n-gram, then one matmul with a 0/1 matrix places them.
    placement = np.zeros((total, int(indices.max()) + 1), "float32")
    placement[np.arange(total), indices] = 1
    counts = []
    for length, first, grams in groups:
        placed = placement[first:first + len(grams)]
        # Skips widen the gap between the items of an n-gram; unigrams are counted once.
        for gap in range(1, (max_skip_count + 1 if length > 1 else 1) + 1):
            starts = width - (length - 1) * gap
            if starts <= 0:
                continue
            windows = emit(R.stack([emit(R.strided_slice(rows, [1], [j * gap],
                                                         [j * gap + starts]))
                                    for j in range(length)], 2))  # (rows, starts, length)
            hits = emit(R.equal(emit(R.expand_dims(windows, [2])),
                                relax.const(grams.astype(str(x.ty.dtype)))))
            matched = emit(R.min(emit(R.astype(hits, "float32")), [3]))  # (rows, starts, grams)
            counts.append(emit(R.matmul(emit(R.sum(matched, [1])), relax.const(placed))))
    if not counts:
        raise LoweringError("the pool has no n-grams of the lengths asked for")
    tf = counts[0]
    for c in counts[1:]:
        tf = emit(R.add(tf, c))
    if mode == "IDF":
        tf = emit(R.astype(emit(R.greater(tf, relax.const(0, "float32"))), "float32"))
    if mode != "TF" and weights is not None:
        tf = emit(R.multiply(tf, emit(R.astype(weights, "float32"))))
    return tf if x.ty.ndim == 2 else R.squeeze(tf, [0])


@register("MultiHeadAttention")
def multi_head_attention(emit, x, mask, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, *,
                         num_heads, filler):
    if x.ty.ndim != 3:
        raise LoweringError(f"input {x.ty}; expected (batch, seq, hidden)")
    batch, seq, _ = x.ty.shape.values
    hidden = _static_dim(x, 2, "MultiHeadAttention")
    if hidden % num_heads:
        raise LoweringError(f"hidden size {hidden} does not split into {num_heads} heads")
    head = hidden // num_heads

    def per_head(weight, bias):  # (batch, seq, hidden) -> (batch, heads, seq, head)
        projected = emit(R.add(emit(R.matmul(x, weight)), bias))
        split = emit(R.reshape(projected, [batch, seq, num_heads, head]))
        return emit(R.permute_dims(split, [0, 2, 1, 3]))

    q, k, v = per_head(q_weight, q_bias), per_head(k_weight, k_bias), per_head(v_weight, v_bias)
    scores = emit(R.multiply(emit(R.matmul(q, emit(R.permute_dims(k, [0, 1, 3, 2])))),
                             _const(x, 1.0 / np.sqrt(head))))
    if mask is not None:
        unused = emit(R.subtract(_const(x, 1.0), emit(R.astype(mask, str(x.ty.dtype)))))
        penalty = emit(R.multiply(unused, _const(x, filler)))
        scores = emit(R.add(scores, emit(R.reshape(penalty, [batch, 1, 1, seq]))))
    attended = emit(R.matmul(emit(R.nn.softmax(scores, -1)), v))
    return R.reshape(emit(R.permute_dims(attended, [0, 2, 1, 3])), [batch, seq, hidden])


@register("NegativeLogLikeliHoodLoss")
def negative_log_likelihood_loss(emit, x, gt, weight, *, ignored, reduction):
    def text(dims):  # static dims as plain ints
        return str(tuple(int(d) if isinstance(d, tirx.IntImm) else d for d in dims))

    dims = list(x.ty.shape.values)
    if len(dims) < 2:
        raise LoweringError(f"input {x.ty}; expected log-probabilities (N, C, d...)")
    expected = [dims[0]] + dims[2:]
    if "int" not in str(gt.ty.dtype) or text(gt.ty.shape.values) != text(expected):
        raise LoweringError(f"gt {gt.ty}; expected integer labels of shape {text(expected)}")
    if weight is not None and (text(weight.ty.shape.values) != text(dims[1:2])
                               or weight.ty.dtype != x.ty.dtype):
        raise LoweringError(f"weight {weight.ty}; expected {text(dims[1:2])} {x.ty.dtype}")
    return R.nn.nll_loss(x, gt, weight, reduction, ignored)
