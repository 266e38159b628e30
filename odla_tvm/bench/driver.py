"""The bench: each model timed on every path, each path in a process of its own.

Paths: ``default``, odla-tvm's DEFAULT device, loaded as a user's first Session.from_onnx
loads it; ``tvm``, the INTEL_X86 device (TVM's build alone), loaded alike; ``onnxruntime``,
the reference for outputs and ratios; ``openvino`` where installed (the ``bench`` extra);
``tuned``, INTEL_X86 with the host-cpu tuning records where some apply; ``cached``, DEFAULT
again in a new process that imports odla_tvm alone and loads the engine ``default`` kept (what
a served process does). Only ``tuned`` sees tuning records; every path gets the same inputs
and threads, and they are timed in turns (timing.latency_in_turns) so that drift in the
machine's load reaches each alike. In a reduced precision, the ODLA paths and OpenVINO compute
in it (onnxruntime, the reference, in float32), and each path's accuracy against
onnxruntime's outputs is noted. In int8 (``--precision int8``) every path runs the quantized
file as it is (made by quantize.py), accuracy is against the float32 file's outputs on
onnxruntime, the cached path is left out and ``float32`` (DEFAULT on the float32 file) is
timed in the turns too.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile

import numpy as np

import targets
from toolchain import cache_dir as default_cache_dir

from ..types import OdlaError, Status, check_count
from .accuracy import accuracy
from .models import LIGHT_MODELS, model_files, model_inputs, read_model
from .process import PathProcess
from .quantize import float32_outputs, float_model
from .results import (FIRST_RESULT_PROCESSES, FLOAT32_PATH, INT8, MATCH_ATOL, MATCH_RTOL,
                      PATHS, ModelResult, PathResult)
from .timing import latency_alone, latency_in_turns

log = logging.getLogger(__name__)

IN_TURNS = PATHS
# A pure-TVM first run slower than this is timed alone, before the turns (a turn lasts at least
# one run, and such a model timed alone measured faster than in turns).
IN_TURNS_MAX_S = 2.0
BENCH_EXTRA = "pip install -e '.[bench]'"


def _missing(module: str, name: str) -> str | None:
    """Why ``module`` cannot be imported here, with the command that installs it (None when
    it is installed). Only looked up: its path's own process imports it."""
    if importlib.util.find_spec(module) is None:
        return f"{name} is not installed (no module named {module!r}); {BENCH_EXTRA}"
    return None


def openvino_missing() -> str | None:
    """Why the openvino path cannot run here (None when it can)."""
    return _missing("openvino", "OpenVINO")


def onnxruntime_missing() -> str | None:
    """Why the onnxruntime path, every model's reference, cannot run here (None when it can)."""
    return _missing("onnxruntime", "onnxruntime")


def _matches(outputs, expected) -> bool:
    return len(outputs) == len(expected) and all(
        np.shape(o) == np.shape(e) and np.allclose(o, e, rtol=MATCH_RTOL, atol=MATCH_ATOL)
        for o, e in zip(outputs, expected))


def bench_model(name: str, model_path: str, threads: int = 2, runs: int = 5, cache_dir=None,
                batch: int = 1, seconds: float = 3.0, precision: str | None = None) -> ModelResult:
    """Times the ONNX model in ``model_path`` on every path (see the module's doc): onnxruntime
    first (the reference), then the rest in turns (the pure-TVM build alone first, where its
    first run is slower than IN_TURNS_MAX_S); ``precision``: as Session.from_onnx's."""
    precision = None if precision == "fp32" else precision
    result = ModelResult(name, os.fspath(model_path), precision=precision)
    feeds = model_inputs(read_model(model_path), batch)
    tuning_dir = cache_dir if cache_dir is not None else default_cache_dir()
    processes: dict[str, PathProcess] = {}
    expected = None
    # int8: every path runs the quantized file as it is; accuracy is against float32's.
    compiled_in = None if precision == INT8 else precision
    float32 = float32_outputs(model_path, feeds, threads) if precision == INT8 else None

    def start(path: str, cache: str, model: str = result.path) -> PathProcess | None:
        log.info("%s: %s: importing and compiling", name, path)
        process = processes[path] = PathProcess(path, model, feeds, threads, cache,
                                                None if path == FLOAT32_PATH else compiled_in)
        ready = process.ready
        result.paths[path] = PathResult(load_s=ready.get("load_s"), target=ready.get("target", ""),
                                        error=process.error,
                                        compiler_mapped=ready.get("compiler_mapped"),
                                        runner=ready.get("runner", ""),
                                        import_s=ready.get("import_s"),
                                        first_s=ready.get("first_s"))
        if process.error:
            stop(path)
            return None
        if float32 is not None and path != FLOAT32_PATH:
            result.paths[path].accuracy = accuracy(ready["outputs"], float32)
        if expected is not None and float32 is None:
            outputs = ready.pop("outputs")
            result.paths[path].match = _matches(outputs, expected)
            if precision is not None and float32 is None:
                result.paths[path].accuracy = accuracy(outputs, expected)
        return process

    def stop(path: str) -> None:
        result.paths[path].peak_rss_mb = processes.pop(path).close()

    with tempfile.TemporaryDirectory() as no_records, tempfile.TemporaryDirectory() as engines:
        try:
            reference = start("onnxruntime", no_records)
            if reference is None:
                result.error = f"onnxruntime: {result.paths['onnxruntime'].error}"
                return result
            expected = reference.ready.pop("outputs")
            tvm = start("tvm", no_records)
            if tvm is not None and tvm.ready["first_s"] > IN_TURNS_MAX_S:
                latency = latency_alone(tvm, tvm.ready["first_s"], runs)
                result.paths["tvm"].seconds, result.paths["tvm"].runs = latency
                result.paths["tvm"].checks_s = tvm.checks(1)
                stop("tvm")
            if start("default", engines) is not None and float32 is None:  # keeps its engine
                start("cached", engines)  # reads it; timed in the turns beside default
            if float32 is not None:  # odla-tvm's float32 build of the file quantized
                start(FLOAT32_PATH, engines, float_model(model_path))
            elif precision is not None:
                start(FLOAT32_PATH, engines)  # what the precision is measured against
            missing = openvino_missing()
            if missing:
                result.paths["openvino"] = PathResult(error=missing)
            else:
                start("openvino", no_records)
            if targets.find_database(targets.host_cpu(), tuning_dir) is not None:
                _tuned(result, start("tuned", os.fspath(tuning_dir)), tuning_dir, stop)
            latency = latency_in_turns({p: processes[p] for p in IN_TURNS if p in processes},
                                       runs, seconds)
            for path, (median, timed) in latency.items():
                result.paths[path].seconds, result.paths[path].runs = median, timed
            for path in ("default", "tvm"):
                if path in processes:
                    result.paths[path].checks_s = processes[path].checks(runs)
            if "cached" in processes:
                _more_first_results(result, feeds, threads, engines, precision)
        finally:
            for path in list(processes):
                stop(path)
    return result


def _more_first_results(result: ModelResult, feeds: dict, threads: int, engines: str,
                        precision: str | None) -> None:
    """Load + first run of the cached path and of onnxruntime in FIRST_RESULT_PROCESSES - 1
    further processes each, started in turns: a single start varies by tens of ms."""
    for _ in range(FIRST_RESULT_PROCESSES - 1):
        for path in ("onnxruntime", "cached"):
            process = PathProcess(path, result.path, feeds, threads, engines, precision)
            if not process.error:
                result.paths[path].more_first_results_s.append(
                    process.ready["load_s"] + process.ready["first_s"])
            process.close()


def _tuned(result: ModelResult, process, tuning_dir, stop) -> None:
    """The tuned path's kernel counts and tuning spent; dropped where no record applied."""
    if process is None:
        return
    result.tuned_kernels = process.ready["tuned_kernels"]
    if not result.tuned_kernels:
        stop("tuned")
        del result.paths["tuned"]
        return
    result.kernels = process.ready["kernels"]
    label = os.path.splitext(os.path.basename(result.path))[0]
    log_runs = targets.TuningDatabase(targets.host_cpu(), tuning_dir).metadata().get("runs", [])
    spent = [run for run in log_runs if run.get("label") == label]
    result.tuning_trials = sum(run["trials"] for run in spent)
    result.tuning_minutes = sum(run["seconds"] for run in spent) / 60


def bench_models(models: list[tuple[str, str]], threads: int = 2, runs: int = 5, cache_dir=None,
                 batch: int = 1, seconds: float = 3.0, on_result=None,
                 precision: str | None = None) -> list[ModelResult]:
    """Times each (name, ONNX path) in ``precision`` (see bench_model); a model that fails is
    reported with its error. Every model's file and inputs are checked first."""
    check_count(threads, 1, "threads")
    check_count(runs, 3, "runs")
    missing = onnxruntime_missing()
    if missing:
        raise OdlaError(Status.DL_ERROR, missing)
    for _, path in models:
        model_inputs(read_model(path), batch)
    results = []
    for name, path in models:
        try:
            result = bench_model(name, path, threads, runs, cache_dir, batch, seconds, precision)
        except Exception as err:  # noqa: BLE001 (one model's failure is a row of the report)
            result = ModelResult(name, path, error=f"{type(err).__name__}: {err}"[:300])
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def bench_light_models(names=LIGHT_MODELS, threads: int = 2, runs: int = 5, cache_dir=None,
                       on_result=None) -> list[ModelResult]:
    """Times each named light model (see bench_models)."""
    return bench_models(model_files(names=names), threads, runs, cache_dir, on_result=on_result)
