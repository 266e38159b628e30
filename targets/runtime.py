"""Compiles an IRModule for a target and runs the result on its device."""

from __future__ import annotations

import os
import tempfile
import threading

import numpy as np
import tvm
from tvm import relax

from .registry import TargetSpec


class CompiledModule:
    """A compiled Relax VM module bound to one device; ``run`` maps NumPy in to NumPy out."""

    def __init__(self, library, spec: TargetSpec, device_index: int = 0):
        self.library = library
        self.spec = spec
        self.device = spec.tvm_device(device_index)
        self._vm = relax.VirtualMachine(library, self.device)
        self._main = self._vm["main"]
        self._lock = threading.Lock()  # one VM's registers are not safe to share across threads

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        tensors = [tvm.runtime.tensor(np.ascontiguousarray(a), self.device) for a in inputs]
        with self._lock:
            result = self._main(*tensors)
        return [r.numpy() for r in result]

    def to_bytes(self) -> bytes:
        """The module as a shared library (what export_library writes)."""
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "module.so")
            self.library.export_library(path)
            with open(path, "rb") as f:
                return f.read()

    @classmethod
    def from_bytes(cls, data: bytes, spec: TargetSpec, device_index: int = 0) -> "CompiledModule":
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "module.so")
            with open(path, "wb") as f:
                f.write(data)
            # The loader maps the file; it may be unlinked once loaded.
            library = tvm.runtime.load_module(path)
        return cls(library, spec, device_index)


def compile_module(mod: tvm.IRModule, spec: TargetSpec, device_index: int = 0) -> CompiledModule:
    with spec.tvm_target():
        library = tvm.compile(mod, target=spec.tvm_target())
    return CompiledModule(library, spec, device_index)
