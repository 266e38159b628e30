"""What each device compiles to: one small spec per target, found by name."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from functools import lru_cache

import tvm
import tvm_ffi


@dataclass(frozen=True)
class TargetSpec:
    """A compile target: the TVM Target dict, the runtime device kind, and how to describe it."""

    name: str
    target: dict
    device_kind: str  # "cpu" or "cuda": the TVM runtime device the module runs on
    description: str
    arch: str = field(default_factory=platform.machine)  # machine the code runs on (uname -m)
    cross_compiler: str | None = None  # C++ compiler that links for ``arch`` from this host
    debian_packages: tuple[str, ...] = ()  # what provides the cross compiler and an emulator

    def runs_here(self) -> bool:
        return self.arch == platform.machine()

    def tvm_target(self) -> tvm.target.Target:
        return tvm.target.Target(dict(self.target))

    def tvm_device(self, index: int = 0):
        return tvm.device(self.device_kind, index)

    def key(self) -> str:
        """Identity of the generated code: a module built for one key runs only on that key."""
        return str(self.tvm_target())


_TARGETS: dict[str, TargetSpec] = {}


def register_target(spec: TargetSpec) -> TargetSpec:
    _TARGETS[spec.name] = spec
    return spec


def get_target(name: str) -> TargetSpec:
    _ensure_builtin()
    if name not in _TARGETS:
        raise KeyError(f"unknown target {name!r}; available: {', '.join(sorted(_TARGETS))}")
    return _TARGETS[name]


def available_targets() -> list[TargetSpec]:
    _ensure_builtin()
    return [_TARGETS[n] for n in sorted(_TARGETS)]


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@lru_cache(maxsize=None)
def host_cpu() -> TargetSpec:
    """The CPU this process runs on, as LLVM names it, with its usable core count."""
    mcpu = tvm.target.codegen.llvm_get_system_cpu()
    cores = cpu_count()
    return TargetSpec(
        name="host-cpu",
        target={"kind": "llvm", "mcpu": mcpu, "num-cores": cores},
        device_kind="cpu",
        description=f"this machine's CPU (LLVM mcpu {mcpu}, {cores} cores)",
    )


AARCH64_LINUX = TargetSpec(
    name="aarch64-linux",
    # TVM's raspberry-pi/4b-aarch64 tag without its host entry: a Cortex-A72 class core with NEON
    # (Raspberry Pi 4, and a safe baseline for Jetson boards).
    target={"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72",
            "mattr": ["+neon"], "num-cores": 4},
    device_kind="cpu",
    description="64-bit Arm Linux (Raspberry Pi 4 / Jetson class, Cortex-A72 baseline)",
    arch="aarch64",
    cross_compiler="aarch64-linux-gnu-g++",
    debian_packages=("g++-aarch64-linux-gnu", "qemu-user-static"),
)


def _ensure_builtin():
    if "host-cpu" not in _TARGETS:
        register_target(host_cpu())
        if platform.machine() != "aarch64":
            register_target(AARCH64_LINUX)


def tvm_version() -> str:
    return tvm.__version__


def tvm_ffi_version() -> str:
    return tvm_ffi.__version__
