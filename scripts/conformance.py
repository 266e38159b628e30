#!/usr/bin/env python3
"""Runs onnx's node test cases and light models through odla-tvm's ONNX backend and writes
docs/bench/conformance.md (counts, a per-op table, failures grouped by cause).

    .venv/bin/python scripts/conformance.py [--jobs 2] [--timeout 300] [--filter REGEX]
"""
import argparse
import os
import platform
import re
import sys
import time

import onnx
import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from odla_tvm import __version__
from tools import onnx_conformance as conformance


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: one per CPU)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    parser.add_argument("--filter", help="only cases whose name matches this regex")
    parser.add_argument("--device", default="CPU", help="ONNX device: CPU or CUDA")
    parser.add_argument("--output", default=os.path.join("docs", "bench", "conformance.md"))
    args = parser.parse_args(argv)

    cases = conformance.all_cases()
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
    start = time.time()
    with tqdm.tqdm(total=len(cases), unit="case") as bar:
        results = conformance.run_cases(cases, args.jobs, args.timeout, args.device,
                                        lambda result: bar.update())
    counts = conformance.summary(results)
    header = (f"odla-tvm {__version__}, onnx {onnx.__version__}, device {args.device}, "
              f"{platform.machine()}; {len(cases)} cases in {time.time() - start:.0f} s "
              f"(`scripts/conformance.py{' --filter ' + args.filter if args.filter else ''}`).")
    if os.path.dirname(args.output):
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(conformance.report(results, header) + "\n")
    for kind, (passed, total) in counts.items():
        print(f"{kind} cases passed: {passed} / {total}")
    print(f"report: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
