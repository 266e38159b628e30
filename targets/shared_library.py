"""A compiled module written as one shared library, as TVM's export_library writes it, but
with its modules' objects written on every core and its packed modules (weights and all)
included from a file rather than made an LLVM constant; linked by the target's cross compiler
where it has one."""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tvm
from tvm_ffi import libinfo as tvm_ffi_libinfo

from .specs import TargetSpec, cpu_count

_pack_to_tensor = tvm.get_global_func("runtime.ModulePackImportsToTensor")

# The symbol TVM's loader reads a shared library's packed modules (and the weights) from.
_LIBRARY_BIN = "__tvm_ffi__library_bin"
_SOURCE_FORMATS = ("c", "cc", "cpp", "cu")


def linker(spec: TargetSpec):
    """The function that links a shared library for ``spec``'s machine: None for TVM's
    default, the host's C++ compiler."""
    cross = spec.installed_cross_compiler()
    return None if cross is None else tvm.support.cc.cross_compiler(cross)


def _pack_imports(module: tvm.runtime.Module, workspace_dir: str) -> str:
    """export_library's fpack_imports: the packed modules (TVM's serialization, weights and
    all) written to a file that an assembly source includes. TVM's own packer makes them an
    LLVM constant, holding the weights three or four times over at once."""
    blob = _pack_to_tensor(module)
    data_path = os.path.join(workspace_dir, "library_bin.bin")
    with open(data_path, "wb") as f:
        f.write(np.from_dlpack(blob).data)
    del blob
    source = os.path.join(workspace_dir, "library_bin.S")
    with open(source, "w") as f:
        f.write(f""".section .rodata
.globl {_LIBRARY_BIN}
.type {_LIBRARY_BIN}, %object
.p2align 4
{_LIBRARY_BIN}:
.incbin "{data_path}"
.size {_LIBRARY_BIN}, . - {_LIBRARY_BIN}
.section .note.GNU-stack,"",%progbits
""")
    return source


def _object_file(module: tvm.runtime.Module, index: int, workspace_dir: str) -> str:
    """Writes ``module``'s object (its LLVM code generated now), or its source for a C
    module, into ``workspace_dir``; the file's path."""
    fmt = next(f for f in module.get_write_formats() if f in _SOURCE_FORMATS) \
        if module.kind == "c" else "o"
    path = os.path.join(workspace_dir, f"lib{index}.{fmt}")
    module.write_to_file(path)
    return path


def export_library(library: tvm.runtime.Module, path: str, fcompile=None,
                   options: list[str] | None = None) -> None:
    """``library.export_library(path, fcompile=..., options=...)`` for a shared library (not a
    system library), its modules' objects written on every core and its packed modules as
    _pack_imports writes them."""
    modules = library._collect_dso_modules()
    if any(m.kind == "llvm" and m.get_function("__tvm_is_system_module")() for m in modules):
        raise ValueError("odla-tvm exports shared libraries only, not system libraries")
    options = list(options or [])
    if any(m.kind == "c" for m in modules):  # compiled with TVM's headers, as export_library
        options += ["-I" + p for p in (tvm.libinfo.find_include_path(),
                                       tvm_ffi_libinfo.find_include_path(),
                                       tvm_ffi_libinfo.find_dlpack_include_path())]
    with tempfile.TemporaryDirectory() as workspace:
        with ThreadPoolExecutor(cpu_count()) as pool:
            files = list(pool.map(_object_file, modules, range(len(modules)),
                                  [workspace] * len(modules)))
        files.append(_pack_imports(library, workspace))
        link = fcompile or tvm.support.cc.create_shared
        link(path, files, **({"options": options} if options else {}))
