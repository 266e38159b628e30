"""Autotuning with MetaSchedule, and the tuning database each target keeps.

A target's database is ``<cache>/tuning/<target name>-<digest of its key>/``: MetaSchedule's two
JSON tables (workloads, and one record per measured candidate) and ``target.json``, which names
the target the records were measured on, the TVM that made them, the models tuned into it (by
architecture), every tuning run with its budget, and how fast each kernel ran as the target's
default schedules make it (with a digest of that schedule). A run ends with a run-off: each
kernel's best record and its default schedule measured again side by side, in rounds, and the
record applies only if it was faster in each. ``find_database`` hands a target its
database for compile_module, which applies the records to those models where they beat those
default schedules, as long as the default rules make the schedule timed; records
made for another target, or another TVM, are never applied (a warning says why).

A run resumes from the records already there: trials recorded for a model's kernels count
against its trial budget, and the search starts from the best of them.

Candidates are built here, in a process pool, and measured here or, given an RPC tracker
(targets.rpc), on the servers registered with it under a key: on the device itself for a board
(aarch64-linux), or on machines of the CPU a remote target names (llvm:MCPU:CORES).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Iterable

import numpy as np
import tqdm
import tvm
import tvm_ffi

from ..compiler import codegen, default_scheduled, fused_kernels
from ..runner import cache_dir as default_cache_dir
from ..specs import TargetSpec, cpu_count
from . import rpc
from .builder import KeptPoolBuilder

log = logging.getLogger(__name__)

FAILED_RUN_S = 1e10  # what MetaSchedule records as the run time of a candidate that failed
FIRST_TRIALS = 16  # what every kernel gets first: enough for a parallel, vectorized schedule
RUN_OFF_ROUNDS = 5  # a run-off measures each of its two schedules this many times, in turns,
RUN_OFF_REPEATS = 10  # each time this many runs
# Kernels whose default schedule runs faster than this do not run off: a model's time is in
# the others, and at a few microseconds a run-off would time the runner's own overhead.
RUN_OFF_MIN_S = 50e-6
_TARGET_FILE = "target.json"
_WORKLOADS = "database_workload.json"
_RECORDS = "database_tuning_record.json"


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
        return (f"tuned {self.tasks} kernels for {self.target}: {self.trials_run} trials in "
                f"{self.seconds / 60:.1f} min ({self.trials_recorded} recorded in all; stopped by "
                f"{self.stopped_by}); {latency}{kept}; database {self.directory}{removed}"
                f"{servers}")


class TuningDatabase:
    """The tuning records of one target in one cache directory."""

    def __init__(self, spec: TargetSpec, cache_dir=None, directory: Path | None = None):
        """``spec``'s database in ``cache_dir``, or the one in ``directory`` (which may hold
        another target's records: see foreign_reason)."""
        self.spec = spec
        digest = hashlib.sha256(spec.key().encode()).hexdigest()[:12]
        self.root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.directory = directory or self.root / "tuning" / f"{_database_name(spec)}-{digest}"

    def metadata(self) -> dict:
        try:
            return json.loads((self.directory / _TARGET_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def has_records(self) -> bool:
        path = self.directory / _RECORDS
        return path.is_file() and path.stat().st_size > 0

    def foreign_reason(self) -> str | None:
        """Why these records must not be applied to ``spec`` (None when they may)."""
        meta = self.metadata()
        if meta.get("target_key") != self.spec.key():
            return (f"they were measured for target {meta.get('target_key', 'unknown')}, and "
                    f"{self.spec.name} here compiles for {self.spec.key()}")
        if meta.get("tvm_version") != tvm.__version__:
            return (f"TVM {meta.get('tvm_version', 'unknown')} made them; this is TVM "
                    f"{tvm.__version__}")
        return None

    def tuned_for(self, mod: tvm.IRModule) -> bool:
        """Whether ``mod``'s architecture (its structure, whatever its weights) was tuned into
        this database: compiles look no further for any other model, since checking its
        kernels means lowering and fusing it first (a second or more)."""
        return _architecture(mod) in self.metadata().get("models", [])

    def records(self, kernels: tvm.IRModule):
        """The MetaSchedule database for compiling ``kernels`` (fused, under the target): the
        records of each kernel whose best one beats the kernel's default schedule as timed,
        loaded once per process while the files stay the same (loading parses every
        workload: seconds). A kernel whose default schedule was never timed, or was timed as
        another schedule than the default rules make now (odla-tvm's rules changed since),
        keeps its default schedule, with a warning: a tune of the model times it again."""
        from tvm.s_tir import meta_schedule as ms

        files = (self.directory / _WORKLOADS, self.directory / _RECORDS)
        stamp = tuple((f.stat().st_mtime_ns, f.stat().st_size)
                      for f in (*files, self.directory / _TARGET_FILE) if f.exists())
        retime = self.untimed_defaults(_kernel_workloads(kernels), self._tables()[0])
        if retime:
            _warn_once(f"{len(retime)} of the model's kernels keep their default schedule, "
                       f"not their records in {self.directory}: the records were measured "
                       "against other default schedules than this odla-tvm makes; tune the "
                       "model again to time the new ones (with its trials done, that is all "
                       "it does)")
        key = (stamp, frozenset(retime))
        loaded = _loaded.get(self.directory)
        if loaded is None or loaded[0] != key:
            _check_records(*self._tables(), self.directory)
            database = ms.database.JSONDatabase(str(files[0]), str(files[1]),
                                                allow_missing=False)
            left_out = self.outclassed() | set(retime)
            if left_out:
                kept = ms.database.MemoryDatabase()
                for record in database.get_all_tuning_records():
                    if str(tvm_ffi.structural_hash(record.workload.mod)) not in left_out:
                        kept.commit_tuning_record(ms.database.TuningRecord(
                            record.trace, kept.commit_workload(record.workload.mod),
                            record.run_secs, record.target, record.args_info))
                database = kept
            loaded = _loaded[self.directory] = (key, database)
        return loaded[1]

    def default_seconds(self) -> dict[str, float | None]:
        """Per workload: how long its kernel ran as the target's default schedules make it
        (None: that failed to build or run)."""
        return self.metadata().get("default_schedules", {})

    def add_default_seconds(self, seconds: dict[str, float | None],
                            schedules: dict[str, str] | None = None) -> None:
        """Keeps each workload's default-schedule seconds and, where given, the digest of
        the default schedule timed (default_schedule_digest)."""
        meta = self.metadata()
        meta.setdefault("default_schedules", {}).update(seconds)
        meta.setdefault("default_schedule_digests", {}).update(schedules or {})
        for h in seconds:  # a new default schedule: its run-off is to be made again
            meta.get("run_offs", {}).pop(h, None)
        self._write_metadata(meta)

    def untimed_defaults(self, workloads: dict[str, tvm.IRModule],
                          among: Iterable[str]) -> dict[str, str]:
        """Of ``workloads`` (hash -> kernel module) those in ``among`` whose default schedule
        was never timed, or was timed as another schedule than the target's default rules
        make now: hash -> the digest of the schedule they make now."""
        meta = self.metadata()
        timed = meta.get("default_schedules", {})
        digests = meta.get("default_schedule_digests", {})
        now = {h: default_schedule_digest(workloads[h], self.spec)
               for h in set(among) & set(workloads)}
        return {h: digest for h, digest in now.items()
                if h not in timed or digests.get(h) != digest}

    def outclassed(self) -> set[str]:
        """The workloads whose default schedule ran at least as fast as their best record,
        or whose best record did not beat it in every round of their run-off: compiles keep
        that schedule."""
        defaults, found = self.default_seconds(), self.measurements()
        lost = {h for h, run_off in self.metadata().get("run_offs", {}).items()
                if not run_off["won"] and h in found and found[h][1] == run_off["seconds"]}
        return lost | {h for h, (_count, best) in found.items()
                       if _keeps_default(best, defaults.get(h))}

    def compiled_seconds(self, hashes: Iterable[str]) -> list[float | None]:
        """Per kernel of ``hashes``: its time as a compile builds it, its default schedule's
        where that is kept (outclassed, or no record ran) or its best record's."""
        found, defaults, kept = self.measurements(), self.default_seconds(), self.outclassed()
        best = [found.get(h, (0, None))[1] for h in hashes]
        return [defaults.get(h) if h in kept or b is None else b for h, b in zip(hashes, best)]

    def open(self):
        """The MetaSchedule database to tune into (made on first use)."""
        from tvm.s_tir import meta_schedule as ms  # MetaSchedule loads slowly; only when needed

        self.directory.mkdir(parents=True, exist_ok=True)
        if not (self.directory / _TARGET_FILE).is_file():
            self._write_metadata({"target_name": self.spec.name, "target": self.spec.target,
                                  "target_key": self.spec.key(), "tvm_version": tvm.__version__,
                                  "runs": []})
        return ms.database.JSONDatabase(work_dir=str(self.directory))

    def add_model(self, mod: tvm.IRModule) -> None:
        meta = self.metadata()
        if _architecture(mod) not in meta.setdefault("models", []):
            meta["models"].append(_architecture(mod))
            self._write_metadata(meta)

    def add_run(self, run: dict) -> None:
        meta = self.metadata()
        meta.setdefault("runs", []).append(run)
        self._write_metadata(meta)

    def _write_metadata(self, meta: dict) -> None:
        tmp = self.directory / f".{_TARGET_FILE}.tmp"
        tmp.write_text(json.dumps(meta, indent=1))
        tmp.replace(self.directory / _TARGET_FILE)

    def measurements(self) -> dict[str, tuple[int, float | None]]:
        """Per workload (MetaSchedule's structural hash): trials recorded (those keep_best
        removed included) and the best run time in seconds (None when every trial failed).
        Read from the tables directly: loading them into TVM parses every trace."""
        try:
            hashes, lines = self._tables()
        except OSError:
            return {}
        found: dict[str, tuple[int, float | None]] = {
            h: (count, None) for h, count in self.metadata().get("removed", {}).items()}
        for line in lines:
            workload, (_trace, run_secs, *_rest) = json.loads(line)
            count, best = found.get(hashes[workload], (0, None))
            seconds = _run_seconds(run_secs)
            if seconds < FAILED_RUN_S and (best is None or seconds < best):
                best = seconds
            found[hashes[workload]] = (count + 1, best)
        # A best record that ran off against its default schedule takes its run-off time,
        # measured beside the default's (see _run_off), until a faster record replaces it.
        for h, run_off in self.metadata().get("run_offs", {}).items():
            if h in found and found[h][1] == run_off["recorded"]:
                found[h] = (found[h][0], run_off["seconds"])
        return found

    def unraced(self, hashes: Iterable[str]) -> list[str]:
        """Of ``hashes``, the kernels whose best record and timed default schedule (of
        RUN_OFF_MIN_S or more) have not run off against each other (or have, but a faster
        record was found since)."""
        meta = self.metadata()
        run_offs, defaults = meta.get("run_offs", {}), meta.get("default_schedules", {})
        found = self.measurements()
        return [h for h in hashes if found.get(h, (0, None))[1] is not None
                and defaults.get(h) is not None and defaults[h] >= RUN_OFF_MIN_S
                and (h not in run_offs or found[h][1] != run_offs[h]["seconds"])]

    def add_run_offs(self, results: dict[str, tuple[float, float, float, bool]]) -> None:
        """Keeps run-off results: hash -> (the best record's recorded seconds, its seconds
        and its default schedule's, measured side by side, and whether it won)."""
        meta = self.metadata()
        run_offs = meta.setdefault("run_offs", {})
        for h, (recorded, record_s, default_s, won) in results.items():
            run_offs[h] = {"recorded": recorded, "seconds": record_s, "won": won}
            meta.setdefault("default_schedules", {})[h] = default_s
        self._write_metadata(meta)

    def keep_best(self, count: int) -> int:
        """Keeps the ``count`` fastest records of each kernel and removes the rest (compiles
        apply only the fastest; the rest were the search's path to it). Trials recorded still
        count what was removed. Returns how many records went."""
        hashes, lines = self._tables()
        by_workload: dict[int, list[tuple[float, str]]] = {}
        for line in lines:
            workload, (_trace, run_secs, *_rest) = json.loads(line)
            by_workload.setdefault(workload, []).append((_run_seconds(run_secs), line))
        meta = self.metadata()
        kept, removed = [], meta.setdefault("removed", {})
        for workload, records in by_workload.items():
            records.sort(key=lambda r: r[0])
            kept += [line for _seconds, line in records[:count]]
            if len(records) > count:
                removed[hashes[workload]] = removed.get(hashes[workload], 0) + len(records) - count
        tmp = self.directory / f".{_RECORDS}.tmp"
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(self.directory / _RECORDS)
        self._write_metadata(meta)
        return len(lines) - len(kept)

    def _tables(self) -> tuple[list[str], list[str]]:
        """The workloads' hashes, in the order records refer to them, and the record lines."""
        with open(self.directory / _WORKLOADS) as f:
            hashes = [json.loads(line)[0] for line in f if line.strip()]
        with open(self.directory / _RECORDS) as f:
            lines = [line.rstrip("\n") for line in f if line.strip()]
        return hashes, lines


def _check_records(hashes: list, lines: list[str], directory: Path) -> None:
    """Raises ValueError for a record TVM's parser would crash on (it dereferences a null
    in a trace or among the run times, for one): each is [workload index, [[instructions,
    decisions], run times, target, argument info]] with numbers for run times and no null in
    its trace but where TVM writes one itself (TransformLayout's pad value)."""
    def has_null(node) -> bool:
        return node is None or isinstance(node, list) and any(has_null(n) for n in node)

    def attributes_null(instruction: list) -> bool:
        kind, attributes = instruction[0], instruction[2]
        if kind == "TransformLayout":  # [index map, buffer index, pad value or null, ...]
            attributes = [a for position, a in enumerate(attributes) if position != 2]
        return has_null(attributes)

    for number, line in enumerate(lines):
        try:
            workload, (trace, run_secs, *_rest) = json.loads(line)
            instructions, decisions = trace
            well_formed = (
                type(workload) is int and 0 <= workload < len(hashes)
                and isinstance(run_secs, list)
                and all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in run_secs)
                and not has_null(decisions)
                and all(isinstance(i, list) and len(i) == 4 and isinstance(i[0], str)
                        and all(isinstance(part, list) for part in i[1:])
                        and not has_null([i[1], i[3]]) and not attributes_null(i)
                        for i in instructions)
                and all(isinstance(d, list) and len(d) == 2 and type(d[0]) is int
                        for d in decisions))
        except (ValueError, TypeError):
            well_formed = False
        if not well_formed:
            raise ValueError(f"tuning record {number} in {directory / _RECORDS} is damaged")


def _keeps_default(best: float | None, default: float | None) -> bool:
    """Whether a compile keeps a kernel's default schedule (``default`` seconds; None: never
    timed) over its best record (None: none ran)."""
    return default is not None and (best is None or best >= default)


def _run_seconds(run_secs: list) -> float:
    return sum(run_secs) / len(run_secs) if run_secs else FAILED_RUN_S


_warned: set[str] = set()
# directory -> ((file stamps, workloads left to time), MetaSchedule database)
_loaded: dict[Path, tuple[tuple, object]] = {}


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def _warn_foreign(directory: Path, reason: str) -> None:
    _warn_once(f"ignoring the tuning records in {directory}: {reason}; tune for this target "
               "to get its own")


def find_database(spec: TargetSpec, cache_dir=None) -> TuningDatabase | None:
    """The database of records tuned for ``spec`` in ``cache_dir`` (default: the user's cache,
    or $ODLA_TVM_CACHE_DIR), for compile_module; None when there is none. Records of the same
    target name made for another key (another CPU, say) are ignored with a warning."""
    if "database" not in spec.schedules:
        return None
    database = TuningDatabase(spec, cache_dir)
    if database.has_records():
        reason = database.foreign_reason()
        if reason is None:
            return database
        _warn_foreign(database.directory, reason)
        return None
    for other in sorted((database.root / "tuning").glob(f"{_database_name(spec)}-*")):
        if other != database.directory and (other / _RECORDS).is_file():
            reason = TuningDatabase(spec, directory=other).foreign_reason()
            _warn_foreign(other, reason or "its directory names another target")
    return None


def _database_name(spec: TargetSpec) -> str:
    return spec.database_name or spec.name


def _export_shared(mod, compiler: str | None) -> str:
    """A built candidate as a shared library for an RPC server, linked here (with ``compiler``,
    a cross compiler, for another architecture): MetaSchedule's default export, an archive of
    objects, needs a compiler on the server, and a board has none."""
    from tvm.support import cc

    path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
    mod.export_library(path, fcompile=cc.cross_compiler(compiler) if compiler else cc.create_shared)
    return path


def _build_candidate(mod, target, _params):
    """MetaSchedule's default_build without its import of every tensor intrinsic, which took
    ~25 s in each builder process before toolchain.calling_frames; a candidate reaches
    the builder with any tensorization already applied. Compiled as builds compile it
    (targets.codegen: register tiles on the stack), so that it is timed as it will run."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return codegen.build_kernels(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod),
                                 target)


def _architecture(mod: tvm.IRModule) -> str:
    return str(tvm_ffi.structural_hash(mod, skip_tensor_content=True))


def _task_hash(task) -> str:
    return str(tvm_ffi.structural_hash(task.dispatched[0]))


def _kernel_workloads(kernels: tvm.IRModule) -> dict[str, tvm.IRModule]:
    """The unscheduled kernels of ``kernels`` as MetaSchedule's workloads: hash (a task's,
    _task_hash) -> the kernel as a module of its own."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    workloads = [_normalize_mod(func) for func in kernels.functions.values()
                 if isinstance(func, tvm.tirx.PrimFunc)
                 and not func.attrs.get("tirx.is_scheduled", False)]
    return {str(tvm_ffi.structural_hash(w)): w for w in workloads}


def _default_scheduled_copy(workload: tvm.IRModule, spec: TargetSpec) -> tvm.IRModule:
    # A copy: default rules may change the module they are given, and tuning reads it.
    with spec.tvm_target():
        return default_scheduled(tvm.ir.load_json(tvm.ir.save_json(workload)), spec)


def default_schedule_digest(workload: tvm.IRModule, spec: TargetSpec) -> str:
    """Which schedule the target's default rules give a kernel (a structural hash of the
    scheduled kernel), and how it is compiled (targets.codegen): the tuning database keeps
    the one each kernel's default time was measured for, so that a change of either (another
    odla-tvm) is seen."""
    scheduled = tvm_ffi.structural_hash(_default_scheduled_copy(workload, spec))
    return f"{scheduled} ({codegen.KERNEL_CODEGEN})"


def tune(mod: tvm.IRModule, spec: TargetSpec, *, trials: int | None = None,
         minutes: float | None = None, cache_dir=None, label: str = "model",
         progress: bool = True, keep_best: int | None = None,
         tracker: rpc.Tracker | None = None) -> TuningReport:
    """Tunes the kernels of ``mod`` for ``spec`` with MetaSchedule, measuring on this machine
    or on the RPC servers registered with ``tracker`` under its key (every one free when the
    run starts, at once), and adds the records to the target's database, with each kernel's
    time under the default schedules (measured once, first). ``trials``: candidates measured
    for the model's kernels in all runs together (what earlier runs recorded counts);
    ``minutes``: the wall-clock limit of this run, checked after each batch. ``label`` names
    the model in the database's run log. ``keep_best``: afterwards, keep only that many of the
    fastest records of each kernel in the database (TuningDatabase.keep_best).
    rpc.TrackerError when the tracker cannot be reached or has no free server under the key
    (after rpc.SERVER_WAIT_S), or every server is lost during the run."""
    report = _tune(mod, spec, trials, minutes, cache_dir, label, progress, tracker)
    if keep_best is not None:
        report.records_removed = TuningDatabase(spec, cache_dir).keep_best(keep_best)
    return report


def _tune(mod, spec, trials, minutes, cache_dir, label, progress, tracker) -> TuningReport:
    from tvm.s_tir import meta_schedule as ms

    if tracker is None and (spec.remote or not spec.runs_here()):
        where = ("is another machine's CPU" if spec.remote else
                 f"code cannot run on this machine ({spec.arch}, {spec.device_kind})")
        raise TuningUnavailable(
            f"tuning measures candidates on the device, and {spec.name} {where}; tune on a "
            f"machine of that kind, or through an RPC tracker with servers on such machines "
            f"(rpc_tracker and rpc_key; odla-tvm tune --rpc-tracker HOST:PORT --rpc-key KEY)")
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
    # Every kernel first gets FIRST_TRIALS, in turn: a kernel left unscheduled runs on one
    # core, unvectorized (resnet50's smallest 1x1 convolution so took longer than all its
    # tuned ones). Then the kernels doing most of the arithmetic share the rest, each batch
    # going where the model's time has been falling fastest (MetaSchedule's gradient
    # scheduler): in turn, squeezenet's classifier, 29% of its time, got 48 of 757 trials.
    phases = [([i for i, count in enumerate(counts) if count < FIRST_TRIALS], FIRST_TRIALS,
               "round-robin"),
              (list(range(_heavy_count(tasks))), None, "gradient")]
    remote = fleet is not None
    with _quiet_meta_schedule():
        # One builder and one runner for the whole run: their processes take seconds to start.
        builder = KeptPoolBuilder(
            # The default 30 s is too short for a large convolution on 2 busy cores.
            f_build=_build_candidate, timeout_sec=60, workers=cpu_count(),
            f_export=functools.partial(_export_shared, compiler=spec.cross_compiler)
            if remote else None)
        runner = rpc.TrackerRunner(fleet) if remote else ms.runner.LocalRunner(timeout_sec=60)
        try:
            _time_default_schedules(tasks, hashes, untimed, spec, database, builder, runner,
                                    progress)
            progress_bar = _Progress(
                tasks, database.compiled_seconds(hashes),
                max(budget, 0) if trials is not None else None,
                started + minutes * 60 if minutes is not None else None,
                f"tuning {label} for {spec.name}", progress and budget > 0, fleet)
            try:
                for indices, per_task, scheduler in phases:
                    left = budget - progress_bar.trials
                    if per_task is not None:
                        left = min(left, sum(per_task - counts[i] for i in indices))
                    if not indices or left <= 0 or progress_bar.out_of_time:
                        continue
                    progress_bar.phase(indices)
                    _tune_tasks([tasks[i] for i in indices], left, per_task, scheduler,
                                minutes is not None, database, ms_database, progress_bar,
                                builder, runner)
            finally:
                progress_bar.close()
            # The run-off's runner flushes the caches before each run (_run_off says why).
            flushing = ms.runner.EvaluatorConfig(number=1, repeat=RUN_OFF_REPEATS,
                                                 min_repeat_ms=0, enable_cpu_cache_flush=True)
            racer = (rpc.TrackerRunner(fleet, flushing) if remote else
                     ms.runner.LocalRunner(timeout_sec=60, evaluator_config=flushing))
            try:
                _run_off(tasks, hashes, spec, database, ms_database, builder, racer, progress)
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
                database: TuningDatabase, ms_database, progress_bar: _Progress, builder,
                runner) -> None:
    """One MetaSchedule run over ``tasks``: ``budget`` trials in all, at most ``per_task``
    each (None: no limit), batches chosen by MetaSchedule's task ``scheduler``; ``timed``: a
    time budget is checked between batches (ending the run with _OutOfTime), so batches are
    smaller. Round robin records each batch as it is measured; the gradient scheduler records
    nothing, and so cannot stop for time, until each task has had its first batch (with 8
    trials a batch, a minute for 7 kernels). Built by ``builder`` and measured by ``runner``
    (here, or on RPC servers)."""
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
                database=ms_database, measure_callbacks=[
                    *ms.MeasureCallback.create("default"), progress_bar.callback()],
                task_scheduler=scheduler)
    except Exception:  # TVM's FFI may hand _OutOfTime back as its own error type
        if isinstance(runner, rpc.TrackerRunner) and runner.fleet.error is not None:
            raise runner.fleet.error from None
        if not progress_bar.out_of_time:
            raise


def _time_default_schedules(tasks: list, hashes: list[str], untimed: dict[str, str],
                            spec: TargetSpec, database: TuningDatabase, builder, runner,
                            progress: bool) -> None:
    """Measures the kernels of ``untimed`` (hash -> digest of its default schedule) as the
    target's default schedules make them (what a compile gives a kernel where no record is
    faster), with the builder and runner that measure the candidates, and keeps the seconds
    and digests in ``database``: a record applies only where it beats them
    (TuningDatabase.records). A kernel whose default fails to build or run gets None."""
    from tvm.s_tir import meta_schedule as ms

    todo = [(task, h) for task, h in zip(tasks, hashes) if h in untimed]
    if not todo:
        return
    target = spec.tvm_target()
    kernels = [_default_scheduled_copy(task.dispatched[0], spec) for task, _h in todo]
    seconds = dict.fromkeys((h for _task, h in todo), None)
    with tqdm.tqdm(total=len(todo), desc="building the default schedules", unit="kernel",
                   disable=not progress) as bar:
        built = builder.build([ms.builder.BuilderInput(k, target) for k in kernels])
        bar.set_description("timing the default schedules")
        # One at a time: LocalRunner measures every input it is given before it returns.
        for (_task, h), kernel, b in zip(todo, kernels, built):
            if b.error_msg is None:
                [future] = runner.run([ms.runner.RunnerInput(
                    b.artifact_path, spec.device_kind,
                    ms.arg_info.ArgInfo.from_entry_func(kernel, remove_preproc=True))])
                result = future.result()
                ms.utils.remove_build_dir(b.artifact_path)
                if result.error_msg is None and result.run_secs:
                    seconds[h] = _run_seconds([float(s) for s in result.run_secs])
            bar.update()
    database.add_default_seconds(seconds, {h: untimed[h] for h in seconds})


def _run_off(tasks: list, hashes: list[str], spec: TargetSpec, database: TuningDatabase,
             ms_database, builder, runner, progress: bool) -> None:
    """Measures each kernel's best record and its default schedule again, side by side, as
    a model runs them: RUN_OFF_ROUNDS rounds, each schedule once a round, in turns, with
    ``runner`` flushing the caches of all but the first argument (the weights, the output)
    before each of its RUN_OFF_REPEATS runs; each keeps its median run as its time, and the
    record applies only if it was faster in every round (by chance, with the two alike, 1 in
    2^RUN_OFF_ROUNDS): the default schedule is what an untuned build runs. Tuning
    times the default once and each candidate later, each many times over in a row, with its
    weights in the caches. In a model, a kernel's weights come from memory (the model's do
    not fit the caches), and timed apart the two were compared across the machine's slow
    spells: a record could beat its default there and run slower in the model. On a 2-core
    AMD EPYC VM, BERT-base's tuned build ran 114.8 ms against 113.0 untuned (2 of its
    matmuls 2.88 ms against 2.78, 0.74 against 0.70); in another run 122.4 against 118.4,
    and after the run-off 117.9 (13 of 30 kernels from records, 17 before); ResNet-50 43.1,
    after the run-off 43.0, untuned 43.9 (7 of 28 from records, 19 before); the three builds
    of each in one process, in turns. Kernels that ran off already (and have
    found no faster record since) are not measured again, nor those under RUN_OFF_MIN_S."""
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
        pairs.append((tuned.mod, _default_scheduled_copy(workload, spec)))
    results = {}
    with tqdm.tqdm(total=len(todo), desc="running the best records off against the default "
                   "schedules", unit="kernel", disable=not progress) as bar:
        built = builder.build([ms.builder.BuilderInput(kernel, target)
                               for pair in pairs for kernel in pair])
        for (_task, h), pair, both in zip(todo, pairs, zip(built[::2], built[1::2])):
            if all(b.error_msg is None for b in both):
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


def _scheduled_already(task) -> bool:
    """Whether the task's kernel came scheduled (targets.amx's AMX kernels): nothing to tune."""
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
    """MetaSchedule prints every task table to the console; keep warnings there (its full
    logs still go to the database's logs/ directory). Its logging set-up also fails on a
    handler without a name (pytest's log capture adds some), so those step aside meanwhile."""
    logger = logging.getLogger("tvm.s_tir.meta_schedule")
    level, unnamed = logger.level, [h for h in logger.handlers if h.get_name() is None]
    logger.setLevel(logging.WARNING)
    for handler in unnamed:
        logger.removeHandler(handler)
    try:
        yield
    finally:
        logger.setLevel(level)
        for handler in unnamed:
            logger.addHandler(handler)


class _OutOfTime(Exception):
    """Raised from a measure callback to end a MetaSchedule run when its time is up."""


class _Progress:
    """A tqdm bar over the trials: kernels done in this phase, the model's best kernel time so
    far (calls x the better of the best record and the default schedule, summed over measured
    kernels), the RPC servers measuring (those that measured and were not lost since), and the
    time left of a minutes budget. Ends the run (raising _OutOfTime) once that time is up."""

    def __init__(self, tasks, best, total, deadline, description, enabled, fleet=None):
        """``best``: each task's time so far, as a compile would build it."""
        self.weights = [t.weight for t in tasks]
        self.best = list(best)
        self.indices = list(range(len(tasks)))  # the phase's tasks, by MetaSchedule's task id
        self.deadline = deadline
        self.fleet = fleet
        self.trials = 0
        self.out_of_time = False
        self.bar = tqdm.tqdm(total=total, desc=description, unit="trial", disable=not enabled)

    def phase(self, indices: list[int]) -> None:
        self.indices = indices

    def callback(self):
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

        progress = self

        @derived_object
        class ProgressCallback(PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
                      runner_results):
                progress.update(task_scheduler, task_id, runner_results)

        return ProgressCallback()

    def update(self, scheduler, task_id: int, runner_results) -> None:
        for result in runner_results:
            if result.error_msg is None and result.run_secs:
                seconds = sum(float(s) for s in result.run_secs) / len(result.run_secs)
                task = self.indices[task_id]
                if self.best[task] is None or seconds < self.best[task]:
                    self.best[task] = seconds
        self.trials += len(runner_results)
        records = scheduler.tasks_
        measured = [w * b for w, b in zip(self.weights, self.best) if b is not None]
        postfix = {"kernels done": f"{sum(bool(r.is_terminated) for r in records)}/{len(records)}",
                   "best": f"{sum(measured) * 1e3:.3f} ms" if measured else "-"}
        if self.fleet is not None:
            postfix["servers"] = self.fleet.in_use()
        if self.deadline is not None:
            postfix["left"] = f"{max(0.0, self.deadline - time.monotonic()) / 60:.1f} min"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(len(runner_results))
        if self.deadline is not None and time.monotonic() >= self.deadline:
            # The batch is in the database already (the default callbacks come first). Ending
            # the tasks here instead would fail the gradient scheduler's check that the task
            # it is about to return was not ended.
            self.out_of_time = True
            raise _OutOfTime

    def close(self) -> None:
        self.bar.close()
