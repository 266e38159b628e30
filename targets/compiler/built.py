"""A module just compiled, in memory (a Relax VMExecutable): running it before it is ever
written to a file (TVM's in-process build, its vendor parts linked alone), and exporting it
as a shared library. Once it runs from a library file it is a plain CompiledModule."""

from __future__ import annotations

import os
import tempfile
import threading

import tvm
import tvm_ffi
from tvm import relax

from .. import plugins as vendor_plugins
from ..cpu import thread_pool
from ..runtime import CompiledModule, initialized_vm
from ..shared_library import export_library, linker


class BuiltModule(CompiledModule):
    """A CompiledModule whose library is the VMExecutable a compile made, until
    run_from_library replaces it with a library file."""

    def _in_memory(self) -> bool:
        return isinstance(self.library, relax.VMExecutable)

    def _new_vm(self) -> tvm_ffi.Module:
        if not self._in_memory():
            return super()._new_vm()
        if self.vendor_regions:
            self.runtime_library = self._vendor_library()
            return _vm_calling(self.library, self._device, self.runtime_library,
                               self.vendor_regions)
        self.runtime_library = self.library
        return initialized_vm(self.library.jit(addons=thread_pool.link_options(self.spec)),
                              self._device)

    def _vendor_library(self) -> tvm.runtime.Module:
        """The external functions main calls (vendor plugins' regions, custom ops' C code:
        the static libraries among the module's imports), linked alone into a shared library
        with what the plugins need, and loaded. TVM's in-process build cannot run them, and
        linking the whole module instead put a second copy of the weights into the process
        (the library's own, loaded from its file)."""
        self._vendor_dir = tempfile.TemporaryDirectory(prefix="odla-tvm-")
        objects = []
        for index, part in enumerate(self.library.mod.imports):
            if part.kind == "static_library":
                objects.append(os.path.join(self._vendor_dir.name, f"part{index}.o"))
                part.write_to_file(objects[-1])
        path = os.path.join(self._vendor_dir.name, "vendor.so")
        tvm.support.cc.create_shared(
            path, objects, options=thread_pool.link_options(self.spec) + self._link_options())
        return tvm.runtime.load_module(path)

    def export(self, path: str) -> None:
        """Writes the module as a shared library for its target (what export_library writes),
        linked with what its vendor plugins need; a module running from a library file writes
        a copy of that file."""
        if not self._in_memory():
            super().export(path)
            return
        export_library(self.library.mod, path, linker(self.spec),
                       thread_pool.link_options(self.spec) + self._link_options())

    def _link_options(self) -> list[str]:
        # A module without plugin regions needs none of their libraries: linked, every load
        # of it would load them too (oneDNN's takes milliseconds).
        if not self.vendor_regions:
            return []
        return [o for name in self.spec.plugins
                for o in vendor_plugins.get_plugin(name).link_options()]


# The global functions _vm_calling lends the VM while it loads: one VM at a time.
_lending_lock = threading.Lock()


def _vm_calling(executable, device, library: tvm.runtime.Module,
                names: list[str]) -> tvm_ffi.Module:
    """A VM of the in-memory ``executable`` that calls functions ``names`` of ``library``.
    The VM finds each external function once, when it loads, in the executable's imports
    (where TVM's in-process build has none that run) and then among the global functions; so
    they are global functions just while it loads, and what they shadowed is put back."""
    with _lending_lock:
        shadowed = {name: tvm_ffi.get_global_func(name, allow_missing=True) for name in names}
        try:
            for name in names:
                tvm_ffi.register_global_func(name, library.get_function(name), override=True)
            return initialized_vm(executable.mod, device)  # .mod: not TVM's own jit (a link)
        finally:
            for name, previous in shadowed.items():
                tvm_ffi.remove_global_func(name)
                if previous is not None:
                    tvm_ffi.register_global_func(name, previous, override=True)
