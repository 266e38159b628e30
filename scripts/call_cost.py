#!/usr/bin/env python3
"""ODLA's own cost per call, from Python and from C (libodla_tvm.so), on a tiny model: the
table `odla-tvm bench` writes in its report, alone.

Usage: python scripts/call_cost.py [--calls N]
"""

import argparse
import sys

from odla_tvm.bench.report import overhead_section
from odla_tvm.bench.timing import call_overhead

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    print("\n".join(overhead_section(call_overhead(parser.parse_args().calls))))
    sys.exit(0)
