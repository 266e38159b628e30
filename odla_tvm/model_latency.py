"""How fast a model runs here as its user's next load builds it: what ``tune`` reports before
and after a run. An ONNX model loads through Session.from_onnx, with the engine cache as the
user has it, so that the build after tuning is the engine the user's next load reads."""

from __future__ import annotations

import logging
import time

import numpy as np

from . import engine_cache
from .bench.timing import latency_in_turns
from .computation import Computation
from .device import Device
from .executable import compile_outputs
from .session import Session

log = logging.getLogger(__name__)

TIMED_S = 1.0  # each build's timed runs add up to this, at least 5 of them
TIMING_BUDGET_S = 3.0  # or, past 3 each, stop here


def not_timed_reason(comp: Computation) -> str | None:
    """Why ``comp`` cannot be timed with made-up inputs (None: it can)."""
    dynamic = [a.id for a in comp.args if a.shape.is_dynamic]
    return f"the shapes of its inputs {dynamic} are not fixed" if dynamic else None


def build(model, comp: Computation, device: Device, cache_dir) -> tuple[Session, float | None]:
    """``model`` (an ONNX model, or the Computation ``comp``) built for ``device`` with the
    tuning records in ``cache_dir``, and how long compiling it takes: measured now, or where
    it loaded from the engine cache, as noted when the engine was compiled (None: unknown)."""
    started = time.monotonic()
    if isinstance(model, Computation):
        return Session(compile_outputs(comp, device, comp.args, comp.outputs,
                                       cache_dir=cache_dir)), time.monotonic() - started
    key = engine_cache.onnx_engine_key(model, device, cache_dir)
    cached = key is not None and any(e.key == key for e in engine_cache.entries(cache_dir))
    session = Session.from_onnx(model, device, cache_dir=cache_dir)
    if cached:
        return session, engine_cache.build_seconds(key, cache_dir)
    seconds = time.monotonic() - started
    if key is not None:
        engine_cache.note_build_seconds(key, seconds, cache_dir)
    return session, seconds


def latencies(sessions: dict[str, Session]) -> dict[str, float]:
    """Per name, the median run of its session on seeded random inputs, the sessions timed in
    turns (so that the machine's busy spells fall on each alike)."""
    rng = np.random.default_rng(0)
    args = next(iter(sessions.values())).executable.args
    feeds = {a.id: (rng.standard_normal(a.shape.dims) if a.type.dtype.kind == "f"
                    else np.zeros(a.shape.dims)).astype(a.type.dtype) for a in args}
    timed = latency_in_turns({name: lambda s=session: s.run(feeds)
                              for name, session in sessions.items()},
                             seconds=TIMED_S, budget_s=TIMING_BUDGET_S)
    return {name: seconds for name, (seconds, _runs) in timed.items()}


class BeforeAndAfter:
    """A model built as it loads before a tuning run (at construction) and again after it
    where the records changed, both timed in turns (add_to), within ``deadline`` (a
    time.monotonic() time, or None)."""

    def __init__(self, model, comp: Computation, device: Device, cache_dir, deadline):
        self.model, self.comp, self.device, self.cache_dir = model, comp, device, cache_dir
        self.deadline = deadline
        log.info("building the model as it loads before tuning, to time it")
        self.before, build_s = build(model, comp, device, cache_dir)
        if build_s is None and deadline is not None:  # unknown: half the time left
            build_s = (deadline - time.monotonic()) / 2
        self.build_s = build_s or 0.0
        self.state = engine_cache.database_state(device.target, cache_dir)

    @property
    def reserve_s(self) -> float:
        """What to keep of the time for add_to: a build (about as long as before's), and the
        timing."""
        return 1.25 * self.build_s + 2 * TIMING_BUDGET_S

    def add_to(self, report) -> None:
        """Sets ``report``'s latencies before and after and the kernels from records, or
        where the time left allows no build, why not."""
        after = self.before
        if engine_cache.database_state(self.device.target, self.cache_dir) != self.state:
            if self.deadline is not None and self.deadline - time.monotonic() < self.build_s:
                report.not_timed = ("the time limit left no time to build it again with the "
                                    "new records (the next Session.from_onnx of it compiles "
                                    "them in)")
                return
            log.info("building the model with the new records")
            after, _seconds = build(self.model, self.comp, self.device, self.cache_dir)
        log.info("timing the model before and after tuning, in turns")
        timed = latencies({"before": self.before} if after is self.before
                          else {"before": self.before, "after": after})
        report.latency_before_s = timed["before"]
        report.latency_after_s = timed.get("after", timed["before"])
        module = after.executable.module
        report.kernels, report.tuned_kernels = (len(module.kernel_bindings),
                                                list(module.tuned_kernels))
