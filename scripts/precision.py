#!/usr/bin/env python3
"""Accuracy and speed of FP16_MODE and BF16_MODE against float32 on the light models in
onnx/backend/test/data/light; writes docs/precision.md.

    scripts/precision.py [--models squeezenet,resnet50] [--runs 3] [--output docs/precision.md]
"""

import argparse
import copy
import os
import platform
import statistics
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import odla_tvm as odla
from odla_tvm import Bf16Mode, ItemType
from odla_tvm.frontends.onnx import import_model
from tools.onnx_conformance import light_cases

MODES = {
    "float32": None,
    "FP16_MODE": (ItemType.FP16_MODE, True),
    "BF16 accuracy": (ItemType.BF16_MODE, Bf16Mode.ACCURACY_MODE),
    "BF16 performance": (ItemType.BF16_MODE, Bf16Mode.PERFORMACE_MODE),
}


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The light models build every weight with ConstantOfShape (one value, e.g. 0.02, in
    every cell), which makes their outputs the same for every input; this replaces each
    with seeded random values (He-scaled for kernels, 0.5..1.5 for per-channel parameters)
    so that reduced precision has something to get wrong."""
    model = copy.deepcopy(model)
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    kept = []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            if len(shape) >= 2:
                data = rng.standard_normal(shape) * np.sqrt(2.0 / np.prod(shape[1:]))
            else:
                data = rng.uniform(0.5, 1.5, shape)
            model.graph.initializer.append(
                numpy_helper.from_array(data.astype(np.float32), node.output[0]))
            if model.ir_version < 4:  # initializers had to be graph inputs then
                model.graph.input.append(onnx.helper.make_tensor_value_info(
                    node.output[0], onnx.TensorProto.FLOAT, shape))
        else:
            kept.append(node)
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def measure(model, case, item, runs):
    comp = import_model(model)
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
    return output, statistics.median(times) if times else None


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
        randomized = with_random_weights(case.model)
        reference, base_time, own_reference = None, None, None
        for mode, item in MODES.items():
            output, seconds = measure(randomized, case, item, args.runs)
            own_output, _ = measure(case.model, case, item, 0)
            if reference is None:
                reference, base_time, own_reference = output, seconds, own_output
            error = np.abs(output - reference).max()
            top1 = float(np.mean(output.reshape(len(output), -1).argmax(1)
                                 == reference.reshape(len(reference), -1).argmax(1)))
            own_error = np.abs(own_output - own_reference).max()
            rows.append((case.name[5:], mode, error, top1, seconds * 1e3, seconds / base_time,
                         own_error))
            tqdm.write(f"{rows[-1][0]:14} {mode:17} max|diff| {error:.2e} top-1 {top1:.2f} "
                       f"{seconds * 1e3:9.1f} ms; own weights: max|diff| {own_error:.2e}")
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
        "The light models' own weights are ConstantOfShape fills (one value in every cell), so "
        "their outputs do not depend on the input and every precision gives the same numbers; "
        "the study runs their architectures with seeded random weights instead "
        "(`with_random_weights`). max |diff|: largest difference of the output probabilities "
        "from the float32 build; top-1: share of batch rows whose arg-max class matches it.",
        "",
        "The last column runs each model with its own constant weights: there activations grow "
        "past float16's largest value (65504), and a nan there means FP16_MODE overflowed where "
        "bfloat16, with float32's exponent range, did not.",
        "",
        "| model | mode | max abs diff | top-1 agreement | latency ms | vs float32 | own weights: max abs diff |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {m} | {mode} | {e:.2e} | {t:.2f} | {ms:.1f} | {ratio:.2f}x | {own:.2e} |"
              for m, mode, e, t, ms, ratio, own in rows]
    with open(args.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    sys.exit(main())
