#!/usr/bin/env python3
"""Quantize float32 ONNX models with onnxruntime's quantizer for `odla-tvm bench --precision
int8` (odla_tvm/bench/quantize.py says how): each MODEL.onnx becomes OUT/MODEL-int8.onnx.

    .venv/bin/python scripts/quantize_models.py /work/models/*.onnx --out /work/models-int8
"""
import argparse
import os
import sys
import time

from odla_tvm.bench.quantize import quantize


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", metavar="MODEL.onnx")
    parser.add_argument("--out", default="build/models-int8", help="output directory")
    parser.add_argument("--reduce-range", choices=["yes", "no"],
                        help="7-bit weights (default: yes where this CPU has no VNNI)")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    reduce_range = None if args.reduce_range is None else args.reduce_range == "yes"
    for path in args.models:
        name = os.path.splitext(os.path.basename(path))[0]
        out = os.path.join(args.out, f"{name}-int8.onnx")
        if os.path.exists(out) and not args.force:
            print(f"{name:16} {out} exists, kept (--force to overwrite)")
            continue
        start = time.perf_counter()
        kind = quantize(path, out, reduce_range)
        print(f"{name:16} {kind:7} quantized in {time.perf_counter() - start:5.1f} s  {out}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
