"""ODLA op functions, grouped like ODLA's op headers."""

from . import basic, control_flow, custom, math, nn, process, quantization

__all__ = ["basic", "control_flow", "custom", "math", "nn", "process", "quantization"]
