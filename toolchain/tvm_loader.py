"""Loading TVM: with torch hidden (load_tvm), and with TVMScript's parser made to read the
calling frames cheaply (tvmscript_reads_frames_cheaply). Importing toolchain does both, first
thing, for every package above it."""

from __future__ import annotations

import importlib
import inspect
import linecache
import sys
import types


def load_tvm() -> None:
    """Imports TVM with torch hidden unless the program has imported torch itself.

    TVM's FFI and tvm.relax import torch whenever it is installed, for a torch interop odla-tvm
    never uses (arrays cross by DLPack, which needs no torch), at a cost in memory and time on
    every import. Hidden, `import torch` fails inside TVM, which it tolerates;
    the program's own `import torch` afterwards works as usual."""
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None  # what makes an import raise ImportError
    try:
        import tvm.relax  # noqa: F401
    finally:
        if hide and sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


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
