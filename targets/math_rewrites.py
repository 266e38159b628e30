"""Graph rewrites of elementwise math for CPU builds, made before their kernels are fused; each
keeps the results within 2 units in the last place.

- powers_by_roots: a float power by the constant 0.5 or 0.75 (LRN's usual beta: AlexNet's,
  GoogLeNet's, ONNX's default) as square roots, each correctly rounded (NaN for a negative base,
  as the power's): a power is a libm call per element that no CPU kernel vectorizes, and
  GoogLeNet's first LRN took a fifth of its pure-TVM run. What a vendor plugin took (oneDNN's
  LRN) was partitioned out before, and keeps its power.
"""

from __future__ import annotations

import tvm
from tvm import relax

from .layouts import op_name, rewrite_functions, static_dims

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
        if op_name(call) != "relax.power" or _root_power(call) is None:
            return call
        root = self.builder_.emit(relax.op.sqrt(call.args[0]))
        if _root_power(call) == 0.5:
            return root
        return relax.op.multiply(root, self.builder_.emit(relax.op.sqrt(root)))


@tvm.transform.module_pass(opt_level=0, name="PowersByRoots")
def powers_by_roots(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return rewrite_functions(mod, lambda m, _f: _PowersByRoots(m))
