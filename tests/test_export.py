"""Deployable bundles: export, the Python-free C++ runner on the host and on aarch64 under
qemu, and refusal of bundles that do not fit this machine or were tampered with."""

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import Status
from odla_tvm import ValueType as VT

from examples.quickstart import build_small_cnn

QEMU = shutil.which("qemu-aarch64-static")
CROSS = shutil.which("aarch64-linux-gnu-g++")
needs_aarch64 = pytest.mark.skipif(
    not (QEMU and CROSS),
    reason="aarch64-linux-gnu-g++ or qemu-aarch64-static missing and scripts/setup-cross.sh "
    "could not install them (needs root and apt-get)",
)


def build_mlp_with_variable(batch=-1):
    """A dynamic-batch MLP whose first weight is a variable: exercises params/ in a bundle."""
    rng = np.random.default_rng(7)
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (batch, 6)), "features:0")
    w = odla.create_variable(VT(E.FLOAT32, (6, 4)), "dense/weight")
    odla.set_value_data(w, rng.standard_normal((6, 4)).astype(np.float32))
    b = odla.create_constant(VT(E.FLOAT32, (4,)), rng.standard_normal(4).astype(np.float32))
    y = odla.tanh(odla.gemm(x, False, w, False, 1.0, 1.0, b))
    odla.set_value_as_output(odla.softmax(y, -1, "scores/out"))
    return comp


@pytest.fixture(scope="module")
def cnn():
    comp = build_small_cnn(batch=2)
    images = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    # TVM's own code, as the host-cpu bundles below hold it: the same numbers bit for bit.
    tvm_only = odla.allocate_device(device_name=odla.DeviceName.INTEL_X86)
    (expected,) = odla.Session(comp, tvm_only).run({"image": images})
    return comp, images, expected


@pytest.fixture(scope="module")
def host_bundle(cnn, tmp_path_factory):
    comp, _, _ = cnn
    return odla.export(comp, "host-cpu", tmp_path_factory.mktemp("host") / "cnn", with_runner=True)


def run_runner(bundle, inputs, tmp_path, emulator=()):
    out = tmp_path / "out" / "run"  # not made here: the runner creates its output folder
    paths = []
    for i, array in enumerate(inputs):
        paths.append(str(tmp_path / f"in{i}.npy"))
        np.save(paths[-1], array)
    command = [*emulator, str(bundle / "bin" / "odla_runner"), str(bundle), str(out),
               "--repeat", "3", *paths]
    return subprocess.run(command, capture_output=True, text=True, timeout=600), out


def test_host_bundle_runs_with_the_cpp_runner(cnn, host_bundle, tmp_path):
    comp, images, expected = cnn
    done, out = run_runner(host_bundle, [images], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "latency: median" in done.stdout
    result = np.load(out / "probabilities.npy")
    assert result.dtype == np.float32 and result.shape == expected.shape
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)


def test_host_bundle_contents_and_python_load(cnn, host_bundle):
    comp, images, expected = cnn
    manifest = json.loads((host_bundle / "manifest.json").read_text())
    assert manifest["arch"] == os.uname().machine
    assert manifest["tvm_version"] == odla.get_device_info(
        odla.allocate_device(), odla.DeviceInfo.SDK_VERSION).split()[-1]
    assert {"model.so", "README.txt", "bin/odla_runner",
            "lib/libtvm_runtime.so", "lib/libtvm_ffi.so"} <= set(manifest["files"])
    # the runner reads the manifest, whose own digest lies beside it
    assert not (host_bundle / "signature.txt").exists()
    assert (host_bundle / "manifest.sha256").read_text() == hashlib.sha256(
        (host_bundle / "manifest.json").read_bytes()).hexdigest() + "\n"
    assert [a["id"] for a in manifest["args"]] == ["image"]
    assert manifest["args"][0]["type"] == {"element_type": "FLOAT32", "dims": [2, 3, 32, 32]}
    readme = (host_bundle / "README.txt").read_text()
    assert "bin/odla_runner . OUTPUT_DIR" in readme and "image: float32 (2, 3, 32, 32)" in readme
    session = odla.Session(host_bundle)
    np.testing.assert_array_equal(session.run({"image": images})[0], expected)


def test_variables_and_dynamic_dims_reach_the_runner(tmp_path):
    comp = build_mlp_with_variable()
    bundle = odla.export(comp, None, tmp_path / "mlp", with_runner=True)
    features = np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)
    (expected,) = odla.Session(comp).run({"features:0": features})
    done, out = run_runner(bundle, [features], tmp_path)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(out / "scores_out.npy"), expected, rtol=1e-5, atol=1e-6)
    # The runner refuses an input of the wrong shape, naming both shapes.
    done, _ = run_runner(bundle, [features[:, :5]], tmp_path)
    assert done.returncode == 1 and "(5, 5)" in done.stderr and "(-1, 6)" in done.stderr


@needs_aarch64
def test_aarch64_bundle_runs_under_qemu_and_matches_the_host(cnn, tmp_path):
    comp, images, expected = cnn
    bundle = odla.export(comp, "aarch64-linux", tmp_path / "cnn-aarch64", with_runner=True)
    machine = subprocess.run(["file", "-b", str(bundle / "model.so")], capture_output=True,
                             text=True).stdout if shutil.which("file") else "ARM aarch64"
    assert "aarch64" in machine
    done, out = run_runner(bundle, [images], tmp_path,
                           emulator=(QEMU, "-L", "/usr/aarch64-linux-gnu"))
    assert done.returncode == 0, done.stderr
    result = np.load(out / "probabilities.npy")
    assert result.dtype == np.float32 and result.shape == expected.shape
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
    # This x86-64 machine refuses it before touching the library.
    with pytest.raises(odla.OdlaError) as err:
        odla.load_executable(bundle)
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE
    assert "aarch64" in str(err.value) and os.uname().machine in str(err.value)


def _copy(bundle, tmp_path, name):
    copy = tmp_path / name
    shutil.copytree(bundle, copy)
    return copy


def _forge_manifest(bundle, text):
    """Writes the manifest ``text`` with its digest beside it, as a forger would."""
    (bundle / "manifest.json").write_text(text)
    (bundle / "manifest.sha256").write_text(hashlib.sha256(text.encode()).hexdigest() + "\n")


def test_foreign_or_tampered_bundles_are_refused(host_bundle, tmp_path):
    missing = _copy(host_bundle, tmp_path, "missing")
    (missing / "README.txt").unlink()
    altered = _copy(host_bundle, tmp_path, "altered")
    library = bytearray((altered / "model.so").read_bytes())
    library[len(library) // 2] ^= 0xFF
    (altered / "model.so").write_bytes(bytes(library))
    other_tvm = _copy(host_bundle, tmp_path, "other-tvm")
    other_arch = _copy(host_bundle, tmp_path, "other-arch")
    for bundle, key, value in ((other_tvm, "tvm_version", "0.26.0"), (other_arch, "arch", "riscv64")):
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest[key] = value
        _forge_manifest(bundle, json.dumps(manifest))
    unforged = _copy(host_bundle, tmp_path, "unforged")
    manifest = json.loads((unforged / "manifest.json").read_text())
    manifest["arch"] = "riscv64"
    (unforged / "manifest.json").write_text(json.dumps(manifest))
    no_manifest = _copy(host_bundle, tmp_path, "no-manifest")
    (no_manifest / "manifest.json").unlink()
    garbled = _copy(host_bundle, tmp_path, "garbled")
    _forge_manifest(garbled, "{not json")
    cases = [
        (missing, Status.INVALID_PARAM, "README.txt is missing"),
        (unforged, Status.INVALID_PARAM, "manifest.json was altered"),
        (altered, Status.INVALID_PARAM, "model.so was altered"),
        (other_tvm, Status.UNSUPPORTED_DEVICE_TYPE, "TVM 0.26.0"),
        (other_arch, Status.UNSUPPORTED_DEVICE_TYPE, "riscv64"),
        (no_manifest, Status.FILE_NOT_EXIST, "not an odla-tvm bundle"),
        (garbled, Status.INVALID_PARAM, "unreadable"),
    ]
    for bundle, status, fragment in cases:
        with pytest.raises(odla.OdlaError) as err:
            odla.load_executable(bundle)
        assert err.value.status == status and fragment in str(err.value), str(err.value)


def test_export_never_overwrites_foreign_data(cnn, tmp_path):
    comp, images, expected = cnn
    keep = tmp_path / "photos"
    keep.mkdir()
    (keep / "holiday.jpg").write_bytes(b"precious")
    with pytest.raises(odla.OdlaError) as err:
        odla.export(comp, "host-cpu", keep)
    assert err.value.status == Status.INVALID_PARAM and "refusing to overwrite" in str(err.value)
    assert [p.name for p in keep.iterdir()] == ["holiday.jpg"]
    # An earlier bundle is replaced whole, and nothing is left behind beside it.
    first = odla.export(comp, "host-cpu", tmp_path / "b")
    odla.export(build_mlp_with_variable(), "host-cpu", first)
    assert json.loads((first / "manifest.json").read_text())["args"][0]["id"] == "features:0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "photos"]


def test_export_argument_errors(cnn, tmp_path):
    comp, _, _ = cnn
    exe = odla.compile_computation(comp, None)
    with pytest.raises(odla.OdlaError) as err:
        odla.export(exe, "aarch64-linux", tmp_path / "x")
    assert err.value.status == Status.INVALID_PARAM and "export the computation" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.export(comp, "sparc-solaris", tmp_path / "y")
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE and "host-cpu" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.export("model", "host-cpu", tmp_path / "z")
    assert err.value.status == Status.INVALID_PARAM and "str" in str(err.value)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_export_command_and_script(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "odla-tvm")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    quickstart = os.path.join(repo, "examples", "quickstart.py")
    done = subprocess.run([script, "export", f"{quickstart}:build_small_cnn", "--target",
                           "host-cpu", "-o", str(tmp_path / "cli")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "bin/odla_runner . OUTPUT_DIR" in done.stdout
    assert odla.load_executable(tmp_path / "cli").args[0].id == "image"
    done = subprocess.run([sys.executable, os.path.join(repo, "scripts", "export.py"),
                           f"{quickstart}:no_such_builder", "-o", str(tmp_path / "s")],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "no_such_builder" in done.stderr
