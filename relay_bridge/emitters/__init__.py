"""Relax lowerings of ODLA ops, grouped like ODLA's op headers."""

from . import basic, control_flow, math, nn, process, quantization, recurrent  # noqa: F401
