"""Converters of ONNX's control flow (If, Loop, Scan) onto ODLA's branches and loops
(odla_ops_control_flow.h); their bodies are converted like the main graph."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...computation import set_values_as_output
from ...types import LoopOutputMode
from .registry import INT_MAX, Node, constant, converter, rank, static_dims


@converter("If")
def if_(node: Node):
    if node.is_constant(0):  # the branch is known: only it is converted, inline
        return node.body("then_branch" if node.array(0).any() else "else_branch", [])
    ops.control_flow.begin_if(node.input(0))
    for branch, attr in ((True, "then_branch"), (False, "else_branch")):
        ops.control_flow.enter_branch_body(branch)
        set_values_as_output(node.body(attr, []))
    return ops.control_flow.end_if(node.ids)


def _collector(node: Node, value):
    """A loop variable that stacks ``value`` (a per-iteration output of the body) over the
    iterations; made after the body, once that output's type is known."""
    if value.shape.is_dynamic:
        raise node.unsupported(f"per-iteration output {value.id!r} has dynamic shape "
                               f"{value.shape.dims}; ODLA stacks values of a static shape")
    zeros = constant(np.zeros(value.shape.dims, value.type.dtype))
    return ops.control_flow.create_loop_variable(zeros)


def _counter_step(counter):
    return ops.math.add(counter, constant(np.int64(1)))


@converter("Loop")
def loop(node: Node):
    trip_count, condition = node.input(0), node.input(1)
    carried = node.inputs[2:]
    ops.control_flow.begin_loop(trip_count)
    counter = ops.control_flow.create_loop_variable(constant(np.int64(0)))
    keep_going = ops.control_flow.create_loop_variable(condition if condition is not None
                                                       else constant(np.bool_(True)))
    states = [ops.control_flow.create_loop_variable(v) for v in carried]
    results = node.body("body", [counter, keep_going, *states])
    next_condition = results[0]
    collectors = [_collector(node, v) for v in results[1 + len(states):]]
    set_values_as_output([_counter_step(counter), next_condition, *results[1:]])
    return _end_loop(next_condition if condition is not None else None, states, collectors)


def _end_loop(condition, states, collectors):
    """Ends the loop: the last values of ``states``, then the per-iteration values stacked by
    each of ``collectors``."""
    flags = [LoopOutputMode.LAST_VALUE] * len(states) + [LoopOutputMode.FWD_AFTER] * len(collectors)
    values = ops.control_flow.end_loop(condition, [*states, *collectors], flags)
    # A collector gives its last value, then its stack.
    return values[:len(states)] + values[len(states) + 1::2]


@converter("Scan", since=9)
def scan(node: Node):
    body = node.attrs["body"]
    scan_count = node.attr("num_scan_inputs")
    states, sequences = node.inputs[:-scan_count], node.inputs[-scan_count:]
    input_axes = node.attr("scan_input_axes") or [0] * scan_count
    input_reversed = node.attr("scan_input_directions") or [0] * scan_count
    output_count = len(body.output) - len(states)
    output_axes = node.attr("scan_output_axes") or [0] * output_count
    output_reversed = node.attr("scan_output_directions") or [0] * output_count
    length = static_dims(node, sequences[0])[input_axes[0] % rank(sequences[0])]

    ops.control_flow.begin_loop(constant(np.int64(length)))
    counter = ops.control_flow.create_loop_variable(constant(np.int64(0)))
    variables = [ops.control_flow.create_loop_variable(v) for v in states]
    backwards = ops.math.sub(constant(np.int64(length - 1)), counter)
    slices = [ops.process.gather(x, backwards if reverse else counter, axis % rank(x))
              for x, axis, reverse in zip(sequences, input_axes, input_reversed)]
    results = node.body("body", [*variables, *slices])
    collectors = [_collector(node, v) for v in results[len(states):]]
    set_values_as_output([_counter_step(counter), *results])
    values = _end_loop(None, variables, collectors)
    final_states, stacks = values[:len(states)], values[len(states):]
    outputs = []
    for stacked, axis, reverse in zip(stacks, output_axes, output_reversed):
        if reverse:
            rest = rank(stacked) - 1
            stacked = ops.process.slice(stacked, [-1] + [0] * rest, [-INT_MAX] + [INT_MAX] * rest,
                                        [-1] + [1] * rest)
        axis %= rank(stacked)
        if axis:  # the iterations' axis moves from the front to ``axis``
            order = list(range(1, rank(stacked)))
            order.insert(axis, 0)
            stacked = ops.process.transpose(stacked, order)
        outputs.append(stacked)
    return final_states + outputs
