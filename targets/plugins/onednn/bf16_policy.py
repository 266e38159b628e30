"""Whether the oneDNN plugin computes BF16_MODE's convolutions and matmuls in bf16 itself, and
in which data types: only where oneDNN has native bf16 kernels (avx512_core_bf16 and AMX).
Below that (AVX2, avx512_core) oneDNN 3.2 has no bf16 primitive or only an emulation slower
than float32, and the plugin declines: the graph keeps the float32 fallback (float32
products, weights rounded to bf16), said in one log line.

Where it takes bf16, the graph stays float32 with its heavy ops' weights rounded to bf16
(relay_bridge.reduce_precision's fallback) and the regions' convolutions and matmuls read bf16:
what TVM still computes of the graph computes in float32, never by TVM's bf16 emulation."""

from __future__ import annotations

import functools
import logging
import os

from .bf16_probe import probe_impls
from .isa import onednn_isa, reaches

log = logging.getLogger(__name__)

BF16_FLOOR = "avx512_core_bf16"  # the lowest class with native bf16 convolutions and matmuls
# Implementations that are no native bf16 kernel: the reference code, and the gemm that
# converts bf16 to f32 (oneDNN's bf16 matmul below avx512_core_bf16).
SLOW_IMPLS = ("ref", "gemm:jit")
# The (src and weights, dst) types of the regions' convolutions and matmuls per precision
# (relay_bridge.PRECISIONS), as region.h's RegionSpec names them; bias is f32 throughout.
PRODUCT_TYPES = {"bf16-accuracy": ("dnnl_bf16", "dnnl_f32"),
                 "bf16-performance": ("dnnl_bf16", "dnnl_bf16")}
FLOAT32_TYPES = ("dnnl_f32", "dnnl_f32")


def decline_reason(isa: str, impls: dict[str, str | None]) -> str | None:
    """Why the plugin declines bf16 on a CPU of class ``isa`` where oneDNN picks ``impls``
    (bf16_probe's) for a bf16 convolution and matmul; None where it takes it."""
    if not reaches(isa, BF16_FLOOR):
        return (f"oneDNN reaches {isa} here, below {BF16_FLOOR}: it has no native bf16 "
                "convolution or matmul")
    for kind, impl in impls.items():
        if impl is None:
            return f"oneDNN has no bf16 {kind} here"
        if any(impl.startswith(slow) for slow in SLOW_IMPLS):
            return f"oneDNN would run a bf16 {kind} as {impl}, no native kernel"
    return None


@functools.cache
def _reason(precision: str, max_isa: str | None) -> str | None:
    """decline_reason here for ``precision`` (a key of PRODUCT_TYPES); ``max_isa``:
    ONEDNN_MAX_CPU_ISA, which libdnnl reads once, keys the cache for tests."""
    isa = onednn_isa()
    result_type = "bf16" if PRODUCT_TYPES[precision][1] == "dnnl_bf16" else "f32"
    return decline_reason(isa, probe_impls(result_type) if reaches(isa, BF16_FLOOR) else {})


def takes(precision: str | None) -> bool:
    """Whether the plugin's regions compute ``precision`` (relay_bridge.PRECISIONS) natively."""
    return precision in PRODUCT_TYPES and _reason(precision,
                                                  os.environ.get("ONEDNN_MAX_CPU_ISA")) is None


def computes(precision: str) -> bool:
    """takes(), asked once per compile (VendorPlugin.computes): a bf16 precision declined
    says why in one log line."""
    if precision in PRODUCT_TYPES and not takes(precision):
        log.warning("BF16_MODE: the onednn plugin leaves bf16 to the float32 fallback (float32 "
                    "products, weights rounded to bfloat16): %s",
                    _reason(precision, os.environ.get("ONEDNN_MAX_CPU_ISA")))
    return takes(precision)


def product_types(precision: str | None) -> tuple[str, str]:
    """The regions' (src and weights, dst) types for ``precision``: bf16 where the plugin
    takes it, else f32."""
    return PRODUCT_TYPES[precision] if takes(precision) else FLOAT32_TYPES
