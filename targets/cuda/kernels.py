"""Whether each kernel of a GPU build is scheduled: bound to GPU blocks and threads. An unbound
kernel is what TVM's CUDA build refuses (VerifyMemory: the host touching device memory), so
this names the kernels at fault before the build fails on the first of them. (Not imported by
targets.cuda: it needs targets.runtime, which imports targets.cuda's rules.)"""

from __future__ import annotations

import tvm
import tvm_ffi

from ..specs import TargetSpec
from ..compiler import default_scheduled, fused_kernels


def thread_bound(func: tvm.tirx.PrimFunc) -> bool:
    """Whether ``func`` binds a loop to a GPU block or thread (blockIdx.*, threadIdx.*)."""
    tags = []
    tvm_ffi.structural_walk(func.body, (tvm.tirx.For, lambda loop: tags.append(
        loop.thread_binding.thread_tag) if loop.kind == tvm.tirx.ForKind.THREAD_BINDING
        else None), order="post")
    return any(tag.startswith(("blockIdx", "threadIdx")) for tag in tags)


def unscheduled_kernels(mod: tvm.IRModule) -> list[str]:
    """The names of ``mod``'s device kernels that bind no GPU thread (host functions, such as
    shape computations, run on the CPU and are left out)."""
    return sorted(gv.name_hint for gv, func in mod.functions_items()
                  if isinstance(func, tvm.tirx.PrimFunc)
                  and not func.attrs.get("tirx.is_host_func", False) and not thread_bound(func))


def default_gpu_kernels(mod: tvm.IRModule, spec: TargetSpec) -> tvm.IRModule:
    """``mod``'s fused kernels under ``spec`` (a GPU target) with its default schedules, as a
    build with no tuning records schedules them."""
    with spec.tvm_target(), tvm.transform.PassContext(opt_level=3):
        return default_scheduled(fused_kernels(mod, spec), spec)
