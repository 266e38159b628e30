"""The host's C and C++ compiler, for code that is linked into a compiled model: the C
functions of custom ops (relay_bridge) and the kernels of vendor plugins (targets).

It sits below both and knows neither (DESIGN.md: lowering is target-neutral), so the bridge
compiles a custom op's C code without importing targets. Cross compilers for other machines
are a target's business and stay in targets.

Being the lowest package, it also loads TVM for the others, with torch hidden (see load_tvm).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
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


load_tvm()

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
