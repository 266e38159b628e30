#!/bin/sh
# Sets up .venv with the test extras and runs the whole test suite.
set -e
cd "$(dirname "$0")/.."
EXTRAS=test . scripts/setup-venv.sh
.venv/bin/python -m pytest -q "$@"
