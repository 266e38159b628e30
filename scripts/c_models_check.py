#!/usr/bin/env python3
"""Every model of the bench stored from Python runs from C: each model compiled for the default
device (Session.from_onnx, no engine cache), stored as a .odla file, run by
examples/c/run_executable.c (libodla_tvm.so: no Python in that process) on the bench's inputs,
its outputs compared with the Python run's. Too slow for the suite (a compile per model).

    python scripts/c_models_check.py [--models NAME ...] [--work DIR]

NAME: an onnx light model (odla_tvm.bench.models.LIGHT_MODELS) or an ONNX file (by default
every file of MODELS_DIR: /work/models, or $ODLA_TVM_MODELS_DIR). Prints one line per model and exits 1 where
any model fails to load, run or match.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import libodla
import odla_tvm as odla
from odla_tvm.bench.models import LIGHT_MODELS, light_model_path, model_inputs, read_model

ROOT = Path(__file__).resolve().parents[1]
MODELS_DIR = Path(os.environ.get("ODLA_TVM_MODELS_DIR", "/work/models"))


def model_path(name: str) -> str:
    return light_model_path(name) if name in LIGHT_MODELS else name


def build_runner(work: Path) -> Path:
    libodla.build()
    program = work / "run_executable"
    command = ["gcc", "-std=c99", "-O2", *libodla.cflags(), "-o", str(program),
               str(ROOT / "examples" / "c" / "run_executable.c"), *libodla.libs(), "-pthread"]
    subprocess.run(command, check=True)
    return program


def check(name: str, program: Path, work: Path) -> tuple[bool, str]:
    """Whether ``name`` stored from Python runs from C with Python's outputs; what happened."""
    start = time.perf_counter()
    path = model_path(name)
    feeds = model_inputs(read_model(path))
    session = odla.Session.from_onnx(path, engine_cache=False)
    exe = session.executable
    expected = session.run(feeds)
    name = Path(name).stem if name.endswith(".onnx") else name
    stored = work / f"{name}.odla"
    exe.store(stored)
    compile_s = time.perf_counter() - start
    out = work / f"{name}-out"
    out.mkdir(exist_ok=True)
    inputs = []
    for arg in exe.args:
        inputs.append(work / f"{name}-{len(inputs)}.bin")
        np.ascontiguousarray(feeds[arg.id], arg.type.dtype).tofile(inputs[-1])
    done = subprocess.run([str(program), str(stored), str(out), *map(str, inputs)],
                          capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        return False, f"run_executable exited {done.returncode}: {done.stderr.strip()[-500:]}"
    worst, same = 0.0, True
    for value, want in zip(exe.outputs, expected):
        got = np.fromfile(out / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', value.id)}.bin",
                          want.dtype).reshape(want.shape)
        same = same and np.array_equal(got, want)
        if want.size and want.dtype.kind == "f":
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want))))
    return same, (f"{len(exe.outputs)} outputs {'identical' if same else 'differ'} "
                  f"(max |diff| {worst:.3g}); compiled and stored in {compile_s:.0f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [*LIGHT_MODELS, *sorted(map(str, MODELS_DIR.glob("*.onnx")))]
    parser.add_argument("--models", nargs="+", default=names)
    parser.add_argument("--work", type=Path, default=Path("c-models-check"))
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    program = build_runner(args.work)
    failed = 0
    for name in args.models:
        try:
            ok, text = check(name, program, args.work)
        except odla.OdlaError as err:
            ok, text = False, f"Python: {err}"
        failed += not ok
        print(f"{name}: {'ok' if ok else 'FAILED'}: {text}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
