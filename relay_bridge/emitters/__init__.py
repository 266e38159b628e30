"""Relax lowerings of ODLA ops, grouped like ODLA's op headers."""

from . import basic, control_flow, custom, math, nn, process, quantization, recurrent  # noqa: F401
