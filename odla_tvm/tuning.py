"""Autotuning: ``tune`` measures schedules for a model's kernels with MetaSchedule, on this
machine or on the RPC servers of a TVM RPC tracker, and keeps the best in the target's tuning
database (targets.tuning), which every later compile for that target uses:
compile_computation, execute_computation, Session, export.

Where databases live: the ``cache_dir`` argument, else the computation's CACHE_DIR item, else
$ODLA_TVM_CACHE_DIR, else the user's cache directory (~/.cache/odla-tvm).
"""

from __future__ import annotations

import logging
import os
import time
from numbers import Real

import targets

from . import model_latency
from .computation import Computation, _computation, cache_dir_of, destroy_computation
from .device import Device, default_target, target_spec
from .session import precision_items, set_precision
from .types import DeviceName, OdlaError, Status, check_count

log = logging.getLogger(__name__)


def _budget(trials, minutes) -> None:
    if trials is None and minutes is None:
        raise OdlaError(Status.INVALID_PARAM, "no tuning budget; give trials, minutes or both")
    if trials is not None:
        check_count(trials, 1, "trials")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, Real)
                                or not minutes > 0):
        raise OdlaError(Status.INVALID_PARAM, f"minutes is {minutes!r}; expected a number > 0")


def _tracker(rpc_tracker, rpc_key):
    """The RPC tracker to measure through (None: measure here), checked and reachable."""
    if rpc_tracker is None and rpc_key is None:
        return None
    if rpc_tracker is None or rpc_key is None:
        missing, given = ("rpc_key", "rpc_tracker") if rpc_key is None else ("rpc_tracker",
                                                                               "rpc_key")
        raise OdlaError(Status.INVALID_PARAM, f"{given} is given without {missing}; expected "
                        "both: the tracker's HOST:PORT and the key its servers registered under")
    host, _, port = rpc_tracker.rpartition(":") if isinstance(rpc_tracker, str) else ("", "", "")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise OdlaError(Status.INVALID_PARAM, f"rpc_tracker is {rpc_tracker!r}; expected "
                        "'HOST:PORT' (a port 1-65535), where python -m tvm.exec.rpc_tracker runs")
    # The tracker names servers "server:KEY" and TVM splits that at the colon.
    if not isinstance(rpc_key, str) or not rpc_key or any(c in rpc_key for c in ": \t\n"):
        raise OdlaError(Status.INVALID_PARAM, f"rpc_key is {rpc_key!r}; expected a non-empty "
                        "string without ':' or spaces, as given to rpc_server --key")
    tracker = targets.Tracker(host.strip("[]"), int(port), rpc_key)
    try:
        tracker.servers()
    except targets.TrackerError as err:
        raise OdlaError(Status.FAILURE, f"rpc_tracker {rpc_tracker!r}: {err}") from None
    return tracker


def _why_not_timed(comp: Computation, spec: targets.TargetSpec, tracker) -> str | None:
    """Why tune cannot time the model here before and after (None: it can)."""
    if tracker is not None or spec.remote or not spec.runs_here():
        return f"{spec.name} is measured on other machines"
    return model_latency.not_timed_reason(comp)


def _model_label(model) -> str:
    """How the database's run log names the model."""
    if isinstance(model, Computation):
        return "computation"
    if isinstance(model, (str, os.PathLike)):
        return os.path.splitext(os.path.basename(os.fspath(model)))[0]
    graph = getattr(model, "graph", None)  # an onnx.ModelProto
    return getattr(graph, "name", "") or "onnx-model"


def tune(model, target=None, trials: int | None = None, minutes: float | None = None,
         cache_dir=None, progress: bool = True, keep_best: int | None = None,
         rpc_tracker: str | None = None, rpc_key: str | None = None,
         time_model: bool = True, precision: str | None = None) -> targets.TuningReport:
    """Tunes ``model`` (a Computation, or an ONNX model: path, bytes or ModelProto) for
    ``target`` (a Device, a target name, a target spec file of another machine's CPU, or None
    for the DEFAULT device's, what Session.from_onnx uses) and returns what the run did.

    ``trials``: candidates measured for the model's kernels, counting those earlier runs
    recorded (so an interrupted run given the same budget resumes where it stopped);
    ``minutes``: a wall-clock limit for the whole call. Progress shows on a tqdm bar unless
    ``progress`` is False. ``keep_best``: afterwards, keep only that many of the fastest
    records of each kernel in the target's database (to store or ship it: compiles use only
    the fastest; later runs still count the removed trials).

    ``rpc_tracker`` ("HOST:PORT") and ``rpc_key``: measure on every RPC server registered with
    that TVM tracker under that key, at once (candidates are still built here); the way to
    tune a board (aarch64-linux) or another machine's CPU (llvm:MCPU:CORES, or its spec file). A
    server lost during the run is done without, and what it was measuring is measured again
    on the others; with no free server after targets.tuning.rpc.SERVER_WAIT_S, OdlaError
    (TIMEOUT).

    ``time_model``: where the target runs here, the model is built as a load of it would be
    (an ONNX model through Session.from_onnx, its engine cache included) and timed before and
    after the run, within ``minutes``; the report gives both latencies and the kernels that
    come from records.

    ``precision`` ("fp32", "bf16" or "fp16", as Session.from_onnx's): the build whose kernels
    are tuned (its items are set on the computation)."""
    started = time.monotonic()
    precision_items(precision)
    _budget(trials, minutes)
    deadline = None if minutes is None else started + 60 * minutes
    if keep_best is not None:
        check_count(keep_best, 1, "keep_best")
    tracker = _tracker(rpc_tracker, rpc_key)
    spec = default_target() if target is None else target_spec(target)
    if isinstance(model, Computation):
        comp, imported = _computation(model), None
    else:
        from .frontends.onnx import import_model  # onnx is needed only here

        comp = imported = import_model(model)
    try:
        set_precision(comp, precision)
        cache_dir = cache_dir_of(comp, cache_dir)
        not_timed = _why_not_timed(comp, spec, tracker) if time_model else None
        # An ONNX model in another precision is timed as its computation (compiled as tuned).
        timed_model = model if precision in (None, "fp32") else comp
        timing = model_latency.BeforeAndAfter(
            timed_model, comp, Device(DeviceName.DEFAULT, 0, spec), cache_dir, deadline) \
            if time_model and not_timed is None else None
        report = targets.tune(
            comp.build_module(spec=spec), spec, trials=trials,
            minutes=None if deadline is None else (deadline - time.monotonic()) / 60,
            cache_dir=cache_dir, label=_model_label(model), progress=progress,
            keep_best=keep_best, tracker=tracker,
            reserve_s=0.0 if timing is None else timing.reserve_s)
        report.not_timed = not_timed
        if timing is not None:
            timing.add_to(report)
        return report
    except targets.TuningUnavailable as err:
        raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE, str(err)) from None
    except targets.TrackerError as err:
        raise OdlaError(Status.TIMEOUT, str(err)) from None
    except OSError as err:
        raise OdlaError(Status.FAILURE, f"cannot write the tuning database: {err}") from None
    finally:
        if imported is not None:
            destroy_computation(imported)
