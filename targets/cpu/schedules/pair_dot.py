"""x86's exact 8-bit dot product: ``vpmaddwd`` on pairs of reduction steps, 8-bit operands
widened to 16 bits, two products a 32-bit lane added in one instruction (AVX2's 256 bits,
AVX-512's 512). The Contraction rule tensorizes its vectors of int32 results with it where A
and B are 8-bit and the reduction pairs up; LLVM made one 16-bit multiply a lane of it
otherwise (half its work)."""

from __future__ import annotations

import functools

from tvm.s_tir import TensorIntrin
from tvm.script import tirx as T
from tvm.target import Target

from .primitives import vector_bits

STEPS = 2  # reduction steps a lane adds
_EIGHT_BITS = ("int8", "uint8")
_INSTRUCTIONS = {256: "llvm.x86.avx2.pmadd.wd", 512: "llvm.x86.avx512.pmaddw.d.512"}


def pair_dot_intrin(target: Target, a_dtype: str, b_dtype: str,
                    out_dtype: str) -> tuple[str, int] | None:
    """The registered intrinsic's name for int32 += A[2] . B[lanes, 2] of these dtypes on
    ``target``, and its lanes; None where the target has no such instruction."""
    if out_dtype != "int32" or a_dtype not in _EIGHT_BITS or b_dtype not in _EIGHT_BITS:
        return None
    bits = vector_bits(target)
    if target.kind.name != "llvm" or bits not in _INSTRUCTIONS or \
            "x86" not in str(target.attrs.get("mtriple", "x86_64")):
        return None
    return _registered(a_dtype, b_dtype, bits), bits // 32


@functools.cache
def _registered(a_dtype: str, b_dtype: str, bits: int) -> str:
    lanes = bits // 32

    @T.prim_func(s_tir=True)
    def desc(a: T.Buffer((STEPS,), a_dtype, offset_factor=1),
             b: T.Buffer((lanes, STEPS), b_dtype, offset_factor=1),
             c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:STEPS], b[0:lanes, 0:STEPS])
            T.writes(c[0:lanes])
            for i in T.serial(0, lanes):
                for k in T.serial(0, STEPS):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        c[vi] = c[vi] + T.cast(a[vk], "int32") * T.cast(b[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def impl(a: T.Buffer((STEPS,), a_dtype, offset_factor=1),
             b: T.Buffer((lanes, STEPS), b_dtype, offset_factor=1),
             c: T.Buffer((lanes,), "int32", offset_factor=1, scope="local")) -> None:
        with T.sblock("root"):
            T.reads(c[0:lanes], a[0:STEPS], b[0:lanes, 0:STEPS])
            T.writes(c[0:lanes])
            # A's pair as one 32-bit word of two int16, broadcast to every lane.
            pair = T.reinterpret(T.cast(a.vload([0], f"{a_dtype}x2"), "int16x2"), dtype="int32")
            a16 = T.reinterpret(T.broadcast(pair, lanes), dtype=f"int16x{2 * lanes}")
            b16 = T.cast(b.vload([0, 0], f"{b_dtype}x{2 * lanes}"), f"int16x{2 * lanes}")
            c[T.ramp(T.int32(0), 1, lanes)] += T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id(_INSTRUCTIONS[bits]), a16, b16,
                dtype=f"int32x{lanes}")

    name = f"odla_pair_dot_{bits}_{a_dtype}_{b_dtype}"
    TensorIntrin.register(name, desc, impl)
    return name
