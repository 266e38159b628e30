#!/bin/sh
# Sets up .venv (pinned dependencies from pyproject.toml) and runs the main job:
# a small CNN built through the ODLA API, compiled for this CPU, run and timed.
set -e
cd "$(dirname "$0")/.."
. scripts/setup-venv.sh
.venv/bin/odla-tvm info
.venv/bin/python examples/quickstart.py "$@"
