"""Where a target's tuning records are (``<cache>/tuning/<target name>-<digest of its key>/``)
and whether they apply to it: found without TVM's compiler, as the engine cache's key needs
(targets.tuning.database reads and writes the records themselves)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from toolchain import cache_dir as default_cache_dir

from ..specs import TargetSpec, tvm_version

log = logging.getLogger("targets.tuning.database")

_TARGET_FILE = "target.json"
_WORKLOADS = "database_workload.json"
_RECORDS = "database_tuning_record.json"
# What the target file says that decides which records a compile applies (see state).
_APPLYING = ("target_key", "tvm_version", "models", "default_schedules",
             "default_schedule_digests", "run_offs")


class RecordsDirectory:
    """The directory of one target's tuning records in one cache directory."""

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
        if meta.get("tvm_version") != tvm_version():
            return (f"TVM {meta.get('tvm_version', 'unknown')} made them; this is TVM "
                    f"{tvm_version()}")
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


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def _warn_foreign(directory: Path, reason: str) -> None:
    _warn_once(f"ignoring the tuning records in {directory}: {reason}; tune for this target "
               "to get its own")


def find_records(spec: TargetSpec, cache_dir=None) -> RecordsDirectory | None:
    """The directory of records tuned for ``spec`` in ``cache_dir`` (default: the user's cache,
    or $ODLA_TVM_CACHE_DIR); None when there is none. Records of the same target name made for
    another key (another CPU, say) are ignored with a warning."""
    if "database" not in spec.schedules:
        return None
    database = RecordsDirectory(spec, cache_dir)
    if database.has_records():
        reason = database.foreign_reason()
        if reason is None:
            return database
        _warn_foreign(database.directory, reason)
        return None
    for other in sorted((database.root / "tuning").glob(f"{_database_name(spec)}-*")):
        if other != database.directory and (other / _RECORDS).is_file():
            reason = RecordsDirectory(spec, directory=other).foreign_reason()
            _warn_foreign(other, reason or "its directory names another target")
    return None


def _database_name(spec: TargetSpec) -> str:
    return spec.database_name or spec.name
