"""What the region writers (source_writer.py, int8_source_writer.py) share: C array text and
the folder of the headers and runtime sources their generated code compiles against."""

from __future__ import annotations

import os
from importlib import resources


def c_list(values) -> str:
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


def source_dir() -> str:
    """This package's folder: region.h, which generated code includes, and runtime.cc."""
    return os.fspath(resources.files("targets.plugins.onednn"))
