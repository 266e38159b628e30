"""Quantized ONNX models computed on their 8-bit integers (relay_bridge.integer_products): each
form (QDQ convolutions per tensor and per channel, QDQ matmuls, QLinearConv, QLinearMatMul,
MatMulInteger, ConvInteger) on several shapes against a float64 NumPy reference of the same
integer arithmetic and against onnxruntime on the same file; the built kernels read 8-bit
operands and are scheduled, the weights stay 8 bits; and two real models quantized by
onnxruntime's own tools agree with onnxruntime."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
import targets
from odla_tvm.frontends import onnx as onnx_frontend
from targets.compiler import compile_module
from targets.plugins.onednn import policy

try:
    from . import reference
    from .test_cpu_schedules import AVX512, HOST, _scheduled_kernels, relax_module, rules_of
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    import reference
    from test_cpu_schedules import AVX512, HOST, _scheduled_kernels, relax_module, rules_of

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(11)
U8, I8 = np.uint8, np.int8


def _model(nodes, inputs, output, output_type, initializers) -> onnx.ModelProto:
    """A graph of ``nodes`` with graph inputs ``inputs`` (name -> array) and one output."""
    graph = helper.make_graph(
        nodes, "quantized",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for name, a in inputs.items()],
        [helper.make_tensor_value_info(output, output_type, None)],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)  # the output's shape


def _levels(shape, dtype, low=None, high=None):
    limits = np.iinfo(dtype)
    return RNG.integers(limits.min if low is None else low,
                        limits.max + 1 if high is None else high, shape).astype(dtype)


# Weights of 7 bits where onnxruntime's QLinear and integer ops are compared: its u8 x s8
# kernels on AVX2 without VNNI add pairs of products in int16 (vpmaddubsw), which saturates on
# full-range weights (what its quantizer's reduce_range avoids); odla-tvm's sums are exact.
SEVEN_BITS = (-64, 64)


def _scales(count, per_channel):
    return (RNG.uniform(0.002, 0.02, count if per_channel else ())).astype(np.float32)


def _requantized(real, scale, zero, dtype=U8):
    """What QuantizeLinear makes of float64 ``real``: halves to even, saturated."""
    limits = np.iinfo(dtype)
    return np.clip(np.round(real / scale) + zero, limits.min, limits.max).astype(dtype)


def _run(model, feeds):
    """odla-tvm's and onnxruntime's outputs of ``model`` on ``feeds``."""
    (got,) = odla.Session.from_onnx(model, engine_cache=False).run(feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    (theirs,) = ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)
    return got, theirs


def _channels(array, rank):
    return array.reshape((-1,) + (1,) * (rank - 2)) if array.ndim else array


def _integer_products(model) -> list:
    """The conv2d and matmul calls of ``model``'s Relax module as the build lowers it."""
    mod = onnx_frontend.import_model(model).build_module()
    calls = []
    tvm.relax.analysis.post_order_visit(mod["main"], lambda e: calls.append(e) if (
        isinstance(e, tvm.relax.Call) and isinstance(e.op, tvm.ir.Op)
        and e.op.name in ("relax.matmul", "relax.nn.conv2d")) else None)
    return calls


def _check_eight_bit_products(model, count=1):
    """Each convolution and matmul of ``model`` reads 8-bit operands (a constant 8-bit weight)
    and accumulates in int32."""
    calls = _integer_products(model)
    assert len(calls) == count
    for call in calls:
        assert str(call.args[1].ty.dtype) == "int8" and \
            str(call.args[0].ty.dtype) in ("int8", "uint8") and str(call.ty.dtype) == "int32"
        assert isinstance(call.args[1], tvm.ir.expr.Constant), call.args[1]


# --- QDQ ---------------------------------------------------------------------------------

CONVS = [  # x shape, output channels, kernel, stride, pads, group, dilation
    ((1, 4, 9, 9), 8, 3, 1, 1, 1, 1), ((2, 3, 7, 6), 6, 1, 1, 0, 1, 1),
    ((1, 8, 10, 11), 16, 3, 2, 1, 2, 1), ((1, 5, 12, 12), 7, 3, 1, 2, 1, 2)]


def _qdq_conv(x_shape, c_out, kernel, stride, pad, group, dilation, per_channel, x_dtype=U8):
    """uint8 activations with a zero point of 113, or int8 ones with 0 (symmetric)."""
    xq = _levels(x_shape, x_dtype)
    wq = _levels((c_out, x_shape[1] // group, kernel, kernel), I8, -127)
    x_scale, x_zero = np.float32(0.03), np.array(113 if x_dtype == U8 else 0, x_dtype)
    w_scale = _scales(c_out, per_channel)
    w_zero = np.zeros(w_scale.shape, I8)
    bias = RNG.standard_normal(c_out).astype(np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[stride] * 2,
                              pads=[pad] * 4, group=group, dilations=[dilation] * 2)]
    model = _model(nodes, {"xq": xq}, "y", TensorProto.FLOAT, {
        "xs": x_scale, "xz": x_zero, "wq": wq, "ws": w_scale, "wz": w_zero, "b": bias})
    exact = reference.conv(xq.astype(np.int64) - int(x_zero), wq.astype(np.int64),
                           strides=[stride] * 2, dilations=[dilation] * 2, pads_front=[pad] * 2,
                           pads_back=[pad] * 2, group=group)
    expected = exact * np.float64(x_scale) * _channels(w_scale.astype(np.float64), 4) \
        + bias.reshape(-1, 1, 1)
    return model, {"xq": xq}, expected


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("shape", CONVS, ids=lambda s: "x".join(map(str, s[0])))
def test_qdq_convolutions(shape, per_channel):
    model, feeds, expected = _qdq_conv(*shape, per_channel)
    _check_eight_bit_products(model)
    got, theirs = _run(model, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5)


def test_qdq_convolutions_of_symmetric_int8_activations():
    """int8 activations of zero point 0: no zero point term, padding or not."""
    for shape in (CONVS[0], CONVS[1]):
        model, feeds, expected = _qdq_conv(*shape, True, I8)
        _check_eight_bit_products(model)
        calls = _integer_products(model)
        assert str(calls[0].args[0].ty.dtype) == "int8"
        got, theirs = _run(model, feeds)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_shape,n,per_channel", [((3, 16), 24, False), ((1, 5, 64), 32, True),
                                                   ((2, 7, 33), 10, True)])
def test_qdq_matmuls(x_shape, n, per_channel):
    xq, wq = _levels(x_shape, U8), _levels((x_shape[-1], n), I8, *SEVEN_BITS)
    x_scale, x_zero, w_scale = np.float32(0.05), np.array(131, U8), _scales(n, per_channel)
    nodes = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=1),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = _model(nodes, {"xq": xq}, "y", TensorProto.FLOAT,
                   {"xs": x_scale, "xz": x_zero, "wq": wq, "ws": w_scale})
    _check_eight_bit_products(model)
    exact = (xq.astype(np.int64) - int(x_zero)) @ wq.astype(np.int64)
    got, theirs = _run(model, {"xq": xq})
    np.testing.assert_allclose(got, exact * np.float64(x_scale) * w_scale, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m,k,n", [(2, 16, 10), (5, 40, 24)])
def test_qdq_gemms_by_transposed_weights(m, k, n):
    """Gemm with transB (a linear layer as exporters write it): the weight [n, k] is
    dequantized per output channel along its axis 0, then transposed."""
    xq, wq = _levels((m, k), U8), _levels((n, k), I8, *SEVEN_BITS)
    x_scale, x_zero, w_scale = np.float32(0.05), np.array(90, U8), _scales(n, True)
    bias = RNG.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
    model = _model(nodes, {"xq": xq}, "y", TensorProto.FLOAT, {
        "xs": x_scale, "xz": x_zero, "wq": wq, "ws": w_scale, "wz": np.zeros(n, I8), "b": bias})
    _check_eight_bit_products(model)
    exact = (xq.astype(np.int64) - int(x_zero)) @ wq.astype(np.int64).T
    got, theirs = _run(model, {"xq": xq})
    expected = exact * np.float64(x_scale) * w_scale + bias
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5)


# --- the operator format -------------------------------------------------------------------

@pytest.mark.parametrize("shape", CONVS[:3], ids=lambda s: "x".join(map(str, s[0])))
def test_qlinear_convolutions(shape):
    x_shape, c_out, kernel, stride, pad, group, dilation = shape
    xq = _levels(x_shape, U8)
    wq = _levels((c_out, x_shape[1] // group, kernel, kernel), I8, *SEVEN_BITS)
    x_scale, x_zero, w_scale = np.float32(0.02), np.array(97, U8), _scales(c_out, True)
    y_scale, y_zero = np.float32(0.05), np.array(120, U8)
    bias = RNG.integers(-3000, 3000, c_out).astype(np.int32)
    node = helper.make_node("QLinearConv", ["xq", "xs", "xz", "wq", "ws", "wz", "ys", "yz", "b"],
                            ["y"], strides=[stride] * 2, pads=[pad] * 4, group=group,
                            dilations=[dilation] * 2)
    model = _model([node], {"xq": xq}, "y", TensorProto.UINT8, {
        "xs": x_scale, "xz": x_zero, "wq": wq, "ws": w_scale, "wz": np.zeros(c_out, I8),
        "ys": y_scale, "yz": y_zero, "b": bias})
    _check_eight_bit_products(model)
    exact = reference.conv(xq.astype(np.int64) - int(x_zero), wq.astype(np.int64), bias,
                           strides=[stride] * 2, dilations=[dilation] * 2, pads_front=[pad] * 2,
                           pads_back=[pad] * 2, group=group)
    real = exact * np.float64(x_scale) * _channels(w_scale.astype(np.float64), 4)
    got, theirs = _run(model, {"xq": xq})
    # float32 products of the scales may round a level the other way at a half
    assert np.abs(got.astype(int) - _requantized(real, y_scale, y_zero)).max() <= 1
    assert np.abs(got.astype(int) - theirs).max() <= 1


@pytest.mark.parametrize("a_shape,n", [((4, 16), 8), ((2, 3, 40), 24)])
def test_qlinear_matmuls(a_shape, n):
    aq, bq = _levels(a_shape, U8), _levels((a_shape[-1], n), I8, *SEVEN_BITS)
    a_scale, a_zero, b_scale = np.float32(0.04), np.array(125, U8), np.float32(0.01)
    y_scale, y_zero = np.float32(0.2), np.array(128, U8)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = _model([node], {"a": aq}, "y", TensorProto.UINT8, {
        "as": a_scale, "az": a_zero, "b": bq, "bs": b_scale, "bz": np.array(0, I8),
        "ys": y_scale, "yz": y_zero})
    _check_eight_bit_products(model)
    real = ((aq.astype(np.int64) - int(a_zero)) @ bq.astype(np.int64)) * np.float64(a_scale) \
        * np.float64(b_scale)
    got, theirs = _run(model, {"a": aq})
    assert np.abs(got.astype(int) - _requantized(real, y_scale, y_zero)).max() <= 1
    assert np.abs(got.astype(int) - theirs).max() <= 1


# --- integer products ------------------------------------------------------------------------

@pytest.mark.parametrize("a_shape,n,b_dtype,per_column", [
    ((4, 16), 8, I8, False), ((2, 5, 48), 16, I8, False), ((3, 20), 12, U8, False),
    ((6, 6), 6, U8, True)])
def test_matmul_integer(a_shape, n, b_dtype, per_column):
    aq, a_zero = _levels(a_shape, U8), np.array(140, U8)
    # uint8 weights around their zero points near 128 (int8 after they are subtracted)
    b_zero = np.array(128 if b_dtype == U8 else 0, b_dtype)
    if per_column:
        b_zero = _levels(n, U8, 100, 156)
    bq = (_levels((a_shape[-1], n), I8, *SEVEN_BITS) + b_zero).astype(b_dtype)
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    model = _model([node], {"a": aq}, "y", TensorProto.INT32,
                   {"b": bq, "az": a_zero, "bz": b_zero})
    _check_eight_bit_products(model)
    got, theirs = _run(model, {"a": aq})
    expected = (aq.astype(np.int64) - int(a_zero)) @ (bq.astype(np.int64) - b_zero)
    np.testing.assert_array_equal(got, expected.astype(np.int32))
    np.testing.assert_array_equal(got, theirs)


@pytest.mark.parametrize("shape", [CONVS[0], CONVS[1], CONVS[3]],
                         ids=lambda s: "x".join(map(str, s[0])))
def test_conv_integer(shape):
    x_shape, c_out, kernel, stride, pad, group, dilation = shape
    xq, x_zero = _levels(x_shape, U8), np.array(77, U8)
    # uint8 weights (what onnxruntime's ConvInteger takes) within 8 bits of their zero point
    wq, w_zero = _levels((c_out, x_shape[1], kernel, kernel), U8, 30, 220), np.array(100, U8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], strides=[stride] * 2,
                            pads=[pad] * 4, dilations=[dilation] * 2)
    model = _model([node], {"x": xq}, "y", TensorProto.INT32, {"w": wq, "xz": x_zero,
                                                               "wz": w_zero})
    _check_eight_bit_products(model)
    got, theirs = _run(model, {"x": xq})
    expected = reference.conv(xq.astype(np.int64) - int(x_zero),
                              wq.astype(np.int64) - int(w_zero), strides=[stride] * 2,
                              dilations=[dilation] * 2, pads_front=[pad] * 2, pads_back=[pad] * 2)
    np.testing.assert_array_equal(got, expected.astype(np.int32))
    np.testing.assert_array_equal(got, theirs)


def test_weights_that_do_not_fit_eight_bits_keep_the_widened_product():
    """uint8 weights far from their zero point span more than 8 bits once it is subtracted:
    the product stays in int32, and right."""
    aq, bq = _levels((3, 16), U8), _levels((16, 4), U8)
    bq[0, 0], bq[1, 1] = 0, 255
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    model = _model([node], {"a": aq}, "y", TensorProto.INT32,
                   {"b": bq, "az": np.array(3, U8), "bz": np.array(10, U8)})
    (call,) = _integer_products(model)
    assert str(call.args[1].ty.dtype) == "int32"
    got, theirs = _run(model, {"a": aq})
    np.testing.assert_array_equal(got, (aq.astype(np.int64) - 3) @ (bq.astype(np.int64) - 10))
    np.testing.assert_array_equal(got, theirs)


# --- real models ---------------------------------------------------------------------------

def _light_squeezenet() -> tuple[onnx.ModelProto, str]:
    """onnx's light squeezenet with seeded weights where it fills them with one value
    (ConstantOfShape), at IR 7 and opset 13 (what onnxruntime's quantizer takes), and the
    name of its image input."""
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_squeezenet.onnx")
    model, rng = onnx.load(path), np.random.default_rng(3)
    graph = model.graph
    filled = {n.input[0]: n for n in graph.node if n.op_type == "ConstantOfShape"}
    for init in [i for i in graph.initializer if i.name in filled]:
        dims, node = numpy_helper.to_array(init), filled[init.name]
        spread = np.sqrt(2 / np.prod(dims[1:])) if len(dims) > 1 else 0.1
        graph.initializer.append(numpy_helper.from_array(
            (rng.standard_normal(dims) * spread).astype(np.float32), node.output[0]))
        graph.node.remove(node)
        graph.initializer.remove(init)
    dropout = next(n for n in graph.node if n.op_type == "Dropout")  # an identity here
    for node in graph.node:
        node.input[:] = [dropout.input[0] if x == dropout.output[0] else x for x in node.input]
    graph.node.remove(dropout)
    weights = {i.name for i in graph.initializer} | set(filled)  # IR 3 lists them as inputs
    for value in [v for v in graph.input if v.name in weights]:
        graph.input.remove(value)
    model.ir_version, model.opset_import[0].version = 7, 13
    return model, graph.input[0].name


class _Images:
    def __init__(self, name, count=4):
        rng = np.random.default_rng(0)
        self.feeds = iter([{name: rng.random((1, 3, 224, 224), np.float32)}
                           for _ in range(count)])

    def get_next(self):
        return next(self.feeds, None)


@pytest.fixture(scope="module")
def quantized_squeezenet(tmp_path_factory):
    """(the float32 model, the QDQ model onnxruntime's quantize_static makes of it per channel
    from random calibration images, the input's name)."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    model, name = _light_squeezenet()
    folder = tmp_path_factory.mktemp("squeezenet")
    onnx.save(model, folder / "float32.onnx")
    reader = type("Reader", (_Images, quantization.CalibrationDataReader), {})(name)
    quantization.quantize_static(folder / "float32.onnx", folder / "int8.onnx", reader,
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True)
    return model, onnx.load(folder / "int8.onnx"), name


def test_a_qdq_squeezenet_agrees_with_onnxruntime(quantized_squeezenet):
    model, quantized, name = quantized_squeezenet
    images = {name: np.random.default_rng(1).random((1, 3, 224, 224), np.float32)}
    (exact,) = ort.InferenceSession(model.SerializeToString()).run(None, images)
    got, theirs = _run(quantized, images)
    assert np.abs(got - exact).max() <= max(np.abs(theirs - exact).max(), 1 / 255) + 1e-6
    assert np.abs(got - theirs).max() <= 1 / 255 + 1e-6  # a level of its uint8 output at most
    _check_eight_bit_products(quantized, 26)


def test_every_kernel_of_an_int8_build_is_scheduled_on_eight_bits(quantized_squeezenet):
    """The convolutions are Contraction's, each reading 8-bit activations and weights;
    no kernel is left to Fallback; the build keeps no float32 weights."""
    mod = onnx_frontend.import_model(quantized_squeezenet[1]).build_module()
    rules = rules_of(mod)  # asserts that no kernel is left unscheduled
    convs = [k for k in rules if "conv2d" in k]
    assert convs and all(rules[k] == "Contraction" for k in convs), rules
    # the classifier's softmax (with its QDQ pair) is Fallback's as in a float32 build
    assert "Fallback" not in [r for k, r in rules.items() if "softmax" not in k], rules
    scheduled = _scheduled_kernels(mod)
    for gv, func in scheduled.functions_items():
        if gv.name_hint in convs:
            operands = {str(p.dtype) for p in func.params[:2]}  # the data, the weights
            assert operands <= {"uint8", "int8"}, (gv.name_hint, operands)
    weights = []
    tvm.relax.analysis.post_order_visit(scheduled["main"], lambda e: weights.append(e) if (
        isinstance(e, tvm.ir.expr.Constant) and hasattr(e.value, "numpy")
        and e.value.numpy().size > 1024) else None)
    # int8 weights; int32 constants are the zero point's window sums of padded convolutions
    assert weights and {str(w.ty.dtype) for w in weights} == {"int8", "int32"}


def test_onednn_leaves_an_int8_graph_to_tvm(quantized_squeezenet, monkeypatch):
    """Without VNNI (AVX2 forced, whatever this CPU is) oneDNN's int8 kernels do not take full
    8-bit weights (they could saturate): its pools and concatenations between TVM's integer
    convolutions would only cut the graph into regions."""
    monkeypatch.setattr(policy, "onednn_isa", lambda: "avx2")
    float32, int8 = (onnx_frontend.import_model(m).build_module() for m in quantized_squeezenet[:2])
    assert "integer products" in policy.declines(int8)
    assert "integer products" not in (policy.declines(float32) or "")


def _transformer_block(seq=16, width=64) -> onnx.ModelProto:
    """Attention (QKV and output projections, Q K^T, softmax, @V) and a ReLU MLP with
    residuals, in float32: the matmuls quantize_dynamic quantizes."""
    rng = np.random.default_rng(5)
    weights = {name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
               for name, shape in [("wq", (width, width)), ("wk", (width, width)),
                                   ("wv", (width, width)), ("wo", (width, width)),
                                   ("up", (width, 4 * width)), ("down", (4 * width, width))]}
    weights["scale"] = np.float32(1 / np.sqrt(width))
    node = helper.make_node
    nodes = [node("MatMul", ["x", w], [w + "_x"]) for w in ("wq", "wk", "wv")] + [
        node("Transpose", ["wk_x"], ["kt"], perm=[0, 2, 1]),
        node("MatMul", ["wq_x", "kt"], ["scores"]), node("Mul", ["scores", "scale"], ["scaled"]),
        node("Softmax", ["scaled"], ["attention"], axis=-1),
        node("MatMul", ["attention", "wv_x"], ["mixed"]), node("MatMul", ["mixed", "wo"], ["o"]),
        node("Add", ["x", "o"], ["h"]), node("MatMul", ["h", "up"], ["u"]),
        node("Relu", ["u"], ["r"]), node("MatMul", ["r", "down"], ["d"]),
        node("Add", ["h", "d"], ["y"])]
    x = np.zeros((1, seq, width), np.float32)
    return _model(nodes, {"x": x}, "y", TensorProto.FLOAT, weights)


def test_a_dynamically_quantized_transformer_block_agrees_with_onnxruntime(tmp_path):
    quantization = pytest.importorskip("onnxruntime.quantization")
    model = _transformer_block()
    onnx.save(model, tmp_path / "float32.onnx")
    quantization.quantize_dynamic(tmp_path / "float32.onnx", tmp_path / "int8.onnx",
                                  weight_type=quantization.QuantType.QInt8)
    quantized = onnx.load(tmp_path / "int8.onnx")
    assert "MatMulInteger" in {n.op_type for n in quantized.graph.node}
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 16, 64)).astype(np.float32)}
    (exact,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    got, theirs = _run(quantized, feeds)
    theirs_error = np.abs(theirs - exact).max()
    assert np.abs(got - exact).max() <= 1.5 * theirs_error
    assert np.abs(got - theirs).max() <= theirs_error
    # the products by weights (not Q K^T nor its product by V, of two activations) are 8 bits
    products = _integer_products(quantized)
    eight_bit = [c for c in products if str(c.args[1].ty.dtype) == "int8"]
    assert len(eight_bit) == 6, [str(c.args[1].ty.dtype) for c in products]


@pytest.mark.parametrize("shape", [("matmul", (1, 49, 64), (64, 48)),
                                   ("conv2d", (1, 8, 8, 8), (32, 8, 3, 3))])
def test_eight_bit_products_add_pairs_of_steps_on_x86(shape):
    """On AVX2 and AVX-512, an 8-bit contraction's vectors add two reduction steps a lane
    (vpmaddwd on operands widened to 16 bits), and the result is exact."""
    kind, x_shape, w_shape = shape
    x, w = _levels(x_shape, U8), _levels(w_shape, I8, -127)
    op = tvm.relax.op
    mod = relax_module({"x": (x_shape, "uint8")}, lambda v: (
        op.matmul(v, tvm.relax.const(w, "int8"), out_dtype="int32") if kind == "matmul" else
        op.nn.conv2d(v, tvm.relax.const(w, "int8"), padding=1, out_dtype="int32")))
    for spec, instruction in ((targets.get_target("x86-64-avx2"), "llvm.x86.avx2.pmadd.wd"),
                              (AVX512, "llvm.x86.avx512.pmaddw.d.512")):
        scheduled = _scheduled_kernels(mod, spec)
        (product,) = [f for gv, f in scheduled.functions_items() if kind in gv.name_hint]
        assert instruction in product.script()
    compile_module(mod, AVX512)  # LLVM takes the AVX-512 form (compiled, not run here)
    (got,) = compile_module(mod, HOST).run([x])
    if kind == "matmul":
        expected = x.astype(np.int64) @ w.astype(np.int64)
    else:
        expected = reference.conv(x.astype(np.int64), w.astype(np.int64), strides=[1, 1],
                                  dilations=[1, 1], pads_front=[1, 1], pads_back=[1, 1])
    np.testing.assert_array_equal(got, expected)
