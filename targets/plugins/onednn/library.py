"""Where the oneDNN library is (the onednn wheels' lib/ and include/ under sys.prefix), whether
it is installed, and how model libraries link it."""

from __future__ import annotations

import ctypes
import functools
import os
import sys

from ...cpu import thread_pool
from .. import PluginUnavailable

PREFIX = sys.prefix  # where pip puts the onednn wheels' lib/ and include/
INSTALL_HINT = ("pip install onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 "
                "(odla-tvm's own install brings them on x86-64 Linux)")


def library_dir() -> str:
    return os.path.join(PREFIX, "lib")


def include_dir() -> str:
    return os.path.join(PREFIX, "include")


def check_available() -> None:
    missing = [path for path in (os.path.join(include_dir(), "dnnl.hpp"),
                                 os.path.join(library_dir(), "libdnnl.so"))
               if not os.path.exists(path)]
    if missing:
        raise PluginUnavailable(f"oneDNN is not installed ({', '.join(missing)} missing); "
                                f"{INSTALL_HINT}")


def link_options() -> list[str]:
    # libgomp: the generated code sets OpenMP's thread count, which oneDNN's threads follow.
    # export_library puts these before the objects that need them, where a linker that drops
    # libraries not yet needed (--as-needed) would drop them: hence --no-as-needed.
    return [f"-L{library_dir()}", f"-Wl,-rpath,{library_dir()}", "-Wl,--no-as-needed",
            "-ldnnl", "-lgomp"]


@functools.cache
def load_dnnl() -> ctypes.CDLL:
    """libdnnl, for this process's own calls (probes while compiling), its OpenMP regions
    running on the thread pool the model libraries' regions run on."""
    dnnl = ctypes.CDLL(os.path.join(library_dir(), "libdnnl.so"))
    thread_pool.adopt_openmp("libdnnl.so")
    return dnnl
