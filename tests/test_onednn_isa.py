"""Which CPU ISA class oneDNN reaches: from /proc/cpuinfo's flags, lowered (never raised) by
ONEDNN_MAX_CPU_ISA, and libdnnl's own answer agrees with the flags on this machine."""

import os
import subprocess
import sys

import pytest

from targets.plugins.onednn import isa

AVX2 = {"avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
ZEN4 = AVX512 | {"avx_vnni", "avx512_vnni", "avx512_bf16"}
SPR = ZEN4 | {"amx_tile", "amx_bf16", "amx_int8"}


@pytest.mark.parametrize("flags, max_isa, expected", [
    (AVX2, None, "avx2"),
    (AVX2 | {"avx_vnni"}, None, "avx2_vnni"),
    (AVX512, "ALL", "avx512_core"),
    (AVX512 | {"avx512_vnni"}, None, "avx512_core_vnni"),
    (ZEN4, None, "avx512_core_bf16"),
    (SPR, None, "avx512_core_amx"),
    (SPR, "avx512_core_amx_fp16", "avx512_core_amx"),
    (SPR, "AVX512_CORE_BF16", "avx512_core_bf16"),
    (ZEN4, "avx2_vnni_2", "avx2_vnni"),
    (SPR, "avx512_core", "avx512_core"),
    (AVX2, "avx512_core_amx", "avx2"),  # the limit only lowers
    ({"sse4_1"}, None, isa.BELOW_AVX2),
])
def test_class_from_flags(flags, max_isa, expected):
    assert isa.isa_from_flags(frozenset(flags), max_isa) == expected


def test_unknown_limit_is_refused():
    with pytest.raises(ValueError, match="ONEDNN_MAX_CPU_ISA is 'avx9'"):
        isa.isa_from_flags(frozenset(AVX2), "avx9")


def test_reaches_orders_the_classes():
    assert isa.reaches("avx512_core_amx", "avx512_core_bf16")
    assert not isa.reaches("avx512_core", "avx512_core_bf16")
    assert isa.reaches("avx2", "avx2")


@pytest.mark.parametrize("limit", [None, "avx2"])
def test_libdnnl_agrees_with_the_flags(limit):
    """In a fresh process: libdnnl reads ONEDNN_MAX_CPU_ISA once, when first asked."""
    env = dict(os.environ)
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if limit:
        env["ONEDNN_MAX_CPU_ISA"] = limit
    code = "from targets.plugins.onednn import isa; print(isa.onednn_isa())"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert got == isa.isa_from_flags(isa._cpu_flags(), limit)
