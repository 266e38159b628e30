"""A small CNN and an MLP built through the ODLA API match a NumPy reference through every
way of running them: execute_computation, launch_executable, Session, and a stored executable
loaded in a fresh Python process."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import odla_tvm as odla
import reference as ref
from odla_tvm import ElementType as E
from odla_tvm import MemoryLayout as L
from odla_tvm import ValueType as VT

RTOL, ATOL = 1e-4, 1e-5


def _params(seed):
    rng = np.random.default_rng(seed)
    f32 = lambda *shape, scale=1.0, shift=0.0: (  # noqa: E731
        rng.standard_normal(shape) * scale + shift).astype(np.float32)
    return rng, f32


def build_cnn(batch=2, seed=0):
    """conv(bias, pad 1) - batchnorm - relu - maxpool 2x2 - conv(stride 2, groups 2) - relu -
    average pool - gemm - softmax, on 3x12x12 images. Returns the computation, the reference
    function and the input."""
    rng, f32 = _params(seed)
    w1, b1 = f32(8, 3, 3, 3, scale=0.3), f32(8, scale=0.1)
    mean, var, scale, offset = f32(8, scale=0.1), np.abs(f32(8, shift=1.0)), f32(8, shift=1.0), f32(8)
    w2 = f32(16, 4, 3, 3, scale=0.2)
    fc, fc_bias = f32(16 * 2 * 2, 10, scale=0.2), f32(10, scale=0.1)

    comp = odla.create_computation()
    c = lambda a: odla.create_constant(VT(E.FLOAT32, a.shape), a)  # noqa: E731
    x = odla.create_argument(VT(E.FLOAT32, (batch, 3, 12, 12)), "image")
    y = odla.conv(x, L.CHANNELS_FIRST, 1, c(w1), L.OIS, (1, 1), (1, 1), (1, 1), (1, 1), c(b1))
    y = odla.batch_normalization(y, L.CHANNELS_FIRST, c(mean), c(var), 1e-5, c(scale), c(offset))
    y = odla.relu(y)
    y = odla.max_pool(y, L.CHANNELS_FIRST, (2, 2), (2, 2), (0, 0), (0, 0))
    y = odla.conv(y, L.CHANNELS_FIRST, 2, c(w2), L.OIS, (2, 2), (1, 1), (1, 1), (0, 0))
    y = odla.relu(y)
    y = odla.average_pool(y, L.CHANNELS_FIRST, (2, 2), (1, 1), (0, 0), (0, 0), False)
    y = odla.reshape(y, (batch, 16 * 2 * 2))
    y = odla.gemm(y, False, c(fc), False, 1.0, 1.0, c(fc_bias))
    odla.set_value_as_output(odla.softmax(y, 1, "probabilities"))

    def reference(image):
        h = ref.conv(image, w1, b1, strides=(1, 1), dilations=(1, 1), pads_front=(1, 1), pads_back=(1, 1))
        h = ref.relu(ref.batch_normalization(h, mean, var, 1e-5, scale, offset))
        h = ref.max_pool(h, window=(2, 2), strides=(2, 2), pads_front=(0, 0), pads_back=(0, 0))
        h = ref.conv(h, w2, strides=(2, 2), dilations=(1, 1), pads_front=(1, 1), pads_back=(0, 0), group=2)
        h = ref.average_pool(ref.relu(h), window=(2, 2), strides=(1, 1), pads_front=(0, 0),
                             pads_back=(0, 0), padding_included=False)
        h = ref.gemm(h.reshape(batch, -1), False, fc, False, 1.0, 1.0, fc_bias)
        return ref.softmax(h, 1)

    return comp, reference, rng.standard_normal((batch, 3, 12, 12)).astype(np.float32)


def build_mlp(batch=4, seed=1):
    """Two hidden layers (gemm + relu, gemm with a transposed weight + tanh), then log-softmax."""
    rng, f32 = _params(seed)
    w1, b1 = f32(20, 32, scale=0.3), f32(32, scale=0.1)
    w2t, b2 = f32(16, 32, scale=0.3), f32(16, scale=0.1)
    w3 = f32(16, 5, scale=0.3)

    comp = odla.create_computation()
    c = lambda a: odla.create_constant(VT(E.FLOAT32, a.shape), a)  # noqa: E731
    x = odla.create_argument(VT(E.FLOAT32, (batch, 20)), "features")
    h = odla.relu(odla.gemm(x, False, c(w1), False, 1.0, 1.0, c(b1)))
    h = odla.tanh(odla.gemm(h, False, c(w2t), True, 0.5, 2.0, c(b2)))
    logits = odla.gemm(h, False, c(w3), False, 1.0, 0.0, None)
    odla.set_value_as_output(odla.log_softmax(logits, -1, "log_probabilities"))

    def reference(features):
        a = np.maximum(features.astype(np.float64) @ w1 + b1, 0)
        a = np.tanh(0.5 * (a @ w2t.T) + 2.0 * b2)
        logits = a @ w3
        return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)

    return comp, reference, rng.standard_normal((batch, 20)).astype(np.float32)


MODELS = {"cnn": build_cnn, "mlp": build_mlp}


@pytest.fixture(params=sorted(MODELS))
def model(request):
    comp, reference, data = MODELS[request.param]()
    expected = reference(data)
    return comp, data, expected


def _check(actual, expected):
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


def test_execute_computation(model):
    comp, data, expected = model
    arg = odla.get_arg_from_computation_by_idx(comp, 0)
    out = odla.get_output_from_computation_by_idx(comp, 0)
    assert odla.get_value_type(out) == VT(E.FLOAT32, expected.shape)
    ctx = odla.create_context()
    odla.bind_to_argument(arg, data, ctx)
    buffer = np.zeros(expected.shape, np.float32)
    odla.bind_to_output(out, buffer, ctx)
    odla.execute_computation(comp, ctx, odla.ComputeMode.INFERENCE, odla.allocate_device())
    _check(buffer, expected)


def test_launch_executable(model):
    comp, data, expected = model
    exe = odla.compile_computation(comp, odla.allocate_device(None, odla.DeviceName.INTEL_X86, 0))
    for _ in range(2):  # the same context runs twice with the same result
        ctx = odla.create_context()
        odla.bind_to_argument_by_id(odla.get_value_id(exe.args[0]), data, ctx)
        odla.launch_executable(exe, ctx)
        _check(odla.get_value_data(odla.get_output_from_executable_by_idx(exe, 0), None, ctx), expected)


def test_session(model):
    comp, data, expected = model
    session = odla.Session(comp)
    (arg_id,) = session.input_types
    _check(session.run({arg_id: data})[0], expected)
    _check(session.run({arg_id: data})[0], expected)


def test_stored_executable_runs_in_a_fresh_process(model, tmp_path):
    comp, data, expected = model
    exe = odla.compile_computation(comp, None)
    path = tmp_path / "model.odla"
    odla.store_executable(path, exe)
    np.save(tmp_path / "input.npy", data)
    # The fresh process has no computation: only the file, loaded and launched.
    script = textwrap.dedent(f"""
        import json, numpy as np, odla_tvm as odla
        exe = odla.load_executable({str(path)!r}, odla.allocate_device())
        ctx = odla.create_context()
        odla.bind_to_argument(odla.get_arg_from_executable_by_idx(exe, 0),
                              np.load({str(tmp_path / 'input.npy')!r}), ctx)
        out = odla.get_output_from_executable_by_idx(exe, 0)
        buffer = np.zeros(odla.get_value_type(out).shape.dims, np.float32)
        odla.bind_to_output(out, buffer, ctx)
        odla.launch_executable(exe, ctx)
        np.save({str(tmp_path / 'output.npy')!r}, buffer)
        print(json.dumps({{"arg": odla.get_value_id(exe.args[0]), "out": odla.get_value_id(out)}}))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    ids = json.loads(run.stdout.strip().splitlines()[-1])
    assert ids == {"arg": comp.args[0].id, "out": comp.outputs[0].id}
    _check(np.load(tmp_path / "output.npy"), expected)
