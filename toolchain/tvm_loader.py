"""The host's C and C++ compiler, for code that is linked into a compiled model: the C
functions of custom ops (relay_bridge) and the kernels of vendor plugins (targets).

It sits below both and knows neither (DESIGN.md: lowering is target-neutral), so the bridge
compiles a custom op's C code without importing targets. Cross compilers for other machines
are a target's business and stay in targets.

Being the lowest package, it also loads TVM for the others, with torch hidden (see load_tvm),
and with TVMScript's parser made to look at the calling frames cheaply (see
_tvmscript_reads_frames_cheaply).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import linecache
import os
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Sequence
from pathlib import Path


def load_tvm() -> None:
    """Imports TVM with torch hidden unless the program has imported torch itself.

    TVM's FFI and tvm.relax import torch whenever it is installed, for a torch interop odla-tvm
    never uses (arrays cross by DLPack, which needs no torch): 240 MB of resident memory and
    about a second on every import. Hidden, `import torch` fails inside TVM, which it tolerates;
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


def _tvmscript_reads_frames_cheaply() -> None:
    """TVMScript's @T.prim_func, @I.ir_module and @R.function take inspect.stack() to find an
    enclosing class or closure; inspect's search for each frame's module made that cost
    frames x modules. MetaSchedule's first TuneContext in a process imports
    tvm.s_tir.tensor_intrin, 496 such functions under the import machinery's frames: 17-26 s
    on a 2-core Xeon, before a tune measured anything; 2.3 s with calling_frames."""
    for name in TVMSCRIPT_ENTRIES:
        importlib.import_module(name).inspect = _InspectWithCallingFrames("inspect")


load_tvm()
_tvmscript_reads_frames_cheaply()

import tvm_ffi.libinfo  # noqa: E402


class ToolchainMissing(RuntimeError):
    """A compiler the build needs is not installed; the message says how to get it."""


def cache_dir() -> str:
    """Where compiled objects are kept: in $ODLA_TVM_CACHE_DIR or ~/.cache/odla-tvm."""
    root = os.environ.get("ODLA_TVM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "odla-tvm")
    # "plugins": the name from when only plugins compiled C, kept so cached objects still hit
    return os.path.join(root, "plugins")


def compile_object(source: str, flags: Sequence[str] = (), compiler: str = "g++",
                   language: str = "c++", headers: Sequence[str] = ()) -> str:
    """Compiles ``source`` in ``language`` ("c++", which may include tvm/ffi headers, or "c")
    to a position-independent object file, cached by the source, the text of ``headers`` (the
    files of one's own it includes), flags and compiler; returns its path."""
    if shutil.which(compiler) is None:
        raise ToolchainMissing(f"{compiler} is not installed; vendor plugins and C custom ops "
                               "compile their code with it: apt-get install g++")
    standard = "-std=c++17" if language == "c++" else "-std=c11"
    command = [compiler, "-x", language, standard, "-O2", "-fPIC", "-c", *flags,
               "-I", tvm_ffi.libinfo.find_include_path(),
               "-I", tvm_ffi.libinfo.find_dlpack_include_path()]
    # The headers' text counts: an object built against an older struct layout segfaults.
    included = [Path(header).read_text() for header in headers]
    digest = hashlib.sha256("\0".join([source, *included, *command]).encode()).hexdigest()[:20]
    directory = cache_dir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{digest}.o")
    if os.path.exists(path):
        return path
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        source_path = os.path.join(tmp, "kernels.cc" if language == "c++" else "kernels.c")
        with open(source_path, "w") as f:
            f.write(source)
        built = subprocess.run([*command, source_path, "-o", os.path.join(tmp, "kernels.o")],
                               capture_output=True, text=True)
        if built.returncode:
            errors = [line for line in built.stderr.splitlines() if "error" in line]
            raise RuntimeError(f"{compiler} failed on {language} code: "
                               f"{(errors or built.stderr.splitlines() or ['no message'])[0]}")
        os.replace(os.path.join(tmp, "kernels.o"), path)  # atomic: concurrent builds agree
    return path
