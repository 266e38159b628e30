"""GridSample: sampling an image at run-time positions, composed from ODLA's math ops (the
coordinates, their padding and interpolation weights) and GatherElements (the pixels)."""

from __future__ import annotations

import itertools

import numpy as np

from ... import ops
from ...types import ElementType
from .registry import Node, constant, converter, static_dims

_MODES = {"bilinear": "linear", "bicubic": "cubic"}  # opset 16's names


class _Coordinates:
    """Element-wise arithmetic on the (batch, 1, points) coordinates of one spatial axis."""

    def __init__(self, like):
        self.dtype = like.type.dtype

    def number(self, value):
        return constant(np.asarray(value, self.dtype))

    def outside(self, c, low, high):
        return ops.math.or_(ops.math.less(c, self.number(low)),
                            ops.math.greater(c, self.number(high)))

    def reflect(self, c, low, high):
        """``c`` reflected at the borders ``low`` and ``high`` until it lies between them."""
        span = high - low
        below = ops.math.less(c, self.number(low))
        overshoot = ops.math.select(below, ops.math.sub(self.number(low), c),
                                    ops.math.sub(c, self.number(high)))
        turns = ops.math.floor(ops.math.div(overshoot, self.number(span)))
        rest = ops.math.sub(overshoot, ops.math.mul(turns, self.number(span)))
        even = ops.math.equal(ops.math.mod(turns, self.number(2), 0), self.number(0))
        from_low = ops.math.add(self.number(low), rest)
        from_high = ops.math.sub(self.number(high), rest)
        return ops.math.select(below, ops.math.select(even, from_low, from_high),
                               ops.math.select(even, from_high, from_low))

    def cubic_weights(self, t):
        """Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 from the
        floor, ``t`` being the position past the floor."""
        a = -0.75

        def near(x):  # |x| <= 1
            return self._polynomial(x, [a + 2, -(a + 3), 0, 1])

        def far(x):  # 1 < |x| < 2
            return self._polynomial(x, [a, -5 * a, 8 * a, -4 * a])

        one, two = self.number(1), self.number(2)
        return [far(ops.math.add(t, one)), near(t), near(ops.math.sub(one, t)),
                far(ops.math.sub(two, t))]

    def _polynomial(self, x, coefficients):
        result = self.number(coefficients[0])
        for c in coefficients[1:]:
            result = ops.math.add(ops.math.mul(result, x), self.number(c))
        return result


@converter("GridSample", since=16)
def grid_sample(node: Node):
    x, grid = node.input(0), node.input(1)
    batch, channels, *sizes = static_dims(node, x)
    points_shape = static_dims(node, grid)[1:-1]
    points = int(np.prod(points_shape))
    spatial = len(sizes)
    mode = _MODES.get(node.attr("mode"), node.attr("mode"))
    padding, align = node.attr("padding_mode"), node.attr("align_corners", 0)
    coords = _Coordinates(grid)
    flat_grid = ops.process.reshape(grid, (batch, points, spatial))
    taps = []  # per spatial axis: [(index, weight or None)]
    for axis, size in enumerate(sizes):
        column = spatial - 1 - axis  # the grid lists x (the last axis) first
        g = ops.process.slice(flat_grid, [0, 0, column], [batch, points, column + 1], [1, 1, 1])
        g = ops.process.reshape(g, (batch, 1, points))
        if align:  # -1 and 1 are the corner pixels' centres
            c = ops.math.mul(ops.math.add(g, coords.number(1)), coords.number((size - 1) / 2))
        else:  # -1 and 1 are the corner pixels' outer edges
            scaled = ops.math.mul(ops.math.add(g, coords.number(1)), coords.number(size))
            c = ops.math.div(ops.math.sub(scaled, coords.number(1)), coords.number(2))
        if mode == "nearest":
            c = ops.math.round_half_to_even(c)
        low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
        if padding == "border":
            c = ops.math.select(coords.outside(c, low, high), ops.math.clamp(c, 0, size - 1), c)
        elif padding == "reflection":
            c = ops.math.select(coords.outside(c, low, high), coords.reflect(c, low, high), c)
        if mode == "nearest":
            positions = [(c, None)]
        else:
            base = ops.math.floor(c)
            t = ops.math.sub(c, base)
            if mode == "linear":
                positions = [(base, ops.math.sub(coords.number(1), t)),
                             (ops.math.add(base, coords.number(1)), t)]
            else:
                positions = [(ops.math.add(base, coords.number(offset)), weight) for offset, weight
                             in zip((-1, 0, 1, 2), coords.cubic_weights(t))]
        taps.append([_pixel_index(coords, index, size, padding, low, high) + (weight,)
                     for index, weight in positions])

    flat_x = ops.process.reshape(x, (batch, channels, int(np.prod(sizes))))
    strides = [int(np.prod(sizes[axis + 1:])) for axis in range(spatial)]
    total = None
    for combination in itertools.product(*taps):
        flat_index, weight, valid = None, None, None
        for (index, inside, w), stride in zip(combination, strides):
            term = ops.math.mul(index, constant(np.int64(stride)))
            flat_index = term if flat_index is None else ops.math.add(flat_index, term)
            weight = w if weight is None or w is None else ops.math.mul(weight, w)
            valid = inside if valid is None or inside is None else ops.math.and_(valid, inside)
        index = ops.process.expand_dims(flat_index, (batch, channels, points))
        value = ops.process.gather_elements(flat_x, index, 2)
        if weight is not None:
            value = ops.math.mul(value, ops.process.cast(weight, x.element_type))
        if valid is not None:  # zeros padding: taps outside the image count 0
            value = ops.math.select(valid, value, constant(np.zeros((), x.type.dtype)))
        total = value if total is None else ops.math.add(total, value)
    return ops.process.reshape(total, (batch, channels, *points_shape), value_id=node.id)


def _pixel_index(coords: _Coordinates, position, size, padding, low, high):
    """(int64 index of an existing pixel, whether the tap is inside the image or None)
    for the tap at ``position``, as ``padding`` treats taps outside the image."""
    if padding == "reflection":
        position = coords.reflect(position, low, high)
    inside = None
    if padding == "zeros":
        inside = ops.math.not_(coords.outside(position, 0, size - 1))
    index = ops.process.cast(ops.math.clamp(position, 0, size - 1), ElementType.INT64)
    return index, inside
