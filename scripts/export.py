#!/usr/bin/env python3
"""Export a model as a deployable bundle: the same as `odla-tvm export`.

    scripts/export.py MODEL --target aarch64-linux -o DIR [--with-runner]
"""
import sys

from odla_tvm.cli import main

if __name__ == "__main__":
    sys.exit(main(["export", *sys.argv[1:]]))
