"""ODLA's NVIDIA_GPU device: present where the CUDA driver reports a GPU; it compiles for the
cuda target, and its device info comes from the driver (targets.cuda.cuda_devices)."""

from __future__ import annotations

import targets
from targets.cuda import CudaUnavailable, cuda_devices

from .types import DeviceInfo, OdlaError, Status

TARGET = "cuda"


def missing() -> str | None:
    """Why NVIDIA_GPU cannot run here, or None where a CUDA device is present."""
    try:
        cuda_devices()
    except CudaUnavailable as err:
        return f"no CUDA device: {err}"
    return None


def gpu_target() -> targets.TargetSpec:
    reason = missing()
    if reason is not None:
        raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE, f"device NVIDIA_GPU cannot run here: "
                        f"{reason} (the cuda target still compiles: odla-tvm export MODEL "
                        "--target cuda)")
    return targets.get_target(TARGET)


def gpu_answers(index: int, cpu_answers: dict) -> dict:
    """The device info items of CUDA device ``index``: the driver's, in place of the host's
    (items with no GPU answer here, such as utilisation, are left out)."""
    devices = cuda_devices()
    gpu = devices[index]
    answers = {k: cpu_answers[k] for k in (DeviceInfo.ODLA_LIB_VERSION, DeviceInfo.DEV_INDEX,
                                           DeviceInfo.SDK_VERSION)}
    answers.update({
        DeviceInfo.DEV_COUNT: lambda: len(devices),
        DeviceInfo.DEV_TYPE: lambda: f"{gpu.describe()} ({targets.get_target(TARGET).description})",
        DeviceInfo.TOTAL_MEMORY: lambda: gpu.total_memory,
        DeviceInfo.DEV_UUID: lambda: gpu.uuid,
        DeviceInfo.DRIVER_VERSION: lambda: f"CUDA driver {gpu.driver_version}",
    })
    return answers
