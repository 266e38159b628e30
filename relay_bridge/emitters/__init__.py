"""Relax lowerings of ODLA ops, grouped like ODLA's op headers."""

from . import math, nn, process  # noqa: F401
