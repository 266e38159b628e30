"""The Injective rule: kernels of spatial loops only (elementwise, broadcast, transpose,
gather, padding): producers inlined, each loop nest left fused, run in parallel and
vectorized."""

from __future__ import annotations

from .primitives import _inline_spatial, _root_blocks, _schedule_spatial
from .rule import _reductions, _Rule


class Injective(_Rule):
    """Spatial loops only: inline, then fuse, parallelize and vectorize each loop nest left."""

    def schedule(self, sch, func, target):
        if _reductions(sch) != []:
            return False
        _inline_spatial(sch, keep_read_often=True)
        for block in _root_blocks(sch):
            _schedule_spatial(sch, block, target, partition=True)
        return True
