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


# -- nn: activations, normalizations, selection, recurrent layers -------------------------------

def _f64(fn):
    """``fn`` computed in float64 and returned in the input's dtype."""
    def wrapped(x, *args, **kwargs):
        return np.asarray(fn(x.astype(np.float64), *args, **kwargs)).astype(x.dtype)

    wrapped.__name__ = fn.__name__
    return wrapped


@_f64
def celu(x, alpha):
    return np.maximum(x, 0) + np.minimum(0, alpha * (np.exp(x / alpha) - 1))


@_f64
def elu(x, alpha):
    return np.where(x < 0, alpha * (np.exp(x) - 1), x)


@_f64
def hard_sigmoid(x, alpha, beta):
    return np.clip(alpha * x + beta, 0, 1)


@_f64
def hard_swish(x):
    return x * np.clip(x / 6 + 0.5, 0, 1)


@_f64
def swish(x, alpha):
    return x / (1 + np.exp(-alpha * x))


@_f64
def selu(x, alpha, gamma):
    return np.where(x <= 0, gamma * (alpha * np.exp(x) - alpha), gamma * x)


@_f64
def shrink(x, bias, lambd):
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


@_f64
def softplus(x):
    return np.log1p(np.exp(x))


@_f64
def softsign(x):
    return x / (1 + np.abs(x))


@_f64
def thresholded_relu(x, alpha):
    return np.where(x > alpha, x, 0)


def prelu(x, slope):
    return np.where(x < 0, x.astype(np.float64) * slope, x).astype(x.dtype)


def hardmax(x, axis):
    first = np.expand_dims(np.argmax(x, axis), axis)
    return (np.arange(x.shape[axis]).reshape([-1] + [1] * (x.ndim - axis % x.ndim - 1))
            == first).astype(x.dtype)


@_f64
def lrn(x, size, alpha, beta, bias):
    """Across channels of channels-first ``x``."""
    squares = np.pad(x * x, [(0, 0), ((size - 1) // 2, size // 2)] + [(0, 0)] * (x.ndim - 2))
    window_sum = sum(squares[:, k:k + x.shape[1]] for k in range(size))
    return x / (bias + alpha / size * window_sum) ** beta


def _standardized(x, axes, epsilon):
    mean = x.mean(axis=tuple(axes), keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=tuple(axes), keepdims=True) + epsilon)


def _per_channel(v, rank):
    return np.asarray(v, np.float64).reshape([-1] + [1] * (rank - 2)) if np.ndim(v) else v


@_f64
def instance_normalization(x, epsilon, scale=1.0, offset=0.0):
    """Channels-first ``x``; scale and offset per channel or scalars."""
    y = _standardized(x, range(2, x.ndim), epsilon)
    return y * _per_channel(scale, x.ndim) + _per_channel(offset, x.ndim)


@_f64
def group_normalization(x, groups, epsilon, scale=1.0, offset=0.0):
    grouped = x.reshape(x.shape[0], groups, -1)
    y = _standardized(grouped, [2], epsilon).reshape(x.shape)
    return y * _per_channel(scale, x.ndim) + _per_channel(offset, x.ndim)


@_f64
def layer_norm(x, axes, epsilon, scale=1.0, offset=0.0):
    return _standardized(x, axes, epsilon) * scale + offset


@_f64
def lp_normalize(x, p, axes, epsilon):
    norm = (np.sum(np.abs(x) ** p, axis=tuple(axes), keepdims=True) + epsilon) ** (1.0 / p)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm == 0, 0, x / norm)


def topk(x, k, axis, largest):
    """(values, int64 indices); ties keep the lower index first."""
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, indices, axis), indices.astype(np.int64)


def _iou(a, b):
    """IoU of two (y1, x1, y2, x2) boxes whose corners may come in either order."""
    ay1, ay2 = sorted(a[0::2])
    ax1, ax2 = sorted(a[1::2])
    by1, by2 = sorted(b[0::2])
    bx1, bx2 = sorted(b[1::2])
    inter = max(0.0, min(ay2, by2) - max(ay1, by1)) * max(0.0, min(ax2, bx2) - max(ax1, bx1))
    union = (ay2 - ay1) * (ax2 - ax1) + (by2 - by1) * (bx2 - bx1) - inter
    return inter / union if union > 0 else 0.0


def nms(boxes, scores, max_per_class, iou_threshold, score_threshold):
    """Greedy non-max suppression per batch and class: (selected, 3) int64 rows."""
    rows = []
    for b, c in np.ndindex(scores.shape[0], scores.shape[1]):
        kept = []
        for i in np.argsort(-scores[b, c], kind="stable"):
            if len(kept) == max_per_class or scores[b, c, i] <= score_threshold:
                break
            if all(_iou(boxes[b, i], boxes[b, j]) <= iou_threshold for j in kept):
                kept.append(i)
        rows += [(b, c, i) for i in kept]
    return np.array(rows, np.int64).reshape(-1, 3)


def roi_max_pool(x, rois, pooled, scale):
    """Max pooling of channels-first ``x`` over (batch, x1, y1, x2, y2) ROIs, as Caffe."""
    out = np.zeros((len(rois), x.shape[1]) + tuple(pooled), x.dtype)
    for n, (b, *corners) in enumerate(rois):
        x1, y1, x2, y2 = (int(round(v * scale)) for v in corners)
        height, width = max(y2 - y1 + 1, 1), max(x2 - x1 + 1, 1)
        for i, j in np.ndindex(*pooled):
            ys = (min(max(y1 + int(np.floor(i * height / pooled[0])), 0), x.shape[2]),
                  min(max(y1 + int(np.ceil((i + 1) * height / pooled[0])), 0), x.shape[2]))
            xs = (min(max(x1 + int(np.floor(j * width / pooled[1])), 0), x.shape[3]),
                  min(max(x1 + int(np.ceil((j + 1) * width / pooled[1])), 0), x.shape[3]))
            cell = x[int(b), :, ys[0]:ys[1], xs[0]:xs[1]]
            out[n, :, i, j] = cell.max(axis=(1, 2)) if cell.size else 0
    return out


def _sigmoid64(v):
    return 1 / (1 + np.exp(-v))


def recurrent(kind, x, w, r, b=None, seq_lens=None, initial=None, peephole=None,
              reverse=False, linear_before_reset=False):
    """One direction of an ONNX RNN/GRU/LSTM (weights of that direction, gates in ONNX
    order): (outputs (seq, batch, hidden), last states)."""
    hidden = r.shape[-1]
    gates = r.shape[0] // hidden
    w_bias, r_bias = (np.zeros(gates * hidden), np.zeros(gates * hidden)) if b is None else \
        np.split(b.astype(np.float64), 2)
    states = [np.zeros((x.shape[1], hidden)) if s is None else s.astype(np.float64)
              for s in (initial or [None] * (2 if kind == "LSTM" else 1))]
    outputs = np.zeros((x.shape[0], x.shape[1], hidden))
    lengths = np.full(x.shape[1], x.shape[0]) if seq_lens is None else seq_lens
    for t in reversed(range(x.shape[0])) if reverse else range(x.shape[0]):
        x_proj = x[t].astype(np.float64) @ w.T + w_bias
        h = states[0]
        if kind == "RNN":
            new = [np.tanh(x_proj + h @ r.T + r_bias)]
        elif kind == "GRU":
            xz, xr, xh = np.split(x_proj, 3, axis=-1)
            rz, rr, rh = np.split(r, 3)
            bz, br, bh = np.split(r_bias, 3)
            z, reset = _sigmoid64(xz + h @ rz.T + bz), _sigmoid64(xr + h @ rr.T + br)
            recur = reset * (h @ rh.T + bh) if linear_before_reset else (reset * h) @ rh.T + bh
            candidate = np.tanh(xh + recur)
            new = [(1 - z) * candidate + z * h]
        else:
            c = states[1]
            gi, go, gf, gc = np.split(x_proj + h @ r.T + r_bias, 4, axis=-1)
            pi, po, pf = np.split(np.zeros(3 * hidden) if peephole is None else peephole, 3)
            i, f = _sigmoid64(gi + pi * c), _sigmoid64(gf + pf * c)
            c_next = f * c + i * np.tanh(gc)
            new = [_sigmoid64(go + po * c_next) * np.tanh(c_next), c_next]
        valid = (t < lengths)[:, None]
        states = [np.where(valid, n, s) for n, s in zip(new, states)]
        outputs[t] = np.where(valid, new[0], 0)
    return outputs.astype(x.dtype), [s.astype(x.dtype) for s in states]


def negative_log_likelihood_loss(log_probabilities, labels, ignored, reduction, weight=None):
    """ONNX NegativeLogLikelihoodLoss of (N, C, d...) log-probabilities and (N, d...) labels;
    ``reduction`` is "none", "sum" or "mean" (divided by the counted labels' weights)."""
    p = np.moveaxis(log_probabilities.astype(np.float64), 1, -1)  # (N, d..., C)
    counted = labels != ignored
    safe = np.where(counted, labels, 0)
    w = (np.ones(p.shape[-1]) if weight is None else weight.astype(np.float64))[safe] * counted
    losses = -np.take_along_axis(p, safe[..., None], -1)[..., 0] * w
    if reduction == "none":
        return losses.astype(log_probabilities.dtype)
    total = losses.sum() if reduction == "sum" else losses.sum() / w.sum()
    return np.asarray(total, log_probabilities.dtype)

