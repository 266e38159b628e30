"""Converters of ONNX's optimizer ops (domain ai.onnx.preview.training): one update step of
each optimized tensor, composed from ODLA's math ops as onnx's reference computes it. The
learning rate R and the step count T are run-time scalars; the node's inputs are R, T, then
one group of n tensors per input kind (X..., G..., V..., H...), its outputs one group per
output kind (X_new..., V_new..., H_new...)."""

from __future__ import annotations

from ... import ops
from .registry import Node, converter, scalar

DOMAIN = "ai.onnx.preview.training"


def _groups(node: Node, kinds: int) -> list[list]:
    """The tensor inputs after R and T, one list per kind, each with one tensor per
    optimized tensor."""
    tensors = node.inputs[2:]
    n = len(tensors) // kinds
    return [tensors[k * n:(k + 1) * n] for k in range(kinds)]


def _outputs(node: Node, groups: list[list]) -> list:
    """The updated tensors in the node's output order (kind by kind), named by the node."""
    flat = [value for group in groups for value in group]
    return [ops.process.cast(v, v.element_type, value_id=name) if name else None
            for v, name in zip(flat, node.ids)]


def _step_started(node: Node, like):
    """T > 0 (a BOOL scalar): whether earlier steps have run."""
    t = node.input(1)
    return ops.math.greater(t, ops.process.cast(scalar(like, 0), t.element_type))


def _regularized(node: Node, x, g):
    """The gradient plus that of the L2 term: norm_coefficient * x + g."""
    return ops.math.add(ops.math.mul(scalar(x, node.attr("norm_coefficient", 0.0)), x), g)


def _rate(node: Node, like):
    """The learning rate R in the type of ``like``."""
    r = node.input(0)
    return r if r.element_type == like.element_type else ops.process.cast(r, like.element_type)


@converter("Adagrad", domain=DOMAIN)
def adagrad(node: Node):
    xs, gs, hs = _groups(node, 3)
    new_xs, new_hs = [], []
    for x, g, h in zip(xs, gs, hs):
        steps = ops.process.cast(node.input(1), x.element_type)
        decayed = ops.math.add(scalar(x, 1),
                               ops.math.mul(steps, scalar(x, node.attr("decay_factor", 0.0))))
        rate = ops.math.div(_rate(node, x), decayed)
        gradient = _regularized(node, x, g)
        h_new = ops.math.add(h, ops.math.mul(gradient, gradient))
        scaling = ops.math.add(ops.math.sqrt(h_new), scalar(x, node.attr("epsilon", 0.0)))
        new_xs.append(ops.math.sub(x, ops.math.div(ops.math.mul(rate, gradient), scaling)))
        new_hs.append(h_new)
    return _outputs(node, [new_xs, new_hs])


@converter("Adam", domain=DOMAIN)
def adam(node: Node):
    xs, gs, vs, hs = _groups(node, 4)
    alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
    post = node.attr("norm_coefficient_post", 0.0)
    new_xs, new_vs, new_hs = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        gradient = _regularized(node, x, g)
        v_new = ops.math.add(ops.math.mul(scalar(x, alpha), v),
                             ops.math.mul(scalar(x, 1 - alpha), gradient))
        h_new = ops.math.add(ops.math.mul(scalar(x, beta), h),
                             ops.math.mul(scalar(x, 1 - beta), ops.math.mul(gradient, gradient)))
        scaling = ops.math.add(ops.math.sqrt(h_new), scalar(x, node.attr("epsilon", 1e-6)))
        # With T > 0 the rate corrects the momentums' bias: R * sqrt(1 - beta**T) / (1 - alpha**T).
        steps = ops.process.cast(node.input(1), x.element_type)
        rate = _rate(node, x)
        unbiased = ops.math.div(
            ops.math.mul(rate, ops.math.sqrt(ops.math.sub(scalar(x, 1),
                                                          ops.math.pow(scalar(x, beta), steps)))),
            ops.math.sub(scalar(x, 1), ops.math.pow(scalar(x, alpha), steps)))
        rate = ops.math.select(_step_started(node, x), unbiased, rate)
        x_new = ops.math.sub(x, ops.math.mul(rate, ops.math.div(v_new, scaling)))
        new_xs.append(ops.math.mul(scalar(x, 1 - post), x_new))
        new_vs.append(v_new)
        new_hs.append(h_new)
    return _outputs(node, [new_xs, new_vs, new_hs])


@converter("Momentum", domain=DOMAIN)
def momentum(node: Node):
    xs, gs, vs = _groups(node, 3)
    alpha, beta = node.attr("alpha"), node.attr("beta")
    nesterov = node.attr("mode") == "nesterov"
    new_xs, new_vs = [], []
    for x, g, v in zip(xs, gs, vs):
        gradient = _regularized(node, x, g)
        # The gradient's coefficient is 1 at the first step (T = 0), beta after.
        coefficient = ops.math.select(_step_started(node, x), scalar(x, beta), scalar(x, 1))
        v_new = ops.math.add(ops.math.mul(scalar(x, alpha), v), ops.math.mul(coefficient, gradient))
        step = ops.math.add(gradient, ops.math.mul(scalar(x, alpha), v_new)) if nesterov else v_new
        new_xs.append(ops.math.sub(x, ops.math.mul(_rate(node, x), step)))
        new_vs.append(v_new)
    return _outputs(node, [new_xs, new_vs])
