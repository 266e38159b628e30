"""TVM's ``dlight.cpu.Reduction`` for the row-wise kernels Rows leaves (rows shorter than
8), only where every stage has the same rows (it recomputes a whole softmax per element of a
1 x N one), its errors turned into None."""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.target import Target

from .primitives import _private, _Schedule, RULE_ATTR
from .rows import _shared_rows


class Guarded(dl.ScheduleRule):
    """Another rule (TVM's), its schedule errors turned into None."""

    def __init__(self, rule: dl.ScheduleRule):
        self.rule = rule

    def apply(self, func, target: Target, tunable: bool):
        if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
            return None
        func = _private(func)
        if not self.fits(func):
            return None
        try:
            return self.rule.apply(func.with_attr(RULE_ATTR, type(self.rule).__name__), target,
                                   tunable)
        except Exception:  # pylint: disable=broad-except
            return None

    def fits(self, func) -> bool:  # pylint: disable=unused-argument
        return True


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
