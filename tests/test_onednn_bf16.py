"""BF16_MODE through the oneDNN plugin: on a CPU whose oneDNN reaches avx512_core_bf16 or AMX
its convolutions and matmuls read bf16 source and weights (f32 bias) and write f32 (accuracy)
or bf16 (performance), TVM's share of the graph staying float32; below that the plugin
declines in one log line and the float32 fallback (weights rounded) runs. The decision per CPU
class, the generated source for a bf16 graph (compiled, not run: this CPU may not run it),
and the outputs against NumPy references of the same rounding where the CPU runs them."""

import logging
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import reference as ref

import odla_tvm as odla
import targets
from odla_tvm import Bf16Mode, DeviceName, ElementType, ItemType, MemoryLayout, ValueType
from targets.plugins.onednn import bf16_policy, isa, source_writer

LOWER = ("avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni")
NATIVE = ("avx512_core_bf16", "avx512_core_amx")
BRGEMM = {"conv2d": "brgconv:avx512_core_bf16", "matmul": "brg:avx512_core_amx"}
MODES = {"bf16-accuracy": Bf16Mode.ACCURACY_MODE, "bf16-performance": Bf16Mode.PERFORMACE_MODE}
HERE = isa.onednn_isa()
RUNS_BF16 = isa.reaches(HERE, bf16_policy.BF16_FLOOR)
NEEDS_BF16 = pytest.mark.skipif(not RUNS_BF16, reason=f"oneDNN reaches {HERE} on this CPU, no "
                                                      "native bf16 (avx512_bf16 or AMX)")
RNG = np.random.default_rng(7)


def _same(data: np.ndarray) -> np.ndarray:
    return np.asarray(data, np.float64)


def _bf16(data: np.ndarray) -> np.ndarray:
    """``data`` rounded to bfloat16 (to nearest, ties to even), as float64."""
    return data.astype(ml_dtypes.bfloat16).astype(np.float64)


@pytest.fixture
def cpu_class(monkeypatch):
    """Makes the plugin decide as on a CPU whose oneDNN reaches ``isa`` and picks ``impls``."""

    def make(isa_class: str, impls=BRGEMM):
        monkeypatch.setattr(bf16_policy, "onednn_isa", lambda: isa_class)
        monkeypatch.setattr(bf16_policy, "probe_impls", lambda _result_type: dict(impls))
        bf16_policy._reason.cache_clear()

    yield make
    bf16_policy._reason.cache_clear()


@pytest.mark.parametrize("isa_class", LOWER)
def test_below_avx512_core_bf16_the_plugin_declines(cpu_class, isa_class):
    cpu_class(isa_class)
    for precision in MODES:
        assert not bf16_policy.takes(precision)
        assert bf16_policy.product_types(precision) == ("dnnl_f32", "dnnl_f32")
    assert "below avx512_core_bf16" in bf16_policy.decline_reason(isa_class, BRGEMM)


@pytest.mark.parametrize("isa_class", NATIVE)
def test_bf16_classes_take_bf16_operands_with_the_mode_s_destination(cpu_class, isa_class):
    cpu_class(isa_class)
    assert bf16_policy.product_types("bf16-accuracy") == ("dnnl_bf16", "dnnl_f32")
    assert bf16_policy.product_types("bf16-performance") == ("dnnl_bf16", "dnnl_bf16")
    assert bf16_policy.product_types("fp16") == ("dnnl_f32", "dnnl_f32")
    assert bf16_policy.product_types(None) == ("dnnl_f32", "dnnl_f32")


@pytest.mark.parametrize("impls, said", [
    ({"conv2d": "ref:any", "matmul": "brg:avx512_core_bf16"}, "as ref:any"),
    ({"conv2d": "brgconv:avx512_core_bf16", "matmul": "gemm:jit:bf16"}, "as gemm:jit:bf16"),
    ({"conv2d": "brgconv:avx512_core_bf16", "matmul": None}, "no bf16 matmul"),
])
def test_a_reference_or_emulated_pick_is_declined(cpu_class, impls, said):
    cpu_class("avx512_core_amx", impls)
    assert not bf16_policy.takes("bf16-accuracy")
    assert said in bf16_policy.decline_reason("avx512_core_amx", impls)


def _two_convs_and_gemm(rng):
    """conv-relu twice then a gemm (on the flattened map): two convolutions in a row keep
    their intermediate in the region, the gemm is a matmul with constant weights."""
    w1, b1, w2, b2 = (rng.standard_normal(s).astype(np.float32) * 0.3
                      for s in ((8, 3, 3, 3), (8,), (8, 8, 3, 3), (8,)))
    w3, b3 = (rng.standard_normal(s).astype(np.float32) * 0.05 for s in ((16, 8 * 8 * 8), (16,)))
    comp = odla.create_computation()
    x = odla.create_argument(ValueType(ElementType.FLOAT32, (1, 3, 8, 8)), "x")
    value = x
    for w, b in ((w1, b1), (w2, b2)):
        value = odla.relu(odla.conv(value, MemoryLayout.CHANNELS_FIRST, 1, _constant(w),
                                    MemoryLayout.OIS, (1, 1), (1, 1), (1, 1), (1, 1),
                                    _constant(b)))
    flat = odla.reshape(value, (1, 8 * 8 * 8))
    odla.set_value_as_output(odla.gemm(flat, False, _constant(w3), True, 1.0, 1.0,
                                       _constant(b3)))

    data = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)

    def reference(weights=_same, inputs=_same, outputs=_same):
        """Each rounds (or not) the products' weights, other operands and results."""
        value = data.astype(np.float64)
        for w, b in ((w1, b1), (w2, b2)):
            value = ref.relu(outputs(ref.conv(inputs(value), weights(w), b, strides=(1, 1),
                                              dilations=(1, 1), pads_front=(1, 1),
                                              pads_back=(1, 1))))
        return outputs(inputs(value.reshape(1, -1)) @ weights(w3).T + b3)

    return comp, data, reference


def _constant(data: np.ndarray) -> odla.Value:
    return odla.create_constant(ValueType(ElementType.FLOAT32, data.shape), data)


def _dnnl():
    return odla.allocate_device(device_name=DeviceName.INTEL_DNNL)


@pytest.fixture
def compiled_sources(monkeypatch):
    """The C++ sources the plugin compiles from now on (its tables, runtime.cc), in order."""
    sources = []
    compile_library = source_writer.static_library

    def recording(source, *args, **kwargs):
        sources.append(source)
        return compile_library(source, *args, **kwargs)

    monkeypatch.setattr(source_writer, "static_library", recording)
    return sources


def _tables(sources) -> str:
    (tables,) = [s for s in sources if s.startswith("#include \"region.h\"")]
    return tables


@pytest.mark.parametrize("mode", MODES)
def test_a_bf16_graph_s_region_source_compiles(cpu_class, compiled_sources, mode):
    """As on an AMX CPU: the regions' table names bf16 products, TVM's share of the graph
    holds no bfloat16, and the tables and runtime.cc compile (nothing is run: this CPU may
    have no bf16 kernel)."""
    cpu_class("avx512_core_amx")
    comp, _, _ = _two_convs_and_gemm(np.random.default_rng(0))
    odla.set_computation_item(comp, ItemType.BF16_MODE, MODES[mode])
    device = _dnnl()
    mod = comp.build_module(spec=device.target)
    assert "bfloat16" not in mod.script(show_meta=False)
    assert str(mod.attrs[targets.PRECISION_ATTR]) == mode
    exe = odla.compile_computation(comp, device)
    assert exe.module.vendor_regions
    operands, result = bf16_policy.PRODUCT_TYPES[mode]
    assert f", {operands}, {result}}};" in _tables(compiled_sources)
    assert any("types_(product_types(spec))" in s for s in compiled_sources)  # runtime.cc, compiled


@pytest.mark.skipif(RUNS_BF16, reason="this CPU's oneDNN has native bf16: the plugin takes it")
def test_here_a_bf16_build_s_regions_are_the_float32_build_s(compiled_sources):
    """The fallback costs no run time: the same regions, float32 products."""
    tables = []
    for mode in (None, Bf16Mode.PERFORMACE_MODE):
        comp, _, _ = _two_convs_and_gemm(np.random.default_rng(0))
        if mode is not None:
            odla.set_computation_item(comp, ItemType.BF16_MODE, mode)
        odla.compile_computation(comp, _dnnl())
        tables.append(_tables(compiled_sources))
        compiled_sources.clear()
    assert tables[0] == tables[1] and ", dnnl_f32, dnnl_f32};" in tables[0]


@pytest.mark.skipif(RUNS_BF16, reason="this CPU's oneDNN has native bf16: the plugin takes it")
def test_here_the_plugin_declines_in_one_log_line(caplog):
    bf16_policy._reason.cache_clear()
    comp, _, _ = _two_convs_and_gemm(np.random.default_rng(0))
    odla.set_computation_item(comp, ItemType.BF16_MODE, Bf16Mode.ACCURACY_MODE)
    with caplog.at_level(logging.INFO):
        comp.build_module(spec=_dnnl().target)
    (line,) = [r.getMessage() for r in caplog.records if "BF16_MODE" in r.getMessage()]
    assert line == ("BF16_MODE: the onednn plugin leaves bf16 to the float32 fallback (float32 "
                    "products, weights rounded to bfloat16): oneDNN reaches "
                    f"{HERE} here, below avx512_core_bf16: it has no native bf16 convolution "
                    "or matmul")


@pytest.mark.parametrize("device_name", [DeviceName.INTEL_DNNL, DeviceName.DEFAULT])
@pytest.mark.parametrize("item, value, dtype", [
    (ItemType.FP16_MODE, True, np.float16),
    (ItemType.BF16_MODE, Bf16Mode.ACCURACY_MODE, ml_dtypes.bfloat16),
    (ItemType.BF16_MODE, Bf16Mode.PERFORMACE_MODE, ml_dtypes.bfloat16),
], ids=["fp16", "bf16-accuracy", "bf16-performance"])
def test_without_native_bf16_the_fallback_matches_its_reference(device_name, item, value,
                                                                dtype):
    """Float32 products, the weights rounded to the 16-bit type."""
    if dtype is ml_dtypes.bfloat16 and RUNS_BF16:
        pytest.skip("this CPU's oneDNN has native bf16: the plugin takes it")
    comp, x, reference = _two_convs_and_gemm(np.random.default_rng(1))
    odla.set_computation_item(comp, item, value)
    (result,) = odla.Session(comp, odla.allocate_device(device_name=device_name)).run({"x": x})
    assert result.shape == (1, 16) and result.dtype == np.float32
    expected = reference(weights=lambda w: w.astype(dtype).astype(np.float64))
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4)
    assert not np.allclose(result, reference(), rtol=1e-5, atol=1e-5)  # the weights rounded


@NEEDS_BF16
@pytest.mark.parametrize("mode", MODES)
def test_bf16_products_match_a_reference_of_the_same_rounding(mode):
    comp, x, reference = _two_convs_and_gemm(np.random.default_rng(2))
    odla.set_computation_item(comp, ItemType.BF16_MODE, MODES[mode])
    exe = odla.compile_computation(comp, _dnnl())
    (result,) = odla.Session(exe).run({"x": x})
    assert exe.module.runtime_library.get_function(source_writer.CALLS_FUNCTION,
                                                   query_imports=True)() > 0
    assert result.shape == (1, 16) and result.dtype == np.float32
    written = _bf16 if mode == "bf16-performance" else _same
    float32 = reference()
    scale = np.abs(float32).max()
    np.testing.assert_allclose(result, reference(_bf16, _bf16, written), rtol=1e-2,
                               atol=1e-2 * scale)
    np.testing.assert_allclose(result, float32, rtol=0, atol=5e-2 * scale)  # bf16's error


@NEEDS_BF16
def test_with_the_isa_lowered_below_bf16_the_plugin_declines_and_results_match():
    """ONEDNN_MAX_CPU_ISA=AVX512_CORE (read once per process: a fresh one): the fallback."""
    code = ("import numpy as np, odla_tvm as odla, test_onednn_bf16 as t\n"
            "comp, x, _ = t._two_convs_and_gemm(np.random.default_rng(3))\n"
            "odla.set_computation_item(comp, odla.ItemType.BF16_MODE, "
            "odla.Bf16Mode.ACCURACY_MODE)\n"
            "(r,) = odla.Session(comp, t._dnnl()).run({'x': x})\n"
            "np.save(sys.argv[1], r)\n")
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX512_CORE",
               PYTHONPATH=os.pathsep.join(sys.path))
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bf16_lowered_{os.getpid()}.npy")
    run = subprocess.run([sys.executable, "-c", "import sys\n" + code, out], env=env,
                         capture_output=True, text=True, check=True)
    assert "below avx512_core_bf16" in run.stderr
    _, _, reference = _two_convs_and_gemm(np.random.default_rng(3))
    expected = reference(weights=_bf16)
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-4, atol=1e-4)
    os.remove(out)
