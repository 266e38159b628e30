"""Compiles an IRModule for a target, exports the result, and runs it where it can run."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading

import numpy as np
import tvm
from tvm import relax

from .registry import TargetSpec


class ToolchainMissing(RuntimeError):
    """The compiler that links for a target is not installed; the message says how to get it."""


def _fcompile(spec: TargetSpec):
    if spec.cross_compiler is None:
        return None  # TVM's default: the host's C++ compiler
    if shutil.which(spec.cross_compiler) is None:
        raise ToolchainMissing(
            f"{spec.cross_compiler} is not installed, so nothing can be linked for {spec.name}; "
            f"install it with: apt-get install {' '.join(spec.debian_packages)} "
            "(or run scripts/setup-cross.sh)"
        )
    return tvm.support.cc.cross_compiler(spec.cross_compiler)


class CompiledModule:
    """A compiled Relax VM module for one target; ``run`` maps NumPy in to NumPy out on the
    target's device when the target is this machine."""

    def __init__(self, library, spec: TargetSpec, device_index: int = 0):
        self.library = library
        self.spec = spec
        self.device_index = device_index
        self._main = None
        self._lock = threading.Lock()  # one VM's registers are not safe to share across threads

    def _entry(self):
        if self._main is None:
            if not self.spec.runs_here():
                raise RuntimeError(
                    f"code for {self.spec.name} ({self.spec.arch}) cannot run on this "
                    f"{os.uname().machine} machine; export it and run it on the device"
                )
            device = self.spec.tvm_device(self.device_index)
            self._device = device
            self._main = relax.VirtualMachine(self.library, device)["main"]
        return self._main

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        main = self._entry()
        tensors = [tvm.runtime.tensor(np.require(a, requirements="C"), self._device) for a in inputs]
        with self._lock:
            result = main(*tensors)
        return [r.numpy() for r in result]

    def export(self, path: str) -> None:
        """Writes the module as a shared library for its target (what export_library writes)."""
        self.library.export_library(path, fcompile=_fcompile(self.spec))

    def to_bytes(self) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "module.so")
            self.export(path)
            with open(path, "rb") as f:
                return f.read()

    @classmethod
    def load(cls, path: str, spec: TargetSpec, device_index: int = 0) -> "CompiledModule":
        return cls(tvm.runtime.load_module(path), spec, device_index)

    @classmethod
    def from_bytes(cls, data: bytes, spec: TargetSpec, device_index: int = 0) -> "CompiledModule":
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "module.so")
            with open(path, "wb") as f:
                f.write(data)
            # The loader maps the file; it may be unlinked once loaded.
            return cls.load(path, spec, device_index)


# TVM's compiler keeps global state (TE tag scopes among it): one compile at a time.
_compile_lock = threading.Lock()


def compile_module(mod: tvm.IRModule, spec: TargetSpec, device_index: int = 0) -> CompiledModule:
    target = spec.tvm_target()
    with _compile_lock, target:
        library = tvm.compile(mod, target=target)
    return CompiledModule(library, spec, device_index)
