"""Lowerings of ODLA's process ops (odla_ops_process.h)."""

from __future__ import annotations

import functools
import operator

import numpy as np
from tvm import relax, tirx, topi
from tvm.relax import op as R

from ..errors import LoweringError
from ..kernels import dims_tensor, random_fill, scaled_dims, strided_gather, wrap_negative
from ..registry import register
from .common import (
    as_bool,
    check_axis,
    checked_values,
    checked_verdict,
    check_integer,
    check_same_dtype,
    check_vector,
    dim_verdict,
    static_dims,
)


@register("Reshape")
def reshape(emit, x, *, output_dims):
    return R.reshape(x, list(output_dims))


@register("Transpose")
def transpose(emit, x, *, permutations):
    if sorted(permutations) != list(range(x.ty.ndim)):
        raise LoweringError(
            f"permutation {tuple(permutations)} is not a permutation of 0..{x.ty.ndim - 1} for {x.ty}"
        )
    return R.permute_dims(x, list(permutations))


@register("Concat")
def concat(emit, *inputs, axis):
    if not inputs:
        raise LoweringError("no inputs; expected at least one value to concatenate")
    check_axis(inputs[0], axis)
    return R.concat(list(inputs), axis)


@register("Slice")
def slice_(emit, x, *, start, end, stride):
    rank = x.ty.ndim
    for name, values in (("start", start), ("end", end), ("stride", stride)):
        if len(values) != rank:
            raise LoweringError(f"{name} has {len(values)} entries; expected {rank} for {x.ty}")
    if any(s == 0 for s in stride):
        raise LoweringError(f"stride {tuple(stride)} has a 0; expected non-zero steps")
    return R.strided_slice(x, list(range(rank)), list(start), list(end), list(stride))


@register("Gather")
def gather(emit, x, indices, *, axis):
    check_axis(x, axis)
    if indices.ty.dtype not in ("int32", "int64"):
        raise LoweringError(f"indices are {indices.ty.dtype}; expected int32 or int64")
    # "clip" rather than the default "fast": the indices are in range already (checked and
    # wrapped), and at every compile TOPI warns that fast mode segfaults on indices out of range.
    checked = _checked(emit, indices, [x.ty.shape.values[axis]], "Gather", axis)
    return R.take(x, checked, axis, mode="clip")


@register("Pad")
def pad(emit, x, *, padding_front, padding_back):
    rank = x.ty.ndim
    if len(padding_front) != rank or len(padding_back) != rank:
        raise LoweringError(
            f"paddings have {len(padding_front)} and {len(padding_back)} entries; expected {rank} each"
        )
    widths = [w for pair in zip(padding_front, padding_back) for w in pair]
    return R.nn.pad(x, widths)


@register("Cast")
def cast(emit, x, *, dtype):
    return R.astype(x, dtype)


@register("BitCast")
def bit_cast(emit, x, *, dtype):
    if "bool" in (x.ty.dtype, dtype):  # a BOOL byte holds 0 or 1, read alike as an integer
        return R.astype(x, dtype)
    return emit.te(topi.reinterpret, x, dtype)


@register("Squeeze")
def squeeze(emit, x, *, axes):
    dims = x.ty.shape.values
    for a in axes:
        check_axis(x, a)
        if int(dims[a]) != 1:
            raise LoweringError(f"axis {a} of {x.ty} has size {int(dims[a])}; expected 1 to squeeze")
    return R.squeeze(x, list(axes) if axes else None)


@register("ExpandDims")
def expand_dims(emit, x, *, output_dims):
    return R.broadcast_to(x, list(output_dims))


register("Broadcast")(expand_dims)


@register("Compress")
def compress(emit, x, condition, *, axis):
    check_vector(condition, "condition")
    if axis is None:
        x, axis = emit(R.reshape(x, [-1])), 0
    check_axis(x, axis)
    size = x.ty.shape.values[axis]
    if isinstance(size, tirx.IntImm) and int(condition.ty.shape.values[0]) > int(size):
        # Entries past the end of the axis select nothing, as onnxruntime has it.
        condition = emit(R.strided_slice(condition, [0], [0], [int(size)]))
    positions = emit.with_shape(R.nonzero(as_bool(emit, condition)))  # (1, count)
    indices = emit(R.reshape(positions, [positions.ty.shape.values[1]]))
    if not isinstance(size, tirx.IntImm):
        indices = emit(R.add(indices, emit(R.astype(_condition_fits(emit, x, condition, axis),
                                                    str(indices.ty.dtype)))))
    return R.take(x, indices, axis, mode="clip")


def _condition_fits(emit, x, condition, axis):
    """The verdict of a run-time check that a condition is no longer than an axis known at
    run time only, for the take to add: its entries past the end would select slices that do
    not exist (a clipped take repeated the last one). (Cut to a static axis instead.)"""
    length = int(condition.ty.shape.values[0])
    return dim_verdict(emit, x, axis, length, np.iinfo(np.int64).max,
                       f"Compress {emit.value_id!r}: condition length {length} is out of "
                       f"range; expected at most {{dim}}, the length of axis {axis} of its input")


@register("Stack")
def stack(emit, *inputs, axis):
    if not inputs:
        raise LoweringError("no inputs; expected at least one value to stack")
    check_same_dtype(*inputs)
    check_axis(inputs[0], axis, allow_end=True)
    return R.stack(list(inputs), axis)


@register("Fill")
def fill(emit, *, method, dims, dtype, p0, p1, seed):
    if method == "EyeLike":
        if len(dims) != 2:
            raise LoweringError(f"EyeLike fills a matrix; type has shape {tuple(dims)}")
        return R.eye(dims[0], dims[1], 0, dtype)
    if not dtype.startswith(("float", "bfloat")):
        raise LoweringError(f"{method} fills floating-point values; type has element type {dtype}")
    return emit.te(random_fill, tuple(dims), dtype, method == "RandomNormal", p0, p1, seed)


def _checked(emit, indices, sizes: list, op: str, axis: int | None = None):
    """``indices`` with negative ones counted from the end (wrap_negative), once
    checked_verdict found each in range of its dim."""
    what = f"{op} {emit.value_id!r}" + ("" if axis is None else f", axis {axis} of the input")
    return emit.te(wrap_negative, indices, sizes, checked_verdict(emit, indices, sizes, what))


def _check_indices(indices):
    if indices.ty.dtype not in ("int32", "int64"):
        raise LoweringError(f"indices are {indices.ty.dtype}; expected int32 or int64")


@register("GatherElements")
def gather_elements(emit, x, indices, *, axis):
    check_axis(x, axis)
    _check_indices(indices)
    if indices.ty.ndim != x.ty.ndim:
        raise LoweringError(f"indices are {indices.ty}; expected the rank of input {x.ty}")
    return R.gather_elements(
        x, _checked(emit, indices, [x.ty.shape.values[axis]], "GatherElements", axis), axis)


@register("GatherND")
def gather_nd(emit, x, indices, *, batch_dims):
    _check_indices(indices)
    tuple_size = indices.ty.shape.values[-1] if indices.ty.ndim else None
    if not isinstance(tuple_size, tirx.IntImm) or batch_dims + int(tuple_size) > x.ty.ndim:
        raise LoweringError(
            f"indices are {indices.ty} with {batch_dims} batch dims; expected index tuples of a "
            f"static length in the last axis, addressing at most the {x.ty.ndim} dims of input"
        )
    sizes = list(x.ty.shape.values[batch_dims: batch_dims + int(tuple_size)])
    checked = _checked(emit, indices, sizes, "GatherND") if sizes else indices
    return R.gather_nd(x, checked, batch_dims)


@register("OneHot")
def one_hot(emit, indices, values, *, depth, axis):
    _check_indices(indices)
    check_vector(values, "values", 2)
    check_axis(indices, axis, allow_end=True)
    rank = indices.ty.ndim
    axis %= rank + 1
    # Unchecked: ONNX gives an index outside [-depth, depth-1] a row of off values, and it
    # addresses no memory.
    wrapped = emit.te(wrap_negative, indices, [depth])
    positions = emit(R.reshape(emit(R.arange(depth, dtype=str(indices.ty.dtype))),
                               [depth] + [1] * (rank - axis)))
    hot = emit(R.equal(emit(R.expand_dims(wrapped, axis)), positions))
    off = emit(R.take(values, relax.const(0, "int64")))
    on = emit(R.take(values, relax.const(1, "int64")))
    return R.where(hot, on, off)


def _runtime_dims(emit, vector, name):
    """The entries of the 1-D integer ``vector``, read at run time, as symbolic dims."""
    check_vector(vector, name)
    check_integer(vector, name)
    return list(emit.with_shape(R.tensor_to_shape(vector)).ty.values)


@register("ReshapeDynamic")
def reshape_dynamic(emit, x, output_shape, *, allow_zero):
    check_vector(output_shape, "output_shape")
    check_integer(output_shape, "output_shape")
    in_dims = list(x.ty.shape.values)
    # A shape of other than the input's elements would read past them: checked first (the
    # input's dims, symbolic ones too, as the run binds them), and the shape read after the
    # check (adding its zero verdict).
    verdict = emit(relax.call_pure_packed(
        "odla_tvm.check_reshape", output_shape, f"Reshape {emit.value_id!r}",
        bool(allow_zero), *[relax.prim_value(d) for d in in_dims],
        ty_args=relax.TensorType((), str(output_shape.ty.dtype))))
    output_shape = emit(R.add(output_shape, verdict))
    requested = _runtime_dims(emit, output_shape, "output_shape")
    # ONNX's rules: 0 keeps the input's dim (unless allow_zero), -1 is what the element
    # count leaves.
    dims = [tirx.Select(d == 0, in_dims[i], d) if i < len(in_dims) and not allow_zero else d
            for i, d in enumerate(requested)]
    one = tirx.const(1, "int64")
    known = functools.reduce(operator.mul, [tirx.Select(d == -1, one, d) for d in dims], one)
    count = functools.reduce(operator.mul, in_dims, 1)
    # A 0 beside the -1 (allow_zero) makes known 0: dividing by it would be SIGFPE; by 1, the
    # reshape's element-count check refuses the shape instead.
    per_inferred = count // tirx.max(known, one)
    return R.reshape(x, relax.ShapeExpr([tirx.Select(d == -1, per_inferred, d) for d in dims]))


_RESIZE = {1: (topi.image.resize1d, "NCW"), 2: (topi.image.resize2d, "NCHW"),
           3: (topi.image.resize3d, "NCDHW")}


def _resize_axes(emit, x, axes, sizes, *, method, coordinate_mode, nearest_mode, cubic_coeff_a,
                 exclude_outside):
    """Resizes ``axes`` of ``x`` to ``sizes``: they are moved last and the other axes folded
    into one channel axis, so that TOPI's channels-first resize (1-3 spatial dims) applies."""
    if not 1 <= len(axes) <= 3:
        raise LoweringError(f"{len(axes)} axes to resize; expected 1 to 3")
    rank = x.ty.ndim
    dims = x.ty.shape.values
    kept = [a for a in range(rank) if a not in axes]
    order = kept + list(axes)
    if order != list(range(rank)):
        x = emit(R.permute_dims(x, order))
    x = emit(R.reshape(x, [1, -1] + [dims[a] for a in axes]))
    resize_op, layout = _RESIZE[len(axes)]
    y = emit.te(resize_op, x, [0.0] * (2 * len(axes)), list(sizes), layout,
                "nearest_neighbor" if method == "nearest" else method, coordinate_mode,
                nearest_mode, cubic_coeff_a, int(exclude_outside))
    y = emit(R.reshape(y, [dims[a] for a in kept] + list(sizes)))
    if order != list(range(rank)):
        y = emit(R.permute_dims(y, [order.index(a) for a in range(rank)]))
    return y


ALL_AXES = 0xFFFFFFFF


@register("Resize")
def resize(emit, x, *, axes_mask, output_dims, **interpolation):
    rank = x.ty.ndim
    if len(output_dims) != rank:
        raise LoweringError(f"output_dims {tuple(output_dims)} has {len(output_dims)} dims; "
                            f"expected {rank} for {x.ty}")
    dims = x.ty.shape.values
    changed = [a for a in range(rank)
               if not isinstance(dims[a], tirx.IntImm) or int(dims[a]) != output_dims[a]]
    # A 0 mask resizes every axis whose size changes; so does an all-ones one (HALO's generated
    # code passes -1 as the odla_uint32 mask, its "every axis").
    axes_mask = 0 if axes_mask == ALL_AXES else axes_mask
    axes = [a for a in range(rank) if axes_mask >> (rank - 1 - a) & 1] if axes_mask else changed
    resized_elsewhere = [a for a in changed if a not in axes]
    if resized_elsewhere or axes_mask >> rank:
        raise LoweringError(f"axes_mask {axes_mask:#b} selects axes {axes}, but output_dims "
                            f"{tuple(output_dims)} change axes {resized_elsewhere} of {x.ty}")
    return _resize_axes(emit, x, axes, [output_dims[a] for a in axes], **interpolation)


@register("ResizeDynamic")
def resize_dynamic(emit, x, scales, sizes, **interpolation):
    rank = x.ty.ndim
    if not 3 <= rank <= 5:
        raise LoweringError(f"input is {x.ty}; expected channels-first data of rank 3 to 5")
    # Of each, the spatial entries (the others are ignored), checked: a size below 1 or a
    # scale not positive and finite has no meaning, and a negative size would size a tensor.
    what = f"ResizeDynamic {emit.value_id!r}"
    if sizes is None:
        check_vector(scales, "scales", rank)
        spatial = checked_values(emit, emit(R.strided_slice(scales, [0], [2], [rank])), what,
                                 "scale", "a positive finite scale", lowest=0.0, nonzero=True,
                                 first=2)
        spatial = emit.te(scaled_dims, list(x.ty.shape.values)[2:], spatial)
    else:
        check_vector(sizes, "sizes", rank)
        spatial = checked_values(emit, emit(R.strided_slice(sizes, [0], [2], [rank])), what,
                                 "size", "at least 1", lowest=1, first=2)
    axes = list(range(2, rank))
    return _resize_axes(emit, x, axes, _runtime_dims(emit, spatial, "sizes"), **interpolation)


@register("Shape")
def shape(emit, x):
    dims = static_dims(x)
    if dims is not None:
        return relax.const(np.array(dims, np.int64), "int64")
    return emit.te(dims_tensor, list(x.ty.shape.values))


@register("SliceDynamic")
def slice_dynamic(emit, x, start, size, stride):
    rank = x.ty.ndim
    for name, vector in (("start", start), ("stride", stride)):
        check_vector(vector, name, rank)
        check_integer(vector, name)
    check_vector(size, "size", rank)
    # Starts are clamped into the input (strided_gather), as ONNX clamps them; a negative
    # size would size a tensor, and a step of 0 is no slice (ONNX calls it invalid).
    what = f"SliceDynamic {emit.value_id!r}"
    size = checked_values(emit, size, what, "size", "at least 0", lowest=0)
    stride = checked_values(emit, stride, what, "stride", "a non-zero step", nonzero=True)
    return emit.te(strided_gather, x, start, stride, _runtime_dims(emit, size, "size"))


@register("DimsExpand")
def dims_expand(emit, x, original, axes):
    check_vector(x, "input")
    check_integer(axes, "axes")
    check_same_dtype(x, original)
    axes = _checked(emit, emit(R.astype(axes, "int64")), [x.ty.shape.values[0]], "DimsExpand")
    replaced = emit(R.take(x, axes))
    dtype = str(x.ty.dtype)
    relative = emit(R.less(original, relax.const(0, dtype)))
    values = emit(R.where(relative, emit(R.add(original, replaced)), original))
    return R.scatter_elements(x, axes, values, 0)


@register("Split")
def split(emit, x, *, axis, parts):
    check_axis(x, axis)
    size = x.ty.shape.values[axis]
    if isinstance(size, tirx.IntImm) and int(size) % parts:
        raise LoweringError(f"axis {axis} of {x.ty} has size {int(size)}; expected a multiple "
                            f"of num_split {parts}")
    if parts == 1:  # Relax's split into one part is the tensor itself, not a tuple
        return [x]
    pieces = emit(R.split(x, parts, axis))
    return [relax.TupleGetItem(pieces, i) for i in range(parts)]


@register("Tile")
def tile(emit, x, *, repeats):
    if len(repeats) != x.ty.ndim:
        raise LoweringError(f"repeat has {len(repeats)} entries; expected {x.ty.ndim} for {x.ty}")
    return R.tile(x, list(repeats))


@register("TileDynamic")
def tile_dynamic(emit, x, repeat):
    rank = x.ty.ndim
    check_vector(repeat, "repeat", rank)
    check_integer(repeat, "repeat")
    # A negative repeat would size a tensor of negative dims; 0 is an empty result.
    repeat = checked_values(emit, repeat, f"TileDynamic {emit.value_id!r}", "repeat",
                            "at least 0", lowest=0)
    repeats = _runtime_dims(emit, repeat, "repeat")
    dims = [d * r for d, r in zip(x.ty.shape.values, repeats)]
    return emit.te(topi.dyn_tile, x, dims, rank)
