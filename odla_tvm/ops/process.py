"""ODLA process ops (odla_ops_process.h). Each adds one op to the current computation."""

from __future__ import annotations

from ..computation import Value
from ..types import (
    ElementType,
    FillMethod,
    InterpolationMode,
    OdlaError,
    ResizeCoordinateMode,
    Status,
    ValueType,
    checked,
    numpy_dtype,
    odla_enum,
)
from ._args import apply, apply_values, constant_ints, ints, invalid, number


def reshape(input: Value, output_dims, value_id: str | None = None) -> Value:
    """The same elements in shape ``output_dims`` (one -1 dim is inferred)."""
    dims = ints("Reshape", "output_dims", output_dims, -1)
    return apply("Reshape", {"input": input}, {"output_dims": dims}, value_id)


def transpose(input: Value, permutations, output_dims=None, value_id: str | None = None) -> Value:
    perm = ints("Transpose", "permutations", permutations, 0)
    return apply("Transpose", {"input": input}, {"permutations": perm}, value_id, output_dims)


def concat(inputs, axis: int, output_shape=None, value_id: str | None = None) -> Value:
    inputs = list(inputs)
    (axis,) = ints("Concat", "axis", [axis])
    return apply("Concat", {}, {"axis": axis}, value_id, output_shape, variadic=tuple(inputs))


def slice(input: Value, start, end, stride, output_dims=None, value_id: str | None = None) -> Value:
    """Per-dim ``start:end:stride`` with NumPy's clamping and negative-index rules."""
    attrs = {"start": ints("Slice", "start", start), "end": ints("Slice", "end", end),
             "stride": ints("Slice", "stride", stride)}
    return apply("Slice", {"input": input}, attrs, value_id, output_dims)


def gather(input: Value, indices: Value, axis: int, output_dims=None,
           value_id: str | None = None) -> Value:
    (axis,) = ints("Gather", "axis", [axis])
    return apply("Gather", {"input": input, "indices": indices}, {"axis": axis}, value_id,
                 output_dims)


def pad(input: Value, padding_front, padding_back, output_dims=None,
        value_id: str | None = None) -> Value:
    """Zero padding before and after each dim."""
    attrs = {"padding_front": ints("Pad", "padding_front", padding_front, 0),
             "padding_back": ints("Pad", "padding_back", padding_back, 0)}
    return apply("Pad", {"input": input}, attrs, value_id, output_dims)


def cast(input: Value, target_type: ElementType, value_id: str | None = None) -> Value:
    try:
        dtype = numpy_dtype(target_type)
    except OdlaError as err:
        raise OdlaError(Status.UNSUPPORTED_DATATYPE, f"Cast: {err.message}") from None
    return apply("Cast", {"input": input}, {"dtype": str(dtype)}, value_id)


def bit_cast(input: Value, target_type: ElementType, value_id: str | None = None) -> Value:
    """The bits of each element read as ``target_type``, which must be as wide as the input's
    element type (no value conversion). An odla-tvm extension: ODLA has no bit cast."""
    try:
        dtype = numpy_dtype(target_type)
    except OdlaError as err:
        raise OdlaError(Status.UNSUPPORTED_DATATYPE, f"BitCast: {err.message}") from None
    if dtype.itemsize != input.type.dtype.itemsize:
        raise invalid("BitCast", f"target_type {ElementType(target_type).name} is "
                      f"{dtype.itemsize * 8} bits; expected the input's "
                      f"{input.type.dtype.itemsize * 8} bits ({input.element_type.name})")
    return apply("BitCast", {"input": input}, {"dtype": str(dtype)}, value_id)


def squeeze(input: Value, num_of_axes: int, axes, output_dims=None,
            value_id: str | None = None) -> Value:
    """Drops the size-1 dims in ``axes``, or every size-1 dim when ``axes`` is empty."""
    axes = ints("Squeeze", "axes", axes)
    if int(num_of_axes) != len(axes):
        raise invalid("Squeeze", f"num_of_axes is {num_of_axes}; axes {axes} has {len(axes)}")
    return apply("Squeeze", {"input": input}, {"axes": axes}, value_id, output_dims)


def expand_dims(input: Value, output_dims, value_id: str | None = None) -> Value:
    """Broadcasts ``input`` to ``output_dims`` (NumPy rules)."""
    dims = ints("ExpandDims", "output_dims", output_dims, 0)
    return apply("ExpandDims", {"input": input}, {"output_dims": dims}, value_id)


def broadcast(input: Value, output_shape, value_id: str | None = None) -> Value:
    """Broadcasts ``input`` to ``output_shape`` (NumPy rules), as ExpandDims does."""
    dims = ints("Broadcast", "output_shape", output_shape, 0)
    return apply("Broadcast", {"input": input}, {"output_dims": dims}, value_id)


# HALO passes INT32_MAX as Compress's axis when the input is to be flattened.
_FLATTEN_AXIS = 2**31 - 1


def compress(input: Value, condition: Value, axis: int | None, max_output_shape=None,
             value_id: str | None = None) -> Value:
    """The slices along ``axis`` where the 1-D ``condition`` is true (non-zero); with ``axis``
    None (or INT32_MAX, as HALO passes) the elements of the flattened input. The result's
    size along ``axis`` is known at run time only."""
    axis = None if axis is None or axis == _FLATTEN_AXIS else ints("Compress", "axis", [axis])[0]
    return apply("Compress", {"input": input, "condition": condition}, {"axis": axis}, value_id,
                 max_output_shape)


def stack(inputs, axis: int, output_shape=None, value_id: str | None = None) -> Value:
    """Joins same-shaped ``inputs`` along a new axis ``axis`` of the result."""
    (axis,) = ints("Stack", "axis", [axis])
    return apply("Stack", {}, {"axis": axis}, value_id, output_shape, variadic=tuple(inputs))


def fill(type: ValueType, method: FillMethod, p0: float, p1: float, seed: float,
         value_id: str | None = None) -> Value:
    """A new value of ``type``: the identity (EyeLike, rank 2), or random numbers, normal with
    mean ``p0`` and standard deviation ``p1`` or uniform in [``p0``, ``p1``). The same
    ``seed`` gives the same numbers on every run and device."""
    checked(type, ValueType, "Fill: type", "a ValueType")
    method = odla_enum(FillMethod, method, "Fill: method")
    if type.shape.is_dynamic:
        raise invalid("Fill", f"type has shape {type.shape.dims}; expected a static shape")
    attrs = {"method": method.name, "dims": type.shape.dims, "dtype": str(type.dtype),
             "p0": number("Fill", "p0", p0), "p1": number("Fill", "p1", p1),
             "seed": int(number("Fill", "seed", seed))}
    return apply("Fill", {}, attrs, value_id)


def gather_elements(input: Value, indices: Value, axis: int, output_dims=None,
                    value_id: str | None = None) -> Value:
    """out[i][j][k] = input[indices[i][j][k]][j][k] for ``axis`` 0, and so on; negative
    indices count from the end."""
    (axis,) = ints("GatherElements", "axis", [axis])
    return apply("GatherElements", {"input": input, "indices": indices}, {"axis": axis},
                 value_id, output_dims)


def gather_nd(input: Value, indices: Value, num_batch_dims: int, output_dims=None,
              value_id: str | None = None) -> Value:
    """Slices of ``input`` addressed by the index tuples in the last axis of ``indices``
    (ONNX's GatherND); the first ``num_batch_dims`` dims are batch dims of both."""
    (batch_dims,) = ints("GatherND", "num_batch_dims", [num_batch_dims], 0)
    return apply("GatherND", {"input": input, "indices": indices}, {"batch_dims": batch_dims},
                 value_id, output_dims)


def one_hot(indices: Value, depth: int, values: Value, axis: int, output_dims=None,
            value_id: str | None = None) -> Value:
    """``values[1]`` where an index of ``indices`` meets the position along a new axis
    ``axis`` of size ``depth``, ``values[0]`` elsewhere; negative indices count from the end
    and indices out of range give a row of ``values[0]``."""
    (depth,) = ints("OneHot", "depth", [depth], 1)
    (axis,) = ints("OneHot", "axis", [axis])
    return apply("OneHot", {"indices": indices, "values": values}, {"depth": depth, "axis": axis},
                 value_id, output_dims)


def reshape_dynamic(input: Value, output_shape: Value, value_id: str | None = None, *,
                    allow_zero: bool = False) -> Value:
    """Reshape to the dims held by the 1-D integer value ``output_shape`` at run time; as in
    ONNX, a 0 keeps the input's dim (or, with ``allow_zero``, is a dim of 0) and one -1 is
    inferred."""
    return apply("ReshapeDynamic", {"input": input, "output_shape": output_shape},
                 {"allow_zero": bool(allow_zero)}, value_id)


# ONNX's coordinate_transformation_mode names, which ``resize`` takes besides ODLA's modes.
_COORDINATE_MODES = {
    ResizeCoordinateMode.ASSYMMETRIC: "asymmetric",
    ResizeCoordinateMode.HALF_PIXEL: "half_pixel",
    ResizeCoordinateMode.HALF_PIXEL_TF: "tf_half_pixel_for_nn",
    ResizeCoordinateMode.ALIGN_CORNERS: "align_corners",
}
_ONNX_COORDINATE_MODES = set(_COORDINATE_MODES.values()) | {"pytorch_half_pixel"}
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _resize_attrs(op_name, interpolation, mode, nearest_mode, cubic_coeff_a, exclude_outside):
    interpolation = odla_enum(InterpolationMode, interpolation, f"{op_name}: interpolation")
    if isinstance(mode, str):
        if mode not in _ONNX_COORDINATE_MODES:
            raise invalid(op_name, f"mode is {mode!r}; expected a ResizeCoordinateMode or one "
                          f"of {sorted(_ONNX_COORDINATE_MODES)}")
        coordinate_mode = mode
    else:
        coordinate_mode = _COORDINATE_MODES[odla_enum(ResizeCoordinateMode, mode, f"{op_name}: mode")]
    if nearest_mode not in _NEAREST_MODES:
        raise invalid(op_name, f"nearest_mode is {nearest_mode!r}; expected one of {_NEAREST_MODES}")
    return {"method": interpolation.name.lower(), "coordinate_mode": coordinate_mode,
            "nearest_mode": nearest_mode,
            "cubic_coeff_a": number(op_name, "cubic_coeff_a", cubic_coeff_a),
            "exclude_outside": bool(exclude_outside)}


def resize(input: Value, interpolation: InterpolationMode, mode: ResizeCoordinateMode,
           axes_mask: int, output_dims, value_id: str | None = None, *,
           nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
           exclude_outside: bool = False) -> Value:
    """Resizes to ``output_dims`` by interpolation along the axes set in ``axes_mask`` (its
    lowest bit is the last axis; 0 means every axis whose size changes), 1 to 3 of them.

    Besides ODLA's parameters, ``mode`` may be an ONNX coordinate_transformation_mode name,
    and the keywords give ONNX's nearest_mode, cubic_coeff_a and exclude_outside."""
    dims = ints("Resize", "output_dims", output_dims, 1)
    (mask,) = ints("Resize", "axes_mask", [axes_mask], 0)
    attrs = _resize_attrs("Resize", interpolation, mode, nearest_mode, cubic_coeff_a,
                          exclude_outside)
    return apply("Resize", {"input": input}, dict(attrs, axes_mask=mask, output_dims=dims),
                 value_id, dims)


def resize_dynamic(input: Value, scales: Value | None, sizes: Value | None,
                   interpolation: InterpolationMode, mode: ResizeCoordinateMode,
                   output_dims=None, value_id: str | None = None, *,
                   nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
                   exclude_outside: bool = False) -> Value:
    """Resizes channels-first data (rank 3 to 5) to sizes known at run time: given by the
    integer ``sizes`` or by floor(dim * ``scales``), one entry per input dim, of which those
    of the first two dims (batch, channels) are ignored. Keywords as for ``resize``."""
    if (scales is None) == (sizes is None):
        raise invalid("ResizeDynamic", "expected exactly one of scales and sizes; "
                      f"{'both' if scales is not None else 'neither'} given")
    attrs = _resize_attrs("ResizeDynamic", interpolation, mode, nearest_mode, cubic_coeff_a,
                          exclude_outside)
    operands = {"input": input, "scales": scales, "sizes": sizes}
    return apply("ResizeDynamic", operands, attrs, value_id, output_dims)


def shape(input: Value, output_dims=None, value_id: str | None = None) -> Value:
    """The dims of ``input`` as a 1-D INT64 value (dims known at run time only included)."""
    return apply("Shape", {"input": input}, {}, value_id, output_dims)


def slice_dynamic(input: Value, start: Value, size: Value, stride: Value, output_dims=None,
                  value_id: str | None = None) -> Value:
    """``size[i]`` elements of each dim i, from ``start[i]`` (negative: from the end) in
    steps of ``stride[i]``; all three are 1-D integer values read at run time. A slice
    reaching outside the input reads its nearest element."""
    return apply("SliceDynamic", {"input": input, "start": start, "size": size, "stride": stride},
                 {}, value_id, output_dims)


def dims_expand(input: Value, original: Value, axes: Value, output_dims=None,
                value_id: str | None = None) -> Value:
    """A copy of the 1-D ``input`` (per-dim values such as slice starts) with
    ``input[axes[i]]`` set to ``original[i]``, a negative ``original[i]`` being added to the
    entry it replaces and a negative axis counting from the end (as HALO's DimsExpand)."""
    return apply("DimsExpand", {"input": input, "original": original, "axes": axes}, {},
                 value_id, output_dims)


def split(input: Value, split_dim, num_split: int, value_ids=None) -> list[Value]:
    """``num_split`` equal parts of ``input`` along ``split_dim`` (a constant value or an int)."""
    (axis,) = constant_ints("Split", "split_dim", split_dim)
    (parts,) = ints("Split", "num_split", [num_split], 1)
    return apply_values("Split", {"input": input}, {"axis": axis, "parts": parts}, value_ids)


def tile(input: Value, repeat, output_dims=None, value_id: str | None = None) -> Value:
    """``input`` repeated ``repeat[i]`` times along each dim i."""
    repeats = ints("Tile", "repeat", repeat, 0)
    return apply("Tile", {"input": input}, {"repeats": repeats}, value_id, output_dims)


def tile_dynamic(input: Value, repeat: Value, output_dims=None,
                 value_id: str | None = None) -> Value:
    """``input`` repeated along each dim as many times as the 1-D integer ``repeat`` says at
    run time (one entry per dim)."""
    return apply("TileDynamic", {"input": input, "repeat": repeat}, {}, value_id, output_dims)
