"""Lowerings of ODLA's basic ops (odla_ops_basic.h) that are ops rather than graph inputs."""

from __future__ import annotations

from ..registry import register


@register("CloneValue")
def clone_value(emit, x):
    # Values are immutable, so the clone can share the source's Relax variable.
    return x
