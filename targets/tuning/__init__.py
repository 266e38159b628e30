"""Autotuning with MetaSchedule, and the tuning database each target keeps."""

from .database import (RUN_OFF_MIN_S, RUN_OFF_ROUNDS, TuningDatabase, TuningReport,
                       TuningUnavailable, _export_shared, _OutOfTime, _Progress,
                       _scheduled_already, find_database, tune)
