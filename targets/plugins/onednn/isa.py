"""Which CPU ISA oneDNN reaches on this machine: the class that decides which reduced-precision
kernels it has (bf16 from avx512_core_bf16, int8 dot products from the VNNI classes).

Asked of the libdnnl.so the plugin links (dnnl_get_effective_cpu_isa), which honours
ONEDNN_MAX_CPU_ISA; without the library, read from /proc/cpuinfo's flags with the same limit.
"""

from __future__ import annotations

import ctypes
import os

from .library import library_dir, load_dnnl

# From the lowest class up; the names are oneDNN's (dnnl_cpu_isa_t, ONEDNN_MAX_CPU_ISA) folded
# to the classes that change which kernels the plugin gets: avx2_vnni_2 adds no kernel the plugin
# uses over avx2_vnni, avx512_core_fp16 none over avx512_core_bf16, amx_fp16 none over amx.
ISAS = ("avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni", "avx512_core_bf16",
        "avx512_core_amx")
BELOW_AVX2 = "sse41"  # no x86-64 CPU oneDNN runs on reaches less; none of the kernels above

# dnnl_cpu_isa_t's values (dnnl_types.h of oneDNN 3.2) -> the class.
_DNNL_ISA = {0x1: BELOW_AVX2, 0x3: BELOW_AVX2, 0x7: "avx2", 0xf: "avx2_vnni",
             0x1f: "avx2_vnni", 0x27: "avx512_core", 0x67: "avx512_core_vnni",
             0xe7: "avx512_core_bf16", 0x1ef: "avx512_core_bf16", 0xfef: "avx512_core_amx",
             0x1fef: "avx512_core_amx"}

# ONEDNN_MAX_CPU_ISA's values (oneDNN's names, any case) -> the class.
_LIMIT = {"sse41": BELOW_AVX2, "avx": BELOW_AVX2, "avx2": "avx2", "avx2_vnni": "avx2_vnni",
          "avx2_vnni_2": "avx2_vnni", "avx512_core": "avx512_core",
          "avx512_core_vnni": "avx512_core_vnni", "avx512_core_bf16": "avx512_core_bf16",
          "avx512_core_fp16": "avx512_core_bf16", "avx512_core_amx": "avx512_core_amx",
          "avx512_core_amx_fp16": "avx512_core_amx"}

# Each class and the /proc/cpuinfo flags it needs beyond the class below it.
_FLAGS = (("avx2", {"avx2", "fma"}), ("avx2_vnni", {"avx_vnni"}),
          ("avx512_core", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
          ("avx512_core_vnni", {"avx512_vnni"}), ("avx512_core_bf16", {"avx512_bf16"}),
          ("avx512_core_amx", {"amx_tile", "amx_bf16", "amx_int8"}))


def reaches(isa: str, floor: str) -> bool:
    """Whether class ``isa`` has every kernel of class ``floor``."""
    order = (BELOW_AVX2, *ISAS)
    return order.index(isa) >= order.index(floor)


def isa_from_flags(flags: set[str] | frozenset[str], max_isa: str | None) -> str:
    """The class a CPU with these /proc/cpuinfo flags reaches, lowered to ONEDNN_MAX_CPU_ISA's
    ``max_isa`` (None or "all": no limit). avx512_core_vnni needs no avx_vnni, so the AVX-512
    classes are not stacked on avx2_vnni."""
    isa = BELOW_AVX2
    for name, needs in _FLAGS:
        if name == "avx2_vnni":
            if needs <= flags:
                isa = name
            continue
        if not needs <= flags:
            break
        isa = name
    limit = (max_isa or "all").strip().lower()
    if limit in ("all", "default", ""):
        return isa
    if limit not in _LIMIT:
        raise ValueError(f"ONEDNN_MAX_CPU_ISA is {max_isa!r}; expected one of "
                         f"{sorted(_LIMIT)} or 'all'")
    return _LIMIT[limit] if reaches(isa, _LIMIT[limit]) else isa


def _cpu_flags() -> frozenset[str]:
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def onednn_isa() -> str:
    """The class oneDNN reaches here: one of ISAS (or BELOW_AVX2)."""
    path = os.path.join(library_dir(), "libdnnl.so")
    if os.path.exists(path):
        get = load_dnnl().dnnl_get_effective_cpu_isa
        get.restype, get.argtypes = ctypes.c_int, []
        value = get()
        if value in _DNNL_ISA:
            return _DNNL_ISA[value]
    return isa_from_flags(_cpu_flags(), os.environ.get("ONEDNN_MAX_CPU_ISA"))


def class_key() -> str:
    """What decides the class oneDNN reaches here: the CPU's flags' class and
    ONEDNN_MAX_CPU_ISA, read without loading libdnnl (an engine's cache key asks it at every
    load, where the engine may never call oneDNN)."""
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA", "all").strip().lower()
    return f"{isa_from_flags(_cpu_flags(), None)} max={limit}"
