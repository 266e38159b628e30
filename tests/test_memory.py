"""Resource queries and memory: device-info items, device and host buffers, copies, and
device-resident (DLPack) tensors bound to arguments without a copy."""

import platform

import numpy as np
import pytest
import tvm

import odla_tvm as odla
from odla_tvm import DeviceInfo, MemcpyType, Status
from odla_tvm import ElementType as E
from odla_tvm import ValueType as VT
from targets.runtime import device_tensor


def test_device_info_items():
    device = odla.allocate_device()
    util = odla.get_device_info(device, DeviceInfo.PROCESSOR_UTIL)
    assert 0.0 <= util <= 1.0
    assert 0.0 < odla.get_device_info(device, DeviceInfo.MEMORY_UTIL) < 1.0
    uuid = odla.get_device_info(device, DeviceInfo.DEV_UUID)
    assert isinstance(uuid, bytes) and len(uuid) == 16
    assert odla.get_device_info(device, DeviceInfo.DRIVER_VERSION) == \
        f"{platform.system()} {platform.release()}"
    with pytest.raises(odla.OdlaError) as err:
        odla.get_device_info(device, DeviceInfo.POWER_LIMIT)
    assert err.value.status == Status.INVALID_PARAM and "available" in str(err.value)


def test_device_memory_round_trip_through_copies():
    data = np.arange(24, dtype=np.float32)
    memory = odla.allocate_device_memory(data.nbytes)
    assert memory.size == 96
    odla.copy_memory(memory, data, data.nbytes, MemcpyType.H2D)
    other = odla.allocate_device_memory(data.nbytes)
    odla.copy_memory(other, memory, data.nbytes, MemcpyType.D2D)
    host = odla.allocate_host_memory(data.nbytes)
    assert host.ctypes.data % 64 == 0 and host.nbytes == 96
    odla.copy_memory(host, other, data.nbytes, MemcpyType.D2H)
    np.testing.assert_array_equal(host.view(np.float32), data)
    back = np.zeros(24, np.float32)
    odla.copy_memory(back, host, 48, MemcpyType.H2H)  # half of it
    np.testing.assert_array_equal(back[:12], data[:12])
    assert not back[12:].any()
    odla.free_host_memory(host)
    odla.free_device_memory(other)
    with pytest.raises(odla.OdlaError) as err:
        odla.copy_memory(host, other, 4, MemcpyType.D2H)
    assert "freed" in str(err.value)


def test_device_tensor_binds_without_a_copy():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, 3)), "x")
    odla.set_value_as_output(odla.mul(x, x, "square"))
    exe = odla.compile_computation(comp, None)
    memory = odla.allocate_device_memory(2 * 3 * 4)
    tensor = memory.view(VT(E.FLOAT32, (2, 3)))
    odla.copy_memory(memory, np.full(6, 2.0, np.float32), 24, MemcpyType.H2D)
    ctx = odla.create_context()
    odla.bind_to_argument(x, tensor, ctx)
    # Written after binding: the context holds the device memory itself, not a copy of it.
    odla.copy_memory(memory, np.arange(6, dtype=np.float32), 24, MemcpyType.H2D)
    odla.launch_executable(exe, ctx)
    np.testing.assert_array_equal(odla.get_value_data(comp.outputs[0], None, ctx),
                                  np.arange(6, dtype=np.float32).reshape(2, 3) ** 2)
    # And the run hands that same memory to TVM.
    bound = ctx.inputs["x"]
    assert device_tensor(bound, tvm.cpu()).data_ptr() == tensor.data_ptr()


def test_memory_errors():
    with pytest.raises(odla.OdlaError) as err:
        odla.allocate_device_memory(0)
    assert err.value.status == Status.INVALID_PARAM and "size is 0" in str(err.value)
    with pytest.raises(odla.OdlaError):
        odla.allocate_host_memory(-5)
    memory = odla.allocate_device_memory(8)
    with pytest.raises(odla.OdlaError) as err:
        memory.view(VT(E.FLOAT32, (4,)))
    assert err.value.status == Status.MEM_ERROR and "16 bytes" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.copy_memory(memory, np.zeros(4, np.float32), 16, MemcpyType.H2D)
    assert "expected 0..8" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.copy_memory(np.zeros(2), memory, 8, MemcpyType.H2D)
    assert "dst is a ndarray" in str(err.value) and "DeviceMemory" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.copy_memory(memory, memory, 8, 9)
    assert "memcpy_type is 9" in str(err.value)
    with pytest.raises(odla.OdlaError):
        odla.free_device_memory(np.zeros(3))
    odla.free_device_memory(memory)
    with pytest.raises(odla.OdlaError) as err:
        odla.free_device_memory(memory)
    assert "freed" in str(err.value)
    with pytest.raises(odla.OdlaError):
        odla.free_host_memory("buffer")
