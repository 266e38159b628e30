"""What each device compiles to: one small spec per target, found by name.

Nothing here loads TVM's compiler at import, and a run needs none of it: what only the
compiler knows of a target (LLVM's name for this CPU, a target's canonical string, which keys
compiled code) is asked of it once and remembered in the cache folder (_remembered)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from functools import cache, cached_property, lru_cache
from typing import TYPE_CHECKING

from toolchain import (ToolchainMissing, cache_dir, distribution_version, load_compiler,
                       tensors)

if TYPE_CHECKING:
    import tvm_ffi

# The layouts CPU targets' tuned builds use (see targets.cpu.layouts): op -> operand layouts.
CPU_LAYOUTS = {"relax.nn.conv2d": ("NHWC", "OHWI")}
# syscall's arguments asking Linux for AMX's tile state: arch_prctl(ARCH_REQ_XCOMP_PERM,
# XFEATURE_XTILEDATA), x86-64's numbers (see targets.cpu.amx).
AMX_PERMISSION_SYSCALL = (158, 0x1023, 18)

# Where a target's kernels get their schedules, tried in the order a spec lists them.
SCHEDULE_SOURCES = {
    "database": "MetaSchedule records tuned for the target (targets.tuning), where it has any",
    "dlight": "TVM's default GPU schedules (s_tir.dlight) for every kernel still unscheduled",
    "cpu-default": "default CPU schedules (targets.cpu.schedules) for every kernel still "
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
    # Whether a plugin may leave a graph to TVM whole where TVM's build runs it faster
    # (VendorPlugin.declines): DEFAULT's target, the fast path, does; a device named for a plugin
    # (INTEL_DNNL) wants that plugin, and its target does not.
    plugins_may_decline: bool = False
    # Tuned builds only (see targets.cpu.layouts): op -> operand layouts its kernels use, and whether
    # a tuned kernel may lay out its constant weights as its schedule reads them (at compile time),
    # and whether convolutions are rewritten for vector units (targets.cpu.conv_rewrites).
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
        if self.arch != platform.machine() or not set(self.cpu_flags) <= host_cpu_flags():
            return False
        return self.device_kind == "cpu" or tensors.device_exists(self.tvm_device())

    def tvm_target(self):
        """The TVM Target (loads TVM's compiler: for compiling only)."""
        tvm = _compiler()
        return tvm.target.Target(dict(self.target))

    def tvm_device(self, index: int = 0) -> tvm_ffi.Device:
        return tensors.device(self.device_kind, index)

    def key(self) -> str:
        """Identity of the generated code: a module built for one key runs only on that key."""
        return self._key

    def installed_cross_compiler(self) -> str | None:
        """The cross compiler that builds for the target's machine on this host (None: the
        host's own compiler builds for it); ToolchainMissing, saying how to get it, where it is
        not installed."""
        if self.cross_compiler is not None and shutil.which(self.cross_compiler) is None:
            raise ToolchainMissing(
                f"{self.cross_compiler} is not installed, so nothing can be built for "
                f"{self.name}; install it with: apt-get install {' '.join(self.debian_packages)} "
                "(or run scripts/setup-cross.sh)")
        return self.cross_compiler

    def runs_code_of(self, key: str) -> bool:
        """Whether code built for target ``key`` runs here: the same TVM target, with or
        without vendor plugins (a plugin's library is linked into the code that calls it)."""
        return key.split(" plugins=")[0] == target_string(self.target)

    @cached_property
    def _key(self) -> str:
        key = target_string(self.target)  # cached: every launch asks
        if not self.plugins:
            return key
        return f"{key} plugins={','.join(self.plugins)}" + \
            (" where-faster" if self.plugins_may_decline else "")


_TARGETS: dict[str, TargetSpec] = {}


def register_target(spec: TargetSpec) -> TargetSpec:
    _TARGETS[spec.name] = spec
    return spec


def get_target(name: str) -> TargetSpec:
    """The target called ``name``: a registered one, ``llvm:MCPU:CORES`` (remote_cpu), or a
    target spec file (a path ending in .json: read_target_spec_file). KeyError, saying what is
    wrong, for any other."""
    _ensure_builtin()
    if name.endswith(TARGET_SPEC_SUFFIX):  # read each time: the file is the user's to change
        return read_target_spec_file(name)
    if name not in _TARGETS and name.startswith(REMOTE_CPU_PREFIX):
        register_target(remote_cpu(name))
    if name not in _TARGETS and name.startswith(_PLUGIN_TARGET_PREFIX):
        from .plugins import get_plugin
        plugin = name[len(_PLUGIN_TARGET_PREFIX):]
        try:
            plugin_target(get_plugin(plugin.removesuffix(_MAY_DECLINE_SUFFIX)).name,
                          may_decline=plugin.endswith(_MAY_DECLINE_SUFFIX))
        except KeyError:
            pass
    if name not in _TARGETS:
        raise KeyError(f"unknown target {name!r}; available: {', '.join(sorted(_TARGETS))}, "
                       f"llvm:MCPU:CORES, or a target spec file (.json)")
    return _TARGETS[name]


def available_targets() -> list[TargetSpec]:
    _ensure_builtin()
    return [_TARGETS[n] for n in sorted(_TARGETS)]


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# TVM's CPU thread pool reads how long its idle workers poll for the next kernel once, when it
# starts (at the first parallel kernel). What the user set before any odla-tvm module loaded
# stands; otherwise the module that sets the pool's spin last before it starts decides.
_POOL_SPIN = "TVM_THREAD_POOL_SPIN_COUNT"
_POOL_SPIN_CHOSEN = _POOL_SPIN in os.environ


def default_pool_spin(polls: int) -> None:
    """Makes ``polls`` the TVM pool's spin, unless the user chose one."""
    if not _POOL_SPIN_CHOSEN:
        os.environ[_POOL_SPIN] = str(polls)


# AMX's features, as /proc/cpuinfo and LLVM name them (see targets.cpu.amx).
_AMX_FLAGS = {"amx_tile": "amx-tile", "amx_bf16": "amx-bf16"}


def _amx_granted() -> bool:
    """Whether Linux lends this process AMX's tile state (5.16 and later do, on request)."""
    try:
        return ctypes.CDLL(None).syscall(*AMX_PERMISSION_SYSCALL) == 0
    except (OSError, AttributeError):
        return False


def _compiler():
    """TVM's Python package, loading the compiler (toolchain.load_compiler): for what only it
    knows."""
    load_compiler()
    import tvm

    return tvm


def _remembered(name: str, identity: dict, compute) -> dict:
    """``compute()`` (a JSON object), kept in the cache folder under ``name`` and a digest of
    ``identity`` (what the answer depends on, TVM's version among it) and read from there
    afterwards: what asking TVM's compiler costs a run (loading it) is paid once a machine."""
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:20]
    path = cache_dir() / "targets" / f"{name}-{digest}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    value = compute()
    try:  # written whole, then renamed: a process reading it meanwhile sees none or all
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
            json.dump(value, f)
        os.replace(f.name, path)
    except OSError:  # a cache folder this process cannot write: asked again next time
        pass
    return value


def target_string(target: dict) -> str:
    """TVM's canonical string of the Target ``target`` (attributes in its order, defaults
    filled in): the identity of the code built for it."""
    def canonical():
        tvm = _compiler()
        return {"string": str(tvm.target.Target(dict(target)))}

    return _remembered("target", {"target": target, "tvm": tvm_version()}, canonical)["string"]


def _llvm_host_cpu() -> dict:
    """LLVM's name for this CPU, and the AMX features this machine has and that name lacks
    (AMX under a hypervisor that names another CPU model: a KVM Xeon with AMX shows as
    rocketlake)."""
    tvm = _compiler()
    mcpu = tvm.target.codegen.llvm_get_system_cpu()
    lacking = []
    if platform.machine() == "x86_64" and set(_AMX_FLAGS) <= host_cpu_flags():
        features = tvm.target.codegen.llvm_get_cpu_features(
            tvm.target.Target({"kind": "llvm", "mcpu": mcpu}))
        lacking = [f"+{f}" for f in _AMX_FLAGS.values() if f not in features]
    return {"mcpu": mcpu, "lacking": lacking}


@lru_cache(maxsize=None)
def host_cpu() -> TargetSpec:
    """The CPU this process runs on, as LLVM names it (with the features LLVM's name for it
    lacks, which generated code may use where Linux grants them), with its usable core count.
    LLVM is asked once per CPU model, flags and TVM version (_remembered)."""
    identity = {"cpu": _host_cpu_model(), "flags": sorted(host_cpu_flags()),
                "machine": platform.machine(), "tvm": tvm_version()}
    llvm = _remembered("host-cpu", identity, _llvm_host_cpu)
    mcpu, cores = llvm["mcpu"], cpu_count()
    mattr = llvm["lacking"] if llvm["lacking"] and _amx_granted() else []
    return TargetSpec(
        name="host-cpu",
        target={"kind": "llvm", "mcpu": mcpu, **({"mattr": mattr} if mattr else {}),
                "num-cores": cores},
        device_kind="cpu",
        description=f"this machine's CPU (LLVM mcpu {mcpu}{''.join(' ' + f for f in mattr)}, "
                    f"{cores} cores)",
        layouts=CPU_LAYOUTS, prepack_weights=True, conv_rewrites=True,
        schedules=("database", "cpu-default"),
        cpu_flags=tuple(flag for flag, feature in _AMX_FLAGS.items() if f"+{feature}" in mattr),
    )


_PLUGIN_TARGET_PREFIX = "host-cpu-"
_MAY_DECLINE_SUFFIX = "-auto"


def plugin_target(plugin: str, may_decline: bool = False) -> TargetSpec:
    """The host CPU with vendor plugin ``plugin`` taking its patterns first (named
    host-cpu-<plugin>), registered on first use; with ``may_decline``, only in the graphs that
    it does not leave to TVM whole as faster there (named host-cpu-<plugin>-auto)."""
    name = _PLUGIN_TARGET_PREFIX + plugin + (_MAY_DECLINE_SUFFIX if may_decline else "")
    if name not in _TARGETS:
        host = host_cpu()
        taking = ("taking what it can but in graphs TVM alone runs faster" if may_decline
                  else "taking what it can")
        register_target(replace(host, name=name, plugins=(plugin,),
                                plugins_may_decline=may_decline,
                                description=f"{host.description}, with the {plugin} plugin "
                                            f"{taking}"))
    return _TARGETS[name]


REMOTE_CPU_PREFIX = "llvm:"
# The architectures a remote CPU may have, by the LLVM triple whose CPU names they use.
_TRIPLES = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
# Vector features LLVM and /proc/cpuinfo name alike: a CPU's code may use any it has.
_VECTOR_FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl")


def remote_cpu(name: str, arch: str | None = None) -> TargetSpec:
    """Another machine's CPU, named ``llvm:MCPU:CORES`` (LLVM's name for the CPU, and the cores
    its code may use). Of this machine's architecture, it is the target host-cpu is on such a
    machine, and its records go into the database host-cpu uses there: a fleet of one CPU type
    is tuned from anywhere (measuring on its RPC servers) and the database shipped with the
    models. Of another architecture (aarch64 from x86-64), it is cross-compiled like
    aarch64-linux. ``arch`` (a key of _TRIPLES) is the machine's architecture where it is
    known (a target spec file says it); else it is the first whose LLVM knows MCPU, this
    machine's tried first (some names, such as generic, both know). KeyError, saying what is
    wrong, for a malformed name or a CPU LLVM does not know."""
    parts = name.split(":")
    if len(parts) != 3 or not parts[1] or not parts[2].isdigit() or int(parts[2]) < 1:
        raise KeyError(f"target {name!r} is not of the form llvm:MCPU:CORES (LLVM's CPU name and "
                       f"the cores its code may use, such as llvm:skylake-avx512:16)")
    mcpu, cores = parts[1], int(parts[2])
    arches = [arch] if arch else sorted(_TRIPLES, key=lambda a: a != platform.machine())
    tvm = _compiler()
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


TARGET_SPEC_SUFFIX = ".json"  # what tells a target spec file's path from a target name
TARGET_SPEC_VERSION = 1
_WRITE_A_SPEC = "write it with `odla-tvm info --target-spec FILE` on the machine it describes"
# A target spec file's fields besides its version: whether a value will do, what is expected.
_SPEC_FIELDS = {
    "mcpu": (lambda v: isinstance(v, str) and v != "" and ":" not in v,
             "LLVM's name for the CPU, such as 'skylake-avx512'"),
    "cores": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              "the cores its code may use, an integer >= 1"),
    "arch": (lambda v: isinstance(v, str) and v in _TRIPLES,
             f"the machine's architecture, {' or '.join(map(repr, _TRIPLES))}"),
    "vector_features": (lambda v: isinstance(v, list) and all(isinstance(f, str) for f in v),
                        "a list of the CPU's vector features, such as ['avx2', 'fma']"),
}


def write_target_spec_file(path, overwrite: bool = False) -> dict:
    """Writes this machine's CPU to the target spec file ``path``, for compiling and tuning for
    it elsewhere (read_target_spec_file), and returns what it wrote: host-cpu's LLVM mcpu and
    cores, the architecture, and the vector features its code uses (remote_cpu's cpu_flags).
    ValueError for a path not ending in .json or a machine of an architecture remote_cpu does
    not know; FileExistsError where ``path`` exists, unless ``overwrite``."""
    path, arch = os.fspath(path), platform.machine()
    if not path.endswith(TARGET_SPEC_SUFFIX):
        raise ValueError(f"target spec file {path!r} does not end in {TARGET_SPEC_SUFFIX}; "
                         f"expected a name that does (how --target tells it from a target name)")
    if arch not in _TRIPLES:
        raise ValueError(f"this machine's architecture is {arch!r}; a target spec file can "
                         f"describe only {' or '.join(_TRIPLES)} CPUs")
    mcpu, cores = host_cpu().target["mcpu"], host_cpu().target["num-cores"]
    fields = {"target_spec_version": TARGET_SPEC_VERSION, "mcpu": mcpu, "cores": cores,
              "arch": arch, "vector_features": list(
                  remote_cpu(f"{REMOTE_CPU_PREFIX}{mcpu}:{cores}", arch).cpu_flags)}
    if "mattr" in host_cpu().target:  # features mcpu lacks (AMX under a hypervisor)
        fields["mattr"] = list(host_cpu().target["mattr"])
    with open(path, "w" if overwrite else "x") as f:
        json.dump(fields, f, indent=2)
        f.write("\n")
    return fields


def read_target_spec_file(path) -> TargetSpec:
    """The target a spec file describes (written on its machine by write_target_spec_file):
    remote_cpu's for its ``llvm:MCPU:CORES`` on its architecture, so its records go into the
    same database, described as the file's. KeyError, naming the file, the field, what was
    given and what was expected, for a file that does not describe a CPU."""
    path = os.fspath(path)

    def bad(problem: str) -> KeyError:
        return KeyError(f"target spec file {path!r}: {problem}; {_WRITE_A_SPEC}")

    try:
        with open(path) as f:
            fields = json.load(f)
    except FileNotFoundError:
        raise bad("no such file") from None
    except OSError as err:
        raise bad(f"cannot be read ({err.strerror})") from None
    except ValueError as err:
        raise bad(f"is not JSON ({err})") from None
    if not isinstance(fields, dict):
        raise bad(f"holds a JSON {type(fields).__name__}; expected an object")
    version = fields.get("target_spec_version")
    if version != TARGET_SPEC_VERSION:
        raise bad(f"target_spec_version is {version!r}; expected {TARGET_SPEC_VERSION}, the "
                  f"version this odla-tvm reads")
    for key, (fits, expected) in _SPEC_FIELDS.items():
        if key not in fields:
            raise bad(f"{key} is missing; expected {expected}")
        if not fits(fields[key]):
            raise bad(f"{key} is {fields[key]!r}; expected {expected}")
    mcpu, cores, features = fields["mcpu"], fields["cores"], fields["vector_features"]
    try:
        spec = remote_cpu(f"{REMOTE_CPU_PREFIX}{mcpu}:{cores}", fields["arch"])
    except KeyError as err:
        raise bad(err.args[0]) from None
    # Code for mcpu uses every feature LLVM gives it: one the machine lacks would crash there.
    lacking = [f for f in spec.cpu_flags if f not in features]
    if lacking:
        raise bad(f"vector_features is {features!r}, without {', '.join(lacking)}; expected "
                  f"every vector feature LLVM's code for {mcpu!r} uses (mcpu or vector_features "
                  f"edited?)")
    mattr = fields.get("mattr", [])
    known = [f"+{feature}" for feature in _AMX_FLAGS.values()]
    if not isinstance(mattr, list) or not set(mattr) <= set(known):
        raise bad(f"mattr is {mattr!r}; expected a list of features LLVM's mcpu lacks, of "
                  f"{known}")
    if mattr:
        target = {**spec.target, "mattr": list(mattr)}
        spec = replace(spec, target=target, remote=target != host_cpu().target,
                       cpu_flags=spec.cpu_flags + tuple(
                           flag for flag, feature in _AMX_FLAGS.items() if f"+{feature}" in mattr))
    how = ", tuned through its RPC servers" if spec.remote else ""
    return replace(spec, description=f"the {mcpu} CPU of target spec file {path} ({cores} "
                                     f"cores{how})")


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


def _cpuinfo_field(names: tuple[str, ...]) -> str | None:
    """The first processor's ``names`` line of /proc/cpuinfo (after its colon), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(names):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


@cache
def host_cpu_flags() -> frozenset[str]:
    return frozenset((_cpuinfo_field(("flags", "Features")) or "").split())


@cache
def _host_cpu_model() -> str:
    return _cpuinfo_field(("model name", "CPU part")) or platform.processor()


def _ensure_builtin():
    if "host-cpu" not in _TARGETS:
        register_target(host_cpu())
        register_target(X86_64_AVX2)
        register_target(CUDA_SM90)
        if platform.machine() != "aarch64":
            register_target(AARCH64_LINUX)


def tvm_version() -> str:
    """TVM's version, read from its package's metadata (importing it loads the compiler)."""
    return distribution_version("apache-tvm")


def tvm_ffi_version() -> str:
    return distribution_version("apache-tvm-ffi")
