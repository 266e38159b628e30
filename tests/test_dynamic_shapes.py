"""Dynamic shapes: DYNAMIC_BATCH with batch-size items and per-value MIN/MAX_SHAPE; one
executable, compiled once with symbolic dims, runs at many sizes; out-of-range sizes refused."""

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import ItemType, Status
from odla_tvm import MemoryLayout as L
from odla_tvm import ValueType as VT

RNG = np.random.default_rng(21)
W = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3
FC = RNG.standard_normal((6 * 4 * 4, 4)).astype(np.float32) * 0.2


def build_cnn(batch, dynamic=False):
    comp = odla.create_computation()
    if dynamic:
        odla.set_computation_item(comp, ItemType.DYNAMIC_BATCH, True)
        odla.set_computation_item(comp, ItemType.MIN_BATCH_SIZE, 1)
        odla.set_computation_item(comp, ItemType.MAX_BATCH_SIZE, 8)
        odla.set_computation_item(comp, ItemType.OPT_BATCH_SIZE, 4)
    x = odla.create_argument(VT(E.FLOAT32, (batch, 3, 8, 8)), "x")
    c = lambda a: odla.create_constant(VT(E.FLOAT32, a.shape), a)  # noqa: E731
    y = odla.relu(odla.conv(x, L.CHANNELS_FIRST, 1, c(W), L.OIS, (1, 1), (1, 1), (1, 1), (1, 1)))
    y = odla.average_pool(y, L.CHANNELS_FIRST, (2, 2), (2, 2), (0, 0), (0, 0), False)
    y = odla.reshape(y, (-1, 6 * 4 * 4))
    odla.set_value_as_output(odla.softmax(odla.gemm(y, False, c(FC), False, 1.0, 0.0), -1, "y"))
    return comp


def test_one_dynamic_batch_executable_runs_batch_1_3_8_like_fixed_builds():
    comp = build_cnn(1, dynamic=True)
    x = odla.get_arg_from_computation_by_idx(comp, 0)
    assert odla.get_value_type(x).shape.dims == (-1, 3, 8, 8)
    assert odla.get_value_type(comp.outputs[0]).shape.dims == (-1, 4)
    exe = odla.compile_computation(comp, None)
    for batch in (1, 3, 8):
        data = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        ctx = odla.create_context()
        odla.set_context_item(ctx, ItemType.RUN_BATCH_SIZE, batch)
        odla.bind_to_argument(x, data, ctx)
        out = np.zeros((batch, 4), np.float32)
        odla.bind_to_output(comp.outputs[0], out, ctx)
        odla.launch_executable(exe, ctx)
        (fixed,) = odla.Session(build_cnn(batch)).run({"x": data})
        np.testing.assert_allclose(out, fixed, rtol=1e-5, atol=1e-6)
        assert odla.get_runtime_shape(ctx, comp.outputs[0]) == odla.ValueShape((batch, 4))


def test_out_of_range_batches_are_refused_also_after_store_and_load():
    comp = build_cnn(1, dynamic=True)
    exe = odla.load_executable(odla.store_executable(None, odla.compile_computation(comp, None)))
    session = odla.Session(exe)
    for batch in (9, 12):
        with pytest.raises(odla.OdlaError) as err:
            session.run({"x": np.zeros((batch, 3, 8, 8), np.float32)})
        assert err.value.status == Status.INVALID_PARAM
        assert f"({batch}, 3, 8, 8)" in str(err.value) and "(8, -1, -1, -1)" in str(err.value)
    ctx = odla.create_context()
    odla.set_context_item(ctx, ItemType.RUN_BATCH_SIZE, 2)
    odla.bind_to_argument(exe.args[0], np.zeros((3, 3, 8, 8), np.float32), ctx)
    with pytest.raises(odla.OdlaError) as err:
        odla.launch_executable(exe, ctx)
    assert "batch 3" in str(err.value) and "RUN_BATCH_SIZE is 2" in str(err.value)


def test_min_and_max_shape_per_value():
    comp = odla.create_computation()
    tokens = odla.create_argument(VT(E.FLOAT32, (1, -1, 4)), "tokens")
    odla.set_value_shape_info(tokens, ItemType.MIN_SHAPE, (1, 2, 4))
    odla.set_value_shape_info(tokens, ItemType.MAX_SHAPE, (1, 16, 4))
    odla.set_value_shape_info(tokens, ItemType.OPT_SHAPE, (1, 8, 4))
    odla.set_value_as_output(odla.reduce_sum(tokens, 1, (1,), False, None, "pooled"))
    session = odla.Session(comp)
    for length in (2, 7, 16):
        data = RNG.standard_normal((1, length, 4)).astype(np.float32)
        np.testing.assert_allclose(session.run({"tokens": data})[0], data.sum(1), rtol=1e-5, atol=1e-6)
    for length in (1, 17):
        with pytest.raises(odla.OdlaError) as err:
            session.run({"tokens": np.zeros((1, length, 4), np.float32)})
        assert "(1, 2, 4) to (1, 16, 4)" in str(err.value)


def test_dynamic_shape_declaration_errors():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, -1)), "x")
    with pytest.raises(odla.OdlaError) as err:
        odla.set_computation_item(comp, ItemType.DYNAMIC_BATCH, True)
    assert "['x']" in str(err.value) and "before creating arguments" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.set_computation_item(comp, ItemType.MAX_BATCH_SIZE, 0)
    assert "MAX_BATCH_SIZE is 0" in str(err.value)
    odla.set_computation_item(comp, ItemType.MAX_BATCH_SIZE, 4)
    with pytest.raises(odla.OdlaError) as err:
        odla.set_computation_item(comp, ItemType.MIN_BATCH_SIZE, 5)
    assert "MIN_BATCH_SIZE 5 is greater than MAX_BATCH_SIZE 4" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.set_value_shape_info(x, ItemType.MIN_SHAPE, (3, 1))
    assert "(3, 1)" in str(err.value) and "(2, -1)" in str(err.value)
    odla.set_value_shape_info(x, ItemType.MAX_SHAPE, (2, 4))
    with pytest.raises(odla.OdlaError) as err:
        odla.set_value_shape_info(x, ItemType.MIN_SHAPE, (2, 5))
    assert "exceeds MAX_SHAPE" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.set_value_shape_info(x, ItemType.FP16_MODE, (2, 4))
    assert "expected MIN_SHAPE, MAX_SHAPE or OPT_SHAPE" in str(err.value)
    y = odla.relu(x)
    with pytest.raises(odla.OdlaError) as err:
        odla.set_value_shape_info(y, ItemType.MAX_SHAPE, (2, 4))
    assert "shape info is for arguments" in str(err.value)
