"""Targets: what each device compiles to, and compiling and running for it."""

from toolchain import ToolchainMissing  # first: toolchain loads TVM with torch hidden

from .specs import (
    TargetSpec,
    available_targets,
    cpu_count,
    get_target,
    host_cpu,
    plugin_target,
    read_target_spec_file,
    register_target,
    tvm_ffi_version,
    tvm_version,
    write_target_spec_file,
)
from .plugins import (
    PluginPattern,
    PluginUnavailable,
    VendorPlugin,
    available_plugins,
    get_plugin,
    register_plugin,
)
from .tuning.rpc import Tracker, TrackerError
from .runner import (RUNTIME_LIBRARIES, build_rpc_server, build_runner, runtime_libraries,
                     runtime_library_names)
from .runtime import CompiledModule, allocate, release_freed_memory
from .compiler import compile_module
from .training_runtime import DeviceFunctions
from .tuning import TuningDatabase, TuningReport, TuningUnavailable, find_database, tune
from .weights import WeightFiles

__all__ = [
    "RUNTIME_LIBRARIES",
    "build_rpc_server",
    "build_runner",
    "runtime_libraries",
    "runtime_library_names",
    "CompiledModule",
    "allocate",
    "DeviceFunctions",
    "PluginPattern",
    "PluginUnavailable",
    "TargetSpec",
    "Tracker",
    "TrackerError",
    "VendorPlugin",
    "WeightFiles",
    "available_plugins",
    "get_plugin",
    "plugin_target",
    "read_target_spec_file",
    "register_plugin",
    "ToolchainMissing",
    "TuningDatabase",
    "TuningReport",
    "TuningUnavailable",
    "available_targets",
    "compile_module",
    "release_freed_memory",
    "cpu_count",
    "find_database",
    "get_target",
    "host_cpu",
    "register_target",
    "tune",
    "tvm_ffi_version",
    "tvm_version",
    "write_target_spec_file",
]
