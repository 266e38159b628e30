#!/usr/bin/env python3
"""Time onnx's light CNNs on ODLA-TVM (untuned, tuned) and onnxruntime, and ODLA's cost per
call, and write docs/perf.md: the same as `odla-tvm bench`.

    scripts/bench.py [--models resnet50 squeezenet ...] [--threads 2] [--runs 5] [-o docs/perf.md]
"""
import sys

from odla_tvm.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
