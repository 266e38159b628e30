"""TVM's ``dlight.cpu.Reduction`` for the row-wise kernels Rows leaves (rows shorter than
8), only where every stage has the same rows (it recomputes a whole softmax per element of a
1 x N one), its errors turned into None."""

from __future__ import annotations

from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func

from .primitives import _Schedule
from .rows import _shared_rows
from .rule import Guarded


class SameRows(Guarded):
    """TVM's ``dlight.cpu.Reduction`` where every block's leading spatial axes (the rows it
    runs in parallel and computes a row's stages under) have the same extents."""

    def __init__(self):
        super().__init__(dl.cpu.Reduction())

    def fits(self, func) -> bool:
        try:
            infos = normalize_prim_func(_Schedule(func))
        except Exception:  # pylint: disable=broad-except
            return False
        return bool(infos) and _shared_rows(infos) > 0
