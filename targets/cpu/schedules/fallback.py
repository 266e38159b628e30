"""The Fallback rule: any kernel the others leave, loop nest by loop nest."""

from __future__ import annotations

from tvm import tirx

from .primitives import _maybe_parallel, _root_blocks, _schedule_spatial, _work
from .rule import _Rule


class Fallback(_Rule):
    """Every kernel, loop nest by loop nest: spatial loops first, fused and run in parallel
    where TVM allows it; spatial nests also vectorized. Nests TVM cannot analyse (opaque
    blocks, loop-carried scans) keep their loops."""

    def schedule(self, sch, func, target):
        for block in _root_blocks(sch):
            try:
                self._nest(sch, block, target)
            except Exception:  # pylint: disable=broad-except
                continue  # checked before anything changes: the nest keeps its loops
        return True

    @staticmethod
    def _nest(sch, block, target):
        stmt = sch.get(block)
        loops = sch.get_loops(block)
        if not loops:
            return
        if not stmt.iter_vars or len(loops) != len(stmt.iter_vars):
            sch.parallel(loops[0])  # TVM refuses where it cannot prove that safe
            return
        kinds = [i.iter_type for i in stmt.iter_vars]  # one loop per iterator, as TE makes them
        spatial = [loop for loop, k in zip(loops, kinds) if k == tirx.IterVar.DataPar]
        reduce = [loop for loop, k in zip(loops, kinds) if k != tirx.IterVar.DataPar]
        if not reduce:
            _schedule_spatial(sch, block, target)
        elif spatial:
            sch.reorder(*spatial, *reduce)
            work = _work(sch, loops)
            fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            _maybe_parallel(sch, fused, work, target)
