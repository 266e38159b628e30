"""Gradient rules the lowering needs that Relax 0.27 lacks or gets wrong, registered as its
``FPrimalGradient`` op attribute (what ``relax.transform.Gradient`` reads).

Each rule has the signature ``rule(orig_var, orig_call, output_grad, ctx) -> [partials]``:
one partial per argument of the call, ``no_grad`` for arguments that are not tensors.

Replaced built-ins (a higher registration level wins): ``nn.conv2d`` handles only NCHW/OIHW
without dilation and groups; the 2-d pools' backward ops are wrong for some strides and
paddings; ``take`` scatters through indices that must be 1-d and non-negative, while
Gather's may have any rank and count from the end.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from tvm import relax
from tvm.relax import op as R
from tvm.relax.op import register_gradient
from tvm.relax.op.grad import no_grad, take_backward

_OVERRIDE_LEVEL = 11  # above the level (10) of the rules Relax registers itself
_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}
_CONV = {1: R.nn.conv1d, 2: R.nn.conv2d, 3: R.nn.conv3d}
_CONV_TRANSPOSE = {1: R.nn.conv1d_transpose, 2: R.nn.conv2d_transpose, 3: R.nn.conv3d_transpose}


def _dims(expr) -> list[int]:
    return [int(d) for d in expr.ty.shape.values]


def _ints(values) -> list[int]:
    """Integers from an attribute array or a Relax tuple of PrimValues / ShapeExpr."""
    if isinstance(values, relax.Tuple):
        values = [f.value for f in values.fields]
    elif isinstance(values, relax.ShapeExpr):
        values = values.values
    return [int(v) for v in values]


def _const(value, like):
    return relax.const(value, like.ty.dtype)


def _permute(x, src: str, dst: str):
    """``x`` rearranged from layout ``src`` to ``dst`` (e.g. "NHWC" to "NCHW")."""
    if src == dst:
        return x
    return R.permute_dims(x, [src.index(c) for c in dst])


def _relayout(dims: list[int], src: str, dst: str) -> list[int]:
    return [dims[src.index(c)] for c in dst]


# -- element-wise ------------------------------------------------------------------------------

@register_gradient("relax.rsqrt")
def _rsqrt_grad(orig_var, orig_call, output_grad, ctx):
    # d/dx x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
    y = orig_var
    return [output_grad * _const(-0.5, y) * y * y * y]


@register_gradient("relax.nn.leakyrelu")
def _leaky_relu_grad(orig_var, orig_call, output_grad, ctx):
    x = orig_call.args[0]
    slope = R.where(R.less(x, _const(0.0, x)), _const(float(orig_call.attrs.alpha), x),
                    _const(1.0, x))
    return [output_grad * slope]


@register_gradient("relax.nn.gelu")
def _gelu_grad(orig_var, orig_call, output_grad, ctx):
    # gelu = x Phi(x): d/dx = Phi(x) + x phi(x)
    x = orig_call.args[0]
    cdf = _const(0.5, x) + _const(0.5, x) * R.erf(x * _const(math.sqrt(0.5), x))
    pdf = R.exp(_const(-0.5, x) * x * x) * _const(1.0 / math.sqrt(2.0 * math.pi), x)
    return [output_grad * (cdf + x * pdf)]


@register_gradient("relax.nn.gelu_tanh")
def _gelu_tanh_grad(orig_var, orig_call, output_grad, ctx):
    # 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3), as TVM legalizes it
    x = orig_call.args[0]
    c, k = math.sqrt(2.0 / math.pi), 0.044715
    t = R.tanh(_const(c, x) * x * (_const(1.0, x) + _const(k, x) * x * x))
    du = _const(c, x) * (_const(1.0, x) + _const(3.0 * k, x) * x * x)
    half = _const(0.5, x)
    return [output_grad * (half * (_const(1.0, x) + t) + half * x * (_const(1.0, x) - t * t) * du)]


# -- reductions and data movement ----------------------------------------------------------------

@register_gradient("relax.max")
def _max_grad(orig_var, orig_call, output_grad, ctx):
    # The gradient goes to the maximal elements, shared equally among ties.
    x = orig_call.args[0]
    axis, keepdims = orig_call.attrs.axis, orig_call.attrs.keepdims
    rank = len(_dims(x))
    axes = list(range(rank)) if axis is None else sorted(int(a) % rank for a in axis)
    y, g = orig_var, output_grad
    if not keepdims:
        y, g = R.expand_dims(y, axes), R.expand_dims(g, axes)
    mask = R.astype(R.equal(x, y), x.ty.dtype)
    return [mask * g / R.sum(mask, axes, keepdims=True)]


@register_gradient("relax.squeeze")
def _squeeze_grad(orig_var, orig_call, output_grad, ctx):
    return [R.reshape(output_grad, _dims(orig_call.args[0]))]


@register_gradient("relax.nn.pad")
def _pad_grad(orig_var, orig_call, output_grad, ctx):
    x = orig_call.args[0]
    widths = _ints(orig_call.attrs.pad_width)
    begin = widths[0::2]
    end = [b + d for b, d in zip(begin, _dims(x))]
    rank = len(begin)
    return [R.strided_slice(output_grad, list(range(rank)), begin, end)]


@register_gradient("relax.strided_slice")
def _strided_slice_grad(orig_var, orig_call, output_grad, ctx):
    # A strided slice takes, along each sliced axis, the positions NumPy's slicing picks; the
    # gradient scatters back one axis at a time, from the last slice to the first.
    x, axes, begin, end, strides = orig_call.args[:5]
    dims = _dims(x)
    shapes, picks = [], []
    for axis, b, e, s in zip(_ints(axes), _ints(begin), _ints(end), _ints(strides)):
        shapes.append(list(dims))
        picks.append((axis, list(range(dims[axis]))[b:e:s]))
        dims[axis] = len(picks[-1][1])
    grad = output_grad
    dtype = x.ty.dtype
    for shape, (axis, indices) in reversed(list(zip(shapes, picks))):
        grad = take_backward(grad, R.zeros(shape, dtype), relax.const(indices, "int64"), axis)
    return [grad] + [no_grad(a) for a in orig_call.args[1:]]


@register_gradient("relax.take", level=_OVERRIDE_LEVEL)
def _take_grad(orig_var, orig_call, output_grad, ctx):
    x, indices = orig_call.args
    axis = int(orig_call.attrs.axis)
    dims = _dims(x)
    count = math.prod(_dims(indices))
    # take_backward wants 1-d indices within range: wrap negative ones as "wrap" mode does
    flat = R.floor_mod(R.reshape(indices, [count]), relax.const(dims[axis], indices.ty.dtype))
    grad = R.reshape(output_grad, dims[:axis] + [count] + dims[axis + 1:])
    return [take_backward(grad, x, flat, axis), no_grad(indices)]


# -- convolution ---------------------------------------------------------------------------------

def _weight_grad(data, out_grad, kernel_spatial, strides, padding, dilation, groups):
    """Gradient of a channels-first convolution's OI-layout kernel, from its ``data`` (N, C, S)
    and its result's gradient (N, O, S'): a convolution of the data by the gradient with
    batch and channels swapped, stride and dilation exchanged, cropped to the kernel."""
    rank = len(kernel_spatial)
    swap = [1, 0] + list(range(2, rank + 2))
    data_t, grad_t = R.permute_dims(data, swap), R.permute_dims(out_grad, swap)
    if groups > 1:
        data_parts = R.split(data_t, groups, axis=0)
        grad_parts = R.split(grad_t, groups, axis=0)
        pairs = [(relax.TupleGetItem(data_parts, i), relax.TupleGetItem(grad_parts, i))
                 for i in range(groups)]
    else:
        pairs = [(data_t, grad_t)]
    parts = [_CONV[rank](d, g, strides=dilation, padding=padding, dilation=strides)
             for d, g in pairs]
    grad = parts[0] if groups == 1 else R.concat(parts, axis=1)  # (C/groups, O, k')
    grad = R.permute_dims(grad, swap)
    spatial_axes = list(range(2, rank + 2))
    return R.strided_slice(grad, spatial_axes, [0] * rank, list(kernel_spatial))


@dataclass
class _Conv:
    """A (transposed) convolution call's operands in channels-first layouts, with the kernel
    in ``kernel_order`` ("OI" or "IO" then spatial), and its attributes."""

    x: relax.Expr
    w: relax.Expr
    grad: relax.Expr
    dims: dict  # "x", "w", "grad" -> shape in the layouts above
    strides: list[int]
    padding: list[int]
    dilation: list[int]
    groups: int
    layouts: tuple[str, str, str, str]  # data and kernel layouts: the call's, then ours

    @classmethod
    def of(cls, orig_var, orig_call, output_grad, kernel_order: str) -> _Conv:
        a = orig_call.attrs
        x, w = orig_call.args
        strides = _ints(a.strides)
        spatial = _SPATIAL[len(strides)]
        data, kernel, out = str(a.data_layout), str(a.kernel_layout), str(a.out_layout)
        data_cf, kernel_cf = "NC" + spatial, kernel_order + spatial
        dims = {"x": _relayout(_dims(x), data, data_cf), "w": _relayout(_dims(w), kernel, kernel_cf),
                "grad": _relayout(_dims(orig_var), out, data_cf)}
        return cls(_permute(x, data, data_cf), _permute(w, kernel, kernel_cf),
                   _permute(output_grad, out, data_cf), dims, strides, _ints(a.padding),
                   _ints(a.dilation), int(a.groups), (data, kernel, data_cf, kernel_cf))

    @property
    def rank(self) -> int:
        return len(self.strides)

    def partials(self, x_grad, w_grad) -> list:
        """The gradients back in the call's layouts."""
        data, kernel, data_cf, kernel_cf = self.layouts
        return [_permute(x_grad, data_cf, data), _permute(w_grad, kernel_cf, kernel)]


def _conv_grad(orig_var, orig_call, output_grad, ctx):
    c = _Conv.of(orig_var, orig_call, output_grad, "OI")
    rank, dims = c.rank, c.dims
    # the transposed convolution's natural size can fall short of the input by up to stride-1
    output_padding = [
        dims["x"][2 + i] - ((dims["grad"][2 + i] - 1) * c.strides[i] - c.padding[i]
                            - c.padding[rank + i] + c.dilation[i] * (dims["w"][2 + i] - 1) + 1)
        for i in range(rank)
    ]
    x_grad = _CONV_TRANSPOSE[rank](
        c.grad, c.w, strides=c.strides, padding=c.padding, output_padding=output_padding,
        dilation=c.dilation, groups=c.groups, data_layout="NC" + _SPATIAL[rank],
        kernel_layout="IO" + _SPATIAL[rank],
    )
    w_grad = _weight_grad(c.x, c.grad, dims["w"][2:], c.strides, c.padding, c.dilation, c.groups)
    return c.partials(x_grad, w_grad)


def _conv_transpose_grad(orig_var, orig_call, output_grad, ctx):
    # y = conv_transpose(x, w) is the adjoint of x = conv(y, w) with w (I, O/groups, S) read as
    # an OIS kernel, so dx is that convolution of dy and dw its kernel gradient.
    c = _Conv.of(orig_var, orig_call, output_grad, "IO")
    x_grad = _CONV[c.rank](c.grad, c.w, strides=c.strides, padding=c.padding,
                           dilation=c.dilation, groups=c.groups,
                           data_layout="NC" + _SPATIAL[c.rank],
                           kernel_layout="OI" + _SPATIAL[c.rank])
    w_grad = _weight_grad(c.grad, c.x, c.dims["w"][2:], c.strides, c.padding, c.dilation,
                          c.groups)
    return c.partials(x_grad, w_grad)


for _rank in (1, 2, 3):
    register_gradient(f"relax.nn.conv{_rank}d", _conv_grad, level=_OVERRIDE_LEVEL)
    register_gradient(f"relax.nn.conv{_rank}d_transpose", _conv_transpose_grad)


# -- pooling -------------------------------------------------------------------------------------
# Relax's 2-d pool gradients (TOPI pool_grad) return garbage for some strides and paddings
# (e.g. strides (1, 2) with padding), and it has none for 1-d and 3-d pools. A pool reads, for
# each offset in its window, one strided slice of the padded input; the gradient sends each
# output's share back through the same slices.

def _unslice(grad, dims: list[int], dtype: str, axis: int, offset: int, stride: int,
             length: int):
    """Places ``grad``'s entries along ``axis`` at positions offset + stride * j of a zero
    tensor with ``length`` entries there. ``dims`` is ``grad``'s shape; returns the result and
    its shape."""
    count = dims[axis]
    if stride > 1:  # interleave stride - 1 zeros after each entry
        zeros = R.zeros(dims[:axis + 1] + [stride - 1] + dims[axis + 1:], dtype)
        grad = R.concat([R.expand_dims(grad, [axis + 1]), zeros], axis + 1)
        grad = R.reshape(grad, dims[:axis] + [count * stride] + dims[axis + 1:])
    span = min(count * stride, length - offset)
    if span < count * stride:
        grad = R.strided_slice(grad, [axis], [0], [span])
    widths = [0] * (2 * len(dims))
    widths[2 * axis], widths[2 * axis + 1] = offset, length - offset - span
    return R.nn.pad(grad, widths), dims[:axis] + [length] + dims[axis + 1:]


def _window_counts(dims, window, strides, front, out) -> np.ndarray:
    """How many real (unpadded) cells each output's window covers, as (1, 1, out...)."""
    counts = np.ones([1, 1] + list(out))
    for i, (d, w, s, f, o) in enumerate(zip(dims, window, strides, front, out)):
        starts = np.arange(o) * s - f
        along = np.minimum(starts + w, d) - np.maximum(starts, 0)
        counts = counts * along.reshape([-1 if j == i else 1 for j in range(len(out))])
    return counts


def _pool_grad(kind: str):
    def rule(orig_var, orig_call, output_grad, ctx):
        x, a = orig_call.args[0], orig_call.attrs
        if bool(a.ceil_mode) or any(d != 1 for d in _ints(a.dilation)):
            raise ValueError("pool gradients support floor mode without dilation only")
        layout, out_layout = str(a.layout), str(a.out_layout)
        rank = len(layout) - 2
        cf = "NC" + _SPATIAL[rank]
        window, strides, padding = _ints(a.pool_size), _ints(a.strides), _ints(a.padding)
        front, back = padding[:rank], padding[rank:]
        dims = _relayout(_dims(x), layout, cf)
        out = _relayout(_dims(orig_var), out_layout, cf)[2:]
        padded = [d + f + b for d, f, b in zip(dims[2:], front, back)]
        dtype = x.ty.dtype
        grad = _permute(output_grad, out_layout, cf)
        spatial = list(range(2, rank + 2))
        widths = [0, 0, 0, 0] + [w for pair in zip(front, back) for w in pair]
        if kind == "max":
            x_padded = R.nn.pad(_permute(x, layout, cf), widths, pad_value=float("-inf"))
            y, taken = _permute(orig_var, out_layout, cf), None
        else:
            divisor = (np.full([1, 1] + out, float(np.prod(window))) if bool(a.count_include_pad)
                       else _window_counts(dims[2:], window, strides, front, out))
            share = grad / relax.const(divisor, dtype)
        total = None
        for offsets in itertools.product(*[range(w) for w in window]):
            if kind == "max":  # the first maximal cell of each window takes the gradient
                ends = [o + s * (n - 1) + 1 for o, s, n in zip(offsets, strides, out)]
                cells = R.strided_slice(x_padded, spatial, list(offsets), ends, strides)
                hit = R.astype(R.equal(cells, y), dtype)
                first = hit if taken is None else hit * (_const(1.0, x) - taken)
                taken = first if taken is None else taken + first
                part = grad * first
            else:
                part = share
            part_dims = dims[:2] + out
            for axis, offset, stride, length in zip(spatial, offsets, strides, padded):
                part, part_dims = _unslice(part, part_dims, dtype, axis, offset, stride, length)
            total = part if total is None else total + part
        x_grad = R.strided_slice(total, spatial, front, [f + d for f, d in zip(front, dims[2:])])
        return [_permute(x_grad, cf, layout)]

    return rule


for _rank in (1, 2, 3):
    register_gradient(f"relax.nn.max_pool{_rank}d", _pool_grad("max"), level=_OVERRIDE_LEVEL)
    register_gradient(f"relax.nn.avg_pool{_rank}d", _pool_grad("avg"), level=_OVERRIDE_LEVEL)
