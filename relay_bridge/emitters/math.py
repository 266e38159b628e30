"""Lowerings of ODLA's math ops (odla_ops_math.h)."""

from __future__ import annotations

from tvm import relax
from tvm.relax import op as R

from ..errors import LoweringError
from ..registry import register

# Element-wise ops that are one Relax op each.
_UNARY = {
    "Abs": R.abs, "Exp": R.exp, "Log": R.log, "Neg": R.negative, "Sqrt": R.sqrt,
    "Tanh": R.tanh,
}
_BINARY = {
    "Add": R.add, "Sub": R.subtract, "Mul": R.multiply, "Div": R.divide, "Pow": R.power,
    "Max": R.maximum, "Min": R.minimum,
}


def _unary(relax_op):
    return lambda emit, x: relax_op(x)


def _binary(relax_op):
    def lower(emit, lhs, rhs):
        if lhs.ty.dtype != rhs.ty.dtype:
            raise LoweringError(
                f"operand element types differ: lhs {lhs.ty.dtype}, rhs {rhs.ty.dtype}; "
                "expected the same (insert a Cast)"
            )
        return relax_op(lhs, rhs)

    return lower


for _name, _op in _UNARY.items():
    register(_name)(_unary(_op))
for _name, _op in _BINARY.items():
    register(_name)(_binary(_op))


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
    for name, operand in (("A", a), ("B", b)):
        if operand.ty.ndim != 2:
            raise LoweringError(f"{name} is {operand.ty}; expected a rank-2 matrix")
    a = _swap_last_two(emit, a) if a_transpose else a
    b = _swap_last_two(emit, b) if b_transpose else b
    y = emit(R.matmul(a, b))
    dtype = y.ty.dtype
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
    return R.matmul(a, b)


_REDUCE = {"ReduceMean": R.mean, "ReduceSum": R.sum, "ReduceMax": R.max}


def _reduce(relax_op):
    def lower(emit, x, *, axes, keep_dims):
        rank = x.ty.ndim
        bad = [a for a in axes if not -rank <= a < rank]
        if bad:
            raise LoweringError(f"axes {bad} out of range for {x.ty}; expected -{rank}..{rank - 1}")
        return relax_op(x, axis=list(axes) if axes else None, keepdims=keep_dims)

    return lower


for _name, _op in _REDUCE.items():
    register(_name)(_reduce(_op))
