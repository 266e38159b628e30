"""Autotuning with tiny budgets: tune records measurements in the target's database, every
later compile for that target applies them (checked in the compiled module, not in a log),
records never cross to another target, a run resumes from its records and stops on its time
budget; bad input is refused before anything is measured."""

import contextlib
import dataclasses
import io
import json
import logging
import shutil
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
import targets
from odla_tvm import Status
from odla_tvm.bench import driver
from odla_tvm.bench.driver import bench_light_models
from odla_tvm.bench.report import report
from odla_tvm.bench.results import ModelResult, PathResult
from odla_tvm.bench.timing import call_overhead, latency_in_turns
from odla_tvm.cli import main as cli
from odla_tvm.frontends.onnx import import_model
from targets.tuning.progress import OutOfTime, Progress

# The tuned model's kernels: the conv-relu, whose schedule reads its weights in its own layout
# (made when compiling: "prepacked"), and the transposes into and out of NHWC.
TUNED = ["fused_conv2d_relu_prepacked", "transpose", "transpose1"]
IMAGE = np.random.default_rng(11).standard_normal((1, 3, 16, 16)).astype(np.float32)


def conv_relu_onnx(path, channels=8):
    """A conv (3 -> ``channels``, 3x3, padded) and a relu, as an ONNX file."""
    weight = np.random.default_rng(channels).standard_normal((channels, 3, 3, 3))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["out"])],
        "conv_relu", [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 16, 16))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, channels, 16, 16))],
        [numpy_helper.from_array(weight.astype(np.float32), "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


def transformer_block_onnx(path, seq=8, hidden=16):
    """One BERT-style encoder layer, small: self-attention (batched matmuls, softmax), residual
    layer norms, and a GELU feed-forward written as BERT's exports write it (with Erf)."""
    rng = np.random.default_rng(5)
    weights = {name: rng.standard_normal(shape).astype(np.float32) * 0.2 for name, shape in [
        ("wq", (hidden, hidden)), ("wk", (hidden, hidden)), ("wv", (hidden, hidden)),
        ("w1", (hidden, 2 * hidden)), ("w2", (2 * hidden, hidden)),
        ("g1", (hidden,)), ("b1", (hidden,)), ("g2", (hidden,)), ("b2", (hidden,))]}
    weights["scale"] = np.array(hidden ** -0.5, np.float32)
    weights["half"], weights["one"] = np.array(0.5, np.float32), np.array(1.0, np.float32)
    weights["sqrt2"] = np.array(2 ** 0.5, np.float32)
    node = helper.make_node
    nodes = [
        node("MatMul", ["x", "wq"], ["q"]), node("MatMul", ["x", "wk"], ["k"]),
        node("MatMul", ["x", "wv"], ["v"]),
        node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        node("MatMul", ["q", "kt"], ["scores"]), node("Mul", ["scores", "scale"], ["scaled"]),
        node("Softmax", ["scaled"], ["probs"], axis=-1),
        node("MatMul", ["probs", "v"], ["attended"]), node("Add", ["attended", "x"], ["res1"]),
        node("LayerNormalization", ["res1", "g1", "b1"], ["ln1"], axis=-1, epsilon=1e-5),
        node("MatMul", ["ln1", "w1"], ["h"]), node("Div", ["h", "sqrt2"], ["hs"]),
        node("Erf", ["hs"], ["he"]), node("Add", ["he", "one"], ["h1"]),
        node("Mul", ["h", "h1"], ["hm"]), node("Mul", ["hm", "half"], ["gelu"]),
        node("MatMul", ["gelu", "w2"], ["ffn"]), node("Add", ["ffn", "ln1"], ["res2"]),
        node("LayerNormalization", ["res2", "g2", "b2"], ["out"], axis=-1, epsilon=1e-5)]
    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, seq, hidden))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, seq, hidden))],
        [numpy_helper.from_array(w, name) for name, w in weights.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def compiled(model_path, cache_dir):
    """The model compiled for INTEL_X86, the pure-TVM build host-cpu records are tuned for
    (DEFAULT hands the convolutions to oneDNN)."""
    comp = import_model(model_path)
    odla.set_computation_item(comp, odla.ItemType.CACHE_DIR, str(cache_dir))
    return odla.compile_computation(comp, odla.allocate_device(device_name=odla.DeviceName.INTEL_X86))


def default_seconds(cache, seconds):
    """Says in ``cache``'s host-cpu database that each kernel's default schedule ran
    ``seconds``: 1 s makes every record apply, whatever it measured; 0 none."""
    database = targets.TuningDatabase(targets.host_cpu(), cache)
    database.add_default_seconds(dict.fromkeys(database.default_seconds(), seconds))


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A conv-relu model tuned with 3 trials into a fresh cache directory ("measured"), and a
    copy of it ("cache") where every record applies: the tests using it check how records
    reach compiles; test_a_record_applies_only_where_it_beats_the_default_schedule checks
    which do."""
    root = tmp_path_factory.mktemp("tuning")
    model = conv_relu_onnx(root / "conv_relu.onnx")
    progress = io.StringIO()
    with contextlib.redirect_stderr(progress):
        report = odla.tune(model, "host-cpu", trials=3, cache_dir=root / "measured")
    shutil.copytree(root / "measured", root / "cache")
    default_seconds(root / "cache", 1.0)
    report.directory = root / "cache" / report.directory.relative_to(root / "measured")
    return model, root / "cache", report, progress.getvalue()


def test_tune_measures_and_records_in_the_targets_database(tuned):
    _, cache, report, progress = tuned
    # The conv-relu kernel, and the transposes into and out of NHWC around it: each gets its
    # first trials before any gets more.
    assert (report.target, report.tasks, report.trials_run) == ("host-cpu", 3, 3)
    assert report.trials_recorded == 3 and report.stopped_by == "trials"
    assert report.directory.parent == cache / "tuning"
    meta = json.loads((report.directory / "target.json").read_text())
    assert meta["target_key"] == targets.host_cpu().key()
    assert meta["runs"][-1]["label"] == "conv_relu" and meta["runs"][-1]["trials"] == 3
    assert "tuning conv_relu for host-cpu" in progress and "kernels with records" in progress
    assert "host-cpu" in report.summary() and "3 trials" in report.summary()


def test_a_record_applies_only_where_it_beats_the_default_schedule(tuned, tmp_path):
    model, cache, report, progress = tuned
    measured = targets.TuningDatabase(targets.host_cpu(), cache.parent / "measured")
    # Each kernel's default schedule was timed once, before its candidates, as they were.
    defaults = measured.default_seconds()
    assert set(defaults) == set(measured.measurements()) and len(defaults) == 3
    assert all(0 < seconds < 0.1 for seconds in defaults.values()), defaults
    assert "timing the default schedules" in progress
    database = targets.TuningDatabase(targets.host_cpu(), tmp_path)
    shutil.copytree(cache, tmp_path, dirs_exist_ok=True)
    untuned = odla.Session(compiled(model, tmp_path / "empty")).run({"image": IMAGE})[0]
    # Where the conv-relu's default schedule ran faster than its record, compiles keep it and
    # apply the transposes' records.
    from tvm.s_tir.meta_schedule.database import Workload

    conv = next(json.loads(line)[0] for line in
                (database.directory / "database_workload.json").read_text().splitlines()
                if "conv2d" in Workload.from_json(json.loads(line)).mod.script())
    database.add_default_seconds({conv: 0.0})
    exe = compiled(model, tmp_path)
    assert exe.module.tuned_kernels == ["transpose", "transpose1"]
    np.testing.assert_allclose(odla.Session(exe).run({"image": IMAGE})[0], untuned, rtol=1e-5,
                               atol=1e-5)
    # Every default faster (a change the next compile sees): no record applies, and a
    # rerun's report says so.
    default_seconds(tmp_path, 0.0)
    assert compiled(model, tmp_path).module.tuned_kernels == []
    rerun = odla.tune(model, "host-cpu", trials=3, cache_dir=tmp_path, progress=False)
    assert (rerun.stopped_by, rerun.defaults_kept) == ("done", 3)
    assert "3 kernels keep their default schedule" in rerun.summary()


@pytest.mark.parametrize("damage", ["null run time", "null in an Annotate's attributes",
                                    "null instruction input"])
def test_a_record_tvm_would_crash_on_is_refused(tuned, tmp_path, damage, caplog):
    """Records TVM's parser dereferences nulls in (the fuzz campaign's two SIGSEGVs and an
    earlier one) are refused, and the model compiles without them; a TransformLayout's null
    pad value, which TVM writes itself, stays valid (test_compiles_apply_the_record)."""
    model, cache, _, _ = tuned
    damaged = tmp_path / "cache"
    shutil.copytree(cache, damaged)
    records = next(damaged.rglob("database_tuning_record.json"))
    lines = records.read_text().splitlines()
    record = json.loads(lines[0])
    instructions = record[1][0][0]
    if damage == "null run time":
        record[1][1][0] = None
    elif damage == "null instruction input":
        next(i for i in instructions if i[1])[1][0] = None
    else:
        next(i for i in instructions if i[0] == "Annotate")[2][0] = None
    records.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
    with caplog.at_level(logging.WARNING):
        exe = compiled(model, damaged)
    assert "is damaged" in caplog.text
    assert exe.module.tuned_kernels == []
    untuned = compiled(model, tmp_path / "empty")
    np.testing.assert_allclose(odla.Session(exe).run({"image": IMAGE})[0],
                               odla.Session(untuned).run({"image": IMAGE})[0], rtol=1e-5)


def test_compiles_apply_the_record(tuned, tmp_path, monkeypatch):
    model, cache, _, _ = tuned
    untuned = compiled(model, tmp_path)  # an empty cache: no records
    exe = compiled(model, cache)
    # MetaScheduleApplyDatabase found the workload and scheduled the kernel from its record;
    # the schedule reads the weights in its own layout, made when compiling ("prepacked").
    assert exe.module.tuned_kernels == TUNED
    assert untuned.module.tuned_kernels == []
    code = exe.module.library.mod.imports[0].inspect_source("ll")
    plain = untuned.module.library.mod.imports[0].inspect_source("ll")
    # Both fuse the conv and relu into one kernel; without records it has a default schedule.
    assert "fused_conv2d_relu" in code and "fused_conv2d_relu" in plain
    # Profiles map kernels to the values they produce: the fused kernel computes the relu in
    # NHWC (a value of the layout conversion), and the transpose back gives the ODLA value.
    values = exe.kernel_values
    assert len(values["fused_conv2d_relu_prepacked"]) == 1 and list(values.values())[-1] == ["out"]
    # The same numbers either way.
    results = []
    for executable in (exe, untuned):
        ctx = odla.create_context()
        odla.bind_to_argument(executable.args[0], IMAGE, ctx)
        odla.launch_executable(executable, ctx)
        results.append(odla.get_value_data(executable.outputs[0], None, ctx))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-5)
    # Session finds the database through $ODLA_TVM_CACHE_DIR as well.
    monkeypatch.setenv("ODLA_TVM_CACHE_DIR", str(cache))
    session = odla.Session.from_onnx(model, odla.allocate_device(device_name=odla.DeviceName.INTEL_X86))
    assert session.executable.module.tuned_kernels == TUNED
    np.testing.assert_allclose(session.run({"image": IMAGE})[0], results[1], rtol=1e-5, atol=1e-5)


def test_a_model_not_tuned_compiles_as_before(tuned, tmp_path):
    _, cache, _, _ = tuned
    other = compiled(conv_relu_onnx(tmp_path / "narrow.onnx", channels=4), cache)
    assert other.module.tuned_kernels == []
    # No records: default CPU schedules, the conv-relu one kernel reading its weights packed.
    convs = [k for k in other.module.kernel_bindings if "conv2d" in k]
    assert convs == ["fused_conv2d_relu_prepacked"]
    # Other weights in the tuned architecture use its records.
    weights = onnx.load(conv_relu_onnx(tmp_path / "same.onnx"))
    weights.graph.initializer[0].CopyFrom(numpy_helper.from_array(
        np.ones((8, 3, 3, 3), np.float32), "w"))
    onnx.save(weights, tmp_path / "same.onnx")
    assert compiled(str(tmp_path / "same.onnx"), cache).module.tuned_kernels == TUNED


def test_records_are_never_applied_to_another_target(tuned, tmp_path, caplog):
    _, cache, report, _ = tuned
    # The same target name on another CPU (a cache shared between machines).
    elsewhere = dataclasses.replace(targets.host_cpu(), target={
        **targets.host_cpu().target, "mcpu": "x86-64-v3"})
    with caplog.at_level(logging.WARNING, logger="targets.tuning"):
        assert targets.find_database(elsewhere, cache) is None
    assert "ignoring the tuning records" in caplog.text and "x86-64-v3" in caplog.text
    # A database copied to where another target's would be.
    avx2 = targets.get_target("x86-64-avx2")
    copy = targets.TuningDatabase(avx2, tmp_path).directory
    shutil.copytree(report.directory, copy)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="targets.tuning"):
        assert targets.find_database(avx2, tmp_path) is None
    assert "measured for target" in caplog.text and "x86-64-v3" in caplog.text


def test_a_rerun_resumes_from_the_records(tuned, tmp_path):
    model, cache, _, _ = tuned
    work = tmp_path / "cache"
    shutil.copytree(cache, work)
    again = odla.tune(model, "host-cpu", trials=3, cache_dir=work, progress=False)
    assert (again.trials_run, again.trials_recorded, again.stopped_by) == (0, 3, "done")
    more = odla.tune(model, "host-cpu", trials=4, cache_dir=work, progress=False)
    assert (more.trials_run, more.trials_recorded, more.stopped_by) == (1, 4, "trials")


def test_records_timed_against_other_default_schedules_wait_for_a_rerun(tuned, tmp_path,
                                                                          caplog):
    """After an odla-tvm whose default rules schedule a kernel otherwise (records beat the
    old schedule, maybe not the new one), the kernel keeps its default schedule, with a
    warning, until a tune times the new one (its trials done, that is all the tune does);
    a database made before the digests were kept reads as such."""
    model, cache, _, _ = tuned
    work = tmp_path / "cache"
    shutil.copytree(cache, work)
    database = targets.TuningDatabase(targets.host_cpu(), work)
    meta_file = database.directory / "target.json"
    meta = json.loads(meta_file.read_text())
    digests = dict(meta["default_schedule_digests"])
    assert set(digests) == set(meta["default_schedules"]) and len(set(digests.values())) == 3
    meta["default_schedule_digests"][next(iter(digests))] = "another schedule"
    meta_file.write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING):
        exe = compiled(model, work)
    assert len(exe.module.tuned_kernels) == 2
    assert "1 of the model's kernels keep their default schedule" in caplog.text
    untuned = odla.Session(compiled(model, tmp_path / "empty")).run({"image": IMAGE})[0]
    np.testing.assert_allclose(odla.Session(exe).run({"image": IMAGE})[0], untuned,
                               rtol=1e-5, atol=1e-5)
    # Without digests, none applies; the rerun times the three kernels' default schedules
    # again and keeps their digests.
    del meta["default_schedule_digests"]
    meta_file.write_text(json.dumps(meta))
    assert compiled(model, work).module.tuned_kernels == []
    again = odla.tune(model, "host-cpu", trials=3, cache_dir=work, progress=False)
    assert (again.trials_run, again.stopped_by) == (0, "done")
    assert database.metadata()["default_schedule_digests"] == digests
    retimed = database.default_seconds()
    assert all(0 < seconds < 0.1 for seconds in retimed.values()), retimed
    # Now each record applies where it beats the default schedule timed.
    exe = compiled(model, work)
    assert len(exe.module.tuned_kernels) == 3 - len(database.outclassed())
    np.testing.assert_allclose(odla.Session(exe).run({"image": IMAGE})[0], untuned,
                               rtol=1e-5, atol=1e-5)
    default_seconds(work, 1.0)
    assert compiled(model, work).module.tuned_kernels == TUNED


def test_keep_best_keeps_each_kernels_fastest_records_and_the_trial_counts(tuned, tmp_path):
    model, cache, _, _ = tuned
    work = tmp_path / "cache"
    shutil.copytree(cache, work)
    database = targets.TuningDatabase(targets.host_cpu(), work)
    more = odla.tune(model, "host-cpu", trials=6, cache_dir=work, progress=False)
    assert more.trials_run == 3 and more.records_removed == 0
    before = database.measurements()
    assert sorted(count for count, _ in before.values()) == [2, 2, 2]
    again = odla.tune(model, "host-cpu", trials=6, cache_dir=work, progress=False, keep_best=1)
    assert again.trials_run == 0 and again.records_removed == 3
    assert "3 slower records removed" in again.summary()
    records = (database.directory / "database_tuning_record.json").read_text().splitlines()
    assert len(records) == 3
    # The fastest record of each kernel stays, and the trials removed still count.
    assert database.measurements() == before
    assert odla.tune(model, "host-cpu", trials=6, cache_dir=work, progress=False).stopped_by == "done"
    default_seconds(work, 1.0)  # the runs' run-offs timed the real ones
    assert compiled(model, work).module.tuned_kernels == TUNED


def test_a_time_budget_ends_the_run_after_recording_its_batch():
    class Task:
        weight = 2

    class Result:
        error_msg, run_secs = None, [0.002, 0.004]

    progress = Progress([Task(), Task()], [0.005, 0.0005], [False, False], None,
                        time.monotonic() - 1, "tuning", False)
    with pytest.raises(OutOfTime):
        progress.update(0, [Result()])
    assert progress.out_of_time
    assert progress.trials == 1 and progress.best == [0.003, 0.0005]
    assert progress.recorded == [True, False]
    progress.close()


def test_a_time_budget_stops_both_tuning_phases(tmp_path):
    # One run whose minutes end in the first phase (every kernel in turn), one in the second
    # (MetaSchedule's gradient scheduler, which fails if a task it returns was ended).
    # The kernels' default schedules are timed first (a run's time goes there before its first
    # trial), and the model is not: the minutes go to the search.
    model = conv_relu_onnx(tmp_path / "m.onnx")
    odla.tune(model, "host-cpu", trials=1, cache_dir=tmp_path, progress=False, time_model=False)
    for minutes in (0.15, 0.3):
        report = odla.tune(model, "host-cpu", minutes=minutes, cache_dir=tmp_path, progress=False,
                           time_model=False)
        assert report.stopped_by == "minutes" and report.trials_run > 0


def test_tune_refuses_bad_input(tmp_path):
    model = conv_relu_onnx(tmp_path / "m.onnx")
    bad = [
        ({}, Status.INVALID_PARAM, "no tuning budget"),
        ({"trials": 0}, Status.INVALID_PARAM, "trials is 0; expected an integer >= 1"),
        ({"trials": 2.5}, Status.INVALID_PARAM, "trials is 2.5"),
        ({"trials": True}, Status.INVALID_PARAM, "trials is True"),
        ({"minutes": -1}, Status.INVALID_PARAM, "minutes is -1; expected a number > 0"),
        ({"minutes": "5"}, Status.INVALID_PARAM, "minutes is '5'"),
        ({"trials": 2, "target": "sparc"}, Status.UNSUPPORTED_DEVICE_TYPE,
         "unknown target 'sparc'"),
        ({"trials": 2, "target": 3}, Status.INVALID_PARAM, "target is a int"),
        ({"trials": 2, "cache_dir": 3}, Status.INVALID_PARAM, "cache directory is a int"),
        ({"trials": 2, "keep_best": 0}, Status.INVALID_PARAM,
         "keep_best is 0; expected an integer >= 1"),
        ({"trials": 2, "keep_best": True}, Status.INVALID_PARAM, "keep_best is True"),
        ({"trials": 2, "keep_best": "1"}, Status.INVALID_PARAM, "keep_best is '1'"),
    ]
    for kwargs, status, fragment in bad:
        with pytest.raises(odla.OdlaError) as err:
            odla.tune(model, **kwargs)
        assert err.value.status == status and fragment in str(err.value), (kwargs, err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.tune(model, "aarch64-linux", trials=2, cache_dir=tmp_path)
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE
    # What is wrong, and what to do: measure on the board through an RPC tracker.
    assert "aarch64-linux runs on aarch64, and this machine is x86_64" in str(err.value)
    assert "odla-tvm rpc-server" in str(err.value) and "--rpc-tracker" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.tune(tmp_path / "missing.onnx", trials=2)
    assert err.value.status == Status.FILE_NOT_EXIST
    with pytest.raises(odla.OdlaError) as err:
        odla.tune(42, trials=2)
    assert err.value.status == Status.INVALID_PARAM and "model is a int" in str(err.value)
    comp = import_model(model)
    odla.set_computation_item(comp, odla.ItemType.CACHE_DIR, 7)
    with pytest.raises(odla.OdlaError) as err:
        odla.compile_computation(comp)
    assert err.value.status == Status.INVALID_PARAM and "cache directory is a int" in str(err.value)


def test_cli_tune_and_bench_report_bad_input(tmp_path, capsys):
    model = conv_relu_onnx(tmp_path / "m.onnx")
    assert cli(["tune", model]) == 1
    assert "no tuning budget" in capsys.readouterr().err
    assert cli(["tune", model, "--trials", "2", "--target", "sparc"]) == 1
    assert "unknown target 'sparc'" in capsys.readouterr().err
    assert cli(["tune", model, "--trials", "2", "--keep-best", "0"]) == 1
    assert "keep_best is 0" in capsys.readouterr().err
    assert cli(["bench", "--models", "lenet"]) == 2
    assert "['lenet'] are not light models" in capsys.readouterr().err


def test_bench_refuses_bad_input():
    for kwargs, fragment in [({"names": ["resnet18"]}, "['resnet18'] are not light models"),
                             ({"threads": 0}, "threads is 0"), ({"runs": 1}, "runs is 1")]:
        with pytest.raises(odla.OdlaError) as err:
            bench_light_models(**kwargs)
        assert err.value.status == Status.INVALID_PARAM and fragment in str(err.value)


def test_overhead_and_report():
    overhead = call_overhead(calls=200)
    assert list(overhead) == ["bare VM call", "CompiledModule.run", "launch_executable",
                              "Session.run", "bare VM call (C++)", "odla_LaunchExecutable (C)"]
    assert all(us > 0 for us in overhead.values())
    tuned = ModelResult("resnet50", "light_resnet50.onnx", {
        "default": PathResult(0.11, 5), "tvm": PathResult(2.0, 3),
        "onnxruntime": PathResult(0.1, 5),
        "tuned": PathResult(0.05, 5, match=True)}, 40, 60, 300, 4.0)
    rows = [tuned, ModelResult("vgg19", error="RuntimeError: out of memory")]
    text = report(rows, overhead, 2, 60, (1.5, 2.5), "build/perf-cache")
    assert "host-cpu tuning database in `build/perf-cache`" in text
    assert "| resnet50 | 50.0 | 0.50x | 40 of 60 | 300 trials, 4.0 min | yes |" in text
    assert "| resnet50 | 110.0 | 2000.0 | 100.0 | - | 1.10x | 20.00x | - |" in text
    assert "| vgg19 | failed: RuntimeError: out of memory" in text
    assert "Goal: tuned at most 1.0x onnxruntime on resnet50: met." in text
    assert "over the bare VM call" in text
    assert "Load average (1 min) 1.5 at the start and 2.5 at the end" in text


def test_bench_times_the_tuned_build_where_records_apply(tuned, monkeypatch):
    model, cache, _, _ = tuned
    monkeypatch.setattr(driver, "openvino_missing", lambda: "not wanted here")
    result = driver.bench_model("conv_relu", model, runs=3, cache_dir=cache, seconds=0.05)
    assert not result.error, result.error
    assert result.paths["tuned"].match and result.paths["tuned"].seconds > 0
    assert result.paths["tuned"].target == "host-cpu"
    assert (result.tuned_kernels, result.kernels) == (3, 3)
    assert result.tuning_trials == 3  # the run log names the model by its file
    assert result.paths["tvm"].match and result.paths["default"].match
    assert result.paths["openvino"].error == "not wanted here"


def test_latency_in_turns_alternates_paths_and_skips_each_turns_first_run():
    calls = []
    paths = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    latency = latency_in_turns(paths, runs=4, seconds=0.0, turn_s=1e-9, settle_s=0.0)
    # One warm-up call each, then turns of an untimed and a timed run until 4 are timed.
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 4
    assert {name: timed for name, (_, timed) in latency.items()} == {"a": 4, "b": 4}
    assert all(seconds > 0 for seconds, _ in latency.values())


def test_a_transformer_block_gets_its_tasks_and_records_like_a_cnn(tmp_path):
    # BERT's work on the pure-TVM build: batched matmuls, softmax, layer norm, GELU; one trial
    # for each of its kernels, and a compile applies every record.
    model = transformer_block_onnx(tmp_path / "block.onnx")
    report = odla.tune(model, "host-cpu", trials=10, cache_dir=tmp_path, progress=False)
    assert (report.tasks, report.trials_run) == (10, 10)
    default_seconds(tmp_path, 1.0)  # where records beat the default schedules, they apply
    exe = compiled(model, tmp_path)
    kernels = [k.removesuffix("_prepacked") for k in exe.module.tuned_kernels]
    for work in ("fused_matmul1_multiply", "softmax", "fused_mean_subtract", "fused_matmul3_gelu"):
        assert work in kernels, kernels
    assert len(kernels) == 10
    ctx = odla.create_context()
    x = np.random.default_rng(2).standard_normal((1, 8, 16)).astype(np.float32)
    odla.bind_to_argument(exe.args[0], x, ctx)
    odla.launch_executable(exe, ctx)
    import onnxruntime

    expected = onnxruntime.InferenceSession(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(odla.get_value_data(exe.outputs[0], None, ctx), expected,
                               rtol=1e-4, atol=1e-4)


def matmul_onnx(path):
    """One (128, 512) x (512, 512) product of two inputs: a kernel long enough to run off
    (RUN_OFF_MIN_S). Not by a constant: where the host has AMX, that product runs on AMX,
    whose kernels tuning leaves."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (128, 512)),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, (512, 512))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (128, 512))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


def test_a_best_record_runs_off_against_its_default_and_applies_only_if_it_wins(tmp_path):
    """A run ends by timing each kernel's best record beside its default schedule, in
    rounds, and that time is the record's; it applies only if it won every round: a record
    timed faster apart (here a doctored one, the kernel unscheduled: one core, no vectors,
    recorded at 1 ns) but slower beside its default no longer applies after the next run,
    which runs it off (and runs nothing else)."""
    model = matmul_onnx(tmp_path / "matmul.onnx")
    odla.tune(model, "host-cpu", trials=1, cache_dir=tmp_path, progress=False)
    database = targets.TuningDatabase(targets.host_cpu(), tmp_path)
    run_offs = database.metadata()["run_offs"]
    (kernel,) = [h for h, s in database.default_seconds().items()
                 if s >= targets.tuning.database.RUN_OFF_MIN_S]
    assert set(run_offs) == {kernel}
    assert database.measurements()[kernel][1] == run_offs[kernel]["seconds"]
    records = database.directory / "database_tuning_record.json"
    lines = records.read_text().splitlines()
    hashes = [json.loads(line)[0] for line in
              (database.directory / "database_workload.json").read_text().splitlines()]
    index, (_trace, _secs, *rest) = next(json.loads(line) for line in lines
                                         if hashes[json.loads(line)[0]] == kernel)
    lines.append(json.dumps([index, [[[], []], [1e-9], *rest]]))
    records.write_text("\n".join(lines) + "\n")
    assert database.measurements()[kernel][1] == 1e-9
    assert kernel not in database.outclassed()  # applied as it stands
    again = odla.tune(model, "host-cpu", trials=1, cache_dir=tmp_path, progress=False)
    assert again.trials_run == 0
    run_off = database.metadata()["run_offs"][kernel]
    assert run_off["recorded"] == 1e-9 and not run_off["won"]
    # Its time is now the one measured beside its default, not the doctored 1 ns. Only the
    # rounds decide: the unscheduled kernel's median varied from 0.5 to 24 ms between runs
    # on a 2-core Xeon, once under its default's (0.54 ms against 0.70, a round lost).
    assert database.measurements()[kernel][1] == run_off["seconds"] > 1e-6
    assert kernel in database.outclassed()
    exe = compiled(model, tmp_path)
    assert not any("matmul" in name for name in exe.module.tuned_kernels), exe.module.tuned_kernels
    x, weight = (np.random.default_rng(4).standard_normal(shape).astype(np.float32)
                 for shape in ((128, 512), (512, 512)))
    np.testing.assert_allclose(odla.Session(exe).run({"x": x, "w": weight})[0], x @ weight,
                               rtol=1e-4, atol=1e-3)
