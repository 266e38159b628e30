"""libodla: ODLA 0.5's C API (include/ODLA/*.h) and the C library behind it, libodla_tvm.so.

``build()`` compiles the library with the system g++ against TVM's runtime (libodla.builder,
no network): libodla_tvm.so (the run path: TVM's runtime only) and libodla_tvm_compiler.so
(the build path, loaded by the first build call: odla_tvm's Python API through an embedded
interpreter).
They land in ``library_dir()`` beside odla_tvm.pc. ``cflags()`` and ``libs()`` are what a C
program compiles and links with (an rpath included). Nothing here imports TVM's compiler.
"""

from __future__ import annotations

from pathlib import Path

from .paths import (COMPILER_LIBRARY, COMPILER_SOURCES, INCLUDE_DIR, LIBRARY, PACKAGE,
                    PKG_CONFIG, RUNTIME_SOURCES, SOURCE_DIR, cflags, library_dir, library_path,
                    libs, runtime_library_dirs)

__all__ = ["COMPILER_LIBRARY", "COMPILER_SOURCES", "INCLUDE_DIR", "LIBRARY", "PACKAGE",
           "PKG_CONFIG", "RUNTIME_SOURCES", "SOURCE_DIR", "build", "cflags", "library_dir",
           "library_path", "libs", "runtime_library_dirs"]


def build(force: bool = False) -> Path:
    """Builds the library into library_dir() unless built from these sources already;
    returns libodla_tvm.so's path (libodla.builder: loaded only to build)."""
    from .builder import build_library

    return build_library(force)
