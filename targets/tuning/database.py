"""The tuning database each target keeps: ``<cache>/tuning/<target name>-<digest of its key>/``
holds MetaSchedule's two JSON tables (workloads, and one record per measured candidate) and
``target.json``: the target the records were measured on, the TVM that made them, the models
tuned into it (by architecture), every tuning run, and how fast each kernel ran as the
target's default schedules make it (with a digest of that schedule). ``find_database`` hands a
target its database for compile_module, which applies a kernel's records only where they beat
its default schedule (see targets.tuning.run_off); records made for another target or another
TVM are never applied (a warning says why)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Iterable

import tvm
import tvm_ffi

from toolchain import cache_dir as default_cache_dir

from ..compiler import codegen, default_scheduled
from ..specs import TargetSpec

log = logging.getLogger(__name__)

FAILED_RUN_S = 1e10  # what MetaSchedule records as the run time of a candidate that failed
# Kernels whose default schedule runs faster than this do not run off: a model's time is in
# the others, and at a few microseconds a run-off would time the runner's own overhead.
RUN_OFF_MIN_S = 50e-6
_TARGET_FILE = "target.json"
_WORKLOADS = "database_workload.json"
_RECORDS = "database_tuning_record.json"
# What the target file says that decides which records a compile applies (see state).
_APPLYING = ("target_key", "tvm_version", "models", "default_schedules",
             "default_schedule_digests", "run_offs")


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

    def state(self) -> str:
        """What decides the code a compile makes with these records: the record tables (their
        sizes and modification times) and what the target file says of which records apply
        and to which models, not its log of runs (so that a run that measured nothing new
        leaves it as it was)."""
        tables = [self.directory / _WORKLOADS, self.directory / _RECORDS]
        meta = self.metadata()
        applying = {key: meta.get(key) for key in _APPLYING}
        return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in tables
                        if p.exists()) + ";" + hashlib.sha256(
            json.dumps(applying, sort_keys=True).encode()).hexdigest()

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
            seconds = run_seconds(run_secs)
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
            by_workload.setdefault(workload, []).append((run_seconds(run_secs), line))
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


def run_seconds(run_secs: list) -> float:
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


def _architecture(mod: tvm.IRModule) -> str:
    return str(tvm_ffi.structural_hash(mod, skip_tensor_content=True))


def _kernel_workloads(kernels: tvm.IRModule) -> dict[str, tvm.IRModule]:
    """The unscheduled kernels of ``kernels`` as MetaSchedule's workloads: hash (a task's,
    _task_hash) -> the kernel as a module of its own."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    workloads = [_normalize_mod(func) for func in kernels.functions.values()
                 if isinstance(func, tvm.tirx.PrimFunc)
                 and not func.attrs.get("tirx.is_scheduled", False)]
    return {str(tvm_ffi.structural_hash(w)): w for w in workloads}


def default_scheduled_copy(workload: tvm.IRModule, spec: TargetSpec) -> tvm.IRModule:
    # A copy: default rules may change the module they are given, and tuning reads it.
    with spec.tvm_target():
        return default_scheduled(tvm.ir.load_json(tvm.ir.save_json(workload)), spec)


def default_schedule_digest(workload: tvm.IRModule, spec: TargetSpec) -> str:
    """Which schedule the target's default rules give a kernel (a structural hash of the
    scheduled kernel), and how it is compiled (targets.compiler.codegen): the tuning database keeps
    the one each kernel's default time was measured for, so that a change of either (another
    odla-tvm) is seen."""
    scheduled = tvm_ffi.structural_hash(default_scheduled_copy(workload, spec))
    return f"{scheduled} ({codegen.KERNEL_CODEGEN})"
