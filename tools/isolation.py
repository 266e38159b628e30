"""Many jobs run in a few long-lived worker processes, each job under a time limit.

Starting a process per job costs seconds (importing TVM), so each worker runs job after job;
a job that kills its worker (a signal, an exit) or runs past its limit is reported as lost
with its cause, and the worker is replaced: one bad job never stops the others. Used by the
ONNX conformance run and the fuzzing campaign.
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import signal
import time
from multiprocessing.connection import wait
from typing import Callable


@dataclasses.dataclass
class Lost:
    """A job whose worker died (``kind`` "crash") or that ran past its limit ("hang")."""

    name: str
    kind: str
    detail: str
    seconds: float


_READY = "isolation: worker ready"


def _serve(connection, setup: Callable, setup_args: tuple) -> None:
    """The worker: ``setup(*setup_args)`` gives the function that runs one job by name."""
    run = setup(*setup_args)
    connection.send(_READY)
    while True:
        name = connection.recv()
        if name is None:
            return
        connection.send(run(name))


def death_cause(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"worker killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"worker killed by signal {-exitcode}"
    return f"worker process died (exit code {exitcode})"


class _Slot:
    """One worker process and the job it is running."""

    def __init__(self, context, setup, setup_args):
        self._context, self._setup, self._setup_args = context, setup, setup_args
        self.start_worker()

    def start_worker(self):
        self.connection, child = self._context.Pipe()
        self.process = self._context.Process(target=_serve, daemon=True,
                                             args=(child, self._setup, self._setup_args))
        self.process.start()
        child.close()
        self.name, self.started, self.done, self.ready = None, 0.0, 0, False

    def submit(self, name: str):
        self.name, self.started = name, time.monotonic()
        self.connection.send(name)

    def stop(self):
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


def run_isolated(names: list[str], setup: Callable, setup_args: tuple = (), jobs: int = 2,
                 timeout: float = 300.0, recycle_after: int = 150,
                 progress: Callable | None = None) -> dict:
    """Runs the jobs ``names`` in ``jobs`` workers, each made by ``setup(*setup_args)`` (a
    module-level function: workers are spawned) and restarted after ``recycle_after`` jobs to
    bound memory. Returns each name's result, or a Lost for a job that killed its worker or
    ran past ``timeout`` seconds, counted once its worker is ready (a worker's start-up is not
    timed: it takes seconds, more on a loaded machine). ``progress(name, result)`` is called after each
    job."""
    context = multiprocessing.get_context("spawn")
    pending = collections.deque(names)
    slots = [_Slot(context, setup, setup_args) for _ in range(max(1, min(jobs, len(names))))]
    results: dict = {}

    def finish(slot, result):
        name, slot.name = slot.name, None
        results[name] = result
        slot.done += 1
        if progress:
            progress(name, result)

    try:
        while pending or any(s.name for s in slots):
            for slot in slots:
                if slot.name is None and pending:
                    if slot.done >= recycle_after:
                        slot.stop()
                        slot.start_worker()
                    slot.submit(pending.popleft())
            busy = [s for s in slots if s.name]
            ready = wait([s.connection for s in busy], timeout=1.0)
            for slot in busy:
                if slot.connection in ready:
                    try:
                        result = slot.connection.recv()
                        if isinstance(result, str) and result == _READY:
                            slot.ready, slot.started = True, time.monotonic()
                        else:
                            finish(slot, result)
                        continue
                    except (EOFError, OSError):
                        slot.process.join()
                        kind, detail = "crash", death_cause(slot.process.exitcode)
                elif slot.ready and time.monotonic() - slot.started > timeout:
                    kind, detail = "hang", f"timed out after {timeout:.0f} s"
                else:
                    continue
                finish(slot, Lost(slot.name, kind, detail, time.monotonic() - slot.started))
                slot.stop()
                slot.start_worker()
    finally:
        for slot in slots:
            if slot.process.is_alive():
                slot.connection.send(None)
            slot.stop()
    return results
