"""Suite-wide settings: the engine cache is off unless a test turns it on (tests/
test_engine_cache.py does, with its own directory), so each test compiles what it tests and
nothing is written to the user's cache."""

import os

os.environ.setdefault("ODLA_TVM_ENGINE_CACHE", "0")
