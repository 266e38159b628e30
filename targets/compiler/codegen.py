"""A lowered module's machine code, built on every core: TVM's relax.build builds all of a
module's kernels as one LLVM module on one thread; here they are built in a few groups (not
one per kernel: a library run in memory is compiled again by LLVM's JIT, one instance per
library), in a pool of threads, beside the VM's own code generation.

CPU kernels compile through TVM's default TIR pipeline with two passes more: their guarded
vector loops run whole vectors unguarded (targets.cpu.vector_tails), and their register tiles stay
on the stack, which LLVM turns into registers, where TVM's lowering takes a local buffer of
1 KB or more from its workspace pool for every tile.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.s_tir.pipeline import default_s_tir_pipeline
from tvm.tirx.compilation_pipeline import register_tir_pipeline

from ..specs import cpu_count
from ..cpu.vector_tails import whole_vectors

_vm_codegen = tvm.get_global_func("relax.VMCodeGen")
_vm_link = tvm.get_global_func("relax.VMLink")



# Local buffers up to this size are stack memory (TVM's own line is 1 KB; a pool thread's stack
# is the process's default, 8 MB on Linux).
_STACK_LOCAL_MAX_BYTES = 16 << 10


def _on_stack(alloc: tirx.AllocBuffer) -> tirx.AllocBuffer:
    buffer = alloc.buffer
    if buffer.scope() != "local" or not all(isinstance(d, tirx.IntImm) for d in buffer.shape):
        return alloc
    dtype = tvm.DataType(str(buffer.dtype))
    nbytes = int(np.prod([int(d) for d in buffer.shape])) * dtype.bits * dtype.lanes // 8
    if nbytes > _STACK_LOCAL_MAX_BYTES:
        return alloc
    # TVM's LowerTVMBuiltin leaves an allocation so annotated as it is: an LLVM alloca.
    return tirx.AllocBuffer(buffer, {**alloc.annotations,
                                     "disable_lower_builtin": tirx.IntImm("int32", 1)})


@tvm.tirx.transform.prim_func_pass(opt_level=0, name="StackLocals")
def _stack_locals(func: tirx.PrimFunc, _mod, _ctx) -> tirx.PrimFunc:
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.AllocBuffer, _on_stack),
                                                 order="post"))


def _cpu_pipeline():
    """TVM's default TIR pipeline after whole_vectors, the host's finalizing passes after
    _stack_locals."""
    pipeline, host_passes, device_passes = default_s_tir_pipeline()
    return tvm.transform.Sequential([whole_vectors, pipeline]), \
        lambda: tvm.transform.Sequential([_stack_locals, host_passes()]), device_passes


_PIPELINE = "odla-tvm-cpu"
register_tir_pipeline(_PIPELINE, _cpu_pipeline)
# How kernels are compiled here, which a kernel's measured time depends on as much as on its
# schedule (targets.tuning keeps it with the default schedules' times).
KERNEL_CODEGEN = (f"{_PIPELINE}: guarded vector loops as whole vectors, local buffers of up to "
                  f"{_STACK_LOCAL_MAX_BYTES} bytes on the stack")


def build_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.runtime.Module:
    """``mod``'s kernels (TIR) compiled for ``target`` as every build here compiles them (on
    CPUs, through _cpu_pipeline)."""
    return tvm.tirx.build(mod, target=target,
                          pipeline=_PIPELINE if target.kind.name == "llvm" else "default")


# Groups per core: enough that a few slow kernels (Winograd's) do not leave a core idle.
_GROUPS_PER_CORE = 4


def _kernel_library(kernels: dict, attrs, target: tvm.target.Target,
                    context: tvm.transform.PassContext):
    # A thread starts outside every pass context: the caller's options, not its instruments
    # (they watch the graph passes, and would be called from every thread for every TIR pass).
    with tvm.transform.PassContext(opt_level=context.opt_level, config=dict(context.config),
                                   required_pass=list(context.required_pass),
                                   disabled_pass=list(context.disabled_pass)), target:
        return build_kernels(tvm.IRModule(kernels, attrs=attrs), target)


def build(mod: tvm.IRModule, target: tvm.target.Target) -> relax.VMExecutable:
    """What ``tvm.compile(mod, target, relax_pipeline=None)`` makes of a module already lowered
    for the VM (relax.build's code generation and linking), its kernels built in groups (every
    few-th kernel together), on every core; the first group's library imports the others',
    where the VM finds them by name. A device target's kernels are built together, as TVM
    does: their compiler (NVRTC, nvcc) is called once per library."""
    if target.kind.name != "llvm":
        return tvm.compile(mod, target=target, relax_pipeline=None)
    context = tvm.transform.PassContext.current()
    kernels = [(gv, f) for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    count = min(len(kernels), _GROUPS_PER_CORE * cpu_count())
    with ThreadPoolExecutor(cpu_count()) as pool:
        futures = [pool.submit(_kernel_library, dict(kernels[n::count]), mod.attrs, target,
                               context) for n in range(count)]
        builder = relax.ExecBuilder()
        _vm_codegen(builder, mod)
        libraries = [future.result() for future in futures]
    for library in libraries[1:]:
        libraries[0].import_module(library)
    # As relax.build links: the vendor plugins' modules beside (a CPU target has no device
    # modules), and no kernels at all makes VMLink an empty C module.
    attrs = mod.attrs or {}
    return relax.VMExecutable(_vm_link(
        builder, target, libraries[0] if libraries else None,
        list(attrs.get("external_mods", [])), dict(attrs.get("const_name_to_constant", {}))))


def failing_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> list[str]:
    """The names of ``mod``'s kernels that fail to build alone (what ``build`` raised for),
    each built in turn: called only after a build failed."""
    context = tvm.transform.PassContext.current()
    failing = []
    for gv, func in mod.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            try:
                _kernel_library({gv: func}, mod.attrs, target, context)
            except Exception:  # pylint: disable=broad-except  # its own error: named below
                failing.append(gv.name_hint)
    return failing
