"""The bench in a reduced precision: the DEFAULT float32 build timed beside the reduced one
(the fp32 path), the report's section comparing them and OpenVINO's hinted build, and the CPU
class it names. Nothing here asserts a time: the figures are given."""

from test_bench import OVERHEAD, mlp_onnx

from odla_tvm.bench import driver
from odla_tvm.bench.accuracy import Accuracy
from odla_tvm.bench.precision_report import cpu_class, precision_section
from odla_tvm.bench.report import report
from odla_tvm.bench.results import ModelResult, PathResult


def _path(seconds, max_abs_diff):
    return PathResult(seconds, 5, accuracy=Accuracy(max_abs_diff, 0.999))


def test_the_section_compares_with_float32_and_openvino():
    results = [ModelResult("resnet", paths={"default": _path(0.1, 0.01), "fp32": _path(0.2, 0.0),
                                            "openvino": _path(0.05, 0.02),
                                            "onnxruntime": PathResult(0.3, 5)},
                           precision="bf16"),
               ModelResult("bert", paths={"default": _path(0.8, 0.01), "fp32": _path(0.4, 0.0),
                                          "onnxruntime": PathResult(0.3, 5)}, precision="bf16"),
               ModelResult("gpt2", error="onnxruntime: out of memory", precision="bf16")]
    text = "\n".join(precision_section(results))
    assert text.startswith("## bf16 against float32 and OpenVINO's bf16")
    assert f"CPU class {cpu_class()} (oneDNN reaches " in text
    assert "| resnet | 100.0 | 200.0 | 0.50x | 50.0 | 2.00x | 1.00e-02 / 0.00e+00 / 2.00e-02 |" \
        in text
    assert "| bert | 800.0 | 400.0 | 2.00x | - | - | 1.00e-02 / 0.00e+00 / - |" in text
    assert "gpt2" not in text
    assert "Geo-mean bf16 / fp32 1.00x over 2 models, bf16 / openvino 2.00x over 1." in text
    assert precision_section([ModelResult("resnet", paths={"default": PathResult(0.1, 5)})]) == []


def test_cpu_classes():
    assert cpu_class({"avx2", "fma"}) == "AVX2"
    assert cpu_class({"avx2", "avx512f", "avx512_vnni"}) == "AVX512-VNNI"
    assert cpu_class({"avx2", "avx512_vnni", "avx512_bf16"}) == "AVX512-BF16"
    assert cpu_class({"avx512_bf16", "amx_bf16", "amx_int8"}) == "AMX"
    assert cpu_class({"sse4_2"}) == "below AVX2"


def test_a_reduced_precision_bench_times_the_float32_build_beside_it(tmp_path):
    model = mlp_onnx(tmp_path / "mlp.onnx")
    (result,) = driver.bench_models([("mlp", model)], runs=3, cache_dir=tmp_path, seconds=0.05,
                                    precision="fp16")
    assert not result.error, result.error
    fp32, default = result.paths["fp32"], result.paths["default"]
    assert fp32.seconds and fp32.match and fp32.accuracy.max_abs_diff < 1e-4
    assert default.seconds and 0 < default.accuracy.max_abs_diff < 0.1
    text = report([result], OVERHEAD, 2, 30, (0.5, 0.7), chart="perf.png")
    assert "## fp16 against float32 and OpenVINO's f16" in text and "| mlp | " in text
