"""Lowerings of ODLA's control flow (odla_ops_control_flow.h): branches to ``relax.If``,
loops to a recursive Relax function.

A branch or loop body arrives as the expression ``GraphBuilder.close_scope`` made of it: its
bindings, yielding a tuple of its results.

Relax has no loop construct, and the VM runs a call on the machine stack, so a function
calling itself once per iteration would overflow it after a few thousand iterations. The
loop function instead takes a ``level``: at level 0 it runs one iteration, at level L it runs
level L-1 twice. Called at level 62 it can run 2**62 iterations with a recursion depth of 63;
every call first checks whether the loop is still running, so finished levels return at once.
"""

from __future__ import annotations

import math

from tvm import relax
from tvm.relax import op as R
from tvm.relax.utils import copy_with_new_vars

from ..errors import LoweringError
from ..registry import register
from .common import as_bool, static_dims

_LEVELS = 62
_INT64 = relax.TensorType([], "int64")
_BOOL = relax.TensorType([], "bool")


def _scalar(emit, x, name: str, dtype: str):
    """``x``, a one-element value, as a 0-d tensor of ``dtype`` (BOOL: non-zero is true)."""
    dims = static_dims(x)
    if dims is None or math.prod(dims) != 1:
        raise LoweringError(f"{name} is {x.ty}; expected a value of one element")
    if dtype == "bool":
        x = as_bool(emit, x)
    elif x.ty.dtype != dtype:
        x = emit(R.astype(x, dtype))
    return x if x.ty.ndim == 0 else emit(R.reshape(x, []))


def _yielding(emit, build) -> relax.SeqExpr:
    """A body (a branch, a function's) yielding the one expression ``build()`` returns."""
    seq = emit.body(lambda: [build()])
    return relax.SeqExpr(seq.blocks, seq.body.fields[0])


def _check_alike(what: str, first, second):
    if first.ty.dtype != second.ty.dtype or first.ty.ndim != second.ty.ndim:
        raise LoweringError(f"{what}: {first.ty} and {second.ty}; expected one element type and rank")


@register("If")
def if_(emit, condition, *, branches):
    then_body, else_body = branches
    for i, (then_result, else_result) in enumerate(zip(then_body.body.fields, else_body.body.fields)):
        _check_alike(f"result {i} of the branches", then_result, else_result)
    chosen = emit(relax.If(_scalar(emit, condition, "condition", "bool"), then_body, else_body))
    return [relax.TupleGetItem(chosen, i) for i in range(len(then_body.body.fields))]


@register("Loop")
def loop(emit, trip_count, *inits, loop_variables, body, has_condition, outputs):
    """``outputs``: (loop variable index, LoopOutputMode name) pairs; each gives the variable's
    last value, then for a mode other than LAST_VALUE its values stacked along a new axis 0."""
    for state, next_state in zip(loop_variables, body.body.fields):
        _check_alike(f"loop variable {state.name} and its next value", state, next_state)
    if trip_count is None:
        trip_count = relax.const(2**_LEVELS, "int64")
    else:
        trip_count = _scalar(emit, trip_count, "trip_count", "int64")
    stacked = [(index, mode.endswith("BEFORE")) for index, mode in outputs if mode != "LAST_VALUE"]
    captured = [v for v in relax.analysis.free_vars(body) if v not in loop_variables]
    function = _loop_function(emit, loop_variables, body, has_condition, stacked, captured)
    empty_stacks = [emit(R.zeros(relax.ShapeExpr([0] + list(inits[i].ty.shape.values)),
                                 str(inits[i].ty.dtype))) for i, _ in stacked]
    start = [relax.const(_LEVELS, "int64"), relax.const(0, "int64"), trip_count,
             relax.const(True, "bool")]
    final = emit(relax.Call(function, start + list(inits) + empty_stacks + captured))
    results = []
    stacks = iter(range(2 + len(loop_variables), 2 + len(loop_variables) + len(stacked)))
    for index, mode in outputs:
        results.append(relax.TupleGetItem(final, 2 + index))
        if mode != "LAST_VALUE":
            stack = emit.with_shape(relax.TupleGetItem(final, next(stacks)),
                                    [None] + list(inits[index].ty.shape.values))
            results.append(R.flip(stack, 0) if mode.startswith("REV") else stack)
    return results


def _loop_function(emit, states, body, has_condition, stacked, captured) -> relax.GlobalVar:
    """The recursive loop function: (level, iteration, trip_count, running, states...,
    stacks..., captured...) -> (iteration, running, states..., stacks...). ``stacked``: (state
    index, whether the value before the iteration is stacked rather than the one after)."""
    stack_types = [relax.TensorType(ndim=states[i].ty.ndim + 1, dtype=states[i].ty.dtype)
                   for i, _ in stacked]
    result_type = relax.TupleType([_INT64, _BOOL] + [s.ty for s in states] + stack_types)
    level, iteration, trip_count = (relax.Var(n, _INT64) for n in ("level", "i", "trip_count"))
    running = relax.Var("running", _BOOL)
    stacks = [relax.Var(f"stack{k}", t) for k, t in enumerate(stack_types)]
    params = [level, iteration, trip_count, running] + list(states) + stacks + list(captured)
    function = emit.declare_function("loop", relax.FuncType([p.ty for p in params], result_type))

    def one_iteration():
        results = emit.inline(body)
        next_states = results[: len(states)]
        still_running = _scalar(emit, results[-1], "condition", "bool") if has_condition else running
        next_stacks = []
        for stack, (index, before) in zip(stacks, stacked):
            entry = emit(R.expand_dims(states[index] if before else next_states[index], 0))
            known = emit.with_shape(stack, [None] + list(states[index].ty.shape.values))
            next_stacks.append(emit(R.concat([known, entry], 0)))
        next_iteration = emit(R.add(iteration, relax.const(1, "int64")))
        return emit(relax.Tuple([next_iteration, still_running] + next_states + next_stacks))

    def twice_one_level_down():
        lower = emit(R.subtract(level, relax.const(1, "int64")))
        first = emit(relax.Call(function, [lower, iteration, trip_count, running] + states
                                + stacks + list(captured)))
        carried = [emit(relax.TupleGetItem(first, k)) for k in range(len(result_type.fields))]
        return emit(relax.Call(function, [lower] + carried[:1] + [trip_count] + carried[1:]
                               + list(captured)))

    def step():
        at_bottom = emit(R.equal(level, relax.const(0, "int64")))
        return emit(relax.If(at_bottom, _yielding(emit, one_iteration),
                             _yielding(emit, twice_one_level_down)))

    def finished():
        return emit(relax.Tuple([iteration, running] + list(states) + stacks))

    def function_body():
        within_count = emit(R.less(iteration, trip_count))
        go_on = emit(R.logical_and(running, within_count))
        return emit(relax.If(go_on, _yielding(emit, step), _yielding(emit, finished)))

    func = relax.Function(params, _yielding(emit, function_body), result_type)
    # Fresh variables: those bound here may also be bound in main (captured ones) or the body.
    emit.define_function(function, copy_with_new_vars(func))
    return function
