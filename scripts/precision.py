#!/usr/bin/env python3
"""Accuracy and speed of FP16_MODE and BF16_MODE against float32 on the light models in
onnx/backend/test/data/light, the builds of a model timed in turns; writes docs/bench/precision.md.

    scripts/precision.py [--models squeezenet,resnet50] [--runs 5] [--seconds 2]
                         [--output docs/bench/precision.md]
"""

import argparse
import copy
import os
import platform
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import odla_tvm as odla
import targets
from odla_tvm import Bf16Mode, ItemType
from odla_tvm.bench.report import geo_mean
from odla_tvm.bench.timing import latency_in_turns
from odla_tvm.device import _cpu_model
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


def session_of(model, case, item):
    """The model compiled with the mode's item set, and its feeds."""
    comp = import_model(model)
    if item is not None:
        odla.set_computation_item(comp, *item)
    session = odla.Session(comp)
    return session, {arg.id: data for arg, data in zip(session.executable.args, case.inputs)}


def output_of(model, case, item):
    session, feeds = session_of(model, case, item)
    return session.run(feeds)[0]


def path_taken(host) -> dict[str, str]:
    """Per mode, what this CPU computes it with (targets.lacking_instructions decides)."""
    paths = {"float32": "float32"}
    for mode, kind, dtype in (("FP16_MODE", "fp16", "float16"),
                              ("BF16 accuracy", "bf16", "bfloat16"),
                              ("BF16 performance", "bf16", "bfloat16")):
        lacking = targets.lacking_instructions(host, kind)
        paths[mode] = (f"float32, weights rounded to {dtype} (no {' or '.join(lacking)})"
                       if lacking else f"{dtype} operands")
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: all 9)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per mode, at least")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="timed seconds per mode, at least")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "..", "docs",
                                                         "bench", "precision.md"))
    args = parser.parse_args(argv)
    cases = light_cases()
    if args.models:
        wanted = {f"test_{m}" for m in args.models.split(",")}
        cases = [c for c in cases if c.name in wanted]
    rows = []
    started_load = os.getloadavg()[0]
    for case in tqdm(cases, desc="light models", unit="model"):
        randomized = with_random_weights(case.model)
        sessions = {mode: session_of(randomized, case, item) for mode, item in MODES.items()}
        outputs = {mode: session.run(feeds)[0] for mode, (session, feeds) in sessions.items()}
        # The modes take turns, so that the shared machine's busy spells reach each alike.
        latency = latency_in_turns({mode: lambda s=session, f=feeds: s.run(f)
                                    for mode, (session, feeds) in sessions.items()},
                                   runs=args.runs, seconds=args.seconds)
        del sessions
        reference = outputs["float32"]
        own_reference = output_of(case.model, case, None)
        for mode, item in MODES.items():
            output, seconds = outputs[mode], latency[mode][0]
            own_output = own_reference if item is None else output_of(case.model, case, item)
            error = np.abs(output - reference).max()
            top1 = float(np.mean(output.reshape(len(output), -1).argmax(1)
                                 == reference.reshape(len(reference), -1).argmax(1)))
            own_error = np.abs(own_output - own_reference).max()
            rows.append((case.name[5:], mode, error, top1, seconds * 1e3,
                         seconds / latency["float32"][0], own_error))
            tqdm.write(f"{rows[-1][0]:14} {mode:17} max|diff| {error:.2e} top-1 {top1:.2f} "
                       f"{seconds * 1e3:9.1f} ms ({rows[-1][5]:.2f}x); own weights: max|diff| "
                       f"{own_error:.2e}")
    paths = path_taken(targets.host_cpu())
    ratios = {mode: [r[5] for r in rows if r[1] == mode] for mode in MODES if mode != "float32"}
    lines = [
        "# Reduced precision: accuracy and speed against float32",
        "",
        f"`scripts/precision.py`, on {platform.machine()} ({os.cpu_count()} cores, "
        f"{_cpu_model()}), odla-tvm {odla.__version__}; batch 1, untuned, on the DEFAULT "
        "device. Latency: the median of each build's runs, the four builds of a model timed in "
        f"turns in one process (at least {args.runs} runs and {args.seconds:g} s each; load "
        f"average {started_load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: "
        "the machine was shared, so the figures are indicative).",
        "",
        "What each mode computes: on a CPU with bfloat16 instructions (avx512_bf16 or "
        "amx_bf16) BF16_MODE gives convolutions and matrix products bfloat16 operands with "
        "float32 accumulation (accuracy mode: float32 results; performance mode also rounds "
        "their results to bfloat16); on one with float16 instructions (avx512_fp16 or "
        "amx_fp16) FP16_MODE gives them float16 operands (TVM's ToMixedPrecision, float32 "
        "accumulation). On a CPU without them, where LLVM would emulate 16-bit arithmetic in "
        "scalar code (1.1-5.9x slower than float32 when measured so), the mode computes those "
        "ops in float32 with their weights rounded once, at compile time, to bfloat16 or "
        "float16 values, and says so in one log line: the rounding that costs no run time "
        "(activations and results are not rounded, so both BF16 modes compute alike). "
        "Inputs and outputs stay float32. On this machine:",
        "",
        *[f"- {mode}: {path}" for mode, path in paths.items() if mode != "float32"],
        "",
        "Latency over float32, geo-mean (range) over the models: " + "; ".join(
            f"{mode} {geo_mean(r):.2f}x ({min(r):.2f}-{max(r):.2f}x)"
            for mode, r in ratios.items()) + "." + (
            " A mode computed in float32 compiles the kernels of float32 (only its weights' "
            "values differ), so its figures differ from float32's by the machine's noise alone."
            if any(path.startswith("float32,") for path in paths.values()) else ""),
        "",
        "The light models' own weights are ConstantOfShape fills (one value in every cell), so "
        "their outputs do not depend on the input and every precision gives the same numbers; "
        "the study runs their architectures with seeded random weights instead "
        "(`with_random_weights`). max |diff|: largest difference of the output probabilities "
        "from the float32 build; top-1: share of batch rows whose arg-max class matches it.",
        "",
        "The last column runs each model with its own constant weights: there activations grow "
        "past float16's largest value (65504), and a nan there means FP16_MODE's float16 "
        "operands overflowed (with float16 instructions; weights rounded to float16 in "
        "float32 arithmetic do not), where bfloat16, with float32's exponent range, does not.",
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
