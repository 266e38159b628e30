"""ODLA basic ops (odla_ops_basic.h): arguments, constants and variables."""

from ..computation import create_argument, create_constant, create_value, create_variable

__all__ = ["create_argument", "create_constant", "create_value", "create_variable"]
