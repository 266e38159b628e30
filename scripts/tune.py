#!/usr/bin/env python3
"""Tune a model's kernels for a target with MetaSchedule: the same as `odla-tvm tune`.

    scripts/tune.py MODEL [--target host-cpu] [--trials N] [--minutes M] [--cache-dir DIR]

Records go to the target's tuning database (default ~/.cache/odla-tvm/tuning/); every later
compile for that target uses them. Run it again with the same --trials to resume.
"""
import sys

from odla_tvm.cli import main

if __name__ == "__main__":
    sys.exit(main(["tune", *sys.argv[1:]]))
