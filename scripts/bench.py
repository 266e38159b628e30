#!/usr/bin/env python3
"""Time ONNX models (default: onnx's nine light CNNs) on odla-tvm's default device, the
pure-TVM build, onnxruntime and OpenVINO (the `bench` extra), each path in its own process,
and ODLA's cost per call; write the report and its chart where -o says (default
odla-bench/perf.md; -o docs/bench/perf.md for the published one): the same as `odla-tvm bench`.

    scripts/bench.py [MODEL.onnx ...] [--models resnet50 squeezenet ...] [--threads 2]
                     [--runs 5] [--batch 1] [--cache-dir DIR] [-o docs/bench/perf.md] [--force]
    scripts/bench.py build/models/*.onnx     # the real models of scripts/export_models.py
"""
import sys

from odla_tvm.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
