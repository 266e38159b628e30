"""Lowerings of ODLA's nn ops (odla_ops_nn.h)."""

from __future__ import annotations

from tvm import relax
from tvm.relax import op as R

from ..errors import LoweringError
from ..registry import register
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
        kernel_layout=kernel_layout(rank, kernel_layout_name),
    ))
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
    # y = (x - mean) * scale / sqrt(var + eps) + offset, with the per-channel factor
    # computed once so that constant parameters fold at compile time.
    scale = scale if scale is not None else relax.const(scalar_scale, dtype)
    offset = offset if offset is not None else relax.const(scalar_offset, dtype)
    inv_std = emit(R.rsqrt(emit(R.add(var, relax.const(epsilon, dtype)))))
    factor = emit(R.multiply(scale, inv_std))
    shift = emit(R.subtract(offset, emit(R.multiply(mean, factor))))
    if not channels_last and rank > 0:
        factor = emit(R.reshape(factor, [-1] + [1] * rank))
        shift = emit(R.reshape(shift, [-1] + [1] * rank))
    return emit(R.add(emit(R.multiply(x, factor)), shift))


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


@register("Softmax")
def softmax(emit, x, *, axis):
    return R.nn.softmax(x, axis)


@register("LogSoftmax")
def log_softmax(emit, x, *, axis):
    return R.nn.log_softmax(x, axis)

