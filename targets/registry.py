"""What each device compiles to: one small spec per target, found by name."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field, replace
from functools import cache, cached_property, lru_cache

import tvm
import tvm_ffi

from .layouts import CPU_LAYOUTS

# Where a target's kernels get their schedules, tried in the order a spec lists them.
SCHEDULE_SOURCES = {
    "database": "MetaSchedule records tuned for the target (targets.tuning), where it has any",
    "dlight": "TVM's default GPU schedules (s_tir.dlight) for every kernel still unscheduled",
    "cpu-default": "default CPU schedules (targets.cpu_schedules) for every kernel still "
                   "unscheduled",
}


@dataclass(frozen=True)
class TargetSpec:
    """A compile target: the TVM Target dict, the runtime device kind, where kernel schedules
    come from, and how to describe it."""

    name: str
    target: dict
    device_kind: str  # "cpu" or "cuda": the TVM runtime device the module runs on
    description: str
    arch: str = field(default_factory=platform.machine)  # machine the code runs on (uname -m)
    cross_compiler: str | None = None  # C++ compiler that links for ``arch`` from this host
    debian_packages: tuple[str, ...] = ()  # what provides the cross compiler and an emulator
    schedules: tuple[str, ...] = ("database",)  # keys of SCHEDULE_SOURCES
    cpu_flags: tuple[str, ...] = ()  # /proc/cpuinfo flags the generated code needs
    plugins: tuple[str, ...] = ()  # vendor plugins (targets.plugins) that take their patterns first
    # Tuned builds only (see targets.layouts): op -> operand layouts its kernels use, and whether
    # a tuned kernel may lay out its constant weights as its schedule reads them (at compile time),
    # and whether convolutions are rewritten for vector units (targets.conv_rewrites).
    layouts: dict = field(default_factory=dict)
    prepack_weights: bool = False
    conv_rewrites: bool = False
    # Another machine's CPU (remote_cpu): its code may run here, but measuring it here would time
    # this CPU, so tuning it needs RPC servers on such a machine.
    remote: bool = False
    database_name: str | None = None  # the name its tuning database goes by (default: name)

    def __post_init__(self):
        unknown = [s for s in self.schedules if s not in SCHEDULE_SOURCES]
        if unknown:
            raise ValueError(f"target {self.name}: unknown schedule sources {unknown}; "
                             f"known: {', '.join(SCHEDULE_SOURCES)}")

    def runs_here(self) -> bool:
        """Whether this machine can run the target's code: same architecture, the CPU
        features it needs, and its device present."""
        if self.arch != platform.machine() or not set(self.cpu_flags) <= _host_cpu_flags():
            return False
        return self.device_kind == "cpu" or self.tvm_device().exist

    def tvm_target(self) -> tvm.target.Target:
        return tvm.target.Target(dict(self.target))

    def tvm_device(self, index: int = 0):
        return tvm.device(self.device_kind, index)

    def key(self) -> str:
        """Identity of the generated code: a module built for one key runs only on that key."""
        return self._key

    def runs_code_of(self, key: str) -> bool:
        """Whether code built for target ``key`` runs here: the same TVM target, with or
        without vendor plugins (a plugin's library is linked into the code that calls it)."""
        return key.split(" plugins=")[0] == str(self.tvm_target())

    @cached_property
    def _key(self) -> str:
        key = str(self.tvm_target())  # cached: launches ask, and a TVM Target takes ~20 µs
        return f"{key} plugins={','.join(self.plugins)}" if self.plugins else key


_TARGETS: dict[str, TargetSpec] = {}


def register_target(spec: TargetSpec) -> TargetSpec:
    _TARGETS[spec.name] = spec
    return spec


def get_target(name: str) -> TargetSpec:
    _ensure_builtin()
    if name not in _TARGETS and name.startswith(REMOTE_CPU_PREFIX):
        register_target(remote_cpu(name))
    if name not in _TARGETS and name.startswith(_PLUGIN_TARGET_PREFIX):
        from .plugins import get_plugin
        try:
            plugin_target(get_plugin(name[len(_PLUGIN_TARGET_PREFIX):]).name)
        except KeyError:
            pass
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
        layouts=CPU_LAYOUTS, prepack_weights=True, conv_rewrites=True,
        schedules=("database", "cpu-default"),
    )


_PLUGIN_TARGET_PREFIX = "host-cpu-"


def plugin_target(plugin: str) -> TargetSpec:
    """The host CPU with vendor plugin ``plugin`` taking its patterns first (named
    host-cpu-<plugin>), registered on first use."""
    name = _PLUGIN_TARGET_PREFIX + plugin
    if name not in _TARGETS:
        host = host_cpu()
        register_target(replace(host, name=name, plugins=(plugin,),
                                description=f"{host.description}, with the {plugin} plugin"))
    return _TARGETS[name]


REMOTE_CPU_PREFIX = "llvm:"
# The architectures a remote CPU may have, by the LLVM triple whose CPU names they use.
_TRIPLES = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
# Vector features LLVM and /proc/cpuinfo name alike: a CPU's code may use any it has.
_VECTOR_FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl")


def remote_cpu(name: str) -> TargetSpec:
    """Another machine's CPU, named ``llvm:MCPU:CORES`` (LLVM's name for the CPU, and the cores
    its code may use). Of this machine's architecture, it is the target host-cpu is on such a
    machine, and its records go into the database host-cpu uses there: a fleet of one CPU type
    is tuned from anywhere (measuring on its RPC servers) and the database shipped with the
    models. Of another architecture (aarch64 from x86-64), it is cross-compiled like
    aarch64-linux. KeyError, saying what is wrong, for a malformed name or a CPU LLVM does not
    know."""
    parts = name.split(":")
    if len(parts) != 3 or not parts[1] or not parts[2].isdigit() or int(parts[2]) < 1:
        raise KeyError(f"target {name!r} is not of the form llvm:MCPU:CORES (LLVM's CPU name and "
                       f"the cores its code may use, such as llvm:skylake-avx512:16)")
    mcpu, cores = parts[1], int(parts[2])
    arches = sorted(_TRIPLES, key=lambda arch: arch != platform.machine())  # this one first
    arch = next((a for a in arches if tvm.target.codegen.llvm_is_valid_cpu(mcpu, _TRIPLES[a])),
                None)
    if arch is None:
        import difflib

        known = [cpu for a in arches for cpu in tvm.target.codegen.llvm_get_cpu_archlist(
            tvm.target.Target({"kind": "llvm", "mtriple": _TRIPLES[a]}))]
        close = difflib.get_close_matches(mcpu, known, n=4)
        raise KeyError(f"target {name!r}: LLVM knows no CPU {mcpu!r} for {' or '.join(arches)}"
                       + (f"; close names: {', '.join(close)}" if close else ""))
    description = f"another machine's {mcpu} CPU, {cores} cores (tuned through its RPC servers)"
    if arch != platform.machine():  # cross-compiled, as the fixed target of that arch is
        base = {"aarch64": AARCH64_LINUX, "x86_64": X86_64_AVX2}[arch]
        return replace(base, name=name, description=description, remote=True, cpu_flags=(),
                       target={"kind": "llvm", "mtriple": _TRIPLES[arch], "mcpu": mcpu,
                               "num-cores": cores})
    target = {"kind": "llvm", "mcpu": mcpu, "num-cores": cores}  # what host_cpu() is there
    features = tvm.target.codegen.llvm_get_cpu_features(tvm.target.Target(target))
    return replace(host_cpu(), name=name, target=target, description=description,
                   cpu_flags=tuple(f for f in _VECTOR_FEATURES if f in features),
                   remote=target != host_cpu().target, database_name=host_cpu().name)


AARCH64_LINUX = TargetSpec(
    name="aarch64-linux",
    # TVM's raspberry-pi/4b-aarch64 tag without its host entry: a Cortex-A72 class core with NEON
    # (Raspberry Pi 4, and a safe baseline for Jetson boards).
    target={"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72",
            "mattr": ["+neon"], "num-cores": 4},
    device_kind="cpu",
    description="64-bit Arm Linux (Raspberry Pi 4 / Jetson class, Cortex-A72 baseline)",
    arch="aarch64",
    layouts=CPU_LAYOUTS, prepack_weights=True, conv_rewrites=True,
    schedules=("database", "cpu-default"),
    cross_compiler="aarch64-linux-gnu-g++",
    debian_packages=("g++-aarch64-linux-gnu", "qemu-user-static"),
)


X86_64_AVX2 = TargetSpec(
    name="x86-64-avx2",
    # LLVM's x86-64-v3 level: AVX2, FMA, BMI2 (Intel Haswell, AMD Zen and later), tuned for no
    # particular chip: code to ship to machines that are not this one.
    target={"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "x86-64-v3", "num-cores": 4},
    device_kind="cpu",
    description="any x86-64 CPU with AVX2 and FMA (Haswell / Zen or later), 4 cores assumed",
    arch="x86_64",
    cross_compiler=None if platform.machine() == "x86_64" else "x86_64-linux-gnu-g++",
    debian_packages=() if platform.machine() == "x86_64" else ("g++-x86-64-linux-gnu",),
    cpu_flags=("avx2", "fma"),
    layouts=CPU_LAYOUTS, prepack_weights=True, conv_rewrites=True,
    schedules=("database", "cpu-default"),
)

CUDA_SM90 = TargetSpec(
    name="cuda",
    target={"kind": "cuda", "arch": "sm_90"},
    device_kind="cuda",
    description="NVIDIA GPU, Hopper (sm_90): tuned records where present, else dlight's "
                "default GPU schedules; the host side runs on this machine's CPU",
    schedules=("database", "dlight"),
)


@cache
def _host_cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _ensure_builtin():
    if "host-cpu" not in _TARGETS:
        register_target(host_cpu())
        register_target(X86_64_AVX2)
        register_target(CUDA_SM90)
        if platform.machine() != "aarch64":
            register_target(AARCH64_LINUX)


def tvm_version() -> str:
    return tvm.__version__


def tvm_ffi_version() -> str:
    return tvm_ffi.__version__
