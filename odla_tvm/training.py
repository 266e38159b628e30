"""Training (ODLA_COMPUTE_TRAINING): differentiate a computation, choose its optimizer, run
one training step per ``execute_computation(computation, context, ComputeMode.TRAINING,
device)``, and store or restore checkpoints.

The loss is an output of the computation (its first unless ``differentiate_computation``
names another); the floating-point variables it depends on are trained. Between steps the
variables and the optimizer state stay on the device: reading a variable (get_value_data,
an inference executable's launch, a checkpoint) fetches it, and set_value_data sends new
data to the device. After training, compile_inference (the forward part only),
compile_computation and Session give executables with the trained weights.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import time
from dataclasses import dataclass

import numpy as np

import relay_bridge
import targets

from .computation import Computation, Value, _computation
from .data_checks import checked_array
from .context import Context, _context
from .device import Device, checked_device
from .executable import (
    Executable,
    bound_inputs,
    compile_outputs,
    store_results,
    write_atomically,
)
from .types import ElementType, OdlaError, Status, ValueType


def _lowering():
    """relay_bridge.training, imported (with TVM's compiler) where training first needs it."""
    import relay_bridge.training

    return relay_bridge.training

log = logging.getLogger(__name__)

_FLOAT_TYPES = (ElementType.FLOAT16, ElementType.BFLOAT16, ElementType.FLOAT32,
                ElementType.FLOAT64)
_CHECKPOINT_FORMAT = 1

# What each hyperparameter may be: a test and its description for error messages.
_VALID_HYPERPARAMETERS = {
    "learning_rate": (lambda v: v > 0, "> 0"),
    "momentum": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "beta1": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "beta2": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "epsilon": (lambda v: v > 0, "> 0"),
}
_DEFAULT_OPTIMIZER = ("sgd", {"learning_rate": 0.01})


@dataclass
class _Program:
    """The compiled training step of one revision of a computation, for one device."""

    key: tuple
    functions: targets.DeviceFunctions
    trained: list[Value]
    state_types: list
    hyperparameters: list[str]


class _DeviceCopy:
    """Every variable of a trained computation and the optimizer state, as tensors on one
    device. A variable's host data is refreshed from here when read after a step."""

    def __init__(self, functions: targets.DeviceFunctions, device_key, variables: list[Value]):
        self.functions = functions
        self.device_key = device_key
        self.variables = variables
        self.tensors = {v.id: functions.upload(v.data) for v in variables}
        self.optimizer_state = []
        self.state_key = None  # (optimizer, trained ids) the optimizer state belongs to
        self.hyperparameters = None  # (values, tensors) last uploaded
        self.host_stale = False
        for v in variables:
            v.device_copy = self

    def refresh_host(self):
        if self.host_stale:
            self.host_stale = False
            for v in self.variables:
                v._data = self.functions.download(self.tensors[v.id])

    def host_written(self, value: Value):
        self.tensors[value.id] = self.functions.upload(value._data)

    def detach(self):
        """Hands the newest data back to the host variables."""
        self.refresh_host()
        for v in self.variables:
            v.device_copy = None

    def hyperparameter_tensors(self, values: tuple, dtype) -> list:
        if self.hyperparameters is None or self.hyperparameters[0] != values:
            tensors = [self.functions.upload(np.array(v, dtype)) for v in values]
            self.hyperparameters = (values, tensors)
        return self.hyperparameters[1]


class TrainingState:
    """A computation's training set-up: its loss, its optimizer, and what runs its steps."""

    def __init__(self):
        self.loss: Value | None = None  # the first output when differentiation names none
        self.optimizer, self.hyperparameters = _hyperparameters(*_DEFAULT_OPTIMIZER)
        self.program: _Program | None = None
        self.device_copy: _DeviceCopy | None = None
        self.restored_state = None  # (state key, arrays) from a checkpoint, for the next step

    def step(self, comp: Computation, ctx: Context, device: Device) -> None:
        if self.loss is None:
            differentiate_computation(comp)
        inputs = bound_inputs(comp.args, ctx, "this computation")
        program = self._program(comp, device)
        copy = self._device_copy(comp, program)
        functions = program.functions
        dtype = program.state_types[0][1]
        hyper = tuple(self.hyperparameters[name] for name in program.hyperparameters)
        args = [functions.upload(a) for a in inputs] + [copy.tensors[v.id] for v in comp.variables]
        try:
            outputs, trained, state = functions.call(
                _lowering().TRAIN_STEP, *args, copy.optimizer_state,
                copy.hyperparameter_tensors(hyper, dtype))
        except Exception as err:  # noqa: BLE001 (TVM raises many kinds; the caller gets one)
            raise OdlaError(Status.FAILURE, f"the training step failed to run: {err}") from None
        for value, tensor in zip(program.trained, trained):
            copy.tensors[value.id] = tensor
        copy.optimizer_state = list(state)
        copy.host_stale = True
        store_results(ctx, comp.outputs, [functions.download(t) for t in outputs])

    def _program(self, comp: Computation, device: Device) -> _Program:
        key = (device.key, comp.revision, self.optimizer, self.loss.id)
        if self.program is not None and self.program.key == key:
            return self.program
        dynamic = [f"{a.id!r} {a.shape.dims}" for a in comp.args if a.shape.is_dynamic]
        if dynamic:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"arguments {', '.join(dynamic)} have dynamic dims; training expects static "
                "shapes (no -1 dims)",
            )
        forward = comp.build_module()
        trained = _trained_variables(comp, forward, self.loss)
        params = comp.args + comp.variables
        started = time.perf_counter()
        try:
            module = _lowering().training_module(forward, [params.index(v) for v in trained],
                                              comp.outputs.index(self.loss), self.optimizer)
        except relay_bridge.LoweringError as err:
            raise OdlaError(Status.UNSUPPORTED_OP, f"loss {self.loss.id!r}: {err}") from None
        try:
            compiled = targets.compile_module(module.module, device.target, device.index)
            functions = targets.DeviceFunctions(compiled)
        except Exception as err:  # noqa: BLE001
            raise OdlaError(Status.FAILURE, f"TVM failed to compile the training step for "
                                            f"{device.target.name}: {err}") from None
        log.info("compiled the training step (%s, %d variables) for %s in %.1f s", self.optimizer,
                 len(trained), device.target.name, time.perf_counter() - started)
        self.program = _Program(key, functions, trained, module.state_types,
                                module.hyperparameters)
        return self.program

    def _device_copy(self, comp: Computation, program: _Program) -> _DeviceCopy:
        copy = self.device_copy
        if copy is not None and (copy.device_key != program.key[0]
                                 or copy.variables != comp.variables):
            copy.detach()
            copy = None
        if copy is None:
            copy = _DeviceCopy(program.functions, program.key[0], list(comp.variables))
        copy.functions = program.functions
        state_key = (self.optimizer, tuple(v.id for v in program.trained))
        if copy.state_key != state_key:
            arrays = self._initial_state(state_key, program.state_types)
            copy.optimizer_state = [copy.functions.upload(a) for a in arrays]
            copy.state_key = state_key
        self.device_copy = copy
        return copy

    def _initial_state(self, state_key, state_types) -> list[np.ndarray]:
        restored, self.restored_state = self.restored_state, None
        if restored is not None:
            if restored[0] == state_key:
                return restored[1]
            log.warning("the checkpoint's optimizer state is for %s; starting %s afresh",
                        restored[0], state_key)
        return [np.zeros(shape, dtype) for shape, dtype in state_types]

    def optimizer_state(self) -> tuple[tuple | None, list[np.ndarray]]:
        """The optimizer state on the host, with the state key it belongs to."""
        if self.restored_state is not None:
            return self.restored_state
        copy = self.device_copy
        if copy is None or copy.state_key is None:
            return None, []
        return copy.state_key, [copy.functions.download(t) for t in copy.optimizer_state]


def _trained_variables(comp: Computation, forward, loss: Value) -> list[Value]:
    params = comp.args + comp.variables
    reaching = {params[i] for i in _lowering().params_reaching(forward, comp.outputs.index(loss))}
    trained = [v for v in comp.variables if v in reaching and v.element_type in _FLOAT_TYPES]
    if not trained:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"loss {loss.id!r} depends on none of the floating-point variables "
            f"({', '.join(repr(v.id) for v in comp.variables)}); expected at least one to train",
        )
    dtypes = {v.element_type for v in trained}
    if len(dtypes) > 1:
        raise OdlaError(
            Status.UNSUPPORTED_DATATYPE,
            "trained variables have element types "
            f"{', '.join(f'{v.id!r}: {v.element_type.name}' for v in trained)}; expected one "
            "element type for all",
        )
    return trained


def _state(comp: Computation) -> TrainingState:
    if comp.training is None:
        comp.training = TrainingState()
    return comp.training


def _hyperparameters(optimizer, given: dict) -> tuple[str, dict]:
    """The optimizer's name and full hyperparameters, checked; defaults fill what is not given."""
    if optimizer not in _lowering().OPTIMIZERS:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"optimizer is {optimizer!r}; expected one of {', '.join(_lowering().OPTIMIZERS)}",
        )
    defaults = _lowering().OPTIMIZERS[optimizer].hyperparameters
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{optimizer} has no hyperparameter {', '.join(unknown)}; expected some of "
            f"{', '.join(defaults)}",
        )
    values = {}
    for name, default in defaults.items():
        value = given.get(name, default)
        if value is None:
            raise OdlaError(Status.INVALID_PARAM, f"{optimizer} needs {name}; none given")
        test, expected = _VALID_HYPERPARAMETERS[name]
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise OdlaError(
                Status.INVALID_PARAM, f"{optimizer} {name} is {value!r}; expected a number"
            ) from None
        if not (math.isfinite(value) and test(value)):
            raise OdlaError(
                Status.INVALID_PARAM, f"{optimizer} {name} is {value}; expected {expected}"
            )
        values[name] = value
    return optimizer, values


# -- the ODLA-style functions --------------------------------------------------------------------

def differentiate_computation(computation: Computation, loss: Value | None = None) -> None:
    """Makes ``computation`` trainable (odla_DifferentiateComputation): ``loss`` (default: its
    first output) is minimized over the floating-point variables it depends on."""
    comp = _computation(computation)
    if not comp.variables:
        raise OdlaError(
            Status.INVALID_PARAM,
            "the computation has no variables; training updates variables, so create them "
            "with create_variable() (expected at least one, given none)",
        )
    if loss is None:
        if not comp.outputs:
            raise OdlaError(
                Status.INVALID_PARAM,
                "the computation has no outputs to take as the loss; call set_value_as_output() "
                "on a loss value first (expected one, given none)",
            )
        loss = comp.outputs[0]
    elif not isinstance(loss, Value) or loss not in comp.outputs:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"loss is {loss!r}; expected an output of this computation "
            f"(outputs: {', '.join(repr(v.id) for v in comp.outputs) or 'none'})",
        )
    try:
        _lowering().check_loss(loss.handle)
    except relay_bridge.LoweringError as err:
        raise OdlaError(Status.INVALID_PARAM, f"loss {loss.id!r} {err}") from None
    _state(comp).loss = loss


def set_optimizer(computation: Computation, optimizer: str, **hyperparameters) -> None:
    """Chooses how training steps update the variables.

    ``optimizer``: "sgd" (learning_rate, momentum=0, weight_decay=0; PyTorch's SGD),
    "adam" (learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0: an L2
    penalty) or "adamw" (the same, weight_decay=0.01 decoupled from the gradient). The
    default is sgd with learning_rate 0.01. A new learning rate or other hyperparameter takes
    effect at the next step without recompiling and keeps the optimizer state; another
    optimizer starts its state afresh.
    """
    state = _state(_computation(computation))
    state.optimizer, state.hyperparameters = _hyperparameters(optimizer, hyperparameters)


def get_optimizer(computation: Computation) -> tuple[str, dict]:
    """The optimizer's name and its hyperparameters."""
    state = _state(_computation(computation))
    return state.optimizer, dict(state.hyperparameters)


def training_step(computation: Computation, context: Context, device: Device | None) -> None:
    """One step: forward, backward and optimizer update (execute_computation in TRAINING mode)."""
    comp = _computation(computation)
    ctx = _context(context)
    device = checked_device(device)
    _state(comp).step(comp, ctx, device)


def compile_inference(computation: Computation, device: Device | None = None,
                      outputs: list[Value] | None = None) -> Executable:
    """The forward part of a (trained) computation as an inference executable: ``outputs``
    (default: every output but the loss) from only the arguments they need, with the
    variables' current data. It stores, loads and runs in a Session like any executable."""
    comp = _computation(computation)
    device = checked_device(device)
    if outputs is None:
        loss = comp.training.loss if comp.training is not None else None
        outputs = [v for v in comp.outputs if v is not loss]
    outputs = list(outputs)
    strays = [v for v in outputs if not isinstance(v, Value) or v not in comp.outputs]
    if not outputs or strays:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"outputs are {strays or 'none'}; expected some of this computation's outputs "
            f"({', '.join(repr(v.id) for v in comp.outputs) or 'none'}) besides the loss",
        )
    forward = comp.build_module(outputs=outputs)
    needed = {i for k in range(len(outputs)) for i in _lowering().params_reaching(forward, k)}
    return compile_outputs(comp, device, [v for i, v in enumerate(comp.args) if i in needed],
                           outputs)


def store_checkpoint(location, computation: Computation) -> None:
    """Writes the variables, the loss id, the optimizer and its state to the file ``location``."""
    comp = _computation(computation)
    state = _state(comp)
    state_key, arrays = state.optimizer_state()
    manifest = {
        "format": _CHECKPOINT_FORMAT,
        "loss": state.loss.id if state.loss is not None else None,
        "optimizer": state.optimizer,
        "hyperparameters": state.hyperparameters,
        "variables": [{"id": v.id, "type": v.type.to_dict()} for v in comp.variables],
        "optimizer_state_key": list(state_key[1]) if state_key else None,
        "optimizer_state": len(arrays),
    }
    buffer = io.BytesIO()
    np.savez(buffer, manifest=np.array(json.dumps(manifest)),
             **{f"v{i}": v.data for i, v in enumerate(comp.variables)},
             **{f"s{i}": a for i, a in enumerate(arrays)})
    write_atomically(location, buffer.getvalue())


def load_checkpoint(location, computation: Computation) -> None:
    """Restores a checkpoint written by store_checkpoint into a computation with the same
    variables; training resumes where it was stored."""
    comp = _computation(computation)
    try:
        path = os.fspath(location)
    except TypeError:
        raise OdlaError(
            Status.INVALID_PARAM, f"location is a {type(location).__name__}; expected a file path"
        ) from None
    if not os.path.isfile(path):
        raise OdlaError(Status.FILE_NOT_EXIST, f"checkpoint file {path!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        manifest = json.loads(str(arrays["manifest"]))
        stored = [(d["id"], ValueType.from_dict(d["type"])) for d in manifest["variables"]]
        if manifest["format"] != _CHECKPOINT_FORMAT:
            raise ValueError(f"format {manifest['format']}; this odla-tvm reads {_CHECKPOINT_FORMAT}")
        optimizer_state = [arrays[f"s{i}"] for i in range(manifest["optimizer_state"])]
        variable_data = [arrays[f"v{i}"] for i in range(len(stored))]
        optimizer = _hyperparameters(manifest["optimizer"], manifest["hyperparameters"])
        key, loss_id = manifest["optimizer_state_key"], manifest["loss"]
        if key is not None and not all(isinstance(k, str) for k in key):
            raise ValueError(f"optimizer_state_key {key!r}; expected value ids")
    except Exception as err:  # noqa: BLE001 (a damaged file fails in many ways)
        raise OdlaError(Status.INVALID_PARAM, f"{path!r} is not a valid odla-tvm checkpoint: "
                        f"{type(err).__name__}: {err}") from None
    expected = [(v.id, v.type) for v in comp.variables]
    if stored != expected:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"checkpoint {path!r} holds variables {_describe(stored)}; the computation has "
            f"{_describe(expected)}",
        )
    # everything is checked before anything changes
    variable_data = [checked_array(data, v.type, f"checkpoint data of variable {v.id!r}")
                     for v, data in zip(comp.variables, variable_data)]
    loss = None if loss_id is None else comp.find_value(loss_id)
    if loss is not None:
        differentiate_computation(comp, loss)
    state = _state(comp)
    state.optimizer, state.hyperparameters = optimizer
    for value, data in zip(comp.variables, variable_data):
        value.data = data
    state.restored_state = None if key is None else ((state.optimizer, tuple(key)), optimizer_state)
    if state.device_copy is not None:
        state.device_copy.state_key = None  # the restored (or a fresh) state takes over next step


def _describe(variables) -> str:
    return "[" + ", ".join(f"{i!r}: {t}" for i, t in variables) + "]"
