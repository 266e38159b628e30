"""Bad feeds on every run path: each gives OdlaError naming the value, what it expected and
what it got, or (for data that is only awkwardly laid out) the correct result."""

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import ValueType as VT
from odla_tvm.frontends import onnx_backend

X = np.arange(6, dtype=np.float32).reshape(2, 3)
EXPECTED = X * 2 + 1


def _computation():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, 3)), "x")
    two = odla.create_constant(VT(E.FLOAT32, ()), np.float32(2))
    one = odla.create_constant(VT(E.FLOAT32, ()), np.float32(1))
    odla.set_value_as_output(odla.add(odla.mul(x, two), one, "y"))
    return comp


def _onnx_model():
    nodes = [helper.make_node("Mul", ["x", "two"], ["t"]), helper.make_node("Add", ["t", "one"], ["y"])]
    graph = helper.make_graph(
        nodes, "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
         helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def runners():
    comp = _computation()
    session = odla.Session(comp)
    exe = odla.compile_computation(comp)
    odla.destroy_computation(comp)
    backend = onnx_backend.prepare(_onnx_model())

    def launch(feed):
        ctx = odla.create_context()
        odla.bind_to_argument_by_id("x", feed, ctx)
        odla.launch_executable(exe, ctx)
        return odla.get_value_data("y", None, ctx)

    def async_launch(feed):
        ctx = odla.create_context()
        odla.bind_to_argument_by_id("x", feed, ctx)
        odla.async_launch_executable(exe, None, ctx).wait(timeout=60)
        return odla.get_value_data("y", None, ctx)

    def interpreted(feed):
        comp = odla.create_computation()
        try:
            x = odla.create_value(VT(E.FLOAT32, (2, 3)), "x")
            odla.set_value_data(x, feed)
            two = odla.create_constant(VT(E.FLOAT32, ()), np.float32(2))
            one = odla.create_constant(VT(E.FLOAT32, ()), np.float32(1))
            return odla.get_value_data(odla.add(odla.mul(x, two), one))
        finally:  # the by-id runs bind in the executable, with no current computation
            odla.destroy_computation(comp)

    return {
        "session": lambda feed: session.run({"x": feed})[0],
        "launch": launch,
        "backend": lambda feed: backend.run([feed])[0],
        "async": async_launch,
        "interpreter": interpreted,
    }


def _read_only():
    x = X.copy()
    x.flags.writeable = False
    return x


class OnDevice:
    """A DLPack tensor that says it lies on another device (no GPU here): its memory must
    never be read as the host's. (Its capsule is the host array's, so reading it would not
    crash this test; a real CUDA tensor's would.)"""

    def __init__(self, device_type: int, device_id: int):
        self.device = (device_type, device_id)

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        return X.copy().__dlpack__()


GOOD = {  # awkward but valid: a correct result
    "tvm tensor on the CPU": tvm.runtime.tensor(X.copy(), tvm.cpu(0)),
    "non-contiguous": np.asfortranarray(X),
    "strided view": np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2] * 0 + X,
    "read-only": _read_only(),
}
BAD = {  # wrong: OdlaError whose message names these parts
    "wrong dtype": (X.astype(np.float64), ["'x'", "float64", "float32"]),
    "wrong shape": (np.zeros((3, 2), np.float32), ["'x'", "3, 2", "2, 3"]),
    "wrong rank": (np.zeros((6,), np.float32), ["'x'", "6", "2, 3"]),
    # The given part: what the caller passed, or NumPy's reading of it where a runner reads
    # it as an array first (the onnx Backend; a by-id binding, checked at launch).
    "None": (None, ["'x'", "float32", ("None", "object")]),
    "Python list": (X.tolist(), ["'x'", "float32", ("list", "float64")]),
    "huge shape": (np.broadcast_to(np.float32(0), (1 << 20, 1 << 20)), ["'x'", "1048576"]),
    # The device found and the one expected (DLPack device types 2: CUDA, 10: ROCm).
    "CUDA tensor": (OnDevice(2, 0), ["'x'", "CUDA:0", "host CPU memory"]),
    "ROCm tensor": (OnDevice(10, 1), ["'x'", "ROCm:1", "host CPU memory"]),
}
PATHS = ["session", "launch", "backend", "async", "interpreter"]


@pytest.mark.parametrize("kind", sorted(GOOD))
@pytest.mark.parametrize("path", PATHS)
def test_awkward_but_valid_feed_gives_the_right_result(runners, path, kind):
    got = runners[path](GOOD[kind])
    assert got.dtype == np.float32 and got.shape == (2, 3)
    np.testing.assert_array_equal(got, EXPECTED)


@pytest.mark.parametrize("kind", sorted(BAD))
@pytest.mark.parametrize("path", PATHS)
def test_bad_feed_is_refused_with_a_message(runners, path, kind):
    feed, parts = BAD[kind]
    with pytest.raises(odla.OdlaError) as err:
        runners[path](feed)
    for part in parts:
        assert any(p in str(err.value) for p in ((part,) if isinstance(part, str) else part)), \
            (part, str(err.value))
