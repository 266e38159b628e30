#!/usr/bin/env python3
"""Accuracy and speed of FP16_MODE and BF16_MODE against float32 on the light models in
onnx/backend/test/data/light; writes docs/precision.md.

    scripts/precision.py [--models squeezenet,resnet50] [--runs 3] [--output docs/precision.md]
"""

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
from tqdm import tqdm

import odla_tvm as odla
from odla_tvm import Bf16Mode, ItemType
from odla_tvm.frontends.onnx import import_model
from odla_tvm.frontends.onnx_conformance import light_cases

MODES = {
    "float32": None,
    "FP16_MODE": (ItemType.FP16_MODE, True),
    "BF16 accuracy": (ItemType.BF16_MODE, Bf16Mode.ACCURACY_MODE),
    "BF16 performance": (ItemType.BF16_MODE, Bf16Mode.PERFORMACE_MODE),
}


def measure(case, item, runs):
    comp = import_model(case.model)
    if item is not None:
        odla.set_computation_item(comp, *item)
    session = odla.Session(comp)
    feeds = {arg.id: data for arg, data in zip(session.executable.args, case.inputs)}
    output = session.run(feeds)[0]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(feeds)
        times.append(time.perf_counter() - start)
    return output, statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: all 9)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "..", "docs", "precision.md"))
    args = parser.parse_args(argv)
    cases = light_cases()
    if args.models:
        wanted = {f"test_{m}" for m in args.models.split(",")}
        cases = [c for c in cases if c.name in wanted]
    rows = []
    for case in tqdm(cases, desc="light models", unit="model"):
        reference, base_time = None, None
        for mode, item in MODES.items():
            output, seconds = measure(case, item, args.runs)
            if reference is None:
                reference, base_time = output, seconds
                error = np.abs(output - case.outputs[0]).max()
            else:
                error = np.abs(output - reference).max()
            top1 = float(np.mean(output.reshape(len(output), -1).argmax(1)
                                 == reference.reshape(len(reference), -1).argmax(1)))
            rows.append((case.name[5:], mode, error, top1, seconds * 1e3, seconds / base_time))
            tqdm.write(f"{rows[-1][0]:14} {mode:17} max|diff| {error:.2e} top-1 {top1:.2f} "
                       f"{seconds * 1e3:9.1f} ms")
    lines = [
        "# Reduced precision: accuracy against float32",
        "",
        f"`scripts/precision.py`, on {platform.machine()} ({os.cpu_count()} cores), odla-tvm "
        f"{odla.__version__}; median of {args.runs} runs at batch 1 after one warm-up, untuned.",
        "FP16_MODE uses TVM's ToMixedPrecision (float16 operands, float32 accumulation for "
        "convolutions and matrix products); BF16 accuracy mode gives those ops bfloat16 operands "
        "with float32 accumulation and results, BF16 performance mode also rounds their results "
        "to bfloat16. Inputs and outputs stay float32.",
        "",
        "max |diff|: for float32, against the model's reference output; for the others, against "
        "the float32 build. top-1: share of batch rows whose arg-max class matches float32.",
        "",
        "| model | mode | max abs diff | top-1 agreement | latency ms | vs float32 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {m} | {mode} | {e:.2e} | {t:.2f} | {ms:.1f} | {ratio:.2f}x |"
              for m, mode, e, t, ms, ratio in rows]
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    sys.exit(main())
