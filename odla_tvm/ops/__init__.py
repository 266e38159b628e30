"""ODLA op functions, grouped like ODLA's op headers."""

from . import basic, math, nn, process

__all__ = ["basic", "math", "nn", "process"]
