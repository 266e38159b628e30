"""The run-time checks compiled modules call between kernels (odla_tvm.check_*, registered
as global functions by register_checks when tvm_ffi loads): each raises the error naming the
first bad element that a counting kernel (kernels.count_where) found, else returns a fresh
zero that the checked kernel takes, to run after it. They need TVM's runtime only, never its
compiler."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from toolchain import load_tvm_ffi, tensors

from .errors import (REFUSED_DATA, DivisionByZero, DivisionOverflow, IndexOutOfRange,
                     ShapeMismatch, ValueOutOfRange)

if TYPE_CHECKING:
    import tvm_ffi


# A run-time check is a counting kernel (named after its function in kernels.py, maybe fused or
# numbered) and a host call registered as "odla_tvm.check_*": what a profile counts as checks.
CHECK_KERNELS = ("out_of_range_count", "zero_count", "nonzero_count", "outside_count")


def is_check_call(symbol: str) -> bool:
    """Whether a VM call named ``symbol`` belongs to a run-time check."""
    return symbol.startswith("odla_tvm.check_") or any(k in symbol for k in CHECK_KERNELS)


def _zero(shape, like, dev) -> tvm_ffi.Tensor:
    """A zero of ``like``'s dtype, of ``shape``, on ``dev``."""
    return tensors.tensor(np.zeros(shape, tensors.numpy_dtype(str(like.dtype))), dev)


def check_indices(count, indices, what: str, negative: bool, *sizes: int):
    """Raises IndexOutOfRange naming the first bad index when out_of_range_count found any,
    before a kernel reads through it; else a fresh zero, wrap_negative's ``checked``. Runs
    on the host between kernels: one small copy from a GPU, and the indices only to name the
    bad one."""
    if int(tensors.numpy(count)[0]):
        found = tensors.numpy(indices)
        dims = np.asarray(sizes, np.int64) if len(sizes) > 1 else np.int64(sizes[0])
        bad = (found < (-dims if negative else 0)) | (found >= dims)
        position = int(np.flatnonzero(bad)[0])
        size = int(sizes[position % len(sizes)]) if len(sizes) > 1 else int(sizes[0])
        raise IndexOutOfRange.of(what, position, int(found.flat[position]), size, negative)
    return tensors.tensor(np.zeros(1, np.int64), count.device)


def check_values(count, values, what: str, name: str, allowed: str, lowest, highest,
                 nonzero: bool, first: int):
    """Raises ValueOutOfRange naming the first of ``values`` (a run-time parameter such as a
    slice's sizes) that outside_count found outside [lowest, highest] (or 0 where
    ``nonzero``), counting its elements from ``first`` (where the values are a part of a
    vector); else a fresh zero, which the values add to be read after this."""
    if int(tensors.numpy(count)[0]):
        found = tensors.numpy(values)
        bad = ~((found >= lowest) & (found <= highest)) | (nonzero & (found == 0))
        position = int(np.flatnonzero(bad)[0])
        raise ValueOutOfRange.of(what, name, found.flat[position].item(), allowed,
                                 first + position)
    return _zero((), values, values.device)


def check_dim(x, axis: int, least: int, most: int, message: str):
    """Raises ValueOutOfRange with ``message`` (``{dim}``, ``{least}``, ``{most}`` filled in)
    unless dim ``axis`` of ``x``, known at run time only, lies in [least, most]: a kernel
    sized for those bounds would address memory past it. Else a fresh zero (int64, shape (1,)) that a
    kernel reading ``x`` takes, to run after this. Reads the shape only, never the data."""
    dim = int(x.shape[axis])
    if not least <= dim <= most:
        raise ValueOutOfRange(message.format(dim=dim, least=least, most=most))
    return tensors.tensor(np.zeros(1, np.int64), x.device)


def check_divisor(count, divisor, what: str):
    """Raises DivisionByZero naming the first zero of ``divisor`` when zero_count found any;
    else a fresh zero, which the division's divisor adds to run after this."""
    if int(tensors.numpy(count)[0]):
        raise DivisionByZero.of(what, int(np.flatnonzero(tensors.numpy(divisor) == 0)[0]))
    return _zero((), divisor, count.device)


def check_quotient(count, dividend, divisor, what: str):
    """Raises DivisionOverflow naming the first element where ``dividend`` is its type's least
    value and ``divisor`` is -1 (count_where found such), broadcast as the division is;
    else a fresh zero, which the divisor adds to be read after this."""
    if int(tensors.numpy(count)[0]):
        a, b = np.broadcast_arrays(tensors.numpy(dividend), tensors.numpy(divisor))
        least = np.iinfo(a.dtype).min
        position = int(np.flatnonzero((a == least) & (b == -1))[0])
        raise DivisionOverflow.of(what, str(a.dtype), int(least), position)
    return _zero((), divisor, count.device)


def check_reshape(shape, what: str, allow_zero: bool, *dims: int):
    """Raises ShapeMismatch unless the run-time ``shape`` (ONNX's rules: a 0 keeps the input's
    dim unless ``allow_zero``, one -1 takes what is left) holds exactly the elements of an
    input of ``dims``: a reshape to more would read past them. Else a fresh zero, which the
    shape adds to be read after this."""
    requested = [int(d) for d in tensors.numpy(shape)]
    count = math.prod(dims)
    resolved = [dims[i] if d == 0 and not allow_zero and i < len(dims) else d
                for i, d in enumerate(requested)]
    known = math.prod(d for d in resolved if d != -1)
    inferred = resolved.count(-1)
    fits = (all(d >= -1 for d in resolved) and inferred <= 1
            and (count == known if not inferred else known > 0 and count % known == 0))
    if not fits:
        raise ShapeMismatch.of(what, requested, count, list(dims))
    return _zero((), shape, shape.device)


# The global functions compiled modules call, by name (the emitters emit the calls).
CHECKS = {
    "odla_tvm.check_indices": check_indices,
    "odla_tvm.check_values": check_values,
    "odla_tvm.check_dim": check_dim,
    "odla_tvm.check_divisor": check_divisor,
    "odla_tvm.check_quotient": check_quotient,
    "odla_tvm.check_reshape": check_reshape,
}


def register_checks() -> None:
    """Registers the checks as global functions, and the errors they raise, with tvm_ffi
    (relay_bridge's import has toolchain.when_tvm_ffi_loads call this)."""
    ffi = load_tvm_ffi()
    for error in REFUSED_DATA:
        ffi.register_error(error)
    for name, check in CHECKS.items():  # over ODLA's C library's, where it loaded first
        ffi.register_global_func(name, check, override=True)
