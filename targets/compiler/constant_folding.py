"""Constant folding for the compile pipeline: the kernels that compute constants from
constants (weights laid out for the kernels) run at compile time, with NumPy where a kernel only
lays its operand out again, else built together in one unoptimized LLVM module."""

from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from ..relax_rewrites import rewrite_functions, without_uncalled
from ..weights import WeightFiles, numpy_views


_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _constant_kernel_calls(mod: tvm.IRModule) -> list:
    """call_tir calls in ``mod``'s relax functions whose operands are all constants, variables
    bound to constants or results of earlier such calls, and whose result is one tensor of
    static shape: (call, kernel, operands), in an order they can run in; an operand is a
    tensor, or the index of the call whose result it is (so a chain of them, as a weight's
    transpose, reshape and product, folds in one build)."""
    found = []
    kernels = {gv: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    bound: dict = {}  # var -> its constant's tensor, or the index of the call it is bound to
    calls: dict = {}  # call -> its index in found

    def operand_of(expr):
        if isinstance(expr, relax.Var):
            return bound.get(expr)
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value
        return calls.get(expr)

    def visit(expr):
        if not (isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR)) or len(expr.args) != 2:
            return
        operands = expr.args[1].fields if isinstance(expr.args[1], relax.Tuple) else [expr.args[1]]
        values = [operand_of(a) for a in operands]
        kernel = kernels.get(expr.args[0])
        ty = expr.ty
        if (kernel is not None and len(kernel.params) == len(operands) + 1
                and all(v is not None for v in values)
                and isinstance(ty, relax.TensorType) and ty.shape is not None
                and all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values)):
            calls[expr] = len(found)
            found.append((expr, kernel, values))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            for block in func.body.blocks:
                for binding in block.bindings:
                    relax.analysis.post_order_visit(binding.value, visit)
                    if isinstance(binding, relax.VarBinding):
                        source = operand_of(binding.value)
                        if source is not None:
                            bound[binding.var] = source
    return found


@relax.expr_functor.mutator
class _ReplaceCalls(relax.expr_functor.PyExprMutator):
    def __init__(self, mod, replacements):
        super().__init__(mod)
        self.replacements = replacements

    def visit_call_(self, call):
        replacement = self.replacements.get(call)
        return replacement if replacement is not None else self.visit_expr_post_order(call)


# LLVM without its optimizations: folding kernels run once, on weights, so optimizing them
# costs more than it saves; the same values, the kernels being data movement and products
# LLVM does not reorder.
_FOLD_TARGET = tvm.target.Target({"kind": "llvm", "opt-level": 0})


def _int(expr) -> int | None:
    return int(expr) if isinstance(expr, tvm.tirx.IntImm) else None


def _axis_parts(indices, axes) -> list[tuple[int, str, int]] | None:
    """Per index, (its axis, "whole", 1), (axis, "outer", c) for axis // c or (axis,
    "inner", c) for axis % c; None where an index is anything else."""
    parts = []
    for index in indices:
        kind = {tvm.tirx.FloorDiv: "outer", tvm.tirx.FloorMod: "inner"}.get(type(index))
        var, factor = (index.a, _int(index.b)) if kind else (index, 1)
        axis = next((n for n, v in enumerate(axes) if var.same_as(v)), None)
        if axis is None or factor is None:
            return None
        parts.append((axis, kind or "whole", factor))
    return parts


def _numpy_layout(kernel: tvm.tirx.PrimFunc, copy=WeightFiles.copy_plain):
    """For a kernel that only lays its one operand out again, as a schedule's prepacked
    weight (out[.., v // c, .., v % c] = in[v0, v1, ..] over all of in: each axis kept
    whole, or split into an outer and an inner part), a function (in, out) doing it with
    NumPy, a reshape and a transpose, through ``copy`` (out, value, read, the axis of out
    that is read's leading one: WeightFiles.copy where its results go to files); else
    None (built and run by LLVM instead, slower)."""
    realizes, loops = [], {}
    tvm_ffi.structural_walk(kernel.body, [
        (tvm.s_tir.SBlockRealize, realizes.append),
        (tvm.tirx.For, lambda loop: loops.update({loop.loop_var: loop}))], order="post")
    if len(kernel.params) != 2 or len(realizes) != 2:  # one block, in the root block
        return None
    realize, (source, out) = realizes[0], kernel.params
    block, store = realize.block, realize.block.body
    load = store.value if isinstance(store, tvm.tirx.BufferStore) else None
    if not (isinstance(load, tvm.ir.expr.TensorLoad) and load.source.same_as(source)
            and store.buffer.same_as(out) and source.dtype == out.dtype
            and numpy_views(str(out.dtype)) and _int(realize.predicate) == 1):
        return None
    # Every element of the source once: its indices are the block's axes, each bound to a
    # loop of its own over the whole of its dim.
    axes = [iv.var for iv in block.iter_vars]
    bound = [loops.get(value) for value in realize.iter_values]
    if not (len(axes) == len(load.indices) == len(source.shape) == len(set(realize.iter_values))
            and all(i.same_as(v) for i, v in zip(load.indices, axes))
            and all(loop is not None and _int(loop.min) == 0
                    and _int(loop.extent) is not None and _int(loop.extent) == _int(extent)
                    for loop, extent in zip(bound, source.shape))):
        return None
    parts = _axis_parts(store.indices, axes)
    if parts is None:
        return None
    split, positions = [], {}  # the source's shape, a split axis as two; (axis, kind) -> place
    for axis, extent in enumerate(int(e) for e in source.shape):
        mine = sorted((kind, factor) for a, kind, factor in parts if a == axis)
        if [kind for kind, _ in mine] == ["whole"]:
            positions[(axis, "whole")] = len(split)
            split.append(extent)
        elif ([kind for kind, _ in mine] == ["inner", "outer"] and mine[0][1] == mine[1][1]
              and extent % mine[0][1] == 0):
            positions[(axis, "outer")], positions[(axis, "inner")] = len(split), len(split) + 1
            split += [extent // mine[0][1], mine[0][1]]
        else:
            return None
    order = [positions[(axis, kind)] for axis, kind, _ in parts]
    if [split[p] for p in order] != [int(d) for d in out.shape]:
        return None

    def lay_out(source, out):
        source = np.from_dlpack(source)
        copy(np.from_dlpack(out), source.reshape(split).transpose(order), source, order.index(0))

    return lay_out


@tvm.transform.module_pass(opt_level=0, name="FoldConstant")
def fold_constants(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """fold_kernel_calls, as a pass."""
    return fold_kernel_calls(mod)


def fold_kernel_calls(mod: tvm.IRModule, weight_files: WeightFiles | None = None) -> tvm.IRModule:
    """relax.transform.FoldConstant, with the kernels that compute constants from constants
    (weights laid out for the kernels: a transpose per convolution, a layout per prepacked
    kernel) built together in one LLVM module, rather than one each, a chain of them (a
    reshape, then a product) in one build rather than one per link. Same kernels as
    FoldConstant's, for its "llvm" target at opt-level 0 (_FOLD_TARGET). A kernel that only
    ever computed constants leaves the module, rather than being compiled for nothing.
    With ``weight_files``, the large results are written to files there as they are made."""
    folded = set()
    for _ in range(16):  # rounds: a folded result may reach a kernel through other relax ops
        calls = _constant_kernel_calls(mod)
        if not calls:
            break
        folded.update(call.args[0] for call, _kernel, _values in calls)
        keys = [tvm_ffi.structural_hash(kernel) for _call, kernel, _values in calls]
        functions: dict = {}  # kernel's hash -> what computes it: NumPy, or its LLVM build
        kernels = {}  # name -> (hash, kernel) of those LLVM builds
        for key, (_call, kernel, _values) in zip(keys, calls):
            if key not in functions:
                functions[key] = _numpy_layout(kernel, WeightFiles.copy_plain
                                               if weight_files is None else weight_files.copy)
                if functions[key] is None:
                    name = f"fold_constant_{len(kernels)}"
                    kernels[name] = key, kernel.with_attr("global_symbol", name)
        if kernels:
            library = tvm.compile(tvm.IRModule({n: k for n, (_, k) in kernels.items()}),
                                  target=_FOLD_TARGET)
            functions.update({key: library[name] for name, (key, _) in kernels.items()})
        results = []
        for key, (call, _kernel, operands) in zip(keys, calls):
            shape, dtype = [int(d) for d in call.ty.shape.values], str(call.ty.dtype)
            in_file = weight_files.empty(shape, dtype) if weight_files is not None else None
            out = tvm.runtime.empty(shape, dtype, tvm.cpu()) if in_file is None else \
                tvm.runtime.from_dlpack(in_file)
            values = [results[o] if isinstance(o, int) else o for o in operands]
            functions[key](*values, out)
            if weight_files is not None:  # what it wrote, and what it read, leave memory
                for array in (out, *values):
                    weight_files.release(array)
            results.append(out)
        replacements = {call: relax.const(out) for (call, _, _), out in zip(calls, results)}
        mod = rewrite_functions(mod, lambda m, _func: _ReplaceCalls(m, replacements))
    return without_uncalled(relax.transform.FoldConstant()(mod), folded)
