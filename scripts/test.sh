#!/bin/sh
# Sets up .venv with the test and tuning extras, checks the house rules (scripts/check_rules.py)
# and runs the test suite; with --quick first, only the tests not marked slow (no real models,
# no oneDNN or C program builds, no tuning, no cross builds).
set -e
cd "$(dirname "$0")/.."
QUICK=""
if [ "$1" = "--quick" ]; then QUICK=1; shift; fi
EXTRAS=test,tune . scripts/setup-venv.sh
.venv/bin/python scripts/check_rules.py
# The aarch64 export tests need a cross compiler and qemu; they skip, saying why, without them.
[ -n "$QUICK" ] || ./scripts/setup-cross.sh || true
[ -z "$QUICK" ] || set -- -m "not slow" "$@"
# Two processes (CI's two cores), each given whole files: a file's module fixtures (a compiled
# model, a built library) are made once. Arguments after these win: -n 0 runs in this process.
.venv/bin/python -m pytest -q -n 2 --dist loadfile "$@"
