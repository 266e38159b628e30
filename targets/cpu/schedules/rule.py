"""The base classes of the CPU rules: ``_Rule`` for this package's, ``Guarded`` for TVM's;
each returns None (so that the next rule is tried) off LLVM targets and wherever scheduling
raises, and names itself in the kernel's RULE_ATTR."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.target import Target

from .primitives import _is_spatial, _private, _Schedule, RULE_ATTR


class _Rule(dl.ScheduleRule):
    """A CPU rule: None off LLVM targets and wherever scheduling raises (so that the next
    rule is tried); subclasses write ``schedule(sch, func, target) -> bool``."""

    def apply(self, func, target: Target, _tunable: bool):
        if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
            return None
        try:
            func = _private(func)
            sch = _Schedule(func.with_attr(RULE_ATTR, type(self).__name__))
            return sch if self.schedule(sch, func, target) else None
        except Exception:  # pylint: disable=broad-except
            return None

    def schedule(self, sch: s_tir.Schedule, func: tirx.PrimFunc, target: Target) -> bool:
        raise NotImplementedError


def _reductions(sch: s_tir.Schedule) -> list | None:
    """The reduction blocks (a reduction of one step counts, though normalizing drops it)."""
    infos = normalize_prim_func(sch)
    return None if infos is None else [
        info for info in infos if not info.is_injective() or not _is_spatial(sch, info.block_rv)]


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
