"""Cached engines run by ODLA's C library (libodla_tvm.so, through libodla.binding): loading
and running one imports neither tvm_ffi's Python package nor anything of TVM's compiler,
which a served process would otherwise import before its first result. What else a compiled
module offers (profiled runs, storing it again, its weights) loads the engine as a
targets.CompiledModule at first use, which then serves every run."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

import libodla
import relay_bridge
import targets
from libodla.binding import CallFailed, LoadedExecutable

from .device import Device
from .types import ValueType

log = logging.getLogger(__name__)


def c_library_module(root: Path, manifest: dict, device: Device,
                     load_compiled: Callable[[], targets.CompiledModule]) -> CLibraryModule | None:
    """The engine of the bundle at ``root`` (its files checked), run by the C library, or
    loaded as a CompiledModule by ``load_compiled`` where that is needed; None
    where it would save nothing (tvm_ffi is loaded already), where the library is not built,
    or where it cannot run the engine (then it loads as a CompiledModule). The run-time checks
    an engine's code calls (relay_bridge.checks) the library has in C++, with the same
    messages."""
    if "tvm_ffi" in sys.modules:
        return None
    slots = manifest["args"] + manifest["outputs"]
    types = [ValueType.from_dict(slot["type"]) for slot in slots]
    if device.target.device_kind != "cpu" or manifest["variables"] or \
            any(t.shape.is_dynamic or t.dtype.kind == "V" for t in types) or \
            not os.path.isfile(libodla.library_path()):
        return None
    try:
        engine = LoadedExecutable(os.fspath(root))
    except CallFailed as err:
        log.debug("%s runs through tvm_ffi: the C library cannot load it: %s", root, err.reason)
        return None
    except (OSError, AttributeError) as err:  # a library that does not load, or of old sources
        log.debug("%s runs through tvm_ffi: %s", root, err)
        return None
    outputs = [(slot["id"], t) for slot, t in zip(manifest["outputs"],
                                                   types[len(manifest["args"]):])]
    return CLibraryModule(engine, [slot["id"] for slot in manifest["args"]], outputs,
                          device, load_compiled)


def _run_error(reason: str) -> Exception:
    """The error a run through tvm_ffi raises for what the C library gave as ``reason``: a
    run-time check's refusal as Python's check raises it (its type and message), else a
    RuntimeError."""
    for refusal in relay_bridge.REFUSED_DATA:
        message = refusal.message_in(RuntimeError(reason))
        if message is not None:
            return refusal(message)
    return RuntimeError(reason)


class CLibraryModule:
    """A compiled module whose runs the C library makes (see the module's doc)."""

    def __init__(self, engine, arg_ids: list[str], outputs: list[tuple[str, ValueType]],
                 device: Device, load_compiled: Callable[[], targets.CompiledModule]):
        self._engine = engine
        self._arg_ids = [i.encode() for i in arg_ids]
        self._output_ids = [i.encode() for i, _ in outputs]
        self._output_types = [(t.dtype, t.shape.dims) for _, t in outputs]
        self._load_compiled = load_compiled
        self._compiled: targets.CompiledModule | None = None
        self._lock = threading.Lock()  # a launch, or the switch to a CompiledModule
        self.spec, self.device_index = device.target, device.index
        # what a CompiledModule loaded from a library knows of its kernels: nothing
        self.kernel_bindings: dict[str, list[str]] = {}
        self.tuned_kernels: list[str] = []
        self.vendor_regions: list[str] = []

    def run(self, inputs: list[np.ndarray], on_call=None) -> list[np.ndarray]:
        """CompiledModule.run's outputs; a run told of each call (``on_call``) is the
        CompiledModule's."""
        if on_call is None and self._compiled is None:
            outputs = [np.empty(dims, dtype) for dtype, dims in self._output_types]
            with self._lock:
                if self._compiled is None:
                    try:
                        self._engine.launch(
                            zip(self._arg_ids, map(np.ascontiguousarray, inputs)),
                            zip(self._output_ids, outputs))
                    except CallFailed as err:
                        raise _run_error(err.reason) from None
                    return outputs
        return self.compiled_module().run(inputs, on_call)

    def compiled_module(self) -> targets.CompiledModule:
        """The engine loaded as a CompiledModule (through tvm_ffi), which serves every run
        from then on; the C library's copy is freed."""
        with self._lock:
            if self._compiled is None:
                module = self._load_compiled()
                module.vendor_regions = self.vendor_regions
                self._engine.close()
                self._compiled = module
            return self._compiled

    def __getattr__(self, name: str):
        """What a CompiledModule has and this does not (asked only for those)."""
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.compiled_module(), name)
