"""ODLA's C run API from Python, through ctypes: an executable loaded into libodla_tvm.so and
launched on NumPy arrays the caller owns. It runs on TVM's runtime alone: neither tvm_ffi's
Python package nor TVM's compiler enters the process. odla_tvm's engine cache serves its
cached engines through it (odla_tvm.c_library_module)."""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .paths import library_path

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("libodla")

SUCCESS = 0
# odla_log_level: what the library reports at ERROR and FATAL is the failing call's reason.
_FAILURE_LEVELS = (1, 2)
_LOG_LEVELS = {3: logging.WARNING, 4: logging.INFO, 5: logging.DEBUG, 6: logging.DEBUG}
_Logger = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p)


class CallFailed(Exception):
    """An ODLA call that returned a status other than ODLA_SUCCESS, with the library's reason."""

    def __init__(self, function: str, status: int, reason: str):
        super().__init__(f"{function} failed with status {status}: {reason or 'no reason given'}")
        self.function, self.status, self.reason = function, status, reason


class Library:
    """libodla_tvm.so, loaded once a process (``get``); each thread's last failure reason is
    what the library logged for it."""

    _loaded: Library | None = None
    _loading = threading.Lock()

    @classmethod
    def get(cls) -> Library:
        with cls._loading:
            if cls._loaded is None:
                cls._loaded = cls(str(library_path()))
            return cls._loaded

    def __init__(self, path: str):
        self.dll = ctypes.CDLL(path)
        self._reasons = threading.local()
        self._logger = _Logger(self._log)  # referenced as long as the library may call it
        self.dll.odla_SetLogger(self._logger)
        handle = ctypes.POINTER(ctypes.c_void_p)
        for name, argtypes in {
                "odla_tvm_LoadCheckedBundle": [ctypes.c_char_p, handle],
                "odla_DestroyExecutable": [ctypes.c_void_p],
                "odla_CreateContext": [handle],
                "odla_DestroyContext": [ctypes.c_void_p],
                "odla_BindToArgumentById": [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p],
                "odla_BindToOutputById": [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p],
                "odla_LaunchExecutable": [ctypes.c_void_p, ctypes.c_void_p]}.items():
            function = getattr(self.dll, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int

    def _log(self, _file, _line, function, level, message) -> None:
        text = message.decode(errors="replace")
        if level in _FAILURE_LEVELS:
            self._reasons.last = text
        else:
            log.log(_LOG_LEVELS.get(level, logging.DEBUG), "%s: %s",
                    function.decode(errors="replace"), text)

    def call(self, name: str, *args) -> None:
        """Calls ODLA function ``name``; CallFailed unless it succeeds."""
        self._reasons.last = ""
        self.check(name, getattr(self.dll, name)(*args))

    def check(self, name: str, status: int) -> None:
        """CallFailed with the reason the library logged, unless ``status`` is SUCCESS."""
        if status != SUCCESS:
            raise CallFailed(name, status, getattr(self._reasons, "last", ""))


class LoadedExecutable:
    """An executable in the library, launched from any thread (each has its own context)."""

    def __init__(self, bundle: str):
        """Loads the bundle folder ``bundle``, which its caller has checked (the library does
        not hash its files again)."""
        self.library = Library.get()
        self.handle = ctypes.c_void_p()
        self.library.call("odla_tvm_LoadCheckedBundle", bundle.encode(), ctypes.byref(self.handle))
        self._contexts: list[ctypes.c_void_p] = []
        self._mine = threading.local()
        self._lock = threading.Lock()

    def _context(self) -> ctypes.c_void_p:
        context = getattr(self._mine, "context", None)
        if context is None:
            context = ctypes.c_void_p()
            self.library.call("odla_CreateContext", ctypes.byref(context))
            with self._lock:
                self._contexts.append(context)
            self._mine.context = context
        return context

    def launch(self, inputs: Iterable[tuple[bytes, np.ndarray]],
               outputs: Iterable[tuple[bytes, np.ndarray]]) -> None:
        """Runs on ``inputs`` and writes ``outputs``, (value id, C-contiguous array) pairs.
        The ODLA functions are called directly: this is every run's path."""
        context, library, dll = self._context(), self.library, self.library.dll
        library._reasons.last = ""
        bind = dll.odla_BindToArgumentById
        for value_id, array in inputs:
            library.check("odla_BindToArgumentById", bind(value_id, array.ctypes.data, context))
        bind = dll.odla_BindToOutputById
        for value_id, array in outputs:
            library.check("odla_BindToOutputById", bind(value_id, array.ctypes.data, context))
        library.check("odla_LaunchExecutable", dll.odla_LaunchExecutable(self.handle, context))

    def close(self) -> None:
        """Frees the executable and its contexts (no launch may run meanwhile)."""
        with self._lock:
            for context in self._contexts:
                self.library.call("odla_DestroyContext", context)
            self._contexts.clear()
            if self.handle:
                self.library.call("odla_DestroyExecutable", self.handle)
                self.handle = ctypes.c_void_p()
