"""The one cache folder of odla-tvm, where compiled objects, engines, tuning records and
downloaded runtimes are kept."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """$ODLA_TVM_CACHE_DIR, else odla-tvm in the user's cache folder ($XDG_CACHE_HOME or
    ~/.cache)."""
    return Path(os.environ.get("ODLA_TVM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "odla-tvm"))
