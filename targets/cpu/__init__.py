"""CPU code generation: the default schedule rules and their vector math (schedules), the AMX
matrix kernels (amx), and the graph rewrites made for CPU kernels before they are fused
(layouts, conv_rewrites, math_rewrites, in_place) or after (vector_tails)."""
