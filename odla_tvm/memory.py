"""Memory (odla_memory.h): device and host buffers and copies between them. Device buffers
are DLPack tensors, so a typed view of one binds to an argument with no copy."""

from __future__ import annotations

from enum import IntEnum

import numpy as np

import targets

from .device import Device, checked_device
from .types import OdlaError, Status, ValueType, odla_enum

_ALIGNMENT = 64  # what TVM needs to use memory as it is


class MemcpyType(IntEnum):
    H2H = 0
    H2D = 1
    D2H = 2
    D2D = 3


class DeviceMemory:
    """Bytes on a device (odla_AllocateDeviceMemory). ``view(value_type)`` gives a tensor of
    that type over the same memory, for bind_to_argument."""

    def __init__(self, tensor, device: Device):
        self._tensor = tensor
        self.device = device
        self.size = int(tensor.shape[0])

    def _live(self):
        if self._tensor is None:
            raise OdlaError(Status.INVALID_PARAM, "the device memory was freed")
        return self._tensor

    def __dlpack__(self, **kwargs):
        return self._live().__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._live().__dlpack_device__()

    def view(self, value_type: ValueType):
        """A tensor of ``value_type`` over the first bytes of this memory (no copy)."""
        if not isinstance(value_type, ValueType) or value_type.shape.is_dynamic:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"value_type is {value_type!r}; expected a ValueType with a static shape",
            )
        needed = value_type.shape.element_count() * value_type.dtype.itemsize
        if needed > self.size:
            raise OdlaError(
                Status.MEM_ERROR,
                f"{value_type} needs {needed} bytes; this device memory holds {self.size}",
            )
        return self._live()._create_view(value_type.shape.dims, str(value_type.dtype))


def allocate_device_memory(size: int, device: Device | None = None) -> DeviceMemory:
    device = checked_device(device)
    if not isinstance(size, (int, np.integer)) or size <= 0:
        raise OdlaError(Status.INVALID_PARAM, f"size is {size!r}; expected a byte count > 0")
    try:
        tensor = targets.allocate(device.target, device.index, int(size))
    except Exception as err:  # noqa: BLE001 (TVM reports exhaustion in several ways)
        raise OdlaError(Status.MEM_ERROR, f"cannot allocate {size} bytes on {device!r}: {err}") from None
    return DeviceMemory(tensor, device)


def free_device_memory(memory: DeviceMemory) -> None:
    if not isinstance(memory, DeviceMemory):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"memory is a {type(memory).__name__}; expected DeviceMemory from allocate_device_memory",
        )
    memory._live()
    memory._tensor = None  # TVM frees it once no view holds it


def allocate_host_memory(size: int) -> np.ndarray:
    """``size`` bytes of host memory, aligned so that TVM uses it without a copy."""
    if not isinstance(size, (int, np.integer)) or size <= 0:
        raise OdlaError(Status.INVALID_PARAM, f"size is {size!r}; expected a byte count > 0")
    raw = np.empty(int(size) + _ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    return raw[start:start + int(size)]


def free_host_memory(buffer: np.ndarray) -> None:
    """Checks ``buffer``; Python frees host memory when its last reference goes."""
    if not isinstance(buffer, np.ndarray):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"buffer is a {type(buffer).__name__}; expected an array from allocate_host_memory",
        )


def _bytes(buffer, side: str, on_device: bool) -> np.ndarray:
    """A writable uint8 view of a host buffer or of device memory."""
    if on_device:
        if not isinstance(buffer, DeviceMemory):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"{side} is a {type(buffer).__name__}; the copy type expects DeviceMemory there",
            )
        return np.from_dlpack(buffer._live())
    if not isinstance(buffer, np.ndarray) or not buffer.flags.c_contiguous:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{side} is a {type(buffer).__name__}; the copy type expects a C-contiguous host "
            "array there",
        )
    return buffer.reshape(-1).view(np.uint8)


def copy_memory(dst, src, size: int, memcpy_type: MemcpyType) -> None:
    """Copies ``size`` bytes from ``src`` to ``dst`` (odla_CopyMemory)."""
    kind = odla_enum(MemcpyType, memcpy_type, "memcpy_type")
    target = _bytes(dst, "dst", kind in (MemcpyType.H2D, MemcpyType.D2D))
    source = _bytes(src, "src", kind in (MemcpyType.D2H, MemcpyType.D2D))
    if not isinstance(size, (int, np.integer)) or not 0 <= size <= min(target.size, source.size):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"size is {size!r} bytes; expected 0..{min(target.size, source.size)} (dst holds "
            f"{target.size}, src {source.size})",
        )
    target[:size] = source[:size]
