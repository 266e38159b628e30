#!/usr/bin/env python3
"""BF16_MODE and FP16_MODE against float32 on real ONNX models (scripts/export_models.py's):
each model's builds on the DEFAULT device (Session.from_onnx's precision), timed in turns
in one process, their outputs against the float32 build's; prints a markdown table (the rows
of docs/bench/precision.md) and the geo-means.

    scripts/precision_models.py /work/models/resnet50.onnx ... [--threads 2] [--runs 5]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import odla_tvm as odla
from odla_tvm.bench.accuracy import accuracy
from odla_tvm.bench.models import model_inputs, read_model
from odla_tvm.bench.report import geo_mean
from odla_tvm.bench.timing import latency_in_turns
from odla_tvm.device import _cpu_model
from targets.plugins.onednn.isa import onednn_isa

# session.PRECISIONS: bf16 is BF16_MODE's performance mode. "fp32 again", the float32 engine
# loaded a second time, measures the noise between two builds of the same code.
PRECISIONS = ("fp32", "bf16", "fp16", "fp32 again")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="ONNX models")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per build, at least")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="timed seconds per build, at least")
    args = parser.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    ratios = {p: [] for p in PRECISIONS[1:]}
    load = os.getloadavg()[0]
    rows = []
    for path in args.files:
        name = os.path.splitext(os.path.basename(path))[0]
        feeds = model_inputs(read_model(path), 1)
        sessions = {p: odla.Session.from_onnx(path, precision=p.split()[0]) for p in PRECISIONS}
        outputs = {p: s.run(feeds) for p, s in sessions.items()}
        latency = latency_in_turns({p: lambda s=s, f=feeds: s.run(f) for p, s in sessions.items()},
                                   runs=args.runs, seconds=args.seconds)
        del sessions
        for p in PRECISIONS:
            seconds = latency[p][0]
            ratio = seconds / latency["fp32"][0]
            if p != "fp32":
                ratios[p].append(ratio)
            error = accuracy(outputs[p], outputs["fp32"])
            rows.append(f"| {name} | {p} | {seconds * 1e3:.1f} | {ratio:.2f}x | "
                        f"{error.max_abs_diff:.2e} | {error.cosine:.6f} |")
            print(rows[-1], flush=True)
    print(f"\n{_cpu_model()}, oneDNN's ISA class {onednn_isa()}, {args.threads} threads, batch "
          f"1; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end\n")
    print("| model | precision | latency ms | vs fp32 | max abs diff vs fp32 | cosine vs fp32 |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    print("\ngeo-mean over fp32: " + "; ".join(f"{p} {geo_mean(r):.3f}x ({min(r):.2f}-"
                                               f"{max(r):.2f}x)" for p, r in ratios.items()))


if __name__ == "__main__":
    sys.exit(main())
