"""The scenario bench: each model's latency in one process that is not quiet, beside its quiet
latency: odla-tvm (the DEFAULT device) and onnxruntime each right after a NumPy matmul (whose
OpenBLAS threads spin after it), alternated with each other, and two odla-tvm models
alternated. One process per model holds both engines and the partner model; the scenarios
take turns in rounds so that the machine's drift reaches each alike, and each figure is a
median over the calls of every round."""

from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from ..types import OdlaError, Status, check_count

SCENARIOS = ("quiet", "after-numpy", "alternate", "two-models")
ENGINES = ("odla-tvm", "onnxruntime")
# The neighbour: a matmul of this size, as a program preparing its inputs makes.
NUMPY_SIZE = 256
ROUNDS = 3
# Idle before each block of calls: the threads of whatever ran before go to sleep, so that a
# block sees its own neighbour only.
SETTLE_S = 0.2
TITLE = "# odla-tvm latency beside NumPy, onnxruntime and a second model"


def scenario_bench(models: list[tuple[str, str]], threads: int = 2, calls: int = 30,
                   on_result=None) -> list[dict]:
    """Per (name, ONNX path): {"model", "partner", "seconds": {engine: {scenario: median}}}
    or {"model", "error"}; the partner (the second odla-tvm model) is the next model of
    ``models``, the model itself where it is alone. Each model runs in a process of its own,
    with NumPy's own threads (OPENBLAS_NUM_THREADS unset: what a user's process has), and
    the engines kept in one folder for the whole bench (no tuning records), so that a
    partner's engine is compiled once."""
    check_count(threads, 1, "threads")
    check_count(calls, 20, "calls")
    results = []
    with tempfile.TemporaryDirectory() as engines:
        for index, (name, path) in enumerate(models):
            partner = models[(index + 1) % len(models)]
            job = {"model": path, "partner": partner[1], "threads": threads, "calls": calls,
                   "cache_dir": engines}
            try:
                result = {"model": name, "partner": partner[0], "seconds": _in_process(job)}
            except OdlaError as err:
                result = {"model": name, "partner": partner[0], "error": err.message}
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def summary(result: dict) -> str:
    """One line of a model's result, for progress."""
    if "error" in result:
        return f"{result['model']}: error: {result['error']}"
    return f"{result['model']}: " + "; ".join(
        engine + " " + ", ".join(f"{s} {m[s] / m['quiet']:.2f}x" for s in SCENARIOS[1:] if s in m)
        + f" of {m['quiet'] * 1e3:.2f} ms" for engine, m in result["seconds"].items())


def _in_process(job: dict) -> dict:
    env = {key: value for key, value in os.environ.items()
           if key not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    env["TVM_NUM_THREADS"] = str(job["threads"])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    process = subprocess.run(
        [sys.executable, "-c", "from odla_tvm.bench.scenarios import main; main()"],
        input=pickle.dumps(job), capture_output=True, env=env, check=False)
    try:
        reply = pickle.loads(process.stdout)
    except (EOFError, pickle.UnpicklingError):
        tail = " / ".join(process.stderr.decode(errors="replace").strip().splitlines()[-3:])
        raise OdlaError(Status.FAILURE, f"the scenario process ended (exit code "
                                        f"{process.returncode}): {tail[-400:]}") from None
    if "error" in reply:
        raise OdlaError(Status.FAILURE, reply["error"])
    return reply["seconds"]


def _timed(run) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def _block(run, before, calls: int) -> list[float]:
    """Seconds of ``calls`` timed calls of ``run``, each right after a call of ``before``, or
    (None: quiet) back to back after a warm-up call."""
    if before is None:
        run()
        return [_timed(run) for _ in range(calls)]
    times = []
    for _ in range(calls):
        before()
        times.append(_timed(run))
    return times


def measure(engines: dict, partner, numpy_call, calls: int, rounds: int = ROUNDS) -> dict:
    """{engine: {scenario: median seconds}} for ``engines`` ({"odla-tvm": call,
    "onnxruntime": call}); ``partner``: the second odla-tvm model's call (two-models, timed
    for odla-tvm only). Every scenario runs ``calls`` times in all, spread over ``rounds``."""
    per_round = max(1, -(-calls // rounds))
    plan = [(engine, "quiet", None) for engine in engines]
    plan += [(engine, "after-numpy", numpy_call) for engine in engines]
    plan += [(engine, "alternate", engines[other]) for engine, other
             in zip(engines, reversed(list(engines)))]
    plan.append(("odla-tvm", "two-models", partner))
    times: dict = {engine: {scenario: [] for scenario in SCENARIOS} for engine in engines}
    for _ in range(rounds):
        for engine, scenario, before in plan:
            time.sleep(SETTLE_S)
            times[engine][scenario] += _block(engines[engine], before, per_round)
    return {engine: {scenario: statistics.median(t) for scenario, t in by.items() if t}
            for engine, by in times.items()}


def main() -> None:
    """The scenario process: a pickled job on stdin, the pickled reply on stdout."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what TVM prints goes to stderr, not into the reply
    job = pickle.load(sys.stdin.buffer)
    try:
        reply = {"seconds": _run_job(job)}
    except Exception as err:  # noqa: BLE001 (the bench reports why a model did not run)
        reply = {"error": f"{type(err).__name__}: {err}"[:400]}
    pickle.dump(reply, replies)
    replies.flush()


def _run_job(job: dict) -> dict:
    from .models import model_inputs, read_model
    from .worker import LOADERS

    def load(path: str, model: str):
        feeds = model_inputs(read_model(model))
        run = LOADERS[path]({"path": path, "model": model, "feeds": feeds,
                             "threads": job["threads"], "cache_dir": job["cache_dir"],
                             "precision": None})[0]
        run()
        return run

    engines = {"odla-tvm": load("default", job["model"]),
               "onnxruntime": load("onnxruntime", job["model"])}
    partner = load("default", job["partner"])
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((NUMPY_SIZE, NUMPY_SIZE), np.float32) for _ in range(2))
    return measure(engines, partner, lambda: a @ b, job["calls"])


def report(results: list[dict], threads: int) -> str:
    """The scenario bench's report: per model and engine, the quiet median and each
    scenario's median with its ratio to quiet."""
    about = (f"{threads} threads per engine, medians of each scenario's calls; the ratio is to "
             "the engine's own quiet median in the same process. after-numpy: right after a "
             f"{NUMPY_SIZE}x{NUMPY_SIZE} NumPy matmul; alternate: right after the other "
             "engine's call; two-models: right after another odla-tvm model's call.")
    lines = [TITLE, "", about, "",
             "| model | engine | quiet ms | " + " | ".join(SCENARIOS[1:]) + " |",
             "| --- | --- | ---: | " + " | ".join("---:" for _ in SCENARIOS[1:]) + " |"]
    for result in results:
        if "error" in result:
            lines.append(f"| {result['model']} | error: {result['error']} |")
            continue
        for engine, medians in result["seconds"].items():
            quiet = medians["quiet"]
            cells = [f"{medians[s] * 1e3:.2f} ({medians[s] / quiet:.2f}x)" if s in medians
                     else "-" for s in SCENARIOS[1:]]
            lines.append(f"| {result['model']} | {engine} | {quiet * 1e3:.2f} | "
                         + " | ".join(cells) + " |")
    partners = ", ".join(f"{r['model']}: {r['partner']}" for r in results)
    lines += ["", f"Second model (two-models): {partners}.", ""]
    return "\n".join(lines)
