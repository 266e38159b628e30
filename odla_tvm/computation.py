"""Computations and values: ``odla_computation`` and ``odla_value`` (odla_compute.h, odla_value.h)."""

from __future__ import annotations

import enum
import gc
import itertools
import logging
import os
import threading

import numpy as np

import relay_bridge
import targets

from . import interpreter
from .data_checks import check_fits_in_memory, checked_array

from .types import (
    Bf16Mode,
    ElementType,
    ItemType,
    OdlaError,
    Status,
    ValueShape,
    ValueType,
    as_shape,
    checked,
    element_type_of,
    odla_enum,
)

log = logging.getLogger(__name__)
# The 16-bit type of each reduced precision (relay_bridge.PRECISIONS) by its first part.
_SIXTEEN_BITS = {"bf16": "bfloat16", "fp16": "float16"}


class ValueKind(enum.Enum):
    ARGUMENT = "argument"
    CONSTANT = "constant"
    VARIABLE = "variable"
    RESULT = "result"  # produced by an op
    VALUE = "value"  # made by create_value: holds data, and ops on it run at once (interpreted)
    LOOP_VARIABLE = "loop variable"  # made by create_loop_variable: a loop's state in its body


class Value:
    """An ``odla_value``: a typed node of a computation, or a typed slot of a loaded executable."""

    def __init__(self, value_id: str, value_type: ValueType, kind: ValueKind,
                 computation: "Computation | None" = None, handle=None, data=None):
        self.id = value_id
        self.type = value_type
        self.kind = kind
        self.computation = computation
        self.handle = handle  # the lowering's expression; opaque to this layer
        self.data = data  # host data of constants, variables and interpret-mode values
        # Made by create_value, or computed at once from such values (interpret mode).
        self.interpreted = kind is ValueKind.VALUE
        self.shape_info: dict[ItemType, ValueShape] = {}  # MIN/MAX/OPT_SHAPE of an argument

    # A trained variable's newest data lives on the device running its training steps; the
    # device copy (odla_tvm.training) refreshes the host data when read and takes new data.
    device_copy = None

    @property
    def data(self):
        if self.device_copy is not None:
            self.device_copy.refresh_host()
        return self._data

    @data.setter
    def data(self, array):
        self._data = array
        if self.device_copy is not None:
            self.device_copy.host_written(self)

    @property
    def shape(self) -> ValueShape:
        return self.type.shape


    def require_data(self) -> np.ndarray:
        if self.data is None:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"value {self.id!r} holds no data (never set, or released); call set_value_data",
            )
        return self.data

    @property
    def element_type(self) -> ElementType:
        return self.type.element_type

    def __repr__(self):
        return f"Value({self.id!r}, {self.kind.value}, {self.type})"


_current = threading.local()


def current_computation_or_none() -> "Computation | None":
    comp = getattr(_current, "computation", None)
    return None if comp is None or comp.destroyed else comp


def current_computation() -> "Computation":
    """The computation ops of this thread are added to (set by create_computation)."""
    comp = getattr(_current, "computation", None)
    if comp is None or comp.destroyed:
        raise OdlaError(
            Status.INVALID_PARAM,
            "no current computation in this thread; call create_computation() first "
            "(or enter `with computation:`)",
        )
    return comp


class Computation:
    """An ``odla_computation``: the graph ops are added to, then compiled."""

    def __init__(self):
        self._graph = relay_bridge.GraphBuilder()
        self._values: dict[str, Value] = {}
        self.args: list[Value] = []
        self.variables: list[Value] = []
        self.outputs: list[Value] = []
        self.scopes: list = []  # open branches and loops (ops/control_flow.py), innermost last
        self.items: dict[ItemType, object] = {}
        self.revision = 0  # bumped on every change, so cached executables know they are stale
        self.executables: dict = {}  # (device key, revision) -> Executable, for execute_computation
        self.compile_lock = threading.Lock()
        self.training = None  # odla_tvm.training's state once differentiate_computation() ran
        self.destroyed = False
        self._auto_ids = itertools.count()
        self._previous = None

    def release_graph(self) -> None:
        self._graph = None
        for value in self._values.values():
            if value.kind is ValueKind.CONSTANT:
                value.data = value.handle = None

    # -- thread's current computation -----------------------------------------------------
    def __enter__(self):
        self._previous = getattr(_current, "computation", None)
        _current.computation = self
        return self

    def __exit__(self, *exc):
        _current.computation = self._previous
        return False

    def make_current(self):
        _current.computation = self

    # -- values ---------------------------------------------------------------------------
    def _check_alive(self):
        if self.destroyed:
            raise OdlaError(Status.INVALID_PARAM, "the computation was destroyed")

    def _new_id(self, value_id, hint: str) -> str:
        if value_id is None:
            while True:
                value_id = f"{hint}_{next(self._auto_ids)}"
                if value_id not in self._values:
                    return value_id
        if not isinstance(value_id, str) or not value_id:
            raise OdlaError(
                Status.INVALID_PARAM, f"value id {value_id!r} is not a non-empty string"
            )
        if value_id in self._values:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"value id {value_id!r} already names a value of this computation; expected a new id",
            )
        return value_id

    def _add(self, value: Value) -> Value:
        check_fits_in_memory(value.id, value.type)
        self._values[value.id] = value
        self.revision += 1
        return value

    def find_value(self, value_id: str) -> Value:
        self._check_alive()
        try:
            return self._values[value_id]
        except (KeyError, TypeError):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"no value with id {value_id!r} in this computation "
                f"({len(self._values)} values; e.g. {', '.join(list(self._values)[:5]) or 'none'})",
            ) from None

    def add_argument(self, value_type: ValueType, value_id) -> Value:
        self._check_alive()
        if self.items.get(ItemType.DYNAMIC_BATCH) and value_type.shape.size > 0:
            # With DYNAMIC_BATCH, the leading dim of every argument is the batch.
            value_type = ValueType(value_type.element_type, (-1,) + value_type.shape.dims[1:])
        value_id = self._new_id(value_id, "arg")
        handle = self._graph.input(value_id, value_type.shape.dims, str(value_type.dtype))
        value = self._add(Value(value_id, value_type, ValueKind.ARGUMENT, self, handle))
        self.args.append(value)
        return value

    def add_variable(self, value_type: ValueType, value_id) -> Value:
        self._check_alive()
        if value_type.shape.is_dynamic:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"variable shape {value_type.shape.dims} has a dynamic dim; expected a static shape",
            )
        value_id = self._new_id(value_id, "var")
        check_fits_in_memory(value_id, value_type)  # before its data is allocated
        handle = self._graph.input(value_id, value_type.shape.dims, str(value_type.dtype))
        data = np.zeros(value_type.shape.dims, value_type.dtype)
        value = self._add(Value(value_id, value_type, ValueKind.VARIABLE, self, handle, data))
        self.variables.append(value)
        return value

    def add_value(self, value_type: ValueType, value_id) -> Value:
        """A value for interpret mode: its data is set later, and ops on it run at once."""
        self._check_alive()
        if value_type.shape.is_dynamic:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"value shape {value_type.shape.dims} has a dynamic dim; expected a static shape",
            )
        value_id = self._new_id(value_id, "value")
        handle = self._graph.input(value_id, value_type.shape.dims, str(value_type.dtype))
        return self._add(Value(value_id, value_type, ValueKind.VALUE, self, handle))

    def add_loop_variable(self, init_value: Value, value_id) -> Value:
        """A loop's state inside its body, of ``init_value``'s type: a value the loop binds on
        each iteration, to ``init_value`` on the first."""
        self._check_alive()
        value_id = self._new_id(value_id, "loop_var")
        handle = self._graph.variable_like(value_id, init_value.handle)
        return self._add(Value(value_id, init_value.type, ValueKind.LOOP_VARIABLE, self, handle))

    def add_constant(self, value_type: ValueType, data, value_id) -> Value:
        self._check_alive()
        array = checked_array(data, value_type, "constant data")
        value_id = self._new_id(value_id, "const")
        handle = self._graph.constant(array)
        # The host data is a read-only view of the lowering's copy, so weights are held once.
        view = relay_bridge.constant_view(handle)
        return self._add(Value(value_id, value_type, ValueKind.CONSTANT, self, handle,
                               array if view is None else view))

    def apply(self, op_name: str, operands: dict, attrs: dict, value_id, output_dims=None,
              variadic: tuple = ()) -> list[Value]:
        """Adds ODLA op ``op_name``; ``operands`` maps operand names to Values (or None).
        ``value_id``: one id, or for a multi-output op a sequence of one id per output."""
        self._check_alive()
        inputs = [self._operand(op_name, name, v) for name, v in operands.items()]
        inputs += [self._operand(op_name, f"inputs[{i}]", v) for i, v in enumerate(variadic)]
        given_ids = None
        if isinstance(value_id, (list, tuple)):
            given_ids = [self._new_id(i, op_name.lower()) for i in value_id]
            value_id = given_ids[0] if given_ids else self._new_id(None, op_name.lower())
        else:
            value_id = self._new_id(value_id, op_name.lower())
        try:
            handles = self._graph.apply(op_name, inputs, attrs, value_id)
        except relay_bridge.LoweringError as err:
            status = Status.UNSUPPORTED_OP if "has no lowering" in str(err) else Status.INVALID_PARAM
            raise OdlaError(status, str(err)) from None
        if given_ids and len(given_ids) != len(handles):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"{op_name}: {len(given_ids)} value ids given for its {len(handles)} outputs",
            )
        values = []
        for i, handle in enumerate(handles):
            if given_ids:
                vid = given_ids[i]
            else:
                vid = value_id if len(handles) == 1 else f"{value_id}:{i}"
            vtype = ValueType(element_type_of(relay_bridge.dtype_of(handle)),
                              relay_bridge.shape_of(handle))
            values.append(Value(vid, vtype, ValueKind.RESULT, self, handle))
        if output_dims is not None:
            _check_output_dims(op_name, value_id, as_shape(output_dims), values[0].shape)
        operand_values = [v for v in list(operands.values()) + list(variadic) if v is not None]
        interpreted = [v for v in operand_values if v.interpreted]
        for v in interpreted:
            v.require_data()
        # With an argument among the operands the op is only recorded, for compiling.
        if interpreted and all(v.data is not None for v in operand_values):
            interpreter.execute(op_name, list(operands.values()) + list(variadic), attrs, values)
            for v in values:
                v.interpreted = True
        for v in values:
            self._add(v)
        return values

    def _operand(self, op_name, name, value):
        if value is None:
            return None
        if not isinstance(value, Value):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"operand {name} of {op_name} is a {type(value).__name__}; expected an odla Value",
            )
        if value.computation is not self:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"operand {name} of {op_name} ({value.id!r}) belongs to another computation",
            )
        return value.handle

    # -- outputs --------------------------------------------------------------------------
    def set_output(self, value: Value):
        self._check_alive()
        if not isinstance(value, Value) or value.computation is not self:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"{value!r} is not a value of this computation; expected one to mark as output",
            )
        if not self.is_visible(value):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"{value!r} belongs to a branch or loop body that has ended; expected a value "
                "visible outside it (the results of end_if or end_loop are)",
            )
        if self.scopes:  # inside a branch or loop body the value is one of the body's results
            self.scopes[-1].add_output(value)
            return
        if value not in self.outputs:
            self.outputs.append(value)
            self.revision += 1

    # -- branch and loop bodies (ops/control_flow.py) --------------------------------------
    def is_visible(self, value: Value) -> bool:
        """Whether ``value`` may be used here: not a value of a body that has ended."""
        return self._graph.is_visible(value.handle)

    def open_body(self) -> None:
        """Starts a body: ops added from now on belong to it until ``close_body``."""
        self._graph.open_scope()

    def close_body(self, results: list[Value], params: list[Value] = ()):
        """Ends the innermost body; returns its lowering, yielding ``results``. The body's
        values and ``params`` (its loop variables) are not operands of later ops."""
        return self._graph.close_scope([v.handle for v in results], [v.handle for v in params])

    # compile(device=None) and execute(context, mode, device=None), the ODLA functions as
    # methods, are set by odla_tvm.execution: compiling builds on this module.

    def shape_bounds(self) -> dict[str, tuple[tuple, tuple]]:
        """Per argument with declared limits: the smallest and largest run-time shapes."""
        bounds = {}
        batch = (self.items.get(ItemType.MIN_BATCH_SIZE, -1), self.items.get(ItemType.MAX_BATCH_SIZE, -1))
        for arg in self.args:
            rank = arg.shape.size
            low = list(arg.shape_info.get(ItemType.MIN_SHAPE, (-1,) * rank))
            high = list(arg.shape_info.get(ItemType.MAX_SHAPE, (-1,) * rank))
            if self.items.get(ItemType.DYNAMIC_BATCH) and rank:
                low[0], high[0] = batch
            if any(d != -1 for d in low + high):
                bounds[arg.id] = (tuple(low), tuple(high))
        return bounds

    def value_ids_of(self, kernel_bindings: dict[str, list[str]]) -> dict[str, list[str]]:
        """Kernel name -> the ODLA value ids of the graph bindings it computes."""
        origins = self._graph.origins
        return {kernel: [origins.get(b, b) for b in bindings]
                for kernel, bindings in kernel_bindings.items()}

    def plugin_items(self) -> dict:
        """The vendor plugins' items set on this computation ("<plugin>.<item>" -> value)."""
        return {k: v for k, v in self.items.items() if isinstance(k, str)}

    def build_module(self, args: list[Value] | None = None, outputs: list[Value] | None = None,
                     spec: targets.TargetSpec | None = None):
        """The computation lowered to an IRModule for the target ``spec`` (default: this
        machine's CPU): ``args`` (default: every argument) then the variables in, ``outputs``
        (default: every output) out."""
        self._check_alive()
        if self.scopes:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"{self.scopes[-1]} has not ended; expected end_if/end_loop before compiling",
            )
        if not self.outputs:
            raise OdlaError(
                Status.INVALID_PARAM,
                "the computation has no outputs; call set_value_as_output() on at least one value",
            )
        args = self.args if args is None else args
        outputs = self.outputs if outputs is None else outputs
        params = [v.handle for v in args + self.variables]
        # Interpret-mode values enter a compiled computation as the data they hold now.
        bound = {v.handle: v.require_data() for v in self._values.values() if v.kind is ValueKind.VALUE
                 and v.data is not None}
        mod = self._graph.build(params, [v.handle for v in outputs], bound)
        precision = self.precision()
        spec = spec or targets.host_cpu()
        # A vendor plugin computing it in its own kernels reads the float32 graph (weights
        # rounded) and the precision from the module. On a plugin's target TVM's share of a
        # bf16 graph stays float32 whatever the plugin does: TVM's bf16 code emulates it.
        native = precision is None or (
            not targets.plugin_computes(spec, precision)
            and not (spec.plugins and precision.startswith("bf16"))
            and _computes_itself(spec, precision))
        mod = relay_bridge.reduce_precision(relay_bridge.compute_in_integers(mod), precision,
                                            native)
        return mod if precision is None else mod.with_attr(targets.PRECISION_ATTR, precision)

    def precision(self) -> str | None:
        """The reduced precision FP16_MODE or BF16_MODE asks for, if any."""
        fp16 = bool(self.items.get(ItemType.FP16_MODE))
        bf16 = odla_enum(Bf16Mode, self.items.get(ItemType.BF16_MODE, Bf16Mode.DISABLE), "BF16_MODE")
        if fp16 and bf16 is not Bf16Mode.DISABLE:
            raise OdlaError(
                Status.INVALID_PARAM, f"both FP16_MODE and BF16_MODE ({bf16.name}) are set; expected one"
            )
        if fp16:
            return "fp16"
        if bf16 is Bf16Mode.DISABLE:
            return None
        return "bf16-performance" if bf16 is Bf16Mode.PERFORMACE_MODE else "bf16-accuracy"


def _computes_itself(spec: targets.TargetSpec, precision: str) -> bool:
    """Whether ``spec`` computes in ``precision`` (of relay_bridge.PRECISIONS) itself; where
    not, says so in one log line (relay_bridge.reduce_precision then rounds weights only)."""
    kind = precision.partition("-")[0]
    lacking = targets.lacking_instructions(spec, kind)
    if lacking:
        log.warning("%s_MODE: the CPU of target %s has no %s; convolutions and matrix products "
                    "compute in float32 instead, only their weights rounded to %s",
                    kind.upper(), spec.name, " or ".join(lacking), _SIXTEEN_BITS[kind])
    return not lacking


def _check_output_dims(op_name, value_id, given: ValueShape, inferred: ValueShape):
    agree = len(given) == len(inferred) and all(
        g == i or -1 in (g, i) for g, i in zip(given.dims, inferred.dims)
    )
    if not agree:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{op_name} {value_id!r}: output_dims {given.dims} given, but its operands and "
            f"attributes produce {inferred.dims}",
        )


def cache_dir_of(computation: Computation, cache_dir=None):
    """The cache directory to use: ``cache_dir``, else the computation's CACHE_DIR item, else
    None (the default: $ODLA_TVM_CACHE_DIR or the user's cache directory)."""
    chosen = cache_dir if cache_dir is not None else computation.items.get(ItemType.CACHE_DIR)
    if chosen is not None and not isinstance(chosen, (str, os.PathLike)):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"cache directory is a {type(chosen).__name__} ({chosen!r}); expected a path",
        )
    return chosen


# -- the ODLA functions (odla_compute.h, odla_value.h, odla_ops_basic.h) ----------------------

def _computation(computation) -> Computation:
    checked(computation, Computation, "computation", "a Computation from create_computation()")
    computation._check_alive()
    return computation


def _value(value) -> Value:
    return checked(value, Value, "value", "an odla Value")


def create_computation() -> Computation:
    """A new computation, made the current one of this thread (as odla_CreateComputation)."""
    comp = Computation()
    comp.make_current()
    return comp


def destroy_computation(computation: Computation) -> None:
    comp = _computation(computation)
    comp.destroyed = True
    comp.executables.clear()
    # Its executables keep their argument and output Values, which point here: let the
    # lowering and the constants' data go (a model's weights) while they live on, and hand
    # the heap they leave back to the system (glibc keeps it otherwise).
    comp.release_graph()
    # Cycles hold the graph too: TVMScript's parser keeps the frames it inspected (a kernel
    # parsed while compiling, as targets.cpu.amx's are: the compile's frames, the graph in them),
    # and only a collection frees them (a model's weights stayed until the process's next
    # one).
    gc.collect()
    targets.release_freed_memory()
    if getattr(_current, "computation", None) is comp:
        _current.computation = None


_BATCH_SIZE_ITEMS = (ItemType.MIN_BATCH_SIZE, ItemType.MAX_BATCH_SIZE, ItemType.OPT_BATCH_SIZE)


def set_computation_item(computation: Computation, item_type: ItemType | str, value) -> None:
    """Sets an ODLA item, or a vendor plugin's own item named "<plugin>.<item>" (what
    `odla-tvm info` lists under each plugin), which goes to that plugin when compiling."""
    comp = _computation(computation)
    if isinstance(item_type, str):
        comp.items[item_type] = _plugin_item(item_type, value)
        comp.revision += 1
        return
    item_type = odla_enum(ItemType, item_type, "item type")
    if item_type in _BATCH_SIZE_ITEMS and (not isinstance(value, (int, np.integer)) or value < 1):
        raise OdlaError(
            Status.INVALID_PARAM, f"{item_type.name} is {value!r}; expected an integer >= 1"
        )
    if item_type is ItemType.DYNAMIC_BATCH and value:
        static = [a.id for a in comp.args if a.shape.size and a.shape.dims[0] != -1]
        if static:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"DYNAMIC_BATCH set after arguments {static} were made with a static batch; "
                "set it before creating arguments (or declare their batch dim as -1)",
            )
    comp.items[item_type] = value
    low = comp.items.get(ItemType.MIN_BATCH_SIZE, 1)
    high = comp.items.get(ItemType.MAX_BATCH_SIZE, low)
    if low > high:
        del comp.items[item_type]
        raise OdlaError(
            Status.INVALID_PARAM, f"MIN_BATCH_SIZE {low} is greater than MAX_BATCH_SIZE {high}"
        )
    comp.revision += 1


def _plugin_item(name: str, value):
    try:
        return targets.plugins.check_item(name, value)
    except KeyError as err:
        raise OdlaError(Status.INVALID_PARAM, f"item type {name!r}: {err.args[0]}; expected an "
                        "ItemType or \"<plugin>.<item>\" of an installed plugin") from None
    except (ValueError, TypeError) as err:
        raise OdlaError(Status.INVALID_PARAM, f"item {name!r} is {value!r}: {err}") from None


_SHAPE_ITEMS = (ItemType.MIN_SHAPE, ItemType.MAX_SHAPE, ItemType.OPT_SHAPE)


def set_value_shape_info(value: Value, item_type: ItemType, value_shape) -> None:
    """Declares the smallest, largest or typical run-time shape of a dynamic argument
    (odla_SetValueShapeInfo); runs outside MIN_SHAPE..MAX_SHAPE are refused."""
    value = _value(value)
    item_type = odla_enum(ItemType, item_type, "item type")
    if item_type not in _SHAPE_ITEMS:
        raise OdlaError(
            Status.INVALID_PARAM, f"item type is {item_type.name}; expected MIN_SHAPE, MAX_SHAPE or OPT_SHAPE"
        )
    if value.kind is not ValueKind.ARGUMENT:
        raise OdlaError(
            Status.INVALID_PARAM, f"{value.id!r} is a {value.kind.value}; shape info is for arguments"
        )
    shape = as_shape(value_shape)
    if shape.is_dynamic or not value.shape.matches(shape.dims):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{item_type.name} {shape.dims} for {value.id!r} does not fit its shape "
            f"{value.shape.dims}; expected concrete sizes where it has -1",
        )
    info = {**value.shape_info, item_type: shape}
    low, high = info.get(ItemType.MIN_SHAPE), info.get(ItemType.MAX_SHAPE)
    if low and high and any(lo > hi for lo, hi in zip(low.dims, high.dims)):
        raise OdlaError(
            Status.INVALID_PARAM, f"MIN_SHAPE {low.dims} exceeds MAX_SHAPE {high.dims} for {value.id!r}"
        )
    value.shape_info = info
    if value.computation is not None:
        value.computation.revision += 1


def create_argument(value_type: ValueType, value_id: str | None = None) -> Value:
    return current_computation().add_argument(_value_type(value_type), value_id)


def create_constant(value_type: ValueType, data, value_id: str | None = None) -> Value:
    return current_computation().add_constant(_value_type(value_type), data, value_id)


def create_variable(value_type: ValueType, value_id: str | None = None) -> Value:
    return current_computation().add_variable(_value_type(value_type), value_id)


def _value_type(value_type) -> ValueType:
    if not isinstance(value_type, ValueType):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"value_type is a {type(value_type).__name__}; expected ValueType(element_type, shape)",
        )
    if value_type.element_type == ElementType.STRING:
        raise OdlaError(Status.UNSUPPORTED_DATATYPE, "STRING values are not supported as tensors")
    return value_type


def set_value_as_output(value: Value) -> None:
    value = _value(value)
    if value.computation is None:
        raise OdlaError(Status.INVALID_PARAM, f"{value!r} belongs to no computation")
    value.computation.set_output(value)


def set_values_as_output(values) -> None:
    for value in values:
        set_value_as_output(value)


def set_value_as_output_by_id(value_id: str) -> None:
    set_value_as_output(find_value_by_id(value_id))


def create_value(value_type: ValueType, value_id: str | None = None) -> Value:
    """A value for interpret mode (odla_CreateValue): set its data, and each op on it runs at once."""
    return current_computation().add_value(_value_type(value_type), value_id)


def set_value_data(value: Value, data) -> None:
    """Sets the host data of a variable (read by compiled executables at launch) or of a
    create_value value (odla_SetValueData). The data is copied."""
    value = _value(value)
    if value.kind not in (ValueKind.VARIABLE, ValueKind.VALUE):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{value!r} is a {value.kind.value}; set_value_data takes a variable or a create_value value",
        )
    array = checked_array(data, value.type, f"data for {value.kind.value} {value.id!r}")
    value.data = np.array(array, copy=True)


def set_value_data_by_id(value_id: str, data) -> None:
    set_value_data(find_value_by_id(value_id), data)


def release_value(value: Value) -> None:
    """Frees the data an interpret-mode value holds (odla_ReleaseValue)."""
    value = _value(value)
    if not value.interpreted:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{value!r} holds no interpret-mode data; release_value takes create_value values "
            "and results computed from them",
        )
    value.data = None


def get_value_type(value: Value) -> ValueType:
    return _value(value).type


def get_value_id(value: Value) -> str:
    return _value(value).id


def find_value_by_id(value_id: str, computation: Computation | None = None) -> Value:
    comp = current_computation() if computation is None else _computation(computation)
    return comp.find_value(value_id)


def _index(values: list[Value], idx, what: str) -> Value:
    if not isinstance(idx, (int, np.integer)) or not 0 <= idx < len(values):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{what} index {idx!r} out of range; expected 0..{len(values) - 1} ({len(values)} {what}s)",
        )
    return values[idx]


def get_num_of_args_from_computation(computation: Computation) -> int:
    return len(_computation(computation).args)


def get_arg_from_computation_by_idx(computation: Computation, arg_idx: int) -> Value:
    return _index(_computation(computation).args, arg_idx, "argument")


def get_num_of_outputs_from_computation(computation: Computation) -> int:
    return len(_computation(computation).outputs)


def get_output_from_computation_by_idx(computation: Computation, output_idx: int) -> Value:
    return _index(_computation(computation).outputs, output_idx, "output")
