"""The bench's side of a path's process: starts worker.py, sends it the job and its
commands, and reads its replies (worker.main describes the protocol)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile

from ..types import OdlaError, Status

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")


class PathProcess:
    """One path of one model in a process of its own (worker.py): it imports and
    compiles the model when started (``ready``: load_s, first_s, outputs, or ``error``), runs
    it when asked (``turn``), and reports its peak RSS in MB when closed."""

    def __init__(self, path: str, model: str, feeds: dict, threads: int, cache_dir: str,
                 precision: str | None = None):
        self.path = path
        self._stderr = tempfile.TemporaryFile()
        root = os.path.dirname(os.path.dirname(os.path.dirname(WORKER)))  # odla_tvm's parent
        env = {**os.environ, "TVM_NUM_THREADS": str(threads),
               "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), root]))}
        # NumPy only holds arrays here. Its OpenBLAS threads spin for about 0.1 s after its
        # import, taking a core from a path whose load follows a short import (odla_tvm's).
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        # -P: the worker's folder stays off sys.path (its modules' names could shadow others').
        self._process = subprocess.Popen([sys.executable, "-P", WORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._stderr, env=env)
        try:
            self._send({"path": path, "model": model, "feeds": feeds, "threads": threads,
                        "cache_dir": cache_dir, "precision": precision})
            self.ready = self._receive()
        except OdlaError as err:
            self.ready = {"error": err.message}
        self.error = self.ready.get("error", "")

    def _send(self, message) -> None:
        try:
            pickle.dump(message, self._process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self._process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died()

    def _receive(self):
        try:
            return pickle.load(self._process.stdout)
        except (EOFError, pickle.UnpicklingError):
            self._died()

    def _died(self):
        code = self._process.wait()
        self._stderr.seek(0)
        tail = " / ".join(self._stderr.read().decode(errors="replace").strip().splitlines()[-3:])
        raise OdlaError(Status.FAILURE,
                        f"the {self.path} process ended (exit code {code}): {tail[-400:]}")

    def turn(self, untimed: int, timed: int) -> list[float]:
        self._send(("turn", untimed, timed))
        return self._receive()

    def checks(self, runs: int) -> float | None:
        """The median seconds a run spends in run-time checks, over ``runs`` profiled runs."""
        self._send(("checks", runs))
        return self._receive()

    def close(self) -> float | None:
        """The process's peak RSS in MB (None when it had died), after it ends."""
        rss = None
        if self._process.poll() is None:
            try:
                self._send(("close",))
                rss = self._receive()
            except OdlaError:
                pass
        if self._process.poll() is None:
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._stderr.close()
        return rss
