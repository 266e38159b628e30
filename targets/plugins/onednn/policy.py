"""When the oneDNN plugin declines a graph, leaving it whole to TVM's own build."""

from __future__ import annotations

import tvm

from ...cpu.conv_rewrites import integer_share, matmul_share, winograd_share
from .. import PRECISION_ATTR
from .bf16_policy import takes
from .int8_patterns import MOST_TAKEN, taken_share
from .isa import onednn_isa

# TVM's build computes 3x3 stride-1 convolutions by Winograd (targets.cpu.conv_rewrites), with
# fewer multiplications than oneDNN's direct ones: a graph with this share of its multiply-adds
# in them runs faster on TVM whole (docs/onednn.md has the measurements).
WINOGRAD_SHARE_FOR_TVM = 0.35


# TVM's own build, its matmuls fused with the elementwise ops around them, runs a graph of
# matmuls (a transformer) faster than oneDNN's matmuls with TVM's code between its regions.
MATMUL_SHARE_FOR_TVM = 0.95

# A graph whose products accumulate integers (an int8 model) keeps them in TVM where
# oneDNN's int8 primitives do not take most of them here (int8_patterns.py): oneDNN regions
# between them (its pools and concatenations) would only add region boundaries. Where they
# do, neither rule below applies (they are float32 facts): oneDNN's int8 products, their
# scales, bias and quantize fused in, run an int8 CNN or transformer faster than TVM whole.
INTEGER_SHARE_FOR_TVM = 0.5


def declines(mod: tvm.IRModule) -> str | None:
    share = integer_share(mod["main"])
    if share >= INTEGER_SHARE_FOR_TVM:
        taken, why = taken_share(mod["main"], onednn_isa())
        if taken < MOST_TAKEN:
            return (f"{share:.0%} of its multiply-adds are in integer products, of which "
                    f"oneDNN's int8 primitives here take {taken:.0%} ({why}; the lines are "
                    f"{INTEGER_SHARE_FOR_TVM:.0%} and {MOST_TAKEN:.0%})")
        return None
    if PRECISION_ATTR in mod.attrs and takes(str(mod.attrs[PRECISION_ATTR])):
        return None  # the lines below are float32's: TVM's share of a bf16 graph is float32
    share = winograd_share(mod["main"])
    if share >= WINOGRAD_SHARE_FOR_TVM:
        return (f"{share:.0%} of its multiply-adds are in 3x3 convolutions that TVM computes by "
                f"Winograd (oneDNN computes them directly; the line is "
                f"{WINOGRAD_SHARE_FOR_TVM:.0%})")
    share = matmul_share(mod["main"])
    if share >= MATMUL_SHARE_FOR_TVM:
        return (f"{share:.0%} of its multiply-adds are in matmuls, which TVM's build runs "
                f"faster with the ops between them (the line is {MATMUL_SHARE_FOR_TVM:.0%})")
    return None
