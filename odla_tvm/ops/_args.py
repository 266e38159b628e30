"""Checks of ODLA op arguments, shared by the op functions. Each failure names the op,
the argument, what was expected and what was given."""

from __future__ import annotations

import numpy as np

from ..computation import Value, ValueKind, current_computation
from ..types import MemoryLayout, OdlaError, Status


def apply(op_name, operands, attrs, value_id, output_dims=None, variadic=()) -> Value:
    """Adds a single-output op to the current computation and returns its value."""
    return current_computation().apply(op_name, operands, attrs, value_id, output_dims, variadic)[0]


def invalid(op_name: str, message: str) -> OdlaError:
    return OdlaError(Status.INVALID_PARAM, f"{op_name}: {message}")


def ints(op_name: str, name: str, values, minimum=None) -> tuple[int, ...]:
    """A C array argument as a tuple of ints, each at least ``minimum`` when given."""
    try:
        result = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise invalid(op_name, f"{name} is {values!r}; expected a sequence of integers") from None
    if minimum is not None and any(v < minimum for v in result):
        raise invalid(op_name, f"{name} is {result}; expected every entry >= {minimum}")
    return result


def channels_last(op_name: str, layout) -> bool:
    """ODLA data layout as TVM wants it: channels-last or not."""
    if layout not in (MemoryLayout.CHANNELS_FIRST, MemoryLayout.CHANNELS_LAST):
        raise invalid(
            op_name, f"input_layout is {layout!r}; expected CHANNELS_FIRST (0) or CHANNELS_LAST (1)"
        )
    return MemoryLayout(layout) is MemoryLayout.CHANNELS_LAST


def kernel_layout(op_name: str, layout) -> str:
    if layout not in (MemoryLayout.SIO, MemoryLayout.SOI, MemoryLayout.OIS, MemoryLayout.IOS):
        raise invalid(op_name, f"kernel_layout is {layout!r}; expected SIO, SOI, OIS or IOS (2..5)")
    return MemoryLayout(layout).name


def number(op_name: str, name: str, value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise invalid(op_name, f"{name} is {value!r}; expected a number") from None


def apply_values(op_name, operands, attrs, value_ids=None, output_dims=None,
                 variadic=()) -> list[Value]:
    """Adds a multi-output op; ``value_ids`` is None or a sequence of one id per output."""
    if isinstance(value_ids, str):
        raise invalid(op_name, f"value_ids is {value_ids!r}; expected a sequence of ids or None")
    ids = None if value_ids is None else tuple(value_ids)
    return current_computation().apply(op_name, operands, attrs, ids, output_dims, variadic)


def constant_ints(op_name: str, name: str, value) -> tuple[int, ...]:
    """An operand ODLA passes as a value but whose data decides the result's shape (an axis):
    a constant Value, or plain ints. Its data is read when the op is created."""
    if isinstance(value, Value):
        if value.kind is not ValueKind.CONSTANT:
            raise invalid(
                op_name, f"{name} is the {value.kind.value} {value.id!r}; expected a constant "
                "(its data decides the result's shape)",
            )
        value = value.data
    return ints(op_name, name, np.ravel(value))
