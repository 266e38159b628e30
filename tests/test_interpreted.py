"""Interpret mode (HALO's): create_value plus set_value_data, then each op runs at once on the
same TVM kernels as the compiled path, compiled once per op signature and cached."""

import numpy as np
import pytest

import odla_tvm as odla
import reference as ref
from odla_tvm import ElementType as E
from odla_tvm import MemoryLayout as L
from odla_tvm import Status
from odla_tvm import ValueType as VT
from odla_tvm import interpreter

RNG = np.random.default_rng(11)
W1 = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3
B1 = RNG.standard_normal(4).astype(np.float32) * 0.1
MEAN, VAR = RNG.standard_normal(4).astype(np.float32) * 0.1, RNG.uniform(0.5, 1.5, 4).astype(np.float32)
FC = RNG.standard_normal((4 * 4 * 4, 5)).astype(np.float32) * 0.2


def cnn(x):
    """conv - batchnorm - relu - maxpool - reshape - gemm - softmax, op by op on value ``x``."""
    c = lambda a: odla.create_constant(VT(E.FLOAT32, a.shape), a)  # noqa: E731
    y = odla.conv(x, L.CHANNELS_FIRST, 1, c(W1), L.OIS, (1, 1), (1, 1), (1, 1), (1, 1), c(B1))
    y = odla.batch_normalization(y, L.CHANNELS_FIRST, c(MEAN), c(VAR), 1e-5)
    y = odla.max_pool(odla.relu(y), L.CHANNELS_FIRST, (2, 2), (2, 2), (0, 0), (0, 0))
    y = odla.reshape(y, (x.shape[0], 4 * 4 * 4))
    return odla.softmax(odla.gemm(y, False, c(FC), False, 1.0, 0.0), -1, None)


def reference_cnn(image):
    h = ref.conv(image, W1, B1, strides=(1, 1), dilations=(1, 1), pads_front=(1, 1), pads_back=(1, 1))
    h = ref.relu(ref.batch_normalization(h, MEAN, VAR, 1e-5))
    h = ref.max_pool(h, window=(2, 2), strides=(2, 2), pads_front=(0, 0), pads_back=(0, 0))
    return ref.softmax(h.reshape(image.shape[0], -1) @ FC, -1)


def test_interpreted_cnn_equals_compiled_and_reference():
    image = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    odla.create_computation()
    x = odla.create_value(VT(E.FLOAT32, image.shape), "image")
    odla.set_value_data(x, image)
    eager = odla.get_value_data(cnn(x))  # computed as the ops were called

    compiled = odla.create_computation()
    arg = odla.create_argument(VT(E.FLOAT32, image.shape), "image")
    odla.set_value_as_output(cnn(arg))
    (expected,) = odla.Session(compiled).run({"image": image})
    assert eager.dtype == np.float32 and eager.shape == (2, 5)
    np.testing.assert_allclose(eager, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(eager, reference_cnn(image), rtol=1e-4, atol=1e-5)


def test_second_pass_of_an_eager_loop_compiles_nothing():
    odla.create_computation()
    x = odla.create_value(VT(E.FLOAT32, (1, 3, 8, 8)), "x")
    compiled_before = None
    for step in range(3):
        image = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
        odla.set_value_data(x, image)
        start = dict(interpreter.statistics)
        out = cnn(x)
        compiled = interpreter.statistics["compiled"] - start.get("compiled", 0)
        executed = interpreter.statistics["executed"] - start.get("executed", 0)
        assert executed == 7  # conv, batchnorm, relu, maxpool, reshape, gemm, softmax
        if step == 0:
            compiled_before = compiled
        else:
            assert compiled == 0, f"pass {step} compiled {compiled} ops"
        np.testing.assert_allclose(odla.get_value_data(out), reference_cnn(image), rtol=1e-4, atol=1e-5)
        odla.release_value(out)
    assert compiled_before is not None


def test_compiled_computation_takes_a_values_current_data():
    comp = odla.create_computation()
    bias = odla.create_value(VT(E.FLOAT32, (3,)), "bias")
    odla.set_value_data(bias, np.array([1, 2, 3], np.float32))
    x = odla.create_argument(VT(E.FLOAT32, (3,)), "x")
    odla.set_value_as_output(odla.add(x, bias, "y"))  # x has no data: recorded, not run
    assert odla.get_value_type(odla.find_value_by_id("y")) == VT(E.FLOAT32, (3,))
    (y,) = odla.Session(comp).run({"x": np.ones(3, np.float32)})
    np.testing.assert_array_equal(y, np.array([2, 3, 4], np.float32))


def test_interpret_mode_errors():
    odla.create_computation()
    x = odla.create_value(VT(E.FLOAT32, (2,)), "x")
    with pytest.raises(odla.OdlaError) as err:
        odla.relu(x)
    assert err.value.status == Status.INVALID_PARAM and "'x' holds no data" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.set_value_data(x, np.zeros(3, np.float32))
    assert err.value.status == Status.INVALID_PARAM and "(3,)" in str(err.value)
    odla.set_value_data(x, np.array([-1.0, 2.0], np.float32))
    y = odla.relu(x, "y")
    np.testing.assert_array_equal(odla.get_value_data(y), [0.0, 2.0])
    odla.release_value(y)
    with pytest.raises(odla.OdlaError) as err:
        odla.get_value_data(y)
    assert "'y' holds no data" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.neg(y)
    assert "'y' holds no data" in str(err.value)
    arg = odla.create_argument(VT(E.FLOAT32, (2,)), "arg")
    with pytest.raises(odla.OdlaError) as err:
        odla.release_value(arg)
    assert err.value.status == Status.INVALID_PARAM and "release_value" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.create_value(VT(E.FLOAT32, (-1, 2)), "dyn")
    assert "dynamic" in str(err.value)
