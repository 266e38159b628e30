"""The data layouts a target's tuned kernels work in, and the passes that convert a graph to them.

MetaSchedule's CPU schedules vectorize the innermost axis of a kernel's output. In NCHW that is
the width (7 to 112 in a CNN), in NHWC the channels (64 to 2048): measured here on resnet50's 3x3
convolutions, 48 trials each, NHWC reached 186 GFLOPS against NCHW's 110. So CPU targets convert
convolutions to NHWC before their kernels are fused; ops around them follow the new layout, and
the graph transposes only where an op cannot (its inputs and outputs keep the model's layouts).
"""

from __future__ import annotations

import tvm
from tvm import relax

# relax op -> layouts of its data and weight operands, as relax.transform.ConvertLayout takes them
CPU_LAYOUTS = {"relax.nn.conv2d": ("NHWC", "OHWI")}

# Elementwise ops that broadcast their operands: a constant operand of fewer dims than the other
# gets leading 1s (see full_rank_constants).
_BROADCASTING_OPS = frozenset(f"relax.{name}" for name in (
    "add", "subtract", "multiply", "divide", "floor_divide", "power", "maximum", "minimum"))


def op_name(expr) -> str | None:
    """The name of the relax op ``expr`` calls (None for anything else)."""
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else None


def static_dims(expr) -> list[int] | None:
    """``expr``'s shape when every dimension is a known integer, else None."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
        return None
    return [int(d) for d in shape.values]


def rewrite_functions(mod: tvm.IRModule, make_mutator) -> tvm.IRModule:
    """``mod`` with each relax function rewritten by ``make_mutator(mod, func)`` (a
    PyExprMutator) and stripped of the bindings the rewrite left unused."""
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            mutator = make_mutator(mod, func)
            mutator.builder_.update_func(gvar, relax.analysis.remove_all_unused(
                mutator.visit_expr(func)))
            mod = mutator.builder_.get()
    return mod


@relax.expr_functor.mutator
class _FullRankConstants(relax.expr_functor.PyExprMutator):
    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if op_name(call) not in _BROADCASTING_OPS:
            return call
        rank = max(getattr(arg.ty, "ndim", -1) for arg in call.args)
        args = [self._with_rank(arg, rank) for arg in call.args]
        if all(a.same_as(b) for a, b in zip(args, call.args)):
            return call
        return relax.Call(call.op, args, call.attrs)

    def _with_rank(self, arg: relax.Expr, rank: int) -> relax.Expr:
        value = self._constant_value(arg)
        if value is None or value.ndim >= rank:
            return arg
        return relax.const(value.reshape((1,) * (rank - value.ndim) + value.shape),
                           str(value.dtype))

    def _constant_value(self, expr: relax.Expr):
        """The array of a constant, or of a reshaped constant (a bias made (C, 1, 1) in the
        graph); None for anything else."""
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value.numpy()
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        if (op_name(bound) in ("relax.reshape", "relax.expand_dims")
                and isinstance(bound.args[0], tvm.ir.expr.Constant)
                and static_dims(expr) is not None):
            return bound.args[0].value.numpy().reshape(static_dims(expr))
        return None


@tvm.transform.module_pass(opt_level=0, name="FullRankConstants")
def full_rank_constants(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Constant operands of broadcasting elementwise ops made full rank. ONNX models scale and
    shift channels by (C, 1, 1) constants; ConvertLayout cannot say where such a constant's
    channel axis goes in NHWC, so it would transpose back to NCHW around every one of them."""
    return rewrite_functions(mod, lambda m, _func: _FullRankConstants(m))


def layout_passes(layouts: dict) -> list:
    """Passes converting the ops named in ``layouts`` (see CPU_LAYOUTS) to their layouts; none
    for an empty dict."""
    if not layouts:
        return []
    return [full_rank_constants,
            relax.transform.ConvertLayout({op: list(ls) for op, ls in layouts.items()})]

