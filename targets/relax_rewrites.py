"""Helpers the graph rewrites of every target share: the op a call names, a static shape,
a module's relax functions rewritten by a mutator, and the kernels they no longer call."""

from __future__ import annotations

import tvm
from tvm import relax


def op_name(expr) -> str | None:
    """The name of the relax op ``expr`` calls (None for anything else)."""
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else None


def static_dims(expr) -> list[int] | None:
    """``expr``'s shape when every dimension is a known integer, else None."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape.values):
        return None
    return [int(d) for d in shape.values]


def is_scalar(expr) -> bool:
    """Whether ``expr`` is a tensor of one element (of any rank)."""
    dims = static_dims(expr)
    return dims is not None and all(d == 1 for d in dims)


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


def called_kernels(mod: tvm.IRModule) -> set:
    """The global vars the module's relax functions mention (the kernels they call)."""
    mentioned = set()

    def visit(expr):
        if isinstance(expr, tvm.ir.GlobalVar):
            mentioned.add(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return mentioned


def without_uncalled(mod: tvm.IRModule, kernels: set) -> tvm.IRModule:
    """``mod`` without those of ``kernels`` (global vars) its relax functions no longer call."""
    unused = kernels - called_kernels(mod)
    if unused:
        mod = mod.clone()
        for kernel in unused:
            del mod[kernel]
    return mod
