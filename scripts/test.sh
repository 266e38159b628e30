#!/bin/sh
# Sets up .venv with the test and tuning extras and runs the whole test suite.
set -e
cd "$(dirname "$0")/.."
EXTRAS=test,tune . scripts/setup-venv.sh
# The aarch64 export tests need a cross compiler and qemu; they skip, saying why, without them.
./scripts/setup-cross.sh || true
.venv/bin/python -m pytest -q "$@"
