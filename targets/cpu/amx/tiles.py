"""AMX's tiles as the kernels use them (16 rows of 64 bytes: A's 16 rows by 32 bfloat16
reduction steps, B's 16 step pairs by 16 columns, C's 16 x 16 float32, each float32 operand
as PARTS bfloat16 parts), and whether a target has AMX."""

from __future__ import annotations

import tvm
from tvm.target.codegen import target_has_features

from ...specs import AMX_PERMISSION_SYSCALL  # noqa: F401  (AMX's, kept with the specs)

AMX_FEATURES = ("amx-tile", "amx-bf16")  # LLVM's names; /proc/cpuinfo says amx_tile, amx_bf16
ROWS, STEPS, COLUMNS = 16, 32, 16  # a tile of A: ROWS x STEPS bfloat16; of C: ROWS x COLUMNS
PARTS = 3


def has_amx(target: tvm.target.Target) -> bool:
    return target.kind.name == "llvm" and all(target_has_features(f, target)
                                               for f in AMX_FEATURES)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step
