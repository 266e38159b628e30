"""`odla-tvm bench --precision int8` on a tiny model quantized by onnxruntime's quantizer
(odla_tvm/bench/quantize.py): every path runs the quantized file, each path's outputs are
measured against the float32 file's, odla-tvm's float32 build of that file is timed beside, and
the report has its int8 section. Nothing here asserts a time."""

import numpy as np
import onnx
import pytest

from odla_tvm import OdlaError, Status
from odla_tvm.bench import driver
from odla_tvm.bench.quantize import FLOAT_MODEL_KEY, float_model, quantize
from odla_tvm.bench.results import FLOAT32_PATH
from odla_tvm.bench.report import report
from odla_tvm.cli import main as cli

try:
    from .test_bench import OVERHEAD, mlp_onnx
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from test_bench import OVERHEAD, mlp_onnx

pytest.importorskip("onnxruntime.quantization")


@pytest.mark.parametrize("reduce_range", [True, False])
def test_quantize_makes_a_qdq_file_that_names_its_float32_one(tmp_path, reduce_range):
    model = mlp_onnx(tmp_path / "mlp.onnx", batch=1)
    assert quantize(model, tmp_path / "mlp-int8.onnx", reduce_range) == "static"
    quantized = onnx.load(tmp_path / "mlp-int8.onnx")
    ops = {n.op_type for n in quantized.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert float_model(str(tmp_path / "mlp-int8.onnx")) == str(tmp_path / "mlp.onnx")
    weights = [onnx.numpy_helper.to_array(t) for t in quantized.graph.initializer
               if t.data_type == onnx.TensorProto.INT8]
    largest = max(int(np.abs(w.astype(np.int64)).max()) for w in weights)
    assert largest <= 64 if reduce_range else largest > 64


def test_an_int8_bench_measures_every_path_against_float32(tmp_path):
    model = mlp_onnx(tmp_path / "mlp.onnx", batch=1)
    quantize(model, tmp_path / "mlp-int8.onnx", True)
    (result,) = driver.bench_models([("mlp-int8", str(tmp_path / "mlp-int8.onnx"))], runs=3,
                                    cache_dir=tmp_path, seconds=0.05, precision="int8")
    assert not result.error, result.error
    assert result.precision == "int8" and "cached" not in result.paths
    assert result.paths[FLOAT32_PATH].seconds > 0 and result.paths[FLOAT32_PATH].accuracy is None
    compared = ["default", "tvm", "onnxruntime"] + \
        ([] if driver.openvino_missing() else ["openvino"])
    for path in compared:
        accuracy = result.paths[path].accuracy
        assert result.paths[path].seconds > 0, path
        assert 0 < accuracy.max_abs_diff < 0.5 and accuracy.cosine > 0.99, (path, accuracy)
    text = report([result], OVERHEAD, 2, 30, (0.5, 0.7), chart="perf.png")
    assert "## int8" in text and "| mlp-int8 | " in text and "oneDNN reaches `" in text


def test_an_int8_bench_refuses_a_file_that_names_no_float32_model(tmp_path, capsys):
    model = mlp_onnx(tmp_path / "mlp.onnx")
    assert cli(["bench", model, "--precision", "int8", "-o", str(tmp_path / "p.md")]) != 0
    assert FLOAT_MODEL_KEY in capsys.readouterr().err
    with pytest.raises(OdlaError) as err:
        float_model(model)
    assert err.value.status == Status.INVALID_PARAM
