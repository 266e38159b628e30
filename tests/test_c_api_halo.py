"""What HALO's own ODLA op tests and generated code do beyond tests/c_api/generated_cnn.cc,
through the C library against NumPy: tests/c_api/halo_op_test_habits.cc (uninitialized ArgMin
output type, DeConv layouts and output_dims, kernels given the input's layout, odla_Gemm on
stacks of matrices, Resize's axes_mask -1, constants from data that is gone before the run, the device
info items a CPU has)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest


try:
    from . import c_programs as c
except ImportError:
    import c_programs as c

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the C tests build with g++")


def iota(count, step):
    return (step * np.arange(count) - 1.0).astype(np.float32)


def correlate(image, kernel, padding):
    """Cross-correlation of a (C, H, W) image with (O, C, kh, kw) kernels, stride 1."""
    image = np.pad(image, ((0, 0), (padding, padding), (padding, padding)))
    out_c, _, kh, kw = kernel.shape
    height, width = image.shape[1] - kh + 1, image.shape[2] - kw + 1
    out = np.zeros((out_c, height, width), np.float64)
    for i in range(height):
        for j in range(width):
            out[:, i, j] = np.tensordot(kernel, image[:, i:i + kh, j:j + kw], axes=3)
    return out


def transposed_conv(image, kernel):
    """ConvTranspose of a (C, H, W) image with (C, O, kh, kw) kernels, stride 1, no padding."""
    in_c, out_c, kh, kw = kernel.shape
    out = np.zeros((out_c, image.shape[1] + kh - 1, image.shape[2] + kw - 1), np.float64)
    for i in range(image.shape[1]):
        for j in range(image.shape[2]):
            out[:, i:i + kh, j:j + kw] += np.tensordot(image[:, i, j], kernel, axes=1)
    return out


def test_habits_of_halos_op_tests_match_numpy(tmp_path):
    lines, printed = c.printed_values(tmp_path, "halo_op_test_habits.cc")
    assert not [name for name in lines if name.endswith("_status")], printed
    assert lines["argmin"] == ["1", "1"]  # written as int32
    a, b = iota(24, 0.1).reshape(1, 2, 3, 4), iota(40, 0.05).reshape(1, 2, 5, 4)
    expected = {
        "conv": correlate(iota(25, 0.25).reshape(1, 5, 5), iota(18, 0.125).reshape(2, 1, 3, 3),
                          padding=1),
        "deconv": transposed_conv(iota(25, 0.25)[:9].reshape(1, 3, 3),
                                  iota(18, 0.125).reshape(1, 2, 3, 3)),
        # layouts out of odla_memory_layout: CHANNELS_FIRST input, IOS kernel
        "deconv_garbage_layouts": transposed_conv(iota(25, 0.25)[:9].reshape(1, 3, 3),
                                                  iota(18, 0.125).reshape(1, 2, 3, 3)),
        "gemm": a @ np.swapaxes(b, -1, -2),
        "resize": iota(12, 0.5).reshape(1, 2, 2, 3).repeat(2, axis=2).repeat(2, axis=3),
        "affine": [6 + 2 * 5.0],
    }
    for name, values in expected.items():
        got = np.array([float(v) for v in lines[name]])
        np.testing.assert_allclose(got, np.ravel(values), rtol=1e-5, atol=1e-5, err_msg=name)
    # UUID, processor use, driver and SDK versions known; power UNSUPPORTED_DATATYPE (5)
    assert lines["device_info"] == ["4", "5"]
