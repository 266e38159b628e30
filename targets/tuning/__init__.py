"""Autotuning with MetaSchedule (search), the tuning database each target keeps (database),
the run-off of records against default schedules (run_off), and where candidates are built
(builder) and measured (rpc, through a tracker)."""

from .database import TuningDatabase, find_database
from .search import TuningReport, TuningUnavailable, tune
