"""Asynchronous execution (odla_compute.h, odla_task.h): runs return at once with an Event;
completion also reaches the context's ASYNC_CALLBACK_FUNC, called as ``func(arg, status)``
with its ASYNC_CALLBACK_ARG, as ODLA's C platforms do."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from .computation import Computation, _computation
from .context import Context, _context
from .device import Device, checked_device
from .executable import Executable, _executable
from .execution import execute_computation
from .types import ComputeMode, ItemType, OdlaError, Status, odla_enum

log = logging.getLogger(__name__)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(4, os.cpu_count() or 1),
                                       thread_name_prefix="odla-async")
        return _pool


class Event:
    """The completion of one asynchronous run: ``wait()``, ``done()``, ``exception()``, and
    ``await event`` from asyncio."""

    def __init__(self, future: Future):
        self._future = future

    def wait(self, timeout: float | None = None) -> None:
        """Blocks until the run ends; raises its OdlaError if it failed."""
        try:
            self._future.result(timeout)
        except TimeoutError:
            raise OdlaError(Status.TIMEOUT, f"the run did not finish within {timeout} s") from None

    def done(self) -> bool:
        return self._future.done()

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._future.exception(timeout)

    @property
    def status(self) -> Status | None:
        """SUCCESS or the failure's status once done; None while running."""
        if not self._future.done():
            return None
        error = self._future.exception()
        return Status.SUCCESS if error is None else getattr(error, "status", Status.FAILURE)

    def __await__(self):
        import asyncio  # only a program awaiting events uses it

        return asyncio.wrap_future(self._future).__await__()


def _submit(context: Context, run: Callable[[], None]) -> Event:
    """Runs ``run`` on the pool; one run at a time per context, since a run writes its results
    into the context."""
    with context.lock:
        if context.in_flight:
            raise OdlaError(
                Status.INVALID_PARAM,
                "the context already has a run in flight; wait for its event, or give each "
                "concurrent run its own context",
            )
        context.in_flight = True
    callback = context.items.get(ItemType.ASYNC_CALLBACK_FUNC)
    callback_arg = context.items.get(ItemType.ASYNC_CALLBACK_ARG)
    if callback is not None and not callable(callback):
        context.in_flight = False
        raise OdlaError(
            Status.INVALID_PARAM,
            f"ASYNC_CALLBACK_FUNC is a {type(callback).__name__}; expected a callable (arg, status)",
        )

    def task():
        status = Status.SUCCESS
        try:
            run()
        except OdlaError as err:
            status = err.status
            raise
        except Exception as err:  # noqa: BLE001 (whatever a run raises reaches its event)
            status = Status.FAILURE
            raise OdlaError(Status.FAILURE, f"the asynchronous run failed: {err}") from err
        finally:
            context.in_flight = False
            if callback is not None:
                try:
                    callback(callback_arg, status)
                except Exception:  # noqa: BLE001 (a user callback must not kill the pool)
                    log.exception("ASYNC_CALLBACK_FUNC raised")

    return Event(_executor().submit(task))


def async_launch_executable(executable: Executable, constants_array, context: Context,
                            mode: ComputeMode = ComputeMode.DEFAULT,
                            device: Device | None = None) -> Event:
    """launch_executable, returning at once (odla_AsyncLaunchExecutable). ``constants_array``
    must be None: constants live inside the executable."""
    exe, ctx = _executable(executable), _context(context)
    odla_enum(ComputeMode, mode, "compute mode")
    if constants_array is not None:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"constants_array is a {type(constants_array).__name__}; expected None (constants "
            "are compiled into the executable)",
        )
    if device is not None:
        checked_device(device)
    return _submit(ctx, lambda: exe.launch(ctx))


def async_execute_computation(computation: Computation, context: Context,
                              mode: ComputeMode = ComputeMode.DEFAULT,
                              device: Device | None = None) -> Event:
    """execute_computation, returning at once (odla_AsyncExecuteComputation)."""
    comp, ctx = _computation(computation), _context(context)
    mode = odla_enum(ComputeMode, mode, "compute mode")
    device = checked_device(device)
    return _submit(ctx, lambda: execute_computation(comp, ctx, mode, device))


@dataclass
class Task:
    """``odla_task``: ``func(device, inputs, outputs)`` run on a device, e.g. a sub-computation
    launched with its own context."""

    func: Callable
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)


def _checked_task(device, task) -> tuple[Device, Task]:
    device = checked_device(device)
    if not isinstance(task, Task) or not callable(task.func):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"task is a {type(task).__name__}; expected a Task with a callable func",
        )
    return device, task


def run_task(device: Device, task: Task) -> Status:
    """Runs ``task.func(device, task.inputs, task.outputs)`` now (odla_RunTask)."""
    device, task = _checked_task(device, task)
    try:
        task.func(device, task.inputs, task.outputs)
    except OdlaError:
        raise
    except Exception as err:  # noqa: BLE001
        raise OdlaError(Status.FAILURE, f"task {task.func.__name__} failed: {err}") from err
    return Status.SUCCESS


_async_executor: Callable | None = None


def set_async_executor(executor: Callable | None) -> None:
    """Replaces how run_task_async runs tasks (odla_SetAsyncExecutor): ``executor(run_task,
    device, task)``; None restores the built-in thread pool."""
    global _async_executor
    if executor is not None and not callable(executor):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"executor is a {type(executor).__name__}; expected a callable or None",
        )
    _async_executor = executor


def run_task_async(device: Device, task: Task) -> Event:
    """Runs a task without waiting (odla_RunTaskAsync); the Event reports its end."""
    device, task = _checked_task(device, task)
    if _async_executor is not None:
        future: Future = Future()
        try:
            future.set_result(_async_executor(run_task, device, task))
        except Exception as err:  # noqa: BLE001
            future.set_exception(err)
        return Event(future)
    return Event(_executor().submit(run_task, device, task))
