"""The data layouts a target's tuned kernels work in, and the passes that convert a graph to them.

CPU schedules vectorize the innermost axis of a kernel's output: in NCHW the width (7 to 112 in
a CNN), in NHWC the channels (64 to 2048). So CPU targets convert convolutions to NHWC before
their kernels are fused; ops around them follow the new layout, and the graph transposes only
where an op cannot (its inputs and outputs keep the model's layouts). Constants' layout changes
are folded when compiling, by NumPy, into the weight files where there are some.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from toolchain import relax_ir

# CPU_LAYOUTS (targets.specs): relax op -> layouts of its data and weight operands, as
# relax.transform.ConvertLayout takes them.
from ..specs import CPU_LAYOUTS  # noqa: F401
from ..relax_rewrites import op_name, rewrite_functions, static_dims
from ..weights import WeightFiles

# Elementwise ops that broadcast their operands: a constant operand of fewer dims than the other
# gets leading 1s (see full_rank_constants).
_BROADCASTING_OPS = frozenset(f"relax.{name}" for name in (
    "add", "subtract", "multiply", "divide", "floor_divide", "power", "maximum", "minimum"))


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


def _transposed(arrays: list[np.ndarray], call: relax.Call, out: np.ndarray, copy) -> None:
    """permute_dims, through ``copy`` (WeightFiles.copy or copy_plain)."""
    axes = list(range(out.ndim))[::-1] if call.attrs.axes is None else \
        [int(a) for a in call.attrs.axes]
    copy(out, np.transpose(arrays[0], axes), arrays[0], axes.index(0) if axes else 0)


# What the layout and convolution rewrites leave on constants (a transpose per weight;
# Winograd's reshapes of the taps and their product with kron(G, G); a bias reshaped to
# broadcast), done here with NumPy: the same values, without an LLVM kernel each to build and
# run (in runtime's fold, resnet50: 145 of its 158 kernels, and 26 of the 79 left before the
# products folded here; in relax.transform.FoldConstant, one build per kernel).
# Each fold writes the call's value, from the data of its tensor operands, into ``out`` (a view
# of the folded constant's memory), a copy through ``copy`` (WeightFiles.copy or copy_plain:
# out, value, what it reads). A reshape is a view of its operand's tensor instead (a copy
# fills fresh memory, which is slow).
_NUMPY_FOLDS = {
    "relax.permute_dims": _transposed,
    "relax.matmul": lambda arrays, _call, out, _copy: np.matmul(*arrays, out=out),
}


@relax.expr_functor.mutator
class _NumpyFolder(relax.expr_functor.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, weight_files: WeightFiles | None):
        super().__init__(mod)
        self.weight_files = weight_files

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        name = getattr(call.op, "name", None)
        ty = call.ty
        if name not in (*_NUMPY_FOLDS, "relax.reshape") or not (
                isinstance(ty, relax.TensorType) and ty.shape is not None
                and all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values)):
            return call
        shape = [int(d) for d in ty.shape.values]
        if name == "relax.reshape":
            operand = self._bound(call.args[0])
            return relax.const(operand.value._create_view(shape)) \
                if isinstance(operand, tvm.ir.expr.Constant) else call
        arrays = [self._constant(a) for a in call.args if isinstance(a.ty, relax.TensorType)]
        if any(a is None or str(a.dtype) != str(ty.dtype) for a in arrays):
            return call
        in_file = self.weight_files.empty(shape, str(ty.dtype)) \
            if self.weight_files is not None else None
        if in_file is None:
            return relax_ir.computed_constant(
                shape, str(ty.dtype),
                lambda out: _NUMPY_FOLDS[name](arrays, call, out, WeightFiles.copy_plain))
        _NUMPY_FOLDS[name](arrays, call, in_file, self.weight_files.copy)
        for array in (in_file, *arrays):  # what it wrote, and what it read, leave memory
            self.weight_files.release(array)
        return relax.const(tvm.runtime.from_dlpack(in_file))

    def _bound(self, expr: relax.Expr) -> relax.Expr:
        return self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr

    def _constant(self, expr):
        """The constant's data: a view of its tensor (a copy would hold its memory twice), or
        a copy for a dtype NumPy views lack (bfloat16)."""
        expr = self._bound(expr)
        if not isinstance(expr, tvm.ir.expr.Constant):
            return None
        view = relax_ir.constant_view(expr)
        return view if view is not None else expr.value.numpy()


def constant_layouts_folded(weight_files: WeightFiles | None = None) -> tvm.transform.Pass:
    """The pass folding what the layout and convolution rewrites leave on constants, with
    NumPy; its large results written to ``weight_files`` as they are made, where given."""

    @tvm.transform.module_pass(opt_level=0, name="FoldConstantLayouts")
    def fold(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, lambda m, _func: _NumpyFolder(m, weight_files))

    return fold


fold_constant_layouts = constant_layouts_folded()
