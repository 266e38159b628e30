#!/usr/bin/env python3
"""The GPU check's folder, made here (no GPU needed): each model of scripts/gpu/models.py
compiled for the cuda target at batch 1 and 16 (odla-tvm bundles, every kernel checked to be
scheduled), its inputs and onnxruntime's CPU outputs, its PyTorch graph, and one odla_runner
with the TVM runtime libraries (and the CUDA runtime) that all the bundles share.

    python scripts/gpu/prepare.py MODELS_DIR CHECK_DIR

MODELS_DIR is scripts/gpu/models.py's output. CHECK_DIR/check.json lists what
scripts/gpu/check.py runs on the GPU machine.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime
import tvm

import odla_tvm as odla
import targets
from odla_tvm.frontends.onnx import import_model
from targets.cuda.kernels import default_gpu_kernels, unscheduled_kernels

SPEC = targets.get_target("cuda")
# Where nvcc's toolkit keeps the CUDA runtime libtvm_runtime_cuda.so links (carried, so that
# the GPU machine needs only its driver).
CUDART = "libcudart.so.13"
CUDART_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compile_bundle(onnx_path: Path, bundle: Path) -> dict:
    """``onnx_path`` exported for cuda to ``bundle``; what the build did (kernels, seconds)."""
    start = time.perf_counter()
    comp = import_model(str(onnx_path))
    kernels = default_gpu_kernels(comp.build_module(), SPEC)
    unscheduled = unscheduled_kernels(kernels)
    if unscheduled:
        raise SystemExit(f"{onnx_path}: kernels left unscheduled for cuda: {unscheduled}")
    odla.export(comp, SPEC.name, bundle)
    odla.destroy_computation(comp)
    count = sum(isinstance(f, tvm.tirx.PrimFunc) for _, f in kernels.functions_items())
    return {"kernels": count, "compile_s": round(time.perf_counter() - start, 1)}


def share_weights(bundle: Path, other: Path) -> int:
    """Makes ``bundle``'s weights that are byte for byte one of ``other``'s hard links to that
    one (a bundle names only files inside it, and its manifest stays as written); the bytes
    saved."""
    others = {_sha256(p): p for p in (other / "weights").glob("*.npy")}
    saved = 0
    for weight in sorted((bundle / "weights").glob("*.npy")):
        same = others.get(_sha256(weight))
        if same is not None:
            saved += weight.stat().st_size
            weight.unlink()
            os.link(same, weight)
    return saved


def reference_outputs(onnx_path: Path, inputs: Path, expected: Path, order: list) -> None:
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    feeds = {name: np.load(inputs / f"{name}.npy") for name in order}
    expected.mkdir(exist_ok=True)
    for output, value in zip(session.get_outputs(), session.run(None, feeds)):
        np.save(expected / f"{output.name}.npy", value)


def runtime(check: Path) -> None:
    """bin/odla_runner and lib/ (the runner finds the libraries in ../lib), and src/ and
    include/ to build the runner again."""
    (check / "lib").mkdir(exist_ok=True)
    (check / "bin").mkdir(exist_ok=True)
    for name, source in targets.runtime_libraries(SPEC).items():
        shutil.copyfile(source, check / "lib" / name)
    found = [Path(d) / CUDART for d in CUDART_DIRS if (Path(d) / CUDART).is_file()]
    if found:
        shutil.copyfile(found[0], check / "lib" / CUDART)
    targets.build_runner(SPEC, check / "bin" / "odla_runner", check / "lib")
    # Its sources and headers, for a GPU machine whose C library is older than this one's:
    # src/ holds the .cc files to build, include/ every header they include.
    (check / "src").mkdir(exist_ok=True)
    for source in targets.runner.runner_sources():
        shutil.copyfile(source, check / "src" / source.name)
    for include in [*targets.runner.runner_headers(), *targets.runner.include_dirs()]:
        shutil.copytree(include, check / "include", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.cc"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=Path)
    parser.add_argument("check", type=Path)
    args = parser.parse_args(argv)
    if args.check.exists():
        shutil.rmtree(args.check)
    args.check.mkdir(parents=True)
    entries = []
    for source in sorted(p.parent for p in args.models.glob("*/model.json")):
        info = json.loads((source / "model.json").read_text())
        target = args.check / "models" / info["name"]
        shutil.copytree(source / "torch", target / "torch")
        builds = {}
        for onnx_path in sorted(source.glob("model-b*.onnx"), key=lambda p: len(p.name)):
            batch = onnx_path.stem.split("-b")[-1]
            shutil.copytree(source / f"inputs-b{batch}", target / f"inputs-b{batch}")
            builds[batch] = compile_bundle(onnx_path, target / f"bundle-b{batch}")
            reference_outputs(onnx_path, target / f"inputs-b{batch}",
                              target / f"expected-b{batch}", info["inputs_order"])
            if batch != "1":
                builds[batch]["shared_bytes"] = share_weights(target / f"bundle-b{batch}",
                                                              target / "bundle-b1")
            print(f"{info['name']} batch {batch}: {builds[batch]}", flush=True)
        entries.append({**info, "builds": builds})
    runtime(args.check)
    (args.check / "check.json").write_text(json.dumps({
        "target": SPEC.target, "tvm": targets.tvm_version(), "odla_tvm": odla.__version__,
        "models": entries}, indent=1) + "\n")
    size = sum(f.stat().st_size for f in args.check.rglob("*") if f.is_file())
    print(f"{args.check}: {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
