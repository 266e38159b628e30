"""Tensors on TVM's runtime alone (apache-tvm-ffi and libtvm_runtime.so, never the compiler):
made on a device, filled from NumPy, read back to NumPy. Both the run side of a compiled
module and the run-time checks it calls use them. TVM's runtime loads at the first call."""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING

import ml_dtypes
import numpy as np

from .tvm_loader import load_tvm_ffi, load_tvm_runtime

if TYPE_CHECKING:
    import tvm_ffi


@functools.cache
def runtime_function(name: str, device_kind: str = "cpu") -> tvm_ffi.Function:
    """TVM runtime's global function ``name``, its library (and ``device_kind``'s) loaded."""
    load_tvm_runtime(device_kind)
    return load_tvm_ffi().get_global_func(name)


def device(kind: str, index: int = 0) -> tvm_ffi.Device:
    """The runtime device ``kind`` ("cpu", "cuda") number ``index``, its runtime loaded."""
    load_tvm_runtime(kind)
    return load_tvm_ffi().device(kind, index)


def device_exists(dev: tvm_ffi.Device) -> bool:
    """Whether ``dev`` is present and usable (TVM's kExist device attribute)."""
    kind = type(dev)._DEVICE_TYPE_TO_NAME.get(dev.dlpack_device_type(), "cpu")
    try:
        get_attr = runtime_function("runtime.GetDeviceAttr", kind)
        return bool(get_attr(dev.dlpack_device_type(), dev.index, 0))
    except (RuntimeError, ValueError):
        return False


def empty(shape, dtype: str, dev: tvm_ffi.Device) -> tvm_ffi.Tensor:
    """An uninitialized tensor of ``shape`` and ``dtype`` on ``dev``."""
    alloc = runtime_function("runtime.TVMTensorAllocWithScope")
    ffi = load_tvm_ffi()
    return alloc(ffi.Shape([int(d) for d in shape]), ffi.dtype(str(dtype)), dev, None)


def tensor(array: np.ndarray, dev: tvm_ffi.Device) -> tvm_ffi.Tensor:
    """A copy of ``array`` on ``dev``."""
    array = np.require(array, requirements="C")  # not ascontiguousarray: it makes 0-d 1-d
    result = empty(array.shape, str(array.dtype), dev)
    copy = runtime_function("runtime.TVMTensorCopyFromBytes")
    copy(result, array.ctypes.data_as(ctypes.c_void_p), array.nbytes)
    return result


def numpy_dtype(dtype: str) -> np.dtype:
    """NumPy's dtype for TVM's ``dtype`` name (ml_dtypes' for bfloat16 and the float8s)."""
    try:
        return np.dtype(dtype)
    except TypeError:
        return np.dtype(getattr(ml_dtypes, dtype))


def numpy(value: tvm_ffi.Tensor) -> np.ndarray:
    """A NumPy copy of a tensor on any device (a copy: a result may alias an input or a
    constant); through DLPack on the CPU, quicker than a copy call for small tensors."""
    try:
        return np.from_dlpack(value).copy()
    except (RuntimeError, TypeError, BufferError):  # another device, or a dtype DLPack lacks
        result = np.empty(tuple(value.shape), numpy_dtype(str(value.dtype)))
        copy = runtime_function("runtime.TVMTensorCopyToBytes")
        copy(value, result.ctypes.data_as(ctypes.c_void_p), result.nbytes)
        return result
