"""Targets: what each device compiles to, and compiling and running for it.

Importing it loads nothing of TVM's compiler: target specs, the plugin registry and running a
compiled module (runtime) need TVM's runtime only. The names that compile, tune or build
import the compiler when first used."""

from typing import TYPE_CHECKING

from toolchain import ToolchainMissing, compiling_attributes

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
    PRECISION_ATTR,
    PluginPattern,
    PluginUnavailable,
    VendorPlugin,
    available_plugins,
    device_plugin,
    get_plugin,
    plugin_computes,
    register_plugin,
)
from .runtime import CompiledModule, allocate, release_freed_memory
from .tuning import find_records

if TYPE_CHECKING:  # the names below, for editors and type checkers (tests/test_rules.py)
    from .compiler import compile_module
    from .cpu.native_precision import lacking_instructions
    from .runner import (RUNTIME_LIBRARIES, build_rpc_server, build_runner, runtime_libraries,
                         runtime_library_names)
    from .training_runtime import DeviceFunctions
    from .tuning import TuningDatabase, TuningReport, TuningUnavailable, find_database, tune
    from .tuning.rpc import Tracker, TrackerError
    from .weights import WeightFiles

__getattr__ = compiling_attributes(__name__, {
    "Tracker": ".tuning.rpc", "TrackerError": ".tuning.rpc",
    "RUNTIME_LIBRARIES": ".runner", "build_rpc_server": ".runner", "build_runner": ".runner",
    "runtime_libraries": ".runner", "runtime_library_names": ".runner",
    "compile_module": ".compiler",
    "lacking_instructions": ".cpu.native_precision",
    "DeviceFunctions": ".training_runtime",
    "TuningDatabase": ".tuning", "TuningReport": ".tuning", "TuningUnavailable": ".tuning",
    "find_database": ".tuning", "tune": ".tuning",
    "WeightFiles": ".weights",
})

__all__ = [
    "RUNTIME_LIBRARIES",
    "build_rpc_server",
    "build_runner",
    "runtime_libraries",
    "runtime_library_names",
    "CompiledModule",
    "allocate",
    "DeviceFunctions",
    "PRECISION_ATTR",
    "PluginPattern",
    "PluginUnavailable",
    "TargetSpec",
    "Tracker",
    "TrackerError",
    "VendorPlugin",
    "WeightFiles",
    "available_plugins",
    "device_plugin",
    "get_plugin",
    "plugin_computes",
    "plugin_target",
    "read_target_spec_file",
    "register_plugin",
    "ToolchainMissing",
    "TuningDatabase",
    "TuningReport",
    "TuningUnavailable",
    "available_targets",
    "compile_module",
    "find_records",
    "lacking_instructions",
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
