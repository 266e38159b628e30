"""Converters of ONNX ops that map to ODLA's process ops (odla_ops_process.h) and of the ONNX
ops that only name or produce data (Constant, Identity, Shape...)."""

from __future__ import annotations

import itertools

import numpy as np
from onnx import numpy_helper

from ... import ops
from ...computation import Value
from ...data_checks import check_fits_in_memory
from ...types import (ElementType, InterpolationMode, OdlaError, Status, ValueType, element_type_of,
                      numpy_dtype)
from .registry import INT_MAX, Node, constant, converter, dims, element_type, rank, static_dims

# -- data and names ----------------------------------------------------------------------------

@converter("Constant")
def constant_node(node: Node):
    attrs = node.attrs
    if "value" in attrs:
        return node.constant_output(numpy_helper.to_array(attrs["value"]))
    for name, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                        ("value_int", np.int64), ("value_ints", np.int64)):
        if name in attrs:
            return node.constant_output(np.asarray(attrs[name], dtype))
    raise node.unsupported(f"a {', '.join(attrs)} value; ODLA constants are numeric tensors")


@converter("Identity")
def identity(node: Node):
    return node.input(0)


@converter("ConstantOfShape")
def constant_of_shape(node: Node):
    value = node.attr("value")
    fill = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    shape = [int(d) for d in node.array(0)]
    check_fits_in_memory(node.id, ValueType(element_type_of(fill.dtype), shape))
    return node.constant_output(np.full(shape, fill.reshape(-1)[0], fill.dtype))


@converter("EyeLike")
def eye_like(node: Node):
    x = node.input(0)
    dtype = x.type.dtype if node.attr("dtype") is None else \
        numpy_dtype(element_type(node.attr("dtype")))
    rows, cols = static_dims(node, x)
    return node.constant_output(np.eye(rows, cols, node.attr("k", 0), dtype))


@converter("Shape")
def shape(node: Node):
    x = node.input(0)
    start, end = node.attr("start", 0), node.attr("end", rank(x))
    wanted = dims(x)[slice(start, end)]
    if -1 in wanted:
        full = ops.process.shape(x, (rank(x),))
        count = len(range(*slice(start, end).indices(rank(x))))
        first = start % max(rank(x), 1)
        return ops.process.slice(full, (first,), (first + count,), (1,), value_id=node.id)
    return node.constant_output(np.asarray(wanted, np.int64))


@converter("Size")
def size(node: Node):
    return node.constant_output(np.int64(np.prod(static_dims(node, node.input(0)))))


def _data_only(node: Node):
    """Ops whose result is a function of their inputs' data alone, with no ODLA op (a
    range, a window): with that data known at import the importer folds them into
    constants; this asks for the data (from a run's small inputs) when it is not."""
    for index in range(len(node.inputs)):
        node.array(index)
    raise node.unsupported("the inputs are known, yet the node could not be evaluated")


for _op_type in ("Range", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"):
    converter(_op_type)(_data_only)


# -- element types -----------------------------------------------------------------------------

@converter("Cast")
def cast(node: Node):
    return ops.process.cast(node.input(0), element_type(node.attr("to")), value_id=node.id)


@converter("CastLike")
def cast_like(node: Node):
    return ops.process.cast(node.input(0), node.input(1).element_type, value_id=node.id)


@converter("BitCast")
def bit_cast(node: Node):
    return ops.process.bit_cast(node.input(0), element_type(node.attr("to")), value_id=node.id)


# -- shapes ------------------------------------------------------------------------------------

def _reshaped_dims(node: Node, x, target):
    """ONNX Reshape's target dims: 0 copies the input dim (unless allowzero), -1 is inferred."""
    allow_zero = node.attr("allowzero", 0)
    result = [dims(x)[i] if d == 0 and not allow_zero else d for i, d in enumerate(target)]
    if result.count(-1) > 1:
        raise node.unsupported(f"target {list(target)} of input {dims(x)} leaves several dims "
                               "unknown")
    return result


@converter("Reshape", since=5)
def reshape(node: Node):
    x = node.input(0)
    if not node.is_constant(1):
        return ops.process.reshape_dynamic(x, node.input(1), value_id=node.id,
                                           allow_zero=node.attr("allowzero", 0))
    return ops.process.reshape(x, _reshaped_dims(node, x, node.ints(1)), value_id=node.id)


@converter("Reshape")
def reshape_v1(node: Node):
    x = node.input(0)
    return ops.process.reshape(x, _reshaped_dims(node, x, node.attr("shape")), value_id=node.id)


@converter("Flatten")
def flatten(node: Node):
    x = node.input(0)
    axis = node.attr("axis")
    axis += rank(x) if axis < 0 else 0
    outer, inner = dims(x)[:axis], dims(x)[axis:]
    if -1 in outer and -1 in inner:
        raise node.unsupported(f"input {dims(x)} has dynamic dims on both sides of axis {axis}")
    sizes = [-1 if -1 in part else int(np.prod(part)) for part in (outer, inner)]
    return ops.process.reshape(x, sizes, value_id=node.id)


def _axes(node: Node, since: int) -> list[int]:
    return node.ints(1) if node.opset >= since else node.attr("axes")


@converter("Squeeze")
def squeeze(node: Node):
    x = node.input(0)
    axes = [a % rank(x) for a in _axes(node, 13) or []]
    return ops.process.squeeze(x, len(axes), axes, value_id=node.id)


@converter("Unsqueeze")
def unsqueeze(node: Node):
    x = node.input(0)
    out_rank = rank(x) + len(_axes(node, 13))
    axes = sorted(a % out_rank for a in _axes(node, 13))
    remaining = iter(dims(x))
    target = [1 if i in axes else next(remaining) for i in range(out_rank)]
    if target.count(-1) > 1:
        raise node.unsupported(f"input {dims(x)} has several dynamic dims")
    return ops.process.reshape(x, target, value_id=node.id)


@converter("Transpose")
def transpose(node: Node):
    x = node.input(0)
    perm = node.attr("perm") or list(reversed(range(rank(x))))
    return ops.process.transpose(x, perm, value_id=node.id)


@converter("Concat")
def concat(node: Node):
    values = [v for v in node.inputs if v is not None]
    return ops.process.concat(values, node.attr("axis") % rank(values[0]), value_id=node.id)


@converter("Expand")
def expand(node: Node):
    x = node.input(0)
    target = node.ints(1)
    out_rank = max(rank(x), len(target))
    x_dims = [1] * (out_rank - rank(x)) + list(dims(x))
    target = [1] * (out_rank - len(target)) + list(target)
    if -1 in x_dims:
        raise node.unsupported(f"input {dims(x)} has dynamic dims")
    out = [t if d == 1 else d for d, t in zip(x_dims, target)]
    if rank(x) < out_rank:
        x = ops.process.reshape(x, x_dims)
    return ops.process.expand_dims(x, out, value_id=node.id)


@converter("Tile")
def tile(node: Node):
    x = node.input(0)
    if not node.is_constant(1):
        return ops.process.tile_dynamic(x, node.input(1), value_id=node.id)
    return ops.process.tile(x, node.ints(1), value_id=node.id)


@converter("DepthToSpace")
def depth_to_space(node: Node):
    x = node.input(0)
    n, c, h, w = static_dims(node, x)
    b = node.attr("blocksize")
    if node.attr("mode") == "DCR":
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    moved = ops.process.transpose(ops.process.reshape(x, split), perm)
    return ops.process.reshape(moved, (n, c // (b * b), h * b, w * b), value_id=node.id)


@converter("SpaceToDepth")
def space_to_depth(node: Node):
    x = node.input(0)
    n, c, h, w = static_dims(node, x)
    b = node.attr("blocksize")
    perm = (0, 1, 3, 5, 2, 4) if node.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    moved = ops.process.transpose(ops.process.reshape(x, (n, c, h // b, b, w // b, b)), perm)
    return ops.process.reshape(moved, (n, c * b * b, h // b, w // b), value_id=node.id)


# -- slicing and gathering ---------------------------------------------------------------------

def _slice_per_dim(node: Node, x, axes, starts, ends, steps):
    """Start, end and stride for every dim of ``x``, unsliced dims taken whole."""
    start, end, stride = [0] * rank(x), [INT_MAX] * rank(x), [1] * rank(x)
    for axis, s, e, step in zip(axes, starts, ends, steps):
        axis = node.axis(axis, x)
        start[axis], end[axis], stride[axis] = s, e, step
    return start, end, stride


@converter("Slice", since=10)
def slice_(node: Node):
    x = node.input(0)
    starts, ends = node.ints(1), node.ints(2)
    axes = node.ints(3, default=list(range(len(starts))))
    steps = node.ints(4, default=[1] * len(starts))
    return ops.process.slice(x, *_slice_per_dim(node, x, axes, starts, ends, steps),
                             value_id=node.id)


@converter("Slice")
def slice_v1(node: Node):
    x = node.input(0)
    starts, ends = node.attr("starts"), node.attr("ends")
    axes = node.attr("axes") or list(range(len(starts)))
    return ops.process.slice(x, *_slice_per_dim(node, x, axes, starts, ends, [1] * len(starts)),
                             value_id=node.id)


@converter("Split")
def split(node: Node):
    x = node.input(0)
    axis = node.axis(node.attr("axis"), x)
    size = static_dims(node, x)[axis]
    sizes = node.ints(1, "split") if node.opset >= 13 else node.attr("split")
    if not sizes:
        count = node.attr("num_outputs") or len(node.ids)
        chunk = -(-size // count)  # the last part may be smaller
        sizes = [min(chunk, size - i * chunk) for i in range(count)]
    offsets = np.cumsum([0] + list(sizes))
    results = []
    for i, (begin, end) in enumerate(itertools.pairwise(offsets)):
        start, stop, stride = [0] * rank(x), list(dims(x)), [1] * rank(x)
        start[axis], stop[axis] = int(begin), int(end)
        stop = [INT_MAX if d == -1 else d for d in stop]
        results.append(ops.process.slice(x, start, stop, stride, value_id=node.ids[i] or None))
    return results


@converter("Gather")
def gather(node: Node):
    x = node.input(0)
    return ops.process.gather(x, node.input(1), node.axis(node.attr("axis"), x), value_id=node.id)


@converter("GatherElements")
def gather_elements(node: Node):
    x = node.input(0)
    return ops.process.gather_elements(x, node.input(1), node.axis(node.attr("axis"), x),
                                       value_id=node.id)


@converter("GatherND")
def gather_nd(node: Node):
    return ops.process.gather_nd(node.input(0), node.input(1), node.attr("batch_dims", 0),
                                 value_id=node.id)


@converter("Compress")
def compress(node: Node):
    x = node.input(0)
    axis = node.attr("axis")
    if axis is None:  # compress the flattened input
        x = ops.process.reshape(x, (-1,))
        axis = 0
    return ops.process.compress(x, node.input(1), node.axis(axis, x), value_id=node.id)


@converter("OneHot")
def one_hot(node: Node):
    indices = node.input(0)
    if indices.element_type not in (ElementType.INT32, ElementType.INT64):
        indices = ops.process.cast(indices, ElementType.INT64)  # ONNX allows float indices
    depth = int(node.array(1).reshape(-1)[0])
    return ops.process.one_hot(indices, depth, node.input(2), node.attr("axis"), value_id=node.id)


@converter("Trilu")
def trilu(node: Node):
    x = node.input(0)
    k = int(node.array(1, np.zeros(1)).reshape(-1)[0])
    rows, cols = static_dims(node, x)[-2:]
    keep = np.triu if node.attr("upper") else np.tril
    mask = keep(np.ones((rows, cols), bool), k)
    zero = constant(np.zeros((), x.type.dtype))
    return ops.math.select(constant(mask), x, zero, value_id=node.id)


# -- padding -----------------------------------------------------------------------------------

@converter("Pad", since=11)
def pad(node: Node):
    x = node.input(0)
    fill = node.input(2)
    if fill is not None and node.is_constant(2):
        fill = node.array(2).reshape(-1)
        fill = fill[0] if fill.size else 0
    axes = node.ints(3, default=list(range(rank(x))))
    return _pad(node, x, node.ints(1), axes, 0 if fill is None else fill)


@converter("Pad")
def pad_v2(node: Node):
    x = node.input(0)
    return _pad(node, x, node.attr("pads"), list(range(rank(x))), node.attr("value", 0.0))


def _pad(node: Node, x, pads, axes, fill):
    front, back = [0] * rank(x), [0] * rank(x)
    for axis, f, b in zip(axes, pads[:len(axes)], pads[len(axes):]):
        front[node.axis(axis, x)], back[node.axis(axis, x)] = f, b
    mode = node.attr("mode", "constant")
    if mode != "constant":  # edge, reflect, wrap: a gather of known indices per padded axis
        for axis, (f, b) in enumerate(zip(front, back)):
            if f or b:
                source = np.pad(np.arange(static_dims(node, x)[axis]), (f, b), mode)
                x = ops.process.gather(x, constant(source.astype(np.int64)), axis)
        return ops.process.cast(x, x.element_type, value_id=node.id)
    if any(p < 0 for p in front + back):  # negative padding crops
        x = ops.process.slice(x, [max(-f, 0) for f in front],
                              [(-b if b < 0 else INT_MAX) for b in back], [1] * rank(x))
        front, back = [max(f, 0) for f in front], [max(b, 0) for b in back]
    if not isinstance(fill, Value) and fill == 0:
        return ops.process.pad(x, front, back, value_id=node.id)
    # Zero padding, then the fill value (a number, or a scalar known at run time) selected
    # wherever the padding went.
    interior = np.pad(np.ones(static_dims(node, x), bool), list(zip(front, back)))
    if not isinstance(fill, Value):
        fill = constant(np.asarray(fill, x.type.dtype))
    return ops.math.select(constant(interior), ops.process.pad(x, front, back), fill,
                           value_id=node.id)


# -- resizing ----------------------------------------------------------------------------------
_TVM_COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                         "tf_half_pixel_for_nn")
_INTERPOLATIONS = {"nearest": InterpolationMode.NEAREST,
                   "linear": InterpolationMode.LINEAR, "cubic": InterpolationMode.CUBIC}


def _resized_dims(node: Node, x, scales, sizes, axes):
    """Output dims from ``scales`` or ``sizes`` over ``axes``, as ONNX Resize computes them,
    and the scale of each axis (what coordinates are transformed by)."""
    in_dims = static_dims(node, x)
    out, factors = list(in_dims), [1.0] * len(in_dims)
    if sizes is not None:
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        ratios = [s / in_dims[a] for a, s in zip(axes, sizes)]
        if policy != "stretch":
            ratio = min(ratios) if policy == "not_larger" else max(ratios)
            sizes = [int(np.floor(in_dims[a] * ratio + 0.5)) for a in axes]
            ratios = [ratio] * len(axes)
        for axis, size, ratio in zip(axes, sizes, ratios):
            out[axis], factors[axis] = int(size), ratio
    else:
        for axis, scale in zip(axes, scales):
            out[axis], factors[axis] = int(np.floor(in_dims[axis] * float(scale))), float(scale)
    return out, factors


def _cubic(distance, a: float):
    """Keys' cubic convolution kernel with coefficient ``a`` at ``distance``."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


class _AxisResize:
    """ONNX Resize along one axis as a weight matrix (output positions x input positions),
    computed when the model is imported, and the positions outside a crop."""

    def __init__(self, node: Node, mode: str, rule: str, size: int, out_size: int,
                 scale: float, roi):
        y = np.arange(out_size, dtype=np.float64)
        width = scale * size  # the unrounded output size
        self.outside = np.zeros(out_size, bool)
        if mode == "align_corners":
            x = y * (size - 1) / (width - 1) if width != 1 else np.zeros(out_size)
        elif mode == "asymmetric":
            x = y / scale
        elif mode == "tf_half_pixel_for_nn":
            x = (y + 0.5) / scale
        elif mode == "tf_crop_and_resize":
            span = (roi[1] - roi[0]) * (size - 1)
            x = (y * span / (width - 1) if width != 1 else np.full(out_size, span / 2)) \
                + roi[0] * (size - 1)
            self.outside = (x < 0) | (x > size - 1)
        elif mode == "pytorch_half_pixel":
            x = (y + 0.5) / scale - 0.5 if width != 1 else np.full(out_size, -0.5)
        elif mode in ("half_pixel", "half_pixel_symmetric"):
            offset = size / 2 * (1 - out_size / width) if mode == "half_pixel_symmetric" else 0
            x = offset + (y + 0.5) / scale - 0.5
        else:
            raise node.unsupported(f"coordinate_transformation_mode {mode!r}")
        self.weights = self._weights(node, rule, x, size, scale)

    @staticmethod
    def _weights(node: Node, rule: str, x, size: int, scale: float):
        """Each output position's weights of its input neighbours, edges repeated; ``rule``
        is the nearest_mode."""
        mode, antialias = node.attr("mode", "nearest"), node.attr("antialias", 0)
        base = np.floor(x)
        ratio = np.where(x == base, 1.0, x - base)  # in (0, 1]: the left neighbour preferred
        if mode == "nearest":
            right = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                     "floor": np.zeros_like(ratio, bool), "ceil": np.ones_like(ratio, bool)}[rule]
            right = right | (ratio == 1)
            taps, coefficients = [0, 1], np.stack([~right, right], 1).astype(np.float64)
        else:
            reach = 1 if mode == "linear" else 2  # the kernel's radius at scale 1
            stretch = min(scale, 1.0) if antialias else 1.0  # antialias widens it downscaling
            first = int(np.floor(-reach / stretch) + 1)
            taps = list(range(first, 2 - first))
            distance = (np.asarray(taps)[None, :] - ratio[:, None]) * stretch
            coefficients = np.clip(1 - np.abs(distance), 0, 1) if mode == "linear" else \
                _cubic(distance, node.attr("cubic_coeff_a", -0.75))
            if antialias:
                coefficients = coefficients / coefficients.sum(1, keepdims=True)
        neighbours = (base - (ratio == 1))[:, None] + np.asarray(taps)[None, :]
        if node.attr("exclude_outside", 0):
            coefficients = np.where((neighbours < 0) | (neighbours >= size), 0.0, coefficients)
            total = coefficients.sum(1, keepdims=True)
            coefficients = coefficients / np.where(total == 0, 1.0, total)
        weights = np.zeros((len(x), size))
        rows = np.repeat(np.arange(len(x)), len(taps))
        np.add.at(weights, (rows, np.clip(neighbours, 0, size - 1).astype(np.int64).ravel()),
                  coefficients.ravel())
        return weights


def _resize_by_weights(node: Node, x, out, factors, axes, coordinate_mode, nearest_mode):
    """Resize as one matrix product per resized axis, in float64 when ``x`` is float64 and
    float32 otherwise: any mode, antialias, crops and scales the sizes do not match."""
    in_dims = static_dims(node, x)
    wide = ElementType.FLOAT64 if x.element_type == ElementType.FLOAT64 \
        else ElementType.FLOAT32
    dtype = numpy_dtype(wide)
    y = ops.process.cast(x, wide)
    roi = node.array(1).reshape(-1) if coordinate_mode == "tf_crop_and_resize" else None
    extrapolation = node.attr("extrapolation_value", 0.0)
    current = list(in_dims)
    for k, axis in enumerate(axes):
        bounds = None if roi is None else (roi[k], roi[len(axes) + k])
        if out[axis] == in_dims[axis] and factors[axis] == 1 and bounds in (None, (0, 1)):
            continue  # an identity
        resized = _AxisResize(node, coordinate_mode, nearest_mode, in_dims[axis], out[axis],
                              factors[axis], bounds)
        outer, inner = int(np.prod(current[:axis])), int(np.prod(current[axis + 1:]))
        lines = ops.process.reshape(y, (outer, in_dims[axis], inner))
        weights = constant(resized.weights.astype(dtype)[None])
        y = ops.math.batch_mat_mul(weights, False, lines, False)
        if resized.outside.any():
            y = ops.math.select(constant(resized.outside.reshape(1, -1, 1)),
                                constant(np.asarray(extrapolation, dtype)), y)
        current[axis] = out[axis]
    y = ops.process.reshape(y, tuple(current))
    if x.element_type != wide and np.issubdtype(x.type.dtype, np.integer):
        info = np.iinfo(x.type.dtype)  # saturated, then truncated, as onnx's reference casts
        y = ops.math.clamp(y, float(info.min), float(info.max))
    return ops.process.cast(y, x.element_type, value_id=node.id)


def _resize(node: Node, x, scales, sizes, axes, coordinate_mode, nearest_mode):
    out, factors = _resized_dims(node, x, scales, sizes, axes)
    in_dims = static_dims(node, x)
    # TVM's resize maps coordinates by the ratio of the sizes, over whole axes, without
    # antialiasing; the rest is computed by weight matrices.
    if node.attr("antialias", 0) or coordinate_mode not in _TVM_COORDINATE_MODES or any(
            f != o / i for f, o, i in zip(factors, out, in_dims) if o != i or f != 1):
        return _resize_by_weights(node, x, out, factors, axes, coordinate_mode, nearest_mode)
    return ops.process.resize(x, _INTERPOLATIONS[node.attr("mode")], coordinate_mode, 0, out,
                              value_id=node.id, nearest_mode=nearest_mode,
                              cubic_coeff_a=node.attr("cubic_coeff_a", -0.75),
                              exclude_outside=node.attr("exclude_outside", 0))


@converter("Resize", since=11)
def resize(node: Node):
    x = node.input(0)
    axes = [node.axis(a, x) for a in node.attr("axes") or range(rank(x))]
    sizes = node.ints(3) if node.input(3) is not None and dims(node.input(3)) != (0,) else None
    scales = None if sizes is not None else node.array(2).reshape(-1)
    return _resize(node, x, scales, sizes, axes, node.attr("coordinate_transformation_mode"),
                   node.attr("nearest_mode"))


@converter("Resize", since=10)
def resize_v10(node: Node):
    x = node.input(0)
    return _resize(node, x, node.array(1).reshape(-1), None, range(rank(x)), "asymmetric",
                   "floor")


@converter("Upsample")
def upsample(node: Node):
    x = node.input(0)
    scales = node.attr("scales") if node.opset < 9 else node.array(1).reshape(-1)
    return _resize(node, x, scales, None, range(rank(x)), "asymmetric", "floor")


@converter("CenterCropPad")
def center_crop_pad(node: Node):
    x = node.input(0)
    target = node.ints(1)
    axes = [node.axis(a, x) for a in node.attr("axes") or range(rank(x))]
    sizes = list(static_dims(node, x))
    start, end = [0] * rank(x), list(sizes)
    front, back = [0] * rank(x), [0] * rank(x)
    for axis, size in zip(axes, target):
        if size < sizes[axis]:  # crop, the window's start rounded down
            start[axis] = (sizes[axis] - size) // 2
            end[axis] = start[axis] + size
        else:  # pad, an odd pixel going to the end
            front[axis] = (size - sizes[axis]) // 2
            back[axis] = size - sizes[axis] - front[axis]
    cropped = ops.process.slice(x, start, end, [1] * rank(x))
    return ops.process.pad(cropped, front, back, value_id=node.id)


# -- scattering --------------------------------------------------------------------------------

def _scatter(node: Node, data, updates, destinations, reduction: str, value_id=None):
    """``data`` with each element of ``updates`` written to (or combined with, by
    ``reduction``) the element of ``data`` that ``destinations`` (an array of flat indices
    into data, shaped like updates) names. The indices are known at import, so this is a
    few gathers and selects: pass r writes the r-th update of every element it reaches."""
    size = int(np.prod(static_dims(node, data)))
    flat_data = ops.process.reshape(data, (size,))
    flat_updates = ops.process.reshape(updates, (-1,))
    order = np.argsort(destinations.reshape(-1), kind="stable")
    targets = destinations.reshape(-1)[order]
    result = flat_data
    for pass_index in range(int(np.bincount(targets, minlength=size).max()) if size else 0):
        source, reached = np.zeros(size, np.int64), np.zeros(size, bool)
        for target in np.unique(targets):
            hits = order[targets == target]
            if pass_index < len(hits):
                source[target], reached[target] = hits[pass_index], True
        update = ops.process.gather(flat_updates, constant(source), 0)
        combined = {"none": update, "add": ops.math.add(result, update),
                    "mul": ops.math.mul(result, update), "max": ops.math.max(result, update),
                    "min": ops.math.min(result, update)}[reduction]
        result = ops.math.select(constant(reached), combined, result)
    return ops.process.reshape(result, dims(data), value_id=value_id)


def _scatter_indices(indices: np.ndarray, sizes) -> np.ndarray:
    """A scatter's indices (each against ``sizes``, broadcast over them) with ONNX's negative
    ones wrapped; one outside [-n, n-1] is refused, naming it: it would write past the data."""
    sizes = np.broadcast_to(np.asarray(sizes, np.int64), indices.shape)
    bad = np.argwhere((indices < -sizes) | (indices >= sizes))
    if len(bad):
        at = tuple(int(i) for i in bad[0])
        raise OdlaError(Status.INVALID_PARAM, f"index {int(indices[at])} at {list(at)} of its "
                        f"indices; expected {-int(sizes[at])} to {int(sizes[at]) - 1}")
    return np.where(indices < 0, indices + sizes, indices)


@converter("Scatter")  # ScatterElements' name before opset 11
@converter("ScatterElements")
def scatter_elements(node: Node):
    data, updates = node.input(0), node.input(2)
    shape = static_dims(node, data)
    axis = node.attr("axis", 0) % rank(data)
    indices = _scatter_indices(node.array(1).astype(np.int64), shape[axis])
    positions = list(np.indices(indices.shape))
    positions[axis] = indices
    return _scatter(node, data, updates, np.ravel_multi_index(positions, shape),
                    node.attr("reduction", "none"), node.id)


@converter("ScatterND")
def scatter_nd(node: Node):
    data, updates = node.input(0), node.input(2)
    shape = static_dims(node, data)
    indices = node.array(1).astype(np.int64)
    depth = indices.shape[-1]
    starts = np.ravel_multi_index(np.moveaxis(_scatter_indices(indices, shape[:depth]), -1, 0),
                                  shape[:depth])
    inner = int(np.prod(shape[depth:]))  # each index names a slice of this many elements
    destinations = (starts[..., None] * inner + np.arange(inner)).reshape(dims(updates))
    return _scatter(node, data, updates, destinations, node.attr("reduction", "none"), node.id)


@converter("TensorScatter")
def tensor_scatter(node: Node):
    """The update written into the cache along ``axis`` from each batch entry's write index."""
    cache, update = node.input(0), node.input(1)
    shape = static_dims(node, cache)
    axis = node.attr("axis") % rank(cache)
    grid = np.indices(static_dims(node, update))
    writes = node.array(2, np.zeros(shape[0], np.int64)).astype(np.int64)
    grid[axis] = grid[axis] + writes[grid[0]]
    if node.attr("mode") == "circular":
        grid[axis] %= shape[axis]
    return _scatter(node, cache, update, np.ravel_multi_index(list(grid), shape), "none",
                    node.id)


@converter("ReverseSequence")
def reverse_sequence(node: Node):
    """Each batch entry's first ``sequence_lens`` steps reversed: a gather of known indices."""
    x = node.input(0)
    shape = static_dims(node, x)
    batch_axis, time_axis = node.attr("batch_axis"), node.attr("time_axis")
    lengths = node.array(1).astype(np.int64)
    grid = np.indices(shape)
    steps, batches = grid[time_axis], grid[batch_axis]
    length = lengths[batches]
    source = np.where(steps < length, length - 1 - steps, steps)
    return ops.process.gather_elements(x, constant(source), time_axis, value_id=node.id)


@converter("Col2Im")
def col2im(node: Node):
    """Columns of sliding blocks summed back into the (padded) image, then unpadded."""
    x = node.input(0)
    image, block = node.ints(1), node.ints(2)
    spatial = len(image)
    dilations = node.attr("dilations") or [1] * spatial
    strides = node.attr("strides") or [1] * spatial
    pads = node.attr("pads") or [0] * (2 * spatial)
    batch, columns, _ = static_dims(node, x)
    channels = columns // int(np.prod(block))
    padded = [i + pads[d] + pads[d + spatial] for d, i in enumerate(image)]
    counts = [(p - (b - 1) * d - 1) // s + 1 for p, b, d, s in zip(padded, block, dilations,
                                                                  strides)]
    offsets = np.indices(block).reshape(spatial, -1, 1)  # per block element
    positions = np.indices(counts).reshape(spatial, 1, -1)  # per block
    within = np.ravel_multi_index([p * s + o * d for p, o, s, d in
                                   zip(positions, offsets, strides, dilations)], padded)
    planes = np.arange(batch * channels).reshape(batch, channels, 1, 1) * int(np.prod(padded))
    destinations = (planes + within).reshape(static_dims(node, x))
    canvas = constant(np.zeros([batch, channels, *padded], x.type.dtype))
    summed = _scatter(node, canvas, x, destinations, "add")
    return ops.process.slice(summed, [0, 0, *pads[:spatial]],
                             [batch, channels, *(p + i for p, i in zip(pads[:spatial], image))],
                             [1] * (spatial + 2), value_id=node.id)


@converter("ArrayFeatureExtractor", domain="ai.onnx.ml")
def array_feature_extractor(node: Node):
    """The elements of the last axis that the indices name."""
    x = node.input(0)
    indices = ops.process.reshape(node.input(1), (-1,))
    return ops.process.gather(x, indices, rank(x) - 1, value_id=node.id)
