"""Lowerings of ODLA's math ops (odla_ops_math.h)."""

from __future__ import annotations

import math

import numpy as np
from tvm import relax, tirx, topi
from tvm.relax import op as R

from ..errors import LoweringError
from ..kernels import determinant_kernel, inverse_kernel, nonzero_count, zero_count
from ..registry import register
from .common import (
    accumulation_dtype,
    as_bool,
    check_axis,
    check_integer,
    check_same_dtype,
    is_float,
    narrowed,
)

# Element-wise ops that are one Relax op each.
_UNARY = {
    "Abs": R.abs, "ACos": R.acos, "ACosh": R.acosh, "ASin": R.asin, "ASinh": R.asinh,
    "ATan": R.atan, "ATanh": R.atanh, "Ceil": R.ceil, "Cos": R.cos, "Cosh": R.cosh, "Erf": R.erf,
    "Exp": R.exp, "Floor": R.floor, "IsNaN": R.isnan, "Log": R.log, "Neg": R.negative,
    "RoundHalfToEven": R.round, "Rsqrt": R.rsqrt, "Sign": R.sign, "Sin": R.sin, "Sinh": R.sinh,
    "Sqrt": R.sqrt, "Tan": R.tan, "Tanh": R.tanh,
}
_BINARY = {
    "Add": R.add, "Sub": R.subtract, "Mul": R.multiply, "Max": R.maximum, "Min": R.minimum,
}
_COMPARE = {
    "Equal": R.equal, "NotEqual": R.not_equal, "Greater": R.greater,
    "GreaterOrEqual": R.greater_equal, "Less": R.less, "LessOrEqual": R.less_equal,
}
_LOGICAL = {"And": R.logical_and, "Or": R.logical_or, "Xor": R.logical_xor}


def _unary(relax_op):
    return lambda emit, x: relax_op(x)


def _binary(relax_op):
    def lower(emit, lhs, rhs):
        check_same_dtype(lhs, rhs)
        return relax_op(lhs, rhs)

    return lower


def _compare(relax_op):
    def lower(emit, lhs, rhs):
        check_same_dtype(lhs, rhs)
        if lhs.ty.dtype == "bool":  # TVM compares BOOLs as floats, which LLVM refuses
            lhs, rhs = emit(R.astype(lhs, "int8")), emit(R.astype(rhs, "int8"))
        return relax_op(lhs, rhs)

    return lower


def _logical(relax_op):
    return lambda emit, lhs, rhs: relax_op(as_bool(emit, lhs), as_bool(emit, rhs))


for _name, _op in _UNARY.items():
    register(_name)(_unary(_op))
for _name, _op in _BINARY.items():
    register(_name)(_binary(_op))
for _name, _op in _COMPARE.items():
    register(_name)(_compare(_op))
for _name, _op in _LOGICAL.items():
    register(_name)(_logical(_op))


def _nonzero_divisor(emit, divisor, op: str):
    """An integer ``divisor`` once checked to hold no 0 (an integer division by zero kills
    the process with SIGFPE): the run fails with DivisionByZero naming ``op`` and its value
    otherwise. Floats divide by zero to inf or NaN, as IEEE says: unchecked."""
    if is_float(divisor):
        return divisor
    dtype = str(divisor.ty.dtype)
    verdict = emit(relax.call_pure_packed(
        "odla_tvm.check_divisor", emit.te(zero_count, divisor), divisor,
        f"{op} {emit.value_id!r}", ty_args=relax.TensorType((), dtype)))
    return emit(R.add(divisor, verdict))  # a zero: orders the division after the check


def _representable_quotient(emit, lhs, rhs, op: str):
    """A signed integer divisor ``rhs`` once checked never to divide the type's least value
    by -1 (the quotient does not fit, and x86 traps on it with SIGFPE, as onnxruntime's
    process dies): the run fails with DivisionOverflow naming ``op`` and its value
    otherwise."""
    dtype = str(rhs.ty.dtype)
    if not dtype.startswith("int"):
        return rhs
    # x < least + 1 rather than x == least: TVM 0.27 compares with a constant of the least
    # value wrongly (never equal).
    above_least = relax.const(int(np.iinfo(dtype).min) + 1, dtype)
    overflows = emit(R.astype(emit(R.logical_and(
        emit(R.less(lhs, above_least)), emit(R.equal(rhs, relax.const(-1, dtype))))), "int8"))
    verdict = emit(relax.call_pure_packed(
        "odla_tvm.check_quotient", emit.te(nonzero_count, overflows), lhs, rhs,
        f"{op} {emit.value_id!r}", ty_args=relax.TensorType((), dtype)))
    return emit(R.add(rhs, verdict))  # a zero: orders the division after the check


@register("Div")
def div(emit, lhs, rhs):
    check_same_dtype(lhs, rhs)
    rhs = _nonzero_divisor(emit, rhs, "Div")
    return R.divide(lhs, _representable_quotient(emit, lhs, rhs, "Div"))


@register("Not")
def not_(emit, x):
    return R.logical_not(x) if x.ty.dtype == "bool" else R.equal(x, relax.const(0, str(x.ty.dtype)))


@register("Round")
def round_(emit, x):
    if not is_float(x):
        return x
    # Relax rounds halfway cases to even; ODLA rounds them away from zero. x - trunc(x) is
    # exact, so the halfway cases are found exactly.
    dtype = str(x.ty.dtype)
    truncated = emit(R.trunc(x))
    fraction = emit(R.abs(emit(R.subtract(x, truncated))))
    halfway = emit(R.equal(fraction, relax.const(0.5, dtype)))
    away = emit(R.add(truncated, emit(R.sign(x))))
    return R.where(halfway, away, emit(R.round(x)))


@register("Reciprocal")
def reciprocal(emit, x):
    return R.divide(relax.const(1, str(x.ty.dtype)), _nonzero_divisor(emit, x, "Reciprocal"))


@register("SquaredDifference")
def squared_difference(emit, lhs, rhs):
    check_same_dtype(lhs, rhs)
    difference = emit(R.subtract(lhs, rhs))
    return R.multiply(difference, difference)


@register("Pow")
def pow_(emit, lhs, rhs):
    check_same_dtype(lhs, rhs)
    if is_float(lhs):
        return R.power(lhs, rhs)
    # Integers through float64 and truncated back, as onnxruntime computes them (std::pow).
    dtype = str(lhs.ty.dtype)
    wide = [emit(R.astype(x, "float64")) for x in (lhs, rhs)]
    return R.astype(emit(R.power(*wide)), dtype)


@register("Mod")
def mod(emit, lhs, rhs, *, fmod):
    check_same_dtype(lhs, rhs)
    # Relax's mod truncates (C's fmod); floor_mod takes the divisor's sign.
    rhs = _nonzero_divisor(emit, rhs, "Mod")
    if str(rhs.ty.dtype).startswith("int"):
        # Any integer modulo -1 is 0, as modulo 1; the least value modulo -1 traps on x86
        # (SIGFPE), as its quotient overflows. onnxruntime gives 0 too.
        dtype = str(rhs.ty.dtype)
        minus_one = emit(R.equal(rhs, relax.const(-1, dtype)))
        rhs = emit(R.where(minus_one, relax.const(1, dtype), rhs))
    if fmod:
        return R.mod(lhs, rhs)
    if not is_float(lhs):
        return R.floor_mod(lhs, rhs)
    # Floats: fmod, moved by the divisor when its sign differs from the divisor's, and a zero
    # carrying the divisor's sign, as Python's % does. (floor_mod's x - floor(x / y) * y
    # gives NaN for an infinite divisor.)
    dtype = str(lhs.ty.dtype)
    zero = relax.const(0, dtype)
    remainder = emit(R.mod(lhs, rhs))
    signs_differ = emit(R.logical_xor(emit(R.less(remainder, zero)), emit(R.less(rhs, zero))))
    moved = emit(R.logical_and(emit(R.not_equal(remainder, zero)), signs_differ))
    remainder = emit(R.where(moved, emit(R.add(remainder, rhs)), remainder))
    signed_zero = emit(R.where(emit(R.less(rhs, zero)), relax.const(-0.0, dtype), zero))
    return R.where(emit(R.equal(remainder, zero)), signed_zero, remainder)


@register("Shift")
def shift(emit, x, amount, *, left):
    check_integer(x, "input")
    dtype = str(x.ty.dtype)
    if amount.ty.dtype != dtype:
        amount = emit(R.astype(amount, dtype))
    # A negative amount or one of the bit width or more leaves only the sign fill: -1 for a
    # right shift of a negative signed value, else 0 (LLVM leaves such shifts undefined).
    bits = np.iinfo(dtype).bits
    out_of_range = emit(R.logical_or(emit(R.less(amount, relax.const(0, dtype))),
                                     emit(R.greater_equal(amount, relax.const(bits, dtype)))))
    sign_fill = not left and dtype.startswith("int")
    amount = emit(R.where(out_of_range, relax.const(bits - 1 if sign_fill else 0, dtype), amount))
    if not left:
        shifted = emit(R.right_shift(x, amount))
        return shifted if sign_fill else R.where(out_of_range, relax.const(0, dtype), shifted)
    return R.where(out_of_range, relax.const(0, dtype), emit(R.left_shift(x, amount)))


@register("IsInf")
def is_inf(emit, x, *, detect_pos, detect_neg):
    if not is_float(x) or not (detect_pos or detect_neg):
        return R.zeros_like(x, "bool")
    if detect_pos and detect_neg:
        return R.isinf(x)
    return R.equal(x, relax.const(math.inf if detect_pos else -math.inf, str(x.ty.dtype)))


@register("Mean")
def mean(emit, *inputs):
    if not inputs:
        raise LoweringError("no inputs; expected at least one value")
    check_same_dtype(*inputs)
    total = inputs[0]
    for x in inputs[1:]:
        total = emit(R.add(total, x))
    return R.divide(total, relax.const(len(inputs), str(total.ty.dtype)))


@register("Select")
def select(emit, condition, a, b):
    check_same_dtype(a, b)
    return R.where(as_bool(emit, condition), a, b)


@register("CumSum")
def cum_sum(emit, x, *, axis, exclusive, reverse):
    check_axis(x, axis)
    if reverse:
        x = emit(R.flip(x, axis))
    y = emit(R.cumsum(x, axis, exclusive=exclusive))
    return R.flip(y, axis) if reverse else y


def _square_matrices(x):
    dims = x.ty.shape.values
    sizes = [int(d) if isinstance(d, tirx.IntImm) else None for d in dims[-2:]]
    if len(dims) < 2 or (None not in sizes and sizes[0] != sizes[1]):
        raise LoweringError(f"input is {x.ty}; expected square matrices in the last two dims")
    if not is_float(x):
        raise LoweringError(f"input is {x.ty.dtype}; expected a floating-point element type")


@register("Det")
def det(emit, x):
    _square_matrices(x)
    dims = list(x.ty.shape.values)
    dtype = str(x.ty.dtype)
    matrices = emit(R.reshape(x, [-1, dims[-2], dims[-1]]))
    work_and_dets = emit.tir("determinant", determinant_kernel(dtype), [matrices],
                             [matrices.ty, relax.TensorType([matrices.ty.shape.values[0]], dtype)])
    return R.reshape(emit(relax.TupleGetItem(work_and_dets, 1)), dims[:-2])


@register("Inverse")
def inverse(emit, x):
    _square_matrices(x)
    dims = list(x.ty.shape.values)
    matrices = emit(R.reshape(x, [-1, dims[-2], dims[-1]]))
    work_and_inverses = emit.tir("inverse", inverse_kernel(str(x.ty.dtype)), [matrices],
                                 [matrices.ty, matrices.ty])
    return R.reshape(emit(relax.TupleGetItem(work_and_inverses, 1)), dims)


@register("Einsum")
def einsum(emit, *inputs, equation):
    check_same_dtype(*inputs)
    return R.einsum(list(inputs), equation)


def _arg_reduce(relax_op, topi_op):
    def lower(emit, x, *, axis, keep_dims, last_index, dtype):
        check_axis(x, axis)
        if last_index:  # Relax's ops return the first of equal elements; TOPI's can the last
            indices = emit.te(topi_op, x, axis, keep_dims, True)
        else:
            indices = emit(relax_op(x, axis, keep_dims))
        return indices if dtype == indices.ty.dtype else R.astype(indices, dtype)

    return lower


register("ArgMax")(_arg_reduce(R.argmax, topi.argmax))
register("ArgMin")(_arg_reduce(R.argmin, topi.argmin))


@register("Clamp")
def clamp(emit, x, *, lo, hi):
    if lo > hi:
        raise LoweringError(f"lo {lo} is greater than hi {hi}; expected lo <= hi")
    # Bounds in x's dtype, given explicitly: relax.const alone narrows int64 to int32.
    dtype = str(x.ty.dtype)
    bounded_above = emit(R.minimum(x, relax.const(hi, dtype)))
    return R.maximum(bounded_above, relax.const(lo, dtype))


def _swap_last_two(emit, x):
    rank = x.ty.ndim
    if rank < 2:
        raise LoweringError(f"cannot transpose {x.ty}: expected rank >= 2")
    return emit(R.permute_dims(x, list(range(rank - 2)) + [rank - 1, rank - 2]))


@register("Gemm")
def gemm(emit, a, b, c, *, a_transpose, b_transpose, alpha, beta):
    # Operands above rank 2 are stacks of matrices: HALO emits its batched MatMul as odla_Gemm,
    # and ODLA's backends (dnnl, popart) take it so.
    for name, operand in (("A", a), ("B", b)):
        if operand.ty.ndim < 2:
            raise LoweringError(f"{name} is {operand.ty}; expected a matrix or a stack of them")
    a = _swap_last_two(emit, a) if a_transpose else a
    b = _swap_last_two(emit, b) if b_transpose else b
    dtype = str(a.ty.dtype)
    y = narrowed(emit, emit(R.matmul(a, b, out_dtype=accumulation_dtype(a))), dtype)
    if alpha != 1.0:
        y = emit(R.multiply(y, relax.const(alpha, dtype)))
    if c is not None and beta != 0.0:
        c = c if beta == 1.0 else emit(R.multiply(c, relax.const(beta, dtype)))
        y = emit(R.add(y, c))
    return y


@register("BatchMatMul")
def batch_mat_mul(emit, a, b, *, a_transpose, b_transpose):
    a = _swap_last_two(emit, a) if a_transpose else a
    b = _swap_last_two(emit, b) if b_transpose else b
    return narrowed(emit, emit(R.matmul(a, b, out_dtype=accumulation_dtype(a))), str(a.ty.dtype))


def _axes(x, axes) -> list[int] | None:
    """Checked reduction axes; None (every axis) when ``axes`` is empty or None."""
    rank = x.ty.ndim
    bad = [a for a in axes or () if not -rank <= a < rank]
    if bad:
        raise LoweringError(f"axes {bad} out of range for {x.ty}; expected -{rank}..{rank - 1}")
    return list(axes) if axes else None


def _empty_set(x, axes, keep_dims, value):
    """``value`` in the shape of a reduction of ``x`` over ``axes`` (None: every axis) when
    a reduced dim is 0, else None."""
    dims = x.ty.shape.values
    reduced = range(len(dims)) if axes is None else [a % len(dims) for a in axes]
    if not any(isinstance(dims[a], tirx.IntImm) and int(dims[a]) == 0 for a in reduced):
        return None
    dtype = str(x.ty.dtype)
    shape = [1 if a in reduced else d for a, d in enumerate(dims)
             if keep_dims or a not in reduced]
    return R.broadcast_to(relax.const(value, dtype), shape)


def _relax_reduction(relax_op, empty=None):
    """``relax_op`` over the checked axes. ``empty``: the result over an empty set, for an op
    whose lowering gives none (sum and prod lower with their identity, max and min through
    kernels.extreme)."""
    def lower(emit, x, *, axes, keep_dims):
        axes = _axes(x, axes)
        empty_set = None if empty is None else _empty_set(x, axes, keep_dims, empty)
        return emit(relax_op(x, axes, keep_dims) if empty_set is None else empty_set)

    return lower


_sum = register("ReduceSum")(_relax_reduction(R.sum))
register("ReduceMean")(_relax_reduction(R.mean, math.nan))
register("ReduceProd")(_relax_reduction(R.prod))


def _extreme(relax_op):
    reduce = _relax_reduction(relax_op)

    def lower(emit, x, *, axes, keep_dims):
        if x.ty.dtype == "bool":  # as bytes: an empty set's maximum is false, its minimum true
            return as_bool(emit, reduce(emit, emit(R.astype(x, "uint8")), axes=axes,
                                        keep_dims=keep_dims))
        return reduce(emit, x, axes=axes, keep_dims=keep_dims)

    return lower


register("ReduceMax")(_extreme(R.max))
register("ReduceMin")(_extreme(R.min))


@register("ReduceSumSquare")
def reduce_sum_square(emit, x, *, axes, keep_dims):
    return _sum(emit, emit(R.multiply(x, x)), axes=axes, keep_dims=keep_dims)


@register("ReduceLogSum")
def reduce_log_sum(emit, x, *, axes, keep_dims):
    return R.log(_sum(emit, x, axes=axes, keep_dims=keep_dims))


@register("ReduceLogSumExp")
def reduce_log_sum_exp(emit, x, *, axes, keep_dims):
    # log(sum(exp(x - m))) + m with m the maximum, so that large inputs do not overflow.
    axes = _axes(x, axes)
    peak = emit(R.max(x, axes, True))
    shifted = emit(R.exp(emit(R.subtract(x, peak))))
    log_sum = emit(R.log(_sum(emit, shifted, axes=axes, keep_dims=keep_dims)))
    return R.add(log_sum, peak if keep_dims else emit(R.max(x, axes, False)))


@register("ReduceL1")
def reduce_l1(emit, x, *, axes, keep_dims, epsilon):
    total = _sum(emit, emit(R.abs(x)), axes=axes, keep_dims=keep_dims)
    return R.add(total, relax.const(epsilon, str(x.ty.dtype))) if epsilon else total


@register("ReduceL2")
def reduce_l2(emit, x, *, axes, keep_dims, epsilon):
    total = _sum(emit, emit(R.multiply(x, x)), axes=axes, keep_dims=keep_dims)
    if epsilon:
        total = emit(R.add(total, relax.const(epsilon, str(x.ty.dtype))))
    return R.sqrt(total)
