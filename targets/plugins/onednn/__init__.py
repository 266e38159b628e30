"""The oneDNN vendor plugin: Intel's deep-learning kernels behind the ODLA device INTEL_DNNL.

It takes float32 NCHW convolutions and matmuls of any rank with up to five elementwise ops
fused in as post-ops, softmax, layer norm, LRN, pooling and concatenation along channels
(patterns.py). Each region becomes a table of steps (region.h) and a C++ function calling
runtime.cc (source_writer.py); what it does not take runs as TVM's code in the same module,
and a graph TVM runs faster whole is declined (policy.py). The library is oneDNN 3.2 built
with GNU OpenMP, from PyPI, part of odla-tvm's install on x86-64 Linux (library.py).
"""

from __future__ import annotations

import os

from .. import VendorPlugin
from .library import check_available, link_options
from .patterns import ITEMS, MAX_RANK, check_item, patterns, prepare
from .policy import declines
from .source_writer import CALLS_FUNCTION, codegen

# oneDNN's OpenMP threads wait for the next region spinning about 0.1 ms (libgomp counts some
# 100000 spins a millisecond), then asleep, unless the user chose a policy. Asleep at once
# (OMP_WAIT_POLICY=PASSIVE), every region woke them: MobileNetV2 8.5 ms in the bench's turns,
# 3.5 ms so; ResNet-50 on 2 cores two other processes keep busy 88 ms, 63 ms so, 72 ms with
# libgomp's default 3 ms spin, which takes the cores from TVM's pool running the ops between
# regions (2-core Xeon). libgomp reads this when it loads, with the first model library that
# needs it. (Until TVM stopped importing torch, toolchain.load_tvm, oneDNN ran on torch's
# libgomp, loaded before any of this was set.)
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
# And TVM's workers sleep as soon as their kernel ends in a process running oneDNN's regions
# (PLUGIN.pool_spin): they yield-spin 300000 times by default, which on 2 cores halved the
# speed of the oneDNN region that came next on their core, for many runs in a row (DistilBERT
# 45 or 100 ms by turns; 49 ms steadily with no spin). On a 2-core AMD EPYC, DEFAULT with no
# spin against 10,000, fresh processes in turns: BERT-base 108.6 / 109.5 against 114.4 / 117.4
# ms, ResNet-50 38.6 / 37.1 against 39.2 / 39.1, DistilBERT 55.8-59.2 against 59.8-61.5. A
# process running TVM's code alone keeps targets.runtime's spin, which its back-to-back kernels
# want (GPT-2 left to TVM by DEFAULT: 53-58 ms so, 57-62 with no spin).
ONEDNN_POOL_SPIN = 0


PLUGIN = VendorPlugin(
    name="onednn",
    device_name="INTEL_DNNL",
    description="oneDNN 3.2 (Intel's deep-learning kernels): float32 convolutions and matmuls "
                "of any rank with their elementwise ops fused, softmax, layer norm, pooling, "
                "concat along channels",
    patterns=patterns,
    codegen=codegen,
    link_options=link_options,
    check_available=check_available,
    items=ITEMS,
    check_item=check_item,
    prepare=prepare,
    declines=declines,
    pool_spin=ONEDNN_POOL_SPIN,
)

__all__ = ["CALLS_FUNCTION", "ITEMS", "MAX_RANK", "ONEDNN_POOL_SPIN", "PLUGIN", "check_available",
           "check_item", "codegen", "declines", "link_options", "patterns", "prepare"]
