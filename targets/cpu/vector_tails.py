"""Whole vectors apart from a guarded tail, in scheduled CPU kernels.

A loop split by a vector width that does not divide it guards its block with the split's
predicate (i < n), and TVM's vectorizer turns a vector loop whose condition differs by lane
into a scalar loop, every time it runs, not only at the tail: a softmax over ViT-B/16's
197-long rows reduces them one element at a time, and a matmul padded to whole tiles (its
attention scores Q K^T) writes every tile back one element at a time. Here such a loop runs
twice over: once as whole vectors with the lane conditions dropped, where the last lane meets
them (so every lane does: each is i + c < n, i the lane, rising with it), and as it was
otherwise (the tail).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import collect_vars_used_in_prim_expr
from tvm.sym.pattern import detect_linear_equation


def _conjuncts(expr) -> list:
    if isinstance(expr, tirx.And):
        return _conjuncts(expr.a) + _conjuncts(expr.b)
    return [expr]


def _uses(expr, var) -> bool:
    return any(v.same_as(var) for v in collect_vars_used_in_prim_expr(expr))


def _rising_bound(condition, lane) -> bool:
    """Whether ``condition`` is a < b, b free of ``lane`` and a rising with it (a positive
    constant times the lane plus what is free of it)."""
    if not isinstance(condition, tirx.LT) or _uses(condition.b, lane):
        return False
    linear = detect_linear_equation(condition.a, [lane])
    return (len(linear) == 2 and isinstance(linear[0], tirx.IntImm) and linear[0].value > 0
            and not _uses(linear[1], lane))


def _whole_vectors(loop: tirx.For):
    """``loop`` run as whole vectors where its last lane meets the lane conditions of its
    block's predicate, else as it was; ``loop`` itself where that does not apply (not a
    vector loop of a constant extent right around a leaf block, or a lane condition of
    another form)."""
    realize = loop.body
    if loop.kind != tirx.ForKind.VECTORIZED or not isinstance(realize, s_tir.SBlockRealize) \
            or not isinstance(loop.extent, tirx.IntImm) or realize.block.alloc_buffers \
            or not isinstance(loop.min, tirx.IntImm) or loop.min.value != 0:
        return loop
    lane = loop.loop_var
    conditions = _conjuncts(realize.predicate)
    by_lane = [c for c in conditions if _uses(c, lane)]
    if not by_lane or not all(_rising_bound(c, lane) for c in by_lane):
        return loop
    last = tirx.IntImm(lane.ty, loop.extent.value - 1)
    at_last = [tvm_ffi.structural_map(c, (tirx.Var, lambda v: last if v.same_as(lane) else v),
                                      order="post") for c in by_lane]
    rest = [c for c in conditions if not _uses(c, lane)]
    whole = tirx.For(lane, loop.min, loop.extent, loop.kind, s_tir.SBlockRealize(
        realize.iter_values, _all(rest), realize.block), annotations=loop.annotations)
    return tirx.IfThenElse(_all(at_last), whole, loop)


def _all(conditions):
    if not conditions:
        return tirx.const(True, "bool")
    result = conditions[0]
    for condition in conditions[1:]:
        result = tirx.And(result, condition)
    return result


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="WholeVectors")
def whole_vectors(func: tirx.PrimFunc, _mod, _ctx) -> tirx.PrimFunc:
    """Each kernel with its guarded vector loops run as whole vectors wherever the guard holds
    for every lane (see the module's docstring); before TVM lowers the kernels' blocks."""
    body = tvm_ffi.structural_map(func.body, (tirx.For, _whole_vectors), order="post")
    return func if body.same_as(func.body) else func.with_body(body)
