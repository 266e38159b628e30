"""The run side of a compiled module: its VM on the target's device, NumPy arrays in and out,
its library loaded from a file or copied to one. It needs TVM's runtime alone (apache-tvm-ffi
and libtvm_runtime.so, toolchain.tensors), never the compiler: a module just built in memory
is targets.compiler's BuiltModule, which adds what running and exporting that needs."""

from __future__ import annotations

import ctypes
import itertools
import os
import tempfile
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from toolchain import load_tvm_ffi, tensors

from . import plugins as vendor_plugins
from .specs import TargetSpec, cpu_count, default_pool_spin

if TYPE_CHECKING:
    import tvm_ffi

# TVM's CPU thread pool takes half the hardware threads unless told (it assumes two per core);
# host code is compiled and tuned for every usable core, so it runs on as many. Read when the
# pool starts, at the first parallel kernel; targets/cpu/thread_pool.cc, which runs the kernels
# of every kept host library, reads it too.
os.environ.setdefault("TVM_NUM_THREADS", str(cpu_count()))
# Its idle workers (where it runs the kernels: a module run in memory, a cross-compiled one)
# poll for the next kernel 300,000 times (sched_yield) before they sleep, keeping a core busy
# long after a run; 10,000 polls still span the gap between a run's kernels. A process running
# oneDNN's regions polls none (VendorPlugin.pool_spin).
default_pool_spin(10000)


_ALIGNMENT = 64  # bytes: what TVM's kernels assume of every buffer


def _shared_tensor(array: np.ndarray, device) -> tvm_ffi.Tensor | None:
    """A TVM tensor over ``array``'s own memory where TVM can use it as it is (C-contiguous,
    64-byte aligned, on the CPU, a dtype DLPack carries, not empty), else None."""
    if (array.size and array.flags.c_contiguous and array.ctypes.data % _ALIGNMENT == 0
            and device.dlpack_device_type() == 1):
        try:
            return load_tvm_ffi().from_dlpack(array)
        except (RuntimeError, TypeError, BufferError):
            return None
    return None


def _staging_buffer(array: np.ndarray, device) -> tuple[np.ndarray, tvm_ffi.Tensor] | None:
    """An aligned array shaped like ``array`` and a TVM tensor over it, to copy into; None off
    the CPU, for a dtype DLPack does not carry, or for an empty array."""
    if device.dlpack_device_type() != 1 or not array.size:
        return None
    raw = np.empty(array.nbytes + _ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    buffer = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    try:
        return buffer, load_tvm_ffi().from_dlpack(buffer)
    except (RuntimeError, TypeError, BufferError):
        return None


def device_tensor(array: np.ndarray, device) -> tvm_ffi.Tensor:
    """``array`` as a TVM tensor on ``device``: the same memory where TVM can use it as it is
    (C-contiguous, 64-byte aligned, on that device), else a copy."""
    if array.size == 0:  # numpy keeps any strides on empty arrays; TVM wants compact ones
        return tensors.empty(array.shape, str(array.dtype), device)
    shared = _shared_tensor(array, device)
    if shared is not None:
        return shared
    staged = _staging_buffer(array, device)
    if staged is None:
        return tensors.tensor(array, device)
    np.copyto(staged[0], array)
    return staged[1]


host_array = tensors.numpy  # a NumPy copy of a TVM tensor


def allocate(spec: TargetSpec, device_index: int, nbytes: int) -> tvm_ffi.Tensor:
    """``nbytes`` of memory on ``spec``'s device, as a uint8 TVM tensor (DLPack-capable)."""
    return tensors.empty((nbytes,), "uint8", spec.tvm_device(device_index))


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


def release_freed_memory() -> None:
    """Hands the free pages of the heap back to the system (glibc's malloc_trim; nothing
    elsewhere). glibc keeps what a compile frees, its passes' copies of the weights among it,
    for the process's whole life."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def load_library(path: str) -> tvm_ffi.Module:
    """The shared library now at ``path``, loaded under a name of its own (a hard link beside
    it, removed once loaded): the dynamic loader hands back a library it loaded before under
    the same name, even where the file there has been replaced since (an engine cache entry
    rebuilt at its path), so the code that runs would not be the file checked."""
    directory, name = os.path.split(os.path.abspath(path))
    link = os.path.join(directory, f".{name}.{os.getpid()}.{next(_library_loads)}.so")
    try:
        os.link(path, link)
    except OSError:  # a directory this process cannot write to: the name as it is
        return _load_module(path)
    try:
        return _load_module(link)
    finally:
        os.unlink(link)


_library_loads = itertools.count()


def _load_module(path: str) -> tvm_ffi.Module:
    tensors.device("cpu")  # TVM's runtime loaded: the library's code calls into it
    return load_tvm_ffi().load_module(path)


# The VM's allocator for each device: TVM's pooled allocator, as relax.VirtualMachine's default.
_POOLED_ALLOCATOR = 2


def initialized_vm(library: tvm_ffi.Module, device: tvm_ffi.Device) -> tvm_ffi.Module:
    """The Relax VM of ``library`` (a module with vm_load_executable) on ``device``, with the
    host CPU too where ``device`` is another (the VM computes shapes there): what
    relax.VirtualMachine does, without TVM's compiler."""
    vm = library["vm_load_executable"]()
    devices = [device] if device.dlpack_device_type() == 1 else [device, tensors.device("cpu")]
    vm["vm_initialization"](*[value for dev in devices
                              for value in (dev.dlpack_device_type(), dev.index,
                                            _POOLED_ALLOCATOR)])
    return vm


class CompiledModule:
    """A compiled Relax VM module for one target; ``run`` maps NumPy in to NumPy out on the
    target's device when the target is this machine. ``weights``: the arrays ``main`` takes
    after its inputs (see targets.weights), passed on every call; they are not in the
    library, and whoever keeps the library keeps them beside it."""

    def __init__(self, library, spec: TargetSpec, device_index: int = 0,
                 kernel_bindings: dict[str, list[str]] | None = None,
                 tuned_kernels: list[str] | None = None, vendor_regions: list[str] | None = None,
                 weights: list[np.ndarray] | None = None):
        self.library = library
        self.weights = weights or []
        # Per weight, the .npy file holding it whole where the compile wrote it to one
        # (see targets.compiler), else None; none once it runs from a library and its weights.
        self.weight_paths: list = [None] * len(self.weights)
        self._weight_tensors: list[tvm_ffi.Tensor] = []  # made with the VM, then kept:
        # a vendor region packs a weight once, keyed on its address
        # External functions main calls: vendor plugins' regions and custom ops' C functions.
        self.vendor_regions = vendor_regions or []
        # kernel name -> the graph bindings it computes, in call order (compiler.kernel_recorder)
        self.kernel_bindings = kernel_bindings or {}
        self.tuned_kernels = tuned_kernels or []  # kernels scheduled by tuning records
        self.spec = spec
        self.device_index = device_index
        self._vm = None
        self._main = None
        self.runtime_library = None  # once the VM is: the library, or its vendor parts linked
        self._vendor_dir = None  # where the vendor library is linked, once the VM needs it
        # An engine-cache entry's folder, where its vendor regions keep their packed weights
        # (plugins.KEEP_PACKED_WEIGHTS_FUNCTION); None: they keep nothing between processes.
        self.packed_weights_root: str | None = None
        self._library_file = None  # once it runs from a library file: that file, open
        self._lock = threading.Lock()  # one VM's registers are not safe to share across threads
        # Per input slot, used under _lock: (the last array run, the tensor TVM gets for it,
        # the aligned buffer it is copied into or None when TVM shares its memory). An array's
        # memory never moves, so the same array runs again without new checks.
        self._inputs: dict[int, tuple] = {}

    def virtual_machine(self) -> tvm_ffi.Module:
        """The module's VM on the target's device (its functions by name), made on first
        use."""
        if self._vm is None:
            if not self.spec.runs_here():
                raise RuntimeError(
                    f"code for {self.spec.name} ({self.spec.arch}) cannot run on this "
                    f"{os.uname().machine} machine; export it and run it on the device"
                )
            self._device = self.spec.tvm_device(self.device_index)
            if self.vendor_regions:
                ready_to_run_plugins(self.spec)
            self._vm = self._new_vm()
            if self.vendor_regions and self.packed_weights_root is not None and \
                    self.runtime_library.implements_function(
                        vendor_plugins.KEEP_PACKED_WEIGHTS_FUNCTION, True):
                self.runtime_library.get_function(vendor_plugins.KEEP_PACKED_WEIGHTS_FUNCTION,
                                                  True)(self.packed_weights_root)
            self._weight_tensors = [device_tensor(w, self._device) for w in self.weights]
            # The FFI functions behind an Array's len() and [i], called directly:
            # Array.__getitem__ asks for the length first and goes through a Python helper,
            # slow on every output.
            self._array_size = tensors.runtime_function("ffi.ArraySize")
            self._array_item = tensors.runtime_function("ffi.ArrayGetItem")
        return self._vm

    def _new_vm(self) -> tvm_ffi.Module:
        """The VM of the library loaded from its file (setting runtime_library)."""
        self.runtime_library = self.library
        return initialized_vm(self.library, self._device)

    def run_from_library(self, path: str, weights: list[np.ndarray]) -> None:
        """Runs from the shared library at ``path`` (what ``export`` wrote of this module)
        and ``weights`` (the same values, kept elsewhere) instead of the build in hand, which
        it lets go; before the first run only, as a vendor region packs a weight once per
        address. Loading the code is quicker than its first run in memory, where TVM
        compiles the kernels' LLVM code again and the vendor parts are linked again."""
        if self._vm is not None:
            raise RuntimeError("a module's library and weights are replaced before its first "
                               "run only")
        mine = [(w.dtype, w.shape) for w in self.weights]
        given = [(w.dtype, w.shape) for w in weights]
        if given != mine:
            raise ValueError(f"weights {given} replace weights {mine}: expected the same "
                             "dtypes and shapes")
        self._load_library(path)
        self.weights = weights
        self.weight_paths = [None] * len(weights)
        release_freed_memory()  # the build's code and weights

    def _entry(self):
        if self._main is None:
            self._main = self.virtual_machine()["main"]
        return self._main

    def run(self, inputs: list[np.ndarray], on_call=None) -> list[np.ndarray]:
        """Runs ``main``. ``on_call(kernel_name, start_s, duration_s)``, when given, is told of
        every kernel and runtime builtin the VM calls (perf_counter times)."""
        main = self._main or self._entry()
        # Plain loops: a comprehension costs more here, on every run of a tiny model.
        with self._lock:
            arguments = []
            for slot, array in enumerate(inputs):
                arguments.append(self._device_input(slot, array))
            arguments += self._weight_tensors
            if on_call is None:
                result = main(*arguments)
            else:
                set_instrument = self.virtual_machine()["set_instrument"]
                set_instrument(_call_timer(on_call))
                try:
                    result = main(*arguments)
                finally:
                    set_instrument(_no_instrument)
            outputs = []  # copied before the next run reuses the staging buffers
            for index in range(self._array_size(result)):
                outputs.append(host_array(self._array_item(result, index)))
            return outputs

    def _device_input(self, slot: int, array: np.ndarray) -> tvm_ffi.Tensor:
        """What device_tensor gives, remembering the slot's array, tensor and buffer."""
        known = self._inputs.get(slot)
        if known is None or known[0] is not array:
            known = self._inputs[slot] = self._input_slot(array, known)
        _, tensor, buffer = known
        if buffer is not None:
            np.copyto(buffer, array)
        return tensor if tensor is not None else device_tensor(array, self._device)

    def _input_slot(self, array: np.ndarray, previous: tuple | None) -> tuple:
        """(array, tensor, buffer) for a new array in a slot: its own memory where TVM can use
        it, else the slot's aligned buffer (kept while shapes agree); no tensor off the CPU,
        where each run copies to the device."""
        shared = _shared_tensor(array, self._device)
        if shared is not None:
            return array, shared, None
        if previous is not None and previous[2] is not None and \
                previous[2].shape == array.shape and previous[2].dtype == array.dtype:
            return array, previous[1], previous[2]
        staged = _staging_buffer(array, self._device)
        return (array, None, None) if staged is None else (array, staged[1], staged[0])

    def bare_call(self, inputs: list[np.ndarray]):
        """A call of ``main`` with no arguments on device tensors made once from ``inputs``: the
        bare VM call that per-call overheads are measured against."""
        main = self._entry()
        arguments = [device_tensor(a, self._device) for a in inputs] + self._weight_tensors
        return lambda: main(*arguments)

    def export(self, path: str) -> None:
        """Writes the module's shared library to ``path``: a copy of the file it runs from (a
        loaded library cannot be written again)."""
        source = self._library_file.fileno()
        with open(path, "wb") as copy:
            offset, size = 0, os.fstat(source).st_size
            while offset < size:
                chunk = os.pread(source, min(size - offset, 1 << 24), offset)
                if not chunk:
                    raise OSError(f"{self._library_file.name} was truncated while copied")
                offset += copy.write(chunk)

    def to_bytes(self) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "module.so")
            self.export(path)
            with open(path, "rb") as f:
                return f.read()

    @classmethod
    def load(cls, path: str, spec: TargetSpec, device_index: int = 0,
             weights: list[np.ndarray] | None = None) -> "CompiledModule":
        module = cls(None, spec, device_index, weights=weights)
        module._load_library(path)
        return module

    def _load_library(self, path: str) -> None:
        # Opened first: export copies the file loaded, even once another is renamed to its path.
        self._library_file = open(path, "rb")  # noqa: SIM115 (held as long as the module)
        self.library = load_library(path)

    @classmethod
    def from_bytes(cls, data: bytes, spec: TargetSpec, device_index: int = 0,
                   weights: list[np.ndarray] | None = None) -> "CompiledModule":
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "module.so")
            with open(path, "wb") as f:
                f.write(data)
            # The loader maps the file; it may be unlinked once loaded.
            return cls.load(path, spec, device_index, weights)


def ready_to_run_plugins(spec: TargetSpec) -> None:
    """Readies this process for running the regions of the target's plugins: TVM's pool polls
    as they want (VendorPlugin.pool_spin), unless the user chose otherwise or the pool has
    started (it reads this once, at its first kernel)."""
    for name in spec.plugins:
        spin = vendor_plugins.get_plugin(name).pool_spin
        if spin is not None:
            default_pool_spin(spin)
