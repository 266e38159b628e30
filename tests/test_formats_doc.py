"""docs/formats.md against the code: a freshly stored file and exported bundle hold exactly
the fields and layout the document gives, and its limits and dtype table are the C++ reader's."""

import hashlib
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

import odla_tvm as odla

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "formats.md").read_text()
PROSE = " ".join(DOC.split())
SOURCES = ROOT / "libodla" / "src"


def _rows(heading: str) -> list[list[str]]:
    """The rows of the first table after ``heading`` (cells stripped, header row dropped)."""
    text = DOC.split(heading, 1)[1]
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
        elif rows:
            break
    return [r for r in rows[1:] if not set(r[0]) <= {"-"}]


def _fields(where: str) -> set[str]:
    return {r[0].strip("`") for r in _rows("## The manifest") if r[2] in ("both", where)}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    directory = tmp_path_factory.mktemp("formats")
    E, VT = odla.ElementType, odla.ValueType
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, 32)), "x")
    v = odla.create_variable(VT(E.FLOAT32, (32,)), "v")
    odla.set_value_data(v, np.arange(32, dtype=np.float32))
    w = odla.create_constant(VT(E.FLOAT32, (32, 32)), np.eye(32, dtype=np.float32))
    odla.set_value_as_output(odla.gemm(x, False, w, False, 1.0, 1.0, v, None, "y"))
    exe = odla.compile_computation(comp)
    blob = odla.store_executable(None, exe)
    bundle = odla.export(exe, None, directory / "bundle")
    odla.destroy_computation(comp)
    return blob, bundle


def test_a_stored_file_has_the_documented_layout_and_fields(stored):
    blob, _ = stored
    layout = {r[2]: (r[0], r[1]) for r in _rows("## The `.odla` file")}
    assert blob[:8] == b"ODLATVM\0" and layout["magic"] == ("0", "8")
    assert layout["format version (u32)"] == ("8", "4")
    assert struct.unpack_from("<I", blob, 8) == (1,)
    assert layout["manifest length M (u64)"] == ("12", "8") and layout["manifest"][0] == "20"
    (length,) = struct.unpack_from("<Q", blob, 12)
    manifest = json.loads(blob[20:20 + length])
    assert set(manifest) == _fields(".odla")
    documented = {r[0].strip("`") for r in _rows("| section | content |")}
    assert set(manifest["sections"]) == documented
    body = blob[20 + length:]
    for entry in manifest["sections"].values():
        chunk = body[entry["offset"]:entry["offset"] + entry["size"]]
        assert hashlib.sha256(chunk).hexdigest() == entry["sha256"]
    slot = manifest["args"][0]
    assert set(slot) == {"id", "type"} and set(slot["type"]) == {"element_type", "dims"}
    assert set(manifest["weights"][0]) == {"name", "dtype", "dims", "file"}


def test_a_bundle_has_the_documented_files_and_fields(stored):
    _, bundle = stored
    manifest_text = (bundle / "manifest.json").read_bytes()
    manifest = json.loads(manifest_text)
    assert set(manifest) == _fields("bundle")
    assert (bundle / "manifest.sha256").read_text() == \
        hashlib.sha256(manifest_text).hexdigest() + "\n"
    plain = re.compile(r"[A-Za-z0-9_.-]+")
    documented = [r[0].strip("`") for r in _rows("| file | content |")]
    for name, digest in manifest["files"].items():
        assert all(plain.fullmatch(p) and p not in (".", "..") for p in name.split("/"))
        assert hashlib.sha256((bundle / name).read_bytes()).hexdigest() == digest
        assert any(re.fullmatch(d.replace("<i>", r"\d+").replace("<name>", r"[^/]+")
                                .replace("*", r"[^/]+"), name)
                   or d.split(", ")[0] == name or (", " in d and name.startswith("lib/"))
                   for d in documented), name
    assert {"manifest.json", "manifest.sha256", "model.so"} <= set(documented)
    variable = manifest["variables"][0]
    assert set(variable) == {"id", "type", "name", "file"} and variable["file"] in manifest["files"]


def _constant(path: str, name: str) -> int:
    found = re.search(rf"{name} = (\d+)(?: << (\d+))?;", (SOURCES / path).read_text())
    return int(found.group(1)) << int(found.group(2) or 0)


def test_the_documented_limits_are_the_readers(stored):
    assert _constant("stored_executable.h", "kMaxManifestBytes") == 64 << 20
    assert "64 MiB" in PROSE
    assert f"at most {_constant('stored_executable.h', 'kMaxManifestDepth')} deep" in PROSE
    entries = _constant("stored_executable.h", "kMaxManifestEntries")
    assert f"at most {entries:,} entries" in PROSE
    assert f"header at most {_constant('npy.h', 'kNpyMaxHeader'):,} bytes" in PROSE
    assert f"at most {_constant('npy.h', 'kNpyMaxRank')} non-negative integers" in PROSE


def test_the_documented_dtype_table_is_the_readers():
    code = re.findall(r'\{ODLA_(\w+), "\w+", \{kDL\w+, \d+, 1\}, "(.)(\w+)", "(\w+)"\}',
                      (SOURCES / "dtypes.cc").read_text())
    documented = {}
    for odla_names, numpy_name, descr in _rows("| ODLA | NumPy | `.npy` descr |"):
        for name in odla_names.split(", "):
            documented[name] = (numpy_name, descr.split()[0].strip("`").replace("\\|", "|"))
    assert documented == {name: (numpy_name, order + rest)
                          for name, order, rest, numpy_name in code}
