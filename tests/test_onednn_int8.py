"""int8 products on oneDNN's int8 primitives (targets/plugins/onednn/int8_*): each form
(ConvInteger and MatMulInteger, exact in int32; QDQ convolutions through to their float
results; grouped, depthwise, strided, dilated, padded) against a NumPy reference of the same
integer arithmetic, with oneDNN's code seen to run; which products each CPU class takes
(fed the ISA's name); the layouts of an int8 graph; and a dynamically quantized transformer
block, quantized by onnxruntime, against onnxruntime's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax
from onnx import TensorProto, helper

import odla_tvm as odla
from odla_tvm.frontends import onnx as onnx_frontend
from targets.plugins.onednn import int8_patterns, policy
from targets.plugins.onednn.isa import ISAS, onednn_isa

try:
    from . import reference
    from .test_onednn import needs_onednn
    from .test_quantized_int8 import _model
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    import reference
    from test_onednn import needs_onednn
    from test_quantized_int8 import _model

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(64)
U8, I8 = np.uint8, np.int8
SEVEN_BITS = (-64, 65)  # what onnxruntime's reduce_range leaves, |w| <= 64


def _levels(shape, dtype, low=None, high=None):
    limits = np.iinfo(dtype)
    return RNG.integers(limits.min if low is None else low,
                        limits.max + 1 if high is None else high, shape).astype(dtype)


def _run(model, feeds, device="DEFAULT"):
    """odla-tvm's outputs on ``device`` (INTEL_DNNL: the plugin never leaves a graph to TVM
    whole) and how many int8 products oneDNN ran."""
    session = odla.Session.from_onnx(
        model, odla.allocate_device(device_name=odla.DeviceName[device]), engine_cache=False)
    (got,) = session.run(feeds)
    library = session.executable.module.runtime_library
    try:
        calls = library.get_function("odla_onednn_int8_calls", query_imports=True)()
    except (AttributeError, RuntimeError):  # no int8 region in the library
        calls = 0
    return got, calls


def _taken_here(src_dtype=U8, largest=64) -> bool:
    """Whether oneDNN takes a product of that source by weights of that magnitude here."""
    return int8_patterns.why_not_taken(onednn_isa(), np.dtype(src_dtype).name,
                                       np.array([largest], I8)) is None


# x shape, output channels, kernel, stride, pad, group, dilation
CONVS = [((1, 4, 9, 9), 8, 3, 1, 1, 1, 1), ((2, 3, 7, 6), 6, 1, 1, 0, 1, 1),
         ((1, 8, 10, 11), 16, 3, 2, 1, 2, 1), ((1, 5, 12, 12), 7, 3, 1, 2, 1, 2),
         ((1, 16, 8, 8), 16, 3, 1, 1, 16, 1)]  # depthwise


def _conv_reference(xq, x_zero, wq, stride, pad, group, dilation):
    return reference.conv(xq.astype(np.int64) - int(x_zero), wq.astype(np.int64),
                          strides=[stride] * 2, dilations=[dilation] * 2,
                          pads_front=[pad] * 2, pads_back=[pad] * 2, group=group)


@needs_onednn
@pytest.mark.parametrize("shape", CONVS, ids=lambda s: f"{'x'.join(map(str, s[0]))}g{s[5]}")
def test_conv_integer_is_exact(shape):
    """ConvInteger of u8 activations (zero point 77) by 7-bit weights: the int32 sums."""
    x_shape, c_out, kernel, stride, pad, group, dilation = shape
    xq, x_zero = _levels(x_shape, U8), np.array(77, U8)
    wq = _levels((c_out, x_shape[1] // group, kernel, kernel), I8, *SEVEN_BITS)
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], strides=[stride] * 2,
                            pads=[pad] * 4, group=group, dilations=[dilation] * 2)
    model = _model([node], {"x": xq}, "y", TensorProto.INT32, {"w": wq, "xz": x_zero})
    got, calls = _run(model, {"x": xq})
    expected = _conv_reference(xq, x_zero, wq, stride, pad, group, dilation)
    assert got.dtype == np.int32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected.astype(np.int32))
    assert calls == (1 if _taken_here() else 0)


@needs_onednn
@pytest.mark.parametrize("a_shape,n", [((4, 16), 8), ((2, 5, 48), 16), ((1, 3, 4, 40), 24)])
def test_matmul_integer_is_exact(a_shape, n):
    """MatMulInteger (a transformer's dynamically quantized product): the int32 sums, on
    INTEL_DNNL (DEFAULT leaves a graph of matmuls to TVM whole, int8 or not)."""
    aq, a_zero = _levels(a_shape, U8), np.array(140, U8)
    bq = _levels((a_shape[-1], n), I8, *SEVEN_BITS)
    node = helper.make_node("MatMulInteger", ["a", "b", "az"], ["y"])
    model = _model([node], {"a": aq}, "y", TensorProto.INT32, {"b": bq, "az": a_zero})
    got, calls = _run(model, {"a": aq}, "INTEL_DNNL")
    expected = (aq.astype(np.int64) - int(a_zero)) @ bq.astype(np.int64)
    assert got.dtype == np.int32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected.astype(np.int32))
    assert calls == (1 if _taken_here() else 0)


@needs_onednn
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_qdq_convolutions_then_relu_and_requantize(per_channel):
    """Two QDQ convolutions with a ReLU and a quantize between (activations stay u8 from one
    to the next): the float result of the exact integer sums, scaled."""
    x_shape = (1, 8, 10, 10)
    xq, x_scale, x_zero = _levels(x_shape, U8), np.float32(0.02), np.array(120, U8)
    w1, w2 = (_levels((8, 8, 3, 3), I8, *SEVEN_BITS) for _ in range(2))
    s1, s2 = (RNG.uniform(0.002, 0.02, 8 if per_channel else ()).astype(np.float32)
              for _ in range(2))
    h_scale, h_zero = np.float32(0.5), np.array(3, U8)
    node = helper.make_node
    nodes = [node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
             node("DequantizeLinear", ["w1", "s1"], ["w1f"], axis=0),
             node("Conv", ["x", "w1f"], ["c1"], pads=[1] * 4), node("Relu", ["c1"], ["r1"]),
             node("QuantizeLinear", ["r1", "hs", "hz"], ["hq"]),
             node("DequantizeLinear", ["hq", "hs", "hz"], ["h"]),
             node("DequantizeLinear", ["w2", "s2"], ["w2f"], axis=0),
             node("Conv", ["h", "w2f"], ["y"], pads=[1] * 4)]
    model = _model(nodes, {"xq": xq}, "y", TensorProto.FLOAT, {
        "xs": x_scale, "xz": x_zero, "w1": w1, "s1": s1, "hs": h_scale, "hz": h_zero,
        "w2": w2, "s2": s2})
    got, calls = _run(model, {"xq": xq})

    def scaled(sums, scale, w_scale):
        return sums * np.float64(scale) * np.asarray(w_scale, np.float64).reshape(-1, 1, 1)

    first = scaled(_conv_reference(xq, x_zero, w1, 1, 1, 1, 1), x_scale, s1)
    hq = np.clip(np.round(np.maximum(first, 0) / h_scale) + int(h_zero), 0, 255).astype(U8)
    expected = scaled(_conv_reference(hq, h_zero, w2, 1, 1, 1, 1), h_scale, s2)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)
    assert calls == (2 if _taken_here() else 0)


@pytest.mark.parametrize("isa", ISAS)
def test_which_products_each_cpu_class_takes(isa):
    """With a 32-bit dot product (VNNI, AMX) every one; without, u8 sources by weights of
    |w| <= 64 only (vpmaddubsw's 16-bit pair sums cannot saturate)."""
    dot_product = isa in ("avx2_vnni", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx")
    seven, eight = np.array([-64, 64], I8), np.array([-128, 127], I8)
    assert int8_patterns.why_not_taken(isa, "uint8", seven) is None
    for src, weights in (("uint8", eight), ("int8", seven), ("int8", eight)):
        why = int8_patterns.why_not_taken(isa, src, weights)
        assert (why is None) == dot_product, (isa, src, why)
        if why is not None:
            assert isa in why
    assert "reference" in int8_patterns.why_not_taken("sse41", "uint8", seven)


def _qdq_graph(largest: int):
    """A Relax module of two QDQ convolutions of weights up to ``largest``."""
    wq = np.clip(_levels((8, 8, 3, 3), I8), -largest, largest).astype(I8)
    wq[0, 0, 0, 0] = largest
    node = helper.make_node
    nodes = [node("DequantizeLinear", ["xq", "xs", "xz"], ["x"]),
             node("DequantizeLinear", ["w", "ws"], ["wf"], axis=0),
             node("Conv", ["x", "wf"], ["c"], pads=[1] * 4),
             node("QuantizeLinear", ["c", "xs", "xz"], ["cq"]),
             node("DequantizeLinear", ["cq", "xs", "xz"], ["h"]),
             node("Conv", ["h", "wf"], ["y"], pads=[1] * 4)]
    model = _model(nodes, {"xq": np.zeros((1, 8, 6, 6), U8)}, "y", TensorProto.FLOAT,
                   {"xs": np.float32(0.1), "xz": np.array(100, U8), "w": wq,
                    "ws": np.full(8, 0.01, np.float32)})
    mod = onnx_frontend.import_model(model).build_module()
    import relay_bridge

    return relay_bridge.compute_in_integers(mod)


@pytest.mark.parametrize("isa, largest, declined", [
    ("avx2", 64, False), ("avx2", 127, True), ("avx512_core", 127, True),
    ("avx2_vnni", 127, False), ("avx512_core_vnni", 127, False),
    ("avx512_core_amx", 127, False)])
def test_the_policy_keeps_an_int8_graph_where_onednn_takes_its_products(
        monkeypatch, isa, largest, declined):
    monkeypatch.setattr(policy, "onednn_isa", lambda: isa)
    mod = _qdq_graph(largest)
    share, why = int8_patterns.taken_share(mod["main"], isa)
    assert share == (0.0 if declined else 1.0)
    why_declined = policy.declines(mod)
    if declined:
        assert "int8 primitives here take 0%" in why_declined and isa in why_declined
        assert why is not None and why in why_declined
    else:
        assert why is None and why_declined is None


def test_an_int8_graph_stays_nhwc_between_convolutions():
    """After prepare: NHWC convolutions, and no transpose of an activation between them (the
    graph's input and output transposed once each; the int32 zero point terms, computed from
    constants, are folded when partitioning)."""
    mod = int8_patterns.prepare(_qdq_graph(64), ("conv2d",), "avx512_core_vnni")
    mod = tvm.relax.transform.FoldConstant()(mod)
    convs, activation_transposes = [], []

    def visit(expr):
        if isinstance(expr, tvm.relax.Call) and isinstance(expr.op, tvm.ir.Op):
            if expr.op.name == "relax.nn.conv2d":
                convs.append(expr.attrs.data_layout)
            elif expr.op.name == "relax.permute_dims" and str(expr.ty.dtype) != "int32":
                activation_transposes.append(expr)

    tvm.relax.analysis.post_order_visit(mod["main"], visit)
    assert convs == ["NHWC", "NHWC"]
    assert len(activation_transposes) == 2, activation_transposes


def _transformer_block(seq=16, width=64) -> onnx.ModelProto:
    """Attention projections and a ReLU MLP with residuals, in float32."""
    rng = np.random.default_rng(5)
    weights = {name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
               for name, shape in [("wq", (width, width)), ("wk", (width, width)),
                                   ("wv", (width, width)), ("up", (width, 4 * width)),
                                   ("down", (4 * width, width))]}
    node = helper.make_node
    nodes = [node("MatMul", ["x", w], [w + "_x"]) for w in ("wq", "wk", "wv")] + [
        node("Transpose", ["wk_x"], ["kt"], perm=[0, 2, 1]),
        node("MatMul", ["wq_x", "kt"], ["scores"]),
        node("Softmax", ["scores"], ["attention"], axis=-1),
        node("MatMul", ["attention", "wv_x"], ["mixed"]), node("Add", ["x", "mixed"], ["h"]),
        node("MatMul", ["h", "up"], ["u"]), node("Relu", ["u"], ["r"]),
        node("MatMul", ["r", "down"], ["d"]), node("Add", ["h", "d"], ["y"])]
    return _model(nodes, {"x": np.zeros((1, seq, width), np.float32)}, "y", TensorProto.FLOAT,
                  weights)


@needs_onednn
def test_a_dynamically_quantized_transformer_block_agrees_with_onnxruntime(tmp_path):
    """quantize_dynamic with reduce_range (what onnxruntime advises without VNNI): within the
    error onnxruntime's own int8 shows against float32, oneDNN's matmuls running on the
    DEFAULT device, their zero point, scales and bias fused in."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    onnx.save(_transformer_block(), tmp_path / "float32.onnx")
    quantization.quantize_dynamic(tmp_path / "float32.onnx", tmp_path / "int8.onnx",
                                  weight_type=quantization.QuantType.QInt8, reduce_range=True)
    feeds = {"x": np.random.default_rng(2).standard_normal((1, 16, 64)).astype(np.float32)}
    (exact,) = ort.InferenceSession(tmp_path / "float32.onnx").run(None, feeds)
    (theirs,) = ort.InferenceSession(tmp_path / "int8.onnx").run(None, feeds)
    quantized = onnx.load(tmp_path / "int8.onnx")
    got, calls = _run(quantized, feeds)
    assert got.dtype == np.float32 and got.shape == exact.shape
    assert np.abs(got - exact).max() <= np.abs(theirs - exact).max() * 1.01 + 1e-6
    assert calls == (5 if _taken_here() else 0)
    import relay_bridge

    mod = relay_bridge.compute_in_integers(onnx_frontend.import_model(quantized).build_module())
    assert (policy.declines(mod) is None) == _taken_here()


_CLASS_OF_LIMIT = {"AVX2": "avx2", "AVX2_VNNI": "avx2_vnni", "AVX512_CORE": "avx512_core",
                   "AVX512_CORE_VNNI": "avx512_core_vnni", "AVX512_CORE_BF16": "avx512_core_bf16",
                   "AVX512_CORE_AMX": "avx512_core_amx"}
_IMPLEMENTATIONS = """
import json
from targets.plugins.onednn import int8_impl as i
from targets.plugins.onednn.isa import onednn_isa
print(json.dumps([onednn_isa(),
    i.conv_implementation("uint8", (1, 64, 28, 28), (64, 64, 3, 3), (1, 64, 28, 28), (1, 1),
                          (0, 0), (1, 1), (1, 1)),
    i.conv_implementation("int8", (1, 64, 28, 28), (64, 1, 1, 3, 3), (1, 64, 28, 28), (1, 1),
                          (0, 0), (1, 1), (1, 1)),
    i.conv_implementation("uint8", (1, 24, 14, 14), (4, 28, 6, 1, 1), (1, 112, 14, 14), (1, 1),
                          (0, 0), (0, 0), (0, 0)),
    i.matmul_implementation("uint8", 128, 768, 256)]))
"""


@needs_onednn
@pytest.mark.parametrize("limit", list(_CLASS_OF_LIMIT))
def test_onednn_picks_the_kernels_of_each_class_it_is_lowered_to(limit):
    """ONEDNN_MAX_CPU_ISA lowers the class oneDNN reaches (never raises it): in a process so
    lowered, a dense and a depthwise convolution and a matmul get the class's own kernels, no
    reference code; a grouped 1x1 convolution of 6 channels a group gets only the reference
    code on AVX2 (which the plugin leaves to TVM)."""
    import json
    import os
    import subprocess
    import sys

    if not isa_reaches_here(_CLASS_OF_LIMIT[limit]):
        pytest.skip(f"this CPU reaches {onednn_isa()}, below {_CLASS_OF_LIMIT[limit]}")
    out = subprocess.run([sys.executable, "-c", _IMPLEMENTATIONS], capture_output=True, text=True,
                         check=True, env={**os.environ, "ONEDNN_MAX_CPU_ISA": limit}).stdout
    isa, dense, depthwise, grouped, matmul = json.loads(out.splitlines()[-1])
    assert isa == _CLASS_OF_LIMIT[limit]
    for found in (dense, depthwise, matmul):
        assert found is not None and not found.startswith("ref"), (limit, found)
    assert "avx2" in dense if isa == "avx2" else isa.removesuffix("_amx") in dense.replace(
        "avx512_core_amx", "avx512_core"), dense
    if isa == "avx2":
        assert grouped.startswith("ref")


def isa_reaches_here(isa: str) -> bool:
    from targets.plugins.onednn.isa import reaches

    return reaches(onednn_isa(), isa)


@needs_onednn
def test_a_product_onednn_would_run_by_reference_code_stays_with_tvm(caplog):
    """A grouped 1x1 ConvInteger of 6 channels a group: oneDNN's reference code on AVX2, so
    TVM's (one log line says why: here the policy's, as it is the graph's only product);
    exact either way."""
    xq, x_zero = _levels((1, 24, 7, 7), U8), np.array(9, U8)
    wq = _levels((112, 6, 1, 1), I8, *SEVEN_BITS)
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], group=4)
    model = _model([node], {"x": xq}, "y", TensorProto.INT32, {"w": wq, "xz": x_zero})
    with caplog.at_level("INFO"):
        got, calls = _run(model, {"x": xq})
    np.testing.assert_array_equal(got, _conv_reference(xq, x_zero, wq, 1, 0, 4, 1).astype(np.int32))
    reference_code = [r.getMessage() for r in caplog.records if "reference code" in r.getMessage()]
    if onednn_isa() == "avx2":
        assert calls == 0 and len(reference_code) == 1 and "ref" in reference_code[0]
    else:
        assert calls == (0 if reference_code else 1)


def test_a_graph_without_integer_convolutions_keeps_its_layouts():
    """prepare's NHWC conversion is for convolutions: a graph of int8 matmuls (a transformer's)
    keeps its layouts, its transposes where they were (only its aliases go)."""
    a, b = np.zeros((1, 5, 48), U8), _levels((48, 16), I8, *SEVEN_BITS)
    node = helper.make_node
    nodes = [node("MatMulInteger", ["a", "b", "az"], ["p"]),
             node("Transpose", ["p"], ["y"], perm=[0, 2, 1])]
    model = _model(nodes, {"a": a}, "y", TensorProto.INT32, {"b": b, "az": np.array(3, U8)})
    import relay_bridge

    mod = relay_bridge.compute_in_integers(onnx_frontend.import_model(model).build_module())
    assert int8_patterns.taken_share(mod["main"], "avx2")[0] == 1.0
    prepared = int8_patterns.prepare(mod, ("conv2d", "matmul"), "avx2")
    tvm.ir.assert_structural_equal(prepared, relax.transform.CanonicalizeBindings()(mod))
