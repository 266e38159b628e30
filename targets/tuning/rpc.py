"""Measuring tuning candidates on other machines through TVM's RPC tracker. RPC servers
(``python -m tvm.exec.rpc_server``, or odla_rpc_server on a board: targets/runner) register
with a tracker under a key; ``TrackerRunner`` hands each built candidate to whichever server
under the key is free, as many at once as there were free servers, and measures it there with
MetaSchedule's own RPC runner steps. Unlike MetaSchedule's RPCRunner, which records a candidate
whose server went away as a failed trial (never tried again) and cannot say which server
measured what, it measures such a candidate again on the others and counts every measurement
by server (Fleet)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import struct
import time

from tvm import rpc
from tvm.ir.utils import derived_object
from tvm.rpc import base
from tvm.s_tir.meta_schedule.runner import (
    EvaluatorConfig,
    PyRunner,
    PyRunnerFuture,
    RPCConfig,
    RunnerResult,
)
from tvm.s_tir.meta_schedule.runner import rpc_runner
from tvm.support.popen_pool import PopenPoolExecutor

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0  # for the tracker to answer one question
SERVER_WAIT_S = 60.0  # how long a run waits for a free server before giving up
SESSION_TIMEOUT_S = 60  # one candidate's session on its server (LocalRunner's timeout too)
# A measurement that has not come back by then has a server that stopped answering (the
# server ends a session itself at SESSION_TIMEOUT_S); the margin covers the tracker's queue.
MEASURE_TIMEOUT_S = 2 * SESSION_TIMEOUT_S + 30
MAX_ATTEMPTS = 3  # measurements of one candidate whose servers were lost, before it counts failed
LOST_GRACE_S = 3.0  # a killed server's tracker connection closes within this (the tracker sees it)


class TrackerError(RuntimeError):
    """The tracker cannot be reached, or has no server to measure on; the message says which
    and how to start one."""


@dataclasses.dataclass(frozen=True)
class Tracker:
    """An RPC tracker and the key of the servers to measure on."""

    host: str
    port: int
    key: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def server_command(self) -> str:
        return f"python -m tvm.exec.rpc_server --tracker {self.address} --key {self.key}"

    def servers(self) -> tuple[list[str], int]:
        """The addresses of the servers registered under the key, and how many are free."""
        code, summary = self._ask([base.TrackerCode.SUMMARY])
        if code != base.TrackerCode.SUCCESS:
            raise TrackerError(f"the RPC tracker at {self.address} refused its summary: {summary}")
        registered = [f"{item['addr'][0]}:{item['addr'][1]}" for item in summary["server_info"]
                      if item.get("key") == f"server:{self.key}"]
        return registered, summary["queue_info"].get(self.key, {}).get("free", 0)

    def wait_for_servers(self, wait_s: float, free: bool = True) -> int:
        """How many servers under the key are free (``free``) or registered, once there is at
        least one, waiting up to ``wait_s``; TrackerError after that."""
        deadline = time.monotonic() + wait_s
        while True:
            registered, free_count = self.servers()
            found = free_count if free else len(registered)
            if found:
                return found
            if time.monotonic() >= deadline:
                raise TrackerError(
                    f"no {'free ' if free else ''}RPC server under key {self.key!r} at the "
                    f"tracker {self.address} after waiting {wait_s:.0f} s ({len(registered)} "
                    f"registered); start one on the machine to measure on with: "
                    f"{self.server_command()} (on a board without Python: odla-tvm "
                    f"rpc-server builds odla_rpc_server and says how to start it)")
            time.sleep(0.5)

    def open_session(self, session_timeout: float) -> tuple[rpc.RPCSession, str]:
        """A session on a free server under the key (waiting while all are busy), and that
        server's address. TVM's TrackerSession.request gives the session alone; the
        tracker's answer names the server, which Fleet counts."""
        with contextlib.closing(self._connect()) as sock:
            sock.settimeout(None)  # the tracker answers once a server is free
            base.sendjson(sock, [base.TrackerCode.REQUEST, self.key, "", 1])
            code, answer = base.recvjson(sock)
        if code != base.TrackerCode.SUCCESS:
            raise TrackerError(f"the RPC tracker at {self.address} refused a server: {answer}")
        url, port, matchkey = answer
        return rpc.connect(url, port, matchkey, session_timeout), f"{url}:{port}"

    def _ask(self, message: list):
        with contextlib.closing(self._connect()) as sock:
            base.sendjson(sock, message)
            return base.recvjson(sock)

    def _connect(self) -> socket.socket:
        """A connection to the tracker: TVM's own retries for a minute where nothing listens."""
        try:
            sock = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as err:
            raise TrackerError(
                f"cannot reach an RPC tracker at {self.address} ({err.strerror or err}); "
                f"start one there with: python -m tvm.exec.rpc_tracker --host 0.0.0.0 "
                f"--port {self.port}") from None
        try:
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            magic = struct.unpack("<i", base.recvall(sock, 4))[0]
        except OSError:
            magic = None
        if magic != base.RPC_TRACKER_MAGIC:
            sock.close()
            raise TrackerError(f"{self.address} answers, but not as an RPC tracker does")
        return sock


class Fleet:
    """The servers one tuning run measures on: ``workers`` measurements at once (the servers
    free when it started), the candidates each server measured, the servers lost meanwhile,
    and the error that ended the run when none was left."""

    def __init__(self, tracker: Tracker, workers: int):
        self.tracker = tracker
        self.workers = workers
        self.measured: dict[str, int] = {}
        self.lost: set[str] = set()
        self.measured_again = 0  # measurements repeated because their server was lost
        self.error: TrackerError | None = None

    def in_use(self) -> int:
        return len(set(self.measured) - self.lost)


def _measure(tracker: Tracker, evaluator_config: EvaluatorConfig, artifact_path: str,
             device_type: str, args_info: tuple) -> tuple[str | None, list | None, str | None]:
    """Runs in a measuring process: one candidate on one server, through MetaSchedule's RPC
    runner steps. Returns the server (None when none was reached), the run times, or the
    error instead."""
    server = None

    def open_session(_config):
        nonlocal server
        session, server = tracker.open_session(SESSION_TIMEOUT_S)
        return session

    config = RPCConfig(tracker.host, tracker.port, tracker.key,
                       session_timeout_sec=SESSION_TIMEOUT_S)
    try:
        # RPCRunner's own steps for one candidate (it takes the session maker as an argument,
        # and here that maker notes the server).
        costs = rpc_runner._worker_func(open_session, None, None, None, None, config,
                                        evaluator_config, 1, artifact_path, device_type,
                                        args_info)
    except Exception as err:  # noqa: BLE001 - the error is the candidate's result
        return server, None, f"{type(err).__name__}: {err}"
    return server, costs, None


@derived_object
class _RemoteFuture(PyRunnerFuture):
    """One candidate's measurement, measured again (up to MAX_ATTEMPTS times) when its
    server is lost."""

    def __init__(self, runner: TrackerRunner, runner_input) -> None:
        super().__init__()
        self.runner = runner
        self.runner_input = runner_input
        self.attempts = 1
        self.future = runner.submit(runner_input)
        self.outcome: RunnerResult | None = None

    def done(self) -> bool:
        return self._settle(block=False)

    def result(self) -> RunnerResult:
        self._settle(block=True)
        return self.outcome

    def _settle(self, block: bool) -> bool:
        fleet = self.runner.fleet
        while self.outcome is None:
            if not block and not self.future.done():
                return False
            try:
                server, costs, error = self.future.result()
            except TimeoutError:
                # The process was killed: its server stopped answering (a session that runs
                # too long is ended by the server, which says so).
                server, costs, error = None, None, "lost"
            if costs is not None:
                fleet.measured[server] = fleet.measured.get(server, 0) + 1
                fleet.lost.discard(server)
                self.outcome = RunnerResult(costs, None)
            elif self.attempts < MAX_ATTEMPTS and self.runner.lost(server, error):
                self.attempts += 1
                fleet.measured_again += 1
                self.future = self.runner.submit(self.runner_input)
            else:
                self.outcome = RunnerResult(None, f"RPC runner ({server or 'no server'}): {error}")
        return True


@derived_object
class TrackerRunner(PyRunner):
    """Measures candidates on ``fleet``'s servers, as ``evaluator_config`` says (None:
    LocalRunner's defaults)."""

    def __init__(self, fleet: Fleet, evaluator_config: EvaluatorConfig | None = None) -> None:
        super().__init__()
        self.fleet = fleet
        self.evaluator_config = evaluator_config or EvaluatorConfig()
        self.pool = PopenPoolExecutor(max_workers=fleet.workers, timeout=MEASURE_TIMEOUT_S)

    def run(self, runner_inputs: list) -> list:
        return [_RemoteFuture(self, runner_input) for runner_input in runner_inputs]

    def submit(self, runner_input):
        return self.pool.submit(
            _measure, self.fleet.tracker, self.evaluator_config, str(runner_input.artifact_path),
            str(runner_input.device_type), tuple(a.as_json() for a in runner_input.args_info))

    def lost(self, server: str | None, error: str) -> bool:
        """Whether a measurement failed because its server went away (then it is measured
        again, on a server that is still there) rather than because of its candidate. A
        lost server leaves the tracker when its connection there closes; a run with no
        server left ends (TrackerError, kept in fleet.error too: TVM's FFI may hand it back
        to the caller as another type)."""
        fleet = self.fleet
        try:
            if server is not None:
                deadline = time.monotonic() + LOST_GRACE_S
                while server in fleet.tracker.servers()[0]:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.2)
            if server not in fleet.lost:
                log.warning("lost the RPC server %s (%s); measuring its candidates on the others",
                            server or "(unknown)", error.splitlines()[0])
                if server is not None:
                    fleet.lost.add(server)
            fleet.tracker.wait_for_servers(SERVER_WAIT_S, free=False)
        except TrackerError as err:
            fleet.error = err
            raise
        return True

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False)
