"""Checks of the data a caller hands in: arrays of the right type and shape, DLPack tensors
viewed only where they lie in host memory, values that fit this machine's memory."""

from __future__ import annotations

import os

import numpy as np

from .types import OdlaError, Status, ValueType, as_shape


MEMORY_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits_in_memory(value_id: str, value_type: ValueType) -> None:
    """Refuses a value of static shape larger than this machine's memory, so that a model
    declaring a huge dim fails when it is defined, not when its memory runs out."""
    if value_type.shape.is_dynamic:
        return
    size = value_type.shape.element_count() * value_type.dtype.itemsize
    if size > MEMORY_BYTES:
        raise OdlaError(
            Status.MEM_ERROR,
            f"value {value_id!r} of type {value_type} needs {size} bytes; this machine has "
            f"{MEMORY_BYTES} bytes of memory",
        )



# DLPack's device types (dlpack.h), for messages.
_DLPACK_DEVICES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal",
                   9: "VPI", 10: "ROCm", 11: "ROCm host", 12: "ext_dev", 13: "CUDA managed",
                   14: "oneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}


def host_data(data, what: str):
    """``data``, a DLPack tensor (not a NumPy array) viewed as one without a copy once it is
    known to lie in host memory, this build's devices' (reading another device's memory as
    the host's would crash); anything else as it is."""
    if isinstance(data, np.ndarray) or not hasattr(data, "__dlpack__"):
        return data
    try:
        device_type, device_id = (int(v) for v in data.__dlpack_device__())
    except Exception as err:  # noqa: BLE001 (any object may claim to be a tensor)
        raise OdlaError(Status.INVALID_PARAM, f"{what} is a {type(data).__name__} whose "
                        f"__dlpack_device__ failed ({err}); expected host memory") from None
    if device_type != 1:
        device = _DLPACK_DEVICES.get(device_type, f"DLPack device type {device_type}")
        raise OdlaError(Status.INVALID_PARAM, f"{what} is a tensor on {device}:{device_id}; "
                        "expected host CPU memory (a NumPy array, or a DLPack tensor on CPU)")
    try:
        return np.from_dlpack(data)
    except Exception as err:  # noqa: BLE001
        raise OdlaError(Status.INVALID_PARAM, f"{what} cannot be shared with the CPU device "
                        f"({err}); expected host CPU memory") from None


def checked_array(data, value_type: ValueType, what: str, shape=None) -> np.ndarray:
    """``data`` as an array of exactly ``value_type``'s dtype and shape (or ``shape``); a
    DLPack tensor is viewed (host_data)."""
    data = host_data(data, what)
    try:
        array = np.asarray(data)
    except Exception as err:  # noqa: BLE001 (any object may be handed in)
        raise OdlaError(Status.INVALID_PARAM, f"{what} is not array-like: {err}") from None
    if array.dtype != value_type.dtype:
        # Not an array: say what it is, since NumPy's reading of it (None is an object
        # array) is not what the caller handed in.
        given = f"has dtype {array.dtype}" if isinstance(data, np.ndarray) else \
            "is None" if data is None else \
            f"is a {type(data).__name__} (read as {array.dtype}{list(array.shape)})"
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{what} {given}; expected {value_type.dtype} ({value_type.element_type.name}) "
            f"data of shape {list(value_type.shape.dims)}",
        )
    expected = as_shape(shape) if shape is not None else value_type.shape
    if not expected.matches(array.shape):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{what} has shape {array.shape}; expected {expected.dims}{expected.any_size_note}",
        )
    return array
