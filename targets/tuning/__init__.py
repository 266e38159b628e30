"""Autotuning with MetaSchedule (search), the tuning database each target keeps (database;
where its records are, found without the compiler: records), the run-off of records against
default schedules (run_off), and where candidates are built (builder) and measured (rpc,
through a tracker). Importing it loads nothing of TVM's compiler; the names below that need
it import it when first used."""

from typing import TYPE_CHECKING

from toolchain import compiling_attributes

from .records import find_records

if TYPE_CHECKING:  # the names below, for editors and type checkers (tests/test_rules.py)
    from .database import TuningDatabase, find_database
    from .search import TuningReport, TuningUnavailable, tune

__getattr__ = compiling_attributes(__name__, {
    "TuningDatabase": ".database", "find_database": ".database",
    "TuningReport": ".search", "TuningUnavailable": ".search", "tune": ".search"})
