"""Kernels that address memory with run-time indices check them: an index outside
[-n, n-1] fails the run with OdlaError naming the op, the value, the index and the range,
never a wrapped or out-of-bounds read. ONNX's negative indices keep their meaning."""

import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import odla_tvm as odla
import relay_bridge
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


@pytest.mark.slow
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


def test_odla_api_gather_refuses_an_index_past_the_end(capfd):
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (10, 4)), "table")
    i = odla.create_argument(VT(E.INT32, (3,)), "ids")
    odla.set_value_as_output(odla.gather(x, i, 1, value_id="rows"))
    ctx = _launch(comp, {"table": DATA, "ids": np.array([0, -4, 3], np.int32)})
    np.testing.assert_array_equal(odla.get_value_data("rows", None, ctx), DATA[:, [0, 0, 3]])
    with pytest.raises(odla.OdlaError, match=r"Gather 'rows', axis 1 of the input: index 4 .*"
                                             r"expected -4 to 3"):
        _launch(comp, {"table": DATA, "ids": np.array([0, 4, 3], np.int32)})
    # The checked gather is not TOPI's "fast" take, which warns of segfaults at every compile.
    assert "segfault" not in capfd.readouterr().err


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


# -- parameters read at run time: TopK's K against its axis, slice sizes and steps, tile
# repeats, resize sizes and scales, Compress conditions, NMS scores, reshapes of symbolic dims


def _session(build):
    comp = odla.create_computation()
    build()
    return odla.Session(odla.compile_computation(comp, odla.allocate_device()))


def _refused(session, feeds, *parts):
    with pytest.raises(odla.OdlaError) as err:
        session.run(feeds)
    assert err.value.status is Status.INVALID_PARAM
    for part in parts:
        assert part in str(err.value), (part, str(err.value))


def test_topk_refuses_a_k_beyond_an_axis_known_at_run_time():
    """TOPI's topk read past an axis shorter than K (garbage values and indices); a static
    axis was checked at build time only."""
    session = _session(lambda: odla.set_values_as_output(odla.topk(
        odla.create_argument(VT(E.FLOAT32, (-1,)), "x"), 3, True, True, 0,
        VT(E.FLOAT32, (3,)), VT(E.INT64, (3,)), ["v", "i"])))
    x = np.array([3, -0.0, 7, 1, 7], np.float32)
    values, indices = session.run({"x": x})
    np.testing.assert_array_equal(values, [7, 7, 3])
    np.testing.assert_array_equal(indices, [2, 4, 0])
    _refused(session, {"x": x[:2]}, "TopK 'v'", "K 3 is out of range", "expected at most 2")


@pytest.mark.parametrize("op", ["SliceDynamic", "TileDynamic", "ResizeDynamic sizes",
                                "ResizeDynamic scales"])
def test_run_time_sizes_steps_repeats_and_scales_are_checked(op):
    """A negative size, repeat or scale sized a tensor of negative dims (std::bad_alloc, a
    FAILURE), a step of 0 repeated one element (ONNX: invalid), a NaN scale made a dim of
    INT64_MIN; each now fails with INVALID_PARAM naming the op, the parameter, its element
    and what is allowed. Starts still clamp into the input, as ONNX clamps them."""
    x4 = np.arange(24, dtype=np.float32).reshape(4, 6)
    if op == "SliceDynamic":
        def build():
            x = odla.create_argument(VT(E.FLOAT32, (4, 6)), "x")
            start, size, stride = (odla.create_argument(VT(E.INT64, (2,)), n)
                                   for n in ("start", "size", "stride"))
            odla.set_value_as_output(odla.slice_dynamic(x, start, size, stride, value_id="y"))
        session = _session(build)
        feeds = lambda start, size, stride: {"x": x4, "start": np.array(start),  # noqa: E731
                                             "size": np.array(size), "stride": np.array(stride)}
        (got,) = session.run(feeds([1, -2], [2, 2], [2, 1]))
        np.testing.assert_array_equal(got, x4[1::2, -2:])
        (got,) = session.run(feeds([1 << 40, 0], [1, 2], [1, 1]))  # clamped to the last row
        np.testing.assert_array_equal(got, x4[3:, :2])
        _refused(session, feeds([0, 0], [2, -3], [1, 1]), "SliceDynamic 'y'", "size -3 "
                 "(element 1) is out of range; expected at least 0")
        _refused(session, feeds([0, 0], [2, 2], [1, 0]), "SliceDynamic 'y'", "stride 0 "
                 "(element 1) is out of range; expected a non-zero step")
    elif op == "TileDynamic":
        def build():
            x = odla.create_argument(VT(E.FLOAT32, (4, 6)), "x")
            repeat = odla.create_argument(VT(E.INT64, (2,)), "r")
            odla.set_value_as_output(odla.tile_dynamic(x, repeat, value_id="y"))
        session = _session(build)
        for repeat in ([2, 1], [0, 3]):
            (got,) = session.run({"x": x4, "r": np.array(repeat)})
            np.testing.assert_array_equal(got, np.tile(x4, repeat))
        _refused(session, {"x": x4, "r": np.array([1, -1])}, "TileDynamic 'y'",
                 "repeat -1 (element 1) is out of range; expected at least 0")
    else:
        by_scales = op.endswith("scales")

        def build():
            x = odla.create_argument(VT(E.FLOAT32, (1, 1, 4, 6)), "x")
            p = odla.create_argument(VT(E.FLOAT32 if by_scales else E.INT64, (4,)), "p")
            odla.set_value_as_output(odla.resize_dynamic(
                x, p if by_scales else None, None if by_scales else p,
                odla.InterpolationMode.NEAREST, odla.ResizeCoordinateMode.ASSYMMETRIC,
                value_id="y"))
        session = _session(build)
        image = x4.reshape(1, 1, 4, 6)
        good = np.array([1, 1, 2, 2], np.float32 if by_scales else np.int64)
        if not by_scales:
            good = np.array([1, 1, 8, 12])
        (got,) = session.run({"x": image, "p": good})
        np.testing.assert_array_equal(got, image.repeat(2, 2).repeat(2, 3))
        bads = [(-2.0, "-2.0"), (np.nan, "nan"), (np.inf, "inf")] if by_scales else \
            [(-8, "-8"), (0, "0")]
        for bad, shown in bads:
            feed = good.copy()
            feed[3] = bad
            _refused(session, {"x": image, "p": feed}, "ResizeDynamic 'y'",
                     f"{'scale' if by_scales else 'size'} {shown} (element 3) is out of range",
                     "a positive finite scale" if by_scales else "expected at least 1")


def test_compress_refuses_a_condition_longer_than_an_axis_known_at_run_time():
    """A condition longer than an axis known at run time selected past it (a clipped take
    repeated the last slice): refused. A shorter one considers only its entries, as ONNX
    says; one longer than a static axis is cut to it, as onnxruntime does."""
    def build():
        x = odla.create_argument(VT(E.FLOAT32, (-1, 4)), "x")
        condition = odla.create_argument(VT(E.BOOL, (3,)), "c")
        odla.set_value_as_output(odla.compress(x, condition, 0, value_id="y"))
    session = _session(build)
    condition = np.array([True, False, True])
    (got,) = session.run({"x": DATA, "c": condition})
    np.testing.assert_array_equal(got, np.compress(condition, DATA, 0))
    _refused(session, {"x": DATA[:2], "c": condition}, "Compress 'y'",
             "condition length 3 is out of range; expected at most 2")


@pytest.mark.slow
def test_nms_refuses_scores_of_other_boxes_than_given():
    """NMS read boxes by the box indices of the scores, unchecked: scores of 6 boxes for 2
    given read past them, and a max_output_boxes_per_class of 2**40 failed to compile."""
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1.1], [2, 2, 3, 3]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7]]], np.float32)
    for dims, most in (((1, -1, 4), (1, 1, -1)), 3), (((1, 3, 4), (1, 1, 3)), 1 << 40):
        def build():
            b = odla.create_argument(VT(E.FLOAT32, dims[0]), "b")
            s = odla.create_argument(VT(E.FLOAT32, dims[1]), "s")
            odla.set_value_as_output(odla.nms(b, s, most, 0.5, 0.0, VT(E.INT64, (-1, 3)),
                                              value_id="y"))
        session = _session(build)
        (got,) = session.run({"b": boxes, "s": scores})
        np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 2]])  # box 1 overlaps box 0
    session = _session(lambda: odla.set_value_as_output(odla.nms(
        odla.create_argument(VT(E.FLOAT32, (1, -1, 4)), "b"),
        odla.create_argument(VT(E.FLOAT32, (1, 1, -1)), "s"), 3, 0.5, 0.0,
        VT(E.INT64, (-1, 3)), value_id="y")))
    _refused(session, {"b": boxes[:, :2], "s": scores}, "NMS 'y'",
             "box count 3 of the scores is out of range; expected 2")


def test_reshape_of_run_time_dims_checks_its_shape():
    """check_reshape covered static input dims only: on (-1, 6) a shape of (3, 100) read past
    the 24 elements, and (0, -1) with zeros allowed made a (0, 24) of them."""
    def build():
        x = odla.create_argument(VT(E.FLOAT32, (-1, 6)), "x")
        shape = odla.create_argument(VT(E.INT64, (2,)), "s")
        odla.set_value_as_output(odla.reshape_dynamic(x, shape, value_id="y", allow_zero=True))
    session = _session(build)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    (got,) = session.run({"x": data, "s": np.array([3, -1])})
    np.testing.assert_array_equal(got, data.reshape(3, 8))
    for bad in ([3, 100], [0, -1]):
        _refused(session, {"x": data, "s": np.array(bad)},
                 f"Reshape 'y': shape {bad} does not fit the 24 elements of 4x6")


@pytest.mark.slow
def test_integer_division_of_the_least_value_by_minus_one_never_kills_the_process():
    """INT_MIN / -1 does not fit the type and traps on x86 (SIGFPE killed the process, as it
    kills onnxruntime's): Div refuses it naming the element; Mod gives 0, as onnxruntime.
    In a child process, so that a regression cannot take pytest down."""
    script = textwrap.dedent("""
        import numpy as np, odla_tvm as odla
        from odla_tvm import ElementType as E, ValueType as VT
        for dtype, etype in ((np.int32, E.INT32), (np.int64, E.INT64)):
            for op in ("Div", "Mod"):
                comp = odla.create_computation()
                a = odla.create_argument(VT(etype, (3,)), "a")
                b = odla.create_argument(VT(etype, (3,)), "b")
                y = odla.div(a, b, value_id="y") if op == "Div" else \\
                    odla.mod(a, b, False, value_id="y")
                odla.set_value_as_output(y)
                session = odla.Session(odla.compile_computation(comp, odla.allocate_device()))
                least = np.iinfo(dtype).min
                try:
                    got = session.run({"a": np.array([7, least, least], dtype),
                                       "b": np.array([-1, 3, -1], dtype)})[0]
                    print(op, dtype.__name__, "ran", *got)
                except odla.OdlaError as err:
                    print(op, dtype.__name__, err.status.name, "|", err.message)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    for dtype, line_div, line_mod in (("int32", lines[0], lines[1]),
                                      ("int64", lines[2], lines[3])):
        least = np.iinfo(dtype).min
        assert line_div == f"Div {dtype} INVALID_PARAM | Div 'y' overflows {dtype}: {least} / " \
                           "-1 (element 2 of the result)"
        assert line_mod == f"Mod {dtype} ran 0 {np.mod(least, 3)} 0"


def _backend_model(op, inputs, outputs, node_inputs, opset=17, **attrs):
    graph = helper.make_graph(
        [helper.make_node(op, node_inputs, [o[0] for o in outputs], **attrs)], op,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _backend_refuses(model, feeds, *parts):
    from odla_tvm.frontends import onnx_backend
    with pytest.raises(odla.OdlaError) as err:
        onnx_backend.prepare(model).run(feeds)
    assert err.value.status is Status.INVALID_PARAM, err.value
    for part in parts:
        assert part in str(err.value), (part, str(err.value))


def _matches_onnxruntime(model, feeds):
    from odla_tvm.frontends import onnx_backend
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got = onnx_backend.prepare(model).run(feeds)
    for e, g in zip(expected, got):
        np.testing.assert_array_equal(g, e)


F, INT = TensorProto.FLOAT, TensorProto.INT64


@pytest.mark.slow
def test_onnx_slice_pad_cumsum_and_topk_parameters_given_as_inputs():
    """ONNX parameters given as graph inputs are compiled in by the onnx Backend from the
    run's data: ONNX's clamped starts and ends, negative axes and pads still match
    onnxruntime; an axis beyond the rank (Slice, Pad, CumSum; it wrapped to another axis),
    a step of 0 and a K beyond the axis or below 0 are refused, naming the op and value."""
    slice_model = _backend_model(
        "Slice", [("x", F, [10, 4]), ("s", INT, [1]), ("e", INT, [1]), ("a", INT, [1]),
                  ("p", INT, [1])], [("y", F, ["?"] * 2)], ["x", "s", "e", "a", "p"])
    feeds = lambda s, e, a, p: {"x": DATA, **{k: np.array([v]) for k, v in  # noqa: E731
                                               zip("seap", (s, e, a, p))}}
    for s, e, a, p in ((-100, 1 << 40, 0, 2), (3, -1, -1, 1), (100, -100, 0, -3)):
        _matches_onnxruntime(slice_model, feeds(s, e, a, p))
    _backend_refuses(slice_model, feeds(0, 2, 2, 1), "Slice 'y'", "axis 2 is out of range",
                     "expected -2 to 1")
    _backend_refuses(slice_model, feeds(0, 2, 0, 0), "Slice (y)", "stride (0, 1)", "non-zero")
    pad_model = _backend_model("Pad", [("x", F, [10, 4]), ("p", INT, [2]), ("a", INT, [1])],
                               [("y", F, ["?"] * 2)], ["x", "p", "", "a"], opset=18)
    _matches_onnxruntime(pad_model, {"x": DATA, "p": np.array([1, -2]), "a": np.array([-1])})
    _backend_refuses(pad_model, {"x": DATA, "p": np.array([1, 1]), "a": np.array([3])},
                     "Pad 'y'", "axis 3 is out of range")
    cumsum = _backend_model("CumSum", [("x", F, [10, 4]), ("a", INT, [])], [("y", F, ["?"] * 2)],
                            ["x", "a"])
    _matches_onnxruntime(cumsum, {"x": DATA, "a": np.array(-1)})
    _backend_refuses(cumsum, {"x": DATA, "a": np.array(2)}, "CumSum", "'y'", "axis 2",
                     "expected -2..1")
    topk = _backend_model("TopK", [("x", F, [10, 4]), ("k", INT, [1])],
                          [("v", F, ["?"] * 2), ("i", INT, ["?"] * 2)], ["x", "k"], axis=0)
    _matches_onnxruntime(topk, {"x": DATA, "k": np.array([3])})
    _backend_refuses(topk, {"x": DATA, "k": np.array([11])}, "TopK", "K is 11",
                     "10 elements along axis 0")
    _backend_refuses(topk, {"x": DATA, "k": np.array([-1])}, "TopK", "K", "-1")


def test_a_profile_tells_the_checks_calls_from_the_others():
    """What the bench counts as the checks' time: a checked gather's counting kernel and host
    call, and nothing else of the run."""
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (10, 4)), "table")
    i = odla.create_argument(VT(E.INT64, (3,)), "ids")
    odla.set_value_as_output(odla.exp(odla.gather(x, i, 0, value_id="rows")))
    exe = odla.compile_computation(
        comp, odla.allocate_device(device_name=odla.DeviceName.INTEL_X86))
    calls = []
    outputs = exe.module.run([DATA, np.array([1, -1, 2])],
                             on_call=lambda symbol, _start, _seconds: calls.append(symbol))
    np.testing.assert_allclose(outputs[0], np.exp(DATA[[1, -1, 2]]), rtol=1e-6)
    checks = [c for c in calls if relay_bridge.is_check_call(c)]
    assert "odla_tvm.check_indices" in checks, calls
    assert any(c.startswith("out_of_range_count") for c in checks), calls
    assert len(checks) < len(calls) and not any("exp" in c for c in checks), calls


@pytest.mark.parametrize("op, indices, refused", [
    ("ScatterElements", [[-4, 1]], None), ("ScatterElements", [[0, 5]], "index 5 at [0, 1]"),
    ("ScatterND", [[-2]], None), ("ScatterND", [[7]], "index 7 at [0, 0]")])
def test_scatter_indices_outside_the_data_are_refused(op, indices, refused):
    """A scatter's indices (constants at import) in [-n, n-1] write where onnxruntime does;
    one outside would write past the data and is refused, naming it and the range."""
    updates_shape = [1, 2] if op == "ScatterElements" else [1, 3]
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "i", "u"], ["y"])], op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, updates_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
        [onnx.numpy_helper.from_array(np.array(indices, np.int64), "i")])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    if refused:
        with pytest.raises(odla.OdlaError, match=rf"{op}\): {re.escape(refused)} of its indices; "
                                                 r"expected -4 to 3") as err:
            odla.Session.from_onnx(onnx_model, engine_cache=False)
        assert err.value.status == Status.INVALID_PARAM
        return
    feeds = {"x": DATA[:4, :3].copy(), "u": -np.ones(updates_shape, np.float32)}
    expected = ort.InferenceSession(onnx_model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(
        odla.Session.from_onnx(onnx_model, engine_cache=False).run(feeds)[0], expected)
