"""Operand checks and small conversions shared by the lowerings of several op groups."""

from __future__ import annotations

import numpy as np
from tvm import relax, tirx
from tvm.relax import op as R

from ..errors import LoweringError
from ..kernels import out_of_range_count, outside_count


def check_axis(x, axis, allow_end=False):
    rank = x.ty.ndim + (1 if allow_end else 0)
    if not -rank <= axis < rank:
        raise LoweringError(f"axis {axis} out of range for {x.ty}; expected -{rank}..{rank - 1}")


def check_same_dtype(*operands):
    dtypes = [str(x.ty.dtype) for x in operands]
    if len(set(dtypes)) > 1:
        raise LoweringError(
            f"operand element types differ: {', '.join(dtypes)}; expected the same (insert a Cast)"
        )


def check_integer(x, name: str):
    if not is_integer(x):
        raise LoweringError(f"{name} is {x.ty.dtype}; expected an integer element type")


def check_vector(x, name: str, length=None):
    """``x`` is 1-D with a static length (``length`` when given): per-dim values like a shape."""
    dims = x.ty.shape.values
    if len(dims) != 1 or not isinstance(dims[0], tirx.IntImm) or (
        length is not None and int(dims[0]) != length
    ):
        expected = f"{length} entries" if length is not None else "a static length"
        raise LoweringError(f"{name} is {x.ty}; expected a 1-D value of {expected}")


def is_float(x) -> bool:
    return str(x.ty.dtype).startswith(("float", "bfloat"))


def is_integer(x) -> bool:
    return str(x.ty.dtype).startswith(("int", "uint"))


def as_bool(emit, x):
    """``x`` as a BOOL tensor, non-zero being true."""
    if x.ty.dtype == "bool":
        return x
    return emit(R.not_equal(x, relax.const(0, str(x.ty.dtype))))


def static_dims(x) -> list[int] | None:
    """The dims of ``x`` as ints, or None when one is known at run time only."""
    dims = x.ty.shape.values
    return [int(d) for d in dims] if all(isinstance(d, tirx.IntImm) for d in dims) else None


def accumulation_dtype(x) -> str:
    """The dtype in which products and sums over ``x`` accumulate: float32 for 16-bit floats
    (as onnxruntime and cuBLAS accumulate them), else ``x``'s own."""
    dtype = str(x.ty.dtype)
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def widened(emit, x):
    """``x`` cast to its accumulation dtype."""
    wide = accumulation_dtype(x)
    return x if wide == str(x.ty.dtype) else emit(R.astype(x, wide))


def narrowed(emit, y, dtype: str):
    """``y`` (accumulated wide) rounded once to ``dtype``."""
    return y if str(y.ty.dtype) == dtype else emit(R.astype(y, dtype))


def checked_verdict(emit, indices, sizes: list, what: str, negative: bool = True):
    """A check that each of ``indices`` lies in [-size, size-1] of its dim ([0, size-1]
    unless ``negative``): the run fails with IndexOutOfRange naming ``what`` otherwise. Its
    verdict (a zero) is what the kernels reading through the indices must take, to run
    after it."""
    count = emit.te(out_of_range_count, indices, sizes, negative)
    return emit(relax.call_pure_packed(
        "odla_tvm.check_indices", count, indices, what, negative, *[int(size) for size in sizes],
        ty_args=count.ty))


def checked_values(emit, values, what: str, name: str, allowed: str, lowest=None,
                   highest=None, nonzero: bool = False, first: int = 0):
    """``values``, a run-time parameter vector (a slice's sizes, a tile's repeats), once
    checked to lie in [lowest, highest] (the dtype's own bounds where None) and, where
    ``nonzero``, to hold no 0: the run fails with ValueOutOfRange naming ``what`` (the op and
    its value), ``name``, the entry found and ``allowed`` otherwise. The check's zero verdict
    is added in, so that what reads the values runs after it. ``first``: the position of
    ``values`` in the vector the caller gave, for the message."""
    dtype = str(values.ty.dtype)
    bounds, number = (np.finfo(dtype), float) if is_float(values) else (np.iinfo(dtype), int)
    lowest = number(bounds.min if lowest is None else lowest)
    highest = number(bounds.max if highest is None else highest)
    count = emit.te(outside_count, values, lowest, highest, nonzero)
    verdict = emit(relax.call_pure_packed(
        "odla_tvm.check_values", count, values, what, name, allowed, lowest, highest,
        bool(nonzero), int(first), ty_args=relax.TensorType((), dtype)))
    return emit(relax.op.add(values, verdict))


def dim_verdict(emit, x, axis: int, least, most, message: str):
    """A check that dim ``axis`` of ``x``, known at run time only, lies in [least, most]
    (ints, or dims of other operands): the run fails with ValueOutOfRange and ``message``
    (its ``{dim}`` the dim found) otherwise. Its verdict (an int64 zero of shape (1,)) is
    what the kernel addressing ``x`` by those bounds must take, to run after it."""
    bounds = [relax.prim_value(int(b) if isinstance(b, (int, np.integer)) else
                               tirx.Cast("int64", b)) for b in (least, most)]
    return emit(relax.call_pure_packed("odla_tvm.check_dim", x, axis, *bounds, message,
                                       ty_args=relax.TensorType((1,), "int64")))
