"""Devices: ``odla_device`` (odla_device.h). Each ODLA device name maps to a compile target."""

from __future__ import annotations

import logging
import os
import platform
import time

import targets

from . import gpu_device
from .types import DeviceInfo, DeviceName, OdlaError, Status, VendorName, checked, odla_enum
from .version import odla_tvm_version

log = logging.getLogger(__name__)

# ODLA device names this build compiles for with TVM alone, each with the target it uses.
# DEFAULT is the fast path instead (see default_target).
_DEVICE_TARGETS = {DeviceName.INTEL_X86: "host-cpu"}
# The vendor plugin DEFAULT hands what it takes, wherever it can run (oneDNN's wheels are built
# for x86-64 Linux): untuned TVM code is far slower than onnxruntime on real models.
DEFAULT_PLUGIN = "onednn"
_fallbacks_said: set[str] = set()


def default_plugin_missing() -> str | None:
    """Why DEFAULT cannot hand work to DEFAULT_PLUGIN here, or None when it can."""
    if platform.machine() != "x86_64":
        return f"{DEFAULT_PLUGIN} runs on x86-64 only, this machine is {platform.machine()}"
    try:
        targets.get_plugin(DEFAULT_PLUGIN).check_available()
    except (KeyError, targets.PluginUnavailable) as err:
        return str(err)
    return None


def default_target() -> targets.TargetSpec:
    """DEFAULT's target: the host CPU with DEFAULT_PLUGIN taking what it takes, but in graphs
    TVM's own build runs faster (the plugin's declines), else (saying why, once per reason)
    TVM's own build, as INTEL_X86 compiles."""
    missing = default_plugin_missing()
    if missing is None:
        return targets.plugin_target(DEFAULT_PLUGIN, may_decline=True)
    if missing not in _fallbacks_said:
        _fallbacks_said.add(missing)
        log.warning("device DEFAULT compiles with TVM alone (as INTEL_X86): %s", missing)
    return targets.get_target(_DEVICE_TARGETS[DeviceName.INTEL_X86])


class Device:
    """An allocated ODLA device: a target to compile for and a runtime device to run on."""

    def __init__(self, name: DeviceName, index: int, target: targets.TargetSpec,
                 vendor: VendorName = VendorName.DEFAULT):
        self.name = name
        self.index = index
        self.target = target
        self.vendor = vendor
        self.destroyed = False

    @property
    def key(self) -> tuple:
        return (self.target.key(), self.index)

    def info(self, info_type: DeviceInfo):
        return get_device_info(self, info_type)

    def __repr__(self):
        return f"Device({self.name.name}, index={self.index}, target={self.target.name})"


def _plugin_devices() -> dict[DeviceName, targets.VendorPlugin]:
    """ODLA devices served by vendor plugins (built in or installed through entry points)."""
    return {DeviceName[p.device_name]: p for p in targets.available_plugins()
            if p.device_name in DeviceName.__members__}


def available_devices() -> list[DeviceName]:
    gpu = [DeviceName.NVIDIA_GPU] if gpu_device.missing() is None else []
    return [DeviceName.DEFAULT, *_DEVICE_TARGETS] + [d for d in _plugin_devices()
                                                     if d not in _DEVICE_TARGETS] + gpu


def _device_target(device_name: DeviceName) -> targets.TargetSpec:
    if device_name == DeviceName.DEFAULT:
        return default_target()
    if device_name in _DEVICE_TARGETS:
        return targets.get_target(_DEVICE_TARGETS[device_name])
    if device_name == DeviceName.NVIDIA_GPU:
        return gpu_device.gpu_target()
    plugin = targets.device_plugin(device_name.name)
    if plugin is None:
        raise OdlaError(
            Status.UNSUPPORTED_DEVICE_TYPE,
            f"device {device_name.name} is not available in this build; available: "
            f"{', '.join(d.name for d in available_devices())}",
        )
    try:
        plugin.check_available()
    except targets.PluginUnavailable as err:
        raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE,
                        f"device {device_name.name} (the {plugin.name} plugin) cannot run here: "
                        f"{err}; the plain CPU device (DEFAULT) works without it") from None
    return targets.plugin_target(plugin.name)


# What users of other runtimes call a device (onnxruntime's and ONNX's "CPU" and "CUDA").
DEVICE_ALIASES = {"CPU": DeviceName.DEFAULT, "GPU": DeviceName.NVIDIA_GPU,
                  "CUDA": DeviceName.NVIDIA_GPU}


def device_name_of(value) -> DeviceName:
    """An ODLA DeviceName from a member, its number, its name or an alias of DEVICE_ALIASES."""
    if isinstance(value, str) and value.strip().upper() in DEVICE_ALIASES:
        return DEVICE_ALIASES[value.strip().upper()]
    return odla_enum(DeviceName, value, "device name", Status.UNSUPPORTED_DEVICE_TYPE)


def allocate_device(vendor=None, device_name: DeviceName = DeviceName.DEFAULT,
                    device_idx: int = 0) -> Device:
    device_name = device_name_of(device_name)
    spec = _device_target(device_name)
    if device_idx != 0:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"device index {device_idx!r} for {device_name.name}; expected 0 (1 device present)",
        )
    return Device(device_name, device_idx, spec, VendorName(vendor or VendorName.DEFAULT))


def default_device() -> Device:
    return allocate_device()


def checked_device(device) -> Device:
    """``device`` itself, or the device allocated for None (DEFAULT) or a device name."""
    if device is None:
        return default_device()
    if isinstance(device, (str, DeviceName)):
        return allocate_device(device_name=device)
    checked(device, Device, "device", "a Device from allocate_device() or a device name")
    if device.destroyed:
        raise OdlaError(Status.INVALID_PARAM, f"{device!r} was destroyed; allocate a new one")
    return device


def target_spec(target) -> targets.TargetSpec:
    """A target from a Device, a target name (``odla-tvm info`` lists them), a target spec
    file (a path ending in .json, written by ``odla-tvm info --target-spec``) or None: this CPU
    as TVM alone compiles for it (INTEL_X86's host-cpu)."""
    if target is None:
        return checked_device(allocate_device(device_name=DeviceName.INTEL_X86)).target
    if isinstance(target, Device):
        return checked_device(target).target
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"target is a {type(target).__name__}; expected a Device, a target name, a target "
            "spec file or None",
        )
    try:
        return targets.get_target(target)
    except KeyError as err:
        raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE, str(err.args[0])) from None


def destroy_device(device: Device) -> None:
    checked_device(device).destroyed = True


def _meminfo() -> dict[str, int]:
    """Host memory figures in bytes from /proc/meminfo."""
    figures = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            figures[key] = int(rest.split()[0]) * 1024
    return figures


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _processor_utilization(interval: float = 0.05) -> float:
    """Busy share of all cores over ``interval`` seconds, from /proc/stat."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle
    total0, idle0 = sample()
    time.sleep(interval)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def _machine_uuid() -> bytes:
    """16 bytes naming this machine: the CPU has no UUID, so systemd's machine id stands in."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path) as f:
                return bytes.fromhex(f.read().strip()[:32])
        except (OSError, ValueError):
            continue
    raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE, "no machine id to give as DEV_UUID")


def get_device_info(device: Device, info_type: DeviceInfo):
    """One ``odla_device_info`` item: str for versions and names, int for counts and bytes."""
    device = checked_device(device)
    info_type = odla_enum(DeviceInfo, info_type, "device info item")
    answers = {
        DeviceInfo.ODLA_LIB_VERSION: lambda: f"odla-tvm {odla_tvm_version()}",
        DeviceInfo.DEV_COUNT: lambda: 1,
        DeviceInfo.DEV_INDEX: lambda: device.index,
        DeviceInfo.DEV_TYPE: lambda: f"{_cpu_model()} ({device.target.description})",
        DeviceInfo.TOTAL_MEMORY: lambda: _meminfo()["MemTotal"],
        DeviceInfo.USED_MEMORY: lambda: _meminfo()["MemTotal"] - _meminfo()["MemAvailable"],
        DeviceInfo.MEMORY_UTIL: lambda: 1.0 - _meminfo()["MemAvailable"] / _meminfo()["MemTotal"],
        DeviceInfo.SDK_VERSION: lambda: f"TVM {targets.tvm_version()}",
        DeviceInfo.PROCESSOR_UTIL: _processor_utilization,
        DeviceInfo.DEV_UUID: _machine_uuid,
        # The CPU's "driver" is the operating system kernel.
        DeviceInfo.DRIVER_VERSION: lambda: f"{platform.system()} {platform.release()}",
    }
    if device.target.device_kind == "cuda":
        answers = gpu_device.gpu_answers(device.index, answers)
    if info_type not in answers:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{info_type.name} is not reported for {device.name.name}; available: "
            f"{', '.join(i.name for i in answers)}",
        )
    return answers[info_type]()
