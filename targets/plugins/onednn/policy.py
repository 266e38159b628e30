"""When the oneDNN plugin declines a graph, leaving it whole to TVM's own build."""

from __future__ import annotations

import tvm

from ...cpu.conv_rewrites import matmul_share, winograd_share

# oneDNN computes convolutions directly; TVM's own build computes 3x3 stride-1 ones by Winograd
# (targets.conv_rewrites), with 2.25-4 times fewer multiplications. Handing oneDNN all but those
# cuts the graph into regions with layout reorders at every cut (ResNet-50 38.6 -> 47.3 ms), so a
# graph with enough of its multiply-adds in them goes to TVM whole. 2-core AMD EPYC, DEFAULT with
# oneDNN against TVM whole (share in Winograd's convolutions), alternated in one process:
# ResNet-34 and ResNet-18 of scripts/export_models.py 31.2 / 22.5 ms (0.92) and 16.7 / 14.5
# (0.83); onnx's light VGG-19 186.9 / 114.6 (0.75) and Inception v2 19.6 / 18.8 (0.65). In fresh
# processes in turns, where TVM alone polls for its next kernel (VendorPlugin.pool_spin):
# ResNet-50 38.7 / 37.0 / 37.5 against 36.3 / 35.7 / 35.1 (0.37); light ZFNet-512 23.8 / 25.0
# against 16.7 / 20.3 (0.57), Inception v1 13.6 / 14.0 against 16.6 / 13.4 (0.58), SqueezeNet
# 3.6 / 5.4 against 3.8 / 3.9 (0.38), DenseNet-121 38.3 / 37.7 against 39.8 / 39.1 (0.43); light
# AlexNet (0.19), 14.5 / 14.3 against 10.3 / 12.4, stays below the line all the same.
WINOGRAD_SHARE_FOR_TVM = 0.35


# TVM's own build, its matmuls fused with the elementwise ops around them, ran transformers
# faster than oneDNN's matmuls with TVM's code between its regions. On a 2-core AMD EPYC, DEFAULT
# leaving them to TVM against INTEL_DNNL (oneDNN), fresh processes in turns: GPT-2 53.1 / 54.1
# / 53.4 against 59.7 / 65.6 / 57.2 ms, BERT-base 116.4 / 108.4 / 107.2 against 119.4 / 109.4 /
# 110.1 (share in matmuls 1.00; DistilBERT 1.00, ViT-B/16 0.99); and docs/perf.md's bench of a
# 2-core Xeon with AMX, before this rule, had BERT-base on TVM alone at 70.9 ms, on DEFAULT at
# 91.1. ConvNeXt-T (0.93) keeps oneDNN: 49.4 ms against TVM's 55.2 (odla-tvm bench, AMD EPYC).
MATMUL_SHARE_FOR_TVM = 0.95


def declines(mod: tvm.IRModule) -> str | None:
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
