"""The ODLA object model: enum values from the ODLA 0.5 headers, devices, lookups, contexts."""

import os
import threading

import ml_dtypes
import numpy as np
import pytest
import tvm

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import Status
from odla_tvm import ValueType as VT


def test_enum_values_are_odla_0_5():
    # Values as numbered in HALO's ODLA/include/ODLA/*.h (C enums counting from 0).
    assert (E.INT8, E.UINT8, E.QINT8, E.FLOAT16, E.BFLOAT16, E.FLOAT32, E.BOOL, E.STRING) == (
        0, 4, 8, 16, 17, 18, 20, 21)
    assert (Status.SUCCESS, Status.INVALID_PARAM, Status.UNSUPPORTED_OP, Status.FAILURE) == (0, 3, 7, 14)
    assert (odla.ItemType.DYNAMIC_BATCH, odla.ItemType.FP16_MODE, odla.ItemType.CACHE_DIR,
            odla.ItemType.ASYNC_CALLBACK_ARG) == (0, 14, 25, 27)
    assert len(odla.ItemType) == 28
    assert (odla.ComputeMode.DEFAULT, odla.ComputeMode.INFERENCE, odla.ComputeMode.TRAINING) == (0, 1, 2)
    assert (odla.MemoryLayout.CHANNELS_LAST, odla.MemoryLayout.SIO, odla.MemoryLayout.IOS) == (1, 2, 5)
    assert (odla.DeviceName.INTEL_X86, odla.DeviceName.INTEL_DNNL, odla.DeviceName.NVIDIA_GPU) == (8, 9, 10)
    assert (odla.DeviceInfo.ODLA_LIB_VERSION, odla.DeviceInfo.TOTAL_MEMORY,
            odla.DeviceInfo.SDK_VERSION) == (0, 7, 12)


def test_value_shape_and_type():
    shape = odla.ValueShape((2, -1, 3))
    assert shape.size == 3 and shape.is_dynamic and shape.matches((2, 7, 3))
    assert not shape.matches((2, 7, 4)) and not shape.matches((2, 7))
    vt = VT(E.FLOAT32, (2, 3))
    assert vt.dtype == np.float32 and vt.shape == odla.ValueShape((2, 3))
    assert VT(E.QUINT8, (1,)).dtype == np.uint8
    assert VT(E.BFLOAT16, (1,)).dtype.name == "bfloat16"


def test_a_bfloat16_constant_keeps_its_values():
    """A constant of a dtype NumPy cannot view through DLPack (bfloat16) is copied in: NumPy
    2.4 refuses the view with a RuntimeError, which failed the import (onnx's bfloat16
    Range case)."""
    constant = np.array([1.5, -2.25, 3.0], ml_dtypes.bfloat16)
    x = np.array([0.5, 0.25, -1.0], ml_dtypes.bfloat16)
    computation = odla.create_computation()
    argument = odla.create_argument(VT(E.BFLOAT16, (3,)), "x")
    odla.set_value_as_output(odla.add(argument, odla.create_constant(VT(E.BFLOAT16, (3,)),
                                                                     constant)))
    executable = odla.compile_computation(computation, odla.allocate_device(
        device_name=odla.DeviceName.INTEL_X86))
    (got,) = odla.Session(executable).run({"x": x})
    odla.destroy_computation(computation)
    assert got.dtype == ml_dtypes.bfloat16 and got.shape == (3,)
    np.testing.assert_array_equal(got.astype(np.float32), [2.0, -2.0, 2.0])


def test_device_info_for_host_cpu():
    device = odla.allocate_device(None, odla.DeviceName.DEFAULT, 0)
    info = lambda item: odla.get_device_info(device, item)  # noqa: E731
    assert info(odla.DeviceInfo.DEV_COUNT) == 1
    assert info(odla.DeviceInfo.DEV_INDEX) == 0
    assert odla.__version__ in info(odla.DeviceInfo.ODLA_LIB_VERSION)
    assert tvm.__version__ in info(odla.DeviceInfo.SDK_VERSION)
    assert tvm.target.codegen.llvm_get_system_cpu() in info(odla.DeviceInfo.DEV_TYPE)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert abs(info(odla.DeviceInfo.TOTAL_MEMORY) - physical) < 0.1 * physical
    assert 0 < info(odla.DeviceInfo.USED_MEMORY) < info(odla.DeviceInfo.TOTAL_MEMORY)
    assert device.target.target["num-cores"] == len(os.sched_getaffinity(0))
    assert device.target.target["mcpu"] == tvm.target.codegen.llvm_get_system_cpu()
    odla.destroy_device(device)


def _two_input_computation():
    comp = odla.create_computation()
    a = odla.create_argument(VT(E.FLOAT32, (2, 3)), "a")
    b = odla.create_argument(VT(E.FLOAT32, (2, 3)), "b")
    s = odla.add(a, b, "sum")
    p = odla.mul(a, b, "product")
    odla.set_values_as_output([s, p])
    return comp, a, b, s, p


def test_computation_lookups():
    comp, a, b, s, p = _two_input_computation()
    assert odla.get_num_of_args_from_computation(comp) == 2
    assert odla.get_arg_from_computation_by_idx(comp, 1) is b
    assert odla.get_num_of_outputs_from_computation(comp) == 2
    assert odla.get_output_from_computation_by_idx(comp, 0) is s
    assert odla.find_value_by_id("product") is p
    assert odla.get_value_id(p) == "product"
    assert odla.get_value_type(s) == VT(E.FLOAT32, (2, 3))
    exe = odla.compile_computation(comp, odla.allocate_device())
    assert odla.get_num_of_args_from_executable(exe) == 2
    assert odla.get_value_id(odla.get_arg_from_executable_by_idx(exe, 0)) == "a"
    assert odla.get_num_of_outputs_from_executable(exe) == 2
    assert odla.get_value_id(odla.get_output_from_executable_by_idx(exe, 1)) == "product"


def test_bind_by_id_and_output_buffers_filled_in_place():
    comp, a, b, s, p = _two_input_computation()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 2.0, np.float32)
    ctx = odla.create_context()
    odla.bind_to_argument_by_id("a", x, ctx)
    odla.bind_to_argument(b, y, ctx)
    sum_buf = np.zeros(6, np.float32)  # a flat buffer, as a C caller would hand over
    odla.bind_to_output_by_id("sum", sum_buf, ctx)
    odla.execute_computation(comp, ctx, odla.ComputeMode.INFERENCE, None)
    np.testing.assert_array_equal(sum_buf, (x + y).ravel())
    np.testing.assert_array_equal(odla.get_value_data(p, None, ctx), x * y)
    out = np.empty((2, 3), np.float32)
    odla.get_value_data(p, out, ctx)
    np.testing.assert_array_equal(out, x * y)
    assert odla.get_runtime_shape(ctx, s) == odla.ValueShape((2, 3))


def test_execute_computation_compiles_once_per_revision():
    comp, a, b, s, p = _two_input_computation()
    ctx = odla.create_context()
    odla.bind_to_argument(a, np.ones((2, 3), np.float32), ctx)
    odla.bind_to_argument(b, np.ones((2, 3), np.float32), ctx)
    odla.execute_computation(comp, ctx, odla.ComputeMode.DEFAULT, None)
    first = dict(comp.executables)
    odla.execute_computation(comp, ctx, odla.ComputeMode.DEFAULT, None)
    assert comp.executables == first and len(first) == 1
    # A new output changes the computation: the next run recompiles and returns it.
    odla.set_value_as_output(odla.sub(a, b, "difference"))
    odla.execute_computation(comp, ctx, odla.ComputeMode.DEFAULT, None)
    assert comp.executables != first
    np.testing.assert_array_equal(odla.get_value_data(odla.find_value_by_id("difference"), None, ctx),
                                  np.zeros((2, 3), np.float32))


def test_dynamic_batch_argument_runs_at_several_sizes():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (-1, 4)), "x")
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    y = odla.gemm(x, False, odla.create_constant(VT(E.FLOAT32, (4, 3)), w), False, 1.0, 0.0, None)
    assert odla.get_value_type(y).shape.dims == (-1, 3)
    odla.set_value_as_output(y)
    exe = odla.compile_computation(comp, None)
    for batch in (1, 5):
        data = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        ctx = odla.create_context()
        odla.set_runtime_shape(ctx, x, (batch, 4))
        odla.bind_to_argument(x, data, ctx)
        odla.launch_executable(exe, ctx)
        np.testing.assert_allclose(odla.get_value_data(y, None, ctx), data @ w, rtol=1e-5, atol=1e-5)
        assert odla.get_runtime_shape(ctx, y) == odla.ValueShape((batch, 3))


def test_variables_are_read_at_launch_and_survive_store_load():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (3,)), "x")
    v = odla.create_variable(VT(E.FLOAT32, (3,)), "weights")
    odla.set_value_as_output(odla.mul(x, v, "y"))
    np.testing.assert_array_equal(odla.get_value_data(v), np.zeros(3, np.float32))
    weights = np.array([1.0, -2.0, 0.5], np.float32)
    odla.set_value_data(v, weights)
    session = odla.Session(comp)
    x_data = np.array([2.0, 3.0, 4.0], np.float32)
    np.testing.assert_array_equal(session.run({"x": x_data})[0], x_data * weights)
    reloaded = odla.Session(odla.store_executable(None, session.executable))
    np.testing.assert_array_equal(reloaded.run({"x": x_data})[0], x_data * weights)


def test_current_computation_is_per_thread():
    comp = odla.create_computation()
    errors = []

    def other_thread():
        try:
            odla.create_argument(VT(E.FLOAT32, (1,)), "t")
        except odla.OdlaError as err:
            errors.append(err)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1 and errors[0].status == Status.INVALID_PARAM
    assert odla.get_num_of_args_from_computation(comp) == 0
    with odla.Computation() as inner:
        odla.create_argument(VT(E.FLOAT32, (1,)), "inner_arg")
    assert odla.get_num_of_args_from_computation(inner) == 1
    odla.create_argument(VT(E.FLOAT32, (1,)), "outer_arg")  # comp is current again
    assert odla.get_num_of_args_from_computation(comp) == 1


def test_computation_item_is_kept():
    comp = odla.create_computation()
    odla.set_computation_item(comp, odla.ItemType.CACHE_DIR, "/tmp/cache")
    assert comp.items[odla.ItemType.CACHE_DIR] == "/tmp/cache"
    ctx = odla.create_context()
    odla.set_context_item(ctx, odla.ItemType.RUN_BATCH_SIZE, 4)
    assert ctx.items[odla.ItemType.RUN_BATCH_SIZE] == 4


def test_destroyed_objects_refuse_use():
    comp, a, b, s, p = _two_input_computation()
    exe = odla.compile_computation(comp, None)
    ctx = odla.create_context()
    odla.destroy_computation(comp)
    with pytest.raises(odla.OdlaError) as err:
        odla.create_argument(VT(E.FLOAT32, (1,)), "late")
    assert err.value.status == Status.INVALID_PARAM
    odla.destroy_executable(exe)
    with pytest.raises(odla.OdlaError):
        odla.launch_executable(exe, ctx)
    odla.destroy_context(ctx)
    with pytest.raises(odla.OdlaError):
        odla.bind_to_argument(a, np.ones((2, 3), np.float32), ctx)


def test_object_methods_share_the_function_implementation(tmp_path):
    comp, a, b, s, p = _two_input_computation()
    x, y = np.full((2, 3), 3.0, np.float32), np.full((2, 3), 4.0, np.float32)
    ctx = odla.Context()
    ctx.bind_input(a, x)
    ctx.bind_input(b, y)
    comp.execute(ctx)
    np.testing.assert_array_equal(ctx.get_data(s), x + y)
    exe = comp.compile()
    exe.store(tmp_path / "m.odla")
    loaded = odla.Executable.load(tmp_path / "m.odla")
    ctx2 = odla.Context()
    ctx2.bind_input(loaded.args[0], x)
    ctx2.bind_input(loaded.args[1], y)
    loaded.launch(ctx2)
    np.testing.assert_array_equal(ctx2.get_data(loaded.outputs[1]), x * y)
    with pytest.raises(odla.OdlaError, match="holds no data for 'sum'"):
        odla.Context().get_data(s)
