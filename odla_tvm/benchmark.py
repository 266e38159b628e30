"""ODLA-TVM's speed against onnxruntime and OpenVINO on any ONNX models, and ODLA's own cost
per call (``odla-tvm bench``, scripts/bench.py, which write docs/perf.md and docs/perf.png).

Each model runs on these paths, each in a process of its own (odla_tvm/bench_worker.py) that
imports and compiles it, runs it when asked and reports its peak RSS at the end:

- ``default``: odla-tvm's DEFAULT device (the host CPU, oneDNN taking what it takes), loaded
  as a user's first Session.from_onnx loads it: compiled, and kept in an empty engine cache;
- ``tvm``: the INTEL_X86 device, TVM's build alone (timed in the turns where its first run
  is as quick as the others', else alone, on a small budget), loaded as a user's first
  Session.from_onnx loads it too;
- ``onnxruntime``: its CPU provider, the reference for outputs and ratios;
- ``openvino``: its CPU plugin, where the package is installed (the ``bench`` extra);
- ``tuned``: INTEL_X86 with the host-cpu tuning records, only where some apply to the model;
- ``cached``: DEFAULT again, in a new process, loading the engine the default path kept.

No path but ``tuned`` sees tuning records (each compiles with an empty CACHE_DIR). Every path
gets the same inputs (``model_inputs``) and threads; outputs are checked against
onnxruntime's. Default, tvm, onnxruntime, OpenVINO and tuned are timed in turns
(``latency_in_turns``), so drift in the machine's load reaches each alike.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import logging
import math
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import targets
from toolchain import cache_dir as default_cache_dir

from .computation import (
    create_argument,
    create_computation,
    set_computation_item,
    set_value_as_output,
)
from .context import bind_to_argument, create_context
from .device import _cpu_model
from .executable import compile_computation, launch_executable
from .ops.math import add
from .session import Session
from .types import ElementType, ItemType, OdlaError, Status, ValueType, check_count
from .version import __version__

log = logging.getLogger(__name__)

# Tuned ODLA-TVM is to reach onnxruntime's latency on these (docs/perf.md says how far it is).
TARGET_MODELS = ("resnet50", "squeezenet", "inception_v1", "vgg19")
LIGHT_MODELS = TARGET_MODELS + ("bvlc_alexnet", "densenet121", "inception_v2", "shufflenet",
                                "zfnet512")
MATCH_RTOL, MATCH_ATOL = 1e-3, 1e-4
PATHS = ("default", "tvm", "onnxruntime", "openvino", "tuned")
CACHED_GOAL_S = 2.0  # a second load of a model, from the engine cache, at most
IN_TURNS = ("default", "tvm", "onnxruntime", "openvino", "tuned")
COMPARED = ("default", "tvm", "openvino")  # ratios over onnxruntime, in the chart
# Goals over onnxruntime: (geo-mean at most, no model above).
GOALS = {"default": (1.0, 1.5), "tvm": (4.0, 10.0)}
# A pure-TVM first run slower than this is timed alone, before the turns (a turn lasts at least
# one run; 5 runs timed alone took 10-15% off one model in three benches).
IN_TURNS_MAX_S = 2.0
SLOW_RUN_S = 20.0  # a pure-TVM run slower than this is timed once
ALONE_BUDGET_S = 30.0  # pure-TVM timed runs stop at 3 once they add up to this
BENCH_EXTRA = "pip install -e '.[bench]'"
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_worker.py")


@dataclasses.dataclass
class PathResult:
    """One model on one path. ``seconds``: the median of ``runs`` timed runs (None: it did not
    run, ``error`` says why); ``load_s``: ONNX import and compile (ODLA paths) or session
    creation; ``match``: its outputs against onnxruntime's."""

    seconds: float | None = None
    runs: int = 0
    load_s: float | None = None
    peak_rss_mb: float | None = None
    match: bool | None = None
    target: str = ""  # ODLA paths: the target the device compiled for
    error: str = ""
    checks_s: float | None = None  # ODLA paths: a run's time in its run-time checks


@dataclasses.dataclass
class ModelResult:
    name: str
    path: str = ""
    paths: dict[str, PathResult] = dataclasses.field(default_factory=dict)
    tuned_kernels: int = 0  # kernels of the tuned build that took a schedule from the records
    kernels: int = 0  # kernels of the tuned build
    tuning_trials: int = 0  # trials the database's run log spent on this model
    tuning_minutes: float = 0.0
    error: str = ""  # the model did not run (onnxruntime, the reference, failed)

    def seconds(self, path: str) -> float | None:
        return self.paths[path].seconds if path in self.paths else None

    def ratio(self, path: str) -> float | None:
        """``path``'s latency over onnxruntime's (None where either did not run)."""
        seconds, reference = self.seconds(path), self.seconds("onnxruntime")
        return None if seconds is None or not reference else seconds / reference

    def summary(self) -> str:
        if self.error:
            return f"{self.name}: failed: {self.error}"
        parts = []
        for path in PATHS:
            if path in self.paths:
                ratio = self.ratio(path)
                parts.append(f"{path} {_ms(self.seconds(path))} ms"
                             + (f" ({ratio:.2f}x)" if ratio and path != "onnxruntime" else ""))
        return f"{self.name}: " + ", ".join(parts)


# -- the models and their inputs ----------------------------------------------------------------

def light_model_path(name: str) -> str:
    """The file of onnx's light model ``name`` (in the onnx package)."""
    import onnx

    if name not in LIGHT_MODELS:
        raise OdlaError(Status.INVALID_PARAM,
                        f"models ['{name}'] are not light models; choose from {list(LIGHT_MODELS)}")
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def read_model(path):
    """The onnx.ModelProto in ``path``; an OdlaError where it is missing or not ONNX."""
    import onnx

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise OdlaError(Status.FILE_NOT_EXIST, f"model file {path!r} does not exist")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as err:  # noqa: BLE001 (protobuf's DecodeError, and anything else)
        raise OdlaError(Status.INVALID_PARAM, f"{path!r} is not an ONNX model: {err}") from None
    if not model.graph.node or not model.graph.output:
        raise OdlaError(Status.INVALID_PARAM, f"{path!r} is not an ONNX model: no graph")
    return model


def model_inputs(model, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Data for each graph input (initializers excluded): floats seeded standard normal, int64
    inputs named like a mask ones, other integers seeded in [0, 1000), booleans seeded.
    A symbolic first dim takes ``batch``; any other symbolic dim is an error."""
    from onnx.helper import tensor_dtype_to_np_dtype

    check_count(batch, 1, "batch")
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = tuple(_fixed_dim(value.name, i, d, batch)
                      for i, d in enumerate(value.type.tensor_type.shape.dim))
        dtype = np.dtype(tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        if dtype.kind == "f":
            data = rng.standard_normal(shape)
        elif dtype == np.int64 and "mask" in value.name.lower():
            data = np.ones(shape)
        elif dtype.kind in "iu":
            data = rng.integers(0, min(1000, np.iinfo(dtype).max + 1), shape)
        elif dtype.kind == "b":
            data = rng.integers(0, 2, shape)
        else:
            raise OdlaError(Status.UNSUPPORTED_DATATYPE,
                            f"input {value.name!r} is {dtype}; the bench makes float, integer "
                            "and boolean inputs")
        feeds[value.name] = data.astype(dtype)
    return feeds


def _fixed_dim(name: str, index: int, dim, batch: int) -> int:
    if dim.HasField("dim_value") and dim.dim_value > 0:
        return dim.dim_value
    if index == 0:
        return batch
    raise OdlaError(Status.INVALID_PARAM,
                    f"input {name!r} dim {index} is symbolic ({dim.dim_param or 'unnamed'}); "
                    "the bench needs fixed dims but the first (the batch: --batch)")


# -- timing -------------------------------------------------------------------------------------

def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _turns(path):
    """``turn(untimed, timed) -> timed seconds`` of a path: a PathProcess, or a call."""
    if hasattr(path, "turn"):
        return path.turn

    def turn(untimed: int, timed: int) -> list[float]:
        for _ in range(untimed):
            path()
        return [_timed(path) for _ in range(timed)]

    return turn


def latency_in_turns(paths: dict, runs: int = 5, seconds: float = 3.0, turn_s: float = 0.25,
                     settle_s: float = 0.1, budget_s: float = 90.0) -> dict[str, tuple[float, int]]:
    """Per path (name -> a call, or a PathProcess): (median seconds, timed runs). The paths take
    turns, each running for about ``turn_s`` at a time, until each has at least ``runs`` timed
    runs that add up to ``seconds`` (or, once each has 3, when ``budget_s`` is spent). Turns
    spread the machine's drift over every path alike, where timing one path after another gave
    one path a quiet minute and the next a busy one. Each turn starts with ``settle_s`` idle
    and runs for a fifth of a turn untimed: the last path's thread pool spins on the cores after
    its run, and measured here the next path's runs took up to 10 times as long for ~50 ms."""
    turns = {name: _turns(path) for name, path in paths.items()}
    first = {name: max(turn(0, 1)[0], 1e-6) for name, turn in turns.items()}  # also a warm-up
    untimed = {name: math.ceil(turn_s / 5 / t) for name, t in first.items()}
    timed = {name: math.ceil(turn_s / t) for name, t in first.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    started = time.perf_counter()

    def wanted(name: str) -> bool:
        return len(times[name]) < runs or sum(times[name]) < seconds

    while any(wanted(name) for name in paths) and (
            min(len(t) for t in times.values()) < 3 or time.perf_counter() - started < budget_s):
        for name, turn in turns.items():
            if wanted(name):
                time.sleep(settle_s)
                times[name] += turn(untimed[name], timed[name])
    return {name: (statistics.median(t), len(t)) for name, t in times.items()}


def latency_alone(path, first_s: float, runs: int = 5, budget_s: float = ALONE_BUDGET_S,
                  slow_s: float = SLOW_RUN_S) -> tuple[float, int]:
    """(median seconds, timed runs) of a slow path (a call, or a PathProcess) whose warm-up
    run took ``first_s``: one timed run when that exceeded ``slow_s``, else ``runs``, or fewer
    (never under 3) once they add up to ``budget_s``."""
    turn = _turns(path)
    times: list[float] = []
    wanted = 1 if first_s > slow_s else runs
    while len(times) < wanted and (len(times) < 3 or sum(times) < budget_s):
        times += turn(0, 1)
    return statistics.median(times), len(times)


def per_call_us(call, calls: int = 20000, repeats: int = 7) -> float:
    """CPU microseconds per call of ``call``: the fastest of ``repeats`` loops of ``calls``
    calls. CPU time, not wall time: waiting for a core on a busy machine is not the call's."""
    for _ in range(calls // 10):
        call()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - start) / calls)
    return best * 1e6


def call_overhead(calls: int = 20000) -> dict[str, float]:
    """Microseconds per call on a tiny model (one add of a 1x4 float32 argument): the bare VM
    call on prepared device tensors, CompiledModule.run (NumPy in and out),
    launch_executable and Session.run."""
    comp = create_computation()
    with tempfile.TemporaryDirectory() as no_records:
        set_computation_item(comp, ItemType.CACHE_DIR, no_records)
        x = create_argument(ValueType(ElementType.FLOAT32, (1, 4)), "x")
        set_value_as_output(add(x, x))
        executable = compile_computation(comp)
    data = np.ones((1, 4), np.float32)
    context = create_context()
    bind_to_argument(x, data, context)
    session = Session(executable)
    feeds = {"x": data}
    return {
        "bare VM call": per_call_us(executable.module.bare_call([data]), calls),
        "CompiledModule.run": per_call_us(lambda: executable.module.run([data]), calls),
        "launch_executable": per_call_us(lambda: launch_executable(executable, context), calls),
        "Session.run": per_call_us(lambda: session.run(feeds), calls),
    }


# -- each path in its own process ----------------------------------------------------------------

class PathProcess:
    """One path of one model in a process of its own (bench_worker.py): it imports and
    compiles the model when started (``ready``: load_s, first_s, outputs, or ``error``), runs
    it when asked (``turn``), and reports its peak RSS in MB when closed."""

    def __init__(self, path: str, model: str, feeds: dict, threads: int, cache_dir: str):
        self.path = path
        self._stderr = tempfile.TemporaryFile()
        root = os.path.dirname(os.path.dirname(WORKER))  # odla_tvm, installed or not
        env = {**os.environ, "TVM_NUM_THREADS": str(threads),
               "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), root]))}
        # -P: the worker's folder (odla_tvm/, with its types.py) stays off sys.path.
        self._process = subprocess.Popen([sys.executable, "-P", WORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        try:
            self._send({"path": path, "model": model, "feeds": feeds, "threads": threads,
                        "cache_dir": cache_dir})
            self.ready = self._receive()
        except OdlaError as err:
            self.ready = {"error": err.message}
        self.error = self.ready.get("error", "")

    def _send(self, message) -> None:
        try:
            pickle.dump(message, self._process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died()

    def _receive(self):
        try:
            return pickle.load(self._process.stdout)
        except (EOFError, pickle.UnpicklingError):
            self._died()

    def _died(self):
        code = self._process.wait()
        self._stderr.seek(0)
        tail = " / ".join(self._stderr.read().decode(errors="replace").strip().splitlines()[-3:])
        raise OdlaError(Status.FAILURE,
                        f"the {self.path} process ended (exit code {code}): {tail[-400:]}")

    def turn(self, untimed: int, timed: int) -> list[float]:
        self._send(("turn", untimed, timed))
        return self._receive()

    def checks(self, runs: int) -> float | None:
        """The median seconds a run spends in run-time checks, over ``runs`` profiled runs."""
        self._send(("checks", runs))
        return self._receive()

    def close(self) -> float | None:
        """The process's peak RSS in MB (None when it had died), after it ends."""
        rss = None
        if self._process.poll() is None:
            try:
                self._send(("close",))
                rss = self._receive()
            except OdlaError:
                pass
        if self._process.poll() is None:
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._stderr.close()
        return rss


def openvino_missing() -> str | None:
    """Why the openvino path cannot run here (None when it can)."""
    try:
        import openvino  # noqa: F401
    except ImportError as err:
        return f"OpenVINO is not installed ({err}); {BENCH_EXTRA}"
    return None


def _matches(outputs, expected) -> bool:
    return len(outputs) == len(expected) and all(
        np.shape(o) == np.shape(e) and np.allclose(o, e, rtol=MATCH_RTOL, atol=MATCH_ATOL)
        for o, e in zip(outputs, expected))


# -- the bench ----------------------------------------------------------------------------------

def bench_model(name: str, model_path: str, threads: int = 2, runs: int = 5, cache_dir=None,
                batch: int = 1, seconds: float = 3.0) -> ModelResult:
    """Times the ONNX model in ``model_path`` on every path (see the module's doc): onnxruntime
    first (the reference), then the rest in turns (the pure-TVM build alone first, where its
    first run is slower than IN_TURNS_MAX_S)."""
    result = ModelResult(name, os.fspath(model_path))
    feeds = model_inputs(read_model(model_path), batch)
    tuning_dir = cache_dir if cache_dir is not None else default_cache_dir()
    processes: dict[str, PathProcess] = {}
    expected = None

    def start(path: str, cache: str) -> PathProcess | None:
        log.info("%s: %s: importing and compiling", name, path)
        process = processes[path] = PathProcess(path, result.path, feeds, threads, cache)
        ready = process.ready
        result.paths[path] = PathResult(load_s=ready.get("load_s"), target=ready.get("target", ""),
                                        error=process.error)
        if process.error:
            stop(path)
            return None
        if expected is not None:
            result.paths[path].match = _matches(ready.pop("outputs"), expected)
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
            start("default", engines)  # keeps its engine there, as a first load does
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
            for path in list(processes):
                stop(path)
            if "default" in result.paths and not result.paths["default"].error:
                if start("cached", engines) is not None:  # reads what default kept
                    stop("cached")
        finally:
            for path in list(processes):
                stop(path)
    return result


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


def model_files(files=(), names=()) -> list[tuple[str, str]]:
    """(name, path) of each light model named (its file in the onnx package, named like it:
    light_<name>, apart from a real model of that name; an unknown name is an error) and of
    each ONNX file (named by its file; bench_models checks the files)."""
    unknown = [n for n in names if n not in LIGHT_MODELS]
    if unknown:
        raise OdlaError(Status.INVALID_PARAM,
                        f"models {unknown} are not light models; choose from {list(LIGHT_MODELS)}")
    models = [(f"light_{name}", light_model_path(name)) for name in names]
    models += [(os.path.splitext(os.path.basename(os.fspath(f)))[0], os.fspath(f)) for f in files]
    return models


def bench_models(models: list[tuple[str, str]], threads: int = 2, runs: int = 5, cache_dir=None,
                 batch: int = 1, seconds: float = 3.0, on_result=None) -> list[ModelResult]:
    """Times each (name, ONNX path); a model that fails is reported with its error. Every
    model's file and inputs are checked first."""
    check_count(threads, 1, "threads")
    check_count(runs, 3, "runs")
    for _, path in models:
        model_inputs(read_model(path), batch)
    results = []
    for name, path in models:
        try:
            result = bench_model(name, path, threads, runs, cache_dir, batch, seconds)
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


# -- the report ---------------------------------------------------------------------------------

def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.1f}" if seconds >= 1e-3 else f"{seconds * 1e3:.3f}"


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _each(values, fmt) -> str:
    """``a / b / c``, one per path, ``-`` where missing."""
    return " / ".join("-" if v is None else fmt(v) for v in values)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def geo_mean(values) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _ratios(results: list[ModelResult], path: str) -> dict[str, float]:
    return {r.name: r.ratio(path) for r in results if not r.error and r.ratio(path) is not None}


def _machine_section(threads, seconds, load) -> list[str]:
    cores = targets.cpu_count()
    return [
        "# Performance: ODLA-TVM against onnxruntime and OpenVINO",
        "",
        (f"Written by `scripts/bench.py` (`odla-tvm bench`) in {seconds / 60:.0f} min on "
         f"{_cpu_model()}, {cores} cores usable, {platform.system()} {platform.release()}; "
         f"odla-tvm {__version__}, TVM {targets.tvm_version()}, onnxruntime "
         f"{_version('onnxruntime')}, OpenVINO {_version('openvino')}, NumPy {np.__version__}. "
         f"Load average (1 min) {load[0]:.1f} at the start and {load[1]:.1f} at the end: above "
         f"{cores}, other work shared the cores and every figure is slower than on an idle "
         "machine."),
        "",
        (f"Batch 1 (or `--batch`), {threads} threads on every path (TVM_NUM_THREADS, which "
         "oneDNN follows; onnxruntime's intra_op_num_threads; OpenVINO's "
         "INFERENCE_NUM_THREADS, with float32 inference precision), "
         "the same inputs (floats seeded standard normal, masks ones, token ids seeded in "
         "[0, 1000)), no tuning records but in *tuned*. Each path runs in a process of its own "
         "that imports and compiles the model, runs it and reports its peak RSS "
         "(VmHWM: compiling counts; ODLA's processes also hold TVM, about 230 MB). "
         "*default*: odla-tvm's DEFAULT device (oneDNN takes convolutions, matmuls, softmax and "
         "layer norms; TVM compiles the rest; a graph with 35% or more of its multiply-adds "
         "in 3x3 stride-1 convolutions, which TVM computes by Winograd, or 95% or more in "
         "matmuls, as transformers have, goes to TVM whole). *tvm*: the INTEL_X86 device, "
         "TVM's build alone, "
         f"timed in the turns where its first run took at most {IN_TURNS_MAX_S:g} s, else alone "
         f"after a warm-up run: 5 runs, at least 3 once they take {ALONE_BUDGET_S:.0f} s, 1 "
         f"where the warm-up took over {SLOW_RUN_S:.0f} s. "
         "*default*, *tvm*, onnxruntime, OpenVINO and *tuned* are timed in turns of about 0.25 s "
         "(each after 0.1 s idle and 0.05 s of untimed runs) until each has at least 5 runs and "
         "3 s of them. Figures are medians; ratios are latency over onnxruntime's (under 1.0x: "
         f"faster). *Match*: outputs within rtol {MATCH_RTOL:g}, atol {MATCH_ATOL:g} of "
         "onnxruntime's. *Compile*: ONNX import and compile (odla-tvm; *default* and *tvm* also "
         "keep the engine in the engine cache, on by default, and run from the kept library "
         "and its memory-mapped weights, as a user's first Session.from_onnx does), session "
         "creation "
         "(onnxruntime, OpenVINO). *Cached load*: a second Session.from_onnx of the model on the "
         "DEFAULT device in a new process, reading the engine *default* kept in the engine "
         f"cache (goal: at most {CACHED_GOAL_S:g} s), and whether its outputs match. "
         "*Checks*: what a run spends in its run-time checks (indices, "
         "divisors, run-time shapes and sizes: their counting kernels and host calls), the "
         "median of profiled runs, and its share of the path's latency."),
        "",
    ]


def _table_section(results: list[ModelResult]) -> list[str]:
    lines = [
        ("| model | default ms | tvm ms | onnxruntime ms | openvino ms | default / ort "
         "| tvm / ort | openvino / ort | compile s (default / tvm / ort / ov) "
         "| peak RSS MB (default / tvm / ort / ov) | match (default / tvm / ov) "
         "| cached load s (match) | checks ms (default / tvm) | runs (turns / tvm) |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: "
        "| ---: | ---: |",
    ]
    four = ("default", "tvm", "onnxruntime", "openvino")
    for r in results:
        if r.error:
            lines.append(f"| {r.name} | failed: {r.error.replace('|', '/')} |" + " |" * 13)
            continue
        path = r.paths.get
        turns = min((path(p).runs for p in IN_TURNS if p != "tvm" and path(p) and path(p).runs),
                    default=None)
        lines.append(
            f"| {r.name} | {' | '.join(_ms(r.seconds(p)) for p in four)} | "
            f"{' | '.join(_x(r.ratio(p)) for p in COMPARED)} | "
            f"{_each([path(p) and path(p).load_s for p in four], '{:.1f}'.format)} | "
            f"{_each([path(p) and path(p).peak_rss_mb for p in four], '{:.0f}'.format)} | "
            f"{_each([path(p) and path(p).match for p in COMPARED], _yes_no)} | "
            f"{_cached_load(path('cached'))} | "
            f"{_each([_check_share(r, p) for p in ('default', 'tvm')], str)} | "
            f"{_each([turns, path('tvm') and path('tvm').runs or None], str)} |")
    return lines + [""]


def _cached_load(cached: PathResult | None) -> str:
    if cached is None or cached.load_s is None:
        return "-"
    return f"{cached.load_s:.2f} ({_yes_no(cached.match)})"


def _check_share(result: ModelResult, path: str) -> str | None:
    """A run's time in run-time checks on ``path``, and its share of the path's latency."""
    checks, seconds = (getattr(result.paths.get(path), name, None)
                       for name in ("checks_s", "seconds"))
    if checks is None or not seconds:
        return None
    return f"{checks * 1e3:.2f} ({checks / seconds:.1%})"


def _yes_no(match: bool) -> str:
    return "yes" if match else "no"


def _notes_section(results: list[ModelResult]) -> list[str]:
    """Why a path did not run, and which target each ODLA path compiled for."""
    notes = [f"- {r.name}, {p}: did not run: {result.error.replace(chr(10), ' ')[:300]}"
             for r in results for p, result in r.paths.items() if result.error]
    compiled = {(p, result.target) for r in results for p, result in r.paths.items()
                if result.target}
    if compiled:
        notes.append("- Targets compiled for: " + ", ".join(
            f"{p} `{target}`" for p, target in sorted(compiled)) + ".")
    return notes + [""] if notes else []


def _geo_mean_section(results: list[ModelResult]) -> list[str]:
    lines = ["## Geo-means over onnxruntime", "",
             "| path | models | geo-mean | max (model) | goal | goal met |",
             "| --- | ---: | ---: | --- | --- | --- |"]
    for path in COMPARED:
        ratios = _ratios(results, path)
        if not ratios:
            lines.append(f"| {path} | 0 | - | - | {_goal_text(path)} | - |")
            continue
        worst = max(ratios, key=ratios.get)
        lines.append(f"| {path} | {len(ratios)} | {_x(geo_mean(ratios.values()))} | "
                     f"{_x(ratios[worst])} ({worst}) | {_goal_text(path)} | "
                     f"{_goal_met(path, ratios)} |")
    cached = {r.name: r.paths["cached"].load_s for r in results
              if "cached" in r.paths and r.paths["cached"].load_s is not None}
    if cached:
        slowest = max(cached, key=cached.get)
        met = "met" if cached[slowest] <= CACHED_GOAL_S else "not met"
        lines += ["", f"Cached load (DEFAULT, from the engine cache), over {len(cached)} models: "
                  f"at most {cached[slowest]:.2f} s ({slowest}); goal at most "
                  f"{CACHED_GOAL_S:g} s: {met}."]
    return lines + [""]


def _goal_text(path: str) -> str:
    if path not in GOALS:
        return "-"
    geo, most = GOALS[path]
    return f"geo-mean at most {geo:.1f}x, no model above {most:.1f}x"


def _goal_met(path: str, ratios: dict[str, float]) -> str:
    if path not in GOALS:
        return "-"
    geo, most = GOALS[path]
    above = [name for name, ratio in ratios.items() if ratio > most]
    failed = ([f"geo-mean {geo_mean(ratios.values()):.2f}x"] if geo_mean(ratios.values()) > geo
              else []) + ([f"above {most:.1f}x: {', '.join(above)}"] if above else [])
    return "met" if not failed else f"not met ({'; '.join(failed)})"


def _tuned_section(results: list[ModelResult], cache_dir) -> list[str]:
    tuned = [r for r in results if "tuned" in r.paths]
    if not tuned:
        return []
    records = f"`{cache_dir}`" if cache_dir else "the user's cache directory"
    lines = ["## Tuned builds", "",
             (f"INTEL_X86 compiled with the host-cpu tuning database in {records} "
              "(`odla-tvm tune`), for the models tuned into it, timed in the turns; *tuned "
              "kernels*: those that took a schedule from its records, of all the kernels."), "",
             "| model | tuned ms | tuned / ort | tuned kernels | tuning spent | match |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    for r in tuned:
        lines.append(f"| {r.name} | {_ms(r.seconds('tuned'))} | {_x(r.ratio('tuned'))} | "
                     f"{r.tuned_kernels} of {r.kernels} | {r.tuning_trials} trials, "
                     f"{r.tuning_minutes:.1f} min | {_each([r.paths['tuned'].match], _yes_no)} |")
    goal = [r for r in results if r.name in TARGET_MODELS and not r.error]
    missed = [r.name for r in goal if r.ratio("tuned") is None or r.ratio("tuned") > 1.0]
    if goal:
        lines += ["", f"Goal: tuned at most 1.0x onnxruntime on {', '.join(r.name for r in goal)}: "
                  + (f"not met for {', '.join(missed)}." if missed else "met.")]
    return lines + [""]


def _chart_section(chart: str | None, why_not: str) -> list[str]:
    if chart:
        return [f"![Latency over onnxruntime's per model]({chart})", ""]
    return [f"No chart: {why_not}.", ""]


def _overhead_section(overhead: dict[str, float]) -> list[str]:
    bare = overhead["bare VM call"]
    lines = [
        "## ODLA's own cost per call",
        "",
        ("A tiny model (one add of a 1x4 float32 argument), CPU microseconds per call (the "
         "process's CPU time, so other work on the machine does not count), the fastest of 7 "
         "loops of 20000 calls. The bare VM call gets device tensors made beforehand and "
         "returns TVM tensors; every other path takes and returns NumPy arrays."),
        "",
        "| call | µs per call | over the bare VM call |",
        "| --- | ---: | ---: |",
    ]
    return lines + [f"| {name} | {us:.2f} | {us - bare:+.2f} |" for name, us in overhead.items()]


def report(results: list[ModelResult], overhead: dict[str, float], threads: int,
           seconds: float, load: tuple[float, float], cache_dir=None, chart: str | None = None,
           why_no_chart: str = "") -> str:
    """docs/perf.md. ``load``: the 1-minute load average when the run started and when it
    ended; ``cache_dir``: where the tuning records came from (None: the user's cache);
    ``chart``: the chart's file name beside the report (None: ``why_no_chart``)."""
    lines = (_machine_section(threads, seconds, load) + _table_section(results)
             + _notes_section(results) + _geo_mean_section(results)
             + _chart_section(chart, why_no_chart) + _tuned_section(results, cache_dir)
             + _overhead_section(overhead))
    return "\n".join(lines) + "\n"


def chart(results: list[ModelResult], path: str, threads: int = 2) -> str | None:
    """Writes the PNG chart of each model's ratios over onnxruntime (default, tvm, openvino;
    log axis, value labels, a line at 1.0, hatched where outputs did not match) to ``path``.
    None when written, else why not (no matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"matplotlib is not installed; {BENCH_EXTRA}"
    ratios = {p: _ratios(results, p) for p in COMPARED}
    names = [r.name for r in results if any(r.name in ratios[p] for p in COMPARED)]
    if not names:
        return "no model ran on a path beside onnxruntime"
    width = 0.8 / len(COMPARED)
    figure, axes = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2), 4.5))
    missed = []  # bars of paths whose outputs missed onnxruntime's: hatched
    by_name = {r.name: r for r in results}
    for i, p in enumerate(COMPARED):
        shown = [name for name in names if name in ratios[p]]
        values = [ratios[p][name] for name in shown]
        bars = axes.bar([names.index(name) + (i - 1) * width for name in shown], values, width,
                        label=p)
        missed += [bar for bar, name in zip(bars, shown) if by_name[name].paths[p].match is False]
        axes.bar_label(bars, [f"{v:.2f}x" if v < 10 else f"{v:.0f}x" for v in values],
                       fontsize=7, rotation=90, padding=2)
    axes.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="onnxruntime")
    axes.set_yscale("log")
    every = [v for p in COMPARED for v in ratios[p].values()]
    axes.set_ylim(min(0.5, min(every) / 1.5), max(2.0, max(every)) * 4)  # room for the labels
    axes.set_xticks(range(len(names)), names, rotation=30, ha="right")
    axes.set_ylabel("latency / onnxruntime's (log; lower is faster)")
    axes.set_title(f"odla-tvm and OpenVINO over onnxruntime, batch 1, {threads} threads"
                   "\n(hatched: outputs differ from onnxruntime's)", fontsize=10)
    axes.legend(fontsize=8, loc="upper left")
    for bar in missed:  # after the legend, which would copy the first bar's hatch
        bar.set_hatch("//")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None
