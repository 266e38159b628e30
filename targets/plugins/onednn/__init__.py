"""The oneDNN vendor plugin: Intel's deep-learning kernels behind the ODLA device INTEL_DNNL.

It takes float32 NCHW convolutions and matmuls of any rank with up to five elementwise ops
fused in as post-ops, softmax, layer norm, LRN, pooling and concatenation along channels
(patterns.py). Each region becomes a table of steps (region.h) and a C++ function calling
runtime.cc (source_writer.py); what it does not take runs as TVM's code in the same module,
and a graph TVM runs faster whole is declined (policy.py). Under BF16_MODE, on a CPU where
oneDNN has native bf16 kernels (avx512_core_bf16, AMX: bf16_policy.py), its convolutions and
matmuls compute in bf16 (bf16_types.h). The library is oneDNN 3.2 built
with GNU OpenMP, from PyPI, part of odla-tvm's install on x86-64 Linux (library.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from toolchain import compiling_attributes

from .. import VendorPlugin
from .bf16_policy import computes
from .isa import class_key
from .items import ITEMS, check_item
from .library import check_available, link_options

if TYPE_CHECKING:  # the names below, for editors and type checkers (tests/test_rules.py)
    from .patterns import MAX_RANK, patterns, prepare
    from .policy import declines
    from .source_writer import CALLS_FUNCTION, codegen

# name -> the module defining it: they need TVM's compiler, so they are imported when first
# used (by a compile), and the plugin is known, checked and run without it.
_COMPILING = {"MAX_RANK": ".patterns", "patterns": ".patterns", "prepare": ".patterns",
              "declines": ".policy", "CALLS_FUNCTION": ".source_writer",
              "codegen": ".source_writer"}


__getattr__ = compiling_attributes(__name__, _COMPILING)


def _compiling(name: str):
    """A function calling this package's ``name`` (imported on the first call)."""
    return lambda *args: __getattr__(name)(*args)

# Where libdnnl's regions still run on libgomp (a model library without the thread pool of
# targets/cpu/thread_pool.cc: copied away from it): its OpenMP threads wait for the next region
# spinning briefly (10000 of libgomp's spins), then asleep, unless the user chose a policy:
# asleep at once, every region must wake them; libgomp's default spin takes the cores from TVM's
# pool running the ops between regions. libgomp reads this when it loads.
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
# And where TVM's own pool runs the kernels (a module run in memory, never kept), its workers
# sleep as soon as their kernel ends in a process running oneDNN's regions (PLUGIN.pool_spin):
# spinning, they take the core from the oneDNN region that comes next on it. A process running
# TVM's code alone keeps targets.runtime's spin, which its back-to-back kernels want.
ONEDNN_POOL_SPIN = 0


PLUGIN = VendorPlugin(
    name="onednn",
    device_name="INTEL_DNNL",
    description="oneDNN 3.2 (Intel's deep-learning kernels): float32 convolutions and matmuls "
                "of any rank with their elementwise ops fused (bf16 under BF16_MODE where "
                "oneDNN has native bf16 kernels), softmax, layer norm, pooling, concat along "
                "channels",
    patterns=_compiling("patterns"),
    codegen=_compiling("codegen"),
    link_options=link_options,
    check_available=check_available,
    items=ITEMS,
    check_item=check_item,
    prepare=_compiling("prepare"),
    declines=_compiling("declines"),
    pool_spin=ONEDNN_POOL_SPIN,
    computes=computes,
    code_key=class_key,  # its int8 and bf16 regions differ by class (ONEDNN_MAX_CPU_ISA)
)

__all__ = ["CALLS_FUNCTION", "ITEMS", "MAX_RANK", "ONEDNN_POOL_SPIN", "PLUGIN", "check_available",
           "check_item", "codegen", "declines", "link_options", "patterns", "prepare"]
