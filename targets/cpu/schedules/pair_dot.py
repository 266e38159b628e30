"""AVX2's exact 8-bit dot product: ``vpmaddwd`` on pairs of reduction steps, 8-bit operands
widened to 16 bits, two products a 32-bit lane added in one instruction. The Contraction rule
tensorizes its 8-lane vectors of int32 results with it where A and B are 8-bit and the
reduction pairs up; LLVM made one 16-bit multiply a lane of it otherwise (half its work)."""

from __future__ import annotations

import functools

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T
from tvm.target import Target

from .primitives import vector_bits

LANES = 2 * 4  # int32 results of a 256-bit vector
STEPS = 2  # reduction steps a lane adds
_EIGHT_BITS = ("int8", "uint8")


def pair_dot_intrin(target: Target, a_dtype: str, b_dtype: str, out_dtype: str) -> str | None:
    """The registered intrinsic's name for int32 += A[2] . B[8, 2] of these dtypes on
    ``target``, or None where it has no such instruction (not AVX2 of 256 bits)."""
    if out_dtype != "int32" or a_dtype not in _EIGHT_BITS or b_dtype not in _EIGHT_BITS:
        return None
    if target.kind.name != "llvm" or vector_bits(target) != 256 or \
            "x86" not in str(target.attrs.get("mtriple", "x86_64")):
        return None
    return _registered(a_dtype, b_dtype)


@functools.cache
def _registered(a_dtype: str, b_dtype: str) -> str:
    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((STEPS,), a_dtype, offset_factor=1),
             b: T.Buffer((LANES, STEPS), b_dtype, offset_factor=1),
             c: T.Buffer((LANES,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:LANES], a[0:STEPS], b[0:LANES, 0:STEPS])
            T.writes(c[0:LANES])
            for i in T.serial(0, LANES):
                for k in T.serial(0, STEPS):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.Buffer((STEPS,), a_dtype, offset_factor=1),
             b: T.Buffer((LANES, STEPS), b_dtype, offset_factor=1),
             c: T.Buffer((LANES,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:LANES], a[0:STEPS], b[0:LANES, 0:STEPS])
            T.writes(c[0:LANES])
            # A's pair as one 32-bit word of two int16, broadcast to every lane.
            pair = T.reinterpret(T.cast(a.vload([0], f"{a_dtype}x2"), "int16x2"), dtype="int32")
            a16 = T.reinterpret(T.broadcast(pair, LANES), dtype="int16x16")
            b16 = T.cast(b.vload([0, 0], f"{b_dtype}x16"), "int16x16")
            c[T.ramp(T.int32(0), 1, LANES)] += T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx2.pmadd.wd"), a16, b16,
                dtype="int32x8")

    name = f"odla_pair_dot_{a_dtype}_{b_dtype}"
    TensorIntrin.register(name, desc, impl)
    return name
