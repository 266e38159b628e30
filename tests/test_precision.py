"""FP16_MODE and BF16_MODE: on a CPU with bfloat16/float16 instructions, convolutions and
matrix products take 16-bit operands; on one without (which would emulate them), they compute
in float32 with their weights rounded to 16 bits, and one log line says so. The outputs stay
float32 and close to the float32 build."""

import dataclasses
import logging

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
import tvm
from tvm import relax

import odla_tvm as odla
import targets
from odla_tvm import Bf16Mode, DeviceName, ElementType, ItemType, MemoryLayout, Status, ValueType
from odla_tvm.device import Device
from odla_tvm.frontends import onnx_backend
from relay_bridge.precision import HEAVY_OPS
from targets.compiler import fused_kernels

from examples.quickstart import build_small_cnn

IMAGES = np.random.default_rng(4).standard_normal((1, 3, 32, 32)).astype(np.float32)
# CPUs whose code is only built here, never run: Sapphire Rapids computes bfloat16
# (AVX512-BF16, AMX-BF16) and float16 (AVX512-FP16); x86-64-v3 (AVX2) neither.
SAPPHIRE_RAPIDS = dataclasses.replace(
    targets.get_target("x86-64-avx2"), name="sapphirerapids",
    cpu_flags=("avx512_bf16", "amx_bf16", "avx512_fp16"),
    target={"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "sapphirerapids",
            "num-cores": 4})
AVX2 = targets.get_target("x86-64-avx2")
MODES = {"fp16": (ItemType.FP16_MODE, True, "float16"),
         "bf16-accuracy": (ItemType.BF16_MODE, Bf16Mode.ACCURACY_MODE, "bfloat16"),
         "bf16-performance": (ItemType.BF16_MODE, Bf16Mode.PERFORMACE_MODE, "bfloat16"),
         "bf16-auto": (ItemType.BF16_MODE, Bf16Mode.AUTO_MODE, "bfloat16")}


@pytest.fixture(scope="module")
def float32_result():
    return odla.Session(build_small_cnn(1)).run({"image": IMAGES})[0]


@pytest.fixture
def emulating(monkeypatch):
    """Builds for this machine take the 16-bit path, as a CPU with the instructions would
    (its kernels then emulate them here)."""
    monkeypatch.setattr(targets, "lacking_instructions", lambda spec, kind: ())


@pytest.mark.parametrize("item, value, dtype, tolerance", [
    (ItemType.FP16_MODE, True, "float16", 2e-3),
    (ItemType.BF16_MODE, Bf16Mode.ACCURACY_MODE, "bfloat16", 1e-2),
    (ItemType.BF16_MODE, Bf16Mode.PERFORMACE_MODE, "bfloat16", 2e-2),
    (ItemType.BF16_MODE, Bf16Mode.AUTO_MODE, "bfloat16", 1e-2),
], ids=["fp16", "bf16-accuracy", "bf16-performance", "bf16-auto"])
def test_reduced_precision_builds_run_close_to_float32(float32_result, emulating, item, value,
                                                       dtype, tolerance):
    comp = build_small_cnn(1)
    odla.set_computation_item(comp, item, value)
    assert f'dtype="{dtype}"' in str(comp.build_module())  # the conversion really happened
    (result,) = odla.Session(comp).run({"image": IMAGES})
    assert result.dtype == np.float32 and result.shape == float32_result.shape
    np.testing.assert_allclose(result, float32_result, atol=tolerance)
    assert not np.array_equal(result, float32_result)


def _heavy_operand_dtypes(mod) -> set[str]:
    """The dtypes of the operands of ``mod``'s convolutions and matrix products."""
    calls = [v for v in relax.analysis.get_var2val(mod["main"]).values()
             if isinstance(v, relax.Call) and getattr(v.op, "name", "") in HEAVY_OPS]
    assert calls
    return {str(operand.ty.dtype) for call in calls for operand in call.args[:2]}


@pytest.mark.parametrize("mode", MODES)
def test_a_cpu_with_the_instructions_takes_16_bit_operands_one_without_float32(mode):
    item, value, dtype = MODES[mode]
    comp = build_small_cnn(1)
    odla.set_computation_item(comp, item, value)
    assert _heavy_operand_dtypes(comp.build_module(spec=SAPPHIRE_RAPIDS)) == {dtype}
    fallback = comp.build_module(spec=AVX2)
    assert _heavy_operand_dtypes(fallback) == {"float32"}
    assert "float16" not in fallback.script()  # bfloat16 neither


@pytest.mark.parametrize("mode", ["fp16", "bf16-accuracy"])
def test_only_the_kernels_of_a_cpu_with_the_instructions_read_16_bit_buffers(mode):
    """The fallback's kernels are float32's, one for one (only the weights' values differ)."""
    item, value, dtype = MODES[mode]
    comp = build_small_cnn(1)
    odla.set_computation_item(comp, item, value)
    native = fused_kernels(comp.build_module(spec=SAPPHIRE_RAPIDS), SAPPHIRE_RAPIDS)
    assert f'"{dtype}"' in native.script(show_meta=False)
    fallback = fused_kernels(comp.build_module(spec=AVX2), AVX2)
    assert "float16" not in fallback.script(show_meta=False)
    plain = fused_kernels(build_small_cnn(1).build_module(spec=AVX2), AVX2)
    kernels, plain_kernels = ({gv.name_hint: f for gv, f in m.functions.items()
                               if isinstance(f, tvm.tirx.PrimFunc)} for m in (fallback, plain))
    assert kernels and sorted(kernels) == sorted(plain_kernels)
    for name, kernel in kernels.items():
        tvm.ir.assert_structural_equal(kernel, plain_kernels[name])


def test_the_fallback_says_so_in_one_log_line(caplog):
    comp = build_small_cnn(1)
    odla.set_computation_item(comp, ItemType.BF16_MODE, Bf16Mode.PERFORMACE_MODE)
    with caplog.at_level(logging.INFO, logger="odla_tvm"):
        comp.build_module(spec=AVX2)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == ("BF16_MODE: the CPU of target x86-64-avx2 has no avx512_bf16 or amx_bf16; "
                    "convolutions and matrix products compute in float32 instead, only their "
                    "weights rounded to bfloat16")
    caplog.clear()
    odla.set_computation_item(comp, ItemType.BF16_MODE, Bf16Mode.DISABLE)
    odla.set_computation_item(comp, ItemType.FP16_MODE, True)
    with caplog.at_level(logging.INFO, logger="odla_tvm"):
        comp.build_module(spec=SAPPHIRE_RAPIDS)
    assert caplog.records == []
    assert targets.lacking_instructions(AVX2, "fp16") == ("avx512_fp16", "amx_fp16")
    assert targets.lacking_instructions(targets.get_target("aarch64-linux"), "bf16") == ("bf16",)
    assert targets.lacking_instructions(targets.get_target("cuda"), "bf16") == ()


def _rounded(data: np.ndarray, dtype: str) -> np.ndarray:
    """``data`` rounded to the nearest ``dtype`` value, as float64."""
    return data.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype).astype(np.float64)


def _constant(data: np.ndarray) -> odla.Value:
    return odla.create_constant(ValueType(ElementType.FLOAT32, data.shape), data)


def _gemm_model(rng):
    """x @ W^T + b (W transposed by the gemm: the weight reaches the product permuted)."""
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((4, 64), (32, 64), (32,)))
    comp = odla.create_computation()
    arg = odla.create_argument(ValueType(ElementType.FLOAT32, x.shape), "x")
    odla.set_value_as_output(odla.gemm(arg, False, _constant(w), True, 1.0, 1.0, _constant(b)))
    return comp, x, lambda dtype: x.astype(np.float64) @ _rounded(w, dtype).T + b


def _conv_model(rng):
    """A 3x3 convolution, padded by 1, with a bias."""
    x, w, b = (rng.standard_normal(s).astype(np.float32)
               for s in ((1, 3, 8, 8), (4, 3, 3, 3), (4,)))
    comp = odla.create_computation()
    arg = odla.create_argument(ValueType(ElementType.FLOAT32, x.shape), "x")
    odla.set_value_as_output(odla.conv(arg, MemoryLayout.CHANNELS_FIRST, 1, _constant(w),
                                       MemoryLayout.OIS, (1, 1), (1, 1), (1, 1), (1, 1),
                                       _constant(b)))

    def reference(dtype):
        padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        return np.einsum("ncijkl,ockl->noij", windows, _rounded(w, dtype)) + b[:, None, None]

    return comp, x, reference


@pytest.mark.skipif(not AVX2.runs_here(), reason="x86-64-avx2's code runs on AVX2 CPUs only")
@pytest.mark.parametrize("build", [_gemm_model, _conv_model], ids=["gemm", "conv"])
@pytest.mark.parametrize("mode", ["fp16", "bf16-accuracy", "bf16-performance"])
def test_the_fallback_computes_in_float32_with_rounded_weights(build, mode):
    item, value, dtype = MODES[mode]
    comp, x, reference = build(np.random.default_rng(1))
    odla.set_computation_item(comp, item, value)
    (result,) = odla.Session(comp, Device(DeviceName.DEFAULT, 0, AVX2)).run({"x": x})
    np.testing.assert_allclose(result, reference(dtype), rtol=1e-5, atol=1e-5)
    assert not np.allclose(result, reference("float32"), rtol=1e-5, atol=1e-5)


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


def test_the_onnx_backend_compiles_in_the_precision_asked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("ODLA_TVM_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 8)).astype(np.float32)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "product",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (plain,) = onnx_backend.prepare(model).run([x])
    (half,) = onnx_backend.prepare(model, "CPU", precision="fp16").run([x])
    (brain,) = onnx_backend.run_model(model, [x], precision="bf16")
    np.testing.assert_allclose(plain, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    for result, tolerance in ((half, 1e-2), (brain, 1e-1)):
        np.testing.assert_allclose(result, plain, atol=tolerance)
        assert not np.array_equal(result, plain)
    with pytest.raises(odla.OdlaError) as err:
        onnx_backend.prepare(model, precision="int8")
    assert err.value.status == Status.INVALID_PARAM
    assert "precision is 'int8'; expected one of fp32, bf16, fp16" in str(err.value)
