"""Lowerings of ODLA's process ops (odla_ops_process.h)."""

from __future__ import annotations

from tvm.relax import op as R

from ..errors import LoweringError
from ..registry import register


def _check_axis(x, axis, allow_end=False):
    rank = x.ty.ndim + (1 if allow_end else 0)
    if not -rank <= axis < rank:
        raise LoweringError(f"axis {axis} out of range for {x.ty}; expected -{rank}..{rank - 1}")


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
    _check_axis(inputs[0], axis)
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
    _check_axis(x, axis)
    if indices.ty.dtype not in ("int32", "int64"):
        raise LoweringError(f"indices are {indices.ty.dtype}; expected int32 or int64")
    # "wrap" gives negative indices their ODLA/ONNX meaning (from the end) and keeps an
    # out-of-range index from reading outside the tensor.
    return R.take(x, indices, axis, mode="wrap")


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


@register("Squeeze")
def squeeze(emit, x, *, axes):
    dims = x.ty.shape.values
    for a in axes:
        _check_axis(x, a)
        if int(dims[a]) != 1:
            raise LoweringError(f"axis {a} of {x.ty} has size {int(dims[a])}; expected 1 to squeeze")
    return R.squeeze(x, list(axes) if axes else None)


@register("ExpandDims")
def expand_dims(emit, x, *, output_dims):
    return R.broadcast_to(x, list(output_dims))
