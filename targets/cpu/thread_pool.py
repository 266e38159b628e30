"""The process's one thread pool for CPU model libraries (thread_pool.cc, built once into
libodla_threads.so): TVM's parallel loops (parallel_launch.cc in each library) and oneDNN's
OpenMP regions (libdnnl's imports of libgomp pointed at it) run on it, with waits that spin
only on a quiet machine."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import toolchain

from ..specs import TargetSpec

_HERE = Path(__file__).parent


@functools.cache
def library_path() -> str:
    """libodla_threads.so, built on first use (cached by its source)."""
    pool = toolchain.compile_object((_HERE / "thread_pool.cc").read_text(), ["-pthread"])
    return toolchain.shared_library(pool, "libodla_threads.so", ["-pthread", "-Wl,-z,nodelete"])


def link_options(spec: TargetSpec) -> list[str]:
    """What a model library of ``spec`` links: the launch's object, which opens the pool's
    library by its path here when it first runs. Nothing for a cross-compiled library, which
    keeps TVM's own pool, nor for other devices, whose host code launches no parallel loops."""
    if spec.device_kind != "cpu" or spec.installed_cross_compiler():
        return []
    path = library_path()
    return [toolchain.compile_object((_HERE / "parallel_launch.cc").read_text(),
                                     [f'-DODLA_THREAD_POOL="{path}"']), "-ldl"]


def adopt_openmp(library: str) -> int:
    """Points the OpenMP imports of the loaded libraries whose path holds ``library`` at the
    pool (as each oneDNN region does before its first run); the count of imports pointed."""
    adopt = ctypes.CDLL(library_path()).odla_pool_adopt_openmp
    adopt.restype, adopt.argtypes = ctypes.c_int, [ctypes.c_char_p]
    return adopt(library.encode())
