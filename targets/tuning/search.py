"""tune: MetaSchedule's search over a model's kernels for a target, into the target's database.
A run resumes from the records already there: trials recorded for a model's kernels count
against its trial budget, and the search starts from the best of them. Candidates are built
here, in a process pool (targets.tuning.builder), and measured here or, given an RPC tracker
(targets.tuning.rpc), on the servers registered with it under a key: on the device itself for
a board (aarch64-linux), or on machines of the CPU a remote target names (llvm:MCPU:CORES).
A run ends with a run-off (targets.tuning.run_off)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import logging
import time
from pathlib import Path

import tvm
import tvm_ffi

from ..compiler import fused_kernels
from ..specs import TargetSpec, cpu_count
from . import rpc
from .builder import KeptPoolBuilder, build_candidate, export_shared
from .database import TuningDatabase
from .progress import Progress
from .run_off import RUN_OFF_REPEATS, past, run_off, time_default_schedules

log = logging.getLogger(__name__)

FIRST_TRIALS = 16  # what every kernel gets first: enough for a parallel, vectorized schedule
# What MetaSchedule imports to tune (in odla-tvm's install): its process pools' and its cost
# model's (tuning goes on without the cost model, choosing candidates at random).
POOL_MODULES = {"psutil": "psutil==7.2.2", "cloudpickle": "cloudpickle==3.1.3"}
COST_MODEL_PACKAGE = "xgboost-cpu==3.2.0"
# Of a run's time limit, the share its last step, the run-off, may take (it stops between
# kernels when the limit is reached; the kernels left run off in the next run).
RUN_OFF_SHARE = 0.2


class TuningUnavailable(RuntimeError):
    """Tuning cannot run for this target here; the message says why."""


@dataclasses.dataclass
class TuningReport:
    """What one tuning run did."""

    target: str
    directory: Path
    tasks: int  # kernels tuned (each fused kernel of the model with its own shape)
    trials_run: int  # candidates measured by this run
    trials_recorded: int  # candidates measured for the model's kernels, in all runs
    seconds: float
    estimated_latency_s: float | None  # sum over kernels of calls x best measured time
    stopped_by: str  # "trials", "minutes", or "done" (the trial budget was already spent)
    records_removed: int = 0  # by keep_best, afterwards
    # Kernels whose default schedule ran faster than any of their records: compiles keep it.
    defaults_kept: int = 0
    # Through an RPC tracker: candidates measured by each server ("host:port"), and the
    # measurements repeated because the server measuring them was lost.
    measured_on: dict[str, int] = dataclasses.field(default_factory=dict)
    measured_again: int = 0
    # Where the caller compiled and timed the model here before and after the run.
    latency_before_s: float | None = None
    latency_after_s: float | None = None
    kernels: int = 0  # kernels the model's build runs
    tuned_kernels: list[str] = dataclasses.field(default_factory=list)  # of those, from records
    not_timed: str | None = None  # why the model was not timed

    def summary(self) -> str:
        latency = ("no kernel measured yet" if self.estimated_latency_s is None
                   else f"best kernels add up to {self.estimated_latency_s * 1e3:.3f} ms")
        removed = (f"; {self.records_removed} slower records removed" if self.records_removed
                   else "")
        kept = (f"; {self.defaults_kept} kernels keep their default schedule, faster than any "
                "record or not beaten in every round of their run-off" if self.defaults_kept
                else "")
        servers = ""
        if self.measured_on:
            servers = (f"; measured on {len(self.measured_on)} RPC servers ("
                       + ", ".join(f"{s}: {n}" for s, n in sorted(self.measured_on.items())) + ")"
                       + (f", {self.measured_again} measured again after losing their server"
                          if self.measured_again else ""))
        if not self.tasks:
            return (f"nothing to tune for {self.target}: its vendor plugins run the whole "
                    f"model, or its kernels come scheduled; database {self.directory}"
                    f"{self._latency()}")
        if self.stopped_by == "minutes" and not self.trials_run:
            latency += ("; the time limit ran out before the first trial (building and timing "
                        "the model, and timing each kernel's default schedule, come first): "
                        "give more minutes")
        return (f"tuned {self.tasks} kernels for {self.target}: {self.trials_run} trials in "
                f"{self.seconds / 60:.1f} min ({self.trials_recorded} recorded in all; stopped by "
                f"{self.stopped_by}); {latency}{kept}; database {self.directory}{removed}"
                f"{servers}{self._latency()}")

    def _latency(self) -> str:
        if self.not_timed is not None:
            return f"; the model was not timed: {self.not_timed}"
        if self.latency_before_s is None or self.latency_after_s is None:
            return ""
        shown = ", ".join(self.tuned_kernels[:6]) + (
            f" and {len(self.tuned_kernels) - 6} more" if len(self.tuned_kernels) > 6 else "")
        kernels = (f"; {len(self.tuned_kernels)} of its {self.kernels} TVM kernels now come "
                   f"from records" + (f" ({shown})" if shown else "")) if self.kernels else ""
        return (f"\nmodel latency here: {self.latency_before_s * 1e3:.3f} ms before, "
                f"{self.latency_after_s * 1e3:.3f} ms after tuning{kernels}")


def tune(mod: tvm.IRModule, spec: TargetSpec, *, trials: int | None = None,
         minutes: float | None = None, cache_dir=None, label: str = "model",
         progress: bool = True, keep_best: int | None = None,
         tracker: rpc.Tracker | None = None, reserve_s: float = 0.0) -> TuningReport:
    """Tunes the kernels of ``mod`` for ``spec`` with MetaSchedule, measuring on this machine
    or on the RPC servers registered with ``tracker`` under its key (every one free when the
    run starts, at once), and adds the records to the target's database, with each kernel's
    time under the default schedules (measured once, first). ``trials``: candidates measured
    for the model's kernels in all runs together (what earlier runs recorded counts);
    ``minutes``: the wall-clock limit of this run, checked after each batch and between the
    kernels of its other steps, less ``reserve_s`` (kept for the caller's own steps after
    it: compiling the tuned model, say). ``label`` names
    the model in the database's run log. ``keep_best``: afterwards, keep only that many of the
    fastest records of each kernel in the database (TuningDatabase.keep_best).
    rpc.TrackerError when the tracker cannot be reached or has no free server under the key
    (after rpc.SERVER_WAIT_S), or every server is lost during the run."""
    deadline = None if minutes is None else time.monotonic() + minutes * 60 - reserve_s
    report = _tune(mod, spec, trials, deadline, cache_dir, label, progress, tracker)
    if keep_best is not None:
        report.records_removed = TuningDatabase(spec, cache_dir).keep_best(keep_best)
    return report


def _tune(mod, spec, trials, deadline, cache_dir, label, progress, tracker) -> TuningReport:
    from tvm.s_tir import meta_schedule as ms

    if tracker is None and (spec.remote or not spec.runs_here()):
        raise TuningUnavailable(
            f"tuning times each candidate on the machine it is for, and {spec.name} "
            f"{_elsewhere(spec)}; measure there through a TVM RPC tracker: start "
            "odla_rpc_server on it (odla-tvm rpc-server prints how) and give rpc_tracker and "
            "rpc_key (odla-tvm tune --rpc-tracker HOST:PORT --rpc-key KEY), or tune on such a "
            "machine")
    missing = [pin for module, pin in POOL_MODULES.items() if not _installed(module)]
    if missing:
        raise TuningUnavailable(f"tuning needs {', '.join(missing)}, which odla-tvm's install "
                                f"brings: pip install {' '.join(missing)}")
    started = time.monotonic()
    fleet = None
    if tracker is not None:
        # As many measurements at once as servers are free now; the tracker queues the rest.
        fleet = rpc.Fleet(tracker, tracker.wait_for_servers(rpc.SERVER_WAIT_S))
        log.info("measuring on %d RPC servers under key %r at %s", fleet.workers,
                 tracker.key, tracker.address)
    target = spec.tvm_target()
    tasks = _by_arithmetic([t for t in ms.relax_integration.extract_tasks(
        fused_kernels(mod, spec), target) if not _scheduled_already(t)])
    database = TuningDatabase(spec, cache_dir)
    if database.has_records() and database.foreign_reason():
        raise TuningUnavailable(f"{database.directory} holds records it cannot extend: "
                                f"{database.foreign_reason()}; remove it or use another cache dir")
    ms_database = database.open()
    database.add_model(mod)
    recorded = database.measurements()
    hashes = [_task_hash(t) for t in tasks]
    counts = [recorded.get(h, (0, None))[0] for h in hashes]
    budget = (trials - sum(counts)) if trials is not None else 1 << 30
    # Timed once, and again where the default rules have changed since (with the budget spent
    # too: that is what makes the records apply again).
    untimed = database.untimed_defaults({h: t.dispatched[0] for h, t in zip(hashes, tasks)},
                                        hashes)
    if not tasks or (budget <= 0 and not untimed and not database.unraced(hashes)):
        return _report(spec, database, tasks, hashes, 0, started, "done", fleet)
    # The search leaves the run-off its share of the time left.
    search_deadline = None if deadline is None else \
        deadline - RUN_OFF_SHARE * max(0.0, deadline - time.monotonic())
    # Every kernel first gets FIRST_TRIALS, in turn: a kernel left unscheduled runs on one
    # core, unvectorized. Then the kernels doing most of the arithmetic share the rest, each
    # batch going where the model's time has been falling fastest (MetaSchedule's gradient
    # scheduler), not in turn.
    phases = [([i for i, count in enumerate(counts) if count < FIRST_TRIALS], FIRST_TRIALS,
               "round-robin"),
              (list(range(_heavy_count(tasks))), None, "gradient")]
    remote = fleet is not None
    with _quiet_meta_schedule():
        # One builder and one runner for the whole run: their processes take seconds to start.
        builder = KeptPoolBuilder(
            # The default 30 s is too short for a large convolution on 2 busy cores.
            f_build=build_candidate, timeout_sec=60, workers=cpu_count(),
            f_export=functools.partial(export_shared, compiler=spec.cross_compiler)
            if remote else None)
        runner = rpc.TrackerRunner(fleet) if remote else ms.runner.LocalRunner(timeout_sec=60)
        try:
            time_default_schedules(tasks, hashes, untimed, spec, database, builder, runner,
                                   progress, search_deadline)
            progress_bar = Progress(
                tasks, database.compiled_seconds(hashes), [count > 0 for count in counts],
                max(budget, 0) if trials is not None else None, search_deadline,
                f"tuning {label} for {spec.name}",
                progress and budget > 0 and not past(search_deadline), fleet)
            try:
                for indices, per_task, scheduler in phases:
                    left = budget - progress_bar.trials
                    if per_task is not None:
                        left = min(left, sum(per_task - counts[i] for i in indices))
                    if not indices or left <= 0 or progress_bar.time_is_up():
                        continue
                    progress_bar.phase(indices)
                    _tune_tasks([tasks[i] for i in indices], left, per_task, scheduler,
                                deadline is not None, database, ms_database, progress_bar,
                                builder, runner)
            finally:
                progress_bar.close()
            # The run-off's runner flushes the caches before each run (_run_off says why).
            flushing = ms.runner.EvaluatorConfig(number=1, repeat=RUN_OFF_REPEATS,
                                                 min_repeat_ms=0, enable_cpu_cache_flush=True)
            racer = (rpc.TrackerRunner(fleet, flushing) if remote else
                     ms.runner.LocalRunner(timeout_sec=60, evaluator_config=flushing))
            try:
                run_off(tasks, hashes, spec, database, ms_database, builder, racer, progress,
                        deadline)
            finally:
                if remote:
                    racer.shutdown()
        finally:
            builder.shutdown()
            if remote:
                runner.shutdown()
    stopped_by = ("done" if budget <= 0 else "minutes" if progress_bar.out_of_time
                  else "trials")
    report = _report(spec, database, tasks, hashes, progress_bar.trials, started, stopped_by,
                     fleet)
    run = {"label": label, "trials": report.trials_run, "seconds": report.seconds,
           "tasks": report.tasks, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if fleet is not None:
        run.update(rpc_tracker=tracker.address, rpc_key=tracker.key,
                   measured_on=report.measured_on, measured_again=report.measured_again)
    database.add_run(run)
    return report


def _tune_tasks(tasks: list, budget: int, per_task: int | None, scheduler: str, timed: bool,
                database: TuningDatabase, ms_database, progress_bar: Progress, builder,
                runner) -> None:
    """One MetaSchedule run over ``tasks``: ``budget`` trials in all, at most ``per_task``
    each (None: no limit), batches chosen by MetaSchedule's task ``scheduler``; ``timed``: a
    time budget is checked between batches (ending the run with OutOfTime), so batches are
    smaller. Round robin records each batch as it is measured; the gradient scheduler records
    nothing, and so cannot stop for time, until each task has had its first batch. Built by
    ``builder`` and measured by ``runner`` (here, or on RPC servers)."""
    from tvm.s_tir import meta_schedule as ms

    per_batch = max(1, min(64 if not timed else 8, per_task or budget, budget // len(tasks)))
    contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
        tasks, str(database.directory), strategy=ms.search_strategy.EvolutionarySearch(
            population_size=min(512, max(64, 8 * per_batch)),
            init_min_unmeasured=min(50, max(8, 2 * per_batch))),
        num_threads=cpu_count())
    try:
        # Each run sets MetaSchedule's logging up again, its console at the logger's level.
        with _quiet_meta_schedule():
            ms.tune_tasks(
                tasks=contexts, task_weights=weights, work_dir=str(database.directory),
                max_trials_global=budget, max_trials_per_task=per_task or budget,
                num_trials_per_iter=per_batch, builder=builder, runner=runner,
                cost_model=_cost_model(),
                database=ms_database, measure_callbacks=[
                    *ms.MeasureCallback.create("default"), progress_bar.callback()],
                task_scheduler=scheduler)
    except Exception:  # TVM's FFI may hand OutOfTime back as its own error type
        if isinstance(runner, rpc.TrackerRunner) and runner.fleet.error is not None:
            raise runner.fleet.error from None
        if not progress_bar.out_of_time:
            raise


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@functools.cache
def _cost_model() -> str:
    """MetaSchedule's XGBoost cost model, or where xgboost is missing (saying so, once), its
    random one."""
    if _installed("xgboost"):
        return "xgb"
    log.warning("xgboost is not installed: candidates are chosen at random, not by XGBoost's "
                "cost model; pip install %s adds it", COST_MODEL_PACKAGE)
    return "random"


def _elsewhere(spec: TargetSpec) -> str:
    """Why ``spec``'s code cannot be timed on this machine."""
    import platform

    if spec.remote:
        return "is another machine's CPU"
    if spec.arch != platform.machine():
        return f"runs on {spec.arch}, and this machine is {platform.machine()}"
    if spec.device_kind == "cpu":
        return ("needs CPU features this machine lacks "
                f"({', '.join(spec.cpu_flags)})")
    return f"runs on a {spec.device_kind} device, and this machine has none"


def _task_hash(task) -> str:
    return str(tvm_ffi.structural_hash(task.dispatched[0]))


def _scheduled_already(task) -> bool:
    """Whether the task's kernel came scheduled (targets.cpu.amx's AMX kernels): nothing to tune."""
    return any(isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None
               and bool(func.attrs.get("tirx.is_scheduled", False))
               for func in task.dispatched[0].functions.values())


def _by_arithmetic(tasks: list) -> list:
    """The tasks, heaviest first (calls x floating-point operations)."""
    from tvm.s_tir.analysis import estimate_tir_flops

    return sorted(tasks, key=lambda t: -estimate_tir_flops(t.dispatched[0]) * t.weight)


def _heavy_count(tasks: list, share: float = 0.995) -> int:
    """How many of ``tasks`` (heaviest first) do ``share`` of the model's arithmetic: the rest
    (a pool, a transpose, a concatenation) has little to gain past its first trials."""
    from tvm.s_tir.analysis import estimate_tir_flops

    flops = [estimate_tir_flops(t.dispatched[0]) * t.weight for t in tasks]
    total, done = sum(flops), 0.0
    for count, task_flops in enumerate(flops):
        if count and done >= share * total:
            return count
        done += task_flops
    return len(tasks)


def _report(spec, database, tasks, hashes, trials_run, started, stopped_by,
            fleet: rpc.Fleet | None) -> TuningReport:
    recorded, kept = database.measurements(), database.outclassed()
    found = [recorded.get(h, (0, None)) for h in hashes]
    best = [task.weight * s for task, s in zip(tasks, database.compiled_seconds(hashes))
            if s is not None]
    return TuningReport(spec.name, database.directory, len(tasks), trials_run,
                        sum(count for count, _ in found), time.monotonic() - started,
                        sum(best) if best else None, stopped_by,
                        measured_on=dict(fleet.measured) if fleet else {},
                        measured_again=fleet.measured_again if fleet else 0,
                        defaults_kept=sum(h in kept for h in hashes))


@contextlib.contextmanager
def _quiet_meta_schedule():
    """MetaSchedule prints every task table to the console: keep its warnings there, and its
    information too where this module's logger shows debug messages (odla-tvm tune
    --verbose); its full logs still go to the database's logs/ directory. Its logging set-up
    also fails on a handler without a name (pytest's log capture adds some), so those step
    aside meanwhile."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    level, unnamed = logger.level, [h for h in logger.handlers if h.get_name() is None]
    logger.setLevel(logging.INFO if log.isEnabledFor(logging.DEBUG) else logging.WARNING)
    for handler in unnamed:
        logger.removeHandler(handler)
    try:
        yield
    finally:
        logger.setLevel(level)
        for handler in unnamed:
            logger.addHandler(handler)
