#!/usr/bin/env python3
"""How far each path's float32 outputs lie from the same model computed in float64: the
noise floor under the bench's match (rtol 1e-3, atol 1e-4 of onnxruntime's). Writes
docs/bench/float64-reference.md.

    scripts/float64_reference.py build/models/resnet50.onnx [MODEL.onnx ...] [-o FILE]

The float64 model is the float32 one with every float tensor, cast and constant made float64,
compiled by the pure-TVM build (onnxruntime's CPU provider has no float64 convolution). Each
path runs the bench's inputs (odla_tvm.bench.models.model_inputs): onnxruntime with its graph
optimizations on and off, odla-tvm's DEFAULT device and the pure-TVM build. A ratio at most 1
means every output element lies within the bench's tolerance of the float64 result.
"""
import argparse
import os
import platform
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper
from tqdm import tqdm

import odla_tvm as odla
from odla_tvm.bench.models import model_inputs
from odla_tvm.bench.results import MATCH_ATOL, MATCH_RTOL

PATHS = ("onnxruntime", "onnxruntime, optimizations off", "DEFAULT", "INTEL_X86")


def _float64_tensor(tensor: TensorProto) -> TensorProto:
    if tensor.data_type != TensorProto.FLOAT:
        return tensor
    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float64), tensor.name)


def float64_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its float32 tensors, value types, casts and constants in float64."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    for i, tensor in enumerate(graph.initializer):
        graph.initializer[i].CopyFrom(_float64_tensor(tensor))
    for info in [*graph.input, *graph.output, *graph.value_info]:
        if info.type.tensor_type.elem_type == TensorProto.FLOAT:
            info.type.tensor_type.elem_type = TensorProto.DOUBLE
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.name == "to" and attribute.i == TensorProto.FLOAT:
                attribute.i = TensorProto.DOUBLE
            if attribute.HasField("t"):
                attribute.t.CopyFrom(_float64_tensor(attribute.t))
    return model


def _onnxruntime(path: str, feeds: dict, optimized: bool) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _odla(model, feeds: dict, device_name: str) -> list[np.ndarray]:
    device = odla.allocate_device(device_name=odla.DeviceName[device_name])
    session = odla.Session.from_onnx(model, device=device, engine_cache=False)
    return list(session.run(feeds))


def distances(outputs: list[np.ndarray], reference: list[np.ndarray]) -> tuple[float, float]:
    """(the largest |output - reference| over the bench's tolerance of the reference, the
    relative RMS error), over all outputs."""
    worst, squares, norms = 0.0, 0.0, 0.0
    for output, expected in zip(outputs, reference):
        error = np.abs(output.astype(np.float64) - expected)
        worst = max(worst, float((error / (MATCH_ATOL + MATCH_RTOL * np.abs(expected))).max()))
        squares += float((error ** 2).sum())
        norms += float((expected ** 2).sum())
    return worst, (squares / norms) ** 0.5 if norms else 0.0


def measure(path: str) -> dict[str, tuple[float, float]]:
    model = onnx.load(path)
    feeds = model_inputs(model)
    wide = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
    reference = _odla(float64_model(model), wide, "INTEL_X86")
    outputs = {
        "onnxruntime": _onnxruntime(path, feeds, optimized=True),
        "onnxruntime, optimizations off": _onnxruntime(path, feeds, optimized=False),
        "DEFAULT": _odla(path, feeds, "DEFAULT"),
        "INTEL_X86": _odla(path, feeds, "INTEL_X86"),
    }
    return {name: distances(outputs[name], reference) for name in PATHS}


def report(results: dict[str, dict]) -> str:
    lines = ["# Distance from a float64 run", "",
             f"odla-tvm {odla.__version__}, onnxruntime {ort.__version__}, {platform.machine()}; "
             f"`scripts/float64_reference.py {' '.join(results)}`.", "",
             "Per path: the largest error over the bench's tolerance (rtol "
             f"{MATCH_RTOL:g}, atol {MATCH_ATOL:g}) of the float64 result, where at most 1 is "
             "within it, and the relative RMS error.", "",
             "| model | " + " | ".join(PATHS) + " |",
             "| --- |" + " ---: |" * len(PATHS)]
    for path, by_path in results.items():
        cells = [f"{worst:.2f} ({rms:.1e})" for worst, rms in (by_path[p] for p in PATHS)]
        lines.append(f"| {os.path.basename(path)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="ONNX files of float32 models")
    parser.add_argument("-o", "--output",
                        default=os.path.join("docs", "bench", "float64-reference.md"))
    args = parser.parse_args()
    results = {path: measure(path) for path in tqdm(args.models, desc="models", unit="model")}
    text = report(results)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
