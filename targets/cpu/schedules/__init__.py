"""Default CPU schedules for the kernels a build leaves unscheduled: small rules in the
style of TVM's ``s_tir.dlight``, one a module, each taking the kernels of one kind and
returning None for the rest, applied in order by one driver (``default_schedules``):
Injective, Contraction, SpatialReduction, Stages, dlight's GEMV, Rows, SameRows, Fallback.
A rule that fails on a kernel returns None and the next one is tried on the kernel as it
was; Fallback takes every kernel. The rule that scheduled a kernel is named in its
``cpu_schedule_rule`` attribute (RULE_ATTR), and those kernels compute exp, erf, tanh,
sigmoid, sinh and cosh by polynomials that vectorize (vector_math). docs/cpu-codegen.md
describes each rule."""

from __future__ import annotations

import tvm
from tvm.s_tir import dlight as dl

from .contraction import Contraction
from .fallback import Fallback
from .injective import Injective
from .primitives import RULE_ATTR, vector_bits, vector_lanes, vector_registers
from .rows import Rows
from .rule import Guarded
from .same_rows import SameRows
from .spatial_reduction import SpatialReduction
from .stages import Stages
from .vector_math import _vector_math_pass, vector_math

__all__ = ["RULE_ATTR", "Contraction", "Fallback", "Guarded", "Injective", "Rows", "SameRows",
           "SpatialReduction", "Stages", "default_rules", "default_schedules", "vector_bits",
           "vector_lanes", "vector_math", "vector_registers"]


def default_rules() -> list[dl.ScheduleRule]:
    """The rules, in the order they are tried."""
    return [Injective(), Contraction(), SpatialReduction(), Stages(), Guarded(dl.cpu.GEMV()),
            Rows(), SameRows(), Fallback()]


def default_schedules() -> tvm.transform.Pass:
    """Schedules every kernel still unscheduled with the CPU rules, under the current target,
    and writes their float32 exp, erf, tanh and sigmoid as vector arithmetic."""
    return tvm.transform.Sequential([dl.ApplyDefaultSchedule(*default_rules()),
                                     _vector_math_pass])
