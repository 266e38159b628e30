"""Calls the functions of a compiled module by name, with tensors that stay on its device
between calls (what a training loop needs: weights and optimizer state are not copied to
the host at every step)."""

from __future__ import annotations

import threading

import numpy as np
import tvm

from .runtime import CompiledModule


class DeviceFunctions:
    """The functions of ``compiled``; arguments and results are device tensors."""

    def __init__(self, compiled: CompiledModule):
        self.compiled = compiled
        self.device = compiled.spec.tvm_device(compiled.device_index)
        self._vm = compiled.virtual_machine()
        self._lock = threading.Lock()  # one VM's registers are not safe to share across threads

    def upload(self, array: np.ndarray) -> tvm.runtime.Tensor:
        return tvm.runtime.tensor(np.require(array, requirements="C"), self.device)

    @staticmethod
    def download(tensor: tvm.runtime.Tensor) -> np.ndarray:
        return tensor.numpy()

    def call(self, name: str, *args):
        """Runs function ``name``; a tuple result comes back as nested tuples of tensors."""
        with self._lock:
            return self._vm[name](*args)
