"""The progress bar of a tuning run, which also ends the run when its minutes are up."""

from __future__ import annotations

import time

import tqdm


class OutOfTime(Exception):
    """Raised from a measure callback to end a MetaSchedule run when its time is up."""


class Progress:
    """A tqdm bar over the trials: the model's kernels with a measured record (of this run or
    earlier ones), the model's best kernel time so far (calls x the better of the best record
    and the default schedule, summed over measured kernels), the RPC servers measuring (those
    that measured and were not lost since), and the time left of a minutes budget. Ends the
    run (raising OutOfTime) once that time is up, or would be before another batch as long
    as the last one ended."""

    def __init__(self, tasks, best, recorded, total, deadline, description, enabled,
                 fleet=None):
        """``best``: each task's time so far, as a compile would build it; ``recorded``:
        whether each has a record already; ``deadline``: time.monotonic()'s when the time is
        up (None: no limit)."""
        self.weights = [t.weight for t in tasks]
        self.best = list(best)
        self.recorded = list(recorded)
        self.indices = list(range(len(tasks)))  # the phase's tasks, by MetaSchedule's task id
        self.deadline = deadline
        self.fleet = fleet
        self.trials = 0
        self.out_of_time = False
        self.batch_started = time.monotonic()
        self.bar = tqdm.tqdm(total=total, desc=description, unit="trial", disable=not enabled)

    def phase(self, indices: list[int]) -> None:
        self.indices = indices
        self.batch_started = time.monotonic()

    def time_is_up(self, next_batch_s: float = 0.0) -> bool:
        """Whether the time is up, or will be within ``next_batch_s``."""
        if self.deadline is not None and time.monotonic() + next_batch_s >= self.deadline:
            self.out_of_time = True
        return self.out_of_time

    def callback(self):
        from tvm.ir.utils import derived_object
        from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

        progress = self

        @derived_object
        class ProgressCallback(PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
                      runner_results):
                progress.update(task_id, runner_results)

        return ProgressCallback()

    def update(self, task_id: int, runner_results) -> None:
        task = self.indices[task_id]
        batch_s, self.batch_started = time.monotonic() - self.batch_started, time.monotonic()
        for result in runner_results:
            if result.error_msg is None and result.run_secs:
                seconds = sum(float(s) for s in result.run_secs) / len(result.run_secs)
                self.recorded[task] = True
                if self.best[task] is None or seconds < self.best[task]:
                    self.best[task] = seconds
        self.trials += len(runner_results)
        measured = [w * b for w, b in zip(self.weights, self.best) if b is not None]
        postfix = {"kernels with records": f"{sum(self.recorded)}/{len(self.recorded)}",
                   "best": f"{sum(measured) * 1e3:.3f} ms" if measured else "-"}
        if self.fleet is not None:
            postfix["servers"] = self.fleet.in_use()
        if self.deadline is not None:
            postfix["left"] = f"{max(0.0, self.deadline - time.monotonic()):.0f} s"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(len(runner_results))
        if self.time_is_up(batch_s):
            # The batch is in the database already (the default callbacks come first). Ending
            # the tasks here instead would fail the gradient scheduler's check that the task
            # it is about to return was not ended.
            raise OutOfTime

    def close(self) -> None:
        self.bar.close()
