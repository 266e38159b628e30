"""What a user's first tuning run does: `odla-tvm tune MODEL` tunes for the target
Session.from_onnx uses by default, keeps its --minutes, prints no raw TVM line, and ends with
the model's latency before and after; the next Session.from_onnx of the model applies the
records (its engine cached before the records is not reused, and the log says so)."""

import logging
import os
import re
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
import targets
from odla_tvm import engine_cache
from odla_tvm.device import default_target
from odla_tvm.frontends.onnx import import_model
from targets.compiler import fused_kernels

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
WEIGHT = np.random.default_rng(4).standard_normal((8, 3, 1, 1)).astype(np.float32)
# A C++ log line of TVM's (LOG(WARNING) and the like write "[hh:mm:ss] file.cc:line: ...").
RAW_TVM_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+\.cc:\d+:", re.MULTILINE)


def conv_exp_onnx(path):
    """A 1x1 conv and a relu (oneDNN's, on the DEFAULT device), then a concatenation with the
    image, an exp and a max over the pixels (TVM's kernels there)."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["c"]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Concat", ["r", "image"], ["cat"], axis=1),
         helper.make_node("Exp", ["cat"], ["e"]),
         helper.make_node("ReduceMax", ["e"], ["out"], axes=[2, 3], keepdims=0)],
        "conv_exp", [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 16, 16))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 11))],
        [numpy_helper.from_array(WEIGHT, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


def expected():
    conv = np.maximum(np.einsum("oc,nchw->nohw", WEIGHT[:, :, 0, 0], IMAGE), 0)
    return np.exp(np.concatenate([conv, IMAGE], axis=1)).max(axis=(2, 3))


def engine_key_of(model, cache):
    digest = engine_cache.model_digest(model, None, cache)
    return engine_cache.engine_key(digest, odla.allocate_device(), cache)


def test_tune_defaults_to_the_sessions_target_and_its_next_load_applies_the_records(
        tmp_path, caplog):
    model, cache = conv_exp_onnx(tmp_path / "conv_exp.onnx"), tmp_path / "cache"
    untuned = odla.Session.from_onnx(model, engine_cache=True, cache_dir=cache)
    np.testing.assert_allclose(untuned.run({"image": IMAGE})[0], expected(), rtol=1e-4)
    key_before = engine_key_of(model, cache)
    done = subprocess.run(
        [sys.executable, "-m", "odla_tvm.cli", "tune", model, "--trials", "2",
         "--cache-dir", str(cache)], capture_output=True, text=True, timeout=400,
        cwd=REPOSITORY, env={**os.environ, "PYTHONPATH": REPOSITORY,
                             "ODLA_TVM_ENGINE_CACHE": "1"})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and not RAW_TVM_LINE.search(done.stderr), done.stderr
    # The records went to the DEFAULT device's target, and the report ends with the model's
    # latency before and after and the kernels from records.
    target = default_target()
    assert f"tuned 1 kernels for {target.name}: 2 trials" in done.stdout, done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert re.match(r"model latency here: [\d.]+ ms before, [\d.]+ ms after tuning; \d+ of its 1 "
                    r"TVM kernels now come from records", last), done.stdout
    assert "kernels with records=1/1" in done.stderr
    database = targets.TuningDatabase(target, cache)
    assert database.directory.is_dir() and database.measurements()
    # Every record applies (its default schedule said to be slow): the next load compiles
    # them in, not reusing the engine cached before them.
    default_seconds_of(target, cache, 1.0)
    with caplog.at_level(logging.INFO, logger="odla_tvm.engine_cache"):
        tuned = odla.Session.from_onnx(model, engine_cache=True, cache_dir=cache)
    assert engine_key_of(model, cache) != key_before
    assert "changed since this model's engine was cached; recompiling" in caplog.text
    module = tuned.executable.module
    assert module.tuned_kernels and set(module.tuned_kernels) <= set(module.kernel_bindings)
    np.testing.assert_allclose(tuned.run({"image": IMAGE})[0], expected(), rtol=1e-4)
    # Only the engine built with the records stays.
    assert [e.key for e in engine_cache.entries(cache)] == [engine_key_of(model, cache)]


def default_seconds_of(spec, cache, seconds):
    database = targets.TuningDatabase(spec, cache)
    database.add_default_seconds(dict.fromkeys(database.default_seconds(), seconds))


def test_minutes_limit_the_whole_call(tmp_path):
    model = conv_exp_onnx(tmp_path / "conv_exp.onnx")
    minutes = 0.3
    started = time.monotonic()
    report = odla.tune(model, minutes=minutes, cache_dir=tmp_path / "cache", progress=False)
    took = time.monotonic() - started
    # A bound, not a speed: the builds and timing before and after the run included (on a
    # busy machine the build after it is left out to keep the limit, and the report says so).
    assert took < minutes * 60 + 8, took
    assert report.stopped_by == "minutes"
    if report.not_timed is None:
        assert report.latency_before_s is not None and report.latency_after_s is not None
    else:
        assert "the time limit left no time to build it again" in report.summary()


def test_pooling_kernels_tune_without_tvm_warnings(tmp_path, capfd):
    # TOPI marks its pools for a MetaSchedule rule no CPU target has: MetaSchedule warned
    # from C++, straight to the terminal, at every design space made for them.
    from tvm.s_tir import meta_schedule as ms

    pool = helper.make_graph(
        [helper.make_node("MaxPool", ["image"], ["out"], kernel_shape=[2, 2], strides=[2, 2])],
        "pool", [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 16, 16))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 3, 8, 8))])
    path = tmp_path / "pool.onnx"
    onnx.save(helper.make_model(pool, opset_imports=[helper.make_opsetid("", 13)]), path)
    comp = import_model(str(path))
    spec = targets.host_cpu()
    tasks = ms.relax_integration.extract_tasks(fused_kernels(comp.build_module(), spec),
                                               spec.tvm_target())
    assert tasks and "schedule_rule" not in tasks[0].dispatched[0].script()
    capfd.readouterr()
    for task in tasks:
        context = ms.TuneContext(mod=task.dispatched[0], target=spec.tvm_target(),
                                 space_generator="post-order-apply", num_threads=1)
        assert context.generate_design_space()
    assert not RAW_TVM_LINE.search(capfd.readouterr().err)
    odla.destroy_computation(comp)


def test_a_run_ends_where_another_batch_would_pass_the_limit():
    from targets.tuning.progress import OutOfTime, Progress

    class Task:
        weight = 1

    class Result:
        error_msg, run_secs = None, [0.001]

    progress = Progress([Task()], [None], [False], None, time.monotonic() + 60, "tuning", False)
    progress.update(0, [Result()])  # a quick batch, the limit far: on
    progress.batch_started -= 100  # a batch that took longer than the time left
    with pytest.raises(OutOfTime):
        progress.update(0, [Result()])
    assert progress.out_of_time and progress.trials == 2
    progress.close()
