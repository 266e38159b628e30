"""Speed against onnxruntime on onnx's light CNNs, and ODLA's own cost per call
(``odla-tvm bench``, scripts/bench.py, which write docs/perf.md).

Each model runs through ODLA-TVM untuned (compiled with no tuning records), tuned (with the
records of the target's tuning database, when it has some for the model), and through
onnxruntime's CPU provider: the same inputs, the same thread count, the median of several
timed runs after a warm-up. The light models' weights are ConstantOfShape fills, so their
outputs do not depend on their inputs; that does not change their speed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import statistics
import tempfile
import time

import numpy as np

import targets
from targets.runner import cache_dir as default_cache_dir

from .computation import (
    create_argument,
    create_computation,
    set_computation_item,
    set_value_as_output,
)
from .context import bind_to_argument, create_context
from .device import _cpu_model, allocate_device
from .executable import compile_computation, launch_executable
from .ops.math import add
from .session import Session
from .types import DeviceName, ElementType, ItemType, OdlaError, Status, ValueType, check_count
from .version import __version__

# Tuned ODLA-TVM is to reach onnxruntime's latency on these (docs/perf.md says how far it is).
TARGET_MODELS = ("resnet50", "squeezenet", "inception_v1", "vgg19")
ONEDNN_GOAL = 1.2  # the oneDNN device's untuned latency on resnet50, over onnxruntime's
LIGHT_MODELS = TARGET_MODELS + ("bvlc_alexnet", "densenet121", "inception_v2", "shufflenet",
                                "zfnet512")
MATCH_RTOL, MATCH_ATOL = 1e-3, 1e-4


@dataclasses.dataclass
class ModelTimes:
    """Median seconds per run of one model on each path (None: that path did not run)."""

    name: str
    untuned_s: float | None = None
    tuned_s: float | None = None
    onnxruntime_s: float | None = None
    tuned_kernels: int = 0  # kernels that took a schedule from the tuning database
    kernels: int = 0  # kernels of the tuned build (0: not tuned)
    tuning_trials: int = 0  # trials the database's run log spent on this model
    tuning_minutes: float = 0.0
    runs: int = 0  # timed runs of the path that had fewest (slow paths stop sooner)
    outputs_match: bool | None = None  # ODLA-TVM's outputs against onnxruntime's
    onednn_s: float | None = None  # through the INTEL_DNNL device (the oneDNN plugin), untuned
    error: str = ""

    def summary(self) -> str:
        if self.error:
            return f"{self.name}: failed: {self.error}"
        return (f"{self.name}: untuned {_ms(self.untuned_s)} ms, tuned {_ms(self.tuned_s)} ms, "
                f"oneDNN {_ms(self.onednn_s)} ms, onnxruntime {_ms(self.onnxruntime_s)} ms")


def median_latency(run, warmup: int = 1, runs: int = 5, budget_s: float = 30.0):
    """(median seconds, timed runs) of ``run`` after ``warmup`` calls: ``runs`` timed calls,
    or fewer (never under 3) once they take ``budget_s`` together."""
    for _ in range(warmup):
        run()
    times: list[float] = []
    while len(times) < runs and (len(times) < 3 or sum(times) < budget_s):
        times.append(_timed(run))
    return statistics.median(times), len(times)


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def latency_in_turns(paths: dict, runs: int = 5, seconds: float = 3.0, turn_s: float = 0.25,
                     settle_s: float = 0.1, budget_s: float = 90.0) -> dict[str, tuple[float, int]]:
    """Per path (name -> a call): (median seconds, timed runs). The paths take turns, each
    running for about ``turn_s`` at a time, until each has at least ``runs`` timed runs that
    add up to ``seconds`` (or, once each has 3, when ``budget_s`` is spent). Turns spread the
    machine's drift over every path alike, where timing one path after another gave one path
    a quiet minute and the next a busy one. Each turn starts with ``settle_s`` idle and runs
    for a fifth of a turn untimed: the last path's thread pool spins on the cores after its
    run, and measured here the next path's runs took up to 10 times as long for ~50 ms."""
    first = {name: max(_timed(run), 1e-6) for name, run in paths.items()}  # also a warm-up
    untimed = {name: math.ceil(turn_s / 5 / t) for name, t in first.items()}
    timed = {name: math.ceil(turn_s / t) for name, t in first.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    started = time.perf_counter()

    def wanted(name: str) -> bool:
        return len(times[name]) < runs or sum(times[name]) < seconds

    while any(wanted(name) for name in paths) and (
            min(len(t) for t in times.values()) < 3 or time.perf_counter() - started < budget_s):
        for name, run in paths.items():
            if wanted(name):
                time.sleep(settle_s)
                for _ in range(untimed[name]):
                    run()
                times[name] += [_timed(run) for _ in range(timed[name])]
    return {name: (statistics.median(t), len(t)) for name, t in times.items()}


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


def _onnxruntime(model_bytes: bytes, threads: int):
    try:
        import onnxruntime
    except ImportError:
        raise OdlaError(Status.FAILURE, "onnxruntime is not installed; install the test extra: "
                        "pip install -e '.[test]'") from None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _session(model, cache_dir, device=None) -> Session:
    """A session over ``model`` compiled for ``device`` (this CPU when None) with the tuning
    records in ``cache_dir``."""
    from .frontends.onnx import import_model

    comp = import_model(model)
    set_computation_item(comp, ItemType.CACHE_DIR, os.fspath(cache_dir))
    return Session(comp, device)


def _onednn_device():
    """The INTEL_DNNL device (oneDNN through its plugin), or None where oneDNN is missing."""
    try:
        return allocate_device(device_name=DeviceName.INTEL_DNNL)
    except OdlaError:
        return None


def bench_model(case, threads: int, runs: int, cache_dir=None) -> ModelTimes:
    """Times one light model (an onnx_conformance Case) on every path: the untuned build
    alone (it is slow), then onnxruntime, oneDNN and the tuned build in turns."""
    name = case.name.removeprefix("test_")
    result = ModelTimes(name)
    initializers = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in initializers]
    feeds = dict(zip(names, case.inputs, strict=True))
    ort_session = _onnxruntime(case.model.SerializeToString(), threads)
    expected = ort_session.run(None, feeds)
    with tempfile.TemporaryDirectory() as no_records:
        untuned = _session(case.model, no_records)
    outputs = {"untuned": untuned.run(feeds)}
    result.untuned_s, result.runs = median_latency(lambda: untuned.run(feeds), runs=runs)
    paths = {"onnxruntime": lambda: ort_session.run(None, feeds)}
    onednn_device = _onednn_device()
    if onednn_device is not None:
        with tempfile.TemporaryDirectory() as no_records:
            onednn = _session(case.model, no_records, onednn_device)
        outputs["onednn"] = onednn.run(feeds)
        paths["onednn"] = lambda: onednn.run(feeds)
    tuning_dir = cache_dir if cache_dir is not None else default_cache_dir()
    tuned = _session(case.model, tuning_dir)
    result.tuned_kernels = len(tuned.executable.module.tuned_kernels)
    if result.tuned_kernels:
        result.kernels = len(tuned.executable.module.kernel_bindings)
        outputs["tuned"] = tuned.run(feeds)
        paths["tuned"] = lambda: tuned.run(feeds)
    latency = latency_in_turns(paths, runs)
    result.onnxruntime_s = latency["onnxruntime"][0]
    result.onednn_s = latency.get("onednn", (None,))[0]
    result.tuned_s = latency.get("tuned", (None,))[0]
    result.runs = min([result.runs] + [timed for _, timed in latency.values()])
    result.outputs_match = all(np.allclose(o, e, rtol=MATCH_RTOL, atol=MATCH_ATOL)
                               for path in outputs.values()
                               for o, e in zip(path, expected, strict=True))
    log = targets.TuningDatabase(targets.host_cpu(), tuning_dir).metadata().get("runs", [])
    spent = [run for run in log if run.get("label") == f"light_{name}"]
    result.tuning_trials = sum(run["trials"] for run in spent)
    result.tuning_minutes = sum(run["seconds"] for run in spent) / 60
    return result


def bench_light_models(names=LIGHT_MODELS, threads: int = 2, runs: int = 5, cache_dir=None,
                       on_result=None) -> list[ModelTimes]:
    """Times each named light model; a model that fails is reported with its error."""
    from .frontends.onnx_conformance import light_cases

    unknown = sorted(set(names) - set(LIGHT_MODELS))
    if unknown:
        raise OdlaError(Status.INVALID_PARAM,
                        f"models {unknown} are not light models; choose from {list(LIGHT_MODELS)}")
    check_count(threads, 1, "threads")
    check_count(runs, 3, "runs")
    cases = {c.name.removeprefix("test_"): c for c in light_cases()}
    results = []
    for name in names:
        try:
            result = bench_model(cases[name], threads, runs, cache_dir)
        except Exception as err:  # noqa: BLE001 (one model's failure is a row of the report)
            result = ModelTimes(name, error=f"{type(err).__name__}: {err}"[:300])
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _ratio(seconds: float | None, reference: float | None) -> str:
    return "-" if seconds is None or not reference else f"{seconds / reference:.2f}x"


def report(results: list[ModelTimes], overhead: dict[str, float], threads: int,
           seconds: float, load: tuple[float, float], cache_dir=None) -> str:
    """docs/perf.md: the machine, the latency table with ratios, tuning spent, overheads.
    ``load``: the 1-minute load average when the run started and when it ended; ``cache_dir``:
    where the tuning database came from (None: the user's cache)."""
    import onnxruntime

    records = f"`{cache_dir}`" if cache_dir else "the user's cache directory"
    lines = [
        "# Performance: ODLA-TVM against onnxruntime",
        "",
        (f"Written by `scripts/bench.py` (`odla-tvm bench`) in {seconds / 60:.0f} min on "
         f"{_cpu_model()}, {targets.cpu_count()} cores usable, {platform.system()} "
         f"{platform.release()}; odla-tvm {__version__}, TVM {targets.tvm_version()}, "
         f"onnxruntime {onnxruntime.__version__}, NumPy {np.__version__}. Load average "
         f"(1 min) {load[0]:.1f} at the start and {load[1]:.1f} at the end: above "
         f"{targets.cpu_count()}, other work shared the cores and every figure is slower than "
         "on an idle machine."),
        "",
        (f"Batch 1, {threads} threads for both (TVM_NUM_THREADS, onnxruntime's "
         "intra_op_num_threads), the same inputs; each figure is the median of the timed runs "
         "after a warm-up run. Untuned runs are timed alone: 5, or at least 3 once they take "
         "30 s together. Onnxruntime, oneDNN and tuned runs are timed in turns of about "
         "0.25 s each (each turn after 0.1 s idle and 0.05 s of untimed runs, as the last "
         "path's threads still spin), until each path has at least 5 runs and "
         "3 s of them, so drift in the machine's load reaches each alike; *runs*: the fewest "
         "timed runs of any path. *Untuned*: ODLA-TVM compiled with no tuning records (TVM's "
         "generic build, one unscheduled kernel per op). *Tuned*: compiled with the host-cpu "
         f"tuning database in {records} "
         "(`odla-tvm tune`), for models tuned into it: convolutions in NHWC, "
         "weights laid out for each kernel's schedule when compiling; *tuned kernels*: the "
         "kernels that took a schedule from its records (of all the fused kernels: the rest "
         "stay unscheduled). *oneDNN*: the INTEL_DNNL device, untuned, its convolutions, "
         "matmuls and pools run by oneDNN (targets/onednn.py; `-` where oneDNN is not "
         "installed). Ratios are ODLA-TVM's latency over "
         "onnxruntime's (under 1.0x: faster). *Match*: outputs within rtol "
         f"{MATCH_RTOL:g}, atol {MATCH_ATOL:g} of onnxruntime's."),
        "",
        ("| model | untuned ms | tuned ms | oneDNN ms | onnxruntime ms | untuned / ort "
         "| tuned / ort | oneDNN / ort | tuned kernels | tuning spent | runs | match |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |",
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.name} | failed: {r.error.replace('|', '/')} | | | | | | | | | | |")
            continue
        spent = (f"{r.tuning_trials} trials, {r.tuning_minutes:.1f} min" if r.tuning_trials
                 else "not tuned")
        lines.append(
            f"| {r.name} | {_ms(r.untuned_s)} | {_ms(r.tuned_s)} | {_ms(r.onednn_s)} | "
            f"{_ms(r.onnxruntime_s)} | {_ratio(r.untuned_s, r.onnxruntime_s)} | "
            f"{_ratio(r.tuned_s, r.onnxruntime_s)} | {_ratio(r.onednn_s, r.onnxruntime_s)} | "
            f"{f'{r.tuned_kernels} of {r.kernels}' if r.kernels else '-'} | {spent} | {r.runs} | "
            f"{'yes' if r.outputs_match else 'no' if r.outputs_match is False else '-'} |")
    missed = [r.name for r in results if r.name in TARGET_MODELS and not r.error
              and (r.tuned_s is None or r.tuned_s > r.onnxruntime_s)]
    lines += ["", f"Goal: tuned at most 1.0x onnxruntime on {', '.join(TARGET_MODELS)}. "
              + (f"Not met for {', '.join(missed)} (see the ratios and the tuning spent)."
                 if missed else "Met for all of them."), ""]
    resnet50 = next((r for r in results if r.name == "resnet50" and r.onednn_s), None)
    if resnet50 is not None:
        ratio = resnet50.onednn_s / resnet50.onnxruntime_s
        lines += [f"Goal: resnet50 through oneDNN, untuned, at most {ONEDNN_GOAL:.1f}x "
                  f"onnxruntime: {'met' if ratio <= ONEDNN_GOAL else 'not met'} ({ratio:.2f}x).",
                  ""]
    bare = overhead["bare VM call"]
    lines += [
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
    for name, us in overhead.items():
        lines.append(f"| {name} | {us:.2f} | {us - bare:+.2f} |")
    return "\n".join(lines) + "\n"
