"""FP16_MODE and BF16_MODE: convolutions and matrix products take 16-bit operands; the
outputs stay float32 and close to the float32 build."""

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import Bf16Mode, ItemType, Status

from examples.quickstart import build_small_cnn

IMAGES = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def float32_result():
    return odla.Session(build_small_cnn(1)).run({"image": IMAGES})[0]


@pytest.mark.parametrize("item, value, dtype, tolerance", [
    (ItemType.FP16_MODE, True, "float16", 2e-3),
    (ItemType.BF16_MODE, Bf16Mode.ACCURACY_MODE, "bfloat16", 1e-2),
    (ItemType.BF16_MODE, Bf16Mode.PERFORMACE_MODE, "bfloat16", 2e-2),
    (ItemType.BF16_MODE, Bf16Mode.AUTO_MODE, "bfloat16", 1e-2),
], ids=["fp16", "bf16-accuracy", "bf16-performance", "bf16-auto"])
def test_reduced_precision_builds_run_close_to_float32(float32_result, item, value, dtype, tolerance):
    comp = build_small_cnn(1)
    odla.set_computation_item(comp, item, value)
    assert f'dtype="{dtype}"' in str(comp.build_module())  # the conversion really happened
    (result,) = odla.Session(comp).run({"image": IMAGES})
    assert result.dtype == np.float32 and result.shape == float32_result.shape
    np.testing.assert_allclose(result, float32_result, atol=tolerance)
    assert not np.array_equal(result, float32_result)


def test_precision_items_are_checked():
    comp = build_small_cnn(1)
    odla.set_computation_item(comp, ItemType.BF16_MODE, Bf16Mode.DISABLE)
    assert "float16" not in str(comp.build_module())
    odla.set_computation_item(comp, ItemType.FP16_MODE, True)
    odla.set_computation_item(comp, ItemType.BF16_MODE, Bf16Mode.ACCURACY_MODE)
    with pytest.raises(odla.OdlaError) as err:
        odla.compile_computation(comp, None)
    assert err.value.status == Status.INVALID_PARAM and "both FP16_MODE and BF16_MODE" in str(err.value)
    odla.set_computation_item(comp, ItemType.FP16_MODE, False)
    odla.set_computation_item(comp, ItemType.BF16_MODE, 9)
    with pytest.raises(odla.OdlaError) as err:
        odla.compile_computation(comp, None)
    assert "BF16_MODE is 9" in str(err.value)
