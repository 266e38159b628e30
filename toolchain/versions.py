"""Installed distributions' versions, read from the names of their dist-info folders on
sys.path, where importlib.metadata finds them too: importing importlib.metadata costs a
served process's cached load more than the rest of its start."""

from __future__ import annotations

import os
import re
import sys
from functools import cache


@cache
def distribution_version(name: str) -> str | None:
    """The version of the installed distribution ``name`` (as pip names it), None where it
    is not installed."""
    prefix = re.sub(r"[-_.]+", "_", name).lower() + "-"
    for entry in sys.path:
        try:
            folders = os.listdir(entry or ".")
        except OSError:
            continue
        for folder in folders:
            if folder.endswith(".dist-info") and folder.lower().startswith(prefix):
                return folder[len(prefix):-len(".dist-info")]
    from importlib import metadata  # laid out otherwise (an egg, a zip): metadata knows

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
