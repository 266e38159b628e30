"""The GPU targets' default schedule rules: dlight's, each kernel taking the first that
schedules it, with a rule whose analysis cannot read a kernel declining it (so that the next
rule takes it) instead of failing the whole build."""

from __future__ import annotations

import logging

import tvm
from tvm.s_tir import dlight as dl

log = logging.getLogger(__name__)


class Declining(dl.ScheduleRule):
    """``rule``, declining a kernel its analysis asserts against. dlight's Reduction asserts
    that a reduction reads a point of each buffer per iteration; RoiAlign's reads a window
    found at run time, and the assertion failed every CUDA build holding one (Fallback,
    after it, schedules such a kernel)."""

    def __init__(self, rule: dl.ScheduleRule):
        self.rule = rule

    def apply(self, func: tvm.tirx.PrimFunc, target: tvm.target.Target, tunable: bool):
        try:
            return self.rule.apply(func, target, tunable)
        except AssertionError:
            log.debug("%s declined %s: its analysis does not hold there",
                      type(self.rule).__name__, func.attrs.get("global_symbol", "a kernel"))
            return None

    def is_target_available(self, target: tvm.target.Target) -> bool:
        return self.rule.is_target_available(target)


def gpu_rules() -> list[dl.ScheduleRule]:
    """The rules, in the order they are tried."""
    return [dl.gpu.Matmul(), dl.gpu.GEMV(), Declining(dl.gpu.Reduction()),
            dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
