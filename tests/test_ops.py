"""Each ODLA op, compiled for the host CPU, against an independent NumPy reference
(tests/reference.py) on several shapes, attributes and element types.

Every case also checks that the value type ODLA reports when the op is created
(``get_value_type``) is the shape and dtype of the result that comes back.
"""

from __future__ import annotations

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import MemoryLayout as L
from odla_tvm import ValueType as VT

try:
    from . import reference as ref
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    import reference as ref

ELEMENT_TYPES = {
    np.dtype(np.float32): E.FLOAT32,
    np.dtype(np.float16): E.FLOAT16,
    np.dtype(np.float64): E.FLOAT64,
    np.dtype(np.int32): E.INT32,
    np.dtype(np.int64): E.INT64,
    np.dtype(np.int8): E.INT8,
    np.dtype(np.uint8): E.UINT8,
    np.dtype(np.int16): E.INT16,
    np.dtype(np.uint16): E.UINT16,
    np.dtype(np.uint32): E.UINT32,
    np.dtype(np.bool_): E.BOOL,
}
F32, I32, I64 = np.float32, np.int32, np.int64


# -- helpers ---------------------------------------------------------------------------------

def run_values(build, inputs: dict, constants=()):
    """Builds a computation with one argument per entry of ``inputs`` (a constant for names in
    ``constants``), applies ``build(*values)`` (a value, or a list of them), runs it and
    returns [(result, value type)], one per value."""
    comp = odla.create_computation()
    try:
        values = []
        for name, array in inputs.items():
            vtype = VT(ELEMENT_TYPES[array.dtype], array.shape)
            values.append(odla.create_constant(vtype, array, name) if name in constants
                          else odla.create_argument(vtype, name))
        results = build(*values)
        results = results if isinstance(results, list) else [results]
        vtypes = [odla.get_value_type(y) for y in results]
        odla.set_values_as_output(results)
        outs = odla.Session(comp).run({k: v for k, v in inputs.items() if k not in constants})
    finally:
        odla.destroy_computation(comp)
    return list(zip(outs, vtypes))


def run_op(build, inputs: dict, constants=()):
    """run_values for a single-output ``build``: (result, value type)."""
    (result,) = run_values(build, inputs, constants)
    return result


def check(result, expected, rtol=1e-5, atol=1e-5):
    out, vtype = result
    expected = np.asarray(expected)
    assert out.dtype == expected.dtype, f"dtype {out.dtype}, expected {expected.dtype}"
    assert out.shape == expected.shape, f"shape {out.shape}, expected {expected.shape}"
    assert vtype.shape.dims == expected.shape, f"ODLA value type {vtype}, result {out.shape}"
    assert vtype.dtype == expected.dtype, f"ODLA value type {vtype}, result {out.dtype}"
    if np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(out, expected)


def data(shape, dtype=F32, seed=0, low=-10, high=10):
    """Random test data: standard normal floats, or integers in [low, high)."""
    rng = np.random.default_rng(seed)
    if np.issubdtype(np.dtype(dtype), np.floating):
        return np.asarray(rng.standard_normal(shape), dtype)
    if np.dtype(dtype) == np.bool_:
        return np.asarray(rng.integers(0, 2, shape), bool)
    return np.asarray(rng.integers(low, high, shape), dtype)


def positive(shape, seed=0, low=0.1, high=4.0):
    return np.asarray(np.random.default_rng(seed).uniform(low, high, shape), F32)


def case(id_, *values, marks=()):
    return pytest.param(*values, id=id_, marks=marks)


# -- Conv ------------------------------------------------------------------------------------
CF, CL = L.CHANNELS_FIRST, L.CHANNELS_LAST


def window_case(id_, x_shape, channels, kernel, *, layout=CF, kernel_layout="OIS", bias=True,
                group=1, strides=None, dilations=None, front=None, back=None, out_pad=None):
    """One Conv/DeConv case. ``x_shape`` is channels-first (the test moves channels last for
    CL); ``channels``: output channels (Conv) or output channels per group (DeConv)."""
    ones, zeros = (1,) * len(kernel), (0,) * len(kernel)
    spec = dict(x_shape=x_shape, channels=channels, kernel=kernel, layout=layout,
                kernel_layout=kernel_layout, bias=bias, group=group, strides=strides or ones,
                dilations=dilations or ones, front=front or zeros, back=back or zeros,
                out_pad=out_pad or zeros)
    return pytest.param(spec, id=id_)


CONV_CASES = [
    window_case("2d_basic_bias", (1, 3, 8, 8), 4, (3, 3), front=(1, 1), back=(1, 1)),
    window_case("2d_stride_asym_pad", (2, 4, 9, 7), 6, (3, 2), strides=(2, 1), front=(1, 0),
                back=(2, 1), bias=False),
    window_case("2d_dilation", (1, 2, 10, 9), 3, (3, 3), strides=(1, 2), dilations=(2, 3),
                front=(2, 1), back=(0, 3)),
    window_case("2d_groups2", (1, 4, 7, 7), 6, (3, 3), group=2),
    window_case("2d_depthwise", (1, 6, 8, 8), 6, (3, 3), group=6, strides=(2, 2), front=(1, 1),
                back=(1, 1)),
    window_case("2d_depthwise_multiplier2", (2, 3, 6, 5), 6, (3, 2), group=3, front=(1, 0),
                back=(0, 1), bias=False),
    window_case("2d_1x1", (1, 5, 4, 4), 2, (1, 1)),
    window_case("2d_nchw_IOS", (1, 3, 7, 6), 4, (3, 3), kernel_layout="IOS", strides=(1, 2),
                front=(1, 1), back=(1, 0)),
    window_case("2d_nchw_SIO", (1, 3, 7, 6), 4, (2, 3), kernel_layout="SIO", strides=(2, 1),
                front=(0, 1), back=(1, 1)),
    window_case("2d_nchw_SOI", (1, 3, 6, 6), 5, (3, 3), kernel_layout="SOI", front=(1, 1),
                back=(1, 1), bias=False),
    window_case("2d_nhwc_SIO", (1, 3, 8, 8), 4, (3, 3), layout=CL, kernel_layout="SIO",
                front=(1, 1), back=(1, 1)),
    window_case("2d_nhwc_SIO_strided_asym", (2, 4, 9, 7), 6, (3, 2), layout=CL,
                kernel_layout="SIO", strides=(2, 2), dilations=(1, 2), front=(1, 0), back=(2, 1)),
    window_case("2d_nhwc_SIO_depthwise", (1, 6, 8, 8), 6, (3, 3), layout=CL, kernel_layout="SIO",
                group=6, strides=(2, 2), front=(1, 1), back=(1, 1)),
    window_case("2d_nhwc_SIO_groups2", (1, 4, 6, 6), 6, (3, 3), layout=CL, kernel_layout="SIO",
                group=2, front=(1, 1), back=(1, 1), bias=False),
    window_case("2d_nhwc_OIS", (1, 3, 7, 7), 4, (3, 3), layout=CL, front=(0, 1), back=(1, 0)),
    window_case("1d_basic_bias", (2, 3, 10), 4, (3,), front=(1,), back=(1,)),
    window_case("1d_stride_dilation_asym", (1, 2, 13), 3, (3,), strides=(2,), dilations=(2,),
                back=(3,), bias=False),
    window_case("1d_groups", (1, 4, 9), 4, (2,), group=2, front=(1,)),
    window_case("1d_nwc_SIO", (2, 3, 10), 5, (3,), layout=CL, kernel_layout="SIO", strides=(2,),
                front=(2,), back=(1,)),
    window_case("3d_basic_bias", (1, 2, 5, 6, 5), 3, (3, 3, 3), front=(1, 1, 1),
                back=(1, 1, 1)),
    window_case("3d_stride_dilation_asym", (1, 2, 7, 6, 6), 4, (2, 3, 2), strides=(2, 1, 2),
                dilations=(1, 2, 1), front=(0, 1, 1), back=(1, 0, 2), bias=False),
    window_case("3d_groups", (1, 4, 4, 4, 4), 4, (2, 2, 2), group=2, back=(1, 1, 1)),
    window_case("3d_ndhwc_SIO", (1, 2, 5, 4, 6), 3, (3, 2, 3), layout=CL, kernel_layout="SIO",
                strides=(1, 2, 1), front=(1, 0, 1), back=(1, 1, 0)),
]


def run_window_op(op, spec, x, w, b, expected, canonical_kernel_layout):
    """Runs Conv or DeConv on channels-first ``x`` and a kernel in the canonical layout,
    converting both (and the expected result) to the layouts ``spec`` asks for."""
    layout, kernel_layout = spec["layout"], spec["kernel_layout"]
    if layout == CL:
        x, expected = ref.to_channels_last(x), ref.to_channels_last(expected)
    inputs = {"x": np.ascontiguousarray(x),
              "w": ref.relayout_kernel(w, canonical_kernel_layout, kernel_layout)}
    if spec["bias"]:
        inputs["b"] = b

    def build(x, w, b=None):
        return op(x, layout, spec["group"], w, getattr(L, kernel_layout), spec["strides"],
                  spec["dilations"], spec["front"], spec["back"], bias=b,
                  output_dims=expected.shape)

    check(run_op(build, inputs), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", CONV_CASES)
def test_conv(spec):
    x_shape, group = spec["x_shape"], spec["group"]
    x = data(x_shape, seed=1)
    w = data((spec["channels"], x_shape[1] // group, *spec["kernel"]), seed=2)  # OIS
    b = data((spec["channels"],), seed=3)
    expected = ref.conv(x, w, b if spec["bias"] else None, strides=spec["strides"],
                        dilations=spec["dilations"], pads_front=spec["front"],
                        pads_back=spec["back"], group=group)
    run_window_op(odla.conv, spec, x, w, b, expected, "OIS")


def test_conv_constant_kernel_and_bias():
    x, w, b = data((1, 3, 6, 6), seed=1), data((4, 3, 3, 3), seed=2), data((4,), seed=3)
    expected = ref.conv(x, w, b, strides=(1, 1), dilations=(1, 1), pads_front=(1, 1),
                        pads_back=(1, 1))
    result = run_op(
        lambda x, w, b: odla.conv(x, CF, 1, w, L.OIS, (1, 1), (1, 1), (1, 1), (1, 1), bias=b),
        {"x": x, "w": w, "b": b}, constants=("w", "b"))
    check(result, expected, rtol=1e-4, atol=1e-4)


# -- DeConv ----------------------------------------------------------------------------------
# out_pad: the output padding that the output_dims given to de_conv add to the natural size.
DECONV_CASES = [
    window_case("2d_stride2_bias", (1, 4, 5, 5), 3, (3, 3), kernel_layout="IOS",
                strides=(2, 2), front=(1, 1), back=(1, 1)),
    window_case("2d_output_dims_adds_padding", (1, 4, 5, 5), 3, (3, 3), kernel_layout="IOS",
                strides=(2, 2), front=(1, 1), back=(1, 1), out_pad=(1, 1)),
    window_case("2d_asym_pad_output_padding", (2, 3, 4, 5), 2, (3, 2), kernel_layout="IOS",
                strides=(3, 2), front=(0, 1), back=(2, 0), out_pad=(2, 1), bias=False),
    window_case("2d_groups2", (1, 4, 4, 5), 3, (3, 2), kernel_layout="IOS", group=2,
                strides=(2, 1), front=(1, 0), back=(0, 1)),
    window_case("2d_depthwise", (1, 4, 4, 4), 1, (3, 3), kernel_layout="IOS", group=4,
                strides=(2, 2), front=(1, 1), back=(1, 1), out_pad=(1, 1), bias=False),
    window_case("2d_dilation", (1, 2, 4, 4), 3, (3, 3), kernel_layout="IOS", strides=(1, 2),
                dilations=(2, 1), front=(1, 0), back=(0, 1), out_pad=(0, 1)),
    window_case("2d_nchw_OIS", (1, 3, 4, 4), 2, (3, 3), kernel_layout="OIS", strides=(2, 2),
                front=(1, 1), back=(1, 1)),
    window_case("2d_nhwc_IOS", (1, 3, 4, 5), 2, (3, 3), layout=CL, kernel_layout="IOS",
                strides=(2, 2), front=(1, 1), back=(1, 1), out_pad=(1, 0)),
    window_case("2d_nhwc_SIO", (1, 3, 4, 5), 2, (3, 2), layout=CL, kernel_layout="SIO",
                strides=(2, 1), front=(1, 0), back=(0, 1)),
    window_case("1d_stride3", (1, 3, 6), 2, (3,), kernel_layout="IOS", strides=(3,),
                front=(1,), back=(2,), out_pad=(2,)),
    window_case("3d_groups", (1, 2, 3, 4, 3), 2, (2, 3, 2), kernel_layout="IOS", group=2,
                strides=(2, 2, 1), dilations=(2, 1, 1), front=(0, 1, 1), back=(1, 0, 0),
                out_pad=(1, 1, 0)),
]


@pytest.mark.parametrize("spec", DECONV_CASES)
def test_de_conv(spec):
    x_shape, group = spec["x_shape"], spec["group"]
    x = data(x_shape, seed=1)
    w = data((x_shape[1], spec["channels"], *spec["kernel"]), seed=2)  # IOS
    b = data((spec["channels"] * group,), seed=3)
    expected = ref.deconv(x, w, b if spec["bias"] else None, strides=spec["strides"],
                          dilations=spec["dilations"], pads_front=spec["front"],
                          pads_back=spec["back"], group=group, output_padding=spec["out_pad"])
    run_window_op(odla.de_conv, spec, x, w, b, expected, "IOS")


def test_de_conv_without_output_dims():
    x, w = data((1, 2, 3, 3), seed=1), data((2, 3, 3, 3), seed=2)
    expected = ref.deconv(x, w, strides=(2, 2), dilations=(1, 1), pads_front=(0, 0),
                          pads_back=(0, 0))
    result = run_op(
        lambda x, w: odla.de_conv(x, CF, 1, w, L.IOS, (2, 2), (1, 1), (0, 0), (0, 0)),
        {"x": x, "w": w}, constants=("w",))
    check(result, expected, rtol=1e-4, atol=1e-4)


# -- BatchNormalization ----------------------------------------------------------------------

@pytest.mark.parametrize("x_shape, layout, per_channel, epsilon, constants", [
    case("nchw_scale_offset", (2, 3, 4, 5), CF, True, 1e-5, ()),
    case("nhwc_scale_offset", (2, 4, 5, 3), CL, True, 1e-3, ()),
    case("nchw_scalar_scale_offset", (2, 3, 4, 5), CF, False, 1e-5, ()),
    case("nhwc_scalar_scale_offset", (1, 4, 4, 6), CL, False, 0.1, ()),
    case("ncw_constant_params", (2, 3, 7), CF, True, 1e-5, ("mean", "var", "scale", "offset")),
    case("ncdhw", (1, 2, 3, 4, 5), CF, True, 1e-5, ()),
    case("nc_rank2", (4, 3), CF, True, 1e-5, ()),
])
def test_batch_normalization(x_shape, layout, per_channel, epsilon, constants):
    channels = x_shape[-1] if layout == CL else x_shape[1]
    x = data(x_shape, seed=1)
    mean, var = data((channels,), seed=2), positive((channels,), seed=3)
    scale, offset = data((channels,), seed=4), data((channels,), seed=5)
    scalar_scale, scalar_offset = 0.5, -0.25
    x_cf = ref.to_channels_first(x) if layout == CL else x
    if per_channel:
        expected = ref.batch_normalization(x_cf, mean, var, epsilon, scale, offset)
    else:
        expected = ref.batch_normalization(x_cf, mean, var, epsilon, scalar_scale, scalar_offset)
    if layout == CL:
        expected = ref.to_channels_last(expected)
    inputs = {"x": x, "mean": mean, "var": var}
    if per_channel:
        inputs.update(scale=scale, offset=offset)

    def build(x, mean, var, scale=None, offset=None):
        return odla.batch_normalization(x, layout, mean, var, epsilon, scale, offset,
                                        scalar_scale, scalar_offset)

    check(run_op(build, inputs, constants), expected, rtol=1e-4, atol=1e-5)


# -- pooling ---------------------------------------------------------------------------------
# (x shape channels-first, window, strides, paddings_front, paddings_back, layout)
POOL_CASES = [
    case("2d_2x2_s2", (1, 3, 8, 8), (2, 2), (2, 2), (0, 0), (0, 0), CF),
    case("2d_3x3_s1_overlap_pad", (2, 2, 6, 7), (3, 3), (1, 1), (1, 1), (1, 1), CF),
    case("2d_asym_pad", (1, 3, 7, 6), (3, 2), (2, 1), (1, 0), (2, 1), CF),
    case("2d_nhwc_asym_pad", (2, 3, 7, 6), (3, 3), (2, 2), (0, 1), (1, 2), CL),
    case("1d", (2, 3, 11), (3,), (2,), (1,), (0,), CF),
    case("1d_nwc", (1, 4, 9), (2,), (1,), (0,), (1,), CL),
    case("3d_asym_pad", (1, 2, 5, 6, 4), (2, 3, 2), (2, 1, 1), (1, 0, 1), (0, 1, 0), CF),
]


@pytest.mark.parametrize("x_shape, window, strides, pads_front, pads_back, layout", POOL_CASES)
def test_max_pool(x_shape, window, strides, pads_front, pads_back, layout):
    x = data(x_shape, seed=1)
    expected = ref.max_pool(x, window=window, strides=strides, pads_front=pads_front,
                            pads_back=pads_back)
    if layout == CL:
        x, expected = np.ascontiguousarray(ref.to_channels_last(x)), ref.to_channels_last(expected)
    result = run_op(lambda x: odla.max_pool(x, layout, window, strides, pads_front, pads_back),
                    {"x": x})
    check(result, expected)


@pytest.mark.parametrize("padding_included", [True, False], ids=["pad_included", "pad_excluded"])
@pytest.mark.parametrize("x_shape, window, strides, pads_front, pads_back, layout", POOL_CASES)
def test_average_pool(x_shape, window, strides, pads_front, pads_back, layout, padding_included):
    x = data(x_shape, seed=1)
    expected = ref.average_pool(x, window=window, strides=strides, pads_front=pads_front,
                                pads_back=pads_back, padding_included=padding_included)
    if layout == CL:
        x, expected = np.ascontiguousarray(ref.to_channels_last(x)), ref.to_channels_last(expected)
    result = run_op(lambda x: odla.average_pool(x, layout, window, strides, pads_front, pads_back,
                                                padding_included), {"x": x})
    check(result, expected)


# -- Gemm and BatchMatMul --------------------------------------------------------------------

@pytest.mark.parametrize("m, k, n, a_t, b_t, alpha, beta, c_shape, dtype", [
    case("plain_no_C", 3, 4, 5, False, False, 1.0, 1.0, None, F32),
    case("A_transposed", 3, 4, 5, True, False, 1.0, 1.0, (3, 5), F32),
    case("B_transposed", 3, 4, 5, False, True, 0.5, 2.0, (3, 5), F32),
    case("both_transposed", 6, 3, 2, True, True, -1.5, 0.5, (6, 2), F32),
    case("alpha_no_C", 2, 7, 3, False, False, 2.5, 3.0, None, F32),
    case("C_row_broadcast", 4, 3, 5, False, False, 1.0, 1.0, (5,), F32),
    case("C_1xN_broadcast", 4, 3, 5, False, True, 0.5, -1.0, (1, 5), F32),
    case("C_Mx1_broadcast", 4, 3, 5, True, False, 1.0, 2.0, (4, 1), F32),
    case("C_scalar", 4, 3, 5, False, False, 1.0, 0.5, (), F32),
    case("beta0_ignores_C", 3, 4, 5, False, False, 1.0, 0.0, (3, 5), F32),
    case("long_reduction", 8, 256, 6, False, True, 1.0, 1.0, (6,), F32),
    case("int32", 3, 4, 5, False, False, 1.0, 1.0, (3, 5), I32),
    case("int32_transposed", 3, 4, 5, True, True, 1.0, 1.0, None, I32),
])
def test_gemm(m, k, n, a_t, b_t, alpha, beta, c_shape, dtype):
    a = data((k, m) if a_t else (m, k), dtype, seed=1)
    b = data((n, k) if b_t else (k, n), dtype, seed=2)
    inputs = {"A": a, "B": b}
    if c_shape is not None:
        inputs["C"] = data(c_shape, dtype, seed=3)
    expected = ref.gemm(a, a_t, b, b_t, alpha, beta, inputs.get("C"))
    result = run_op(lambda A, B, C=None: odla.gemm(A, a_t, B, b_t, alpha, beta, C), inputs)
    check(result, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape, a_t, b_shape, b_t, dtype", [
    case("batch3", (2, 3, 4), False, (2, 4, 5), False, F32),
    case("A_transposed", (2, 4, 3), True, (2, 4, 5), False, F32),
    case("B_transposed", (2, 3, 4), False, (2, 5, 4), True, F32),
    case("both_transposed", (3, 4, 2), True, (3, 6, 4), True, F32),
    case("batch_broadcast", (2, 1, 3, 4), False, (3, 4, 5), False, F32),
    case("rank2_times_rank3", (3, 4), False, (2, 4, 5), False, F32),
    case("rank4_batch_broadcast_transposed", (1, 2, 4, 3), True, (3, 1, 5, 4), True, F32),
    case("int32", (2, 3, 4), False, (2, 4, 5), False, I32),
    case("int32_broadcast_transposed", (2, 1, 4, 3), True, (3, 5, 4), True, I32),
])
def test_batch_mat_mul(a_shape, a_t, b_shape, b_t, dtype):
    a, b = data(a_shape, dtype, seed=1), data(b_shape, dtype, seed=2)
    expected = ref.batch_mat_mul(a, a_t, b, b_t)
    result = run_op(lambda A, B: odla.batch_mat_mul(A, a_t, B, b_t), {"A": a, "B": b})
    check(result, expected, rtol=1e-4, atol=1e-4)


# -- element-wise unary ops ------------------------------------------------------------------

UNARY = {
    "relu": (odla.relu, ref.relu),
    "sigmoid": (odla.sigmoid, ref.sigmoid),
    "tanh": (odla.tanh, lambda x: np.tanh(x.astype(np.float64)).astype(x.dtype)),
    "exp": (odla.exp, lambda x: np.exp(x.astype(np.float64)).astype(x.dtype)),
    "log": (odla.log, lambda x: np.log(x.astype(np.float64)).astype(x.dtype)),
    "sqrt": (odla.sqrt, lambda x: np.sqrt(x.astype(np.float64)).astype(x.dtype)),
    "abs": (odla.abs, np.abs),
    "neg": (odla.neg, np.negative),
}
POSITIVE_ONLY = {"log", "sqrt"}


@pytest.mark.parametrize("shape", [
    case("2x3x4", (2, 3, 4)), case("17", (17,)), case("scalar", ())])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float(name, shape):
    op, reference = UNARY[name]
    x = data(shape, seed=1)
    if name in POSITIVE_ONLY:
        x = positive(shape, seed=1, low=0.01, high=10.0)
    check(run_op(op, {"x": x}), reference(x))


@pytest.mark.parametrize("dtype", [I32, I64], ids=["int32", "int64"])
@pytest.mark.parametrize("name", ["abs", "neg", "relu"])
def test_unary_int(name, dtype):
    op, reference = UNARY[name]
    x = data((3, 5), dtype, seed=1)
    check(run_op(op, {"x": x}), reference(x))


@pytest.mark.parametrize("alpha", [0.1, 0.01, 1.5])
def test_leaky_relu(alpha):
    x = data((2, 3, 5), seed=1)
    check(run_op(lambda x: odla.leaky_relu(x, alpha), {"x": x}), ref.leaky_relu(x, alpha))


@pytest.mark.parametrize("shape", [(2, 3, 8), (64,)], ids=["2x3x8", "64"])
@pytest.mark.parametrize("use_approx", [False, True], ids=["erf", "tanh_approx"])
def test_gelu(use_approx, shape):
    x = data(shape, seed=1) * 2
    check(run_op(lambda x: odla.gelu(x, use_approx), {"x": x}), ref.gelu(x, use_approx))


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -2])
@pytest.mark.parametrize("op_name", ["softmax", "log_softmax"])
def test_softmax(op_name, axis):
    x = data((2, 3, 5), seed=1) * 3
    op, reference = getattr(odla, op_name), getattr(ref, op_name)
    check(run_op(lambda x: op(x, axis), {"x": x}), reference(x, axis))


# -- element-wise binary ops -----------------------------------------------------------------

BINARY = {
    "add": (odla.add, np.add),
    "sub": (odla.sub, np.subtract),
    "mul": (odla.mul, np.multiply),
    "div": (odla.div, ref.div),
    "max": (odla.max, np.maximum),
    "min": (odla.min, np.minimum),
}
BINARY_SHAPES = [
    case("same_shape", (2, 3, 4), (2, 3, 4)),
    case("broadcast", (2, 1, 4), (3, 1)),
    case("scalar_rhs", (3, 4), ()),
]
# float32 on every shape; the integer types on one shape each
BINARY_CASES = [
    pytest.param(dtype, *shapes.values, id=f"{np.dtype(dtype).name}-{shapes.id}",
                 marks=shapes.marks)
    for dtype, shapes in [(F32, s) for s in BINARY_SHAPES]
    + [(I32, BINARY_SHAPES[1]), (I64, BINARY_SHAPES[0])]
]


@pytest.mark.parametrize("dtype, lhs_shape, rhs_shape", BINARY_CASES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype, lhs_shape, rhs_shape):
    op, reference = BINARY[name]
    lhs, rhs = data(lhs_shape, dtype, seed=1), data(rhs_shape, dtype, seed=2)
    if name == "div":  # divisors of both signs away from zero
        rhs = np.where(np.abs(rhs) < 0.5, np.asarray(3, dtype), rhs)
    check(run_op(op, {"lhs": lhs, "rhs": rhs}), reference(lhs, rhs))


@pytest.mark.parametrize("lhs_shape, rhs_shape", BINARY_SHAPES)
def test_pow(lhs_shape, rhs_shape):
    lhs = positive(lhs_shape, seed=1, low=0.1, high=3.0)
    rhs = data(rhs_shape, seed=2)
    expected = np.power(lhs.astype(np.float64), rhs).astype(F32)
    check(run_op(odla.pow, {"lhs": lhs, "rhs": rhs}), expected, rtol=1e-4)


@pytest.mark.parametrize("dtype, lo, hi", [
    case("float32", F32, -0.5, 0.7),
    case("float32_wide", F32, -10.0, 10.0),
    case("int32", I32, -3, 4),
    case("int64", I64, 0, 5),
])
def test_clamp(dtype, lo, hi):
    x = data((4, 5), dtype, seed=1)
    check(run_op(lambda x: odla.clamp(x, lo, hi), {"x": x}), ref.clamp(x, lo, hi))


# -- process ops -----------------------------------------------------------------------------

@pytest.mark.parametrize("shape, output_dims, dtype", [
    case("flatten_minus1", (2, 3, 4), (2, -1), F32),
    case("minus1_first", (2, 3, 4), (-1, 4, 1), I32),
    case("split_dims", (6, 4), (2, 3, 2, 2), I64),
    case("to_vector", (2, 3), (-1,), F32),
])
def test_reshape(shape, output_dims, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x: odla.reshape(x, output_dims), {"x": x}), ref.reshape(x, output_dims))


@pytest.mark.parametrize("shape, perm, dtype", [
    case("2d", (3, 5), (1, 0), F32),
    case("nchw_to_nhwc", (2, 3, 4, 5), (0, 2, 3, 1), F32),
    case("3d_int32", (2, 3, 4), (2, 0, 1), I32),
    case("identity_int64", (2, 3), (0, 1), I64),
])
def test_transpose(shape, perm, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x: odla.transpose(x, perm), {"x": x}), ref.transpose(x, perm))


@pytest.mark.parametrize("shapes, axis, dtype", [
    case("axis0", [(2, 3), (4, 3)], 0, F32),
    case("axis1_three_inputs", [(2, 1, 4), (2, 3, 4), (2, 2, 4)], 1, F32),
    case("axis_minus1_int32", [(2, 3), (2, 1)], -1, I32),
    case("single_input_int64", [(3, 2)], 0, I64),
])
def test_concat(shapes, axis, dtype):
    inputs = {f"x{i}": data(s, dtype, seed=i) for i, s in enumerate(shapes)}
    expected = ref.concat(list(inputs.values()), axis)
    check(run_op(lambda *xs: odla.concat(xs, axis), inputs), expected)


@pytest.mark.parametrize("shape, start, end, stride, dtype", [
    case("basic", (5, 6), (1, 0), (4, 6), (1, 1), F32),
    case("strides2", (7, 8), (0, 1), (7, 8), (2, 3), F32),
    case("negative_start_end", (5, 6, 4), (-4, 0, -3), (-1, 6, 4), (1, 2, 1), F32),
    case("end_beyond_size_clamped", (5, 6), (2, 3), (100, 100), (1, 1), I32),
    case("negative_stride", (5, 6), (4, 5), (0, 1), (-1, -2), F32),
    case("negative_stride_to_front", (5, 6), (-1, 0), (-100, 6), (-2, 1), I64),
    case("3d_mixed_int32", (4, 5, 6), (1, -5, 5), (3, 5, -7), (1, 2, -3), I32),
])
def test_slice(shape, start, end, stride, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x: odla.slice(x, start, end, stride), {"x": x}),
          ref.slice_(x, start, end, stride))


@pytest.mark.parametrize("shape, indices, axis, dtype", [
    case("axis0_int32_idx", (5, 3), np.array([4, 0, 2, 2], I32), 0, F32),
    case("axis1_int64_idx", (2, 5, 3), np.array([1, 4], I64), 1, F32),
    case("axis0_multidim_idx", (6, 4), np.array([[0, 5, 1], [3, 3, 2]], I64), 0, F32),
    case("axis1_multidim_idx_int32_data", (3, 4, 2), np.array([[3], [0]], I32), 1, I32),
    case("last_axis_int64_data", (2, 3, 4), np.array([3, 1, 0], I32), 2, I64),
    case("scalar_index", (4, 3), np.array(2, I64), 0, F32),
    case("negative_indices_count_from_end", (5, 3), np.array([-1, 0, -5], I64), 0, F32),
])
def test_gather(shape, indices, axis, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x, i: odla.gather(x, i, axis), {"x": x, "indices": indices}),
          ref.gather(x, indices, axis))


@pytest.mark.parametrize("shape, front, back, dtype", [
    case("2d", (3, 4), (1, 2), (2, 0), F32),
    case("4d_spatial_only", (1, 2, 3, 3), (0, 0, 1, 2), (0, 0, 2, 1), F32),
    case("3d_int32", (2, 3, 2), (1, 0, 3), (0, 2, 1), I32),
    case("no_padding_int64", (2, 2), (0, 0), (0, 0), I64),
])
def test_pad(shape, front, back, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x: odla.pad(x, front, back), {"x": x}), ref.pad(x, front, back))


@pytest.mark.parametrize("src, dst", [
    case("float32_to_int32", F32, E.INT32),
    case("float32_to_int64", F32, E.INT64),
    case("int32_to_float32", I32, E.FLOAT32),
    case("int64_to_int32", I64, E.INT32),
    case("int32_to_int64", I32, E.INT64),
    case("float32_to_bool", F32, E.BOOL),
    case("int32_to_bool", I32, E.BOOL),
    case("bool_to_float32", np.bool_, E.FLOAT32),
    case("bool_to_int32", np.bool_, E.INT32),
    case("float32_to_float16", F32, E.FLOAT16),
])
def test_cast(src, dst):
    x = data((3, 7), src, seed=1, low=-3, high=4)
    if src is F32:
        x = (x * 3).astype(F32)  # fractional values of both signs: casts truncate toward zero
        x[0, :3] = [0.0, -0.0, 0.5]  # zero (and near zero) for bool
    dst_dtype = {E.INT32: I32, E.INT64: I64, E.FLOAT32: F32, E.BOOL: np.bool_,
                 E.FLOAT16: np.float16}[dst]
    check(run_op(lambda x: odla.cast(x, dst), {"x": x}), ref.cast(x, dst_dtype), rtol=1e-3)


REDUCE_AXES = [
    case("axis1_keep", (1,), True),
    case("axis1_drop", (1,), False),
    case("axes0_2_keep", (0, 2), True),
    case("axes0_2_drop", (0, 2), False),
    case("all_axes_listed_drop", (0, 1, 2), False),
    case("no_axes_means_all_keep", (), True),
]


@pytest.mark.parametrize("axes, keep_dims", REDUCE_AXES)
@pytest.mark.parametrize("op_name", ["reduce_sum", "reduce_mean", "reduce_max"])
def test_reduce_float(op_name, axes, keep_dims):
    x = data((3, 4, 5), seed=1)
    op, reference = getattr(odla, op_name), getattr(ref, op_name)
    check(run_op(lambda x: op(x, len(axes), axes, keep_dims), {"x": x}),
          reference(x, axes, keep_dims))


@pytest.mark.parametrize("op_name", ["reduce_sum", "reduce_mean"])
def test_reduce_long_float(op_name):
    x = data((64, 300), seed=1)
    op, reference = getattr(odla, op_name), getattr(ref, op_name)
    check(run_op(lambda x: op(x, 1, (1,), False), {"x": x}), reference(x, (1,), False),
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("axes, keep_dims", [case("axis2_drop", (2,), False),
                                             case("axes0_1_keep", (0, 1), True)])
@pytest.mark.parametrize("dtype", [I32, I64], ids=["int32", "int64"])
@pytest.mark.parametrize("op_name", ["reduce_sum", "reduce_max"])
def test_reduce_int(op_name, dtype, axes, keep_dims):
    x = data((3, 4, 5), dtype, seed=1)
    op, reference = getattr(odla, op_name), getattr(ref, op_name)
    check(run_op(lambda x: op(x, len(axes), axes, keep_dims), {"x": x}),
          reference(x, axes, keep_dims))


@pytest.mark.parametrize("shape, axes, dtype", [
    case("given_axes", (1, 3, 1, 4, 1), (0, 2), F32),
    case("all_unit_dims", (1, 3, 1, 4, 1), (), F32),
    case("negative_axis", (2, 3, 1), (-1,), I32),
    case("to_scalar_int64", (1, 1), (), I64),
])
def test_squeeze(shape, axes, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x: odla.squeeze(x, len(axes), axes), {"x": x}), ref.squeeze(x, axes))


@pytest.mark.parametrize("shape, output_dims, dtype", [
    case("column_to_3d", (3, 1), (2, 3, 4), F32),
    case("vector_to_3d", (4,), (2, 3, 4), F32),
    case("unit_to_vector_int32", (1,), (5,), I32),
    case("same_rank_int64", (1, 3, 1), (2, 3, 4), I64),
    case("scalar_to_2d", (), (2, 3), F32),
])
def test_expand_dims(shape, output_dims, dtype):
    x = data(shape, dtype, seed=1)
    check(run_op(lambda x: odla.expand_dims(x, output_dims), {"x": x}),
          ref.expand_dims(x, output_dims))


# -- constant operands -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [
    case("float32", F32), case("int32", I32),
    case("int64", I64), case("float64", np.float64),
])
def test_add_constant_operand(dtype):
    x, c = data((2, 3), dtype, seed=1), data((2, 3), dtype, seed=2)
    check(run_op(odla.add, {"x": x, "c": c}, constants=("c",)), x + c)


@pytest.mark.parametrize("indices", [
    case("vector_int64", np.array([2, 0, 2], I64)),
    case("vector_int32", np.array([2, 0, 2], I32)),
    case("scalar_int32", np.array(1, I32)),
])
def test_gather_constant_indices(indices):
    x = data((3, 4), seed=1)
    check(run_op(lambda x, i: odla.gather(x, i, 0), {"x": x, "indices": indices},
                 constants=("indices",)), ref.gather(x, indices, 0))
