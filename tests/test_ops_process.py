"""The ODLA process ops beyond the foundation set, and CloneValue, compiled for the host
CPU, against NumPy references written here (ONNX's NumPy reference evaluator for Resize) on
several shapes, attributes and element types. Each case also checks that the value type ODLA
reports when the op is created is the result's; dims known at run time only are -1 there."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import FillMethod, OdlaError, Status
from odla_tvm import InterpolationMode as Interpolation
from odla_tvm import ResizeCoordinateMode as Coordinates
from odla_tvm import ValueType as VT

try:
    from .test_ops import F32, I32, I64, case, check, data, run_op
    from .test_ops_nn import run_values
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from test_ops import F32, I32, I64, case, check, data, run_op
    from test_ops_nn import run_values


def check_dynamic(result, expected, value_type_dims):
    """``check`` for a result whose value type, known when the op was created, has
    ``value_type_dims``: the expected shape with -1 where a dim is known at run time only."""
    out, vtype = result
    assert vtype.shape.dims == tuple(value_type_dims), f"ODLA value type {vtype}"
    check((out, VT(vtype.element_type, np.shape(expected))), expected)


def run_in_computation(build):
    """Runs ``build()`` in a fresh current computation (for calls expected to fail)."""
    comp = odla.create_computation()
    try:
        return build()
    finally:
        odla.destroy_computation(comp)


@pytest.mark.parametrize("shape, output_shape, dtype", [
    case("column_to_3d", (3, 1), (2, 3, 4), F32),
    case("same_rank_int64", (1, 3, 1), (2, 3, 4), I64),
    case("scalar_bool", (), (2, 2), np.bool_),
])
def test_broadcast(shape, output_shape, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x: odla.broadcast(x, output_shape), {"x": x}),
          np.broadcast_to(x, output_shape))


def compress_reference(x, condition, axis):
    if axis is None:
        x, axis = x.reshape(-1), 0
    size = x.shape[axis]
    keep = np.nonzero(condition[:size])[0]
    return np.take(x, keep, axis=axis)


@pytest.mark.parametrize("shape, condition, axis, dtype", [
    case("axis1_bool", (2, 3, 4), [True, False, True], 1, F32),
    case("axis0_int_condition", (4, 3), [0, 2, 0, 1], 0, I32),
    case("negative_axis", (2, 5), [1, 1, 0, 0, 1], -1, I64),
    case("flattened", (2, 3), [True, False, True, True], None, F32),
    case("shorter_condition", (5, 2), [True, False, True], 0, F32),
    case("longer_condition", (2, 2), [False, True, True, True], 0, F32),
    case("none_selected", (3, 2), [False, False, False], 0, F32),
])
def test_compress(shape, condition, axis, dtype):
    x = data(shape, dtype, seed=1)
    condition = np.array(condition)
    expected = compress_reference(x, condition, axis)
    dims = (-1,) if axis is None else tuple(-1 if i == axis % len(shape) else d
                                           for i, d in enumerate(shape))
    check_dynamic(run_op(lambda x, c: odla.compress(x, c, axis), {"x": x, "c": condition}),
                  expected, dims)


def test_compress_flattens_with_halos_int32_max_axis():
    x, condition = data((2, 3), seed=1), np.array([False, True, True])
    check_dynamic(run_op(lambda x, c: odla.compress(x, c, 2**31 - 1), {"x": x, "c": condition}),
                  x.reshape(-1)[1:3], (-1,))


@pytest.mark.parametrize("shapes, axis, dtype", [
    case("axis0", [(2, 3), (2, 3)], 0, F32),
    case("axis_last_three", [(2, 3)] * 3, 2, I32),
    case("negative_axis", [(4,), (4,)], -1, I64),
])
def test_stack(shapes, axis, dtype):
    inputs = {f"x{i}": data(s, dtype, seed=i) for i, s in enumerate(shapes)}
    check(run_op(lambda *xs: odla.stack(xs, axis), inputs), np.stack(list(inputs.values()), axis))


@pytest.mark.parametrize("shape, element_type, dtype", [
    case("square", (3, 3), E.FLOAT32, F32), case("wide_int32", (2, 4), E.INT32, I32),
    case("tall_float64", (4, 2), E.FLOAT64, np.float64),
])
def test_fill_eye_like(shape, element_type, dtype):
    check(run_op(lambda: odla.fill(VT(element_type, shape), FillMethod.EyeLike, 0, 0, 0), {}),
          np.eye(*shape, dtype=dtype))


@pytest.mark.parametrize("element_type, dtype", [(E.FLOAT32, F32), (E.FLOAT64, np.float64)])
def test_fill_random_uniform(element_type, dtype):
    low, high, shape = -1.0, 3.0, (100, 200)
    out, vtype = run_op(lambda: odla.fill(VT(element_type, shape), FillMethod.RandomUniform,
                                          low, high, 7), {})
    assert out.dtype == dtype and out.shape == shape and vtype == VT(element_type, shape)
    assert low <= out.min() and out.max() < high
    # The mean and variance of U(low, high), within about 5 standard errors of 20000 samples.
    assert abs(out.mean() - (low + high) / 2) < 0.05
    assert abs(out.var() - (high - low) ** 2 / 12) < 0.05
    histogram, _ = np.histogram(out, bins=8, range=(low, high))
    assert histogram.min() > 0.9 * out.size / 8


def test_fill_random_normal_and_seeds():
    mean, deviation, vtype = 2.0, 0.5, VT(E.FLOAT32, (100, 200))

    def normal(seed):
        return run_op(lambda: odla.fill(vtype, FillMethod.RandomNormal, mean, deviation, seed), {})[0]

    out = normal(11)
    assert abs(out.mean() - mean) < 0.02 and abs(out.std() - deviation) < 0.02
    # About 68% and 95% within one and two deviations.
    within = [np.mean(np.abs(out - mean) < k * deviation) for k in (1, 2)]
    assert abs(within[0] - 0.6827) < 0.02 and abs(within[1] - 0.9545) < 0.01
    np.testing.assert_array_equal(normal(11), out)
    assert not np.array_equal(normal(12), out)


def gather_elements_reference(x, indices, axis):
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    return np.take_along_axis(x, indices, axis)


@pytest.mark.parametrize("shape, indices_shape, axis, dtype, index_dtype", [
    case("axis0", (3, 4), (2, 4), 0, F32, I64),
    case("axis1_int32_indices", (3, 4), (3, 2), 1, F32, I32),
    case("axis_last_3d_int64_data", (2, 3, 4), (2, 3, 5), -1, I64, I64),
])
def test_gather_elements(shape, indices_shape, axis, dtype, index_dtype):
    x = data(shape, dtype, seed=1)
    size = shape[axis]
    indices = data(indices_shape, index_dtype, seed=2, low=-size, high=size)  # negative too
    check(run_op(lambda x, i: odla.gather_elements(x, i, axis), {"x": x, "i": indices}),
          gather_elements_reference(x, indices, axis))


def gather_nd_reference(x, indices, batch_dims):
    """ONNX's GatherND: the index tuples in the last axis of ``indices`` address ``x``'s dims
    after the first ``batch_dims``, which both share."""
    batch = x.shape[:batch_dims]
    out = []
    for b in np.ndindex(*batch):
        xb, ib = x[b], indices[b]
        out.append([xb[tuple(t)] for t in ib.reshape(-1, ib.shape[-1])])
    tail = x.shape[batch_dims + indices.shape[-1]:]
    return np.array(out, x.dtype).reshape(indices.shape[:-1] + tail)


@pytest.mark.parametrize("shape, indices, batch_dims, dtype", [
    case("full_tuples", (3, 4), [[0, 1], [2, -1], [-3, 0]], 0, F32),
    case("partial_tuples_slices", (3, 4, 2), [[1], [-1]], 0, I32),
    case("batch_dims1", (2, 3, 4), [[[1, 2]], [[0, -1]]], 1, F32),
    case("nested_indices", (4, 3), [[[0], [3]], [[1], [-2]]], 0, I64),
])
def test_gather_nd(shape, indices, batch_dims, dtype):
    x, indices = data(shape, dtype, seed=1), np.array(indices, I64)
    check(run_op(lambda x, i: odla.gather_nd(x, i, batch_dims), {"x": x, "i": indices}),
          gather_nd_reference(x, np.where(indices < 0, indices + np.array(
              shape[batch_dims:batch_dims + indices.shape[-1]]), indices), batch_dims))


def one_hot_reference(indices, depth, values, axis):
    indices = np.where(indices < 0, indices + depth, indices)
    hot = np.arange(depth) == indices[..., None]
    out = np.where(hot, values[1], values[0]).astype(values.dtype)
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("indices, depth, axis, values", [
    case("last_axis", [[0, 2], [1, 4]], 5, -1, np.array([0, 1], F32)),
    case("axis0_negative_indices", [1, -1, 0], 3, 0, np.array([-2, 7], I32)),
    case("middle_axis_out_of_range", [[2, 5], [-4, 1]], 3, 1, np.array([0.5, 3.0], F32)),
])
def test_one_hot(indices, depth, axis, values):
    indices = np.array(indices, I64)
    check(run_op(lambda i, v: odla.one_hot(i, depth, v, axis), {"i": indices, "v": values}),
          one_hot_reference(indices, depth, values, axis))


@pytest.mark.parametrize("shape, output_shape, dtype", [
    case("plain", (2, 3, 4), [4, 6], F32),
    case("minus1_inferred", (2, 3, 4), [-1, 4], I32),
    case("zero_keeps_dim", (2, 3, 4), [0, -1, 2], F32),
    case("int32_shape_value", (6,), [3, 2], I64),
])
def test_reshape_dynamic(shape, output_shape, dtype):
    x = data(shape, dtype, seed=1)
    target = np.array(output_shape, I32 if dtype is I64 else I64)
    dims = [x.shape[i] if d == 0 else d for i, d in enumerate(output_shape)]
    check_dynamic(run_op(odla.reshape_dynamic, {"x": x, "shape": target}), x.reshape(dims),
                  (-1,) * len(output_shape))


def onnx_resize(x, sizes, mode, coordinate_mode, nearest_mode="round_prefer_floor",
                cubic_coeff_a=-0.75, exclude_outside=0):
    """ONNX's Resize by the onnx package's NumPy reference evaluator."""
    node = onnx.helper.make_node(
        "Resize", ["x", "", "", "sizes"], ["y"], mode=mode,
        coordinate_transformation_mode=coordinate_mode, nearest_mode=nearest_mode,
        cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside)
    tensor = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        [node], "resize", [tensor("x", onnx.TensorProto.FLOAT, x.shape),
                           tensor("sizes", onnx.TensorProto.INT64, (x.ndim,))],
        [tensor("y", onnx.TensorProto.FLOAT, None)])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])
    (y,) = ReferenceEvaluator(model).run(None, {"x": x, "sizes": np.array(sizes, I64)})
    return y.astype(x.dtype)


ONNX_MODES = {Interpolation.NEAREST: "nearest", Interpolation.LINEAR: "linear",
              Interpolation.CUBIC: "cubic"}
ONNX_COORDINATES = {Coordinates.ASSYMMETRIC: "asymmetric", Coordinates.HALF_PIXEL: "half_pixel",
                    Coordinates.ALIGN_CORNERS: "align_corners"}


@pytest.mark.parametrize("shape, output_dims, axes_mask, interpolation, mode, nearest_mode", [
    case("nchw_nearest_up_asym", (1, 2, 3, 4), (1, 2, 6, 8), 0b0011, Interpolation.NEAREST,
         Coordinates.ASSYMMETRIC, "floor"),
    case("nchw_nearest_half_pixel_prefer_ceil", (1, 1, 4, 5), (1, 1, 7, 3), 0, Interpolation.NEAREST,
         Coordinates.HALF_PIXEL, "round_prefer_ceil"),
    case("linear_half_pixel_down", (2, 1, 6, 8), (2, 1, 4, 3), 0b0011, Interpolation.LINEAR,
         Coordinates.HALF_PIXEL, "round_prefer_floor"),
    case("linear_align_corners", (1, 2, 3, 4), (1, 2, 5, 7), 0, Interpolation.LINEAR,
         Coordinates.ALIGN_CORNERS, "round_prefer_floor"),
    case("nhwc_linear_mask_0110", (1, 3, 4, 2), (1, 6, 8, 2), 0b0110, Interpolation.LINEAR,
         Coordinates.HALF_PIXEL, "round_prefer_floor"),
    case("cubic_half_pixel", (1, 1, 4, 4), (1, 1, 7, 6), 0, Interpolation.CUBIC,
         Coordinates.HALF_PIXEL, "round_prefer_floor"),
    case("1d_linear", (2, 3, 5), (2, 3, 9), 0b001, Interpolation.LINEAR,
         Coordinates.ASSYMMETRIC, "round_prefer_floor"),
    case("3d_nearest", (1, 1, 2, 3, 2), (1, 1, 4, 3, 5), 0, Interpolation.NEAREST,
         Coordinates.HALF_PIXEL, "round_prefer_floor"),
    case("first_axis_of_2d", (3, 4), (5, 4), 0b10, Interpolation.LINEAR,
         Coordinates.HALF_PIXEL, "round_prefer_floor"),
])
def test_resize(shape, output_dims, axes_mask, interpolation, mode, nearest_mode):
    x = data(shape, seed=1)
    expected = onnx_resize(x, output_dims, ONNX_MODES[interpolation], ONNX_COORDINATES[mode],
                           nearest_mode)
    result = run_op(lambda x: odla.resize(x, interpolation, mode, axes_mask, output_dims,
                                          nearest_mode=nearest_mode), {"x": x})
    check(result, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode, output_dims", [
    case("linear_length_1", Interpolation.LINEAR, (1, 1, 1, 8)),
    # TOPI's cubic resize differs from ONNX's where pytorch_half_pixel maps a length-1 axis.
    case("cubic", Interpolation.CUBIC, (1, 1, 3, 8)),
])
def test_resize_onnx_coordinate_mode_and_cubic_options(mode, output_dims):
    x = data((1, 1, 4, 5), seed=1)
    expected = onnx_resize(x, output_dims, ONNX_MODES[mode], "pytorch_half_pixel",
                           cubic_coeff_a=-0.5, exclude_outside=1)
    result = run_op(lambda x: odla.resize(x, mode, "pytorch_half_pixel", 0, output_dims,
                                          cubic_coeff_a=-0.5, exclude_outside=True), {"x": x})
    check(result, expected, rtol=1e-5, atol=1e-5)


def test_resize_half_pixel_tf():
    """ODLA's HALF_PIXEL_TF, nearest: TensorFlow's half-pixel centers, input index
    floor((output index + 0.5) * input size / output size)."""
    x = data((1, 1, 3, 4), seed=1)
    rows, cols = (np.floor((np.arange(n) + 0.5) * d / n).astype(int) for d, n in ((3, 5), (4, 7)))
    result = run_op(lambda x: odla.resize(x, Interpolation.NEAREST, Coordinates.HALF_PIXEL_TF, 0,
                                          (1, 1, 5, 7), nearest_mode="floor"), {"x": x})
    check(result, x[:, :, rows][:, :, :, cols])


def test_resize_refuses_a_mask_that_misses_a_changed_axis():
    def build():
        x = odla.create_argument(VT(E.FLOAT32, (1, 2, 3, 4)))
        odla.resize(x, Interpolation.NEAREST, Coordinates.HALF_PIXEL, 0b0001, (1, 2, 6, 8))

    with pytest.raises(OdlaError) as err:
        run_in_computation(build)
    assert err.value.status == Status.INVALID_PARAM and "axes_mask" in err.value.message


@pytest.mark.parametrize("shape, sizes, scales, interpolation, mode", [
    case("sizes_nearest", (1, 2, 3, 4), [1, 2, 6, 2], None, Interpolation.NEAREST,
         Coordinates.ASSYMMETRIC),
    case("scales_linear", (2, 1, 4, 6), None, [1, 1, 2, 0.5], Interpolation.LINEAR,
         Coordinates.HALF_PIXEL),
    case("sizes_1d", (1, 3, 5), [1, 3, 10], None, Interpolation.LINEAR, Coordinates.ALIGN_CORNERS),
])
def test_resize_dynamic(shape, sizes, scales, interpolation, mode):
    x = data(shape, seed=1)
    out_sizes = sizes or [int(np.floor(d * s)) for d, s in zip(shape, scales)]
    expected = onnx_resize(x, out_sizes, ONNX_MODES[interpolation], ONNX_COORDINATES[mode])
    if sizes is not None:
        inputs = {"x": x, "sizes": np.array(sizes, I64)}

        def build(x, s):
            return odla.resize_dynamic(x, None, s, interpolation, mode)
    else:
        inputs = {"x": x, "scales": np.array(scales, F32)}

        def build(x, s):
            return odla.resize_dynamic(x, s, None, interpolation, mode)
    check_dynamic(run_op(build, inputs), expected, shape[:2] + (-1,) * (len(shape) - 2))


@pytest.mark.parametrize("shape, dtype", [
    case("3d", (2, 3, 4), F32), case("scalar", (), I32), case("bool_1d", (5,), np.bool_),
])
def test_shape(shape, dtype):
    check(run_op(odla.shape, {"x": data(shape, dtype, seed=1)}), np.array(shape, I64))


def test_shape_of_dims_known_at_run_time():
    comp = odla.create_computation()
    try:
        x = odla.create_argument(VT(E.FLOAT32, (-1, 3, -1)), "x")
        y = odla.shape(x)
        assert odla.get_value_type(y) == VT(E.INT64, (3,))
        odla.set_value_as_output(y)
        session = odla.Session(comp)
        for shape in [(2, 3, 5), (7, 3, 1)]:
            (out,) = session.run({"x": np.zeros(shape, F32)})
            np.testing.assert_array_equal(out, np.array(shape, I64))
    finally:
        odla.destroy_computation(comp)


def slice_dynamic_reference(x, start, size, stride):
    index = []
    for dim, first, count, step in zip(x.shape, start, size, stride):
        first = first + dim if first < 0 else first
        index.append(np.clip(first + step * np.arange(count), 0, dim - 1))
    return x[np.ix_(*index)]


@pytest.mark.parametrize("shape, start, size, stride, dtype", [
    case("plain", (5, 6), [1, 0], [3, 6], [1, 1], F32),
    case("strided", (7, 8), [0, 1], [4, 3], [2, 3], I32),
    case("negative_start_and_stride", (4, 5, 6), [-1, 4, -2], [2, 3, 2], [-2, -1, 1], F32),
    case("empty", (3, 3), [0, 0], [0, 2], [1, 1], I64),
])
def test_slice_dynamic(shape, start, size, stride, dtype):
    x = data(shape, dtype, seed=1)
    inputs = {"x": x, "start": np.array(start, I32), "size": np.array(size, I64),
              "stride": np.array(stride, I32)}
    check_dynamic(run_op(odla.slice_dynamic, inputs),
                  slice_dynamic_reference(x, start, size, stride), (-1,) * len(shape))


def dims_expand_reference(values, original, axes):
    out = values.copy()
    for entry, axis in zip(original, axes):
        axis = axis + len(values) if axis < 0 else axis
        out[axis] = entry + out[axis] if entry < 0 else entry
    return out


@pytest.mark.parametrize("values, original, axes, dtype", [
    case("set_two", [0, 0, 0, 0], [5, 7], [1, 3], I32),
    case("negative_axis_and_relative_entry", [2, 3, 4], [-1, 9], [-1, 0], I64),
    case("all", [1, 1], [4, 5], [0, 1], I32),
])
def test_dims_expand(values, original, axes, dtype):
    values, original, axes = (np.array(v, dtype) for v in (values, original, axes))
    check(run_op(odla.dims_expand, {"values": values, "original": original, "axes": axes}),
          dims_expand_reference(values, original, axes))


@pytest.mark.parametrize("shape, axis, parts, dtype", [
    case("axis0_two", (4, 3), 0, 2, F32),
    case("axis_last_three", (2, 6), -1, 3, I64),
    case("one_part", (3,), 0, 1, I32),
])
def test_split(shape, axis, parts, dtype):
    x = data(shape, dtype, seed=1)
    ids = [f"part{i}" for i in range(parts)]
    results = run_values(lambda x: odla.split(x, axis, parts, ids), {"x": x})
    for result, expected in zip(results, np.split(x, parts, axis)):
        check(result, expected)


def test_split_dim_as_constant_value_and_ids():
    comp = odla.create_computation()
    try:
        x = odla.create_argument(VT(E.FLOAT32, (2, 4)), "x")
        axis = odla.create_constant(VT(E.INT32, ()), np.array(1, I32))
        left, right = odla.split(x, axis, 2, ["left", "right"])
        assert (left.id, right.id) == ("left", "right")
        assert odla.get_value_type(right) == VT(E.FLOAT32, (2, 2))
        with pytest.raises(OdlaError) as err:
            odla.split(x, x, 2)
        assert "expected a constant" in err.value.message
    finally:
        odla.destroy_computation(comp)


@pytest.mark.parametrize("shape, repeat, dtype", [
    case("2d", (2, 3), (2, 1), F32), case("3d_int64", (1, 2, 3), (3, 2, 1), I64),
    case("zero_repeat", (2, 2), (0, 2), I32),
])
def test_tile(shape, repeat, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x: odla.tile(x, repeat), {"x": x}), np.tile(x, repeat))


@pytest.mark.parametrize("shape, repeat, dtype", [
    case("2d", (2, 3), (2, 1), F32), case("3d_int32_repeat", (1, 2, 3), (3, 2, 2), I32),
])
def test_tile_dynamic(shape, repeat, dtype):
    x = data(shape, dtype, seed=1)
    inputs = {"x": x, "repeat": np.array(repeat, I32 if dtype is I32 else I64)}
    check_dynamic(run_op(odla.tile_dynamic, inputs), np.tile(x, repeat), (-1,) * len(shape))


# -- basic: copies of values -----------------------------------------------------------------

@pytest.mark.parametrize("shape, dtype", [case("2x3", (2, 3), F32), case("scalar_int64", (), I64)])
def test_clone_value(shape, dtype):
    x = data(shape, dtype, seed=1)
    results = run_values(lambda x: [odla.clone_value(x, "copy"), odla.clone_value_by_id("x"), x],
                         {"x": x})
    for result in results:
        check(result, x)


def test_clone_value_ids():
    comp = odla.create_computation()
    try:
        x = odla.create_argument(VT(E.FLOAT32, (2,)), "x")
        copy = odla.clone_value_by_id("x", "copy")
        assert copy.id == "copy" and odla.find_value_by_id("copy") is copy
        assert odla.get_value_type(copy) == VT(E.FLOAT32, (2,))
        with pytest.raises(OdlaError) as err:
            odla.clone_value(x, "copy")
        assert "already names a value" in err.value.message
    finally:
        odla.destroy_computation(comp)
