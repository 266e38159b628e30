"""Bad input gets an OdlaError with the right ODLA status and a message naming the value,
what was expected and what was given; nothing crashes and no caller data is overwritten."""

import os

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import MemoryLayout as L
from odla_tvm import Status
from odla_tvm import ValueType as VT


def expect_error(status, *fragments):
    """Context manager: an OdlaError with ``status`` whose message holds each fragment."""

    class Check:
        def __enter__(self):
            self.raises = pytest.raises(odla.OdlaError)
            self.info = self.raises.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.raises.__exit__(*exc)
            assert self.info.value.status == status, str(self.info.value)
            for fragment in fragments:
                assert fragment in str(self.info.value), (fragment, str(self.info.value))
            return suppressed

    return Check()


@pytest.fixture
def scale_model():
    """y = x * 2 over a (2, 3) float32 argument, compiled."""
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, 3)), "x")
    two = odla.create_constant(VT(E.FLOAT32, ()), np.array(2.0, np.float32))
    y = odla.mul(x, two, "y")
    odla.set_value_as_output(y)
    return comp, x, y, odla.compile_computation(comp, None)


def test_unknown_value_id(scale_model):
    ctx = odla.create_context()
    with expect_error(Status.INVALID_PARAM, "'nope'"):
        odla.find_value_by_id("nope")
    with expect_error(Status.INVALID_PARAM, "'nope'"):
        odla.bind_to_argument_by_id("nope", np.zeros((2, 3), np.float32), ctx)
    with expect_error(Status.INVALID_PARAM, "'nope'"):
        odla.bind_to_output_by_id("nope", np.zeros(6, np.float32), ctx)
    with expect_error(Status.INVALID_PARAM, "'nope'"):
        odla.set_value_as_output_by_id("nope")


def test_unknown_id_bound_without_computation_is_refused_at_launch(scale_model):
    comp, x, y, exe = scale_model
    loaded = odla.load_executable(odla.store_executable(None, exe))
    odla.destroy_computation(comp)  # no current computation: ids are checked at launch
    ctx = odla.create_context()
    odla.bind_to_argument_by_id("nope", np.zeros((2, 3), np.float32), ctx)
    with expect_error(Status.INVALID_PARAM, "nope", "'x'"):
        odla.launch_executable(loaded, ctx)


@pytest.mark.parametrize("data,fragments", [
    (np.zeros((3, 2), np.float32), ["(3, 2)", "(2, 3)"]),
    (np.zeros((2, 3, 1), np.float32), ["(2, 3, 1)"]),
    (np.zeros((2, 3), np.float64), ["float64", "float32"]),
    (np.zeros((2, 3), np.int32), ["int32", "float32"]),
], ids=["transposed", "extra-dim", "float64", "int32"])
def test_bound_array_of_wrong_shape_or_dtype(scale_model, data, fragments):
    comp, x, y, exe = scale_model
    ctx = odla.create_context()
    with expect_error(Status.INVALID_PARAM, "'x'", *fragments):
        odla.bind_to_argument(x, data, ctx)
    with expect_error(Status.INVALID_PARAM, "'x'"):
        odla.Session(exe).run({"x": data})


def test_a_shape_error_explains_minus_one_only_where_the_shape_has_one(scale_model):
    comp, x, y, exe = scale_model
    with pytest.raises(odla.OdlaError) as err:
        odla.bind_to_argument(x, np.zeros((3, 3), np.float32), odla.create_context())
    assert "expected (2, 3)" in str(err.value) and "-1" not in str(err.value)
    with pytest.raises(odla.OdlaError, match=r"expected \(-1, 3\) \(-1: any size\)"):
        odla.bind_to_argument(
            odla.create_argument(VT(E.FLOAT32, (-1, 3)), "d"), np.zeros(3, np.float32),
            odla.create_context())


def test_an_empty_model_file_is_named_in_its_error(tmp_path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with expect_error(Status.INVALID_PARAM, repr(str(path)), "no graph"):
        odla.Session.from_onnx(path)


def test_output_buffer_of_wrong_size_or_kind(scale_model):
    comp, x, y, exe = scale_model
    ctx = odla.create_context()
    with expect_error(Status.INVALID_PARAM, "'y'", "5 elements", "6"):
        odla.bind_to_output(y, np.zeros(5, np.float32), ctx)
    with expect_error(Status.INVALID_PARAM, "'y'", "float64"):
        odla.bind_to_output(y, np.zeros(6, np.float64), ctx)
    with expect_error(Status.INVALID_PARAM, "'y'", "list"):
        odla.bind_to_output(y, [0.0] * 6, ctx)
    with expect_error(Status.INVALID_PARAM, "'y'", "writable"):
        odla.bind_to_output(y, np.broadcast_to(np.zeros(1, np.float32), (6,)), ctx)
    with expect_error(Status.INVALID_PARAM, "'x'", "not an output"):
        odla.bind_to_output(x, np.zeros(6, np.float32), ctx)


def test_dynamic_output_buffer_too_small_is_left_untouched():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (-1,)), "x")
    y = odla.neg(x, "y")
    z = odla.exp(x, "z")
    odla.set_values_as_output([z, y])
    ctx = odla.create_context()
    odla.bind_to_argument(x, np.ones(4, np.float32), ctx)
    z_buffer = np.full(4, 7.0, np.float32)
    y_buffer = np.full(3, 7.0, np.float32)
    odla.bind_to_output(z, z_buffer, ctx)
    odla.bind_to_output(y, y_buffer, ctx)
    with expect_error(Status.INVALID_PARAM, "'y'", "3 elements", "4"):
        odla.execute_computation(comp, ctx, odla.ComputeMode.DEFAULT, None)
    # No output is written unless all fit: the caller's buffers keep their data.
    np.testing.assert_array_equal(z_buffer, np.full(4, 7.0, np.float32))
    np.testing.assert_array_equal(y_buffer, np.full(3, 7.0, np.float32))


def test_unbound_argument_and_no_outputs():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2,)), "x")
    ctx = odla.create_context()
    with expect_error(Status.INVALID_PARAM, "no outputs", "set_value_as_output"):
        odla.execute_computation(comp, ctx, odla.ComputeMode.DEFAULT, None)
    with expect_error(Status.INVALID_PARAM, "no outputs"):
        odla.compile_computation(comp, None)
    odla.set_value_as_output(odla.relu(x))
    with expect_error(Status.INVALID_PARAM, "'x'", "not bound"):
        odla.execute_computation(comp, ctx, odla.ComputeMode.DEFAULT, None)


def _image(shape=(1, 1, 4, 4)):
    odla.create_computation()
    return odla.create_argument(VT(E.FLOAT32, shape), "image")


def test_kernel_larger_than_padded_input():
    x = _image()
    kernel = odla.create_constant(VT(E.FLOAT32, (1, 1, 7, 7)), np.ones((1, 1, 7, 7), np.float32))
    with expect_error(Status.INVALID_PARAM, "Conv", "window extent 7", "padded input 6"):
        odla.conv(x, L.CHANNELS_FIRST, 1, kernel, L.OIS, (1, 1), (1, 1), (1, 1), (1, 1))
    with expect_error(Status.INVALID_PARAM, "MaxPool", "window extent 5", "padded input 4"):
        odla.max_pool(x, L.CHANNELS_FIRST, (5, 5), (1, 1), (0, 0), (0, 0))
    with expect_error(Status.INVALID_PARAM, "AveragePool", "window extent 9"):
        odla.average_pool(x, L.CHANNELS_FIRST, (9, 2), (1, 1), (1, 0), (1, 0), True)
    with expect_error(Status.INVALID_PARAM, "Conv", "dilation"):
        k3 = odla.create_constant(VT(E.FLOAT32, (1, 1, 3, 3)), np.ones((1, 1, 3, 3), np.float32))
        odla.conv(x, L.CHANNELS_FIRST, 1, k3, L.OIS, (1, 1), (3, 3), (0, 0), (0, 0))


@pytest.mark.parametrize("call,fragments", [
    (lambda x: odla.max_pool(x, L.CHANNELS_FIRST, (2, 2), (0, 1), (0, 0), (0, 0)), ["strides", ">= 1"]),
    (lambda x: odla.max_pool(x, L.CHANNELS_FIRST, (2,), (1,), (0,), (0,)), ["1 entries", "expected 2"]),
    (lambda x: odla.max_pool(x, 7, (2, 2), (1, 1), (0, 0), (0, 0)), ["input_layout", "7"]),
    (lambda x: odla.softmax(x, 4), ["axis is 4"]),
    (lambda x: odla.transpose(x, (0, 1, 1, 2)), ["(0, 1, 1, 2)"]),
    (lambda x: odla.squeeze(x, 1, (2,)), ["axis 2", "size 4"]),
    (lambda x: odla.slice(x, (0, 0), (1, 1), (1, 1)), ["start has 2 entries", "expected 4"]),
    (lambda x: odla.clamp(x, 2.0, 1.0), ["lo 2.0", "hi 1.0"]),
    (lambda x: odla.reduce_sum(x, 1, (5,), False), ["axes [5]"]),
    (lambda x: odla.expand_dims(x, (1, 1, 3, 4)), ["ExpandDims"]),
    (lambda x: odla.max_pool(x, L.CHANNELS_FIRST, (2, 2), (2, 2), (0, 0), (0, 0),
                             output_dims=(1, 1, 3, 3)),
     ["output_dims (1, 1, 3, 3)", "(1, 1, 2, 2)"]),
], ids=["zero-stride", "window-rank", "layout", "softmax-axis", "not-a-permutation",
        "squeeze-non-unit", "slice-rank", "clamp-bounds", "reduce-axis", "broadcast",
        "output-dims"])
def test_impossible_attributes(call, fragments):
    x = _image()
    with expect_error(Status.INVALID_PARAM, *fragments):
        call(x)


def test_reshape_to_another_element_count():
    x = _image()
    with expect_error(Status.INVALID_PARAM, "Reshape", "16", "15"):
        odla.reshape(x, (3, 5))


def test_operand_errors():
    x = _image()
    other = odla.create_computation()
    y = odla.create_argument(VT(E.INT32, (1, 1, 4, 4)), "y")
    with expect_error(Status.INVALID_PARAM, "another computation"):
        odla.relu(x)
    with expect_error(Status.INVALID_PARAM, "float32", "int32"):
        odla.add(odla.cast(y, E.FLOAT32), y)
    with expect_error(Status.INVALID_PARAM, "ndarray", "expected an odla Value"):
        odla.relu(np.zeros(3))
    with expect_error(Status.INVALID_PARAM, "'y'", "already names"):
        odla.create_argument(VT(E.FLOAT32, (1,)), "y")
    with expect_error(Status.UNSUPPORTED_DATATYPE, "STRING"):
        odla.cast(y, E.STRING)
    with expect_error(Status.INVALID_PARAM, "constant data", "(2,)", "(3,)"):
        odla.create_constant(VT(E.FLOAT32, (3,)), np.zeros(2, np.float32))
    assert other is not None


def test_corrupted_truncated_or_foreign_executable_files(scale_model, tmp_path):
    comp, x, y, exe = scale_model
    good = tmp_path / "model.odla"
    odla.store_executable(good, exe)
    blob = good.read_bytes()
    cases = {
        "truncated-header": (blob[:10], "shorter than"),
        "truncated-body": (blob[: len(blob) // 2], "truncated"),
        "flipped-byte": (blob[:-100] + bytes([blob[-100] ^ 0xFF]) + blob[-99:], "checksum"),
        "foreign": (b"\x7fELF" + bytes(64), "starts with"),
        "bad-manifest": (blob[:20] + b"x" + blob[21:], "manifest"),
    }
    for name, (data, fragment) in cases.items():
        path = tmp_path / f"{name}.odla"
        path.write_bytes(data)
        with expect_error(Status.INVALID_PARAM, fragment):
            odla.load_executable(path)
        with expect_error(Status.INVALID_PARAM, fragment):
            odla.load_executable(data)
    with expect_error(Status.FILE_NOT_EXIST, "missing.odla"):
        odla.load_executable(tmp_path / "missing.odla")
    with expect_error(Status.INVALID_PARAM, "int"):
        odla.load_executable(42)
    # The good file still loads after all that.
    np.testing.assert_array_equal(odla.Session(good).run({"x": np.ones((2, 3), np.float32)})[0],
                                  np.full((2, 3), 2.0, np.float32))


def test_store_never_leaves_partial_files(scale_model, tmp_path):
    comp, x, y, exe = scale_model
    with expect_error(Status.FILE_NOT_EXIST, "does not exist"):
        odla.store_executable(tmp_path / "no-such-dir" / "m.odla", exe)
    target = tmp_path / "m.odla"
    target.write_bytes(b"earlier data")
    odla.destroy_executable(exe)
    with expect_error(Status.INVALID_PARAM, "destroyed"):
        odla.store_executable(target, exe)
    assert target.read_bytes() == b"earlier data"
    assert os.listdir(tmp_path) == ["m.odla"]


def test_device_and_mode_errors(scale_model):
    comp, x, y, exe = scale_model
    with expect_error(Status.UNSUPPORTED_DEVICE_TYPE, "NVIDIA_TENSORRT", "DEFAULT"):
        odla.allocate_device(None, odla.DeviceName.NVIDIA_TENSORRT, 0)
    with expect_error(Status.UNSUPPORTED_DEVICE_TYPE, "99"):
        odla.allocate_device(None, 99, 0)
    with expect_error(Status.INVALID_PARAM, "index 3"):
        odla.allocate_device(None, odla.DeviceName.DEFAULT, 3)
    device = odla.allocate_device()
    with expect_error(Status.INVALID_PARAM, "POWER_USAGE"):
        odla.get_device_info(device, odla.DeviceInfo.POWER_USAGE)
    ctx = odla.create_context()
    odla.bind_to_argument(x, np.ones((2, 3), np.float32), ctx)
    with expect_error(Status.INVALID_PARAM, "no variables", "create_variable"):
        odla.execute_computation(comp, ctx, odla.ComputeMode.TRAINING, device)
    with expect_error(Status.INVALID_PARAM, "compute mode is 7"):
        odla.execute_computation(comp, ctx, 7, device)
    odla.destroy_device(device)
    with expect_error(Status.INVALID_PARAM, "destroyed"):
        odla.compile_computation(comp, device)


def test_devices_are_named_by_strings_and_a_wrong_name_lists_the_valid_ones(scale_model):
    comp, x, y, exe = scale_model
    assert odla.allocate_device(device_name="INTEL_X86").name == odla.DeviceName.INTEL_X86
    assert odla.allocate_device(device_name="intel_x86").name == odla.DeviceName.INTEL_X86
    assert odla.allocate_device(device_name="CPU").name == odla.DeviceName.DEFAULT
    with expect_error(Status.UNSUPPORTED_DEVICE_TYPE, "'TPU'", "INTEL_X86", "INTEL_DNNL"):
        odla.allocate_device(device_name="TPU")
    if odla.DeviceName.NVIDIA_GPU not in odla.available_devices():
        with expect_error(Status.UNSUPPORTED_DEVICE_TYPE, "NVIDIA_GPU", "no CUDA device"):
            odla.allocate_device(device_name="GPU")
    session = odla.Session(comp, "INTEL_X86")
    (out,) = session.run({x.id: np.ones((2, 3), np.float32)})
    assert out.shape == (2, 3) and out.dtype == np.float32


def test_session_feed_errors(scale_model):
    comp, x, y, exe = scale_model
    session = odla.Session(exe)
    with expect_error(Status.INVALID_PARAM, "unknown: ['z']", "missing: ['x']"):
        session.run({"z": np.ones((2, 3), np.float32)})
    with expect_error(Status.INVALID_PARAM, "list"):
        session.run([np.ones((2, 3), np.float32)])
    with expect_error(Status.INVALID_PARAM, "['w']"):
        session.run({"x": np.ones((2, 3), np.float32)}, ["w"])
    with expect_error(Status.INVALID_PARAM, "int"):
        odla.Session(12)


@pytest.mark.parametrize("call", [
    lambda: odla.get_value_type("x"),
    lambda: odla.get_value_id(None),
    lambda: odla.set_value_as_output(3),
    lambda: odla.create_argument((E.FLOAT32, (1,)), "a"),
    lambda: odla.get_num_of_args_from_computation(None),
    lambda: odla.get_arg_from_computation_by_idx(odla.create_computation(), 0),
    lambda: odla.set_computation_item(odla.create_computation(), 99, 1),
    lambda: odla.set_context_item(odla.create_context(), -1, 1),
    lambda: odla.bind_to_argument(None, np.zeros(1), odla.create_context()),
    lambda: odla.launch_executable("exe", odla.create_context()),
    lambda: odla.get_num_of_outputs_from_executable(None),
    lambda: odla.get_value_data(None),
    lambda: odla.get_runtime_shape("ctx", None),
    lambda: odla.compile_computation(odla.create_computation(), 3.5),
    lambda: odla.store_executable("x.odla", None),
    lambda: odla.ValueType(99, (1,)),
    lambda: odla.ValueShape((1, -2)),
    lambda: odla.ValueShape(("a",)),
], ids=lambda f: "")
def test_wrong_handle_types_are_refused(call):
    with pytest.raises(odla.OdlaError) as err:
        call()
    assert err.value.status in (Status.INVALID_PARAM, Status.UNSUPPORTED_DATATYPE)
    assert "expected" in str(err.value)
