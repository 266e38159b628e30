"""Reduced precision for ODLA's FP16_MODE and BF16_MODE: the compute-heavy ops (convolutions
and matrix products) take 16-bit operands; everything else, and the graph's inputs and outputs,
stay float32. For a CPU without 16-bit arithmetic (which would emulate it) the heavy ops stay
float32 and their constant operands (the weights) take the 16-bit values instead, rounded once."""

from __future__ import annotations

import functools
import inspect
import operator

import ml_dtypes
import numpy as np
import tvm
from tvm import relax
from tvm.ir.expr import Constant
from tvm.relax import op as R
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .composites import rewritten_without_weights
from .errors import LoweringError
from .graph import constant

# Relax ops worth computing in 16 bits, with the Python builder that remakes each.
HEAVY_OPS = {
    "relax.nn.conv1d": R.nn.conv1d, "relax.nn.conv2d": R.nn.conv2d, "relax.nn.conv3d": R.nn.conv3d,
    "relax.nn.conv1d_transpose": R.nn.conv1d_transpose,
    "relax.nn.conv2d_transpose": R.nn.conv2d_transpose, "relax.matmul": R.matmul,
}
# Ops a weight passes through on its way to a heavy op (a Gemm's transposed matrix).
_LAYOUT_OPS = {"relax.permute_dims", "relax.reshape", "relax.expand_dims", "relax.squeeze"}
PRECISIONS = ("fp16", "bf16-accuracy", "bf16-performance")
# The 16-bit type of each precision.
_DTYPES = {"fp16": "float16", "bf16-accuracy": "bfloat16", "bf16-performance": "bfloat16"}


def _bfloat16_operands(mod: tvm.IRModule, result_dtype: str) -> tvm.IRModule:
    """Each float32 heavy op reads bfloat16 operands; it accumulates in float32 and yields
    ``result_dtype`` (float32 keeps accuracy; bfloat16 halves the memory traffic)."""

    def rewrite(call, _matches):
        if call.args[0].ty.dtype != "float32":
            return call  # already rewritten (rewrite_call revisits its own results)
        builder = HEAVY_OPS[call.op.name]
        # The builder's keyword parameters are the attribute fields of the call it makes.
        names = list(inspect.signature(builder).parameters)[2:]
        attrs = {name: getattr(call.attrs, name) for name in names if hasattr(call.attrs, name)}
        attrs["out_dtype"] = result_dtype
        operands = [R.astype(a, "bfloat16") for a in call.args[:2]]
        result = builder(*operands, **attrs)
        return result if result_dtype == "float32" else R.astype(result, "float32")

    # One pass for every heavy op, the weights out of the function meanwhile: a pass hashes
    # every constant's data, whatever its pattern (see rewritten_without_weights).
    heavy = functools.reduce(operator.or_,
                             (is_op(name)(wildcard(), wildcard()) for name in HEAVY_OPS))
    updated = {}
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            updated[gv] = rewritten_without_weights(func, lambda f: rewrite_call(heavy, rewrite, f))
    for gv, func in updated.items():
        mod[gv] = func
    return relax.transform.Normalize()(mod)


def _rounded_to(data: np.ndarray, dtype: str) -> np.ndarray:
    """float32 ``data`` rounded (to nearest, ties to even) to the values of ``dtype``, kept
    float32."""
    return data.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype).astype(np.float32)


def _weights_of_heavy_ops(func: relax.Function) -> set:
    """The float32 constants some heavy op of ``func`` reads, directly or through layout ops."""
    values = relax.analysis.get_var2val(func)

    def source(expr):
        while True:
            if isinstance(expr, relax.Var) and expr in values:
                expr = values[expr]
            elif isinstance(expr, relax.Call) and getattr(expr.op, "name", None) in _LAYOUT_OPS:
                expr = expr.args[0]
            else:
                return expr

    return {operand for call in values.values()
            if isinstance(call, relax.Call) and getattr(call.op, "name", None) in HEAVY_OPS
            for operand in map(source, call.args[:2])
            if isinstance(operand, Constant) and operand.ty.dtype == "float32"}


@relax.expr_functor.mutator
class _RoundedConstants(relax.expr_functor.PyExprMutator):
    """The constants of ``weights`` replaced by their values rounded to ``dtype``."""

    def __init__(self, weights: set, dtype: str):
        super().__init__()
        self.weights, self.dtype = weights, dtype

    def visit_generic_const_(self, const):
        if const not in self.weights:
            return const
        return constant(_rounded_to(const.value.numpy(), self.dtype))


def _rounded_weights(mod: tvm.IRModule, dtype: str) -> tvm.IRModule:
    """``mod`` computing in float32 as it is, the weights of its heavy ops rounded to ``dtype``."""
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            weights = _weights_of_heavy_ops(func)
            if weights:
                mod[gv] = _RoundedConstants(weights, dtype).visit_expr(func)
    return mod


def reduce_precision(mod: tvm.IRModule, precision: str | None,
                     native: bool = True) -> tvm.IRModule:
    """``mod`` with its heavy ops in ``precision`` (one of PRECISIONS), or unchanged for None.
    ``native``: whether the target computes in that precision itself; where not, the heavy
    ops stay float32 with their weights rounded to it (the rounding that costs no run time)."""
    if precision is None:
        return mod
    if precision in _DTYPES and not native:
        return _rounded_weights(mod, _DTYPES[precision])
    if precision == "fp16":
        # TVM's own pass: fp16 operands, float32 accumulation, float32 at the boundaries.
        return relax.transform.ToMixedPrecision(out_dtype="float32")(mod)
    if precision in ("bf16-accuracy", "bf16-performance"):
        return _bfloat16_operands(mod, "float32" if precision == "bf16-accuracy" else "bfloat16")
    raise LoweringError(f"precision {precision!r}; expected one of {PRECISIONS} or None")
