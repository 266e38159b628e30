"""Turns a forward IRModule into one training step: the loss, its gradients (Relax's
``Gradient`` pass) and an optimizer update, in a function the device runs once per step.

The forward module is what ``GraphBuilder.build`` gives: ``main(params...) -> (outputs...)``.
The training module's ``main`` (one step) takes the same params, then the optimizer state
and the hyperparameters (each a 0-d tensor, so a new learning rate needs no recompilation),
and returns ``((outputs...), (updated trained params...), (updated optimizer state...))``.

Optimizers are written here rather than taken from ``tvm.relax.training.optimizer``: in TVM
0.27 its ``Adam.init`` fails (it hands a PrimType to ``np.ones``), and its optimizers bake
the learning rate into the code as constants.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.relax import op as R

from . import gradients  # noqa: F401  (registers the gradient rules Relax lacks)
from .errors import LoweringError
from .graph import _reachable

TRAIN_STEP = "main"  # the entry function, named as in every module targets compiles
_LOSS_FUNC = "loss_and_outputs"


@dataclass(frozen=True)
class Optimizer:
    """An update rule: its hyperparameters (name -> default, None when required), the state it
    keeps per trained tensor, and ``update(param, grad, slots, hyper, step) -> (param, slots)``
    over Relax expressions; ``step`` counts from 1."""

    name: str
    hyperparameters: dict
    slots: tuple[str, ...]
    update: Callable


def _sgd(p, g, slots, h, step):
    # PyTorch's SGD: L2 weight decay added to the gradient, velocity = momentum * velocity + g.
    (velocity,) = slots
    g = g + h["weight_decay"] * p
    velocity = h["momentum"] * velocity + g
    return p - h["learning_rate"] * velocity, [velocity]


def _adam_update(decoupled: bool):
    def update(p, g, slots, h, step):
        m, v = slots
        one = relax.const(1.0, p.ty.dtype)
        if not decoupled:  # Adam: L2 penalty in the gradient; AdamW: decay applied to the weight
            g = g + h["weight_decay"] * p
        m = h["beta1"] * m + (one - h["beta1"]) * g
        v = h["beta2"] * v + (one - h["beta2"]) * g * g
        m_hat = m / (one - R.power(h["beta1"], step))
        v_hat = v / (one - R.power(h["beta2"], step))
        direction = m_hat / (R.sqrt(v_hat) + h["epsilon"])
        if decoupled:
            direction = direction + h["weight_decay"] * p
        return p - h["learning_rate"] * direction, [m, v]

    return update


_ADAM_HYPERPARAMETERS = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}

OPTIMIZERS = {
    o.name: o
    for o in (
        Optimizer("sgd", {"learning_rate": None, "momentum": 0.0, "weight_decay": 0.0},
                  ("velocity",), _sgd),
        Optimizer("adam", {**_ADAM_HYPERPARAMETERS, "weight_decay": 0.0}, ("m", "v"),
                  _adam_update(decoupled=False)),
        Optimizer("adamw", {**_ADAM_HYPERPARAMETERS, "weight_decay": 0.01}, ("m", "v"),
                  _adam_update(decoupled=True)),
    )
}


def optimizer_state_types(optimizer: str, param_types: list[tuple[tuple[int, ...], str]]):
    """(shape, dtype) of each optimizer state tensor: the step count, then each slot for each
    trained tensor. Every state starts at zero."""
    dtype = param_types[0][1]
    return [((), dtype)] + [t for _ in OPTIMIZERS[optimizer].slots for t in param_types]


@dataclass
class TrainingModule:
    module: tvm.IRModule
    trained: list[int]  # indices of the forward params that are differentiated and updated
    state_types: list[tuple[tuple[int, ...], str]]
    hyperparameters: list[str]  # the order of the step's hyperparameter tensors


def check_loss(loss: relax.Expr) -> None:
    """A loss must be one floating-point element (the Gradient pass differentiates a scalar)."""
    ty = loss.ty
    if "float" not in str(ty.dtype):
        raise LoweringError(f"is {ty.dtype}; expected a floating-point value")
    dims = [int(d) if isinstance(d, tvm.tirx.IntImm) else -1 for d in ty.shape.values]
    if any(d != 1 for d in dims):
        raise LoweringError(
            f"has shape {tuple(dims)}; expected a single element (reduce it first, e.g. with "
            "ReduceMean or ReduceSum)"
        )


def params_reaching(forward: tvm.IRModule, output_index: int) -> list[int]:
    """Indices of the params of ``forward``'s main that its output ``output_index`` depends on."""
    func = forward["main"]
    bindings = [b for block in func.body.blocks for b in block.bindings]
    output = func.body.body.fields[output_index]
    needed = _reachable(bindings, [output])
    body = relax.SeqExpr([relax.BindingBlock([b for b in bindings if b.var in needed])], output)
    used = set(relax.analysis.free_vars(body))
    return [i for i, p in enumerate(func.params) if p in used]


def training_module(forward: tvm.IRModule, trained: list[int], loss_index: int,
                    optimizer: str) -> TrainingModule:
    """The training module for ``forward``, whose output ``loss_index`` is the loss and whose
    params at ``trained`` are differentiated and updated by ``optimizer``."""
    func = forward["main"]
    outputs = list(func.body.body.fields)
    loss = outputs[loss_index]
    check_loss(loss)
    bindings = [b for block in func.body.blocks for b in block.bindings]
    # The forward's kernels (emit.te's, a bounds check's) come along: the loss calls them.
    kernels = {gv: f for gv, f in forward.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    mod = tvm.IRModule({_LOSS_FUNC: _loss_first(func, bindings, outputs, loss), **kernels})
    mod = relax.transform.Normalize()(mod)
    params = mod[_LOSS_FUNC].params
    try:
        mod = relax.transform.Gradient(_LOSS_FUNC, [params[i] for i in trained], target_index=0)(mod)
    except (RuntimeError, ValueError, TypeError) as err:  # how TVM reports what it cannot do
        raise LoweringError(f"cannot differentiate the loss: {_last_line(err)}") from None
    rule = OPTIMIZERS[optimizer]
    param_types = [(_dims(params[i]), str(params[i].ty.dtype)) for i in trained]
    state_types = optimizer_state_types(optimizer, param_types)
    mod[TRAIN_STEP] = _train_step(mod, params, trained, rule, state_types)
    del mod[_LOSS_FUNC]  # only its adjoint is called
    return TrainingModule(mod, list(trained), state_types, list(rule.hyperparameters))


def _loss_first(func, bindings, outputs, loss) -> relax.Function:
    """``func`` returning (0-d loss, outputs...): Gradient differentiates a 0-d first result."""
    if loss.ty.ndim != 0:
        scalar = relax.Var("loss", relax.TensorType((), loss.ty.dtype))
        bindings = bindings + [relax.VarBinding(scalar, R.reshape(loss, ()))]
        loss = scalar
    results = [loss, *outputs]
    body = relax.SeqExpr([relax.DataflowBlock(bindings)], relax.Tuple(results))
    func_type = relax.TupleType([r.ty for r in results])
    return relax.Function(func.params, body, func_type).with_attr("global_symbol", _LOSS_FUNC)


def _train_step(mod, loss_params, trained, rule: Optimizer, state_types) -> relax.Function:
    dtype = state_types[0][1]
    params = [relax.Var(p.name, p.ty) for p in loss_params]
    state = relax.Var("optimizer_state",
                      relax.TupleType([relax.TensorType(s, d) for s, d in state_types]))
    hyper = relax.Var("hyperparameters",
                      relax.TupleType([relax.TensorType((), dtype)] * len(rule.hyperparameters)))
    bb = relax.BlockBuilder(mod)
    with bb.function(TRAIN_STEP, [*params, state, hyper]):
        result = bb.emit(relax.Call(mod.get_global_var(_LOSS_FUNC + "_adjoint"), params))
        outputs = bb.emit(relax.TupleGetItem(result, 0))
        grads = bb.emit(relax.TupleGetItem(result, 1))
        h = {name: bb.emit(relax.TupleGetItem(hyper, i))
             for i, name in enumerate(rule.hyperparameters)}
        step = bb.emit(relax.TupleGetItem(state, 0) + relax.const(1.0, dtype))
        count = len(trained)
        new_params, new_slots = [], [[] for _ in rule.slots]
        for k, i in enumerate(trained):
            slots = [bb.emit(relax.TupleGetItem(state, 1 + s * count + k))
                     for s in range(len(rule.slots))]
            grad = bb.emit(relax.TupleGetItem(grads, k))
            p, slots = rule.update(params[i], grad, slots, h, step)
            new_params.append(bb.emit(p))
            for s, slot in enumerate(slots):
                new_slots[s].append(bb.emit(slot))
        # the forward outputs without the 0-d loss the adjoint put first
        forward_outputs = [bb.emit(relax.TupleGetItem(outputs, j))
                           for j in range(1, len(outputs.ty.fields))]
        bb.emit_func_output(relax.Tuple([
            relax.Tuple(forward_outputs),
            relax.Tuple(new_params),
            relax.Tuple([step] + [s for slot in new_slots for s in slot]),
        ]))
    return bb.get()[TRAIN_STEP]


def _dims(var: relax.Var) -> tuple[int, ...]:
    return tuple(int(d) for d in var.ty.shape.values)


def _last_line(err: Exception) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__
