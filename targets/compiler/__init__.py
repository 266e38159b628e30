"""The compile pipeline, one job a module: pipeline (compile_module and its passes in order),
constant_folding, custom_rules (schedule-rule annotations no rule serves, dropped),
kernel_recorder (which bindings each kernel computes), codegen (the machine code, on every
core)."""

from .pipeline import compile_module, default_scheduled, fused_kernels
