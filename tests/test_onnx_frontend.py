"""The ONNX frontend and backend: small models built with onnx.helper, imported through the
ODLA op API, compiled for the host CPU and compared with onnxruntime; dynamic dims; the
errors for unsupported ops and malformed files; the onnx.backend interface."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
from odla_tvm import OdlaError, Status
from odla_tvm.frontends import onnx_backend
from odla_tvm.frontends.onnx import InputDataNeeded, import_model

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 10)  # what onnxruntime 1.32 reads
    onnx.checker.check_model(model)
    return model


def tensor(name, elem_type, shape):
    return helper.make_tensor_value_info(name, elem_type, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def onnxruntime_outputs(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_like_onnxruntime(model, feeds, rtol=1e-4, atol=1e-5):
    outputs = onnx_backend.prepare(model).run(feeds)
    expected = onnxruntime_outputs(model, feeds)
    assert len(outputs) == len(expected)
    for out, want in zip(outputs, expected):
        assert out.dtype == want.dtype and out.shape == want.shape
        np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# -- models --------------------------------------------------------------------------------------
def small_cnn(batch=1):
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["conv"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["conv", "s", "o", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["relu"]),
        helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("LRN", ["pool"], ["lrn"], size=3),
        helper.make_node("Flatten", ["lrn"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc"], transB=1),
        helper.make_node("Softmax", ["fc"], ["y"], axis=-1),
    ]
    inits = [init("w", rand(4, 3, 3, 3, seed=1)), init("b", rand(4, seed=2)),
             init("s", rand(4, seed=3)), init("o", rand(4, seed=4)), init("m", rand(4, seed=5)),
             init("v", np.abs(rand(4, seed=6)) + 0.5), init("fc_w", rand(5, 16, seed=7)),
             init("fc_b", rand(5, seed=8))]
    return make_model(nodes, [tensor("x", F, [batch, 3, 8, 8])], [tensor("y", F, [batch, 5])],
                      inits)


def test_small_cnn_matches_onnxruntime():
    assert_like_onnxruntime(small_cnn(2), {"x": rand(2, 3, 8, 8)})


def test_values_keep_their_onnx_names_and_initializers_are_constants():
    comp = import_model(small_cnn())
    try:
        assert [v.id for v in comp.args] == ["x"]
        assert [v.id for v in comp.outputs] == ["y"]
        assert odla.find_value_by_id("relu", comp).type == odla.ValueType(
            odla.ElementType.FLOAT32, (1, 4, 4, 4))
        assert odla.find_value_by_id("w", comp).kind is odla.ValueKind.CONSTANT
    finally:
        odla.destroy_computation(comp)


def test_symbolic_dims_become_dynamic():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]),
             helper.make_node("Tanh", ["mm"], ["t"]),
             helper.make_node("ReduceSum", ["t", "axes"], ["y"], keepdims=0)]
    model = make_model(nodes, [tensor("x", F, ["batch", "seq", 4])], [tensor("y", F, ["batch"])],
                       [init("w", rand(4, 3, seed=1)), init("axes", np.array([1, 2]))])
    session = odla.Session.from_onnx(model)
    assert session.input_types["x"].shape.dims == (-1, -1, 4)
    for shape in [(1, 2, 4), (5, 3, 4)]:
        x = rand(*shape, seed=len(shape))
        (y,) = session.run({"x": x})
        np.testing.assert_allclose(y, onnxruntime_outputs(model, {"x": x})[0], rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("value", [None, np.array([0.02], np.float32), np.array([7], np.int64)])
def test_a_constant_of_shape_folds_without_filling_an_array_first(value):
    """ConstantOfShape of constant dims (light AlexNet's weights are 16 of them) becomes a
    constant of its value, dtype and shape, written straight into the constant's memory: the
    reference evaluator's filled array (NumPy's, which tracemalloc counts; TVM's is not)
    was the 32 MB weight held twice while importing."""
    import tracemalloc

    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    dtype = np.float32 if value is None else value.dtype
    model = make_model(
        [helper.make_node("ConstantOfShape", ["dims"], ["w"], **attrs),
         helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor("x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [2048, 4096])],
        [tensor("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [2048, 4096])],
        [init("dims", np.array([2048, 4096], np.int64))])
    tracemalloc.start()
    try:
        comp = import_model(model)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak} bytes of NumPy arrays while importing"
    constant = odla.find_value_by_id("w", comp)
    assert constant.kind is odla.ValueKind.CONSTANT
    expected = np.full((2048, 4096), 0 if value is None else value[0], dtype)
    assert constant.data.dtype == dtype and constant.data.shape == (2048, 4096)
    np.testing.assert_array_equal(constant.data, expected)
    x = np.ones((2048, 4096), dtype)
    (y,) = odla.Session(comp).run({"x": x})
    np.testing.assert_array_equal(y, x + expected)


def test_shape_arithmetic_is_folded_and_reshapes_by_it():
    """Shape -> Gather -> Concat -> Reshape of a static input becomes a constant target."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
             helper.make_node("Concat", ["batch", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    model = make_model(nodes, [tensor("x", F, [2, 3, 4])], [tensor("y", F, [2, 12])],
                       [init("zero", np.array([0])), init("minus_one", np.array([-1]))])
    assert_like_onnxruntime(model, {"x": rand(2, 3, 4)})


@pytest.mark.parametrize("opset", [11, 13])
def test_version_aware_attributes_and_inputs(opset):
    """Squeeze, Unsqueeze and ReduceSum take axes as attributes before opset 13, as inputs
    after; Slice takes inputs since opset 10."""
    axes = {"axes": [1]} if opset < 13 else {}
    extra = [] if opset < 13 else ["axes"]
    nodes = [helper.make_node("Unsqueeze", ["x"] + extra, ["u"], **axes),
             helper.make_node("Slice", ["u", "starts", "ends", "slice_axes", "steps"], ["s"]),
             helper.make_node("Squeeze", ["s"] + extra, ["y"], **axes)]
    inits = [init("starts", np.array([3, 0])), init("ends", np.array([-100, 2])),
             init("slice_axes", np.array([0, 2])), init("steps", np.array([-2, 1]))]
    if opset >= 13:
        inits.append(init("axes", np.array([1])))
    model = make_model(nodes, [tensor("x", F, [5, 4])], [tensor("y", F, [2, 2])], inits, opset)
    assert_like_onnxruntime(model, {"x": rand(5, 4)})


def test_recurrent_and_multi_output_nodes():
    nodes = [helper.make_node("LSTM", ["x", "w", "r", "b"], ["y", "y_h", "y_c"], hidden_size=3,
                              direction="bidirectional"),
             helper.make_node("TopK", ["y_h", "k"], ["values", "indices"], axis=-1)]
    inits = [init("w", rand(2, 12, 4, seed=1)), init("r", rand(2, 12, 3, seed=2)),
             init("b", rand(2, 24, seed=3)), init("k", np.array([2]))]
    outputs = [tensor("y", F, [4, 2, 2, 3]), tensor("y_c", F, [2, 2, 3]),
               tensor("values", F, [2, 2, 2]), tensor("indices", TensorProto.INT64, [2, 2, 2])]
    model = make_model(nodes, [tensor("x", F, [4, 2, 4])], outputs, inits)
    assert_like_onnxruntime(model, {"x": rand(4, 2, 4)})


def test_graph_output_that_is_an_input_or_used_twice():
    nodes = [helper.make_node("Identity", ["x"], ["same"]),
             helper.make_node("Neg", ["x"], ["neg"]),
             helper.make_node("Identity", ["neg"], ["neg_again"])]
    model = make_model(nodes, [tensor("x", F, [3])],
                       [tensor("same", F, [3]), tensor("neg", F, [3]), tensor("neg_again", F, [3])])
    assert_like_onnxruntime(model, {"x": rand(3)})


# -- errors --------------------------------------------------------------------------------------
def test_unsupported_ops_are_listed_with_counts_before_compiling():
    nodes = [helper.make_node("Frobnicate", ["x"], ["a"], domain="com.example"),
             helper.make_node("Frobnicate", ["a"], ["b"], domain="com.example"),
             helper.make_node("StringNormalizer", ["b"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "g", [tensor("x", F, [2])], [tensor("y", F, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    with pytest.raises(OdlaError) as err:
        import_model(model)
    assert err.value.status is Status.UNSUPPORTED_OP
    assert "3 nodes of 2 op types" in err.value.message
    assert "StringNormalizer (1), com.example.Frobnicate (2)" in err.value.message
    assert not onnx_backend.OdlaBackend.is_compatible(model)


def test_unsupported_feature_of_a_supported_op_names_the_node():
    model = make_model([helper.make_node("Dropout", ["x", "ratio", "training"], ["y"])],
                       [tensor("x", F, [4])], [tensor("y", F, [4])],
                       [init("ratio", np.float32(0.5)), init("training", np.bool_(True))])
    with pytest.raises(OdlaError, match=r"ONNX node 'y' \(Dropout\): Dropout: training mode"):
        import_model(model)


def test_malformed_truncated_and_missing_files(tmp_path):
    blob = small_cnn().SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(blob[: len(blob) // 2])
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff\x00 not a model \x12\x34" * 10)
    for source in (truncated, garbage, blob[:7], b""):
        with pytest.raises(OdlaError) as err:
            import_model(source)
        assert err.value.status is Status.INVALID_PARAM
        assert "malformed or truncated" in err.value.message or "invalid" in err.value.message
    with pytest.raises(OdlaError) as err:
        import_model(tmp_path / "absent.onnx")
    assert err.value.status is Status.FILE_NOT_EXIST
    with pytest.raises(OdlaError, match="expected an ONNX file path, bytes or an onnx.ModelProto"):
        import_model(42)


def test_model_file_path_and_bytes(tmp_path):
    model = small_cnn()
    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    x = rand(1, 3, 8, 8)
    expected = onnxruntime_outputs(model, {"x": x})[0]
    for source in (str(path), path, model.SerializeToString()):
        (y,) = odla.Session.from_onnx(source).run({"x": x})
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


# -- the onnx.backend interface ------------------------------------------------------------------
def test_backend_prepare_run_with_list_dict_and_run_node():
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                       [tensor("a", F, [2, 3]), tensor("b", F, [3])], [tensor("y", F, [2, 3])])
    a, b = rand(2, 3), rand(3, seed=1)
    rep = onnx_backend.prepare(model, "CPU")
    (by_list,) = rep.run([a, b])
    np.testing.assert_allclose(by_list, a + b)
    np.testing.assert_allclose(rep.run({"a": a, "b": b}).y, a + b)
    with pytest.raises(OdlaError, match="1 inputs given; the model takes 2"):
        rep.run([a])
    (node_out,) = onnx_backend.run_node(helper.make_node("Mul", ["p", "q"], ["r"]), [a, a])
    np.testing.assert_allclose(node_out, a * a)
    assert onnx_backend.supports_device("CPU")
    assert onnx_backend.OdlaBackend.is_compatible(model)


def test_backend_answers_for_cpu_cuda_and_gpu_and_refuses_what_is_missing():
    model = make_model([helper.make_node("Relu", ["a"], ["y"])], [tensor("a", F, [2])],
                       [tensor("y", F, [2])])
    assert onnx_backend.supports_device("CPU") and onnx_backend.supports_device("cpu")
    has_gpu = odla.DeviceName.NVIDIA_GPU in odla.available_devices()
    assert onnx_backend.supports_device("CUDA") is has_gpu
    assert onnx_backend.supports_device("GPU") is has_gpu
    assert onnx_backend.supports_device("TPU") is False
    if not has_gpu:
        with pytest.raises(OdlaError, match=r"ONNX device 'CUDA' is not available here; "
                                            r"expected one of \['CPU'\]"):
            onnx_backend.prepare(model, "CUDA")


def test_backend_compiles_for_the_data_of_small_inputs_odla_needs_at_import():
    """Reduction axes given as a graph input: ODLA's reductions take their axes when the
    model is built, so the backend compiles for the axes each run brings."""
    model = make_model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)],
                       [tensor("x", F, [2, 3, 4]), tensor("axes", TensorProto.INT64, [1])],
                       [tensor("y", F, ["reduced0", "reduced1"])])
    with pytest.raises(InputDataNeeded) as err:
        import_model(model)
    assert err.value.input_ids == {"axes"}
    rep = onnx_backend.prepare(model)
    x = rand(2, 3, 4)
    for axis in (1, -1, 1):
        (y,) = rep.run([x, np.array([axis], np.int64)])
        np.testing.assert_allclose(y, x.sum(axis=axis), rtol=1e-5, atol=1e-6)
    assert rep.data_inputs == ["axes"] and len(rep._sessions) == 2


# -- edge semantics, against onnx's reference evaluator ------------------------------------------

def assert_like_reference(model, feeds, rtol=1e-5, atol=1e-6, dtypes=None):
    """Outputs as onnx's reference evaluator computes them, of its dtypes or ``dtypes`` (where
    it computes in float64 what the op defines in the inputs' type)."""
    from onnx.reference import ReferenceEvaluator

    outputs = onnx_backend.prepare(model).run(feeds)
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert len(outputs) == len(expected)
    for k, (out, want) in enumerate(zip(outputs, expected)):
        want = np.asarray(want)
        assert out.dtype == (want.dtype if dtypes is None else dtypes[k])
        assert out.shape == want.shape
        np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)


def one_node_model(op_type, inputs, outputs, initializers=(), opset=18, domain="", **attrs):
    """A model of one node; ``inputs`` and ``outputs`` are (name, onnx type, shape)."""
    node = helper.make_node(op_type, [i[0] for i in inputs] + [t.name for t in initializers],
                            [o[0] for o in outputs], domain=domain, **attrs)
    graph = helper.make_graph([node], "test", [tensor(*i) for i in inputs],
                              [tensor(*o) for o in outputs], list(initializers))
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_of_infinities_empty_sets_and_bools(op_type):
    axis = [init("axes", np.array([1], np.int64))]
    x = np.array([[-np.inf, -np.inf], [np.inf, np.inf], [1, -np.inf]], np.float32)
    assert_like_reference(one_node_model(op_type, [("x", F, [3, 2])], [("y", F, [3, 1])], axis),
                          {"x": x})
    empty = one_node_model(op_type, [("x", F, [2, 0, 3])], [("y", F, [2, 1, 3])], axis)
    y = onnx_backend.prepare(empty).run({"x": np.zeros((2, 0, 3), np.float32)})[0]
    np.testing.assert_array_equal(y, np.full((2, 1, 3), -np.inf if op_type == "ReduceMax" else np.inf))
    b = TensorProto.BOOL
    bools = np.array([[True, False], [True, True], [False, False]])
    assert_like_reference(one_node_model(op_type, [("x", b, [3, 2])], [("y", b, [3, 1])], axis),
                          {"x": bools})


def test_float_mod_bit_shifts_out_of_range_and_integer_powers():
    x = np.array([0, -0.0, -3, 3, -1, 1, np.inf, 1, np.nan, 5.5], np.float32)
    d = np.array([-2, 2, np.inf, np.inf, -np.inf, -np.inf, 2, 0, 2, -2], np.float32)
    assert_like_reference(one_node_model("Mod", [("a", F, [10]), ("b", F, [10])],
                                         [("y", F, [10])], fmod=0), {"a": x, "b": d})
    i32 = TensorProto.INT32
    values, amounts = np.array([-8, 4, -1, 5], np.int32), np.array([32, -1, 100, 1], np.int32)
    for direction in ("LEFT", "RIGHT"):
        model = one_node_model("BitShift", [("x", i32, [4]), ("s", i32, [4])], [("y", i32, [4])],
                               direction=direction)
        assert_like_reference(model, {"x": values, "s": amounts})
    assert_like_reference(one_node_model("Pow", [("x", i32, [4]), ("p", i32, [4])],
                                         [("y", i32, [4])]),
                          {"x": np.array([2, -3, 7, 0], np.int32), "p": np.array([10, 3, 2, 5], np.int32)})
    i64 = TensorProto.INT64
    assert_like_reference(one_node_model("Pow", [("x", i64, [3]), ("p", F, [3])],
                                         [("y", i64, [3])]),
                          {"x": np.array([4, 9, 2], np.int64), "p": np.array([0.5, 2, 3], np.float32)})


@pytest.mark.parametrize("source, target", [(np.float32, np.int32), (np.int64, np.float64),
                                            (np.int8, np.uint8), (np.bool_, np.uint8)])
def test_bit_cast_reinterprets_the_bits(source, target):
    x = np.array([[1.5, -2, 0], [3, -0.25, 7]]).astype(source)
    types = [helper.np_dtype_to_tensor_dtype(np.dtype(t)) for t in (source, target)]
    model = one_node_model("BitCast", [("x", types[0], [2, 3])], [("y", types[1], [2, 3])],
                           opset=26, to=types[1])
    y = onnx_backend.prepare(model).run({"x": x})[0]
    assert y.dtype == target
    np.testing.assert_array_equal(y, x.view(target))


@pytest.mark.parametrize("attrs, scales, sizes", [
    (dict(mode="linear"), [1, 1, 0.6, 0.6], None),  # the scale, not the size ratio, maps
    (dict(mode="cubic", antialias=1), [1, 1, 0.6, 0.6], None),
    (dict(mode="linear", antialias=1), None, [1, 1, 3, 2]),
    (dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"),
     [1, 1, 1.7, 0.5], None),
    (dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5), [1, 1, 0.8, 1.4], None),
    (dict(mode="nearest", nearest_mode="ceil"), [1, 1, 0.7, 1.3], None),
    (dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
          extrapolation_value=10.0), None, [1, 1, 3, 3]),
])
def test_resize_modes_tvm_lacks_match_the_reference(attrs, scales, sizes):
    x = rand(1, 2, 4, 5)
    roi = init("roi", np.array([0, 0, 0.4, -0.2, 1, 1, 0.6, 1.3], np.float32)
               if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
               else np.zeros(0, np.float32))
    constants = [roi, init("scales", np.array(scales or [], np.float32))]
    if sizes:
        constants.append(init("sizes", np.array(sizes, np.int64)))
    out_dims = sizes or [int(np.floor(d * s)) for d, s in zip(x.shape, scales)]
    model = one_node_model("Resize", [("x", F, list(x.shape))], [("y", F, out_dims)],
                           constants, opset=19, **attrs)
    assert_like_reference(model, {"x": x}, rtol=1e-5, atol=1e-5)


def test_optimizer_steps_of_the_training_domain():
    scalars = [("R", F, []), ("T", TensorProto.INT64, [])]
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(3, np.int64)}
    tensors = {name: rand(2, 3, seed=k) for k, name in enumerate(["X", "G", "V", "H"])}
    tensors["H"] = np.abs(tensors["H"])
    adam = one_node_model("Adam", scalars + [(n, F, [2, 3]) for n in "XGVH"],
                          [(n + "_new", F, [2, 3]) for n in "XVH"],
                          domain="ai.onnx.preview.training", alpha=0.9, beta=0.99,
                          epsilon=1e-6, norm_coefficient=0.01, norm_coefficient_post=0.02)
    assert_like_reference(adam, {**feeds, **tensors}, dtypes=[np.float32] * 3)
    for t in (0, 3):  # the first step weighs the gradient by 1
        momentum = one_node_model("Momentum", scalars + [(n, F, [2, 3]) for n in "XGV"],
                                  [(n + "_new", F, [2, 3]) for n in "XV"],
                                  domain="ai.onnx.preview.training", alpha=0.9, beta=0.5,
                                  mode="nesterov", norm_coefficient=0.01)
        assert_like_reference(momentum, {**feeds, "T": np.array(t, np.int64),
                                         **{n: tensors[n] for n in "XGV"}},
                              dtypes=[np.float32] * 2)
    adagrad = one_node_model("Adagrad", scalars + [(n, F, [2, 3]) for n in "XGH"],
                             [(n + "_new", F, [2, 3]) for n in "XH"],
                             domain="ai.onnx.preview.training", decay_factor=0.1,
                             epsilon=1e-5, norm_coefficient=0.001)
    assert_like_reference(adagrad, {**feeds, **{n: tensors[n] for n in "XGH"}},
                          dtypes=[np.float32] * 2)


@pytest.mark.parametrize("dtype", [np.int16, np.uint16, np.uint32, np.uint64])
def test_top_k_of_types_tvm_cannot_sort(dtype):
    info = np.iinfo(dtype)
    x = np.array([[3, info.max, info.min, 7, info.max - 1], [1, 5, 3, 4, 2]], dtype)
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    for largest in (0, 1):
        model = one_node_model("TopK", [("x", onnx_type, [2, 5])],
                               [("v", onnx_type, [2, 2]), ("i", TensorProto.INT64, [2, 2])],
                               [init("k", np.array([2], np.int64))], largest=largest)
        assert_like_reference(model, {"x": x})


def test_reshape_by_run_time_shape_with_allowzero():
    model = one_node_model("Reshape", [("x", F, [0, 3, 4]), ("s", TensorProto.INT64, [3])],
                           [("y", F, [3, 4, 0])], allowzero=1)
    y = onnx_backend.prepare(model).run({"x": np.zeros((0, 3, 4), np.float32),
                                         "s": np.array([3, 4, 0], np.int64)})[0]
    assert y.shape == (3, 4, 0)


def test_16_bit_products_and_softmax_accumulate_in_float32():
    h = TensorProto.FLOAT16
    a, b = rand(4, 64).astype(np.float16), rand(64, 8, seed=1).astype(np.float16)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["m"]),
                        helper.make_node("Softmax", ["m"], ["y"], axis=-1)],
                       [tensor("a", h, [4, 64]), tensor("b", h, [64, 8])], [tensor("y", h, [4, 8])])
    y = onnx_backend.prepare(model).run({"a": a, "b": b})[0]
    products = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16).astype(np.float32)
    exp = np.exp(products - products.max(-1, keepdims=True))
    want = (exp / exp.sum(-1, keepdims=True)).astype(np.float16)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool_window_far_larger_than_its_input(include_pad):
    """transformers' EfficientNet pools its 7x7 map with a 1280x1280 window in ceil mode: one
    window, the input's mean (it imported as 1.6M slices before, then padded its input to the
    whole window: 8 GB of zeros for EfficientNet's 1280 channels)."""
    model = make_model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[1280, 1280],
                          strides=[1280, 1280], ceil_mode=1, count_include_pad=include_pad)],
        [tensor("x", TensorProto.FLOAT, [1, 3, 5, 7])], [tensor("y", TensorProto.FLOAT, [1, 3, 1, 1])])
    assert_like_onnxruntime(model, {"x": rand(1, 3, 5, 7)})
    module = import_model(model).build_module()
    largest = max(int(np.prod([int(d) for d in b.var.ty.shape.values]))
                  for block in module["main"].body.blocks for b in block.bindings
                  if getattr(b.var.ty, "shape", None) is not None)
    assert largest <= 3 * 5 * 7
