"""The host's C and C++ compiler, for code that is linked into a compiled model: the C
functions of custom ops (relay_bridge) and the kernels of vendor plugins (targets). It sits
below both and knows neither, so the bridge compiles a custom op's C code without importing
targets (lowering is target-neutral: see the layers of docs/architecture.md). Cross compilers
for other machines are a target's business and stay in targets."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .cache import cache_dir
from .tvm_loader import load_tvm_ffi


class ToolchainMissing(RuntimeError):
    """A compiler the build needs is not installed; the message says how to get it."""


def compile_object(source: str, flags: Sequence[str] = (), compiler: str = "g++",
                   language: str = "c++", headers: Sequence[str] = ()) -> str:
    """Compiles ``source`` in ``language`` ("c++", which may include tvm/ffi headers, or "c")
    to a position-independent object file, cached by the source, the text of ``headers`` (the
    files of one's own it includes), flags and compiler; returns its path."""
    if shutil.which(compiler) is None:
        raise ToolchainMissing(f"{compiler} is not installed; vendor plugins and C custom ops "
                               "compile their code with it: apt-get install g++")
    import subprocess  # by a first compile only: `import odla_tvm` starts no process

    load_tvm_ffi()  # before tvm_ffi.libinfo: importing it imports tvm_ffi, torch hidden
    import tvm_ffi.libinfo

    standard = "-std=c++17" if language == "c++" else "-std=c11"
    command = [compiler, "-x", language, standard, "-O2", "-fPIC", "-c", *flags,
               "-I", tvm_ffi.libinfo.find_include_path(),
               "-I", tvm_ffi.libinfo.find_dlpack_include_path()]
    # The headers' text counts: an object built against an older struct layout segfaults.
    included = [Path(header).read_text() for header in headers]
    digest = hashlib.sha256("\0".join([source, *included, *command]).encode()).hexdigest()[:20]
    # "plugins": the name from when only plugins compiled C, kept so cached objects still hit
    directory = cache_dir() / "plugins"
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


def shared_library(object_path: str, name: str, flags: Sequence[str] = (),
                   compiler: str = "g++") -> str:
    """Links the object at ``object_path`` (from compile_object) with ``flags`` (the libraries
    it needs, in the order they are to load) into a shared library ``name``, kept beside it
    in a folder named by both; returns its path."""
    import subprocess  # by a first link only

    digest = hashlib.sha256("\0".join([compiler, *flags]).encode()).hexdigest()[:12]
    directory = f"{os.path.splitext(object_path)[0]}-{digest}.lib"
    path = os.path.join(directory, name)
    if os.path.exists(path):
        return path
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        built = subprocess.run([compiler, "-shared", *flags, object_path, "-o",
                                os.path.join(tmp, name)], capture_output=True, text=True)
        if built.returncode:
            raise RuntimeError(f"{compiler} failed to link {name}: "
                               f"{(built.stderr.splitlines() or ['no message'])[0]}")
        os.replace(os.path.join(tmp, name), path)  # atomic: concurrent builds agree
    return path
