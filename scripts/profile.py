#!/usr/bin/env python3
"""Profile a model's kernels on this CPU and write docs/bench/profile.md and the Chrome trace.

    scripts/profile.py [MODEL] [--runs 3]     (MODEL: default the light resnet50 from onnx)
"""

import argparse
import os
import sys

import onnx

import odla_tvm as odla
from odla_tvm.cli import load_model
from odla_tvm.profiler import compare_to_unprofiled, profile_executable

DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "bench")
RESNET50 = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_resnet50.onnx")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=RESNET50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    name = os.path.splitext(os.path.basename(args.model))[0]
    model = load_model(args.model)
    executable = model if isinstance(model, odla.Executable) else odla.compile_computation(model)
    device = odla.allocate_device()
    trace, plain = profile_executable(executable, args.runs)
    trace_path = os.path.join(DOCS, f"profile-{name}.json")
    trace.save(trace_path)
    text = "\n".join([
        f"# Profile of {name}",
        "",
        f"`scripts/profile.py {args.model if args.model != RESNET50 else ''}`".replace(" `", "`"),
        f"on {odla.get_device_info(device, odla.DeviceInfo.DEV_TYPE)}, ODLA's DEFAULT device "
        f"({odla.get_device_info(device, odla.DeviceInfo.SDK_VERSION)}), untuned, batch as in "
        "the model; "
        f"{args.runs} plain runs, then {args.runs} profiled runs. Chrome trace: "
        f"`docs/bench/{os.path.basename(trace_path)}` (open it in https://ui.perfetto.dev).",
        "",
        "```",
        trace.summary(15),
        compare_to_unprofiled(trace, plain),
        "```",
    ])
    with open(os.path.join(DOCS, "profile.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
