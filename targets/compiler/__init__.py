"""The compile pipeline, one job a module: pipeline (compile_module and its passes in order),
constant_folding, custom_rules (schedule-rule annotations no rule serves, dropped),
kernel_recorder (which bindings each kernel computes), codegen (the machine code, on every
core), built (a module compiled in memory, run and exported).

Importing it loads TVM's compiler (toolchain.load_compiler)."""

from toolchain import load_compiler

load_compiler()

from .pipeline import compile_module, default_scheduled, fused_kernels  # noqa: E402
