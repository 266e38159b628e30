"""The oneDNN plugin (device INTEL_DNNL): every pattern it takes gives what TVM alone gives, on
several shapes, and its code is what ran; a real CNN matches its reference outputs; a module
with oneDNN parts runs after export in a fresh process; without oneDNN the device is refused,
saying what to install, and the plain CPU device still works."""

import importlib
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax

import odla_tvm as odla
import targets
from odla_tvm import DeviceName, Status
from odla_tvm import ElementType as E
from odla_tvm import MemoryLayout as L
from odla_tvm import ValueType as VT
from odla_tvm.frontends.onnx import import_model
from targets.plugins import onednn
from targets.plugins.onednn import library as onednn_library
from targets.cpu.conv_rewrites import matmul_share, winograd_share

import reference as ref

RTOL, ATOL = 1e-4, 1e-5
RNG = np.random.default_rng(0)


def _onednn_missing() -> str:
    try:
        onednn.check_available()
    except targets.PluginUnavailable as err:
        return str(err)
    return ""


# The module (the package's name ``patterns`` is its function).
onednn_patterns = importlib.import_module("targets.plugins.onednn.patterns")
needs_onednn = pytest.mark.skipif(bool(_onednn_missing()), reason=_onednn_missing())


@pytest.fixture(autouse=True)
def _cpu_with_avx512(monkeypatch):
    """oneDNN takes grouped convolutions of few channels only on CPUs with AVX-512: the tests
    run as on one, whatever this CPU (one test checks the rule itself)."""
    monkeypatch.setattr(onednn_patterns, "host_cpu_flags", lambda: frozenset({"avx512f"}))


def _oneDNN_calls(exe) -> int:
    library = exe.module.runtime_library
    return library.get_function(onednn.CALLS_FUNCTION, query_imports=True)()


def _constant(array):
    return odla.create_constant(VT(E.FLOAT32, array.shape), array)


def _run(build, inputs, device_name):
    """Outputs of the computation ``build()`` makes, compiled for ``device_name``."""
    comp = odla.create_computation()
    build()
    exe = odla.compile_computation(comp, odla.allocate_device(device_name=device_name))
    outputs = odla.Session(exe).run(inputs)
    odla.destroy_computation(comp)
    return exe, outputs


def _check_against_tvm(build, inputs, expected_calls=1):
    """``build``'s computation through oneDNN matches TVM alone, and oneDNN's code ran."""
    _, expected = _run(build, inputs, DeviceName.INTEL_X86)
    exe, outputs = _run(build, inputs, DeviceName.INTEL_DNNL)
    assert _oneDNN_calls(exe) == expected_calls
    for out, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)


def _randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# (input NCHW, out channels, kernel, strides, dilations, pads front, pads back, groups)
CONVS = [
    ((1, 3, 12, 12), 8, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 9, 11), 6, (3, 2), (2, 1), (1, 1), (0, 1), (2, 0), 2),
    ((1, 8, 10, 10), 8, (3, 3), (1, 1), (2, 2), (2, 2), (2, 2), 8),  # depthwise, dilated
    ((1, 16, 7, 7), 32, (1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    ((1, 24, 14, 14), 112, (1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 4),  # channels last (gemm)
]


@needs_onednn
@pytest.mark.parametrize("shape, out_channels, kernel, strides, dilations, front, back, groups",
                         CONVS)
@pytest.mark.parametrize("fused", ["bias_relu", "batch_norm_residual_relu", "plain"])
def test_conv_matches_tvm(shape, out_channels, kernel, strides, dilations, front, back, groups,
                          fused):
    rng = np.random.default_rng(sum(shape) + out_channels)
    x = _randn(rng, *shape)
    w = _randn(rng, out_channels, shape[1] // groups, *kernel, scale=0.3)
    bias = _randn(rng, out_channels, scale=0.1)
    mean, scale, offset = (_randn(rng, out_channels) for _ in range(3))
    var = np.abs(_randn(rng, out_channels)) + 0.5
    out_shape = (shape[0], out_channels, *(
        (size + f + b - d * (k - 1) - 1) // s + 1
        for size, f, b, d, k, s in zip(shape[2:], front, back, dilations, kernel, strides)))
    inputs = {"x": x}
    if fused == "batch_norm_residual_relu":
        inputs["residual"] = _randn(rng, *out_shape)

    def build():
        data = odla.create_argument(VT(E.FLOAT32, shape), "x")
        y = odla.conv(data, L.CHANNELS_FIRST, groups, _constant(w), L.OIS, strides, dilations,
                      front, back, _constant(bias) if fused == "bias_relu" else None)
        if fused == "batch_norm_residual_relu":
            y = odla.batch_normalization(y, L.CHANNELS_FIRST, _constant(mean), _constant(var),
                                         1e-5, _constant(scale), _constant(offset))
            y = odla.add(y, odla.create_argument(VT(E.FLOAT32, out_shape), "residual"))
        if fused != "plain":
            y = odla.relu(y)
        odla.set_value_as_output(y)

    _check_against_tvm(build, inputs)


@needs_onednn
@pytest.mark.parametrize("flags, onednn_calls", [(frozenset({"avx2"}), 0),
                                                 (frozenset({"avx2", "avx512f"}), 1)])
def test_a_grouped_conv_of_few_channels_goes_to_tvm_without_avx512(flags, onednn_calls,
                                                                   monkeypatch):
    """ShuffleNet's first grouped 1x1 convolution (24 -> 112 channels, 4 groups: 6 input
    channels a group): oneDNN runs it by its gemm-based convolution without AVX-512, so TVM
    takes it there; with AVX-512 oneDNN does. Both match TVM alone."""
    monkeypatch.setattr(onednn_patterns, "host_cpu_flags", lambda: flags)
    rng = np.random.default_rng(7)
    x, w = _randn(rng, 1, 24, 14, 14), _randn(rng, 112, 6, 1, 1, scale=0.3)

    def build():
        data = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        odla.set_value_as_output(odla.conv(data, L.CHANNELS_FIRST, 4, _constant(w), L.OIS,
                                           (1, 1), (1, 1), (0, 0), (0, 0)))

    if onednn_calls:
        _check_against_tvm(build, {"x": x}, onednn_calls)
        return
    _, expected = _run(build, {"x": x}, DeviceName.INTEL_X86)
    exe, outputs = _run(build, {"x": x}, DeviceName.INTEL_DNNL)
    assert not exe.module.vendor_regions  # nothing of oneDNN's linked or called
    np.testing.assert_allclose(outputs[0], expected[0], rtol=RTOL, atol=ATOL)


@needs_onednn
@pytest.mark.parametrize("m, k, n", [(1, 64, 10), (3, 17, 5), (8, 256, 33)])
@pytest.mark.parametrize("b_transposed", [True, False])
@pytest.mark.parametrize("relu", [True, False])
def test_gemm_matches_tvm(m, k, n, b_transposed, relu):
    rng = np.random.default_rng(m * k + n)
    a = _randn(rng, m, k)
    b = _randn(rng, *((n, k) if b_transposed else (k, n)), scale=0.2)
    c = _randn(rng, n)

    def build():
        y = odla.gemm(odla.create_argument(VT(E.FLOAT32, (m, k)), "a"), False, _constant(b),
                      b_transposed, 1.0, 1.0, _constant(c))
        odla.set_value_as_output(odla.relu(y) if relu else y)

    _check_against_tvm(build, {"a": a})


@needs_onednn
def test_a_gemms_transposed_constant_weight_is_read_as_it_is_not_copied():
    """Matched before the constants fold, the weight is packed from its transpose: no
    transposed copy is made and held beside it (AlexNet's: 231 MB when compiling)."""
    rng = np.random.default_rng(7)
    a, b, c = _randn(rng, 4, 256), _randn(rng, 64, 256, scale=0.1), _randn(rng, 64)

    def build():
        odla.set_value_as_output(odla.gemm(odla.create_argument(VT(E.FLOAT32, (4, 256)), "a"),
                                           False, _constant(b), True, 1.0, 1.0, _constant(c)))

    exe, (out,) = _run(build, {"a": a}, DeviceName.INTEL_DNNL)
    np.testing.assert_allclose(out, a @ b.T + c, rtol=RTOL, atol=ATOL)
    assert out.dtype == np.float32 and out.shape == (4, 64)
    assert _oneDNN_calls(exe) == 1
    assert [w.shape for w in exe.module.weights] == [(64, 256)]  # as given, not (256, 64)
    np.testing.assert_array_equal(exe.module.weights[0], b)


@needs_onednn
def test_a_conv_bias_reshaped_when_partitioning_is_a_view_of_the_bias():
    """The bias's reshape to broadcast is folded with NumPy, a view of the bias it reshapes
    (FoldConstant built and ran a kernel for each: ResNet-50's 53 took 1.2 s of its
    partition, each result a copy)."""
    rng = np.random.default_rng(8)
    x, w, b = _randn(rng, 1, 8, 6, 6), _randn(rng, 1024, 8, 3, 3, scale=0.1), _randn(rng, 1024)
    comp = odla.create_computation()
    odla.set_value_as_output(odla.conv(
        odla.create_argument(VT(E.FLOAT32, x.shape), "x"), L.CHANNELS_FIRST, 1, _constant(w),
        L.OIS, [1, 1], [1, 1], [1, 1], [1, 1], _constant(b)))
    (bias,) = [c for c in _constants(comp.build_module()) if c.shape == b.shape]
    exe = odla.compile_computation(comp, odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    (reshaped,) = [w for w in exe.module.weights if w.size == b.size]
    assert np.shares_memory(reshaped, bias)
    (out,) = odla.Session(exe).run({"x": x})
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    expected = np.einsum("nchwij,ocij->nohw", windows, w) + b.reshape(1, -1, 1, 1)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=1e-4)
    assert out.dtype == np.float32 and out.shape == (1, 1024, 6, 6)
    assert _oneDNN_calls(exe) == 1


def _constants(mod):
    """NumPy views of the tensor constants of ``mod``'s main."""
    found = []
    relax.analysis.post_order_visit(mod["main"], lambda e: found.append(np.from_dlpack(e.value))
                                    if isinstance(e, tvm.ir.expr.Constant)
                                    and isinstance(e.value, tvm.runtime.Tensor) else None)
    return found


@needs_onednn
def test_only_patterns_whose_ops_the_graph_calls_are_matched(monkeypatch):
    """FuseOpsByPattern walks the graph once per pattern: a graph of matmuls is not searched
    for convolutions, pools or concatenations, and its matmuls still go to oneDNN."""
    tried = []
    fuse = relax.transform.FuseOpsByPattern

    def spy(patterns, **kwargs):
        tried.extend(p.name for p in patterns)
        return fuse(patterns, **kwargs)

    monkeypatch.setattr(relax.transform, "FuseOpsByPattern", spy)
    rng = np.random.default_rng(9)
    a, b = _randn(rng, 4, 32), _randn(rng, 32, 16)

    def build():
        x = odla.create_argument(VT(E.FLOAT32, a.shape), "a")
        odla.set_value_as_output(odla.relu(odla.gemm(x, False, _constant(b), False, 1.0, 0.0)))

    exe, (out,) = _run(build, {"a": a}, DeviceName.INTEL_DNNL)
    np.testing.assert_allclose(out, np.maximum(a @ b, 0), rtol=RTOL, atol=ATOL)
    assert out.dtype == np.float32 and out.shape == (4, 16)
    assert _oneDNN_calls(exe) == 1
    assert any(name.startswith("onednn.matmul") for name in tried)
    assert not any(name.startswith(("onednn.conv2d", "onednn.max_pool", "onednn.concat"))
                   for name in tried)


# (input NCHW, window, strides, pads front, pads back)
POOLS = [
    ((1, 8, 12, 12), (2, 2), (2, 2), (0, 0), (0, 0)),
    ((2, 3, 11, 9), (3, 3), (2, 2), (1, 1), (1, 1)),
    ((1, 16, 7, 7), (7, 7), (1, 1), (0, 0), (0, 0)),
    ((1, 4, 10, 10), (3, 2), (1, 2), (1, 0), (0, 1)),
]


@needs_onednn
@pytest.mark.parametrize("shape, window, strides, front, back", POOLS)
@pytest.mark.parametrize("kind", ["max", "average_with_padding", "average_without_padding"])
def test_pool_matches_tvm(shape, window, strides, front, back, kind):
    x = _randn(np.random.default_rng(sum(shape)), *shape)

    def build():
        data = odla.create_argument(VT(E.FLOAT32, shape), "x")
        if kind == "max":
            y = odla.max_pool(data, L.CHANNELS_FIRST, window, strides, front, back)
        else:
            y = odla.average_pool(data, L.CHANNELS_FIRST, window, strides, front, back,
                                  kind == "average_with_padding")
        odla.set_value_as_output(y)

    _check_against_tvm(build, {"x": x})


def _conv_relu(data, weights):
    """A 3x3 same-size convolution and ReLU: a branch of a fire or inception module."""
    return odla.relu(odla.conv(data, L.CHANNELS_FIRST, 1, _constant(weights), L.OIS, (1, 1),
                               (1, 1), (1, 1), (1, 1)))


# Channels of the concatenated tensors: whole blocks of 8 and 16, and not.
CONCATS = [(8, 8), (16, 32), (5, 3), (16, 8, 24), (6, 10, 7)]


@needs_onednn
@pytest.mark.parametrize("channels", CONCATS)
def test_concat_of_convolutions_matches_tvm(channels):
    """Branches concatenated in whatever layouts their convolutions chose, the result read by
    a convolution in the same region and returned as well."""
    rng = np.random.default_rng(sum(channels))
    shape = (1, 4, 9, 9)
    x = _randn(rng, *shape)
    branches = [_randn(rng, c, shape[1], 3, 3, scale=0.3) for c in channels]
    after = _randn(rng, 8, sum(channels), 1, 1, scale=0.3)

    def build():
        data = odla.create_argument(VT(E.FLOAT32, shape), "x")
        joined = odla.concat([_conv_relu(data, w) for w in branches], 1)
        odla.set_value_as_output(joined)
        odla.set_value_as_output(odla.conv(joined, L.CHANNELS_FIRST, 1, _constant(after),
                                           L.OIS, (1, 1), (1, 1), (0, 0), (0, 0)))

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("channels", CONCATS)
def test_concat_of_parameters_matches_tvm(channels):
    rng = np.random.default_rng(len(channels) + sum(channels))
    inputs = {f"x{i}": _randn(rng, 2, c, 5, 7) for i, c in enumerate(channels)}

    def build():
        odla.set_value_as_output(odla.concat(
            [odla.create_argument(VT(E.FLOAT32, x.shape), name) for name, x in inputs.items()],
            1))

    _check_against_tvm(build, inputs)


@needs_onednn
@pytest.mark.parametrize("features", [64, 4])
def test_concat_of_features_and_a_new_convolution_matches_tvm(features):
    """DenseNet's layer: the features so far (a parameter, plain) and a convolution's new
    channels (blocked) joined in the larger one's layout, returned (computed in the output
    itself where plain) and read by a ReLU and a convolution after."""
    rng = np.random.default_rng(features)
    x = _randn(rng, 1, features, 8, 8)
    w = _randn(rng, 16, features, 3, 3, scale=0.2)
    after = _randn(rng, 8, features + 16, 1, 1, scale=0.3)

    def build():
        data = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        joined = odla.concat([data, _conv_relu(data, w)], 1)
        odla.set_value_as_output(joined)
        odla.set_value_as_output(odla.relu(joined))
        odla.set_value_as_output(odla.conv(joined, L.CHANNELS_FIRST, 1, _constant(after),
                                           L.OIS, (1, 1), (1, 1), (0, 0), (0, 0)))

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("features, growth", [(16, 8), (12, 5), (64, 32)])
def test_a_batch_norm_after_a_concat_or_pool_stays_in_the_region(features, growth):
    """DenseNet's pre-activation: batch norm and ReLU on the features so far (the stem's pool,
    then the concat of the layers before), then a convolution. The batch norm's scale runs as
    a depthwise 1x1 convolution, its shift as a post-op: the stem and two dense layers make
    one region."""
    rng = np.random.default_rng(features + growth)
    x = _randn(rng, 1, features, 10, 10)
    # Weights of 1 / sqrt(fan-in): values stay near 1, where the tolerances mean something.
    stem = _randn(rng, features, features, 3, 3, scale=(9 * features) ** -0.5)
    layers = [_randn(rng, growth, features + i * growth, 1, 1,
                     scale=(features + i * growth) ** -0.5) for i in range(2)]

    def norm(value, channels, seed):
        r = np.random.default_rng(seed)
        mean, scale, offset = (_constant(_randn(r, channels)) for _ in range(3))
        var = _constant(r.uniform(0.5, 2.0, channels).astype(np.float32))
        return odla.relu(odla.batch_normalization(value, L.CHANNELS_FIRST, mean, var, 1e-5,
                                                  scale, offset))

    def build():
        data = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        features_so_far = odla.max_pool(_conv_relu(data, stem), L.CHANNELS_FIRST, (3, 3),
                                        (1, 1), (1, 1), (1, 1))
        for i, w in enumerate(layers):
            new = odla.conv(norm(features_so_far, features + i * growth, i), L.CHANNELS_FIRST, 1,
                            _constant(w), L.OIS, (1, 1), (1, 1), (0, 0), (0, 0))
            features_so_far = odla.concat([features_so_far, new], 1)
        odla.set_value_as_output(features_so_far)

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("channels", [16, 24, 96])
def test_convnext_block_with_its_transposes_is_one_region(channels):
    """ConvNeXt's block: a depthwise convolution (blocked, or nhwc, where the transposes are
    views), to NHWC, layer norm and a GELU MLP over channels, back to NCHW, the residual add:
    the transposes are reorders or views inside the region, not TVM kernels between
    regions."""
    rng = np.random.default_rng(12)
    x = _randn(rng, 1, channels, 6, 6)
    depthwise = _randn(rng, channels, 1, 3, 3, scale=0.3)
    up, down = (_randn(rng, channels, 32, scale=0.2), _randn(rng, 32, channels, scale=0.2))
    gamma, beta = _randn(rng, channels) + 1.0, _randn(rng, channels)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        y = odla.conv(a, L.CHANNELS_FIRST, channels, _constant(depthwise), L.OIS, (1, 1),
                      (1, 1), (1, 1), (1, 1))
        y = odla.transpose(y, (0, 2, 3, 1))
        y = odla.layer_norm(y, 1, (3,), 1e-6, _constant(gamma), _constant(beta))
        y = odla.batch_mat_mul(odla.gelu(odla.batch_mat_mul(y, False, _constant(up), False)),
                               False, _constant(down), False)
        odla.set_value_as_output(odla.add(a, odla.transpose(y, (0, 3, 1, 2))))

    _check_against_tvm(build, {"x": x})


@needs_onednn
def test_residual_sum_into_a_transposed_view_keeps_the_value_it_views():
    """A matmul's NHWC result seen as an nhwc NCHW map (a view of its buffer, no copy) is the
    residual a convolution sums in place; the result is read again after: the sum goes to a
    buffer of its own."""
    rng = np.random.default_rng(13)
    x = _randn(rng, 1, 8, 5, 5)
    w = _randn(rng, 24, 8, 3, 3, scale=0.3)
    w2 = _randn(rng, 24, 24, 3, 3, scale=0.1)
    weights = _randn(rng, 24, 24, scale=0.2)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        y = odla.conv(a, L.CHANNELS_FIRST, 1, _constant(w), L.OIS, (1, 1), (1, 1), (1, 1), (1, 1))
        t = odla.batch_mat_mul(odla.transpose(y, (0, 2, 3, 1)), False, _constant(weights), False)
        summed = odla.add(odla.conv(y, L.CHANNELS_FIRST, 1, _constant(w2), L.OIS, (1, 1), (1, 1),
                                    (1, 1), (1, 1)), odla.transpose(t, (0, 3, 1, 2)))
        odla.set_value_as_output(summed)
        odla.set_value_as_output(odla.mul(t, t))

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("shape, axes", [((3, 5), (1, 0)), ((2, 3, 5), (1, 0, 2)),
                                         ((2, 3, 4, 5), (0, 3, 1, 2)),
                                         ((2, 1, 3, 4, 2), (4, 2, 0, 1, 3))])
def test_transpose_of_a_computed_tensor_matches_tvm(shape, axes):
    x = _randn(np.random.default_rng(len(shape)), *shape)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, shape), "x")
        odla.set_value_as_output(odla.transpose(odla.relu(odla.mul(a, a)), axes))

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("size, alpha, beta, bias", [(5, 1e-4, 0.75, 1.0), (3, 0.5, 0.5, 2.0)])
def test_lrn_matches_tvm(size, alpha, beta, bias):
    """LRN after a convolution (one region), then twice alone on maps of that shape with
    other factors each time (one region TVM calls from both places): each with its own."""
    rng = np.random.default_rng(size)
    x = _randn(rng, 1, 16, 7, 7, scale=3.0)
    w = _randn(rng, 16, 16, 3, 3, scale=0.3)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        y = odla.lrn(_conv_relu(a, w), L.CHANNELS_FIRST, size, alpha, beta, bias)
        z = odla.lrn(odla.sin(y), L.CHANNELS_FIRST, size, alpha * 2, beta / 2, bias + 1)
        odla.set_value_as_output(odla.lrn(odla.sin(z), L.CHANNELS_FIRST, size, alpha, beta, bias))

    _check_against_tvm(build, {"x": x}, expected_calls=3)


@needs_onednn
@pytest.mark.parametrize("split, axes, merged", [
    ((1, 6, 4, 8), (0, 2, 1, 3), None),         # attention's heads split
    (None, (0, 2, 1, 3), (1, 6, 32)),           # and merged
    ((1, 4, 6, 2, 3), (0, 2, 1, 3, 4), (1, 24, 2, 3)),  # a channel shuffle
])
def test_transpose_with_reshapes_around_it_matches_tvm(split, axes, merged):
    """Reshapes before and after a transpose are views of its one reorder, in the region of
    the ops around it."""
    rng = np.random.default_rng(len(axes))
    shape = (1, 24, 2, 3) if len(axes) == 5 else (1, 6, 32) if split else (1, 4, 6, 8)
    x = _randn(rng, *shape)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, shape), "x")
        y = odla.relu(odla.mul(a, a))
        y = odla.reshape(y, split) if split else y
        y = odla.transpose(y, axes)
        y = odla.reshape(y, merged) if merged else y
        odla.set_value_as_output(odla.sigmoid(odla.mul(y, y)))

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("groups, channels, size", [(2, 20, 6), (3, 30, 5), (4, 136, 7)])
def test_channel_shuffle_between_grouped_convolutions_matches_tvm(groups, channels, size):
    """ShuffleNet's unit: a grouped 1x1 convolution, its channels shuffled (reshape,
    transpose, reshape: one reorder in the layout the convolutions chose), a depthwise 3x3
    and another grouped 1x1 convolution, all one oneDNN call."""
    rng = np.random.default_rng(groups)
    x = _randn(rng, 1, channels, size, size)
    w1, w3 = (_randn(rng, channels, channels // groups, 1, 1, scale=0.3) for _ in range(2))
    w2 = _randn(rng, channels, 1, 3, 3, scale=0.3)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        y = odla.relu(odla.conv(a, L.CHANNELS_FIRST, groups, _constant(w1), L.OIS, (1, 1),
                                (1, 1), (0, 0), (0, 0)))
        y = odla.reshape(y, (1, groups, channels // groups, size, size))
        y = odla.reshape(odla.transpose(y, (0, 2, 1, 3, 4)), (1, channels, size, size))
        y = odla.conv(y, L.CHANNELS_FIRST, channels, _constant(w2), L.OIS, (1, 1), (1, 1),
                      (1, 1), (1, 1))
        odla.set_value_as_output(odla.conv(y, L.CHANNELS_FIRST, groups, _constant(w3), L.OIS,
                                           (1, 1), (1, 1), (0, 0), (0, 0)))

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("op", ["relu", "sigmoid", "tanh", "gelu"])
def test_unary_op_after_a_concat_matches_tvm(op):
    """A unary op of a computed tensor (ShuffleNet's ReLU after its concat), then a residual
    add: one step in the region of the concat."""
    rng = np.random.default_rng(2)
    x, w = _randn(rng, 1, 4, 6, 6), _randn(rng, 4, 4, 3, 3, scale=0.3)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        joined = odla.concat([a, _conv_relu(a, w)], 1)
        odla.set_value_as_output(odla.add(getattr(odla, op)(joined), joined))

    _check_against_tvm(build, {"x": x})


@needs_onednn
def test_a_result_read_again_in_another_shape_matches_tvm():
    """A mean the region returns (computed in TVM's output) and reads again broadcast, viewed
    in the other operand's rank: the view follows the output, call after call."""
    rng = np.random.default_rng(6)
    inputs = [{"x": _randn(rng, 2, 3, 5)} for _ in range(2)]

    def build():
        a = odla.create_argument(VT(E.FLOAT32, (2, 3, 5)), "x")
        mean = odla.reduce_mean(a, 2, (1, 2), True)
        odla.set_value_as_output(mean)
        odla.set_value_as_output(odla.relu(odla.sub(a, mean)))

    _, expected = zip(*(_run(build, feeds, DeviceName.INTEL_X86) for feeds in inputs))
    comp = odla.create_computation()
    build()
    session = odla.Session(odla.compile_computation(
        comp, odla.allocate_device(device_name=DeviceName.INTEL_DNNL)))
    for _ in range(2):
        for feeds, want in zip(inputs, expected, strict=True):
            for out, wanted in zip(session.run(feeds), want, strict=True):
                np.testing.assert_allclose(out, wanted, rtol=RTOL, atol=ATOL)
    assert _oneDNN_calls(session.executable) == 4


@needs_onednn
def test_a_checked_gather_before_a_matmul_leaves_the_matmul_to_onednn():
    """A gather's bounds check is a host call between kernels (BERT's, GPT-2's and ViT's
    embeddings): the graph around it is still partitioned, and a bad index is refused."""
    table = np.arange(160, dtype=np.float32).reshape(10, 16)
    w = _randn(np.random.default_rng(1), 16, 8)

    def build():
        t = odla.create_argument(VT(E.FLOAT32, (10, 16)), "t")
        i = odla.create_argument(VT(E.INT64, (3,)), "i")
        odla.set_value_as_output(odla.gemm(odla.gather(t, i, 0), False, _constant(w), False,
                                           1.0, 0.0))

    feeds = {"t": table, "i": np.array([1, -1, 3])}
    exe, (result,) = _run(build, feeds, DeviceName.INTEL_DNNL)
    np.testing.assert_allclose(result, table[[1, -1, 3]] @ w, rtol=RTOL, atol=1e-3)
    assert _oneDNN_calls(exe) == 1
    with pytest.raises(odla.OdlaError) as err:
        odla.Session(exe).run({"t": table, "i": np.array([1, 10, 3])})
    assert err.value.status == Status.INVALID_PARAM and "index 10" in str(err.value)


@needs_onednn
def test_concat_of_one_tensor_twice_matches_tvm():
    """The composite takes a repeated operand once; the step still reads it twice."""
    x = _randn(np.random.default_rng(3), 1, 5, 4, 4)

    def build():
        data = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        odla.set_value_as_output(odla.concat([data, odla.relu(data), data], 1))

    _check_against_tvm(build, {"x": x})


@needs_onednn
def test_small_cnn_runs_as_one_region_with_tvm_around_it():
    """conv-bias-batchnorm-relu, max pool, grouped conv-relu, average pool, then TVM's reshape
    between oneDNN's pooling and gemm, and TVM's softmax at the end."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_models import build_cnn

    comp, reference, x = build_cnn()
    exe = odla.compile_computation(comp, odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    (out,) = odla.Session(exe).run({"image": x})
    np.testing.assert_allclose(out, reference(x), rtol=RTOL, atol=ATOL)
    assert _oneDNN_calls(exe) == 2  # the conv/pool region and the gemm region


@needs_onednn
def test_weights_of_two_models_do_not_mix():
    """Each region keeps its own repacked weights: two models of the same shapes, different
    constants, alternate."""
    rng = np.random.default_rng(5)
    x = _randn(rng, 1, 3, 8, 8)
    weights = [_randn(rng, 4, 3, 3, 3) for _ in range(2)]
    sessions = []
    for w in weights:
        comp = odla.create_computation()
        data = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        odla.set_value_as_output(odla.conv(data, L.CHANNELS_FIRST, 1, _constant(w), L.OIS,
                                           (1, 1), (1, 1), (1, 1), (1, 1)))
        device = odla.allocate_device(device_name=DeviceName.INTEL_DNNL)
        sessions.append((odla.Session(odla.compile_computation(comp, device)), comp))
    first = [s.run({"x": x})[0] for s, _ in sessions]
    again = [s.run({"x": x})[0] for s, _ in sessions]
    assert not np.allclose(first[0], first[1])
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


@needs_onednn
@pytest.mark.parametrize("layer", ["matmul", "conv"])
def test_repeated_layers_each_use_their_own_weights(layer):
    """Identical layers with their own weights (BERT's twelve) make one region that TVM calls
    from each place: each call reads its own weights, packed once per address, run after run,
    against NumPy."""
    rng = np.random.default_rng(11)
    shape = (1, 6, 16) if layer == "matmul" else (1, 4, 6, 6)
    x = _randn(rng, *shape)
    weights = [_randn(rng, 16, 16, scale=0.3) if layer == "matmul" else
               _randn(rng, 4, 4, 3, 3, scale=0.3) for _ in range(3)]

    def reference():
        y = x.astype(np.float64)
        for w in weights:
            if layer == "matmul":
                y = np.maximum(y @ w, 0)
            else:
                padded = np.pad(y, [(0, 0), (0, 0), (1, 1), (1, 1)])
                windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), (2, 3))
                y = np.maximum(np.einsum("nchwij,ocij->nohw", windows, w), 0)
            y = np.sin(y)  # left to TVM: it cuts the graph into one region a layer
        return y

    comp = odla.create_computation()
    y = odla.create_argument(VT(E.FLOAT32, shape), "x")
    for w in weights:
        y = odla.relu(odla.batch_mat_mul(y, False, _constant(w), False) if layer == "matmul"
                      else odla.conv(y, L.CHANNELS_FIRST, 1, _constant(w), L.OIS, (1, 1),
                                     (1, 1), (1, 1), (1, 1)))
        y = odla.sin(y)
    odla.set_value_as_output(y)
    exe = odla.compile_computation(comp, odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    session = odla.Session(exe)
    for run in range(3):
        np.testing.assert_allclose(session.run({"x": x})[0], reference(), rtol=RTOL, atol=ATOL)
        assert _oneDNN_calls(exe) == 3 * (run + 1)
    regions = {name for name in exe.module.vendor_regions}
    assert len(regions) == 1, regions  # one region, called from three places


def _light_case_outputs(name: str):
    """A light model's outputs through INTEL_DNNL, its reference outputs, and the session."""
    from tools.onnx_conformance import light_cases

    case = next(c for c in light_cases() if c.name == name)
    session = odla.Session.from_onnx(case.model,
                                     odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    initializers = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in initializers]
    return session.run(dict(zip(names, case.inputs, strict=True))), case.outputs, session


@needs_onednn
def test_light_resnet50_matches_its_reference_outputs():
    outputs, expected, session = _light_case_outputs("test_resnet50")
    for out, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-4)
    assert _oneDNN_calls(session.executable) == 2  # the convolutions' region and the gemm's


@needs_onednn
def test_light_squeezenet_runs_as_two_regions_and_matches_its_reference_outputs():
    """The fire modules' concats join the convolutions' region: all of it but the final mean
    is one oneDNN call, and the softmax after the mean another."""
    outputs, expected, session = _light_case_outputs("test_squeezenet")
    for out, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-4)
    assert _oneDNN_calls(session.executable) == 2


@needs_onednn
def test_light_inception_v1_matches_its_reference_outputs():
    outputs, expected, session = _light_case_outputs("test_inception_v1")
    for out, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-4)
    # The 4-branch concats and the local response normalizations join the whole network
    # into one region; the classifier's gemm and softmax after TVM's reshape are another.
    assert _oneDNN_calls(session.executable) == 2


@needs_onednn
def test_exported_module_with_onednn_parts_runs_in_a_fresh_process(tmp_path):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_models import build_cnn

    comp, reference, x = build_cnn()
    exe = odla.compile_computation(comp, odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    path = tmp_path / "cnn.odla"
    odla.store_executable(str(path), exe)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np, odla_tvm as odla
        device = odla.allocate_device(device_name=odla.DeviceName.INTEL_DNNL)
        session = odla.Session({str(path)!r}, device)
        np.save({str(tmp_path / 'out.npy')!r}, session.run({{"image": np.load({str(tmp_path / 'x.npy')!r})}})[0])
        lib = session.executable.module.runtime_library
        print(lib.get_function("{onednn.CALLS_FUNCTION}", query_imports=True)())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "2"
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference(x), rtol=RTOL, atol=ATOL)


@needs_onednn
def test_a_module_without_onednn_regions_does_not_load_onednn(tmp_path):
    """Only a module with regions links oneDNN's library, whose load every load of the
    module would otherwise wait for."""
    def build():
        odla.set_value_as_output(odla.sin(odla.create_argument(VT(E.FLOAT32, (2, 3)), "x")))

    x = _randn(RNG, 2, 3)
    exe, _ = _run(build, {"x": x}, DeviceName.INTEL_DNNL)
    assert exe.module.vendor_regions == []
    path = tmp_path / "sin.odla"
    odla.store_executable(str(path), exe)
    script = textwrap.dedent(f"""
        import numpy as np, odla_tvm as odla
        device = odla.allocate_device(device_name=odla.DeviceName.INTEL_DNNL)
        out = odla.Session({str(path)!r}, device).run({{"x": np.array({x.tolist()!r}, "float32")}})[0]
        np.save({str(tmp_path / 'out.npy')!r}, out)
        print("libdnnl mapped:", "libdnnl" in open("/proc/self/maps").read())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "False"
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), np.sin(x), rtol=1e-5, atol=1e-6)


@needs_onednn
def test_regions_share_one_scratch_buffer_for_their_intermediates(tmp_path):
    """Eight regions (two 1x1 convolutions each, widening to 32-60 channels and back; TVM's
    sine between them), each holding 16-24 MB of intermediates in oneDNN's layouts: a fresh
    process's first run holds what the largest region needs, not the sum (245 MB when each
    region kept its own, 55 with one buffer)."""
    regions, channels, size = 8, 32, 256
    weights = []
    for k in range(regions):
        wide = channels + 4 * k  # another shape each: identical regions are one already
        weights += [_randn(RNG, wide, channels, 1, 1, scale=0.2),
                    _randn(RNG, channels, wide, 1, 1, scale=0.2)]

    def build():
        x = odla.create_argument(VT(E.FLOAT32, (1, channels, size, size)), "x")
        for k in range(regions):
            for w in weights[2 * k:2 * k + 2]:
                x = odla.relu(odla.conv(x, L.CHANNELS_FIRST, 1, _constant(w), L.OIS, (1, 1),
                                        (1, 1), (0, 0), (0, 0)))
            x = odla.sin(x)
        odla.set_value_as_output(x)

    x = _randn(RNG, 1, channels, size, size)
    expected = x
    for k in range(regions):
        for w in weights[2 * k:2 * k + 2]:
            expected = np.maximum(np.einsum("oi,nihw->nohw", w[:, :, 0, 0], expected), 0)
        expected = np.sin(expected)
    comp = odla.create_computation()
    build()
    exe = odla.compile_computation(comp, odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    path = tmp_path / "chain.odla"
    odla.store_executable(str(path), exe)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np, odla_tvm as odla
        def anon_mb():
            with open("/proc/self/status") as status:
                return next(int(l.split()[1]) for l in status if l.startswith("RssAnon")) // 1024
        device = odla.allocate_device(device_name=odla.DeviceName.INTEL_DNNL)
        session = odla.Session({str(path)!r}, device)
        x = np.load({str(tmp_path / 'x.npy')!r})
        before = anon_mb()
        np.save({str(tmp_path / 'out.npy')!r}, session.run({{"x": x}})[0])
        lib = session.executable.module.runtime_library
        print(lib.get_function("{onednn.CALLS_FUNCTION}", query_imports=True)(), anon_mb() - before)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls, grown_mb = map(int, done.stdout.split()[-2:])
    assert calls == regions
    # The largest region's 24 MB, TVM's 8 MB tensors between regions and the output.
    assert grown_mb < 96, f"the first run took {grown_mb} MB"
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=RTOL, atol=ATOL)


@needs_onednn
def test_the_vm_runs_the_in_memory_build_calling_only_the_vendor_parts_linked():
    import tvm_ffi

    weights = RNG.standard_normal((1024, 1024)).astype(np.float32)  # 4 MB
    x = RNG.standard_normal((2, 1024)).astype(np.float32)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        odla.set_value_as_output(odla.gemm(a, False, _constant(weights), False, 1.0, 0.0,
                                           value_id="y"))

    comp = odla.create_computation()
    build()
    exe = odla.compile_computation(comp, odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    (region,) = exe.module.vendor_regions
    # A global function of the region's name, which lending the region to the VM must keep.
    before = tvm_ffi.get_global_func(region, allow_missing=True)
    tvm_ffi.register_global_func(region, lambda *args: 0, override=True)
    mine = tvm_ffi.get_global_func(region)
    try:
        (y,) = odla.Session(exe).run({"x": x})
        # The function it shadowed while the VM loaded is back.
        assert tvm_ffi.get_global_func(region).same_as(mine)
    finally:
        tvm_ffi.remove_global_func(region)
        if before is not None:
            tvm_ffi.register_global_func(region, before, override=True)
    np.testing.assert_allclose(y, x @ weights, rtol=RTOL, atol=1e-3)
    assert _oneDNN_calls(exe) == 1
    # What was linked is the vendor code alone, not the weights (the whole module was).
    linked = exe.module.runtime_library
    assert linked is not exe.module.library
    assert os.path.getsize(exe.module._vendor_dir.name + "/vendor.so") < weights.nbytes / 4


def test_without_onednn_the_device_says_what_to_install_and_the_cpu_still_works(
        tmp_path, monkeypatch):
    # no include/dnnl.hpp, no lib/libdnnl.so
    monkeypatch.setattr(onednn_library, "PREFIX", str(tmp_path))
    with pytest.raises(odla.OdlaError) as err:
        odla.allocate_device(device_name=DeviceName.INTEL_DNNL)
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE
    assert "pip install onednn-cpu-gomp==2023.2.0" in str(err.value)
    comp = odla.create_computation()
    a = odla.create_argument(VT(E.FLOAT32, (2, 3)), "a")
    odla.set_value_as_output(odla.relu(a))
    exe = odla.compile_computation(comp, odla.allocate_device())
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(odla.Session(exe).run({"a": x})[0], np.maximum(x, 0))



@needs_onednn
def test_onednn_ops_item_keeps_the_other_kinds_with_tvm():
    """The onednn.ops item set to convolutions only: pools and the gemm stay with TVM."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_models import build_cnn

    comp, reference, x = build_cnn()
    odla.set_computation_item(comp, "onednn.ops", ["conv2d"])
    exe = odla.compile_computation(comp, odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    (out,) = odla.Session(exe).run({"image": x})
    np.testing.assert_allclose(out, reference(x), rtol=RTOL, atol=ATOL)
    assert _oneDNN_calls(exe) == 2  # each conv (with its batch norm and relu) alone
    assert all("conv2d" in region and "pool" not in region and "matmul" not in region
               for region in exe.module.vendor_regions)
    with pytest.raises(odla.OdlaError) as err:
        odla.set_computation_item(comp, "onednn.ops", ["lstm"])
    assert err.value.status == Status.INVALID_PARAM
    assert ("['conv2d', 'matmul', 'pool', 'concat', 'softmax', 'layer_norm', 'elementwise', "
            "'transpose', 'lrn']" in str(err.value))
    assert "lstm" in str(err.value)


# (left shape, right shape, right a constant, right transposed (its last two axes swapped))
MATMULS = [
    ((2, 5, 8), (8, 6), True, False),             # a linear layer on a sequence
    ((1, 3, 4, 8), (16, 8), True, True),          # weights stored (N, K), as Gemm's transB
    ((2, 3, 5, 8), (2, 3, 8, 7), False, False),   # attention's P.V
    ((1, 4, 6, 8), (1, 1, 8, 6), False, False),   # batch axes broadcast
    ((3, 4, 5), (3, 6, 5), False, True),          # attention's Q.K^T
    ((1, 7, 7, 24), (24, 40), True, False),       # a Linear over NHWC pixels, run as one batch
]


def _dims(value):
    return tuple(odla.get_value_type(value).shape)


# Elementwise tails fused after a matmul: each takes the product and returns the result.
MATMUL_TAILS = {
    "plain": lambda y, rng: y,
    "bias_gelu": lambda y, rng: odla.gelu(odla.add(y, _constant(_randn(rng, _dims(y)[-1])))),
    "scale_mask_add": lambda y, rng: odla.add(
        odla.div(y, _constant(np.float32(2.5))),
        _constant(_randn(rng, *(1,) * (len(_dims(y)) - 1), _dims(y)[-1]))),
    "gelu_tanh_residual": lambda y, rng: odla.add(odla.gelu(y, True),
                                                  _constant(_randn(rng, *_dims(y)))),
    "clamp_sigmoid": lambda y, rng: odla.sigmoid(odla.clamp(y, -0.5, 6.0)),
    "swish_tanh": lambda y, rng: odla.tanh(odla.mul(y, odla.sigmoid(y))),
}


@needs_onednn
@pytest.mark.parametrize("left, right, constant, transposed", MATMULS)
@pytest.mark.parametrize("tail", list(MATMUL_TAILS))
def test_matmul_of_any_rank_with_fused_tail_matches_tvm(left, right, constant, transposed, tail):
    seed = len(left) * 7 + len(tail)
    rng = np.random.default_rng(seed)
    a = _randn(rng, *left)
    b = _randn(rng, *right, scale=0.5)

    def build():  # the same constants on each device
        x = odla.create_argument(VT(E.FLOAT32, left), "a")
        w = _constant(b) if constant else odla.create_argument(VT(E.FLOAT32, right), "b")
        y = odla.batch_mat_mul(x, False, w, transposed)
        odla.set_value_as_output(MATMUL_TAILS[tail](y, np.random.default_rng(seed)))

    _check_against_tvm(build, {"a": a} if constant else {"a": a, "b": b})


@needs_onednn
@pytest.mark.parametrize("shape, axis", [((2, 3, 5), -1), ((2, 3, 5), 1), ((4, 6), 0),
                                         ((1, 2, 3, 9), 3)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_on_any_axis_matches_tvm(shape, axis, op):
    x = _randn(np.random.default_rng(3), *shape, scale=3.0)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, shape), "x")
        odla.set_value_as_output(getattr(odla, op)(a, axis))

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm"])
def test_an_op_of_more_axes_than_a_region_holds_stays_with_tvm(op):
    """A region's steps hold shapes of up to onednn.MAX_RANK axes: a 6-D softmax (as a 4-D
    cross-entropy loss makes) failed to compile, its shape written past Shape's dims."""
    shape = (2, 3, 2, 2, 2, 5)
    assert len(shape) > onednn.MAX_RANK
    x = _randn(np.random.default_rng(5), *shape, scale=3.0)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, shape), "x")
        if op == "layer_norm":
            odla.set_value_as_output(odla.layer_norm(a, 1, (-1,), 1e-5, None, None))
        else:
            odla.set_value_as_output(getattr(odla, op)(a, 1))

    exe, (got,) = _run(build, {"x": x}, DeviceName.INTEL_DNNL)
    assert not exe.module.vendor_regions
    x64 = x.astype(np.float64)
    if op == "layer_norm":
        centred = x64 - x64.mean(-1, keepdims=True)
        expected = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)
    else:
        shifted = x64 - x64.max(1, keepdims=True)
        log_probabilities = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
        expected = log_probabilities if op == "log_softmax" else np.exp(log_probabilities)
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


@needs_onednn
@pytest.mark.parametrize("shape", [(2, 7, 16), (1, 5, 32), (3, 8)])
@pytest.mark.parametrize("affine", ["scale_offset", "scale", "none"])
def test_layer_norm_matches_tvm(shape, affine):
    x = _randn(np.random.default_rng(0), *shape, scale=2.0) + 1.0

    def build():  # the same constants on each device
        rng = np.random.default_rng(shape[-1])
        a = odla.create_argument(VT(E.FLOAT32, shape), "x")
        scale = _constant(_randn(rng, shape[-1])) if "scale" in affine else None
        offset = _constant(_randn(rng, shape[-1])) if "offset" in affine else None
        odla.set_value_as_output(odla.layer_norm(a, 1, (-1,), 1e-5, scale, offset))

    _check_against_tvm(build, {"x": x})


def _onnx_model(path, nodes, inputs, outputs, initializers):
    """An opset-17 ONNX model of ``nodes`` written to ``path``; inputs and outputs are
    (name, shape) pairs of float32 tensors; initializers name -> array, kept in its dtype
    (float64 ones as float32)."""
    from onnx import TensorProto, helper, numpy_helper

    def tensor(name, value):
        value = np.asarray(value)
        return numpy_helper.from_array(value.astype(np.float32) if value.dtype.kind == "f"
                                       else value, name)

    graph = helper.make_graph(
        nodes, "block",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [tensor(n, v) for n, v in initializers.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _against_onnxruntime(path, feeds, device_name=DeviceName.DEFAULT):
    """A Session of the ONNX file ``path`` on ``device_name``, its outputs checked against
    onnxruntime's."""
    import onnxruntime

    expected = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, feeds)
    session = odla.Session.from_onnx(path, odla.allocate_device(device_name=device_name))
    outputs = session.run(feeds)
    for out, want in zip(outputs, expected, strict=True):
        assert out.shape == want.shape and out.dtype == want.dtype
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-5)
    return session


def _bert_block(path, rng, seq, hidden, heads):
    """One BERT encoder layer as torch.onnx writes it at opset 17: multi-head self-attention
    with a padding mask, residual adds, LayerNormalization, a GELU MLP written out with Erf."""
    from onnx import helper

    size = hidden // heads
    weights = {name: _randn(rng, *shape, scale=0.2) for name, shape in
               [("Wq", (hidden, hidden)), ("Wk", (hidden, hidden)), ("Wv", (hidden, hidden)),
                ("Wo", (hidden, hidden)), ("W1", (hidden, 4 * hidden)),
                ("W2", (4 * hidden, hidden))]}
    weights.update({f"b{n}": _randn(rng, hidden) for n in "qkvo2"})
    weights.update(
        b1=_randn(rng, 4 * hidden), g1=_randn(rng, hidden), o1=_randn(rng, hidden),
        g2=_randn(rng, hidden), o2=_randn(rng, hidden),
        mask=np.where(np.arange(seq) < seq - 3, 0.0, -1e4).reshape(1, 1, 1, seq),
        scale=np.sqrt(size), sqrt2=np.sqrt(2), one=1.0, half=0.5,
        split=np.array([1, seq, heads, size], np.int64), merge=np.array([1, seq, hidden], np.int64))
    node = helper.make_node
    nodes = []
    for n in "qkv":
        nodes += [node("MatMul", ["x", f"W{n}"], [f"{n}m"]),
                  node("Add", [f"{n}m", f"b{n}"], [f"{n}a"]),
                  node("Reshape", [f"{n}a", "split"], [f"{n}r"]),
                  node("Transpose", [f"{n}r"], [f"{n}h"], perm=[0, 2, 1, 3])]
    nodes += [node("Transpose", ["kh"], ["kt"], perm=[0, 1, 3, 2]),
              node("MatMul", ["qh", "kt"], ["s"]), node("Div", ["s", "scale"], ["ss"]),
              node("Add", ["ss", "mask"], ["sm"]), node("Softmax", ["sm"], ["p"], axis=-1),
              node("MatMul", ["p", "vh"], ["c"]),
              node("Transpose", ["c"], ["ct"], perm=[0, 2, 1, 3]),
              node("Reshape", ["ct", "merge"], ["cm"]),
              node("MatMul", ["cm", "Wo"], ["om"]), node("Add", ["om", "bo"], ["oa"]),
              node("Add", ["oa", "x"], ["r1"]),
              node("LayerNormalization", ["r1", "g1", "o1"], ["n1"], epsilon=1e-12),
              node("MatMul", ["n1", "W1"], ["f1"]), node("Add", ["f1", "b1"], ["f1b"]),
              node("Div", ["f1b", "sqrt2"], ["gd"]), node("Erf", ["gd"], ["ge"]),
              node("Add", ["ge", "one"], ["g1p"]), node("Mul", ["f1b", "g1p"], ["gm"]),
              node("Mul", ["gm", "half"], ["gelu"]),
              node("MatMul", ["gelu", "W2"], ["f2"]), node("Add", ["f2", "b2"], ["f2b"]),
              node("Add", ["f2b", "n1"], ["r2"]),
              node("LayerNormalization", ["r2", "g2", "o2"], ["y"], epsilon=1e-12)]
    return _onnx_model(path, nodes, [("x", (1, seq, hidden))], [("y", (1, seq, hidden))],
                       weights)


@needs_onednn
@pytest.mark.parametrize("seq, hidden, heads", [(12, 32, 4), (7, 48, 3)])
def test_bert_like_block_runs_on_onednn_and_matches_onnxruntime(tmp_path, seq, hidden, heads):
    """Attention (Q.K^T and P.V on computed operands, the mask and softmax), layer norms and
    the GELU MLP all go to oneDNN on the INTEL_DNNL device (DEFAULT leaves such a graph of
    matmuls to TVM); reshapes and transposes stay with TVM."""
    rng = np.random.default_rng(seq)
    path = _bert_block(tmp_path / "block.onnx", rng, seq, hidden, heads)
    session = _against_onnxruntime(path, {"x": _randn(rng, 1, seq, hidden)},
                                   DeviceName.INTEL_DNNL)
    regions = session.executable.module.vendor_regions
    assert _oneDNN_calls(session.executable) == len(regions) >= 1
    taken = " ".join(regions)
    for op in ("nn_softmax", "nn_gelu", "rsqrt", "matmul"):
        assert op in taken, (op, regions)
    assert "erf" not in taken  # recognized as one GELU


def test_gelu_written_out_is_recognized_as_one_op(tmp_path):
    """torch.onnx's erf GELU and GPT-2's tanh GELU each become one relax GELU op, and the
    results still match onnxruntime on TVM alone."""
    from onnx import helper

    node = helper.make_node
    nodes = [node("Div", ["x", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]),
             node("Add", ["e", "one"], ["e1"]), node("Mul", ["x", "e1"], ["m"]),
             node("Mul", ["m", "half"], ["erf_gelu"]),
             node("Mul", ["x", "half"], ["hx"]), node("Pow", ["x", "three"], ["x3"]),
             node("Mul", ["x3", "cubic"], ["cx"]), node("Add", ["x", "cx"], ["inner"]),
             node("Mul", ["inner", "scale"], ["si"]), node("Tanh", ["si"], ["t"]),
             node("Add", ["t", "one"], ["t1"]), node("Mul", ["hx", "t1"], ["tanh_gelu"])]
    constants = dict(sqrt2=np.sqrt(2), one=1.0, half=0.5, three=3.0, cubic=0.044715,
                     scale=np.sqrt(2 / np.pi))
    path = _onnx_model(tmp_path / "gelu.onnx", nodes, [("x", (3, 17))],
                       [("erf_gelu", (3, 17)), ("tanh_gelu", (3, 17))], constants)
    x = _randn(np.random.default_rng(5), 3, 17, scale=3.0)
    _against_onnxruntime(path, {"x": x}, DeviceName.INTEL_X86)
    module = import_model(path).build_module().script()
    assert "R.nn.gelu(" in module and "R.nn.gelu_tanh(" in module
    assert "R.erf" not in module and "R.tanh" not in module


def test_gelu_recognized_after_a_matmul_keeps_its_weight_as_the_constant_it_was(tmp_path):
    """The rewrite runs with the weights lifted out as parameters (hashing them made each
    pass slow); they are bound back: main takes x alone and reads the weight's own data."""
    from onnx import helper
    from tvm import relax

    node = helper.make_node
    w = _randn(np.random.default_rng(6), 17, 32)
    nodes = [node("MatMul", ["x", "w"], ["h"]), node("Div", ["h", "sqrt2"], ["d"]),
             node("Erf", ["d"], ["e"]), node("Add", ["e", "one"], ["e1"]),
             node("Mul", ["h", "e1"], ["m"]), node("Mul", ["m", "half"], ["y"])]
    path = _onnx_model(tmp_path / "mlp.onnx", nodes, [("x", (3, 17))], [("y", (3, 32))],
                       dict(w=w, sqrt2=np.sqrt(2), one=1.0, half=0.5))
    x = _randn(np.random.default_rng(7), 3, 17)
    _against_onnxruntime(path, {"x": x}, DeviceName.INTEL_X86)
    main = import_model(path).build_module()["main"]
    assert len(main.params) == 1  # x: no weight left a parameter
    assert "R.nn.gelu(" in main.script()
    weights = []
    relax.analysis.post_order_visit(main, lambda e: weights.append(e.value.numpy()) if hasattr(
        getattr(e, "value", None), "shape") and len(e.value.shape) == 2 else None)
    assert len(weights) == 1
    np.testing.assert_array_equal(weights[0], w)


@needs_onednn
def test_exporters_layer_norm_form_goes_to_onednn(tmp_path):
    """Below opset 17 exporters write layer norm as ReduceMean, Sub, Pow, ReduceMean, Add,
    Sqrt, Div, Mul, Add: one oneDNN layer norm."""
    from onnx import helper

    node = helper.make_node
    rng = np.random.default_rng(9)
    nodes = [node("ReduceMean", ["x"], ["m"], axes=[-1]), node("Sub", ["x", "m"], ["c"]),
             node("Pow", ["c", "two"], ["c2"]), node("ReduceMean", ["c2"], ["v"], axes=[-1]),
             node("Add", ["v", "eps"], ["ve"]), node("Sqrt", ["ve"], ["sd"]),
             node("Div", ["c", "sd"], ["n"]), node("Mul", ["n", "g"], ["ng"]),
             node("Add", ["ng", "b"], ["y"])]
    path = _onnx_model(tmp_path / "ln.onnx", nodes, [("x", (2, 5, 24))], [("y", (2, 5, 24))],
                       dict(two=2.0, eps=1e-5, g=_randn(rng, 24), b=_randn(rng, 24)))
    session = _against_onnxruntime(path, {"x": _randn(rng, 2, 5, 24, scale=2.0)})
    assert _oneDNN_calls(session.executable) == 1
    (region,) = session.executable.module.vendor_regions
    assert "sqrt" in region and "power" in region


@needs_onednn
def test_depthwise_cnn_runs_on_onednn_by_default_and_matches_onnxruntime(tmp_path):
    """A MobileNetV2-like block: expansion 1x1 conv with ReLU6 (a clamp), depthwise 3x3
    stride 2 with asymmetric padding, projection 1x1 conv, a swish head, global average pool,
    a classifier Gemm."""
    from onnx import helper

    node = helper.make_node
    rng = np.random.default_rng(11)
    weights = dict(w1=_randn(rng, 24, 8, 1, 1, scale=0.3), b1=_randn(rng, 24),
                   dw=_randn(rng, 24, 1, 3, 3, scale=0.3), w2=_randn(rng, 16, 24, 1, 1, scale=0.3),
                   fc=_randn(rng, 10, 16, scale=0.3), fb=_randn(rng, 10),
                   lo=np.float32(0), hi=np.float32(6))
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"]), node("Clip", ["c1", "lo", "hi"], ["r1"]),
             node("Conv", ["r1", "dw"], ["c2"], group=24, strides=[2, 2], pads=[0, 0, 1, 1]),
             node("Clip", ["c2", "lo", "hi"], ["r2"]), node("Conv", ["r2", "w2"], ["c3"]),
             node("Sigmoid", ["c3"], ["s3"]), node("Mul", ["c3", "s3"], ["sw"]),
             node("GlobalAveragePool", ["sw"], ["gp"]), node("Flatten", ["gp"], ["fl"]),
             node("Gemm", ["fl", "fc", "fb"], ["y"], transB=1)]
    path = _onnx_model(tmp_path / "dw.onnx", nodes, [("x", (1, 8, 15, 15))], [("y", (1, 10))],
                       weights)
    session = _against_onnxruntime(path, {"x": _randn(rng, 1, 8, 15, 15)})
    taken = " ".join(session.executable.module.vendor_regions)
    assert _oneDNN_calls(session.executable) >= 1 and taken.count("conv2d") == 3
    assert "sigmoid" in taken and "maximum" in taken


def test_default_device_without_onednn_falls_back_to_tvm_saying_why(monkeypatch, caplog):
    """With oneDNN hidden, DEFAULT compiles with TVM alone (as INTEL_X86) and logs why once."""
    from odla_tvm import device as device_module

    monkeypatch.setattr(onednn_library, "PREFIX", "/nonexistent")
    monkeypatch.setattr(device_module, "_fallbacks_said", set())
    with caplog.at_level("WARNING", logger="odla_tvm.device"):
        first = odla.allocate_device()
        second = odla.allocate_device()
    assert first.target.plugins == () and first.target.name == "host-cpu"
    assert second.target == first.target
    said = [r.getMessage() for r in caplog.records if r.name == "odla_tvm.device"]
    assert len(said) == 1 and "TVM alone" in said[0] and "dnnl.hpp" in said[0], said
    comp = odla.create_computation()
    a = odla.create_argument(VT(E.FLOAT32, (2, 3)), "a")
    odla.set_value_as_output(odla.sigmoid(a))
    exe = odla.compile_computation(comp, first)
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(odla.Session(exe).run({"a": x})[0], 1 / (1 + np.exp(-x)),
                               rtol=1e-6)
    assert exe.module.vendor_regions == []


@needs_onednn
def test_default_device_is_onednn_where_it_runs():
    """DEFAULT and INTEL_DNNL hand oneDNN what it takes; DEFAULT not in a graph oneDNN leaves
    to TVM as faster there, so their builds (and engines) differ."""
    device = odla.allocate_device()
    assert device.target.plugins == ("onednn",) and device.target.plugins_may_decline
    named = odla.allocate_device(device_name=DeviceName.INTEL_DNNL).target
    assert named.plugins == ("onednn",) and not named.plugins_may_decline
    assert named.key() != device.target.key() and named.name != device.target.name
    assert targets.get_target(device.target.name) == device.target
    assert odla.allocate_device(device_name=DeviceName.INTEL_X86).target.plugins == ()


@pytest.mark.parametrize("pads, conv_pads", [((0, 0, 0, 1, 0, 0, 0, 1), (0, 0, 0, 0)),
                                             ((0, 0, 1, 1, 0, 0, 1, 1), (1, 0, 1, 0)),
                                             ((0, 0, 0, 0, 0, 0, 0, 0), (0, 0, 0, 0))])
def test_zero_pad_before_a_conv_is_folded_into_its_padding(tmp_path, pads, conv_pads):
    """TensorFlow-style "same" padding as MobileNet exports write it (a Pad node, often
    asymmetric) becomes the convolution's own padding: no pad kernel, the same numbers."""
    from onnx import helper

    node = helper.make_node
    rng = np.random.default_rng(2)
    nodes = [node("Pad", ["x", "pads"], ["p"]),
             node("Conv", ["p", "w"], ["y"], strides=[2, 2], pads=list(conv_pads))]
    height = 9 + pads[2] + pads[6] + conv_pads[0] + conv_pads[2]
    width = 9 + pads[3] + pads[7] + conv_pads[1] + conv_pads[3]
    out = (1, 6, (height - 3) // 2 + 1, (width - 3) // 2 + 1)
    path = _onnx_model(tmp_path / "pad.onnx", nodes, [("x", (1, 4, 9, 9))], [("y", out)],
                       dict(pads=np.array(pads, np.int64), w=_randn(rng, 6, 4, 3, 3)))
    module = import_model(path).build_module().script()
    assert "R.nn.pad" not in module and "R.nn.conv2d" in module
    _against_onnxruntime(path, {"x": _randn(rng, 1, 4, 9, 9)}, DeviceName.INTEL_X86)


def test_a_pad_with_another_value_stays_a_pad(tmp_path):
    from onnx import helper

    node = helper.make_node
    rng = np.random.default_rng(4)
    nodes = [node("Pad", ["x", "pads", "one"], ["p"]), node("Conv", ["p", "w"], ["y"])]
    path = _onnx_model(tmp_path / "pad.onnx", nodes, [("x", (1, 4, 6, 6))], [("y", (1, 6, 5, 5))],
                       dict(pads=np.array([0, 0, 1, 1, 0, 0, 0, 0], np.int64), one=1.0,
                            w=_randn(rng, 6, 4, 3, 3)))
    assert "R.nn.pad" in import_model(path).build_module().script()
    _against_onnxruntime(path, {"x": _randn(rng, 1, 4, 6, 6)}, DeviceName.INTEL_X86)


@needs_onednn
@pytest.mark.parametrize("left, right", [((2, 8, 5, 5), (2, 8, 5, 5)), ((1, 8, 5, 5), (1, 8, 1, 1)),
                                         ((3, 7), (7,)), ((4,), ())])
@pytest.mark.parametrize("op", ["add", "mul", "sub", "div", "max", "min"])
def test_binary_op_between_tensors_matches_tvm(left, right, op):
    """A residual add or a squeeze-excitation scale between two computed tensors, the second
    broadcast, then a ReLU: one oneDNN step."""
    rng = np.random.default_rng(len(left))
    a, b = _randn(rng, *left), _randn(rng, *right) + (3.0 if op == "div" else 0.0)

    def build():
        x = odla.create_argument(VT(E.FLOAT32, left), "a")
        y = odla.create_argument(VT(E.FLOAT32, right), "b")
        odla.set_value_as_output(odla.relu(getattr(odla, op)(x, y)))

    _check_against_tvm(build, {"a": a, "b": b})


@needs_onednn
@pytest.mark.parametrize("right", [(1, 16, 4, 4), (1, 16, 1, 1), (16, 1, 1)])
def test_binary_op_of_a_blocked_and_a_plain_tensor_matches_tvm(right):
    """A pooled convolution's map (in oneDNN's blocked layout) times a tensor TVM computed
    (plain): read in one layout, or both plain where one broadcasts."""
    rng = np.random.default_rng(9)
    x, w, b = _randn(rng, 1, 3, 8, 8), _randn(rng, 16, 3, 3, 3, scale=0.3), _randn(rng, *right)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        y = odla.conv(a, L.CHANNELS_FIRST, 1, _constant(w), L.OIS, (1, 1), (1, 1), (1, 1), (1, 1))
        pooled = odla.max_pool(y, L.CHANNELS_FIRST, (2, 2), (2, 2), (0, 0), (0, 0))
        other = odla.sin(odla.create_argument(VT(E.FLOAT32, right), "b"))  # left to TVM
        odla.set_value_as_output(odla.mul(pooled, other))

    _check_against_tvm(build, {"x": x, "b": b})


@needs_onednn
@pytest.mark.parametrize("shape, axes", [((1, 16, 7, 7), (2, 3)), ((2, 3, 5), (1,)),
                                         ((4, 6), (0, 1))])
def test_mean_keeping_its_axes_matches_tvm(shape, axes):
    x = _randn(np.random.default_rng(1), *shape)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, shape), "x")
        odla.set_value_as_output(odla.reduce_mean(a, len(axes), axes, True))

    _check_against_tvm(build, {"x": x})


@needs_onednn
@pytest.mark.parametrize("channels, size, calls", [(16, 7, 1), (32, 12, 1), (24, 1, 2)])
def test_squeeze_excite_mean_of_a_convolutions_map_matches_tvm(channels, size, calls):
    """A spatial mean of a convolution's map (in oneDNN's own layout, which the mean reads
    as a global average pooling), scaled back in as a squeeze-excite block does: one call.
    A mean over a 1x1 map reduces nothing, which oneDNN refuses: TVM computes it."""
    rng = np.random.default_rng(channels)
    x = _randn(rng, 1, 8, size, size)
    w = _randn(rng, channels, 8, 3, 3, scale=0.3)
    w_excite = _randn(rng, channels, channels, 1, 1, scale=0.3)

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        y = odla.conv(a, L.CHANNELS_FIRST, 1, _constant(w), L.OIS, (1, 1), (1, 1), (1, 1), (1, 1))
        squeezed = odla.reduce_mean(y, 2, (2, 3), True)
        excite = odla.sigmoid(odla.conv(squeezed, L.CHANNELS_FIRST, 1, _constant(w_excite),
                                        L.OIS, (1, 1), (1, 1), (0, 0), (0, 0)))
        odla.set_value_as_output(odla.mul(y, excite))

    _check_against_tvm(build, {"x": x}, expected_calls=calls)


@needs_onednn
def test_several_whole_tensor_adds_after_a_conv_and_a_binary_op_match_tvm():
    """oneDNN's sum post-op adds what its output held: only the first whole-tensor add after a
    convolution may be one; the others (and every one after a binary op) are binary adds."""
    rng = np.random.default_rng(8)
    x = _randn(rng, 1, 4, 6, 6)
    w = _randn(rng, 4, 4, 3, 3, scale=0.3)
    residuals = [_randn(rng, 1, 4, 6, 6) for _ in range(3)]

    def build():
        a = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        y = odla.conv(a, L.CHANNELS_FIRST, 1, _constant(w), L.OIS, (1, 1), (1, 1), (1, 1), (1, 1))
        for r in residuals:
            y = odla.add(y, _constant(r))
        z = a  # computed operands: a binary step leaves constant ones to TVM
        for index in range(3):
            z = odla.add(z, odla.create_argument(VT(E.FLOAT32, x.shape), f"r{index}"))
        odla.set_value_as_output(y)
        odla.set_value_as_output(z)

    feeds = {"x": x, **{f"r{index}": r for index, r in enumerate(residuals)}}
    _check_against_tvm(build, feeds, expected_calls=2)  # two regions: nothing joins them


def _conv_stack(widths, kernels, size):
    """Convolutions (stride 1, same padding, no bias) of a 1 x widths[0] x size x size input
    through widths[1:], kernels[i] square: the build function and a NumPy reference."""
    rng = np.random.default_rng(len(widths) + size)
    weights = [_randn(rng, cout, cin, k, k, scale=0.3 / k)
               for cin, cout, k in zip(widths, widths[1:], kernels)]

    def build():
        y = odla.create_argument(VT(E.FLOAT32, (1, widths[0], size, size)), "x")
        for w in weights:
            pad = (w.shape[2] // 2,) * 2
            y = odla.conv(y, L.CHANNELS_FIRST, 1, _constant(w), L.OIS, (1, 1), (1, 1), pad, pad)
        odla.set_value_as_output(y)

    def reference(x):
        for w in weights:
            pad = (w.shape[2] // 2,) * 2
            x = ref.conv(x, w, strides=(1, 1), dilations=(1, 1), pads_front=pad, pads_back=pad)
        return x

    return build, reference


@needs_onednn
@pytest.mark.parametrize("kernels, expected_share, onednn_calls", [
    # Two 3x3 convolutions Winograd takes (32 channels, 16 tiles of 4x4) and a 1x1 one.
    ((3, 3, 1), 18 / 19, 0),
    # One 3x3 convolution of 32 channels among 1x1 ones of 32 -> 128 -> 128 -> 32 channels.
    ((3, 1, 1, 1), 3 / 11, 1),
])
def test_a_graph_much_of_winograd_convolutions_is_left_to_tvm(kernels, expected_share,
                                                             onednn_calls, caplog):
    """oneDNN computes convolutions directly: on DEFAULT, a graph whose multiply-adds are 35%
    or more in 3x3 convolutions TVM computes by Winograd runs in TVM whole, saying why; below
    that line oneDNN takes the graph as before. Both match NumPy."""
    widths = (32, 32, 32, 32) if onednn_calls == 0 else (32, 32, 128, 128, 32)
    build, reference = _conv_stack(widths, kernels, 16)
    comp = odla.create_computation()
    build()
    share = winograd_share(comp.build_module()["main"])
    assert share == pytest.approx(expected_share)
    x = _randn(np.random.default_rng(1), 1, 32, 16, 16)
    with caplog.at_level(logging.INFO, logger="targets.plugins"):
        exe = odla.compile_computation(comp, odla.allocate_device())
    (out,) = odla.Session(exe).run({"x": x})
    np.testing.assert_allclose(out, reference(x), rtol=RTOL, atol=1e-4)
    if onednn_calls:
        assert _oneDNN_calls(exe) == onednn_calls
    else:
        assert not exe.module.vendor_regions  # nothing of oneDNN's linked or called
    declined = f"{share:.0%} of its multiply-adds are in 3x3 convolutions that TVM computes"
    assert (declined in caplog.text) == (onednn_calls == 0), caplog.text
    odla.destroy_computation(comp)


def _matmul_chain(widths):
    """Matmuls (each a gemm with a constant weight, ReLU between) of an 8 x widths[0] input
    through widths[1:]: the build function and a NumPy reference."""
    rng = np.random.default_rng(len(widths))
    weights = [_randn(rng, k, n, scale=k ** -0.5) for k, n in zip(widths, widths[1:])]

    def build():
        y = odla.create_argument(VT(E.FLOAT32, (8, widths[0])), "x")
        for index, w in enumerate(weights):
            y = odla.gemm(y, False, _constant(w), False, 1.0, 0.0)
            y = odla.relu(y) if index < len(weights) - 1 else y
        odla.set_value_as_output(y)

    def reference(x):
        for index, w in enumerate(weights):
            x = x @ w
            x = np.maximum(x, 0) if index < len(weights) - 1 else x
        return x

    return build, reference


@needs_onednn
@pytest.mark.parametrize("device_name", [DeviceName.DEFAULT, DeviceName.INTEL_DNNL])
def test_a_graph_mostly_of_matmuls_is_left_to_tvm_by_default_only(device_name, caplog):
    """TVM's own build runs transformers faster: DEFAULT leaves a graph whose multiply-adds
    are 95% or more in matmuls to TVM whole, saying why, where INTEL_DNNL (a device named for
    oneDNN) keeps oneDNN; so it does for a graph mostly of Winograd's convolutions. All
    match NumPy."""
    build, reference = _matmul_chain((64, 128, 32))
    comp = odla.create_computation()
    build()
    assert matmul_share(comp.build_module()["main"]) == 1.0
    x = _randn(np.random.default_rng(2), 8, 64)
    with caplog.at_level(logging.INFO, logger="targets.plugins"):
        exe = odla.compile_computation(comp, odla.allocate_device(device_name=device_name))
    (out,) = odla.Session(exe).run({"x": x})
    np.testing.assert_allclose(out, reference(x), rtol=RTOL, atol=1e-4)
    declined = "100% of its multiply-adds are in matmuls, which TVM's build runs faster"
    if device_name == DeviceName.DEFAULT:
        assert not exe.module.vendor_regions and declined in caplog.text, caplog.text
    else:
        assert _oneDNN_calls(exe) == 1 and "leaves this graph" not in caplog.text
        build, reference = _conv_stack((32, 32, 32, 32), (3, 3, 1), 16)
        x = _randn(np.random.default_rng(1), 1, 32, 16, 16)
        exe, (out,) = _run(build, {"x": x}, device_name)
        assert _oneDNN_calls(exe) >= 1
        np.testing.assert_allclose(out, reference(x), rtol=RTOL, atol=1e-4)
    odla.destroy_computation(comp)
