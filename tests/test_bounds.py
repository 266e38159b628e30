"""Kernels that address memory with run-time indices check them: an index outside
[-n, n-1] fails the run with OdlaError naming the op, the value, the index and the range,
never a wrapped or out-of-bounds read. ONNX's negative indices keep their meaning."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import Status
from odla_tvm import ValueType as VT

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = np.arange(40, dtype=np.float32).reshape(10, 4)


def model(op, indices_shape, output_shape, **attrs):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 4]),
              helper.make_tensor_value_info("i", TensorProto.INT64, indices_shape)]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)
    graph = helper.make_graph([helper.make_node(op, ["x", "i"], ["y"], **attrs)], op, inputs,
                              [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# op, indices shape, output shape, attributes, where a bad index goes, its allowed range
CASES = {
    "Gather": ([3], [3, 4], {"axis": 0}, (2,), "expected -10 to 9"),
    "GatherElements": ([2, 4], [2, 4], {"axis": 0}, (1, 3), "expected -10 to 9"),
    "GatherND": ([2, 2], [2], {}, (1, 1), "expected -4 to 3"),
}
VALID = {  # in range, negatives among them
    "Gather": np.array([1, -1, -10]),
    "GatherElements": np.array([[0, -1, 9, -10], [3, -4, 5, -6]]),
    "GatherND": np.array([[1, -1], [-10, 3]]),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def session(request):
    op = request.param
    indices_shape, output_shape, attrs, _, _ = CASES[op]
    onnx_model = model(op, indices_shape, output_shape, **attrs)
    return op, onnx_model, odla.Session.from_onnx(onnx_model)


def test_valid_negative_indices_match_onnxruntime(session):
    op, onnx_model, sess = session
    (expected,) = ort.InferenceSession(onnx_model.SerializeToString()).run(
        None, {"x": DATA, "i": VALID[op]})
    (got,) = sess.run({"x": DATA, "i": VALID[op]})
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("bad", [10, -11, 1 << 40], ids=["too-big", "too-negative", "huge"])
def test_out_of_range_index_is_refused(session, bad):
    op, _, sess = session
    _, _, _, where, allowed = CASES[op]
    if op == "GatherND" and bad == 10:
        bad = 4  # the second entry of an index tuple addresses the 4 columns
    if op == "GatherND" and bad == -11:
        bad = -5
    indices = VALID[op].copy()
    indices[where] = bad
    with pytest.raises(odla.OdlaError) as err:
        sess.run({"x": DATA, "i": indices})
    assert err.value.status is Status.INVALID_PARAM
    for part in (op, "'y'", f"index {bad} ", allowed):
        assert part in str(err.value)


def test_huge_indices_never_crash_the_process():
    """The case that read memory it did not own (and killed the process) before the checks;
    run in a child process so that a regression cannot take pytest down with it."""
    script = textwrap.dedent(f"""
        import numpy as np, odla_tvm as odla
        from tests.test_bounds import CASES, DATA, VALID, model
        for op, (indices_shape, output_shape, attrs, where, _) in sorted(CASES.items()):
            sess = odla.Session.from_onnx(model(op, indices_shape, output_shape, **attrs))
            indices = VALID[op].copy()
            indices[where] = {1 << 40}
            try:
                sess.run({{"x": DATA, "i": indices}})
                print(op, "ran")
            except odla.OdlaError as err:
                print(op, err.status.name)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [w for op in sorted(CASES) for w in (op, "INVALID_PARAM")]


def _launch(comp, feeds):
    exe = odla.compile_computation(comp)
    ctx = odla.create_context()
    for value_id, data in feeds.items():
        odla.bind_to_argument_by_id(value_id, data, ctx)
    odla.launch_executable(exe, ctx)
    return ctx


def test_odla_api_gather_refuses_an_index_past_the_end():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (10, 4)), "table")
    i = odla.create_argument(VT(E.INT32, (3,)), "ids")
    odla.set_value_as_output(odla.gather(x, i, 1, value_id="rows"))
    ctx = _launch(comp, {"table": DATA, "ids": np.array([0, -4, 3], np.int32)})
    np.testing.assert_array_equal(odla.get_value_data("rows", None, ctx), DATA[:, [0, 0, 3]])
    with pytest.raises(odla.OdlaError, match=r"Gather 'rows', axis 1 of the input: index 4 .*"
                                             r"expected -4 to 3"):
        _launch(comp, {"table": DATA, "ids": np.array([0, 4, 3], np.int32)})


def test_odla_api_gather_nd_and_elements_refuse_bad_indices():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (10, 4)), "x")
    tuples = odla.create_argument(VT(E.INT64, (2, 2)), "tuples")
    odla.set_value_as_output(odla.gather_nd(x, tuples, 0, value_id="picked"))
    with pytest.raises(odla.OdlaError, match=r"GatherND 'picked': index -5 .*expected -4 to 3"):
        _launch(comp, {"x": DATA, "tuples": np.array([[0, 0], [0, -5]])})
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (10, 4)), "x")
    where = odla.create_argument(VT(E.INT64, (1, 4)), "where")
    odla.set_value_as_output(odla.gather_elements(x, where, 0, value_id="along"))
    with pytest.raises(odla.OdlaError, match=r"GatherElements 'along', axis 0.*index -11 "):
        _launch(comp, {"x": DATA, "where": np.array([[0, 1, 2, -11]])})


def test_one_hot_out_of_depth_gives_off_rows_as_onnxruntime():
    """ONNX: an index outside [-depth, depth-1] is a row of off values, not an error."""
    inputs = [helper.make_tensor_value_info("i", TensorProto.INT64, [6])]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4])
    graph = helper.make_graph(
        [helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=-1)], "onehot",
        inputs, [output],
        [onnx.numpy_helper.from_array(np.array(4, np.int64), "depth"),
         onnx.numpy_helper.from_array(np.array([-1.0, 5.0], np.float32), "values")])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    indices = np.array([0, -1, 4, -5, 1 << 40, 3])
    (expected,) = ort.InferenceSession(onnx_model.SerializeToString()).run(None, {"i": indices})
    (got,) = odla.Session.from_onnx(onnx_model).run({"i": indices})
    np.testing.assert_array_equal(got, expected)
    assert (got[[2, 3, 4]] == -1.0).all()


@pytest.mark.parametrize("op", ["roi_align", "roi_max_pool"])
def test_roi_batch_index_outside_the_batch_is_refused(op):
    """TOPI reads the input through each ROI's batch index unchecked: one past the batch (or
    negative) fails the run naming the op and the index; in-range ROIs match a reference."""
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    comp = odla.create_computation()
    data = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
    rois = odla.create_argument(VT(E.FLOAT32, (2, 5)), "rois")
    if op == "roi_align":
        y = odla.roi_align(data, odla.MemoryLayout.CHANNELS_FIRST, rois, 2, 1.0, (2, 3, 2, 2),
                           value_id="y")
    else:
        y = odla.roi_max_pool(data, odla.MemoryLayout.CHANNELS_FIRST, rois, 2, 2, 1.0,
                              (2, 3, 2, 2), value_id="y")
    odla.set_value_as_output(y)
    session = odla.Session(odla.compile_computation(comp, odla.allocate_device()))
    whole = np.array([[1, 0, 0, 7, 7], [0, 0, 0, 7, 7]], np.float32)  # each image entire
    result = session.run({"x": x, "rois": whole})[0]
    if op == "roi_max_pool":  # a bin's max, the whole image's 2x2 quarters
        quarters = x.reshape(2, 3, 2, 4, 2, 4).max(axis=(3, 5))
        np.testing.assert_allclose(result, quarters[[1, 0]], rtol=1e-6)
    assert result.shape == (2, 3, 2, 2) and result.dtype == np.float32
    for batch in (2, -1, 1 << 40):
        bad = whole.copy()
        bad[1, 0] = batch
        with pytest.raises(odla.OdlaError) as err:
            session.run({"x": x, "rois": bad})
        assert err.value.status == Status.INVALID_PARAM
        message = str(err.value)
        assert "'y'" in message and "batch indices" in message and "expected 0 to 1" in message
        assert f"index {int(np.float32(batch))}" in message


@pytest.mark.parametrize("op", ["Div", "Mod", "Reciprocal"])
def test_integer_division_by_zero_is_refused(op):
    """An integer division by a zero read at run time kills a process with SIGFPE: it fails
    the run with OdlaError instead, naming the op and the element; other divisors match
    NumPy."""
    unary = op == "Reciprocal"
    inputs = [helper.make_tensor_value_info("a", TensorProto.INT32, [4])]
    if not unary:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.INT32, [4]))
    node = helper.make_node(op, ["a"] if unary else ["a", "b"], ["y"],
                            **({"fmod": 0} if op == "Mod" else {}))
    graph = helper.make_graph([node], op, inputs,
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [4])])
    session = odla.Session.from_onnx(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]))
    a, b = np.array([7, -7, 9, 1], np.int32), np.array([2, 3, -4, 1], np.int32)
    feeds = {"a": b} if unary else {"a": a, "b": b}
    want = {"Div": np.trunc(a / b), "Mod": np.mod(a, b), "Reciprocal": np.trunc(1 / b)}[op]
    np.testing.assert_array_equal(session.run(feeds)[0], want.astype(np.int32))
    zero = np.array([2, 3, 0, 1], np.int32)
    with pytest.raises(odla.OdlaError) as err:
        session.run({"a": zero} if unary else {"a": a, "b": zero})
    assert err.value.status == Status.INVALID_PARAM
    assert f"{op} 'y' divides by zero (element 2 of the divisor)" in str(err.value)


def test_reshape_with_a_zero_beside_minus_one_is_refused_not_a_crash():
    """A run-time shape must hold the input's elements: (0, -1) with zeros allowed left
    nothing to infer -1 from (its shape arithmetic divided by zero: SIGFPE), and (3, 100) made
    a view reading past the input. Now the run fails with OdlaError; a good shape still
    reshapes."""
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, 6)), "x")
    shape = odla.create_argument(VT(E.INT64, (2,)), "s")
    odla.set_value_as_output(odla.reshape_dynamic(x, shape, allow_zero=True))
    session = odla.Session(odla.compile_computation(comp, odla.allocate_device()))
    data = np.arange(12, dtype=np.float32).reshape(2, 6)
    good = session.run({"x": data, "s": np.array([3, -1], np.int64)})[0]
    np.testing.assert_array_equal(good, data.reshape(3, 4))
    # (3, 100) would read 288 elements past the input's 12.
    for bad in ([0, -1], [3, 100], [-1, -1], [5, -1]):
        with pytest.raises(odla.OdlaError) as err:
            session.run({"x": data, "s": np.array(bad, np.int64)})
        assert err.value.status == Status.INVALID_PARAM
        assert f"shape {bad} does not fit the 12 elements of 2x6" in str(err.value)
