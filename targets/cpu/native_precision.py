"""Whether a CPU target computes in bfloat16 or float16 itself (ODLA's BF16_MODE and
FP16_MODE), or would emulate it in scalar code: the instruction sets that compute each."""

from __future__ import annotations

from tvm.target.codegen import target_has_features

# Per architecture and 16-bit type: the instruction sets, any one of which computes it, as
# /proc/cpuinfo names them -> as LLVM does.
_UNITS = {
    "x86_64": {"bf16": {"avx512_bf16": "avx512bf16", "amx_bf16": "amx-bf16"},
               "fp16": {"avx512_fp16": "avx512fp16", "amx_fp16": "amx-fp16"}},
    "aarch64": {"bf16": {"bf16": "bf16"}, "fp16": {"fphp": "fullfp16"}},
}


def lacking_instructions(spec, kind: str) -> tuple[str, ...]:
    """The instruction sets computing ``kind`` ("bf16" or "fp16") that ``spec`` (a TargetSpec)
    names, all of them where its CPU has none of them; empty where it has one, or where
    ``spec`` is no CPU of an architecture known here (a GPU computes both)."""
    target = spec.tvm_target()
    units = _UNITS.get(spec.arch, {}).get(kind, {})
    if target.kind.name != "llvm" or any(target_has_features(feature, target)
                                         for feature in units.values()):
        return ()
    return tuple(units)
