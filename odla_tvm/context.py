"""Contexts: ``odla_context`` (odla_compute.h): the data of one run, bound by value or by id."""

from __future__ import annotations

import threading

import numpy as np

from .computation import (
    Value,
    ValueKind,
    _value,
    current_computation_or_none,
    find_value_by_id,
)
from .data_checks import checked_array, host_data
from .types import ItemType, OdlaError, Status, ValueShape, as_shape, checked, odla_enum


class Context:
    """Inputs bound to arguments, buffers bound to outputs, and the results of the last run."""

    def __init__(self):
        self.inputs: dict[str, np.ndarray] = {}
        self.output_buffers: dict[str, np.ndarray] = {}
        self.results: dict[str, np.ndarray] = {}
        self.runtime_shapes: dict[str, ValueShape] = {}
        self.items: dict[ItemType, object] = {}
        self.destroyed = False
        self.lock = threading.Lock()
        self.in_flight = False  # an asynchronous run is writing into this context

    def _check_alive(self):
        if self.destroyed:
            raise OdlaError(Status.INVALID_PARAM, "the context was destroyed; create a new one")

    def bind_input(self, value: Value, data) -> None:
        self._check_alive()
        if value.kind is not ValueKind.ARGUMENT:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"{value.id!r} is a {value.kind.value}; bind_to_argument takes an argument",
            )
        self.inputs[value.id] = argument_data(value, data, self.runtime_shapes.get(value.id))

    def bind_output(self, value: Value, buffer) -> None:
        self.bind_output_by_id(value.id, buffer)
        if buffer.dtype != value.type.dtype:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"buffer for output {value.id!r} has dtype {buffer.dtype}; expected {value.type.dtype}",
            )
        if not value.shape.is_dynamic and buffer.size != value.shape.element_count():
            raise OdlaError(
                Status.INVALID_PARAM,
                f"buffer for output {value.id!r} holds {buffer.size} elements; expected "
                f"{value.shape.element_count()} (shape {value.shape.dims})",
            )

    def bind_output_by_id(self, value_id: str, buffer) -> None:
        """Binds ``buffer`` to the output ``value_id`` once it is a writable C-contiguous array;
        its dtype and size are checked against the output (here by bind_output, or at launch
        for an executable loaded without its computation)."""
        self._check_alive()
        if not isinstance(buffer, np.ndarray):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"buffer for output {value_id!r} is a {type(buffer).__name__}; expected a "
                "writable NumPy array, filled in place",
            )
        if not buffer.flags.writeable or not buffer.flags.c_contiguous:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"buffer for output {value_id!r} is not a writable C-contiguous array",
            )
        self.output_buffers[value_id] = buffer

    def get_data(self, value: Value, data: np.ndarray | None = None) -> np.ndarray:
        return get_value_data(value, data, self)

    def store_result(self, value: Value, result: np.ndarray) -> None:
        """Writes ``result`` into the bound buffer (validated by ``check_output_buffer``)."""
        buffer = self.output_buffers.get(value.id)
        if buffer is None:
            self.results[value.id] = result
            return
        np.copyto(buffer.reshape(result.shape), result)
        self.results[value.id] = buffer.reshape(result.shape)

    def check_output_buffer(self, value: Value, result: np.ndarray) -> None:
        buffer = self.output_buffers.get(value.id)
        if buffer is not None and buffer.dtype != result.dtype:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"buffer for output {value.id!r} has dtype {buffer.dtype}; the run produced "
                f"{result.dtype}; nothing was written",
            )
        if buffer is not None and buffer.size != result.size:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"buffer for output {value.id!r} holds {buffer.size} elements; the run produced "
                f"{result.size} (shape {result.shape}); nothing was written",
            )


def argument_data(value: Value, data, shape: ValueShape | None = None) -> np.ndarray:
    """``data`` checked as the data of argument ``value`` (of ``shape`` when the context fixed
    one): an array of its dtype and shape; a DLPack tensor in host memory is viewed, not
    copied, and one on another device refused."""
    return checked_array(data, value.type, f"data bound to argument {value.id!r}", shape)


def _context(context) -> Context:
    checked(context, Context, "context", "a Context from create_context()")
    context._check_alive()
    return context


def create_context() -> Context:
    return Context()


def destroy_context(context: Context) -> None:
    ctx = _context(context)
    ctx.destroyed = True
    ctx.inputs.clear()
    ctx.results.clear()
    ctx.output_buffers.clear()


def set_context_item(context: Context, item_type: ItemType, value) -> None:
    _context(context).items[odla_enum(ItemType, item_type, "item type")] = value


def bind_to_argument(value: Value, data, context: Context) -> None:
    _context(context).bind_input(_value(value), data)


def bind_to_argument_by_id(value_id: str, data, context: Context) -> None:
    """Binds by id in the current computation; with none current (a loaded executable),
    the id and data are checked against the executable at launch."""
    ctx = _context(context)
    if current_computation_or_none() is None:
        data = host_data(data, f"data bound to {str(value_id)!r}")
        ctx.inputs[str(value_id)] = np.asarray(data)
    else:
        ctx.bind_input(find_value_by_id(value_id), data)


def bind_to_output(value: Value, data: np.ndarray, context: Context) -> None:
    """Binds a caller's buffer, filled in place by each run, to an output value."""
    value = _value(value)
    if value.computation is not None and value not in value.computation.outputs:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{value.id!r} is not an output; call set_value_as_output() on it first",
        )
    _context(context).bind_output(value, data)


def bind_to_output_by_id(value_id: str, data: np.ndarray, context: Context) -> None:
    """Binds by id in the current computation; with none current (a loaded executable),
    the buffer's dtype and size are checked against the executable's output at launch."""
    if current_computation_or_none() is None:
        _context(context).bind_output_by_id(str(value_id), data)
    else:
        bind_to_output(find_value_by_id(value_id), data, context)


def get_value_data(value: Value | str, data: np.ndarray | None = None,
                   context: Context | None = None):
    """The data of an output after a run in ``context``, or, with no context, the data a
    constant, variable or interpret-mode value holds; copied into ``data`` when a buffer is
    given, else returned. With a context, ``value`` may be a value id: an executable loaded
    without its computation has no Value objects to pass."""
    if isinstance(value, str) and context is not None:
        value_id = value
    else:
        value = _value(value)
        value_id = value.id
        if context is None and (value.kind in (ValueKind.CONSTANT, ValueKind.VARIABLE)
                                or value.interpreted):
            return _copied(value_id, value.require_data(), data)
    ctx = _context(context)
    result = ctx.results.get(value_id, ctx.inputs.get(value_id))
    if result is None:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"the context holds no data for {value_id!r}; bind it or run a computation "
            "that outputs it first",
        )
    return _copied(value_id, result, data)


def _copied(value_id: str, result: np.ndarray, data: np.ndarray | None) -> np.ndarray:
    """A copy of ``result``: new, or written into the caller's buffer ``data``."""
    if data is None:
        return result.copy()
    if not isinstance(data, np.ndarray) or data.size != result.size or data.dtype != result.dtype:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"buffer for {value_id!r} must be a {result.dtype} array of {result.size} elements; "
            f"got {getattr(data, 'dtype', type(data).__name__)} with "
            f"{getattr(data, 'size', '?')} elements",
        )
    np.copyto(data.reshape(result.shape), result)
    return data


def set_runtime_shape(context: Context, value: Value, value_shape) -> None:
    """Fixes the shape of a dynamic argument for the coming runs."""
    ctx, value = _context(context), _value(value)
    shape = as_shape(value_shape)
    if shape.is_dynamic or not value.shape.matches(shape.dims):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"runtime shape {shape.dims} for {value.id!r} does not fit its declared shape "
            f"{value.shape.dims}; expected concrete sizes where it has -1",
        )
    ctx.runtime_shapes[value.id] = shape


def get_runtime_shape(context: Context, value: Value) -> ValueShape:
    """The concrete shape of a value in this context: set, bound or produced by the last run."""
    ctx, value = _context(context), _value(value)
    for source in (ctx.results, ctx.inputs):
        if value.id in source:
            return ValueShape(source[value.id].shape)
    if value.id in ctx.runtime_shapes:
        return ctx.runtime_shapes[value.id]
    if not value.shape.is_dynamic:
        return value.shape
    raise OdlaError(
        Status.INVALID_PARAM,
        f"{value.id!r} has dynamic shape {value.shape.dims} and no runtime shape in this "
        "context yet; bind data, call set_runtime_shape, or run first",
    )
