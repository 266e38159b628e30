"""Drops the schedule-rule annotations MetaSchedule has no rule for on the target. TOPI marks
its pooling blocks for custom rules (``meta_schedule.pool_max`` and others) that no CPU target
registers: MetaSchedule then warns at every design space it makes, straight to the terminal
from C++, and schedules the block with its generic rules all the same. Dropped in the fused
kernels, tuning's and every compile's alike, so that records still match their kernels."""

from __future__ import annotations

import tvm
import tvm_ffi

_ANNOTATION = "schedule_rule"


def _registered(rule: str, target: tvm.target.Target) -> bool:
    """Whether MetaSchedule finds ``rule`` for ``target`` (its ApplyCustomRule looks up
    s_tir.meta_schedule.<target key>.<rule>); "None" marks a block no rule schedules."""
    return rule == "None" or any(
        tvm_ffi.get_global_func(f"s_tir.meta_schedule.{key}.{rule}", allow_missing=True)
        is not None for key in target.keys)


def _without_unknown_rules(func: tvm.tirx.PrimFunc, target) -> tvm.tirx.PrimFunc:
    unknown = []
    tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlock, lambda block: unknown.append(
        block.name_hint) if _ANNOTATION in block.annotations and not _registered(
            str(block.annotations[_ANNOTATION]), target) else None))
    if not unknown:
        return func
    schedule = tvm.s_tir.Schedule(func)
    for name in unknown:
        schedule.unannotate(schedule.get_sblock(name), _ANNOTATION)
    return schedule.mod["main"]


@tvm.transform.module_pass(opt_level=0, name="DropUnknownScheduleRules")
def unknown_schedule_rules_dropped(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """``mod``'s kernels without the schedule-rule annotations the current target has no
    rule for (run under the target)."""
    target = tvm.target.Target.current()
    cleaned = {gv: _without_unknown_rules(func, target) for gv, func in mod.functions_items()
               if isinstance(func, tvm.tirx.PrimFunc)}
    changed = {gv: func for gv, func in cleaned.items() if not func.same_as(mod[gv])}
    if not changed:
        return mod
    mod = mod.clone()  # a pass leaves the module it is given as it was
    for gv, func in changed.items():
        mod[gv] = func
    return mod
