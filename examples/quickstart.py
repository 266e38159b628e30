"""Builds a small CNN through the ODLA API and runs it on this machine's CPU.

It compiles the CNN for the DEFAULT device and for TVM's own code alone (INTEL_X86), runs it
on random images and prints the class probabilities and each device's latency.

    python examples/quickstart.py [--batch 1] [--runs 50]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import numpy as np

import odla_tvm as odla
from odla_tvm import ElementType, MemoryLayout, ValueType


def build_small_cnn(batch: int = 1, seed: int = 0) -> odla.Computation:
    """conv-bn-relu-maxpool twice, global average pool, gemm, softmax: a 10-class classifier
    of 3x32x32 images with random weights."""
    rng = np.random.default_rng(seed)

    def const(shape, scale=1.0, shift=0.0):
        data = (rng.standard_normal(shape) * scale + shift).astype(np.float32)
        return odla.create_constant(ValueType(ElementType.FLOAT32, shape), data)

    comp = odla.create_computation()
    x = odla.create_argument(ValueType(ElementType.FLOAT32, (batch, 3, 32, 32)), "image")
    channels = 3
    for width in (16, 32):
        x = odla.conv(x, MemoryLayout.CHANNELS_FIRST, 1, const((width, channels, 3, 3), 0.2),
                      MemoryLayout.OIS, (1, 1), (1, 1), (1, 1), (1, 1), const((width,), 0.1))
        x = odla.batch_normalization(x, MemoryLayout.CHANNELS_FIRST, const((width,), 0.1),
                                     odla.abs(const((width,), 0.2, 1.0)), 1e-5,
                                     const((width,), 0.1, 1.0), const((width,), 0.1))
        x = odla.relu(x)
        x = odla.max_pool(x, MemoryLayout.CHANNELS_FIRST, (2, 2), (2, 2), (0, 0), (0, 0))
        channels = width
    x = odla.average_pool(x, MemoryLayout.CHANNELS_FIRST, (8, 8), (1, 1), (0, 0), (0, 0), False)
    x = odla.reshape(x, (batch, channels))
    logits = odla.gemm(x, False, const((channels, 10), 0.05), False, 1.0, 1.0, const((10,), 0.1))
    odla.set_value_as_output(odla.softmax(logits, -1, "probabilities"))
    return comp


def _run_timed(comp, device, images, runs: int):
    """Compiles ``comp`` for ``device``, runs it ``runs`` times after a warm-up; returns the
    probabilities and the run times (seconds)."""
    arg = odla.get_arg_from_computation_by_idx(comp, 0)
    out = odla.get_output_from_computation_by_idx(comp, 0)
    start = time.perf_counter()
    executable = odla.compile_computation(comp, device)
    print(f"compiled for {device.name.name} ({device.target.name}) in "
          f"{time.perf_counter() - start:.2f} s")
    probabilities = np.zeros(out.type.shape.dims, np.float32)
    context = odla.create_context()
    odla.bind_to_argument(arg, images, context)
    odla.bind_to_output(out, probabilities, context)
    odla.launch_executable(executable, context)  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        odla.launch_executable(executable, context)
        times.append(time.perf_counter() - start)
    odla.destroy_context(context)
    odla.destroy_executable(executable)
    return probabilities, times


def _latency(times) -> str:
    return f"median {statistics.median(times) * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms"


def main(batch: int = 1, runs: int = 50) -> None:
    device = odla.allocate_device()
    print(f"device: {odla.get_device_info(device, odla.DeviceInfo.DEV_TYPE)}")
    comp = build_small_cnn(batch)
    arg = odla.get_arg_from_computation_by_idx(comp, 0)
    out = odla.get_output_from_computation_by_idx(comp, 0)
    print(f"built: {odla.get_value_id(arg)} {odla.get_value_type(arg)} -> "
          f"{odla.get_value_id(out)} {odla.get_value_type(out)}")
    images = np.random.default_rng(1).standard_normal((batch, 3, 32, 32)).astype(np.float32)
    probabilities, times = _run_timed(comp, device, images, runs)

    np.set_printoptions(precision=4, suppress=True)
    for i, row in enumerate(probabilities):
        print(f"image {i}: class {int(row.argmax())} (p={row.max():.4f}), probabilities {row}")
    path = ("oneDNN where it takes the ops, TVM for the rest" if device.target.plugins
            else "TVM's own code")
    print(f"latency over {runs} runs: {_latency(times)} (batch {batch}, device DEFAULT: {path})")
    tvm_only = odla.allocate_device(device_name=odla.DeviceName.INTEL_X86)
    through_tvm, times = _run_timed(comp, tvm_only, images, runs)
    difference = float(np.abs(through_tvm - probabilities).max())
    print(f"latency over {runs} runs: {_latency(times)} (batch {batch}, device INTEL_X86: TVM's "
          f"own code; max difference from DEFAULT's {difference:.2g})")
    odla.destroy_computation(comp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1, help="images per run")
    parser.add_argument("--runs", type=int, default=50, help="timed runs per device")
    args = parser.parse_args()
    for option, value in (("--batch", args.batch), ("--runs", args.runs)):
        if value < 1:
            parser.error(f"{option} is {value}; expected an integer >= 1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main(args.batch, args.runs)
