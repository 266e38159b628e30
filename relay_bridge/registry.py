"""One registry from ODLA op name to the function that lowers it to Relax.

An emitter has the signature ``emitter(emit, *inputs, **attrs)``: ``inputs`` are Relax
expressions (the op's operands in ODLA order, ``None`` for an absent optional one),
``attrs`` are plain Python values already checked by the ODLA layer, and ``emit`` binds
one Relax call and returns the bound variable, so a multi-step lowering reads as a few
lines. It returns the op's result expression, or a list of them for multi-output ops.
"""

from __future__ import annotations

from typing import Callable

EMITTERS: dict[str, Callable] = {}


def register(op_name: str):
    """Register the decorated function as the lowering of ODLA op ``op_name``."""

    def decorate(emitter: Callable) -> Callable:
        if op_name in EMITTERS:
            raise ValueError(f"ODLA op {op_name!r} already has an emitter")
        EMITTERS[op_name] = emitter
        return emitter

    return decorate


def registered_ops() -> list[str]:
    return sorted(EMITTERS)
