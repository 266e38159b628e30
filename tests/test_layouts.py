"""The layouts of tuned CPU kernels (targets.cpu.layouts): convolutions converted to NHWC with
the ops around them following, channel constants made full rank so that they can follow,
weights marked for prepacking; the numbers stay onnxruntime's."""

import dataclasses
import math

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import relax
from tvm.script import tirx as T

import targets
from odla_tvm.frontends.onnx import import_model
from targets.cpu.conv_rewrites import conv_rewrites
from targets.cpu.layouts import CPU_LAYOUTS, layout_passes
from targets.compiler import fused_kernels
from targets.compiler.constant_folding import _numpy_layout
from targets.compiler.pipeline import _lowering

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


def kernels_and_onnxruntime(model, x, spec):
    """Each output of ``model``'s fused kernels for ``spec``, compiled and run on ``x``, with
    onnxruntime's."""
    kernels = fused_kernels(import_model(model).build_module(), spec)
    with spec.tvm_target():
        library = tvm.compile(kernels, target=spec.tvm_target(), relax_pipeline=_lowering(spec))
    outputs = relax.VirtualMachine(library, tvm.cpu())["main"](tvm.runtime.tensor(x))
    got = [outputs.numpy()] if isinstance(outputs, tvm.runtime.Tensor) else [
        t.numpy() for t in outputs]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {model.graph.input[0].name: x})
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
    return list(zip(got, want, strict=True))


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
    x = RNG.standard_normal((1, 3, 12, 12)).astype(np.float32)
    [(got, want)] = kernels_and_onnxruntime(fire_module, x, targets.host_cpu())
    assert got.shape == (1, 12)
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


@pytest.fixture(scope="module")
def concat_then_conv():
    """A fire module's expand convs, concatenated three times: once read only by a squeeze conv
    (1x1, fewer channels), once also by the model's output and a conv of 60 channels (a
    classifier's odd width), once by a max pool before a squeeze conv."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["e1"]),
        helper.make_node("Conv", ["x", "w3", "b3"], ["e3"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["e3"], ["r3"]),
        helper.make_node("Concat", ["e1", "r3"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "wc", "bc"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("Concat", ["e1", "e3"], ["kept"], axis=1),
        helper.make_node("Conv", ["kept", "wk"], ["k"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["e1", "e3"], ["cat2"], axis=1),
        helper.make_node("MaxPool", ["cat2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "wp"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes, "concat_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 8, 6, 6))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8, 6, 6)),
         helper.make_tensor_value_info("kept", TensorProto.FLOAT, (1, 24, 6, 6)),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, (1, 60, 6, 6)),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, (1, 16, 3, 3))],
        [init("w1", 8, 8, 1, 1), init("b1", 8), init("w3", 16, 8, 3, 3), init("b3", 16),
         init("wc", 8, 24, 1, 1), init("bc", 8), init("wk", 60, 24, 3, 3),
         init("wp", 16, 24, 1, 1)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    return model


def calls_of(mod, op_name):
    calls = []
    relax.analysis.post_order_visit(mod["main"].body, lambda e: calls.append(e) if (
        isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == op_name)
        else None)
    return calls


def test_convolutions_of_a_concatenation_are_split_and_odd_channels_padded(concat_then_conv):
    mod = import_model(concat_then_conv).build_module()
    spec = targets.host_cpu()
    with spec.tvm_target():
        laid_out = tvm.transform.Sequential(layout_passes(spec.layouts))(mod)
        rewritten = tvm.transform.Sequential(conv_rewrites(spec.tvm_target()))(laid_out)
    # The concatenation read only by the squeeze conv is gone: that conv is one per part. So
    # is the pooled one: each part is pooled, and the conv after the pool split. The one the
    # model returns stays, and its conv reads it whole.
    assert len(calls_of(laid_out, "relax.concat")) == 3
    kept = [c for c in calls_of(rewritten, "relax.concat")
            if not isinstance(c.args[0].fields[-1], tvm.ir.expr.Constant)]
    assert len(kept) == 1
    assert len(calls_of(rewritten, "relax.nn.max_pool2d")) == 2
    convs = calls_of(rewritten, "relax.nn.conv2d")
    assert len(convs) == len(calls_of(laid_out, "relax.nn.conv2d")) + 2
    # 60 output channels become 64 (whole AVX-512 vectors), sliced back to 60.
    lanes = tvm.target.codegen.llvm_get_vector_width(spec.tvm_target()) // 32
    widths = sorted(int(c.ty.shape.values[3]) for c in convs)
    assert widths.count(-(-60 // lanes) * lanes) == (1 if 60 % lanes else 0)
    assert [int(d) for d in rewritten["main"].ret_ty.fields[2].shape.values] == [1, 60, 6, 6]


def laid_out_and_rewritten(model) -> tvm.IRModule:
    """``model`` in the host CPU's layouts, with its convolutions rewritten."""
    spec = targets.host_cpu()
    with spec.tvm_target():
        return tvm.transform.Sequential(layout_passes(spec.layouts) + conv_rewrites(
            spec.tvm_target()))(import_model(model).build_module())


def test_a_convolution_larger_than_its_concatenation_reads_it_whole():
    # squeezenet's classifier: 1000 channels from a concatenation of 512; summing parts would
    # read and write 1000 channels once more per part.
    graph = onnx.helper.make_graph(
        [helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
         helper.make_node("Conv", ["cat", "w"], ["y"])], "wide",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, (1, 4, 5, 5)) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 32, 5, 5))],
        [init("w", 32, 8, 1, 1)])
    rewritten = laid_out_and_rewritten(helper.make_model(graph))
    assert len(calls_of(rewritten, "relax.concat")) == 1
    assert len(calls_of(rewritten, "relax.nn.conv2d")) == 1


def _grouped_conv(channels: int, groups: int, in_per_group: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], group=groups),
         helper.make_node("Relu", ["c"], ["y"])], "grouped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, groups * in_per_group, 6, 6))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, channels, 6, 6))],
        [init("w", channels, in_per_group, 1, 1)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("channels,groups,in_per_group,padded_per_group", [
    # a group's outputs, padded, with AVX-512's 16 float32 lanes and AVX2's 8
    (136, 4, 34, {16: 48, 8: 40}),  # ShuffleNet's: 2-lane vectors, 16 for 1.4x the work
    (272, 4, 68, {16: 80, 8: 72}), (64, 4, 16, {16: 16, 8: 16}),  # 16: whole vectors
    (32, 8, 4, {16: 4, 8: 4}),  # ResNeXt-like 4 a group: left (padding: 2x or 4x the work)
    (32, 32, 1, {16: 1, 8: 1})])  # depthwise: SpatialReduction's, never padded
def test_grouped_convolutions_pad_each_groups_outputs_to_whole_vectors(
        channels, groups, in_per_group, padded_per_group):
    spec = targets.host_cpu()
    lanes = tvm.target.codegen.llvm_get_vector_width(spec.tvm_target()) // 32
    model = _grouped_conv(channels, groups, in_per_group)
    (conv,) = calls_of(laid_out_and_rewritten(model), "relax.nn.conv2d")
    if lanes in padded_per_group:
        assert int(conv.ty.shape.values[3]) == groups * padded_per_group[lanes]
    x = RNG.standard_normal((1, groups * in_per_group, 6, 6)).astype(np.float32)
    for got, want in kernels_and_onnxruntime(model, x, spec):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rewritten_kernels_compute_what_onnxruntime_does(concat_then_conv):
    spec = targets.host_cpu()
    assert spec.conv_rewrites
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    for got, want in kernels_and_onnxruntime(concat_then_conv, x, spec):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert not targets.get_target("cuda").conv_rewrites


@pytest.fixture(scope="module")
def wide_3x3_convs():
    """3x3 convs wide enough for Winograd (and of 16 tiles or more): one padded, with bias and
    relu, on sides that are not a multiple of the tile; one padded on two sides; one strided
    and one narrow that stay direct."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[0, 1, 2, 0]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["c2", "w3"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, 15, 17))],
        [helper.make_tensor_value_info("c1", TensorProto.FLOAT, (1, 40, 15, 16)),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 8, 8, 8))],
        [init("w0", 48, 32, 3, 3), init("b0", 48), init("w1", 40, 48, 3, 3),
         init("w2", 32, 40, 3, 3), init("w3", 8, 32, 3, 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    return model


def winograd_kernels(mod):
    return [gvar.name_hint for gvar, func in mod.functions_items()
            if isinstance(func, tvm.tirx.PrimFunc) and "winograd" in gvar.name_hint]


@pytest.mark.slow
def test_wide_3x3_convolutions_compute_by_winograd_as_onnxruntime_does(wide_3x3_convs):
    spec = targets.host_cpu()
    mod = import_model(wide_3x3_convs).build_module()
    kernels = fused_kernels(mod, spec)
    with spec.tvm_target():
        direct = tvm.transform.Sequential(
            layout_passes(spec.layouts) + conv_rewrites(spec.tvm_target())[:-1])(mod)
    # The two stride-1 convs of 32 channels or more; the strided and the narrow stay direct.
    assert len(calls_of(direct, "relax.nn.conv2d")) == 4
    assert len(winograd_kernels(kernels)) == 2
    x = RNG.standard_normal((1, 32, 15, 17)).astype(np.float32)
    for got, want in kernels_and_onnxruntime(wide_3x3_convs, x, spec):
        # Winograd's float32 error grows with the sums' terms, not with each output's size.
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("beta, roots", [(0.75, 2), (0.5, 1), (0.6, 0)])
def test_lrn_powers_by_0_75_and_0_5_compute_by_square_roots(beta, roots):
    """LRN's (bias + alpha / size * window sum) ^ beta: for beta 0.75 (AlexNet's, GoogLeNet's)
    and 0.5 by square roots, which vectorize, where a power is a libm call per element
    (GoogLeNet's first LRN took a fifth of its run); other betas keep the power. Each within
    a few units in the last place of onnxruntime's (its window sums round otherwise; beta 0.6,
    a power, is as far: 5e-7 seen), zeros and large values included."""
    graph = helper.make_graph(
        [helper.make_node("LRN", ["x"], ["y"], size=5, alpha=2e-3, beta=beta, bias=1.5)],
        "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 24, 5, 7))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 24, 5, 7))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    spec = targets.host_cpu()
    kernels = fused_kernels(import_model(model).build_module(), spec)
    script = "\n".join(f.script() for f in kernels.functions.values()
                       if isinstance(f, tvm.tirx.PrimFunc))
    assert (script.count("T.sqrt(") == roots) and (("T.pow(" in script) == (roots == 0))
    x = RNG.standard_normal((1, 24, 5, 7)).astype(np.float32) * 30
    x[0, :3] = 0
    for got, want in kernels_and_onnxruntime(model, x, spec):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)


def test_winograd_convolutions_of_one_shape_share_one_kernel():
    """Three same-shape 3x3 convolutions with their own weights (a ResNet stage's): one
    Winograd kernel made once, called three times, each with its weights, as onnxruntime."""
    nodes = [helper.make_node("Conv", [src, f"w{i}"], [dst], pads=[1, 1, 1, 1])
             for i, (src, dst) in enumerate([("x", "a"), ("a", "b"), ("b", "y")])]
    graph = helper.make_graph(
        nodes, "stage", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, 16, 16))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 32, 16, 16))],
        [init(f"w{i}", 32, 32, 3, 3) for i in range(3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    spec = targets.host_cpu()
    kernels = fused_kernels(import_model(model).build_module(), spec)
    (kernel,) = winograd_kernels(kernels)
    assert sum(1 for call in calls_of(kernels, "relax.call_tir")
               if call.args[0].name_hint == kernel) == 3
    x = RNG.standard_normal((1, 32, 16, 16)).astype(np.float32)
    for got, want in kernels_and_onnxruntime(model, x, spec):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())


def conv_relu(channels: int, side: int) -> onnx.ModelProto:
    """A 3x3 convolution with ReLU of NCHW (1, channels, side, side), shape kept (a
    convolution that is the graph's output stays NCHW, in no layout to rewrite)."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, channels, side, side))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, channels, side, side))],
        [init("w", channels, channels, 3, 3)])
    return helper.make_model(graph)


def winograd_alpha(mod) -> int | None:
    """The input tile side of ``mod``'s Winograd kernel (its packed weights' first axis)."""
    found = [func for gvar, func in mod.functions_items()
             if isinstance(func, tvm.tirx.PrimFunc) and "winograd" in gvar.name_hint]
    return int(found[0].params[1].shape[0]) if found else None


@pytest.mark.parametrize("channels,side,alpha", [
    (64, 224, None),  # vgg19's first stage: 29 MB of transformed tiles (slower)
    (64, 7, None),  # 4 tiles of 4x4 share each transformed weight, 4 times the 3x3 one; 2x2
    # tiles are 16, but 64 channels pay less than their transforms (slower measured)
    (128, 7, 4),  # ResNet-50's last stage scaled: F(2x2, 3x3), 16 tiles
    (64, 16, 6)])  # F(4x4, 3x3)
def test_winograd_tiles_follow_the_map_and_the_channels(channels, side, alpha):
    rewritten = laid_out_and_rewritten(conv_relu(channels, side))
    assert len(calls_of(rewritten, "relax.nn.conv2d")) == (1 if alpha is None else 0)
    assert winograd_alpha(rewritten) == alpha


def test_a_7x7_map_computes_by_winograd_in_2x2_tiles_as_onnxruntime():
    model, spec = conv_relu(128, 7), targets.host_cpu()
    x = RNG.standard_normal((1, 128, 7, 7)).astype(np.float32)
    for got, want in kernels_and_onnxruntime(model, x, spec):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())


def test_a_constant_transposed_at_compile_time_keeps_its_dtype_and_values(caplog):
    # int64 past int32's range: relax.const given an array made it int32, and the default
    # schedules then failed on an add of int64 and int32.
    import odla_tvm as odla
    from odla_tvm import ElementType as E
    from odla_tvm import ValueType as VT

    big = (np.arange(12, dtype=np.int64) + 2**40).reshape(3, 4)
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.INT64, (4, 3)), "x")
    turned = odla.transpose(odla.create_constant(VT(E.INT64, (3, 4)), big), (1, 0), (4, 3))
    odla.set_value_as_output(odla.add(x, turned, "y"))
    session = odla.Session(comp, odla.allocate_device(device_name=odla.DeviceName.INTEL_X86))
    (y,) = session.run({"x": np.ones((4, 3), np.int64)})
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, big.T + 1)
    assert "default CPU schedules failed" not in caplog.text


def _layout_kernel(dtype="float32", rows=64):
    """What SplitLayoutRewritePreproc leaves of a prepacked weight: b[v1, v0 // 32, v2,
    v0 % 32] = a[v0, v1, v2] over ``rows`` of a's 64 rows (all, or a kernel that is not
    that)."""

    @T.prim_func(s_tir=True)
    def kernel(a: T.Buffer((64, 3, 16), dtype), b: T.Buffer((3, 2, 16, 32), dtype)):
        for i0, i1, i2 in T.grid(rows, 3, 16):
            with T.sblock("b"):
                v0, v1, v2 = T.axis.remap("SSS", [i0, i1, i2])
                b[v1, v0 // 32, v2, v0 % 32] = a[v0, v1, v2]

    return kernel


def _scaled_layout_kernel():
    """The same layout, its values doubled on the way."""
    a = tvm.te.placeholder((64, 3, 16), name="a")
    b = tvm.te.compute((3, 2, 16, 32), lambda i, j, k, m: a[j * 32 + m, i, k] * 2.0, name="b")
    return tvm.te.create_prim_func([a, b])


def test_a_prepacked_weight_is_laid_out_with_numpy_as_its_kernel_would():
    """A weight layout made at compile time (a prepacked weight's kernel) is done with NumPy
    where the kernel only moves each element: its values are the kernel's, element by
    element; a kernel that computes, covers part of its operand or has a dtype NumPy lacks
    is left to LLVM."""
    a = RNG.standard_normal((64, 3, 16)).astype(np.float32)
    expected = np.empty((3, 2, 16, 32), np.float32)
    v0, v1, v2 = np.indices(a.shape)
    expected[v1, v0 // 32, v2, v0 % 32] = a
    prepack = _layout_kernel()
    built = tvm.compile(tvm.IRModule({"main": prepack}), target="llvm")
    by_llvm = tvm.runtime.empty(expected.shape, "float32")
    built["main"](tvm.runtime.tensor(a), by_llvm)
    lay_out = _numpy_layout(prepack)
    out = tvm.runtime.empty(expected.shape, "float32")
    lay_out(tvm.runtime.tensor(a), out)
    np.testing.assert_array_equal(out.numpy(), expected)
    np.testing.assert_array_equal(by_llvm.numpy(), expected)
    assert out.numpy().dtype == np.float32
    for kernel in (_scaled_layout_kernel(), _layout_kernel(rows=32),
                   _layout_kernel(dtype="bfloat16")):
        assert _numpy_layout(kernel) is None


@pytest.mark.parametrize("exponent", [0.5, 0.75])
def test_powers_by_roots_keep_the_powers_special_values(exponent):
    """ONNX's Pow by 0.5 or 0.75 as square roots gives what the power gives (C's pow, as
    onnxruntime's; NumPy's takes a square root for 0.5): NaN below 0, +0 for -0 and +inf for
    -inf, where a square root alone gives -0 and NaN."""
    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "e"], ["y"])], "pow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (12,))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (12,))],
        [numpy_helper.from_array(np.array(exponent, np.float32), "e")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    spec = targets.host_cpu()
    script = "\n".join(f.script() for f in fused_kernels(
        import_model(model).build_module(), spec).functions.values()
        if isinstance(f, tvm.tirx.PrimFunc))
    assert "T.sqrt(" in script and "T.pow(" not in script
    x = np.array([-np.inf, -2.0, -0.0, 0.0, 1e-30, 0.3, 1.0, 2.0, 7.5, 1e30, np.inf, np.nan],
                 np.float32)
    ((got, want),) = kernels_and_onnxruntime(model, x, spec)
    c_pow = np.array([math.pow(v, exponent) if v >= 0 or v == -math.inf or math.isnan(v)
                      else math.nan for v in x.astype(float)])
    np.testing.assert_allclose(got, c_pow, rtol=2e-7, atol=0)
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=0)
    finite = ~np.isnan(got)
    np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))
