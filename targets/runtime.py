"""Compiles an IRModule for a target, exports the result, and runs it where it can run."""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import shutil
import tempfile
import threading
import time

import numpy as np
import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir import dlight as dl

import relay_bridge
from toolchain import ToolchainMissing

from . import codegen
from . import plugins as vendor_plugins
from .conv_rewrites import conv_rewrites
from .amx import amx_products, has_amx, parts_schedules
from .math_rewrites import powers_by_roots
from .cpu_schedules import default_schedules
from .cuda.rules import gpu_rules
from .in_place import SUFFIX as IN_PLACE_SUFFIX, residuals_in_place
from .layouts import constant_layouts_folded, layout_passes, rewrite_functions, without_uncalled
from .registry import TargetSpec, cpu_count, default_pool_spin
from .weights import WeightFiles, lift_weights, numpy_views

log = logging.getLogger(__name__)

# TVM's CPU thread pool takes half the hardware threads unless told (it assumes two per core);
# host code is compiled and tuned for every usable core, so it runs on as many. Read when the
# pool starts, at the first parallel kernel.
os.environ.setdefault("TVM_NUM_THREADS", str(cpu_count()))
# Its idle workers poll for the next kernel 300,000 times (sched_yield) before they sleep:
# after every run a process kept a core busy for ~150 ms, taken from whatever ran next on the
# machine. 10,000 polls (~5 ms) still span the microseconds between a run's kernels (ResNet-50,
# DistilBERT, MobileNetV2: no change in latency). A process running oneDNN's regions polls
# none (VendorPlugin.pool_spin).
default_pool_spin(10000)


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
# for the length first and goes through a Python helper, which takes ~1 µs per output.
_array_size = tvm_ffi.get_global_func("ffi.ArraySize")
_array_item = tvm_ffi.get_global_func("ffi.ArrayGetItem")


def host_array(tensor: tvm.runtime.Tensor) -> np.ndarray:
    """A NumPy copy of a TVM tensor (a copy: a result may alias an input or a constant). Through
    DLPack on the CPU, ~15x faster than Tensor.numpy() for small tensors."""
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
    for the process's whole life: pure-TVM BERT-base's first load left 717 MB of heap, 33 MB
    once trimmed, the mapped weights it then ran from counted beside it."""
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
        # (see compile_module), else None; none once it runs from a library and its weights.
        self.weight_paths: list = [None] * len(self.weights)
        self._weight_tensors: list[tvm.runtime.Tensor] = []  # made with the VM, then kept:
        # a vendor region packs a weight once, keyed on its address
        # External functions main calls: vendor plugins' regions and custom ops' C functions.
        self.vendor_regions = vendor_regions or []
        # kernel name -> the graph bindings it computes, in call order (see compile_module)
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
                _ready_to_run_plugins(self.spec)
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
        compiles the kernels' LLVM code again (pure-TVM ResNet-50: 1.4 s) and the vendor
        parts are linked again."""
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
        # Plain loops: a comprehension costs ~0.5 µs more here, a tenth of a tiny model's run.
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
            codegen.export_library(self.library.mod, path, _fcompile(self.spec),
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


# TVM's compiler keeps global state (TE tag scopes among it): one compile at a time.
_compile_lock = threading.Lock()


@tvm.ir.instrument.pass_instrument
class _KernelRecorder:
    """Records, once ops are lowered (and again once kernels are fused), which graph bindings
    each kernel computes: the VM calls a kernel once per binding, in binding order, which maps
    calls to values. A fused kernel is recorded as computing the binding its last op had
    before FuseOps renamed it. Also records which kernels took their schedule from a tuning
    database."""

    def __init__(self):
        self.kernels: dict[str, list[str]] = {}
        self.tuned: list[str] = []
        self._unscheduled: set[str] = set()
        self._calls: dict[tuple, str] = {}  # (kernel, operand names) -> binding, before FuseOps
        self._fused: dict[str, str] = {}  # binding of a fused call -> the binding it replaced
        self._called: list[str] = []  # the kernel of each call, in order, before ResidualsInPlace

    def run_before_pass(self, mod, info):
        if info.name == "MetaScheduleApplyDatabase":
            self._unscheduled = set(_kernels(mod, scheduled=False))
        if info.name == "FuseOps":
            self._calls = {_call_key(value): var.name for var, value in _kernel_calls(mod["main"])}
        if info.name == "ResidualsInPlace":
            self._called = [value.args[0].name_hint for _, value in _kernel_calls(mod["main"])]

    def run_after_pass(self, mod, info):
        if info.name == "MetaScheduleApplyDatabase":
            self.tuned = sorted(self._unscheduled & set(_kernels(mod, scheduled=True)))
        if info.name == "FuseOps":
            self._fused = self._fused_outputs(mod)
        if info.name == "SplitLayoutRewritePreproc":
            self._follow_prepacked(mod)
        if info.name == "ResidualsInPlace":
            self._follow_in_place(mod)
        if info.name not in ("LegalizeOps", "FuseTIR"):
            return
        self.kernels = {}
        for var, value in _kernel_calls(mod["main"]):
            self.kernels.setdefault(value.args[0].name_hint, []).append(
                self._fused.get(var.name, var.name))

    def _follow_in_place(self, mod) -> None:
        """A call made to write over its operand calls ``<name>_inplace`` (targets.in_place):
        same value, in the same place among the calls, under a new name."""
        called = [value.args[0].name_hint for _, value in _kernel_calls(mod["main"])]
        remaining = {name: iter(bindings) for name, bindings in self.kernels.items()}
        kernels: dict[str, list[str]] = {}
        for before, after in zip(self._called, called):
            if before in remaining:
                kernels.setdefault(after, []).append(next(remaining[before]))
        for name, rest in remaining.items():  # kernels no call names (reshapes made views)
            kernels.setdefault(name, []).extend(rest)
        self.kernels = {name: bindings for name, bindings in kernels.items() if bindings}

    def _follow_prepacked(self, mod) -> None:
        """A kernel whose schedule reads its weights in another layout becomes ``<name>_prepacked``
        (its weights' ``<name>_weight_prepack`` is folded away at compile time): same calls,
        same values, new name."""
        names = {g.name_hint for g in mod.get_global_vars()}
        renamed = {k: f"{k}_prepacked" for k in names if f"{k}_prepacked" in names}
        self.kernels = {renamed.get(k, k): v for k, v in self.kernels.items()}
        self.tuned = sorted(renamed.get(k, k) for k in self.tuned)

    def _fused_outputs(self, mod) -> dict[str, str]:
        """For each call of a fused function in ``main``, the binding name its last kernel
        call had before fusion, found by that call's kernel and operands (the fused
        function's parameters stand for the call's arguments)."""
        outputs = {}
        for block in mod["main"].body.blocks:
            for binding in block.bindings:
                value = binding.value
                if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)):
                    continue
                fused = mod[value.op]
                if not (fused.attrs and fused.attrs.get("Primitive", False)):
                    continue
                outer = {p.name: _operand_name(a) for p, a in zip(fused.params, value.args)}
                last = _kernel_calls(fused)[-1][1]
                original = self._calls.get(_call_key(last, outer))
                if original is not None:
                    outputs[binding.var.name] = original
        return outputs


def _kernel_calls(func: relax.Function) -> list[tuple[relax.Var, relax.Call]]:
    """The call_tir (and call_tir_inplace) bindings of ``func``, in order."""
    return [(b.var, b.value) for block in func.body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
            and b.value.op.name in ("relax.call_tir", "relax.call_tir_inplace")]


def _operand_name(expr) -> str:
    return expr.name if isinstance(expr, relax.Var) else "<constant>"


def _call_key(call: relax.Call, renamed: dict[str, str] | None = None) -> tuple:
    operands = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
    names = [_operand_name(a) for a in operands]
    return (call.args[0].name_hint, *(renamed.get(n, n) if renamed else n for n in names))


def _kernels(mod: tvm.IRModule, scheduled: bool) -> list[str]:
    """Names of the module's kernels that are (or are not yet) scheduled."""
    return [gv.name_hint for gv, func in mod.functions.items()
            if isinstance(func, tvm.tirx.PrimFunc)
            and bool(func.attrs and func.attrs.get("tirx.is_scheduled", False)) == scheduled]


@tvm.transform.module_pass(opt_level=0, name="MarkLayoutFreeConstants")
def _layout_free_constants(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Marks the operands that are constants at every call of a kernel as layout-free, so that
    its tuned schedule may read them in another layout, made from the constants when compiling
    (MetaSchedule's RewriteLayout, then SplitLayoutRewritePreproc and FoldConstant). TVM's
    AttachAttrLayoutFreeBuffers does the same but renames every kernel it passes."""
    constant_operands: dict[tvm.ir.GlobalVar, set[int]] = {}
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        for _var, call in _kernel_calls(func):
            operands = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else []
            constants = {i for i, a in enumerate(operands) if isinstance(a, tvm.ir.expr.Constant)}
            kernel = call.args[0]
            constant_operands[kernel] = constant_operands.get(kernel, constants) & constants
    for kernel, constants in constant_operands.items():
        if constants:
            mod[kernel] = mod[kernel].with_attr("layout_free_buffers", sorted(constants))
    return mod


_CALL_TIR = tvm.ir.Op.get("relax.call_tir")


def _constant_kernel_calls(mod: tvm.IRModule) -> list:
    """call_tir calls in ``mod``'s relax functions whose operands are all constants, variables
    bound to constants or results of earlier such calls, and whose result is one tensor of
    static shape: (call, kernel, operands), in an order they can run in; an operand is a
    tensor, or the index of the call whose result it is (so a chain of them, as a weight's
    transpose, reshape and product, folds in one build)."""
    found = []
    kernels = {gv: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    bound: dict = {}  # var -> its constant's tensor, or the index of the call it is bound to
    calls: dict = {}  # call -> its index in found

    def operand_of(expr):
        if isinstance(expr, relax.Var):
            return bound.get(expr)
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value
        return calls.get(expr)

    def visit(expr):
        if not (isinstance(expr, relax.Call) and expr.op.same_as(_CALL_TIR)) or len(expr.args) != 2:
            return
        operands = expr.args[1].fields if isinstance(expr.args[1], relax.Tuple) else [expr.args[1]]
        values = [operand_of(a) for a in operands]
        kernel = kernels.get(expr.args[0])
        ty = expr.ty
        if (kernel is not None and len(kernel.params) == len(operands) + 1
                and all(v is not None for v in values)
                and isinstance(ty, relax.TensorType) and ty.shape is not None
                and all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values)):
            calls[expr] = len(found)
            found.append((expr, kernel, values))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            for block in func.body.blocks:
                for binding in block.bindings:
                    relax.analysis.post_order_visit(binding.value, visit)
                    if isinstance(binding, relax.VarBinding):
                        source = operand_of(binding.value)
                        if source is not None:
                            bound[binding.var] = source
    return found


@relax.expr_functor.mutator
class _ReplaceCalls(relax.expr_functor.PyExprMutator):
    def __init__(self, mod, replacements):
        super().__init__(mod)
        self.replacements = replacements

    def visit_call_(self, call):
        replacement = self.replacements.get(call)
        return replacement if replacement is not None else self.visit_expr_post_order(call)


# LLVM without its optimizations: folding kernels run once, on weights, so optimizing them
# costs more than it saves (resnet50: 0.2 s); the same values (resnet50's outputs are
# bit-identical), the kernels being data movement and products LLVM does not reorder.
_FOLD_TARGET = tvm.target.Target({"kind": "llvm", "opt-level": 0})


def _int(expr) -> int | None:
    return int(expr) if isinstance(expr, tvm.tirx.IntImm) else None


def _axis_parts(indices, axes) -> list[tuple[int, str, int]] | None:
    """Per index, (its axis, "whole", 1), (axis, "outer", c) for axis // c or (axis,
    "inner", c) for axis % c; None where an index is anything else."""
    parts = []
    for index in indices:
        kind = {tvm.tirx.FloorDiv: "outer", tvm.tirx.FloorMod: "inner"}.get(type(index))
        var, factor = (index.a, _int(index.b)) if kind else (index, 1)
        axis = next((n for n, v in enumerate(axes) if var.same_as(v)), None)
        if axis is None or factor is None:
            return None
        parts.append((axis, kind or "whole", factor))
    return parts


def _numpy_layout(kernel: tvm.tirx.PrimFunc, copy=WeightFiles.copy_plain):
    """For a kernel that only lays its one operand out again, as a schedule's prepacked
    weight (out[.., v // c, .., v % c] = in[v0, v1, ..] over all of in: each axis kept
    whole, or split into an outer and an inner part), a function (in, out) doing it with
    NumPy, a reshape and a transpose, through ``copy`` (out, value, read, the axis of out
    that is read's leading one: WeightFiles.copy where its results go to files); else
    None. Built and run by LLVM unoptimized instead, pure-TVM ResNet-50's 23 took 0.3 s to
    build and 0.4 s to run."""
    realizes, loops = [], {}
    tvm_ffi.structural_walk(kernel.body, [
        (tvm.s_tir.SBlockRealize, realizes.append),
        (tvm.tirx.For, lambda loop: loops.update({loop.loop_var: loop}))], order="post")
    if len(kernel.params) != 2 or len(realizes) != 2:  # one block, in the root block
        return None
    realize, (source, out) = realizes[0], kernel.params
    block, store = realize.block, realize.block.body
    load = store.value if isinstance(store, tvm.tirx.BufferStore) else None
    if not (isinstance(load, tvm.ir.expr.TensorLoad) and load.source.same_as(source)
            and store.buffer.same_as(out) and source.dtype == out.dtype
            and numpy_views(str(out.dtype)) and _int(realize.predicate) == 1):
        return None
    # Every element of the source once: its indices are the block's axes, each bound to a
    # loop of its own over the whole of its dim.
    axes = [iv.var for iv in block.iter_vars]
    bound = [loops.get(value) for value in realize.iter_values]
    if not (len(axes) == len(load.indices) == len(source.shape) == len(set(realize.iter_values))
            and all(i.same_as(v) for i, v in zip(load.indices, axes))
            and all(loop is not None and _int(loop.min) == 0
                    and _int(loop.extent) is not None and _int(loop.extent) == _int(extent)
                    for loop, extent in zip(bound, source.shape))):
        return None
    parts = _axis_parts(store.indices, axes)
    if parts is None:
        return None
    split, positions = [], {}  # the source's shape, a split axis as two; (axis, kind) -> place
    for axis, extent in enumerate(int(e) for e in source.shape):
        mine = sorted((kind, factor) for a, kind, factor in parts if a == axis)
        if [kind for kind, _ in mine] == ["whole"]:
            positions[(axis, "whole")] = len(split)
            split.append(extent)
        elif ([kind for kind, _ in mine] == ["inner", "outer"] and mine[0][1] == mine[1][1]
              and extent % mine[0][1] == 0):
            positions[(axis, "outer")], positions[(axis, "inner")] = len(split), len(split) + 1
            split += [extent // mine[0][1], mine[0][1]]
        else:
            return None
    order = [positions[(axis, kind)] for axis, kind, _ in parts]
    if [split[p] for p in order] != [int(d) for d in out.shape]:
        return None

    def lay_out(source, out):
        source = np.from_dlpack(source)
        copy(np.from_dlpack(out), source.reshape(split).transpose(order), source, order.index(0))

    return lay_out


@tvm.transform.module_pass(opt_level=0, name="FoldConstant")
def _fold_constants(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """_fold_kernel_calls, as a pass."""
    return _fold_kernel_calls(mod)


def _fold_kernel_calls(mod: tvm.IRModule, weight_files: WeightFiles | None = None) -> tvm.IRModule:
    """relax.transform.FoldConstant, with the kernels that compute constants from constants
    (weights laid out for the kernels: a transpose per convolution, a layout per prepacked
    kernel) built together in one LLVM module, rather than one each (resnet50: 7 s of 9), a
    chain of them (a reshape, then a product) in one build rather than one per link. Same
    kernels as FoldConstant's, for its "llvm" target at opt-level 0 (_FOLD_TARGET). A kernel
    that only ever computed constants leaves the module: compiled for nothing, the weight
    layouts of pure-TVM ResNet-50 (23 of its 51 kernels) took 45% of its code generation.
    With ``weight_files``, the large results are written to files there as they are made."""
    folded = set()
    for _ in range(16):  # rounds: a folded result may reach a kernel through other relax ops
        calls = _constant_kernel_calls(mod)
        if not calls:
            break
        folded.update(call.args[0] for call, _kernel, _values in calls)
        keys = [tvm_ffi.structural_hash(kernel) for _call, kernel, _values in calls]
        functions: dict = {}  # kernel's hash -> what computes it: NumPy, or its LLVM build
        kernels = {}  # name -> (hash, kernel) of those LLVM builds
        for key, (_call, kernel, _values) in zip(keys, calls):
            if key not in functions:
                functions[key] = _numpy_layout(kernel, WeightFiles.copy_plain
                                               if weight_files is None else weight_files.copy)
                if functions[key] is None:
                    name = f"fold_constant_{len(kernels)}"
                    kernels[name] = key, kernel.with_attr("global_symbol", name)
        if kernels:
            library = tvm.compile(tvm.IRModule({n: k for n, (_, k) in kernels.items()}),
                                  target=_FOLD_TARGET)
            functions.update({key: library[name] for name, (key, _) in kernels.items()})
        results = []
        for key, (call, _kernel, operands) in zip(keys, calls):
            shape, dtype = [int(d) for d in call.ty.shape.values], str(call.ty.dtype)
            in_file = weight_files.empty(shape, dtype) if weight_files is not None else None
            out = tvm.runtime.empty(shape, dtype, tvm.cpu()) if in_file is None else \
                tvm.runtime.from_dlpack(in_file)
            values = [results[o] if isinstance(o, int) else o for o in operands]
            functions[key](*values, out)
            if weight_files is not None:  # what it wrote, and what it read, leave memory
                for array in (out, *values):
                    weight_files.release(array)
            results.append(out)
        replacements = {call: relax.const(out) for (call, _, _), out in zip(calls, results)}
        mod = rewrite_functions(mod, lambda m, _func: _ReplaceCalls(m, replacements))
    return without_uncalled(relax.transform.FoldConstant()(mod), folded)


def _kernel_passes(spec: TargetSpec, weight_files: WeightFiles | None = None) -> list:
    """Ops to fused kernels: the form tuning takes its tasks from and records apply to. Where
    the target prepacks weights, each kernel's constant operands are marked layout-free, so a
    schedule may read them in another layout (MetaSchedule's RewriteLayout). The weights
    folded with NumPy go to ``weight_files`` where given."""
    return [constant_layouts_folded(weight_files), relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            _fold_constants, relax.transform.FuseOps(), relax.transform.FuseTIR(),
            *([_layout_free_constants] if spec.prepack_weights else [])]


def _partitioned(mod: tvm.IRModule, spec: TargetSpec, plugin_items=None) -> tvm.IRModule:
    """``mod`` with what the target's vendor plugins take compiled by them."""
    for name in spec.plugins:
        mod = vendor_plugins.partition(mod, vendor_plugins.get_plugin(name), plugin_items,
                                       may_decline=spec.plugins_may_decline)
    if vendor_plugins.offloaded_regions(mod):
        _ready_to_run_plugins(spec)  # compiling may run kernels, which starts TVM's pool
    return mod


def _ready_to_run_plugins(spec: TargetSpec) -> None:
    """Readies this process for running the regions of the target's plugins: TVM's pool polls
    as they want (VendorPlugin.pool_spin), unless the user chose otherwise or the pool has
    started (it reads this once, at its first kernel)."""
    for name in spec.plugins:
        spin = vendor_plugins.get_plugin(name).pool_spin
        if spin is not None:
            default_pool_spin(spin)


def fused_kernels(mod: tvm.IRModule, spec: TargetSpec, plugin_items=None,
                  weight_files: WeightFiles | None = None) -> tvm.IRModule:
    """``mod`` with its ops lowered to fused kernels (after the target's vendor plugins took
    theirs), exactly as compile_module does before it applies tuning records (so a tuned
    workload matches at compile time); weights it lays out go to ``weight_files``."""
    target = spec.tvm_target()
    cpu_default = "cpu-default" in spec.schedules
    amx = [amx_products(weight_files)] if cpu_default and has_amx(target) else []
    rewrites = conv_rewrites(target, amx) if spec.conv_rewrites else amx
    if cpu_default:
        rewrites.append(powers_by_roots)
    with target:
        return tvm.transform.Sequential(
            layout_passes(spec.layouts) + rewrites + relax.pipeline.library_dispatch_passes(target)
            + _kernel_passes(spec, weight_files) + ([parts_schedules] if amx else [])
        )(_partitioned(mod, spec, plugin_items))


def default_scheduled(kernels: tvm.IRModule, spec: TargetSpec) -> tvm.IRModule:
    """``kernels`` (fused, under ``spec``'s target) with every kernel still unscheduled given
    the target's default rules: dlight's on GPUs, targets.cpu_schedules' on CPUs (none for a
    target with neither). The rules change the module they are given as well."""
    if "dlight" in spec.schedules:
        kernels = dl.ApplyDefaultSchedule(*gpu_rules())(kernels)
    if "cpu-default" in spec.schedules:
        kernels = default_schedules()(kernels)
    return kernels


def _scheduled(mod: tvm.IRModule, spec: TargetSpec, database, plugin_items=None,
               weight_files: WeightFiles | None = None,
               unscheduled: frozenset = frozenset()) -> tvm.IRModule | None:
    """``mod`` as fused kernels scheduled from ``database`` (records tuned for ``spec``), then
    by the target's default rules for every kernel still unscheduled (dlight's on GPUs,
    targets.cpu_schedules' on CPUs) but those named in ``unscheduled``, which keep TVM's
    generic code; None for a target with neither source when no record applies, so the
    module keeps TVM's generic build. The weights laid out for the schedules go to
    ``weight_files`` where given."""
    tuned = database is not None and "database" in spec.schedules and database.tuned_for(mod)
    dlight = "dlight" in spec.schedules
    cpu_rules = "cpu-default" in spec.schedules
    if not (tuned or dlight or cpu_rules):
        return None
    kernels = fused_kernels(mod, spec, plugin_items, weight_files)
    for gv, func in list(kernels.functions_items()):
        if gv.name_hint in unscheduled:  # what the rules skip
            kernels[gv] = func.with_attr("tirx.is_scheduled", True)
    if tuned:
        with database.records(kernels):
            kernels = relax.transform.MetaScheduleApplyDatabase()(kernels)
    if not (dlight or cpu_rules) and not _kernels(kernels, scheduled=True):
        return None
    kernels = default_scheduled(kernels, spec)
    if spec.prepack_weights and (tuned or cpu_rules):
        # The weight layouts the schedules read, made once here from the constants.
        kernels = _fold_kernel_calls(_split_layout_rewrites(kernels), weight_files)
        if cpu_rules:
            kernels = default_schedules()(kernels)  # a layout of something else than constants
    return kernels


def _has_layout_rewrite(func: tvm.tirx.PrimFunc) -> bool:
    found = []
    tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlock, lambda block: found.append(
        "meta_schedule.layout_rewrite_preproc" in block.annotations)), order="post")
    return any(found)


def _split_layout_rewrites(mod: tvm.IRModule) -> tvm.IRModule:
    """SplitLayoutRewritePreproc: each kernel that lays out its weights again becomes a
    ``<name>_weight_prepack`` kernel (folded away at compile time) and ``<name>_prepacked``.
    The pass sees only those kernels: it fails on a kernel without a compute block (scans,
    sorts), which stands in as a trivial one meanwhile."""
    kernels = {gv: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    others = {gv: f for gv, f in kernels.items() if not _has_layout_rewrite(f)}
    if len(others) == len(kernels):
        return mod
    stand_in = tvm.te.create_prim_func([tvm.te.compute((1,), lambda _: tvm.tirx.const(0, "int8"))])
    mod = mod.clone()
    for gv in others:
        mod[gv] = stand_in
    mod = relax.transform.SplitLayoutRewritePreproc()(mod)
    for gv, func in others.items():
        mod[gv] = func
    return mod


def _lowering(spec: TargetSpec) -> tvm.transform.Pass:
    """Scheduled kernels to VM code: relax.pipeline's dataflow lowering (spelled out: its
    function fails for llvm and cuda in TVM 0.27, whose backends do not export it), with the
    kernels that may write over a dying operand made to (targets.in_place), and the target's
    finalizing passes."""
    return tvm.transform.Sequential([
        relax.transform.RewriteDataflowReshape(), residuals_in_place,
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(), relax.transform.CallTIRRewrite(),
        *relax.pipeline.finalize_passes(spec.tvm_target())])


def compile_module(mod: tvm.IRModule, spec: TargetSpec, device_index: int = 0,
                   database=None, plugin_items=None,
                   weight_files: WeightFiles | None = None) -> CompiledModule:
    """Compiles ``mod`` for ``spec``; ``database`` (a targets.tuning.TuningDatabase of this
    target: see find_database) schedules the kernels it has records for; ``plugin_items``
    ("<plugin>.<item>" -> value) go to the target's vendor plugins; the weights the compile
    lays out go to ``weight_files`` where given (the module's ``weight_paths``). A kernel
    whose default schedule the code generator refuses is built unscheduled (see _compile);
    where the default CPU schedules fail otherwise on a module no record applies to (a graph
    pass refusing what they make), it compiles as TVM's generic build instead, saying why."""
    target = spec.tvm_target()
    recorder = _KernelRecorder()
    with _compile_lock, target:
        try:
            library, regions, weights = _compile(mod, spec, database, plugin_items, recorder,
                                                 weight_files=weight_files)
        except Exception as err:  # noqa: BLE001
            if "cpu-default" not in spec.schedules or recorder.tuned:
                raise
            log.warning("default CPU schedules failed (%s: %s); compiling TVM's generic build",
                        type(err).__name__, (str(err).strip().splitlines() or [""])[-1][:200])
            recorder = _KernelRecorder()
            library, regions, weights = _compile(mod, spec, None, plugin_items, recorder,
                                                 schedule=False)
    release_freed_memory()  # what the compile's passes held
    module = CompiledModule(library, spec, device_index, recorder.kernels, recorder.tuned,
                            regions, weights)
    if weight_files is not None:
        module.weight_paths = [weight_files.file_of(w) for w in weights]
    return module


def _compile(mod: tvm.IRModule, spec: TargetSpec, database, plugin_items,
             recorder: _KernelRecorder, schedule: bool = True,
             weight_files: WeightFiles | None = None, unscheduled: frozenset = frozenset()):
    """(library, vendor regions, weights) of one build: scheduled (see _scheduled) unless
    ``schedule`` is False or nothing schedules it, else TVM's generic build (whose constants
    stay in the library: its pipeline folds them yet). Kernels whose default schedules fail
    to build are built again unscheduled, the others keeping theirs (one such kernel made
    the whole module TVM's generic build, tens of times slower)."""
    target = spec.tvm_target()
    with tvm.transform.PassContext(opt_level=3, instruments=[recorder]):
        scheduled = _scheduled(mod, spec, database, plugin_items, weight_files, unscheduled) \
            if schedule else None
        if scheduled is None:
            mod = _partitioned(mod, spec, plugin_items)
            regions = vendor_plugins.offloaded_regions(mod)
            return tvm.compile(mod, target=target), regions, []
        regions = vendor_plugins.offloaded_regions(scheduled)
        scheduled, weights = lift_weights(scheduled)
        lowered = _lowering(spec)(scheduled)
        try:
            return codegen.build(lowered, target), regions, weights
        except Exception as err:  # noqa: BLE001
            failing = {name.removesuffix(IN_PLACE_SUFFIX).removesuffix("_prepacked")
                       for name in codegen.failing_kernels(lowered, target)}
            if "cpu-default" not in spec.schedules or recorder.tuned or \
                    not failing or failing <= unscheduled:
                raise
            log.warning("the default schedules of %s fail to build (%s: %s); those kernels "
                        "are built unscheduled", ", ".join(sorted(failing)), type(err).__name__,
                        (str(err).strip().splitlines() or [""])[-1][:200])
    return _compile(mod, spec, database, plugin_items, recorder, schedule, weight_files,
                    unscheduled | failing)
