"""Default schedules against tuning records: each kernel's default schedule timed as tuning
times its candidates, and a run-off at the end of a run, where each kernel's best record and
its default schedule are measured again side by side, in rounds; the record applies only if it
was faster in each."""

from __future__ import annotations

import time

import numpy as np
import tqdm
import tvm

from ..specs import TargetSpec, cpu_count
from .database import TuningDatabase, default_scheduled_copy, run_seconds

RUN_OFF_ROUNDS = 5  # a run-off measures each of its two schedules this many times, in turns,
RUN_OFF_REPEATS = 10  # each time this many runs
DEFAULTS_AT_ONCE = 2  # default schedules built at once, per core


def time_default_schedules(tasks: list, hashes: list[str], untimed: dict[str, str],
                           spec: TargetSpec, database: TuningDatabase, builder, runner,
                           progress: bool, deadline: float | None = None) -> None:
    """Measures the kernels of ``untimed`` (hash -> digest of its default schedule) as the
    target's default schedules make them (what a compile gives a kernel where no record is
    faster), with the builder and runner that measure the candidates, and keeps the seconds
    and digests in ``database``: a record applies only where it beats them
    (TuningDatabase.records). A kernel whose default fails to build or run gets None; those
    left when time.monotonic() passes ``deadline`` stay untimed (the next run times them)."""
    from tvm.s_tir import meta_schedule as ms

    todo = [(task, h) for task, h in zip(tasks, hashes) if h in untimed]
    if not todo or past(deadline):
        return
    target = spec.tvm_target()
    seconds: dict[str, float | None] = {}
    with tqdm.tqdm(total=len(todo), desc="timing the default schedules", unit="kernel",
                   disable=not progress) as bar:
        # A few at a time, so that the deadline is seen between them.
        for start in range(0, len(todo), DEFAULTS_AT_ONCE * cpu_count()):
            if past(deadline):
                break
            part = todo[start:start + DEFAULTS_AT_ONCE * cpu_count()]
            kernels = [default_scheduled_copy(task.dispatched[0], spec) for task, _h in part]
            built = builder.build([ms.builder.BuilderInput(k, target) for k in kernels])
            # One at a time: LocalRunner measures every input it is given before it returns.
            for (_task, h), kernel, b in zip(part, kernels, built):
                if not past(deadline):
                    seconds[h] = None if b.error_msg is not None else _default_run(
                        b.artifact_path, kernel, spec, runner)
                if b.error_msg is None:
                    ms.utils.remove_build_dir(b.artifact_path)
                bar.update()
    if seconds:
        database.add_default_seconds(seconds, {h: untimed[h] for h in seconds})


def _default_run(artifact_path: str, kernel: tvm.IRModule, spec: TargetSpec,
                 runner) -> float | None:
    """The seconds of a built kernel's run (None: it failed)."""
    from tvm.s_tir import meta_schedule as ms

    [future] = runner.run([ms.runner.RunnerInput(
        artifact_path, spec.device_kind,
        ms.arg_info.ArgInfo.from_entry_func(kernel, remove_preproc=True))])
    result = future.result()
    if result.error_msg is None and result.run_secs:
        return run_seconds([float(s) for s in result.run_secs])
    return None


def run_off(tasks: list, hashes: list[str], spec: TargetSpec, database: TuningDatabase,
            ms_database, builder, runner, progress: bool,
            deadline: float | None = None) -> None:
    """Measures each kernel's best record and its default schedule again, side by side, as
    a model runs them: RUN_OFF_ROUNDS rounds, each schedule once a round, in turns, with
    ``runner`` flushing the caches of all but the first argument (the weights, the output)
    before each of its RUN_OFF_REPEATS runs; each keeps its median run as its time, and the
    record applies only if it was faster in every round (by chance, with the two alike, 1 in
    2^RUN_OFF_ROUNDS): the default schedule is what an untuned build runs. Tuning times each
    candidate many times in a row with its weights in the caches, and apart from the default,
    across the machine's slow spells; in a model a kernel's weights come from memory, so a
    record could win there and lose in the model. Kernels that ran off already (and have
    found no faster record since) are not measured again, nor those under RUN_OFF_MIN_S; nor,
    once time.monotonic() passes ``deadline``, those left (the next run runs them off)."""
    from tvm.s_tir import meta_schedule as ms

    unraced = set(database.unraced(hashes))
    todo = [(task, h) for task, h in zip(tasks, hashes) if h in unraced]
    if not todo:
        return
    target, recorded = spec.tvm_target(), database.measurements()
    pairs = []  # per kernel: its best record's schedule, its default schedule
    for task, _h in todo:
        workload = task.dispatched[0]
        [record] = ms_database.get_top_k(ms_database.commit_workload(workload), 1)
        tuned = tvm.s_tir.Schedule(workload)
        record.trace.apply_to_schedule(tuned, remove_postproc=False)
        pairs.append((tuned.mod, default_scheduled_copy(workload, spec)))
    results = {}
    with tqdm.tqdm(total=len(todo), desc="running the best records off against the default "
                   "schedules", unit="kernel", disable=not progress) as bar:
        built = builder.build([ms.builder.BuilderInput(kernel, target)
                               for pair in pairs for kernel in pair])
        for (_task, h), pair, both in zip(todo, pairs, zip(built[::2], built[1::2])):
            if not past(deadline) and all(b.error_msg is None for b in both):
                times: list[list[list[float]]] = [[], []]  # per schedule, per round
                for _round in range(RUN_OFF_ROUNDS):
                    for kernel, b, rounds in zip(pair, both, times):
                        # One at a time (an RPC runner would measure a list at once).
                        [future] = runner.run([ms.runner.RunnerInput(
                            b.artifact_path, spec.device_kind,
                            ms.arg_info.ArgInfo.from_entry_func(kernel, remove_preproc=True))])
                        result = future.result()
                        if result.error_msg is None and result.run_secs:
                            rounds.append([float(s) for s in result.run_secs])
                # A schedule that failed to run leaves the two as they were.
                if all(len(rounds) == RUN_OFF_ROUNDS for rounds in times):
                    won = all(np.median(tuned_runs) < np.median(default_runs)
                              for tuned_runs, default_runs in zip(*times))
                    results[h] = (recorded[h][1], *(float(np.median(np.concatenate(rounds)))
                                                    for rounds in times), won)
            for b in both:
                if b.error_msg is None:
                    ms.utils.remove_build_dir(b.artifact_path)
            bar.update()
    database.add_run_offs(results)


def past(deadline: float | None) -> bool:
    """Whether time.monotonic() has passed ``deadline`` (None: no deadline)."""
    return deadline is not None and time.monotonic() >= deadline
