"""This machine's CUDA devices, asked of the NVIDIA driver (libcuda.so.1) through ctypes: it
needs no CUDA toolkit, no TVM CUDA runtime and no GPU context."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

_COMPUTE_CAPABILITY_MAJOR, _COMPUTE_CAPABILITY_MINOR = 75, 76  # CUdevice_attribute


class CudaUnavailable(RuntimeError):
    """No CUDA device can be used here; the message says why."""


@dataclass(frozen=True)
class CudaDevice:
    index: int
    name: str
    total_memory: int  # bytes
    compute_capability: tuple[int, int]
    driver_version: str  # e.g. "13.0"
    uuid: bytes

    def describe(self) -> str:
        major, minor = self.compute_capability
        return f"{self.name}, compute capability {major}.{minor}"


def _checked(result: int, what: str) -> None:
    if result != 0:
        raise CudaUnavailable(f"the CUDA driver failed {what} (CUresult {result})")


@cache
def cuda_devices() -> tuple[CudaDevice, ...]:
    """The CUDA devices the driver reports; CudaUnavailable (saying why) where it reports none
    or is not installed. Asked once a process."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        raise CudaUnavailable(f"no CUDA driver ({err})") from None
    _checked(driver.cuInit(0), "to start (cuInit)")
    count, version = ctypes.c_int(), ctypes.c_int()
    _checked(driver.cuDeviceGetCount(ctypes.byref(count)), "to count devices")
    _checked(driver.cuDriverGetVersion(ctypes.byref(version)), "to give its version")
    if count.value == 0:
        raise CudaUnavailable("the CUDA driver reports no device")
    devices = []
    for index in range(count.value):
        handle, name = ctypes.c_int(), ctypes.create_string_buffer(256)
        memory, uuid = ctypes.c_size_t(), ctypes.create_string_buffer(16)
        major, minor = ctypes.c_int(), ctypes.c_int()
        _checked(driver.cuDeviceGet(ctypes.byref(handle), index), f"to open device {index}")
        _checked(driver.cuDeviceGetName(name, len(name), handle), "to name a device")
        _checked(driver.cuDeviceTotalMem_v2(ctypes.byref(memory), handle), "to size a device")
        get_uuid = getattr(driver, "cuDeviceGetUuid_v2", None) or driver.cuDeviceGetUuid
        _checked(get_uuid(uuid, handle), "to give a device's UUID")
        for value, attribute in ((major, _COMPUTE_CAPABILITY_MAJOR),
                                 (minor, _COMPUTE_CAPABILITY_MINOR)):
            _checked(driver.cuDeviceGetAttribute(ctypes.byref(value), attribute, handle),
                     "to give a compute capability")
        devices.append(CudaDevice(index, name.value.decode(), memory.value,
                                  (major.value, minor.value),
                                  f"{version.value // 1000}.{version.value % 1000 // 10}",
                                  uuid.raw))
    return tuple(devices)
