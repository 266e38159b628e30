"""Graph rewrites of elementwise math for CPU builds, made before their kernels are fused; each
keeps the results within 2 units in the last place.

- powers_by_roots: a float power by the constant 0.5 or 0.75 (LRN's usual beta: AlexNet's,
  GoogLeNet's, ONNX's default) as square roots, each correctly rounded: a power is a libm call
  per element that no CPU kernel vectorizes, and GoogLeNet's first LRN took a fifth of its
  pure-TVM run. As the power, NaN for a negative base, +0 for -0 and +inf for -inf (where a
  square root gives -0 and NaN). What a vendor plugin took (oneDNN's LRN) was partitioned out
  before, and keeps its power.
"""

from __future__ import annotations

import tvm
from tvm import relax

from ..relax_rewrites import op_name, rewrite_functions, static_dims

_ROOT_POWERS = (0.5, 0.75)


def _root_power(call: relax.Call) -> float | None:
    """The exponent of a power ``call`` that square roots compute, else None: a constant of
    one element broadcast over a float32 or float64 base (the result keeps the base's shape)."""
    base, exponent = call.args
    base_dims, exponent_dims = static_dims(base), static_dims(exponent)
    if (not isinstance(exponent, tvm.ir.expr.Constant) or base_dims is None
            or exponent_dims is None or len(exponent_dims) > len(base_dims)
            or any(d != 1 for d in exponent_dims)
            or str(base.ty.dtype) not in ("float32", "float64")):
        return None
    value = float(exponent.value.numpy().reshape(()))
    return value if value in _ROOT_POWERS else None


@relax.expr_functor.mutator
class _PowersByRoots(relax.expr_functor.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        exponent = _root_power(call) if op_name(call) == "relax.power" else None
        if exponent is None:
            return call
        base, emit = call.args[0], self.builder_.emit
        dtype = str(base.ty.dtype)
        root = emit(relax.op.sqrt(base))
        if exponent == 0.5:  # sqrt(-0) is -0 (TVM folds an added +0 away)
            zero = relax.const(0.0, dtype)
            power = relax.op.where(emit(relax.op.equal(base, zero)), zero, root)
        else:  # -0 * -0 is +0
            power = relax.op.multiply(root, emit(relax.op.sqrt(root)))
        minus_inf = emit(relax.op.equal(base, relax.const(float("-inf"), dtype)))
        return relax.op.where(minus_inf, relax.const(float("inf"), dtype), emit(power))


@tvm.transform.module_pass(opt_level=0, name="PowersByRoots")
def powers_by_roots(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return rewrite_functions(mod, lambda m, _f: _PowersByRoots(m))
