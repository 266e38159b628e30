"""The run side of a compiled module: its VM on the target's device, NumPy arrays in and out,
its library loaded from a file or written to one (targets.shared_library)."""

from __future__ import annotations

import ctypes
import itertools
import os
import tempfile
import threading
import time

import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from . import plugins as vendor_plugins
from .shared_library import export_library, linker
from .specs import TargetSpec, cpu_count, default_pool_spin

# TVM's CPU thread pool takes half the hardware threads unless told (it assumes two per core);
# host code is compiled and tuned for every usable core, so it runs on as many. Read when the
# pool starts, at the first parallel kernel.
os.environ.setdefault("TVM_NUM_THREADS", str(cpu_count()))
# Its idle workers poll for the next kernel 300,000 times (sched_yield) before they sleep,
# keeping a core busy long after a run; 10,000 polls still span the gap between a run's
# kernels. A process running oneDNN's regions polls none (VendorPlugin.pool_spin).
default_pool_spin(10000)


_ALIGNMENT = 64  # bytes: what TVM's kernels assume of every buffer


def _shared_tensor(array: np.ndarray, device) -> tvm.runtime.Tensor | None:
    """A TVM tensor over ``array``'s own memory where TVM can use it as it is (C-contiguous,
    64-byte aligned, on the CPU, a dtype DLPack carries, not empty), else None."""
    if (array.size and array.flags.c_contiguous and array.ctypes.data % _ALIGNMENT == 0
            and device.dlpack_device_type() == 1):
        try:
            return tvm.runtime.from_dlpack(array)
        except (RuntimeError, TypeError, BufferError):
            return None
    return None


def _staging_buffer(array: np.ndarray, device) -> tuple[np.ndarray, tvm.runtime.Tensor] | None:
    """An aligned array shaped like ``array`` and a TVM tensor over it, to copy into; None off
    the CPU, for a dtype DLPack does not carry, or for an empty array."""
    if device.dlpack_device_type() != 1 or not array.size:
        return None
    raw = np.empty(array.nbytes + _ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    buffer = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    try:
        return buffer, tvm.runtime.from_dlpack(buffer)
    except (RuntimeError, TypeError, BufferError):
        return None


def device_tensor(array: np.ndarray, device) -> tvm.runtime.Tensor:
    """``array`` as a TVM tensor on ``device``: the same memory where TVM can use it as it is
    (C-contiguous, 64-byte aligned, on that device), else a copy."""
    if array.size == 0:  # numpy keeps any strides on empty arrays; TVM wants compact ones
        return tvm.runtime.empty(array.shape, str(array.dtype), device)
    shared = _shared_tensor(array, device)
    if shared is not None:
        return shared
    staged = _staging_buffer(array, device)
    if staged is None:
        return tvm.runtime.tensor(np.require(array, requirements="C"), device)
    np.copyto(staged[0], array)
    return staged[1]


# The FFI functions behind an Array's len() and [i], called directly: Array.__getitem__ asks
# for the length first and goes through a Python helper, slow on every output.
_array_size = tvm_ffi.get_global_func("ffi.ArraySize")
_array_item = tvm_ffi.get_global_func("ffi.ArrayGetItem")


def host_array(tensor: tvm.runtime.Tensor) -> np.ndarray:
    """A NumPy copy of a TVM tensor (a copy: a result may alias an input or a constant). Through
    DLPack on the CPU, much quicker than Tensor.numpy() for small tensors."""
    try:
        return np.from_dlpack(tensor).copy()
    except (RuntimeError, TypeError, BufferError):
        return tensor.numpy()  # another device, or a dtype NumPy's DLPack does not know


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


def release_freed_memory() -> None:
    """Hands the free pages of the heap back to the system (glibc's malloc_trim; nothing
    elsewhere). glibc keeps what a compile frees, its passes' copies of the weights among it,
    for the process's whole life."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def load_library(path: str) -> tvm.runtime.Module:
    """The shared library now at ``path``, loaded under a name of its own (a hard link beside
    it, removed once loaded): the dynamic loader hands back a library it loaded before under
    the same name, even where the file there has been replaced since (an engine cache entry
    rebuilt at its path), so the code that runs would not be the file checked."""
    directory, name = os.path.split(os.path.abspath(path))
    link = os.path.join(directory, f".{name}.{os.getpid()}.{next(_library_loads)}.so")
    try:
        os.link(path, link)
    except OSError:  # a directory this process cannot write to: the name as it is
        return tvm.runtime.load_module(path)
    try:
        return tvm.runtime.load_module(link)
    finally:
        os.unlink(link)


_library_loads = itertools.count()


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
        self._weight_tensors: list[tvm.runtime.Tensor] = []  # made with the VM, then kept:
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
        self._library_file = None  # once it runs from a library file: that file, open
        self._lock = threading.Lock()  # one VM's registers are not safe to share across threads
        # Per input slot, used under _lock: (the last array run, the tensor TVM gets for it,
        # the aligned buffer it is copied into or None when TVM shares its memory). An array's
        # memory never moves, so the same array runs again without new checks.
        self._inputs: dict[int, tuple] = {}

    def virtual_machine(self) -> relax.VirtualMachine:
        """The module's VM on the target's device, made on first use."""
        if self._vm is None:
            if not self.spec.runs_here():
                raise RuntimeError(
                    f"code for {self.spec.name} ({self.spec.arch}) cannot run on this "
                    f"{os.uname().machine} machine; export it and run it on the device"
                )
            self._device = self.spec.tvm_device(self.device_index)
            if self.vendor_regions:
                ready_to_run_plugins(self.spec)
            if self._needs_vendor_library():
                self.runtime_library = self._vendor_library()
                self._vm = _vm_calling(self.library, self._device, self.runtime_library,
                                       self.vendor_regions)
            else:
                self.runtime_library = self.library
                self._vm = relax.VirtualMachine(self.library, self._device)
            self._weight_tensors = [device_tensor(w, self._device) for w in self.weights]
        return self._vm

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
            tensors = []
            for slot, array in enumerate(inputs):
                tensors.append(self._device_input(slot, array))
            tensors += self._weight_tensors
            if on_call is None:
                result = main(*tensors)
            else:
                vm = self.virtual_machine()
                vm.set_instrument(_call_timer(on_call))
                try:
                    result = main(*tensors)
                finally:
                    vm.set_instrument(_no_instrument)
            outputs = []  # copied before the next run reuses the staging buffers
            for index in range(_array_size(result)):
                outputs.append(host_array(_array_item(result, index)))
            return outputs

    def _device_input(self, slot: int, array: np.ndarray) -> tvm.runtime.Tensor:
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
        tensors = [device_tensor(a, self._device) for a in inputs] + self._weight_tensors
        return lambda: main(*tensors)

    def _needs_vendor_library(self) -> bool:
        return bool(self.vendor_regions) and isinstance(self.library, relax.VMExecutable)

    def _vendor_library(self) -> tvm.runtime.Module:
        """The external functions main calls (vendor plugins' regions, custom ops' C code:
        the static libraries among the module's imports), linked alone into a shared library
        with what the plugins need, and loaded. TVM's in-process build cannot run them, and
        linking the whole module instead put a second copy of the weights into the process
        (the library's own, loaded from its file)."""
        self._vendor_dir = tempfile.TemporaryDirectory(prefix="odla-tvm-")
        objects = []
        for index, part in enumerate(self.library.mod.imports):
            if part.kind == "static_library":
                objects.append(os.path.join(self._vendor_dir.name, f"part{index}.o"))
                part.write_to_file(objects[-1])
        path = os.path.join(self._vendor_dir.name, "vendor.so")
        tvm.support.cc.create_shared(path, objects, options=self._link_options())
        return tvm.runtime.load_module(path)

    def export(self, path: str) -> None:
        """Writes the module as a shared library for its target (what export_library writes),
        linked with what its vendor plugins need; a module running from a library file writes
        a copy of that file (a loaded library cannot be written again)."""
        if self._library_file is None:
            export_library(self.library.mod, path, linker(self.spec),
                                   self._link_options())
            return
        source = self._library_file.fileno()
        with open(path, "wb") as copy:
            offset, size = 0, os.fstat(source).st_size
            while offset < size:
                chunk = os.pread(source, min(size - offset, 1 << 24), offset)
                if not chunk:
                    raise OSError(f"{self._library_file.name} was truncated while copied")
                offset += copy.write(chunk)

    def _link_options(self) -> list[str]:
        return [o for name in self.spec.plugins
                for o in vendor_plugins.get_plugin(name).link_options()]

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


# The global functions _vm_calling lends the VM while it loads: one VM at a time.
_lending_lock = threading.Lock()


def _vm_calling(executable, device, library: tvm.runtime.Module,
                names: list[str]) -> relax.VirtualMachine:
    """A VM of the in-memory ``executable`` that calls functions ``names`` of ``library``.
    The VM finds each external function once, when it loads, in the executable's imports
    (where TVM's in-process build has none that run) and then among the global functions; so
    they are global functions just while it loads, and what they shadowed is put back."""
    with _lending_lock:
        shadowed = {name: tvm_ffi.get_global_func(name, allow_missing=True) for name in names}
        try:
            for name in names:
                tvm_ffi.register_global_func(name, library.get_function(name), override=True)
            return relax.VirtualMachine(executable.mod, device)  # .mod: not TVM's own jit (a link)
        finally:
            for name, previous in shadowed.items():
                tvm_ffi.remove_global_func(name)
                if previous is not None:
                    tvm_ffi.register_global_func(name, previous, override=True)


def ready_to_run_plugins(spec: TargetSpec) -> None:
    """Readies this process for running the regions of the target's plugins: TVM's pool polls
    as they want (VendorPlugin.pool_spin), unless the user chose otherwise or the pool has
    started (it reads this once, at its first kernel)."""
    for name in spec.plugins:
        spin = vendor_plugins.get_plugin(name).pool_spin
        if spin is not None:
            default_pool_spin(spin)
