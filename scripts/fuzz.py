#!/usr/bin/env python3
"""Fuzzes every format odla-tvm loads (ONNX models, .odla executables, bundles, checkpoints,
tuning databases) and writes docs/bench/fuzz.md; the contract is that every case ends in success
or OdlaError (see tools/fuzzing.py).

    .venv/bin/python scripts/fuzz.py [--cases 10000] [--jobs 2] [--timeout 120]
    .venv/bin/python scripts/fuzz.py --case onnx-struct-42     # repeat one case here
"""
import argparse
import logging
import os
import platform
import sys
import time

import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from odla_tvm import __version__
from tools import fuzzing
from toolchain import cache_dir



def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10000, help="cases in the campaign")
    parser.add_argument("--case", help="run this one case in this process and print its outcome")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    parser.add_argument("--seeds", help="where the seeds are kept (default: fuzz-seeds in "
                        "odla-tvm's cache directory); a case repeats exactly with the same seeds")
    parser.add_argument("--output", default=os.path.join("docs", "bench", "fuzz.md"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("ODLA_TVM_ENGINE_CACHE", "0")  # nothing written to the user's cache

    seeds = fuzzing.build_seeds(args.seeds or cache_dir() / "fuzz-seeds")
    if args.case:
        outcome = fuzzing.worker(seeds)(args.case)  # as in a campaign's worker
        print(f"{outcome.case} ({outcome.mutation}): {outcome.kind} in {outcome.seconds:.2f} s"
              f"\n{outcome.detail}")
        return 0 if outcome.conforming else 1
    names = fuzzing.campaign(args.cases)
    start = time.time()
    with tqdm.tqdm(total=len(names), unit="case") as bar:
        def progress(outcome):
            if not outcome.conforming:
                logging.warning("%s (%s): %s: %s", outcome.case, outcome.mutation, outcome.kind,
                                outcome.detail[:200])
            bar.update()
        outcomes = fuzzing.run_campaign(names, seeds, args.jobs, args.timeout, progress)
    command = "scripts/fuzz.py" + (f" --seeds {args.seeds}" if args.seeds else "")
    header = (f"odla-tvm {__version__}, {platform.machine()}, {args.jobs} workers; "
              f"{len(names)} cases in {time.time() - start:.0f} s "
              f"(`{command} --cases {args.cases}`).")
    if os.path.dirname(args.output):
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        f.write(fuzzing.report(outcomes, header, command))
    bad = [o for o in outcomes if not o.conforming]
    print(f"{len(outcomes)} cases, {len(bad)} not conforming; report: {args.output}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
