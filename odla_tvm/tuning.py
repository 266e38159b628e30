"""Autotuning: ``tune`` measures schedules for a model's kernels with MetaSchedule, on this
machine or on the RPC servers of a TVM RPC tracker, and keeps the best in the target's tuning
database (targets.tuning), which every later compile for that target uses:
compile_computation, execute_computation, Session, export.

Where databases live: the ``cache_dir`` argument, else the computation's CACHE_DIR item, else
$ODLA_TVM_CACHE_DIR, else the user's cache directory (~/.cache/odla-tvm).
"""

from __future__ import annotations

import os
from numbers import Real

import targets

from .computation import Computation, _computation, cache_dir_of, destroy_computation
from .device import Device, allocate_device, checked_device
from .types import DeviceName, OdlaError, Status, check_count


def target_spec(target) -> targets.TargetSpec:
    """A target from a Device, a target name (``odla-tvm info`` lists them), a target spec
    file (a path ending in .json, written by ``odla-tvm info --target-spec``) or None: this CPU
    as TVM alone compiles for it (INTEL_X86's host-cpu), the code tuning speeds up; DEFAULT
    hands its convolutions and matmuls to oneDNN."""
    if target is None:
        return checked_device(allocate_device(device_name=DeviceName.INTEL_X86)).target
    if isinstance(target, Device):
        return checked_device(target).target
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"target is a {type(target).__name__}; expected a Device, a target name, a target "
            "spec file or None",
        )
    try:
        return targets.get_target(target)
    except KeyError as err:
        raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE, str(err.args[0])) from None


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
         rpc_tracker: str | None = None, rpc_key: str | None = None) -> targets.TuningReport:
    """Tunes ``model`` (a Computation, or an ONNX model: path, bytes or ModelProto) for
    ``target`` (a Device, a target name, a target spec file of another machine's CPU, or None
    for this CPU) and returns what the run did.

    ``trials``: candidates measured for the model's kernels, counting those earlier runs
    recorded (so an interrupted run given the same budget resumes where it stopped);
    ``minutes``: a wall-clock limit for this run. Progress shows on a tqdm bar unless
    ``progress`` is False. ``keep_best``: afterwards, keep only that many of the fastest
    records of each kernel in the target's database (to store or ship it: compiles use only
    the fastest; later runs still count the removed trials).

    ``rpc_tracker`` ("HOST:PORT") and ``rpc_key``: measure on every RPC server registered with
    that TVM tracker under that key, at once (candidates are still built here); the way to
    tune a board (aarch64-linux) or another machine's CPU (llvm:MCPU:CORES, or its spec file). A
    server lost during the run is done without, and what it was measuring is measured again
    on the others; with no free server after targets.tuning.rpc.SERVER_WAIT_S, OdlaError
    (TIMEOUT)."""
    _budget(trials, minutes)
    if keep_best is not None:
        check_count(keep_best, 1, "keep_best")
    tracker = _tracker(rpc_tracker, rpc_key)
    spec = target_spec(target)
    if isinstance(model, Computation):
        comp, imported = _computation(model), None
    else:
        from .frontends.onnx import import_model  # onnx is needed only here

        comp = imported = import_model(model)
    try:
        mod = comp.build_module()
        return targets.tune(mod, spec, trials=trials, minutes=minutes,
                            cache_dir=cache_dir_of(comp, cache_dir), label=_model_label(model),
                            progress=progress, keep_best=keep_best, tracker=tracker)
    except targets.TuningUnavailable as err:
        raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE, str(err)) from None
    except targets.TrackerError as err:
        raise OdlaError(Status.TIMEOUT, str(err)) from None
    except OSError as err:
        raise OdlaError(Status.FAILURE, f"cannot write the tuning database: {err}") from None
    finally:
        if imported is not None:
            destroy_computation(imported)
