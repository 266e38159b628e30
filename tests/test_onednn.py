"""The oneDNN plugin (device INTEL_DNNL): every pattern it takes gives what TVM alone gives, on
several shapes, and its code is what ran; a real CNN matches its reference outputs; a module
with oneDNN parts runs after export in a fresh process; without oneDNN the device is refused,
saying what to install, and the plain CPU device still works."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import odla_tvm as odla
import targets
from odla_tvm import DeviceName, Status
from odla_tvm import ElementType as E
from odla_tvm import MemoryLayout as L
from odla_tvm import ValueType as VT
from targets import onednn

RTOL, ATOL = 1e-4, 1e-5


def _onednn_missing() -> str:
    try:
        onednn.check_available()
    except targets.PluginUnavailable as err:
        return str(err)
    return ""


needs_onednn = pytest.mark.skipif(bool(_onednn_missing()), reason=_onednn_missing())


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
    _, expected = _run(build, inputs, DeviceName.DEFAULT)
    exe, outputs = _run(build, inputs, DeviceName.INTEL_DNNL)
    assert _oneDNN_calls(exe) == expected_calls
    for out, ref in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def _randn(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# (input NCHW, out channels, kernel, strides, dilations, pads front, pads back, groups)
CONVS = [
    ((1, 3, 12, 12), 8, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 9, 11), 6, (3, 2), (2, 1), (1, 1), (0, 1), (2, 0), 2),
    ((1, 8, 10, 10), 8, (3, 3), (1, 1), (2, 2), (2, 2), (2, 2), 8),  # depthwise, dilated
    ((1, 16, 7, 7), 32, (1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
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


def _light_case_outputs(name: str):
    """A light model's outputs through INTEL_DNNL, its reference outputs, and the session."""
    from odla_tvm.frontends.onnx_conformance import light_cases

    case = next(c for c in light_cases() if c.name == name)
    session = odla.Session.from_onnx(case.model,
                                     odla.allocate_device(device_name=DeviceName.INTEL_DNNL))
    initializers = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in initializers]
    return session.run(dict(zip(names, case.inputs, strict=True))), case.outputs, session


@needs_onednn
def test_light_resnet50_matches_its_reference_outputs():
    outputs, expected, session = _light_case_outputs("test_resnet50")
    for out, ref in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)
    assert _oneDNN_calls(session.executable) == 2  # the convolutions' region and the gemm's


@needs_onednn
def test_light_squeezenet_runs_as_two_regions_and_matches_its_reference_outputs():
    """The fire modules' concats join the convolutions' region: all of it but the final mean
    is one oneDNN call, and the softmax after the mean another."""
    outputs, expected, session = _light_case_outputs("test_squeezenet")
    for out, ref in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)
    assert _oneDNN_calls(session.executable) == 2


@needs_onednn
def test_light_inception_v1_matches_its_reference_outputs():
    outputs, expected, session = _light_case_outputs("test_inception_v1")
    for out, ref in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)
    # The 4-branch concats join their regions; TVM's local response normalizations split them.
    assert _oneDNN_calls(session.executable) == 4


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


def test_without_onednn_the_device_says_what_to_install_and_the_cpu_still_works(
        tmp_path, monkeypatch):
    monkeypatch.setattr(onednn, "PREFIX", str(tmp_path))  # no include/dnnl.hpp, no lib/libdnnl.so
    with pytest.raises(odla.OdlaError) as err:
        odla.allocate_device(device_name=DeviceName.INTEL_DNNL)
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE
    assert "pip install 'odla-tvm[onednn]'" in str(err.value)
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
    assert "['conv2d', 'matmul', 'pool', 'concat', 'softmax', 'layer_norm']" in str(err.value)
    assert "lstm" in str(err.value)
