"""ODLA process ops (odla_ops_process.h). Each adds one op to the current computation."""

from __future__ import annotations

from ..computation import Value
from ..types import ElementType, OdlaError, Status, numpy_dtype
from ._args import apply, ints, invalid


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
