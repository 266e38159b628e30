"""The layouts of tuned CPU kernels (targets.layouts): convolutions converted to NHWC with the ops
around them following, channel constants made full rank so that they can follow, weights marked
for prepacking; the numbers stay onnxruntime's."""

import dataclasses

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax

import targets
from odla_tvm.frontends.onnx import import_model
from targets.layouts import CPU_LAYOUTS, layout_passes
from targets.runtime import _lowering, fused_kernels

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(5)


def init(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


@pytest.fixture(scope="module")
def fire_module():
    """Conv with bias, batch norm and relu, a max pool, a squeezenet fire module (1x1 and 3x3
    convs concatenated on channels), a (C, 1, 1) shift, a scalar scale, a global pool."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c0", "s", "o", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r0"]),
        helper.make_node("MaxPool", ["r0"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w1", "b1"], ["e1"]),
        helper.make_node("Conv", ["p", "w3", "b3"], ["e3"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["e1", "e3"], ["cat"], axis=1),
        helper.make_node("Add", ["cat", "shift"], ["shifted"]),
        helper.make_node("Mul", ["shifted", "half"], ["scaled"]),
        helper.make_node("GlobalAveragePool", ["scaled"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"]),
    ]
    scale = numpy_helper.from_array(RNG.uniform(0.5, 1.5, 8).astype(np.float32), "s")
    variance = numpy_helper.from_array(RNG.uniform(0.5, 1.5, 8).astype(np.float32), "v")
    graph = helper.make_graph(
        nodes, "fire", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 12, 12))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 12))],
        [init("w0", 8, 3, 3, 3), init("b0", 8), scale, init("o", 8), init("m", 8), variance,
         init("w1", 4, 8, 1, 1), init("b1", 4), init("w3", 8, 8, 3, 3), init("b3", 8),
         init("shift", 12, 1, 1), numpy_helper.from_array(np.float32(0.5), "half")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)  # what onnxruntime 1.32 reads
    onnx.checker.check_model(model)
    return model


def transposed_values(mod):
    """The permute_dims calls of ``mod``'s main whose operand is not a constant (constants'
    are folded when compiling)."""
    calls = []
    relax.analysis.post_order_visit(mod["main"].body, lambda e: calls.append(e) if (
        isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op)
        and e.op.name == "relax.permute_dims"
        and not isinstance(e.args[0], tvm.ir.expr.Constant)) else None)
    return calls


def test_ops_follow_the_converted_convolutions(fire_module):
    mod = import_model(fire_module).build_module()
    converted = tvm.transform.Sequential(layout_passes(CPU_LAYOUTS))(mod)
    text = converted["main"].script()
    assert text.count('data_layout="NHWC"') == 3 and 'layout="NCHW"' not in text
    # Into NHWC once at the input, back once where Flatten needs the model's order: the batch
    # norm's factors, the biases and the (12, 1, 1) shift follow as full-rank constants.
    assert len(transposed_values(converted)) == 2
    assert len(transposed_values(mod)) == 0


def test_converted_kernels_compute_what_onnxruntime_does(fire_module):
    spec = targets.host_cpu()
    kernels = fused_kernels(import_model(fire_module).build_module(), spec)
    with spec.tvm_target():
        library = tvm.compile(kernels, target=spec.tvm_target(), relax_pipeline=_lowering(spec))
    vm = relax.VirtualMachine(library, tvm.cpu())
    x = RNG.standard_normal((1, 3, 12, 12)).astype(np.float32)
    got = vm["main"](tvm.runtime.tensor(x))[0].numpy()
    session = ort.InferenceSession(fire_module.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    assert got.shape == want.shape == (1, 12) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_kernel_weights_are_marked_for_prepacking_and_kernels_keep_their_names(fire_module):
    mod = import_model(fire_module).build_module()
    spec = targets.host_cpu()
    marked = fused_kernels(mod, spec)
    plain = fused_kernels(mod, dataclasses.replace(spec, prepack_weights=False))
    names = sorted(g.name_hint for g in marked.get_global_vars())
    assert names == sorted(g.name_hint for g in plain.get_global_vars())
    convolutions = [n for n in names if n.startswith("fused_conv2d")]
    assert len(convolutions) == 3
    for name in convolutions:
        # Operand 0 is the activation, 1 the weight, then the bias (and the batch norm's
        # factor and shift): every constant, and only the constants, are marked.
        free = [int(i) for i in marked[name].attrs["layout_free_buffers"]]
        assert free == list(range(1, len(marked[name].params) - 1))
        assert "layout_free_buffers" not in (plain[name].attrs or {})


def test_gpu_kernels_keep_the_models_layout(fire_module):
    spec = targets.get_target("cuda")
    assert spec.layouts == {} and not spec.prepack_weights
    kernels = fused_kernels(import_model(fire_module).build_module(), spec)
    assert len(transposed_values(kernels)) == 0
