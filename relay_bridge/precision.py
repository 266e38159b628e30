"""Reduced precision for ODLA's FP16_MODE and BF16_MODE: the compute-heavy ops (convolutions
and matrix products) take 16-bit operands; everything else, and the graph's inputs and outputs,
stay float32."""

from __future__ import annotations

import functools
import inspect
import operator

import tvm
from tvm import relax
from tvm.relax import op as R
from tvm.relax.dpl import is_op, rewrite_call, wildcard

from .composites import rewritten_without_weights
from .errors import LoweringError

# Relax ops worth computing in 16 bits, with the Python builder that remakes each.
_HEAVY_OPS = {
    "relax.nn.conv1d": R.nn.conv1d, "relax.nn.conv2d": R.nn.conv2d, "relax.nn.conv3d": R.nn.conv3d,
    "relax.nn.conv1d_transpose": R.nn.conv1d_transpose,
    "relax.nn.conv2d_transpose": R.nn.conv2d_transpose, "relax.matmul": R.matmul,
}
PRECISIONS = ("fp16", "bf16-accuracy", "bf16-performance")


def _bfloat16_operands(mod: tvm.IRModule, result_dtype: str) -> tvm.IRModule:
    """Each float32 heavy op reads bfloat16 operands; it accumulates in float32 and yields
    ``result_dtype`` (float32 keeps accuracy; bfloat16 halves the memory traffic)."""

    def rewrite(call, _matches):
        if call.args[0].ty.dtype != "float32":
            return call  # already rewritten (rewrite_call revisits its own results)
        builder = _HEAVY_OPS[call.op.name]
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
                             (is_op(name)(wildcard(), wildcard()) for name in _HEAVY_OPS))
    updated = {}
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            updated[gv] = rewritten_without_weights(func, lambda f: rewrite_call(heavy, rewrite, f))
    for gv, func in updated.items():
        mod[gv] = func
    return relax.transform.Normalize()(mod)


def reduce_precision(mod: tvm.IRModule, precision: str | None) -> tvm.IRModule:
    """``mod`` with its heavy ops in ``precision`` (one of PRECISIONS), or unchanged for None."""
    if precision is None:
        return mod
    if precision == "fp16":
        # TVM's own pass: fp16 operands, float32 accumulation, float32 at the boundaries.
        return relax.transform.ToMixedPrecision(out_dtype="float32")(mod)
    if precision in ("bf16-accuracy", "bf16-performance"):
        return _bfloat16_operands(mod, "float32" if precision == "bf16-accuracy" else "bfloat16")
    raise LoweringError(f"precision {precision!r}; expected one of {PRECISIONS} or None")
