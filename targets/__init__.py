"""Targets: what each device compiles to, and compiling and running for it."""

from .registry import (
    TargetSpec,
    available_targets,
    cpu_count,
    get_target,
    host_cpu,
    register_target,
    tvm_ffi_version,
    tvm_version,
)
from .runner import RUNTIME_LIBRARIES, build_runner, runtime_libraries
from .runtime import CompiledModule, ToolchainMissing, allocate, compile_module
from .training_runtime import DeviceFunctions

__all__ = [
    "RUNTIME_LIBRARIES",
    "build_runner",
    "runtime_libraries",
    "CompiledModule",
    "allocate",
    "DeviceFunctions",
    "TargetSpec",
    "ToolchainMissing",
    "available_targets",
    "compile_module",
    "cpu_count",
    "get_target",
    "host_cpu",
    "register_target",
    "tvm_ffi_version",
    "tvm_version",
]
