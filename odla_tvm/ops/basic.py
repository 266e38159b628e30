"""ODLA basic ops (odla_ops_basic.h): arguments, constants, variables and value copies."""

from ..computation import (
    Value,
    create_argument,
    create_constant,
    create_value,
    create_variable,
    find_value_by_id,
)
from ._args import apply

__all__ = ["clone_value", "clone_value_by_id", "create_argument", "create_constant",
           "create_value", "create_variable"]


def clone_value(src_value: Value, value_id: str | None = None) -> Value:
    """A new value, under its own id, holding the same data as ``src_value``."""
    return apply("CloneValue", {"src_value": src_value}, {}, value_id)


def clone_value_by_id(src_value_id: str, value_id: str | None = None) -> Value:
    """``clone_value`` of the current computation's value named ``src_value_id``."""
    return clone_value(find_value_by_id(src_value_id), value_id)
