"""Autotuning with MetaSchedule (search), the tuning database each target keeps (database;
where its records are, found without the compiler: records), the run-off of records against
default schedules (run_off), and where candidates are built (builder) and measured (rpc,
through a tracker). Importing it loads nothing of TVM's compiler; the names below that need
it import it when first used."""

from toolchain import compiling_attributes

from .records import find_records

__getattr__ = compiling_attributes(__name__, {
    "TuningDatabase": ".database", "find_database": ".database",
    "TuningReport": ".search", "TuningUnavailable": ".search", "tune": ".search"})
