"""Converters of ONNX's signal ops, as matrix products with constant Fourier matrices."""

from __future__ import annotations

import numpy as np

from ... import ops
from .registry import INT_MAX, Node, constant, converter, rank, static_dims


def _last_axis_part(x, index: int):
    """``x[..., index]`` (real or imaginary part) without its last axis."""
    rest = rank(x) - 1
    part = ops.process.slice(x, [0] * rest + [index], [INT_MAX] * rest + [index + 1],
                             [1] * (rest + 1))
    return ops.process.reshape(part, x.shape.dims[:-1])


@converter("DFT", since=17)
def dft(node: Node):
    """The discrete Fourier transform along ``axis`` of real (..., 1) or complex (..., 2)
    signals: each part times constant cosine and sine matrices."""
    x = node.input(0)
    shape = static_dims(node, x)
    if node.opset >= 20:
        axis = int(node.array(2).reshape(-1)[0]) if node.input(2) is not None else -2
    else:
        axis = node.attr("axis", 1)
    axis %= rank(x)
    size = shape[axis]
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if inverse and onesided:  # a half spectrum back to a real signal
        length = int(node.array(1).reshape(-1)[0]) if node.input(1) is not None \
            else 2 * (size - 1)
        return _inverse_of_half_spectrum(node, x, axis, length)
    length = int(node.array(1).reshape(-1)[0]) if node.input(1) is not None else size
    if length != size:  # the signal cut or zero-padded to the transform's length
        begin, end = [0] * rank(x), list(shape)
        end[axis] = min(size, length)
        x = ops.process.slice(x, begin, end, [1] * rank(x))
        if length > size:
            back = [0] * rank(x)
            back[axis] = length - size
            x = ops.process.pad(x, [0] * rank(x), back)
    bins = length // 2 + 1 if onesided else length
    cosines, sines = _fourier_matrices(x, length, bins, length, 1 / length if inverse else 1,
                                       1 if inverse else -1)
    return _transform(node, x, axis, cosines, sines)


def _transform(node: Node, x, axis: int, cosines, sines):
    """(a + ib)(cos + i sin) = a cos - b sin + i (a sin + b cos) summed along ``axis`` of
    the real (..., 1) or complex (..., 2) ``x``: a complex (..., 2) result."""
    times = _along(x, axis)
    real = _last_axis_part(x, 0)
    re, im = times(real, cosines), times(real, sines)
    if static_dims(node, x)[-1] == 2:
        imaginary = _last_axis_part(x, 1)
        re = ops.math.sub(re, times(imaginary, sines))
        im = ops.math.add(im, times(imaginary, cosines))
    parts = [ops.process.reshape(p, static_dims(node, p) + (1,)) for p in (re, im)]
    return ops.process.concat(parts, rank(x) - 1, value_id=node.id)


@converter("STFT")
def stft(node: Node):
    """Frames of the signal (a gather of known indices), windowed, each transformed."""
    x, window = node.input(0), node.input(2)
    length = static_dims(node, x)[1]
    step = int(node.array(1).reshape(-1)[0])
    frame_length = int(node.array(3).reshape(-1)[0]) if node.input(3) is not None \
        else static_dims(node, window)[0]
    frames = 1 + (length - frame_length) // step
    starts = np.arange(frames)[:, None] * step + np.arange(frame_length)
    # (batch, frames, length, c)
    framed = ops.process.gather(x, constant(starts.astype(np.int64)), 1)
    if window is not None:
        framed = ops.math.mul(framed, ops.process.reshape(window, (1, 1, frame_length, 1)))
    bins = frame_length // 2 + 1 if node.attr("onesided", 1) else frame_length
    cosines, sines = _fourier_matrices(x, frame_length, bins, frame_length, 1, -1)
    return _transform(node, framed, 2, cosines, sines)


def _fourier_matrices(x, inputs: int, outputs: int, length: int, scale, sign, weights=1.0):
    """Constant (inputs, outputs) matrices of cos and sign * sin of 2 pi j k / length, each
    row j times ``weights[j]`` and ``scale``."""
    angles = 2 * np.pi * np.outer(np.arange(inputs), np.arange(outputs)) / length
    factor = np.reshape(weights, (-1, 1)) * scale
    return (constant((np.cos(angles) * factor).astype(x.type.dtype)),
            constant((sign * np.sin(angles) * factor).astype(x.type.dtype)))


def _along(x, axis: int):
    """A product with a matrix along ``axis`` of ``x`` without its last (real, imaginary)
    axis: the axis goes last for the product and comes back after."""
    order = [a for a in range(rank(x) - 1) if a != axis] + [axis]
    back_order = [order.index(a) for a in range(rank(x) - 1)]

    def times(part, matrix):
        moved = ops.process.transpose(part, order)
        product = ops.math.batch_mat_mul(moved, False, matrix, False)
        return ops.process.transpose(product, back_order)

    return times


def _inverse_of_half_spectrum(node: Node, x, axis: int, length: int):
    """The real signal of ``length`` whose spectrum's first half ``x`` holds: the mirror
    bins (complex conjugates) are counted twice."""
    bins = static_dims(node, x)[axis]
    weights = np.full(bins, 2.0)
    weights[0] = 1.0
    if length % 2 == 0 and bins > length // 2:
        weights[length // 2] = 1.0
    cosines, sines = _fourier_matrices(x, bins, length, length, 1 / length, 1, weights)
    times = _along(x, axis)
    re = times(_last_axis_part(x, 0), cosines)
    if static_dims(node, x)[-1] == 2:
        re = ops.math.sub(re, times(_last_axis_part(x, 1), sines))
    return ops.process.reshape(re, static_dims(node, re) + (1,), value_id=node.id)
