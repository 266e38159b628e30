"""Compiles an IRModule for a target, exports the result, and runs it where it can run."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time

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


def device_tensor(array: np.ndarray, device) -> tvm.runtime.Tensor:
    """``array`` as a TVM tensor on ``device``: the same memory where TVM can use it as it is
    (C-contiguous, 64-byte aligned, on that device), else a copy."""
    if array.flags.c_contiguous and array.ctypes.data % 64 == 0 and device.dlpack_device_type() == 1:
        try:
            return tvm.runtime.from_dlpack(array)
        except (RuntimeError, TypeError, BufferError):
            pass  # a layout DLPack cannot share: copy it
    return tvm.runtime.tensor(np.require(array, requirements="C"), device)


def allocate(spec: TargetSpec, device_index: int, nbytes: int) -> tvm.runtime.Tensor:
    """``nbytes`` of memory on ``spec``'s device, as a uint8 TVM tensor (DLPack-capable)."""
    return tvm.runtime.empty((nbytes,), "uint8", spec.tvm_device(device_index))


def _no_instrument(*_):
    return 0  # VMInstrumentReturnKind.NO_OP


def _call_timer(on_call):
    """A VM instrument that times each call between its before and after notifications."""
    started = []

    def instrument(func, symbol, before_run, ret_value, *args):
        now = time.perf_counter()
        if before_run:
            started.append(now)
        else:
            start = started.pop()
            on_call(str(symbol), start, now - start)
        return 0

    return instrument


class CompiledModule:
    """A compiled Relax VM module for one target; ``run`` maps NumPy in to NumPy out on the
    target's device when the target is this machine."""

    def __init__(self, library, spec: TargetSpec, device_index: int = 0,
                 kernel_bindings: dict[str, list[str]] | None = None):
        self.library = library
        # kernel name -> the graph bindings it computes, in call order (see compile_module)
        self.kernel_bindings = kernel_bindings or {}
        self.spec = spec
        self.device_index = device_index
        self._vm = None
        self._main = None
        self._lock = threading.Lock()  # one VM's registers are not safe to share across threads

    def virtual_machine(self) -> relax.VirtualMachine:
        """The module's VM on the target's device, made on first use."""
        if self._vm is None:
            if not self.spec.runs_here():
                raise RuntimeError(
                    f"code for {self.spec.name} ({self.spec.arch}) cannot run on this "
                    f"{os.uname().machine} machine; export it and run it on the device"
                )
            self._device = self.spec.tvm_device(self.device_index)
            self._vm = relax.VirtualMachine(self.library, self._device)
        return self._vm

    def _entry(self):
        if self._main is None:
            self._main = self.virtual_machine()["main"]
        return self._main

    def run(self, inputs: list[np.ndarray], on_call=None) -> list[np.ndarray]:
        """Runs ``main``. ``on_call(kernel_name, start_s, duration_s)``, when given, is told of
        every kernel and runtime builtin the VM calls (perf_counter times)."""
        main = self._entry()
        tensors = [device_tensor(a, self._device) for a in inputs]
        with self._lock:
            if on_call is None:
                result = main(*tensors)
            else:
                vm = self.virtual_machine()
                vm.set_instrument(_call_timer(on_call))
                try:
                    result = main(*tensors)
                finally:
                    vm.set_instrument(_no_instrument)
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


@tvm.ir.instrument.pass_instrument
class _KernelBindings:
    """Records, once ops are lowered to kernels, which graph bindings each kernel computes:
    the VM calls a kernel once per binding, in binding order, which maps calls to values."""

    def __init__(self):
        self.kernels: dict[str, list[str]] = {}

    def run_after_pass(self, mod, info):
        if info.name != "LegalizeOps":
            return
        def visit(expr):
            if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
                    expr.op.name == "relax.call_tir":
                yield expr.args[0].name_hint
        for block in mod["main"].body.blocks:
            for binding in block.bindings:
                for kernel in visit(binding.value):
                    self.kernels.setdefault(kernel, []).append(binding.var.name)


def compile_module(mod: tvm.IRModule, spec: TargetSpec, device_index: int = 0) -> CompiledModule:
    target = spec.tvm_target()
    recorder = _KernelBindings()
    with _compile_lock, tvm.transform.PassContext(opt_level=3, instruments=[recorder]), target:
        library = tvm.compile(mod, target=target)
    return CompiledModule(library, spec, device_index, recorder.kernels)
