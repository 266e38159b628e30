"""Where libodla's headers, sources and built library lie, and the flags a C program
compiles and links with (see the package's doc)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
INCLUDE_DIR = PACKAGE / "include"
SOURCE_DIR = PACKAGE / "src"
# The stored-executable reader and the run-time checks, which odla_runner builds in too.
READER_SOURCES = ("sha256.cc", "mapped_file.cc", "dtypes.cc", "npy.cc", "stored_executable.cc",
                  "checks.cc")
RUNTIME_SOURCES = ("common.cc", *READER_SOURCES, "runtime.cc", "compute.cc", "build.cc",
                   "ops.cc", "platform.cc")
COMPILER_SOURCES = ("compiler.cc",)
LIBRARY = "libodla_tvm.so"
COMPILER_LIBRARY = "libodla_tvm_compiler.so"
PKG_CONFIG = "odla_tvm.pc"


def _package_dir(name: str) -> Path:
    """Where an installed package lies, found without importing it (importing tvm maps its
    compiler)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the {name} package is not installed; install odla-tvm first")
    return Path(list(spec.submodule_search_locations)[0])


def runtime_library_dirs() -> list[Path]:
    """The folders of libtvm_runtime.so (apache-tvm) and libtvm_ffi.so (apache-tvm-ffi)."""
    return [_package_dir("tvm") / "lib", _package_dir("tvm_ffi") / "lib"]


def library_dir() -> Path:
    """Where the library is built: $ODLA_TVM_LIBODLA_DIR, else lib/ in this package where it
    may be written (an editable install), else the user's cache."""
    chosen = os.environ.get("ODLA_TVM_LIBODLA_DIR")
    if chosen:
        return Path(chosen)
    if os.access(PACKAGE, os.W_OK):
        return PACKAGE / "lib"
    cache = os.environ.get("ODLA_TVM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "odla-tvm")
    return Path(cache) / "libodla"


def library_path() -> Path:
    return library_dir() / LIBRARY


def cflags() -> list[str]:
    return [f"-I{INCLUDE_DIR}"]


def libs() -> list[str]:
    directory = library_dir()
    return [f"-L{directory}", "-lodla_tvm", f"-Wl,-rpath,{directory}"]
