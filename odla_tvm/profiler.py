"""Performance monitoring (odla_profiler.h): per-kernel times of real runs, mapped back to the
ODLA values each kernel computes, as a Chrome trace (Perfetto opens it) and a text summary."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np

from .context import Context
from .device import Device, checked_device
from .types import OdlaError, Status

_active: dict = {}  # device key -> the DeviceTrace being recorded
_finished: dict = {}  # device key -> the last stopped DeviceTrace
_lock = threading.Lock()


@dataclass(frozen=True)
class TraceEvent:
    name: str  # kernel, or VM runtime builtin (vm.builtin.*)
    values: tuple[str, ...]  # ODLA value ids the kernel computes; empty for builtins
    start_s: float  # perf_counter time
    duration_s: float
    run: int


class DeviceTrace:
    """``odla_device_trace``: the kernel calls and the runs recorded between start and stop."""

    def __init__(self):
        self.events: list[TraceEvent] = []
        self.runs: list[tuple[float, float]] = []  # (start, duration) of each launch
        self._lock = threading.Lock()

    @property
    def run_time_s(self) -> float:
        return sum(d for _, d in self.runs)

    @property
    def kernel_time_s(self) -> float:
        return sum(e.duration_s for e in self.events)

    def to_chrome_trace(self) -> dict:
        """The Trace Event Format: runs on one track, the calls inside them on another."""
        origin = min([s for s, _ in self.runs] + [e.start_s for e in self.events], default=0.0)
        us = lambda t: round((t - origin) * 1e6, 3)  # noqa: E731
        events = [{"name": f"run {i}", "cat": "run", "ph": "X", "ts": us(start),
                   "dur": round(duration * 1e6, 3), "pid": 0, "tid": 0}
                  for i, (start, duration) in enumerate(self.runs)]
        events += [{"name": e.name, "cat": "builtin" if e.name.startswith("vm.") else "kernel",
                    "ph": "X", "ts": us(e.start_s), "dur": round(e.duration_s * 1e6, 3),
                    "pid": 0, "tid": 1, "args": {"odla_values": list(e.values), "run": e.run}}
                   for e in self.events]
        names = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": label}}
                 for tid, label in ((0, "ODLA runs"), (1, "kernels"))]
        return {"traceEvents": names + events, "displayTimeUnit": "ms"}

    def save(self, path) -> None:
        with open(os.fspath(path), "w") as f:
            json.dump(self.to_chrome_trace(), f)

    def summary(self, top: int = 10) -> str:
        """The hottest kernels with the ODLA values they compute, and how the kernel times
        add up against the measured run time."""
        import statistics  # for reports only, not runs

        total = self.kernel_time_s or 1e-12
        by_name: dict[str, list[TraceEvent]] = defaultdict(list)
        for event in self.events:
            by_name[event.name].append(event)
        rows = sorted(by_name.items(), key=lambda item: -sum(e.duration_s for e in item[1]))
        lines = [f"{len(self.runs)} runs, median {statistics.median(d for _, d in self.runs) * 1e3:.3f} ms"
                 if self.runs else "no runs recorded",
                 f"kernels and runtime calls: {self.kernel_time_s * 1e3:.3f} ms of "
                 f"{self.run_time_s * 1e3:.3f} ms run time "
                 f"({100 * self.kernel_time_s / (self.run_time_s or 1e-12):.1f}%)",
                 f"{'kernel':40} {'calls':>6} {'total ms':>10} {'share':>6}  ODLA values"]
        for name, events in rows[:top]:
            spent = sum(e.duration_s for e in events)
            values = list(dict.fromkeys(v for e in events for v in e.values))
            shown = ", ".join(values[:4]) + (f" (+{len(values) - 4})" if len(values) > 4 else "")
            lines.append(f"{name[:40]:40} {len(events):6} {spent * 1e3:10.3f} "
                         f"{100 * spent / total:5.1f}%  {shown or '-'}")
        return "\n".join(lines)


class RunRecorder:
    """Collects one launch's calls; the k-th call of a kernel computes its k-th binding."""

    def __init__(self, trace: DeviceTrace, kernel_values: dict[str, list[str]]):
        self.trace = trace
        self.kernel_values = kernel_values
        self.calls: Counter = Counter()
        self.events: list[TraceEvent] = []
        self.start = time.perf_counter()
        self.run = len(trace.runs)

    def __call__(self, name: str, start: float, duration: float) -> None:
        index = self.calls[name]
        self.calls[name] += 1
        produced = self.kernel_values.get(name, [])
        values = (produced[index],) if index < len(produced) else ()
        self.events.append(TraceEvent(name, values, start, duration, self.run))

    def finish(self) -> None:
        with self.trace._lock:
            self.trace.runs.append((self.start, time.perf_counter() - self.start))
            self.trace.events.extend(self.events)


def recorder_for(device: Device | None, kernel_values: dict) -> RunRecorder | None:
    """A recorder for one launch on ``device`` while its profiler runs, else None."""
    if device is None:
        return None
    trace = _active.get(device.key)
    return None if trace is None else RunRecorder(trace, kernel_values)


def start_device_profiler(device: Device) -> None:
    device = checked_device(device)
    with _lock:
        _active[device.key] = DeviceTrace()


def stop_device_profiler(device: Device) -> None:
    device = checked_device(device)
    with _lock:
        trace = _active.pop(device.key, None)
        if trace is None:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"the profiler of {device.name.name} is not running; call start_device_profiler first",
            )
        _finished[device.key] = trace


def retrieve_device_trace(device: Device) -> DeviceTrace:
    """The trace of the last start..stop of ``device``'s profiler (odla_RetrieveDeviceTrace)."""
    device = checked_device(device)
    with _lock:
        if device.key in _active:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"the profiler of {device.name.name} is still running; call stop_device_profiler first",
            )
        if device.key not in _finished:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"no trace recorded for {device.name.name}; call start_device_profiler, run, "
                "then stop_device_profiler",
            )
        return _finished[device.key]


def random_inputs(executable, seed: int = 0) -> dict[str, np.ndarray]:
    """One array per argument of ``executable``, dynamic dims set to 1."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for arg in executable.args:
        shape = tuple(1 if d == -1 else d for d in arg.shape.dims)
        dtype = arg.type.dtype
        data = rng.standard_normal(shape) if dtype.kind == "f" else rng.integers(0, 2, shape)
        inputs[arg.id] = data.astype(dtype)
    return inputs


def profile_executable(executable, runs: int = 5) -> tuple[DeviceTrace, list[float]]:
    """Times ``runs`` plain launches on random inputs, then profiles as many; returns the
    trace and the plain launch times in seconds."""
    context = Context()
    inputs = random_inputs(executable)
    for arg in executable.args:
        context.bind_input(arg, inputs[arg.id])
    executable.launch(context)  # warm-up
    plain = []
    for _ in range(runs):
        start = time.perf_counter()
        executable.launch(context)
        plain.append(time.perf_counter() - start)
    start_device_profiler(executable.device)
    for _ in range(runs):
        executable.launch(context)
    stop_device_profiler(executable.device)
    return retrieve_device_trace(executable.device), plain


def compare_to_unprofiled(trace: DeviceTrace, plain: list[float]) -> str:
    import statistics  # for reports only, not runs

    per_run = trace.kernel_time_s / max(len(trace.runs), 1)
    median = statistics.median(plain)
    return (f"unprofiled run: median {median * 1e3:.3f} ms; kernels per profiled run: "
            f"{per_run * 1e3:.3f} ms ({100 * per_run / median:.1f}% of it)")
