"""Matrix products by constant weights on Intel AMX tiles, in float32 precision, for CPU
builds whose target has AMX (amx-tile and amx-bf16: Sapphire Rapids and later Xeons).

AMX multiplies bfloat16 and accumulates in float32, many times AVX-512's float32 rate. Each
float32 is the exact sum of three bfloat16 parts, and a product of two the sum of the six part
products that reach 2^-24 of it, so the result's error is that of float32's own accumulation.
tiles.py holds the tile geometry, parts.py the splitting into parts, kernel.py and
prefetch.py the kernel, products.py the Relax rewrite; docs/cpu-codegen.md has the details."""

from .kernel import amx_kernel
from .parts import Window, float32_parts, parts_kernel, parts_schedules, scheduled_parts, \
    weight_parts, weight_parts_shape
from .products import MIN_FLOPS, MIN_ROWS, amx_products
from .tiles import AMX_FEATURES, AMX_PERMISSION_SYSCALL, COLUMNS, PARTS, ROWS, STEPS, has_amx

__all__ = ["AMX_FEATURES", "AMX_PERMISSION_SYSCALL", "COLUMNS", "MIN_FLOPS", "MIN_ROWS", "PARTS",
           "ROWS", "STEPS", "Window", "amx_kernel", "amx_products", "float32_parts", "has_amx",
           "parts_kernel", "parts_schedules", "scheduled_parts", "weight_parts",
           "weight_parts_shape"]
