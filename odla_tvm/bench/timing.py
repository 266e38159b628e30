"""How the bench times: paths in turns, a slow path alone on a budget, and ODLA's cost per
call on a tiny model."""

from __future__ import annotations

import logging
import math
import statistics
import tempfile
import time

import numpy as np

from ..computation import (
    create_argument,
    create_computation,
    set_computation_item,
    set_value_as_output,
)
from ..context import bind_to_argument, create_context
from ..executable import compile_computation, launch_executable
from ..ops.math import add
from ..session import Session
from ..types import ElementType, ItemType, OdlaError, ValueType
from .c_overhead import c_call_overhead

log = logging.getLogger(__name__)

SLOW_RUN_S = 20.0  # a pure-TVM run slower than this is timed once
ALONE_BUDGET_S = 30.0  # pure-TVM timed runs stop at 3 once they add up to this


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _turns(path):
    """``turn(untimed, timed) -> timed seconds`` of a path: a PathProcess, or a call."""
    if hasattr(path, "turn"):
        return path.turn

    def turn(untimed: int, timed: int) -> list[float]:
        for _ in range(untimed):
            path()
        return [_timed(path) for _ in range(timed)]

    return turn


def latency_in_turns(paths: dict, runs: int = 5, seconds: float = 3.0, turn_s: float = 0.25,
                     settle_s: float = 0.1, budget_s: float = 90.0) -> dict[str, tuple[float, int]]:
    """Per path (name -> a call, or a PathProcess): (median seconds, timed runs). The paths take
    turns, each running for about ``turn_s`` at a time, until each has at least ``runs`` timed
    runs that add up to ``seconds`` (or, once each has 3, when ``budget_s`` is spent). Turns
    spread the machine's drift over every path alike, where timing one path after another gave
    one path a quiet minute and the next a busy one. Each turn starts with ``settle_s`` idle
    and runs for a fifth of a turn untimed: the last path's thread pool spins on the cores after
    its run, slowing the next path's first runs."""
    turns = {name: _turns(path) for name, path in paths.items()}
    first = {name: max(turn(0, 1)[0], 1e-6) for name, turn in turns.items()}  # also a warm-up
    untimed = {name: math.ceil(turn_s / 5 / t) for name, t in first.items()}
    timed = {name: math.ceil(turn_s / t) for name, t in first.items()}
    times: dict[str, list[float]] = {name: [] for name in paths}
    started = time.perf_counter()

    def wanted(name: str) -> bool:
        return len(times[name]) < runs or sum(times[name]) < seconds

    while any(wanted(name) for name in paths) and (
            min(len(t) for t in times.values()) < 3 or time.perf_counter() - started < budget_s):
        for name, turn in turns.items():
            if wanted(name):
                time.sleep(settle_s)
                times[name] += turn(untimed[name], timed[name])
    return {name: (statistics.median(t), len(t)) for name, t in times.items()}


def latency_alone(path, first_s: float, runs: int = 5, budget_s: float = ALONE_BUDGET_S,
                  slow_s: float = SLOW_RUN_S) -> tuple[float, int]:
    """(median seconds, timed runs) of a slow path (a call, or a PathProcess) whose warm-up
    run took ``first_s``: one timed run when that exceeded ``slow_s``, else ``runs``, or fewer
    (never under 3) once they add up to ``budget_s``."""
    turn = _turns(path)
    times: list[float] = []
    wanted = 1 if first_s > slow_s else runs
    while len(times) < wanted and (len(times) < 3 or sum(times) < budget_s):
        times += turn(0, 1)
    return statistics.median(times), len(times)


def per_call_us(call, calls: int = 20000, repeats: int = 7) -> float:
    """CPU microseconds per call of ``call``: the fastest of ``repeats`` loops of ``calls``
    calls. CPU time, not wall time: waiting for a core on a busy machine is not the call's."""
    for _ in range(calls // 10):
        call()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - start) / calls)
    return best * 1e6


def call_overhead(calls: int = 20000) -> dict[str, float]:
    """Microseconds per call on a tiny model (one add of a 1x4 float32 argument): the bare VM
    call on prepared device tensors, CompiledModule.run (NumPy in and out),
    launch_executable and Session.run; then the same from C++ and C (c_overhead)."""
    comp = create_computation()
    with tempfile.TemporaryDirectory() as no_records:
        set_computation_item(comp, ItemType.CACHE_DIR, no_records)
        x = create_argument(ValueType(ElementType.FLOAT32, (1, 4)), "x")
        set_value_as_output(add(x, x))
        executable = compile_computation(comp)
    data = np.ones((1, 4), np.float32)
    context = create_context()
    bind_to_argument(x, data, context)
    session = Session(executable)
    feeds = {"x": data}
    rows = {
        "bare VM call": per_call_us(executable.module.bare_call([data]), calls),
        "CompiledModule.run": per_call_us(lambda: executable.module.run([data]), calls),
        "launch_executable": per_call_us(lambda: launch_executable(executable, context), calls),
        "Session.run": per_call_us(lambda: session.run(feeds), calls),
    }
    try:
        rows.update(c_call_overhead(executable, calls))
    except OdlaError as err:
        log.warning("no C rows in the cost per call: %s", err.message)
    return rows
