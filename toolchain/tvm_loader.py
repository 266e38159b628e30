"""Loading TVM: its FFI alone for the run side (load_tvm_ffi), the compiler with torch hidden
(load_tvm) and TVMScript's parser made to read the calling frames cheaply
(tvmscript_reads_frames_cheaply), both by load_compiler, which the compile side calls first."""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import inspect
import linecache
import os
import sys
import threading
import types


def _import_hiding_torch(name: str) -> None:
    """Imports ``name`` with torch hidden unless the program has imported torch itself.

    TVM's FFI and tvm.relax import torch whenever it is installed, for a torch interop odla-tvm
    never uses (arrays cross by DLPack, which needs no torch), at a cost in memory and time on
    every import. Hidden, `import torch` fails inside TVM, which it tolerates;
    the program's own `import torch` afterwards works as usual."""
    if name in sys.modules:
        return
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None  # what makes an import raise ImportError
    try:
        importlib.import_module(name)
    finally:
        if hide and sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


def load_tvm_ffi() -> types.ModuleType:
    """apache-tvm-ffi (what the run side needs of TVM), imported with torch hidden at the first
    call, which then runs what when_tvm_ffi_loads was given."""
    if _on_load or "tvm_ffi" not in sys.modules:
        with _loading:  # another thread gets tvm_ffi once the actions have run
            _import_hiding_torch("tvm_ffi")
            while _on_load:  # popped first: an action may load tvm_ffi again
                _on_load.pop(0)()
    return sys.modules["tvm_ffi"]


_on_load: list = []
_loading = threading.RLock()


def when_tvm_ffi_loads(action) -> None:
    """Calls ``action`` (registering functions and errors with tvm_ffi) at load_tvm_ffi's
    first call, or now if that was, so that importing the caller imports no tvm_ffi."""
    with _loading:
        _on_load.append(action)
    if "tvm_ffi" in sys.modules:
        load_tvm_ffi()


# TVM's runtime libraries (tvm/lib in its wheel), loaded without its Python package, which
# would load the compiler: the runtime itself, then the optional parts a device needs.
_RUNTIME_LIBRARIES = {"cpu": ("libtvm_runtime.so", "libtvm_runtime_extra.so"),
                      "cuda": ("libtvm_runtime_cuda.so",)}
_runtime_loaded: set[str] = set()


def load_tvm_runtime(device_kind: str = "cpu") -> None:
    """Loads TVM's runtime library (and ``device_kind``'s part of it, where the wheel has one)
    for tvm_ffi, once: what running a compiled module needs, not the compiler. The compiler,
    once loaded, loads the same file, so the two agree."""
    if device_kind in _runtime_loaded:
        return
    load_tvm_ffi()  # libtvm_ffi.so, which the runtime library links, loaded globally
    if device_kind != "cpu":
        load_tvm_runtime("cpu")
    spec = importlib.util.find_spec("tvm")  # finds the package without importing it
    directory = os.path.join(list(spec.submodule_search_locations)[0], "lib")
    for index, name in enumerate(_RUNTIME_LIBRARIES.get(device_kind, ())):
        path = os.path.join(directory, name)
        if index == 0 or os.path.exists(path):
            try:
                ctypes.CDLL(path, ctypes.RTLD_GLOBAL)
            except OSError:  # a device part whose driver is missing: that device is absent
                if device_kind == "cpu" and index == 0:
                    raise
    _runtime_loaded.add(device_kind)


def load_tvm() -> None:
    """Imports TVM's compiler (tvm.relax) with torch hidden, after load_tvm_ffi."""
    load_tvm_ffi()
    _import_hiding_torch("tvm.relax")


def load_compiler() -> None:
    """Readies TVM's compiler for the compile side: load_tvm, then
    tvmscript_reads_frames_cheaply (once)."""
    global _compiler_ready
    if not _compiler_ready:
        load_tvm()
        tvmscript_reads_frames_cheaply()
        _compiler_ready = True


_compiler_ready = False


def compiling_attributes(package: str, modules: dict[str, str]):
    """A module ``__getattr__`` for ``package`` that gives each name of ``modules`` (name ->
    the module defining it, relative to ``package`` where it starts with a dot) from that
    module, imported with the compiler (load_compiler) on first use: what needs the compiler
    stays out of the package's import."""
    def attribute(name: str):
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        load_compiler()
        value = getattr(importlib.import_module(modules[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    return attribute


def calling_frames(context: int = 1) -> list[inspect.FrameInfo]:
    """inspect.stack() as TVMScript's parser reads it: the frames from the caller outwards,
    each with its current source line (linecache's, as inspect's own; ``context`` is taken for
    the signature, one line being all the parser reads), but without inspect's search for each
    frame's module, which walks every module in sys.modules per frame."""
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        line = linecache.getline(code.co_filename, frame.f_lineno)
        frames.append(inspect.FrameInfo(frame, code.co_filename, frame.f_lineno, code.co_name,
                                        [line] if line else None, 0 if line else None))
        frame = frame.f_back
    return frames


class _InspectWithCallingFrames(types.ModuleType):
    """The inspect module, its stack() being calling_frames."""

    stack = staticmethod(calling_frames)

    def __getattr__(self, name):
        return getattr(inspect, name)


# TVMScript's decorators, each calling inspect.stack() once a function or module it parses.
TVMSCRIPT_ENTRIES = ("tvm.tirx.script.parser.entry", "tvm.script.parser.ir.entry",
                     "tvm.relax.script.parser.entry")


def tvmscript_reads_frames_cheaply() -> None:
    """TVMScript's @T.prim_func, @I.ir_module and @R.function take inspect.stack() to find an
    enclosing class or closure; inspect's search for each frame's module made that cost
    frames x modules, and MetaSchedule's first TuneContext in a process imports
    tvm.s_tir.tensor_intrin, 496 such functions under the import machinery's frames."""
    for name in TVMSCRIPT_ENTRIES:
        importlib.import_module(name).inspect = _InspectWithCallingFrames("inspect")
