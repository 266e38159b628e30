"""The oneDNN plugin's runtime sources as the cache of compiled objects sees them."""

import re
from pathlib import Path

from targets.plugins.onednn import source_writer
from targets.plugins.onednn.source_files import source_dir


def _own_includes(name: str, folder: Path) -> set[str]:
    """The package's files ``name`` includes (``#include "..."``), directly or not."""
    found, pending = set(), [name]
    while pending:
        text = (folder / pending.pop()).read_text()
        for included in re.findall(r'^#include "([^"]+)"', text, re.MULTILINE):
            if included not in found:
                found.add(included)
                pending.append(included)
    return found


def test_the_runtime_s_cache_key_holds_every_header_it_includes():
    """A header missing from the key would leave a stale runtime object after an edit."""
    folder = Path(source_dir())
    included = _own_includes("runtime.cc", folder)
    assert all((folder / name).is_file() for name in included)
    assert set(source_writer.RUNTIME_HEADERS) == included
    assert len(source_writer.RUNTIME_HEADERS) == len(included)
