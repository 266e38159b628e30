"""`odla-tvm bench` on a tiny model: each path in its own process with outputs checked against
onnxruntime's, the inputs it makes from a graph, the report and chart from given figures, and
bad input refused before anything runs. Nothing here asserts a time."""

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
from odla_tvm import Status
from odla_tvm.bench import driver
from odla_tvm.bench.accuracy import accuracy
from odla_tvm.bench.models import model_inputs
from odla_tvm.bench.report import chart, report
from odla_tvm.bench.results import ModelResult, PathResult
from odla_tvm.bench.timing import latency_alone
from odla_tvm.cli import main as cli
from targets.specs import host_cpu_flags

OVERHEAD = {"bare VM call": 1.0, "Session.run": 3.5}


def mlp_onnx(path, batch="batch"):
    """Two dense layers (16 -> 32 -> 4) with a relu between, as an ONNX file."""
    rng = np.random.default_rng(3)
    weights = {"w1": (16, 32), "b1": (32,), "w2": (32, 4), "b2": (4,)}
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]),
         helper.make_node("Add", ["h", "b1"], ["a"]),
         helper.make_node("Relu", ["a"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
         helper.make_node("Add", ["o", "b2"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (batch, 16))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (batch, 4))],
        [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
         for n, s in weights.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


@pytest.mark.slow
def test_in_a_reduced_precision_the_bench_notes_each_path_s_accuracy(tmp_path):
    model = mlp_onnx(tmp_path / "mlp.onnx")
    (result,) = driver.bench_models([("mlp", model)], runs=3, cache_dir=tmp_path, seconds=0.05,
                                    precision="bf16")
    assert not result.error, result.error
    assert result.precision == "bf16" and result.paths["onnxruntime"].accuracy is None
    compared = ["default", "tvm", "cached"] + ([] if driver.openvino_missing() else ["openvino"])
    # OpenVINO computes bf16 only where avx512_bf16 holds; elsewhere it takes the hint and
    # computes float32, which equals onnxruntime's float32 exactly on this MLP.
    openvino_bf16 = bool({"avx512_bf16", "amx_bf16"} & host_cpu_flags())
    for path in compared:
        accuracy = result.paths[path].accuracy
        lowest = 0 if path == "openvino" and not openvino_bf16 else np.nextafter(0, 1)
        assert lowest <= accuracy.max_abs_diff < 0.1 and accuracy.cosine > 0.999, (path, accuracy)
        assert accuracy.top1 in (0.0, 1.0)  # one row of 4 class scores
    text = report([result], OVERHEAD, 2, 30, (0.5, 0.7), chart="perf.png")
    assert "## Accuracy in bf16 against float32" in text and "INFERENCE_PRECISION_HINT bf16" in text
    assert "| mlp | default | " in text and "| mlp | tvm | " in text


def test_accuracy_against_float32():
    expected = [np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]]), np.ones(2)]
    got = [np.array([[0.1, 0.6, 0.3], [0.2, 0.3, 0.5]]), np.ones(2)]
    measured = accuracy(got, expected)
    flat_got, flat_expected = (np.concatenate([a.ravel() for a in x]) for x in (got, expected))
    assert measured.max_abs_diff == pytest.approx(0.3)
    assert measured.cosine == pytest.approx(flat_got @ flat_expected / np.linalg.norm(flat_got)
                                            / np.linalg.norm(flat_expected))
    assert measured.top1 == 0.5
    assert accuracy([np.ones((2, 3, 4))], [np.ones((2, 3, 4))]).top1 is None
    assert accuracy([np.ones((2, 3, 4))], [np.ones((2, 3, 4))]).cosine == pytest.approx(1.0)


@pytest.mark.slow
def test_a_tiny_model_runs_on_every_path_with_outputs_matching(tmp_path):
    model = mlp_onnx(tmp_path / "mlp.onnx")
    (result,) = driver.bench_models([("mlp", model)], runs=3, cache_dir=tmp_path, seconds=0.05)
    assert not result.error, result.error
    for path in ("default", "tvm", "onnxruntime"):
        ran = result.paths[path]
        assert ran.error == "" and ran.seconds > 0 and ran.runs >= 3, (path, ran)
        assert ran.load_s > 0 and ran.peak_rss_mb > 0, (path, ran)
    # The pure-TVM build, as quick as the others here, took the turns with them (a turn runs
    # for 0.25 s: thousands of runs on an idle machine, 66 seen on a busy one; timed alone it
    # gets ``runs``, 3).
    assert result.paths["tvm"].runs > 10 and result.paths["default"].runs > 10
    # The checks' time comes from profiled runs of the ODLA paths; an MLP has none.
    assert result.paths["default"].checks_s == result.paths["tvm"].checks_s == 0
    assert result.paths["onnxruntime"].checks_s is None
    assert result.paths["default"].match and result.paths["tvm"].match
    # The cached load read the engine the default path kept: faster than its compile, same
    # outputs.
    cached = result.paths["cached"]
    assert cached.error == "" and cached.match
    assert 0 < cached.load_s < result.paths["default"].load_s
    # Its process, import included, ran on TVM's runtime alone, in less memory than a compile;
    # through tvm_ffi, as the model's batch is dynamic (the C library runs static shapes).
    assert cached.compiler_mapped is False and result.paths["default"].compiler_mapped
    # Its load + first run, and onnxruntime's, measured in two more processes each.
    for path in ("cached", "onnxruntime"):
        samples = result.paths[path].more_first_results_s
        assert len(samples) == 2 and all(s > 0 for s in samples), (path, samples)
    assert result.paths["default"].more_first_results_s == []
    assert cached.runner == result.paths["default"].runner == "tvm_ffi"
    assert cached.seconds > 0 and cached.peak_rss_mb < result.paths["default"].peak_rss_mb
    assert result.paths["default"].target == "host-cpu-onednn-auto"
    assert result.paths["tvm"].target == "host-cpu"
    # Each path's RSS is its own process's: onnxruntime's never imported TVM (~230 MB).
    assert result.paths["onnxruntime"].peak_rss_mb < result.paths["tvm"].peak_rss_mb
    openvino = result.paths["openvino"]
    if driver.openvino_missing():
        assert "OpenVINO is not installed" in openvino.error and openvino.seconds is None
    else:
        assert openvino.match and openvino.seconds > 0
    assert "tuned" not in result.paths  # an empty cache: no records apply
    text = report([result], OVERHEAD, 2, 30, (0.5, 0.7), chart="perf.png")
    assert "| mlp | " in text and "yes / yes" in text
    assert "| default | 1 | " in text and "geo-mean at most 1.0x, no model above 1.5x" in text
    if importlib.util.find_spec("matplotlib"):
        assert chart([result], tmp_path / "perf.png") is None
        assert (tmp_path / "perf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "pip install -e '.[bench]'" in chart([result], tmp_path / "perf.png")


def test_inputs_come_from_the_graph(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Identity", [name], [f"{name}_out"])
         for name in ("pixels", "attention_mask", "input_ids", "flags", "w")],
        "inputs",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ("n", 3, 4)),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, (1, 8)),
         helper.make_tensor_value_info("input_ids", TensorProto.INT64, (1, 8)),
         helper.make_tensor_value_info("flags", TensorProto.BOOL, (2,)),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, (2,))],  # also an initializer
        [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, None)
         for n in ("pixels", "attention_mask", "input_ids", "flags", "w")],
        [numpy_helper.from_array(np.ones(2, np.float32), "w")])
    model = helper.make_model(graph)
    feeds = model_inputs(model, batch=2)
    assert list(feeds) == ["pixels", "attention_mask", "input_ids", "flags"]
    assert feeds["pixels"].shape == (2, 3, 4) and feeds["pixels"].dtype == np.float32
    assert abs(feeds["pixels"].mean()) < 1 and feeds["pixels"].std() > 0.3
    assert feeds["attention_mask"].dtype == np.int64 and (feeds["attention_mask"] == 1).all()
    ids = feeds["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (1, 8) and 0 <= ids.min() <= ids.max() < 1000
    assert feeds["flags"].dtype == np.bool_
    again = model_inputs(model, batch=2)  # seeded: every path and every run gets the same
    assert all(np.array_equal(feeds[name], again[name]) for name in feeds)
    assert model_inputs(model)["pixels"].shape == (1, 3, 4)  # --batch 1 by default
    # A symbolic dim other than the first is refused, naming the input and the dim.
    model.graph.input[1].type.tensor_type.shape.dim[1].dim_param = "sequence"
    with pytest.raises(odla.OdlaError) as err:
        model_inputs(model)
    assert err.value.status == Status.INVALID_PARAM
    assert "input 'attention_mask' dim 1 is symbolic (sequence)" in str(err.value)


def test_cli_bench_refuses_bad_input(tmp_path, capsys):
    text = tmp_path / "notes.onnx"
    text.write_text("not a model\n")
    model = mlp_onnx(tmp_path / "mlp.onnx")
    symbolic = tmp_path / "seq.onnx"
    onnx_model = onnx.load(model)
    onnx_model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"
    onnx.save(onnx_model, symbolic)
    # Mistakes in the arguments are usage errors (2); a file that turns out no model the
    # bench can feed fails the job (1).
    bad = [
        ([str(tmp_path / "missing.onnx")], 2, "model file", "missing.onnx' does not exist"),
        ([str(text)], 1, "notes.onnx' is not an ONNX model", ""),
        (["--models", "lenet"], 2, "['lenet'] are not light models", "squeezenet"),
        ([model, "--threads", "0"], 2, "threads is 0; expected an integer >= 1", ""),
        ([model, "--runs", "2"], 2, "runs is 2; expected an integer >= 3", ""),
        ([model, "--batch", "0"], 2, "batch is 0", ""),
        ([str(symbolic)], 1, "input 'x' dim 1 is symbolic (features)", ""),
    ]
    for args, status, fragment, more in bad:
        assert cli(["bench", *args, "-o", str(tmp_path / "perf.md")]) == status, args
        err = capsys.readouterr().err
        prefix = "odla-tvm bench: error:" if status == 2 else "odla-tvm: error:"
        assert err.startswith(prefix) and fragment in err and more in err, (args, err)
        assert err.count("\n") == 1, err
    assert not (tmp_path / "perf.md").exists()


def test_the_slow_path_is_timed_on_a_small_budget():
    calls = []
    seconds, runs = latency_alone(lambda: calls.append(1), first_s=0.01, runs=5)
    assert runs == 5 and len(calls) == 5 and seconds >= 0
    calls.clear()
    _, runs = latency_alone(lambda: calls.append(1), first_s=25.0, runs=5)
    assert runs == 1 and len(calls) == 1  # a run over 20 s: timed once
    _, runs = latency_alone(lambda: None, first_s=0.01, runs=5, budget_s=0.0)
    assert runs == 3  # a spent budget still leaves 3 runs


def _row(name, default, tvm, ort, openvino=None, **paths):
    result = ModelResult(name, f"{name}.onnx", {
        "default": PathResult(default, 5, 1.5, 900, True, "host-cpu-onednn-auto",
                              checks_s=default / 100),
        "tvm": PathResult(tvm, 3, 1.2, 850, True, "host-cpu"),
        "onnxruntime": PathResult(ort, 5, 0.2, 120, first_s=0.05),
        "openvino": (PathResult(openvino, 5, 0.4, 200, True) if openvino
                     else PathResult(error="RuntimeError: unsupported AveragePool")),
    })
    result.paths.update(paths)
    return result


def test_report_ratios_geo_means_goals_and_notes():
    cached = PathResult(0.126, 5, load_s=0.2, peak_rss_mb=170, match=True, compiler_mapped=False,
                        import_s=0.3, first_s=0.1, runner="C library",
                        more_first_results_s=[0.28, 0.26])
    results = [_row("bert", 0.12, 1.2, 0.1, 0.09, cached=cached),
               _row("vit", 0.2, 0.8, 0.2),
               ModelResult("gpt2", "gpt2.onnx", error="onnxruntime: out of memory")]
    text = report(results, OVERHEAD, 2, 600, (1.5, 2.5), why_no_chart="matplotlib is not "
                  "installed; pip install -e '.[bench]'")
    assert "OpenVINO" in text and "Load average (1 min) 1.5 at the start and 2.5 at the end" in text
    assert ("| bert | 120.0 | 1200.0 | 100.0 | 90.0 | 1.20x | 12.00x | 0.90x | "
            "1.5 / 1.2 / 0.2 / 0.4 | 900 / 850 / 120 / 200 | yes / yes / yes | "
            "1.20 (1.0%) / - | 5 / 3 |") in text
    # The cached path: its load and first run (the median of 0.3, 0.28 and 0.26 s) against
    # onnxruntime's creation and first run (0.25 s): missed; 170 MB against onnxruntime's 120
    # (allowed: 120 + 40): missed.
    assert ("| bert | 0.30 | 0.280 ✗ | 0.250 | 126.0 | 120.0 | 1.05x | 170 ✗ | 120 | 160 | no "
            "| C library | yes |") in text
    assert "creation and first run, on every model (1): not met (bert)." in text
    assert "within the allowed, on every model (1): not met (bert)." in text
    assert "compiler not mapped, on every model (1): met." in text
    assert "cached / default latency: 1.05x to 1.05x over 1 models." in text
    assert "| vit | " in text and "| vit | 0." not in text  # vit had no cached load
    assert "| vit | 200.0 | 800.0 | 200.0 | - | 1.00x | 4.00x | - |" in text
    assert "| gpt2 | failed: onnxruntime: out of memory |" in text
    assert "- vit, openvino: did not run: RuntimeError: unsupported AveragePool" in text
    # Geo-means over the models that ran: default sqrt(1.2 * 1.0), tvm sqrt(12 * 4).
    assert "| default | 2 | 1.10x | 1.20x (bert) | geo-mean at most 1.0x" in text
    assert "not met (geo-mean 1.10x)" in text
    assert "| tvm | 2 | 6.93x | 12.00x (bert) |" in text
    assert "not met (geo-mean 6.93x; above 10.0x: bert)" in text
    assert "| openvino | 1 | 0.90x | 0.90x (bert) | - | - |" in text
    assert "No chart: matplotlib is not installed; pip install -e '.[bench]'." in text
    assert "## Tuned builds" not in text and "over the bare VM call" in text
    met = report([_row("vit", 0.19, 0.8, 0.2)], OVERHEAD, 2, 60, (0, 0), chart="perf.png")
    assert met.count("| met |") == 2 and "![Latency over onnxruntime's per model](perf.png)" in met
