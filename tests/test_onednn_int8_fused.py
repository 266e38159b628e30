"""What oneDNN's int8 primitives take beyond the product (targets/plugins/onednn/int8_epilogue.py)
and QDQ's float round trips computed on 8 bits (int8_qdq.py): each against a NumPy reference
of the same rounding (exact integer sums, the float scale, round half to even), and the
graph rewrites read from the module they leave."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import relax

from odla_tvm.frontends import onnx as onnx_frontend
from targets.plugins.onednn import int8_epilogue, int8_impl, int8_patterns
from targets.plugins.onednn.int8_qdq import in_eight_bits

try:
    from . import reference
    from .test_onednn import needs_onednn
    from .test_onednn_int8 import I8, SEVEN_BITS, U8, _conv_reference, _levels, _run, _taken_here
    from .test_quantized_int8 import _model
except ImportError:  # run as a plain module
    import reference
    from test_onednn import needs_onednn
    from test_onednn_int8 import I8, SEVEN_BITS, U8, _conv_reference, _levels, _run, _taken_here
    from test_quantized_int8 import _model

ort = pytest.importorskip("onnxruntime")
node = helper.make_node


def _quantized(real, scale, zero, dtype=U8):
    """QuantizeLinear: round half to even, saturate."""
    limits = np.iinfo(dtype)
    return np.clip(np.rint(real / np.float64(scale)) + int(zero), limits.min, limits.max).astype(dtype)


def _relax_ops(mod) -> list[tuple[str, str]]:
    """(op name, result dtype) of every op call in ``mod``'s main, in order."""
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(
        (e.op.name, str(e.ty.dtype))) if isinstance(e, relax.Call)
        and isinstance(e.op, tvm.ir.Op) else None)
    return found


def _prepared(model):
    """``model``'s Relax module as the oneDNN plugin prepares it for its int8 patterns."""
    import relay_bridge

    mod = relay_bridge.compute_in_integers(onnx_frontend.import_model(model).build_module())
    return int8_patterns.prepare(mod, ("conv2d", "matmul"), "avx512_core_vnni")


def _padded_conv_model(x_shape, x_scale, x_zero, wq, w_scale, bias, h_scale, h_zero):
    """An ONNX QDQ convolution whose padding is a Pad node, as exporters write it: the
    source dequantized, padded with 0.0, quantized again, then the convolution with its
    bias, a ReLU and a quantize."""
    nodes = [node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
             node("Pad", ["x", "pads"], ["xp"], mode="constant"),
             node("QuantizeLinear", ["xp", "xs", "xz"], ["xpq"]),
             node("DequantizeLinear", ["xpq", "xs", "xz"], ["xpf"]),
             node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             node("Conv", ["xpf", "wf", "b"], ["c"]), node("Relu", ["c"], ["r"]),
             node("QuantizeLinear", ["r", "hs", "hz"], ["hq"]),
             node("DequantizeLinear", ["hq", "hs", "hz"], ["y"])]
    return _model(nodes, {"xq": np.zeros(x_shape, U8)}, "y", TensorProto.FLOAT, {
        "xs": x_scale, "xz": x_zero, "pads": np.array([0, 0, 1, 2, 0, 0, 1, 0], np.int64),
        "w": wq, "ws": w_scale, "b": bias, "hs": h_scale, "hz": h_zero})


@needs_onednn
def test_a_padded_qdq_convolution_computes_on_8_bits_in_one_primitive():
    """The Pad's float round trip becomes the 8-bit padding by the zero point, which the
    convolution's primitive takes with the scales, bias, ReLU and quantize: one product run,
    the result within one level of the NumPy reference (oneDNN's float rounding of the
    scaled sum may differ from NumPy's at a half), almost every element equal."""
    x_shape, x_scale, x_zero = (1, 8, 9, 9), np.float32(0.05), np.array(110, U8)
    wq = _levels((16, 8, 3, 3), I8, *SEVEN_BITS)
    w_scale = np.random.default_rng(3).uniform(0.001, 0.01, 16).astype(np.float32)
    bias = np.random.default_rng(4).uniform(-1, 1, 16).astype(np.float32)
    h_scale, h_zero = np.float32(0.2), np.array(7, U8)
    model = _padded_conv_model(x_shape, x_scale, x_zero, wq, w_scale, bias, h_scale, h_zero)
    ops = _relax_ops(_prepared(model))
    assert ("relax.nn.pad", "uint8") in ops and ("relax.nn.pad", "float32") not in ops

    xq = _levels(x_shape, U8)
    got, calls = _run(model, {"xq": xq})
    padded = np.pad(xq, [(0, 0), (0, 0), (1, 1), (2, 0)], constant_values=int(x_zero))
    sums = _conv_reference(padded, x_zero, wq, 1, 0, 1, 1)
    real = sums * np.float64(x_scale) * w_scale.reshape(-1, 1, 1) + bias.reshape(-1, 1, 1)
    levels = _quantized(np.maximum(real, 0), h_scale, h_zero)
    expected = (levels.astype(np.float64) - int(h_zero)) * np.float64(h_scale)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.abs(got - expected).max() <= h_scale * 1.0001
    assert np.mean(np.isclose(got, expected, atol=1e-6)) > 0.99
    assert calls == (1 if _taken_here() else 0)


@pytest.mark.parametrize("dtype", [U8, I8], ids=["u8", "s8"])
@pytest.mark.parametrize("activation", ["Sigmoid", "Tanh"])
def test_an_activation_between_qdq_is_a_table_of_its_levels(dtype, activation):
    """quantize(f(dequantize(q))) of one 8-bit tensor: a lookup in the table of its values,
    equal to the float function on every level (all 256 of them fed)."""
    limits = np.iinfo(dtype)
    xq = np.arange(limits.min, limits.max + 1).astype(dtype).reshape(1, 4, 8, 8)
    x_scale, x_zero = np.float32(0.04), np.array(3, dtype)
    y_scale, y_zero = np.float32(1 / 200), np.array(0, dtype)
    nodes = [node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]), node(activation, ["x"], ["a"]),
             node("QuantizeLinear", ["a", "ys", "yz"], ["y"])]
    elem = TensorProto.UINT8 if dtype is U8 else TensorProto.INT8
    model = _model(nodes, {"xq": xq}, "y", elem,
                   {"xs": x_scale, "xz": x_zero, "ys": y_scale, "yz": y_zero})
    rewritten = in_eight_bits(onnx_frontend.import_model(model).build_module())
    names = [name for name, _ in _relax_ops(rewritten)]
    assert "relax.take" in names and f"relax.{activation.lower()}" not in names

    real = (xq.astype(np.float64) - int(x_zero)) * np.float64(x_scale)
    function = reference.sigmoid if activation == "Sigmoid" else np.tanh
    expected = _quantized(function(real.astype(np.float32)), y_scale, y_zero, dtype)
    got, _ = _run(model, {"xq": xq})
    assert got.dtype == dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    (theirs,) = ort.InferenceSession(model.SerializeToString()).run(None, {"xq": xq})
    assert np.abs(got.astype(int) - theirs.astype(int)).max() <= 1


def test_a_swish_between_qdq_is_one_table():
    """x times its sigmoid, the sigmoid quantized between (as ORT's quantizer writes a
    swish): a function of x's levels alone, one table lookup, equal to the float code on
    every level."""
    xq = np.arange(256).astype(U8).reshape(1, 4, 8, 8)
    nodes = [node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]), node("Sigmoid", ["x"], ["g"]),
             node("QuantizeLinear", ["g", "gs", "gz"], ["gq"]),
             node("DequantizeLinear", ["gq", "gs", "gz"], ["gf"]),
             node("Mul", ["x", "gf"], ["m"]), node("QuantizeLinear", ["m", "ys", "yz"], ["y"])]
    constants = {"xs": np.float32(0.05), "xz": np.array(128, U8), "gs": np.float32(1 / 255),
                 "gz": np.array(0, U8), "ys": np.float32(0.03), "yz": np.array(10, U8)}
    model = _model(nodes, {"xq": xq}, "y", TensorProto.UINT8, constants)
    rewritten = in_eight_bits(onnx_frontend.import_model(model).build_module())
    names = [name for name, _ in _relax_ops(rewritten)]
    assert names.count("relax.take") == 1 and "relax.multiply" not in names

    x = ((xq.astype(np.float64) - 128) * np.float64(0.05)).astype(np.float32)
    gate = _quantized(reference.sigmoid(x), constants["gs"], 0)
    expected = _quantized(x * (gate.astype(np.float32) * constants["gs"]), constants["ys"], 10)
    got, _ = _run(model, {"xq": xq})
    assert got.dtype == U8 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_a_max_pool_between_qdq_pools_the_levels():
    """quantize(max_pool(dequantize(q))) by the same scale and zero point is the max pool of
    q: exact against NumPy's, and no float left in the module."""
    xq = _levels((1, 3, 8, 8), U8)
    nodes = [node("DequantizeLinear", ["xq", "s", "z"], ["x"]),
             node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             node("QuantizeLinear", ["p", "s", "z"], ["y"])]
    model = _model(nodes, {"xq": xq}, "y", TensorProto.UINT8,
                   {"s": np.float32(0.3), "z": np.array(12, U8)})
    rewritten = in_eight_bits(onnx_frontend.import_model(model).build_module())
    assert all(dtype == "uint8" for _, dtype in _relax_ops(rewritten))
    got, _ = _run(model, {"xq": xq})
    expected = reference.max_pool(xq, window=[2, 2], strides=[2, 2], pads_front=[0, 0],
                                  pads_back=[0, 0])
    assert got.dtype == U8 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_a_quantize_by_another_scale_keeps_its_float_round_trip():
    """A max pool whose quantize has a scale of its own is not the pool of the levels: the
    rewrite leaves it."""
    nodes = [node("DequantizeLinear", ["xq", "s", "z"], ["x"]),
             node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2]),
             node("QuantizeLinear", ["p", "s2", "z"], ["y"])]
    model = _model(nodes, {"xq": np.zeros((1, 3, 4, 4), U8)}, "y", TensorProto.UINT8,
                   {"s": np.float32(0.3), "s2": np.float32(0.5), "z": np.array(12, U8)})
    mod = onnx_frontend.import_model(model).build_module()
    assert ("relax.nn.max_pool2d", "float32") in _relax_ops(in_eight_bits(mod))


@needs_onednn
def test_a_dynamically_quantized_matmul_fuses_its_run_time_scale(tmp_path):
    """quantize_dynamic's MatMulInteger, Cast, Mul by the run-time scale times the weights'
    and the bias Add: one product whose source zero point and scale are read every run;
    each run's result against the exact integer sums, scaled."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(5)
    weights = {"w": rng.standard_normal((48, 24)).astype(np.float32),
               "b": rng.standard_normal(24).astype(np.float32)}
    nodes = [node("MatMul", ["x", "w"], ["m"]), node("Add", ["m", "b"], ["y"])]
    float_model = _model(nodes, {"x": np.zeros((1, 6, 48), np.float32)}, "y",
                         TensorProto.FLOAT, weights)
    onnx.save(float_model, tmp_path / "float32.onnx")
    quantization.quantize_dynamic(tmp_path / "float32.onnx", tmp_path / "int8.onnx",
                                  weight_type=quantization.QuantType.QInt8, reduce_range=True)
    quantized = onnx.load(tmp_path / "int8.onnx")
    session = ort.InferenceSession(tmp_path / "int8.onnx")
    for seed, spread in ((6, 1.0), (7, 5.0)):  # a new scale and zero point each run
        x = (rng.standard_normal((1, 6, 48)) * spread + 0.5).astype(np.float32)
        (theirs,) = session.run(None, {"x": x})
        got, calls = _run(quantized, {"x": x})
        assert got.dtype == np.float32 and got.shape == theirs.shape
        np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max())
        assert calls == (1 if _taken_here() else 0)


def test_the_epilogue_reads_per_channel_operands_along_the_product_s_channels():
    """per_channel: one value, or one per output channel laid along the result's channel
    axis (NHWC's last, NCHW's second, a matmul's last); anything else is refused."""
    def var(shape, dtype="float32"):
        return relax.Var("v", relax.TensorType(shape, dtype))

    x, w = var((1, 4, 4, 8), "uint8"), relax.const(np.zeros((16, 3, 3, 8), I8))
    nhwc = relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="OHWI",
                              out_dtype="int32")
    nhwc = relax.BlockBuilder().normalize(nhwc)
    assert int8_epilogue.per_channel(var(()), nhwc) == "one"
    assert int8_epilogue.per_channel(var((1, 1, 1, 16)), nhwc) == "channel"
    assert int8_epilogue.per_channel(var((16,)), nhwc) == "channel"
    assert int8_epilogue.per_channel(var((1, 16, 1, 1)), nhwc) is None
    assert int8_epilogue.per_channel(var((1, 1, 1, 16), "int32"), nhwc) is None
    assert int8_epilogue.per_channel(var((1, 4, 1, 16)), nhwc) is None


@needs_onednn
def test_the_probe_creates_each_epilogue_s_primitive_here():
    """int8_impl creates the primitive with each epilogue's attributes, as int8_runtime.cc
    does: oneDNN has an implementation of them here (the class's, not its reference code)."""
    epilogues = [int8_impl.Epilogue(src_zero=True, weights_scale="channel", bias=True,
                                    relu=True, dst="uint8"),
                 int8_impl.Epilogue(src_zero=True, src_scale=True, weights_scale="channel",
                                    bias=True, dst="float32")]
    for epilogue in epilogues:
        conv = int8_impl.conv_implementation("uint8", (1, 16, 14, 14), (32, 16, 3, 3),
                                             (1, 32, 14, 14), (1, 1), (0, 0), (1, 1), (1, 1),
                                             epilogue)
        matmul = int8_impl.matmul_implementation("uint8", 32, 64, 48, epilogue)
        assert not int8_impl.is_reference(conv), conv
        assert not int8_impl.is_reference(matmul), matmul
