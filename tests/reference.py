"""NumPy reference implementations of ODLA ops, written independently of the code under test.

Conventions: data is channels-first (N, C, spatial...), convolution kernels are OIS
(out, in/group, spatial...), transposed-convolution kernels are IOS (in, out/group, spatial...).
Use ``to_channels_first``/``to_channels_last`` and ``relayout_kernel`` to test other layouts.
Float results are computed in float64 and returned in the input's dtype; integer results are
computed in int64 and returned in the input's dtype.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


# -- layouts ---------------------------------------------------------------------------------

def to_channels_first(x: np.ndarray) -> np.ndarray:
    """(N, spatial..., C) -> (N, C, spatial...)."""
    return np.moveaxis(x, -1, 1)


def to_channels_last(x: np.ndarray) -> np.ndarray:
    """(N, C, spatial...) -> (N, spatial..., C)."""
    return np.moveaxis(x, 1, -1)


def _kernel_axes(layout: str, rank: int) -> list[str]:
    axes = []
    for letter in layout:
        axes += [f"S{i}" for i in range(rank)] if letter == "S" else [letter]
    return axes


def relayout_kernel(w: np.ndarray, src: str, dst: str) -> np.ndarray:
    """A kernel in layout ``src`` (e.g. "OIS") rearranged into ``dst`` (e.g. "SIO")."""
    rank = w.ndim - 2
    src_axes, dst_axes = _kernel_axes(src, rank), _kernel_axes(dst, rank)
    return np.ascontiguousarray(w.transpose([src_axes.index(a) for a in dst_axes]))


def _acc_dtype(dtype):
    return np.float64 if np.issubdtype(dtype, np.floating) else np.int64


def _window_slices(offsets, strides, counts):
    """For each spatial dim, the input positions offset + stride * j for j < count."""
    return tuple(slice(o, o + s * (n - 1) + 1, s) for o, s, n in zip(offsets, strides, counts))


# -- nn --------------------------------------------------------------------------------------

def conv(x, w, bias=None, *, strides, dilations, pads_front, pads_back, group=1):
    """Convolution (cross-correlation) of channels-first ``x`` with an OIS kernel ``w``."""
    rank = x.ndim - 2
    acc = _acc_dtype(x.dtype)
    xp = np.pad(x.astype(acc), [(0, 0), (0, 0)] + list(zip(pads_front, pads_back)))
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    cg, og = c // group, o // group
    assert w.shape[1] == cg and o % group == 0
    out = [(xp.shape[2 + i] - dilations[i] * (k[i] - 1) - 1) // strides[i] + 1 for i in range(rank)]
    y = np.zeros((n, o, *out), acc)
    for pos in np.ndindex(*k):
        window = _window_slices([p * d for p, d in zip(pos, dilations)], strides, out)
        patch = xp[(slice(None), slice(None)) + window]  # (N, C, out...)
        for g in range(group):
            taps = w[(slice(g * og, (g + 1) * og), slice(None)) + pos].astype(acc)  # (og, cg)
            y[:, g * og:(g + 1) * og] += np.einsum(
                "nc...,oc->no...", patch[:, g * cg:(g + 1) * cg], taps)
    if bias is not None:
        y += bias.astype(acc).reshape([-1] + [1] * rank)
    return y.astype(x.dtype)


def deconv(x, w, bias=None, *, strides, dilations, pads_front, pads_back, group=1,
           output_padding=None):
    """Transposed convolution of channels-first ``x`` with an IOS kernel ``w`` (as ONNX
    ConvTranspose), by scattering each input cell times each kernel tap into the output."""
    rank = x.ndim - 2
    acc = _acc_dtype(x.dtype)
    output_padding = output_padding or [0] * rank
    n, c = x.shape[:2]
    og, k = w.shape[1], w.shape[2:]
    cg = c // group
    assert w.shape[0] == c
    size = x.shape[2:]
    full = [(size[i] - 1) * strides[i] + dilations[i] * (k[i] - 1) + 1 + output_padding[i]
            for i in range(rank)]
    y = np.zeros((n, og * group, *full), acc)
    for pos in np.ndindex(*k):
        target = _window_slices([p * d for p, d in zip(pos, dilations)], strides, size)
        for g in range(group):
            taps = w[(slice(g * cg, (g + 1) * cg), slice(None)) + pos].astype(acc)  # (cg, og)
            contrib = np.einsum("nc...,co->no...", x[:, g * cg:(g + 1) * cg].astype(acc), taps)
            y[(slice(None), slice(g * og, (g + 1) * og)) + target] += contrib
    crop = tuple(slice(f, m - b) for f, b, m in zip(pads_front, pads_back, full))
    y = y[(slice(None), slice(None)) + crop]
    if bias is not None:
        y = y + bias.astype(acc).reshape([-1] + [1] * rank)
    return y.astype(x.dtype)


def batch_normalization(x, mean, var, epsilon, scale=1.0, offset=0.0):
    """Inference batch normalization of channels-first ``x``; scale and offset are per-channel
    arrays or scalars."""
    shape = [-1] + [1] * (x.ndim - 2)

    def per_channel(v):
        return np.asarray(v, np.float64).reshape(shape) if np.ndim(v) else float(v)

    y = (x.astype(np.float64) - per_channel(mean)) / np.sqrt(per_channel(var) + epsilon)
    return (y * per_channel(scale) + per_channel(offset)).astype(x.dtype)


def _pool_windows(x, window, strides, pads_front, pads_back, pad_value):
    """Yields, for each window offset, the (N, C, out...) slab of the padded input, and the
    same slab of a mask that is 1 on real cells and 0 on padding."""
    rank = x.ndim - 2
    widths = [(0, 0), (0, 0)] + list(zip(pads_front, pads_back))
    xp = np.pad(x.astype(np.float64), widths, constant_values=pad_value)
    mask = np.pad(np.ones(x.shape[2:]), widths[2:])
    out = [(xp.shape[2 + i] - window[i]) // strides[i] + 1 for i in range(rank)]
    for pos in np.ndindex(*window):
        sl = _window_slices(pos, strides, out)
        yield xp[(slice(None), slice(None)) + sl], mask[sl]


def max_pool(x, *, window, strides, pads_front, pads_back):
    slabs = [s for s, _ in _pool_windows(x, window, strides, pads_front, pads_back, -np.inf)]
    return np.maximum.reduce(slabs).astype(x.dtype)


def average_pool(x, *, window, strides, pads_front, pads_back, padding_included):
    total, count = 0.0, 0.0
    for slab, mask in _pool_windows(x, window, strides, pads_front, pads_back, 0.0):
        total = total + slab
        count = count + mask
    divisor = float(np.prod(window)) if padding_included else count
    return (total / divisor).astype(x.dtype)


def relu(x):
    return np.where(x > 0, x, np.zeros_like(x))


def leaky_relu(x, alpha):
    return np.where(x >= 0, x.astype(np.float64), alpha * x.astype(np.float64)).astype(x.dtype)


def sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x, use_approx=False):
    v = x.astype(np.float64)
    if use_approx:
        y = 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    else:
        y = 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))
    return y.astype(x.dtype)


def softmax(x, axis):
    v = x.astype(np.float64)
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def log_softmax(x, axis):
    v = x.astype(np.float64)
    shifted = v - v.max(axis=axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(x.dtype)


# -- math ------------------------------------------------------------------------------------

def div(a, b):
    """Float division, or integer division truncated toward zero (as in C)."""
    if np.issubdtype(a.dtype, np.floating):
        return (a.astype(np.float64) / b).astype(a.dtype)
    a64, b64 = np.broadcast_arrays(a.astype(np.int64), b.astype(np.int64))
    q = np.abs(a64) // np.abs(b64)
    return np.where((a64 < 0) != (b64 < 0), -q, q).astype(a.dtype)


def gemm(a, a_transpose, b, b_transpose, alpha, beta, c=None):
    acc = _acc_dtype(a.dtype)
    a = a.T if a_transpose else a
    b = b.T if b_transpose else b
    y = alpha * (a.astype(acc) @ b.astype(acc))
    if c is not None:
        y = y + beta * c.astype(acc)
    return y.astype(a.dtype)


def batch_mat_mul(a, a_transpose, b, b_transpose):
    acc = _acc_dtype(a.dtype)
    a = np.swapaxes(a, -1, -2) if a_transpose else a
    b = np.swapaxes(b, -1, -2) if b_transpose else b
    return np.matmul(a.astype(acc), b.astype(acc)).astype(a.dtype)


def clamp(x, lo, hi):
    return np.minimum(np.maximum(x, x.dtype.type(lo)), x.dtype.type(hi))


def _reduce(fn, x, axes, keep_dims):
    axis = tuple(axes) if axes else None
    acc = _acc_dtype(x.dtype)
    return np.asarray(fn(x.astype(acc), axis=axis, keepdims=keep_dims)).astype(x.dtype)


def reduce_sum(x, axes, keep_dims):
    return _reduce(np.sum, x, axes, keep_dims)


def reduce_mean(x, axes, keep_dims):
    return _reduce(np.mean, x, axes, keep_dims)


def reduce_max(x, axes, keep_dims):
    return _reduce(np.max, x, axes, keep_dims)


# -- process ---------------------------------------------------------------------------------

def reshape(x, output_dims):
    dims = list(output_dims)
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = x.size // known
    return x.reshape(dims)


def transpose(x, permutations):
    return np.transpose(x, permutations)


def concat(inputs, axis):
    return np.concatenate(inputs, axis=axis)


def slice_(x, start, end, stride):
    """Per-dim ``x[start:end:stride]`` with Python's clamping and negative-index rules."""
    return x[tuple(slice(s, e, st) for s, e, st in zip(start, end, stride))]


def gather(x, indices, axis):
    """out[a..., i..., b...] = x[a..., indices[i...], b...]."""
    axis = axis % x.ndim
    out = np.empty(x.shape[:axis] + indices.shape + x.shape[axis + 1:], x.dtype)
    for pos in itertools.product(*(range(n) for n in indices.shape)):
        out[(slice(None),) * axis + pos] = x[(slice(None),) * axis + (int(indices[pos]),)]
    return out


def pad(x, padding_front, padding_back):
    out = np.zeros([f + n + b for f, n, b in zip(padding_front, x.shape, padding_back)], x.dtype)
    out[tuple(slice(f, f + n) for f, n in zip(padding_front, x.shape))] = x
    return out


def cast(x, dtype):
    return x.astype(dtype)


def squeeze(x, axes):
    axes = [a % x.ndim for a in axes] if axes else [i for i, n in enumerate(x.shape) if n == 1]
    return x.reshape([n for i, n in enumerate(x.shape) if i not in axes])


def expand_dims(x, output_dims):
    return np.broadcast_to(x, output_dims).copy()
