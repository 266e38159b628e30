"""Hostile stored executables and bundles from C (tests/c_api/hostile_file.c, each case in its
own process): every one ends in an ODLA status, never a signal or an overrun of a buffer sized
from the declared types; a transformer-like model (an embedding Gather) runs from C with
NumPy's values, and refuses an out-of-range token id with Python's message."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import libodla
from tools.fuzz_readers import join, split

try:
    from . import c_programs as c
except ImportError:
    import c_programs as c

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the C tests build with gcc")

OK, FILE_NOT_EXIST, INVALID_PARAM, FAILURE = 0, 2, 3, 14
RNG = np.random.default_rng(7)
TABLE = RNG.standard_normal((128, 16)).astype(np.float32)  # 8 KiB: a weight file
W = RNG.standard_normal((16, 16)).astype(np.float32)
B = RNG.standard_normal(16).astype(np.float32)


def _reference(ids):
    return TABLE[ids] @ W + B


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The model stored as a .odla file and exported as a bundle, and the C program."""
    import odla_tvm as odla
    from odla_tvm.frontends.onnx import import_model

    directory = tmp_path_factory.mktemp("hostile")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("MatMul", ["e", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 16])],
        [numpy_helper.from_array(TABLE, "table"), numpy_helper.from_array(W, "w"),
         numpy_helper.from_array(B, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]),
              str(directory / "embed.onnx"))
    comp = import_model(str(directory / "embed.onnx"))
    exe = odla.compile_computation(comp)
    (directory / "good.odla").write_bytes(odla.store_executable(None, exe))
    odla.export(exe, None, directory / "good_bundle")
    with pytest.raises(odla.OdlaError) as python_run:  # what Python says of a bad token id
        session = odla.Session(str(directory / "good.odla"))
        session.run({"ids": np.full((2, 5), 200, np.int64)})
    odla.destroy_computation(comp)
    libodla.build()
    program = c.compile_program(directory / "hostile_file", [c.SOURCES / "hostile_file.c"], "gcc",
                                ["-std=c11", "-Wall", "-Wextra", "-Werror"])
    return directory, program, python_run.value.message


def _run(program, path, *extra):
    done = c.run_program(program, path, *extra, timeout=120)
    assert done.returncode == 0, f"signal or exit {done.returncode}: {done.stdout}{done.stderr}"
    lines = done.stdout.splitlines()
    statuses = {k: int(v) for k, v in (line.split() for line in lines if line.startswith(("load", "launch")))}
    messages = [line.split(" ", 1)[1] for line in lines if line.startswith("message ")]
    return statuses, messages


# -- editing a bundle or a stored file as an attacker would: digests made to match -----------
def _refresh(root):
    """Recomputes the bundle's file digests and its manifest's digest, as a forger would."""
    manifest = json.loads((root / "manifest.json").read_text())
    _write_manifest(root, manifest, refresh_files=True)


def _write_manifest(root, manifest, refresh_files=False, text=None):
    if refresh_files:
        for name in manifest["files"]:
            path = root / name
            if os.path.isfile(path):
                manifest["files"][name] = hashlib.sha256(path.read_bytes()).hexdigest()
    data = text if text is not None else json.dumps(manifest).encode()
    (root / "manifest.json").write_bytes(data)
    (root / "manifest.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")


def _bundle(directory, name, edit):
    root = directory / name
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(directory / "good_bundle", root, symlinks=True)
    manifest = json.loads((root / "manifest.json").read_text())
    edit(root, manifest)
    return root


def _manifest_edit(change):
    def edit(root, manifest):
        change(manifest, root)
        _write_manifest(root, manifest, refresh_files=True)
    return edit


def _weight_named(name, listed=True, copy=True):
    def change(manifest, root):
        if copy and not os.path.isabs(name):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / manifest["weights"][0]["file"], root / name)
        manifest["weights"][0]["file"] = name
        if listed:
            manifest["files"][name] = "0" * 64
    return _manifest_edit(change)


def _npy(shape, fortran=b"False"):
    """A version-1 .npy file of float32 with no data, its header giving ``shape``."""
    header = b"{'descr': '<f4', 'fortran_order': " + fortran + b", " + shape + b", }\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


def _npy_weight(data):
    def edit(root, manifest):
        (root / manifest["weights"][0]["file"]).write_bytes(data)
        _write_manifest(root, manifest, refresh_files=True)
    return edit


def _symlinked_weight(root, manifest):
    weight = root / manifest["weights"][0]["file"]
    outside = root.parent / f"{root.name}-outside.npy"
    shutil.copyfile(weight, outside)
    weight.unlink()
    weight.symlink_to(outside)
    _write_manifest(root, manifest)


def _output_dims(dims):
    return _manifest_edit(lambda m, _: m["outputs"][0]["type"].__setitem__("dims", dims))


def _unchanged_digest(root, manifest):
    manifest["odla_tvm_version"] = "forged"
    (root / "manifest.json").write_text(json.dumps(manifest))


def _nested(root, manifest):
    _write_manifest(root, manifest, text=b"[" * 200000 + b"]" * 200000)


def _oversized(root, manifest):
    with open(root / "manifest.json", "r+b") as f:
        f.truncate(65 << 20)  # sparse: no disk


BUNDLE_CASES = {
    "good": (lambda root, manifest: None, OK, OK),
    "weight_outside": (_weight_named("../x.npy"), INVALID_PARAM, None),
    "weight_absolute": (_weight_named("/etc/passwd", copy=False), INVALID_PARAM, None),
    "weight_unlisted": (_weight_named("weights/other.npy", listed=False), INVALID_PARAM, None),
    "weight_symlink_out": (_symlinked_weight, INVALID_PARAM, None),
    "output_declared_smaller": (_output_dims([1, 5, 16]), OK, INVALID_PARAM),
    "output_declared_other_rank": (_output_dims([10, 16]), OK, INVALID_PARAM),
    "argument_declared_larger": (_manifest_edit(
        lambda m, _: m["args"][0]["type"].__setitem__("dims", [4, 5])), OK, FAILURE),
    "manifest_altered": (_unchanged_digest, INVALID_PARAM, None),
    "manifest_digest_missing": (lambda root, _: (root / "manifest.sha256").unlink(),
                                INVALID_PARAM, None),
    "manifest_nested_deeply": (_nested, INVALID_PARAM, None),
    "manifest_oversized": (_oversized, INVALID_PARAM, None),
    "manifest_missing": (lambda root, _: (root / "manifest.json").unlink(), FILE_NOT_EXIST, None),
    "npy_v2_header_truncated": (_npy_weight(b"\x93NUMPY\x02\x00\x10\x00\x00"), INVALID_PARAM, None),
    "npy_header_length_huge": (_npy_weight(b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}"),
                               INVALID_PARAM, None),
    "npy_negative_dim": (_npy_weight(_npy(b"'shape': (-1, 8)")), INVALID_PARAM, None),
    "npy_dims_overflow": (_npy_weight(_npy(b"'shape': (4611686018427387904, 4611686018427387904)")),
                          INVALID_PARAM, None),
    "npy_fortran_order": (_npy_weight(_npy(b"'shape': (0,)", b"True")), INVALID_PARAM, None),
    "weight_declared_other_shape": (_manifest_edit(
        lambda m, _: m["weights"][0].__setitem__("dims", [3, 3])), INVALID_PARAM, None),
}


# what each refusal's message says (beside the file's name)
REASONS = {
    "argument_declared_larger": "shape[0] mismatch",
    "manifest_altered": "manifest.json was altered",
    "manifest_digest_missing": "manifest.sha256 is missing",
    "manifest_missing": "has no manifest.json",
    "manifest_nested_deeply": "its manifest nests deeper than 32",
    "manifest_oversized": "its manifest is 68157440 bytes; at most 67108864",
    "npy_dims_overflow": "its shape's size overflows",
    "npy_fortran_order": "it is Fortran-ordered",
    "npy_header_length_huge": "its header is 4294967295 bytes; at most 65536",
    "npy_negative_dim": "its shape has a dim that is not a non-negative integer",
    "npy_v2_header_truncated": "weights/weight0.npy: its header is truncated",
    "output_declared_other_rank": "returned FLOAT32 (2, 5, 16) for output y, not the type its "
                                  "manifest declares: FLOAT32 (10, 16)",
    "output_declared_smaller": "returned FLOAT32 (2, 5, 16) for output y, not the type its "
                               "manifest declares: FLOAT32 (1, 5, 16)",
    "weight_absolute": "not a plain relative name inside the bundle",
    "weight_declared_other_shape": "weight 0's data differs from the type its manifest declares",
    "weight_outside": "not a plain relative name inside the bundle",
    "weight_symlink_out": "weights/weight0.npy is missing, or not a regular file inside",
    "weight_unlisted": "names weights/other.npy, which its files (with their sha256) do not list",
    "manifest_length_huge": "its manifest is truncated",
    "npy_dims_overflow_in_archive": "w0.npy: its shape's size overflows",
    "section_offset_overflow": "section weights is truncated",
    "slot_dims_overflow": "slot y's size overflows",
    "zip64_extra_field_short": "an array archive's ZIP64 field is truncated",
    "zip_local_header_past_end": "an array archive's entry is damaged",
}


def _check(case, load, launch, statuses, messages):
    assert statuses.get("load") == load, (statuses, messages)
    assert statuses.get("launch") == launch, (statuses, messages)
    if load != OK or launch != OK:
        assert len(messages) == 1 and REASONS[case] in messages[0], messages


@pytest.mark.parametrize("case", sorted(BUNDLE_CASES))
def test_a_hostile_bundle_gets_a_status(model, case):
    directory, program, _ = model
    edit, load, launch = BUNDLE_CASES[case]
    root = _bundle(directory, case, edit)
    statuses, messages = _run(program, root)
    _check(case, load, launch, statuses, messages)


# -- stored files: the manifest and the sections' bytes -------------------------------------
def _weights_zip(edit_entry):
    """A weights section whose first entry's central-directory record ``edit_entry`` changes."""
    def edit(blob):
        manifest, sections = split(blob)
        data = bytearray(sections["weights"])
        at = struct.unpack_from("<I", data, data.rfind(b"PK\x05\x06") + 16)[0]
        sections["weights"] = bytes(edit_entry(data, at))
        return join(manifest, sections)
    return edit


def _zip64_short_extra(data, at):
    name_len, extra_len = struct.unpack_from("<HH", data, at + 28)
    struct.pack_into("<I", data, at + 24, 0xFFFFFFFF)  # the size: "in the ZIP64 field"
    struct.pack_into("<H", data, at + 30, extra_len + 8)
    start = at + 46 + name_len + extra_len
    data[start:start] = struct.pack("<HHI", 1, 4, 0)  # a ZIP64 field too short for it
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 12, struct.unpack_from("<I", data, end + 12)[0] + 8)
    return data


def _local_offset_past_end(data, at):
    struct.pack_into("<I", data, at + 42, len(data) - 10)
    return data


def _weights_npy_shape(blob):
    manifest, sections = split(blob)
    arrays = dict(np.load(io.BytesIO(sections["weights"])))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name, array in arrays.items():
            npy = io.BytesIO()
            np.save(npy, array)
            raw = npy.getvalue()
            if name == "w0":  # its header now says (2**62, 2**62)
                raw = raw.replace(repr(array.shape).encode(),
                                  b"(4611686018427387904, 4611686018427387904)", 1)
            archive.writestr(f"{name}.npy", raw)
    sections["weights"] = out.getvalue()
    return join(manifest, sections)


def _offset_past_end(manifest):
    manifest["sections"]["weights"]["offset"] = 2**63 - 1
    return manifest


def _odla_manifest(change):
    def edit(blob):
        manifest, sections = split(blob)
        change(manifest)
        return join(manifest, sections)
    return edit


ODLA_CASES = {
    "good": (lambda blob: blob, OK, OK),
    "manifest_length_huge": (lambda blob: blob[:12] + struct.pack("<Q", 2**64 - 1) + blob[20:],
                             INVALID_PARAM, None),
    "manifest_nested_deeply": (lambda blob: join(*split(blob), text=b"{\"a\":" * 100000),
                               INVALID_PARAM, None),
    "section_offset_overflow": (lambda blob: join(*split(blob), after=_offset_past_end),
                                INVALID_PARAM, None),
    "zip64_extra_field_short": (_weights_zip(_zip64_short_extra), INVALID_PARAM, None),
    "zip_local_header_past_end": (_weights_zip(_local_offset_past_end), INVALID_PARAM, None),
    "npy_dims_overflow_in_archive": (_weights_npy_shape, INVALID_PARAM, None),
    "output_declared_smaller": (_odla_manifest(
        lambda m: m["outputs"][0]["type"].__setitem__("dims", [1, 5, 16])), OK, INVALID_PARAM),
    "slot_dims_overflow": (_odla_manifest(lambda m: m["outputs"][0]["type"].__setitem__(
        "dims", [2**40, 2**40, 8])), INVALID_PARAM, None),
}


@pytest.mark.parametrize("case", sorted(ODLA_CASES))
def test_a_hostile_stored_file_gets_a_status(model, case):
    directory, program, _ = model
    edit, load, launch = ODLA_CASES[case]
    path = directory / f"{case}.odla"
    path.write_bytes(edit((directory / "good.odla").read_bytes()))
    statuses, messages = _run(program, path)
    _check(case, load, launch, statuses, messages)


@pytest.mark.parametrize("stored", ["good.odla", "good_bundle"])
def test_an_embedding_runs_from_c_and_refuses_a_bad_token_id_as_python_does(model, stored):
    directory, program, python_message = model
    out = directory / f"{stored}.bin"
    statuses, messages = _run(program, directory / stored, 3, out)
    assert statuses == {"load": OK, "launch": OK}, messages
    got = np.fromfile(out, np.float32).reshape(2, 5, 16)
    np.testing.assert_allclose(got, _reference(np.full((2, 5), 3)), rtol=1e-5, atol=1e-5)
    statuses, messages = _run(program, directory / stored, 200)
    assert statuses == {"load": OK, "launch": INVALID_PARAM}
    assert messages == [python_message]
