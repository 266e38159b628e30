#!/bin/sh
# Sets up .venv with the test and tuning extras and runs the whole test suite.
set -e
cd "$(dirname "$0")/.."
EXTRAS=test,tune . scripts/setup-venv.sh
# The aarch64 export tests need a cross compiler and qemu; they skip, saying why, without them.
./scripts/setup-cross.sh || true
# Two processes (CI's two cores), each given whole files: a file's module fixtures (a compiled
# model, a built library) are made once. Arguments after these win: -n 0 runs in this process.
.venv/bin/python -m pytest -q -n 2 --dist loadfile "$@"
