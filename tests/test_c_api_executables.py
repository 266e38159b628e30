"""The C library's executables across processes and languages: examples/c's programs build a
CNN in C and store it, Python loads it; Python stores one and a C process loads and runs it
with neither libpython nor TVM's compiler mapped, on 8 threads at once; a bundle Python
exported, its weights and variables run from their mapped files, a damaged one refused; and
DEFAULT's oneDNN regions run from C, built there or stored by Python, with the thread pools set
as Python sets them (tests/c_api/onednn_regions.c)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import libodla
import odla_tvm as odla
from odla_tvm.device import default_plugin_missing

try:
    from . import c_programs as c
    from . import reference as ref
except ImportError:
    import c_programs as c
    import reference as ref

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the C tests build with gcc")

EXAMPLES = c.ROOT / "examples" / "c"


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """examples/c's two programs, built as C99 with the flags `odla-tvm config` prints."""
    libodla.build()
    directory = tmp_path_factory.mktemp("examples")
    flags = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
    return {name: c.compile_program(directory / name, [EXAMPLES / f"{name}.c"], "gcc", flags,
                                    ["-lm"])
            for name in ("build_cnn", "run_executable")}


def formula(count: int, scale: float, seed: int) -> np.ndarray:
    """build_cnn.c's fill()."""
    return (scale * np.sin(0.37 * (np.arange(count) + 1) + seed)).astype(np.float32)


def build_cnn_reference() -> tuple[np.ndarray, int]:
    x = formula(192, 1.0, 0).reshape(1, 3, 8, 8)
    w, b = formula(108, 0.3, 1).reshape(4, 3, 3, 3), formula(4, 0.1, 2)
    fc_w, fc_b = formula(640, 0.2, 3).reshape(64, 10), formula(10, 0.1, 4).reshape(1, 10)
    y = ref.conv(x, w, b, strides=(1, 1), dilations=(1, 1), pads_front=(1, 1), pads_back=(1, 1))
    y = ref.max_pool(np.maximum(y, 0), window=(2, 2), strides=(2, 2), pads_front=(0, 0),
                     pads_back=(0, 0))
    fc = y.reshape(1, 64).astype(np.float64) @ fc_w + fc_b
    return ref.softmax(fc, 1).ravel(), int(np.argmax(fc))


@pytest.fixture(scope="module")
def c_stored(examples, tmp_path_factory):
    """build_cnn's output and the executable it stored."""
    path = tmp_path_factory.mktemp("c_stored") / "cnn.odla"
    done = c.run_program(examples["build_cnn"], path)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, path


def test_c99_example_builds_runs_and_stores_a_cnn(c_stored):
    stdout, path = c_stored
    lines = stdout.split()
    expected, best = build_cnn_reference()
    np.testing.assert_allclose([float(v) for v in lines[:10]], expected, rtol=1e-4, atol=1e-6)
    assert int(lines[lines.index("best") + 1]) == best
    assert path.stat().st_size > 0


def test_executable_stored_by_c_loads_in_python(c_stored):
    _, path = c_stored
    session = odla.Session(str(path))
    x = formula(192, 1.0, 0).reshape(1, 3, 8, 8)
    prob, best = session.run({"input": x}, ["prob", "best"])
    expected, expected_best = build_cnn_reference()
    np.testing.assert_allclose(prob.ravel(), expected, rtol=1e-4, atol=1e-6)
    assert best.dtype == np.int64 and int(best.ravel()[0]) == expected_best


@pytest.fixture(scope="module")
def python_stored(tmp_path_factory):
    """An executable Python compiled and stored, its input and Python's own outputs."""
    directory = tmp_path_factory.mktemp("python_stored")
    rng = np.random.default_rng(1)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    E, VT = odla.ElementType, odla.ValueType
    comp = odla.create_computation()
    arg = odla.create_argument(VT(E.FLOAT32, (4, 6)), "x")
    y = odla.tanh(odla.gemm(arg, False, odla.create_constant(VT(E.FLOAT32, (6, 5)), w), False,
                            1.0, 0.0), "y")
    odla.set_value_as_output(y)
    odla.set_value_as_output(odla.arg_max(y, 1, True, False, VT(E.INT64, ()), "k"))
    exe = odla.compile_computation(comp)
    path = directory / "model.odla"
    odla.store_executable(str(path), exe)
    odla.export(exe, None, directory / "bundle")
    expected = odla.Session(exe).run({"x": x}, ["y", "k"])
    odla.destroy_computation(comp)
    x_file = directory / "x.bin"
    x.tofile(x_file)
    return path, x_file, expected


def run_stored(examples, path, x_file, out_dir: Path, *options):
    out_dir.mkdir()
    done = c.run_program(examples["run_executable"], path, out_dir, *options, x_file,
                         env={"PYTHONPATH": "/nonexistent"})
    assert done.returncode == 0, done.stdout + done.stderr
    y = np.fromfile(out_dir / "y.bin", np.float32).reshape(4, 5)
    k = np.fromfile(out_dir / "k.bin", np.int64).reshape(4, 1)
    return done.stdout, y, k


def test_python_stored_executable_runs_in_c_without_python_or_compiler(examples, python_stored,
                                                                       tmp_path):
    path, x_file, (y_expected, k_expected) = python_stored
    copy = tmp_path / "copy.odla"
    stdout, y, k = run_stored(examples, path, x_file, tmp_path / "out", "--store", copy)
    np.testing.assert_array_equal(y, y_expected)
    np.testing.assert_array_equal(k, k_expected)
    assert "maps libpython: no" in stdout and "maps libtvm_compiler: no" in stdout
    # ... and what C stored again loads in Python
    y_again, k_again = odla.Session(str(copy)).run({"x": np.fromfile(x_file, np.float32)
                                                    .reshape(4, 6)}, ["y", "k"])
    np.testing.assert_array_equal(y_again, y_expected)
    np.testing.assert_array_equal(k_again, k_expected)


def test_eight_threads_run_one_executable_with_their_own_contexts(examples, python_stored,
                                                                  tmp_path):
    path, x_file, (y_expected, k_expected) = python_stored
    _, y, k = run_stored(examples, path, x_file, tmp_path / "out", "--threads", "8",
                         "--repeat", "20")
    np.testing.assert_array_equal(y, y_expected)
    np.testing.assert_array_equal(k, k_expected)


def test_exported_bundle_runs_in_c(examples, python_stored, tmp_path):
    path, x_file, (y_expected, k_expected) = python_stored
    stdout, y, k = run_stored(examples, path.with_name("bundle"), x_file, tmp_path / "out")
    np.testing.assert_array_equal(y, y_expected)
    np.testing.assert_array_equal(k, k_expected)
    assert "maps libpython: no" in stdout and "maps libtvm_compiler: no" in stdout


@pytest.fixture(scope="module")
def weighted_bundle(tmp_path_factory):
    """A bundle with a weight (weights/weight0.npy) and a variable (params/v.npy), its input
    (x.bin beside it) and Python's output."""
    directory = tmp_path_factory.mktemp("weighted_bundle")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    E, VT = odla.ElementType, odla.ValueType
    comp = odla.create_computation()
    v = odla.create_variable(VT(E.FLOAT32, (64, 32)), "v")
    odla.set_value_data(v, rng.standard_normal((64, 32)).astype(np.float32))
    w = odla.create_constant(VT(E.FLOAT32, (32, 32)),  # 4 KiB: a weight, not code
                             rng.standard_normal((32, 32)).astype(np.float32))
    y = odla.tanh(odla.gemm(odla.create_argument(VT(E.FLOAT32, x.shape), "x"), False, v, False,
                            1.0, 0.0))
    odla.set_value_as_output(odla.gemm(y, False, w, False, 1.0, 0.0, None, None, "z"))
    exe = odla.compile_computation(comp)
    bundle = odla.export(exe, None, directory / "bundle")
    (expected,) = odla.Session(exe).run({"x": x}, ["z"])
    odla.destroy_computation(comp)
    x.tofile(directory / "x.bin")
    return bundle, directory / "x.bin", expected


@pytest.mark.parametrize("damage, file, message", [
    ("alter", "weights/weight0.npy", "was altered: its sha256 differs from the manifest's"),
    ("alter", "params/v.npy", "was altered: its sha256 differs from the manifest's"),
    ("remove", "weights/weight0.npy", "is missing")])
def test_bundle_with_a_damaged_file_is_refused_in_c(examples, weighted_bundle, tmp_path, damage,
                                                    file, message):
    original, x_file, _ = weighted_bundle
    bundle = shutil.copytree(original, tmp_path / "bundle")
    if damage == "alter":
        data = bytearray((bundle / file).read_bytes())
        data[-1] ^= 0xFF
        (bundle / file).write_bytes(bytes(data))
    else:
        (bundle / file).unlink()
    (tmp_path / "out").mkdir()
    done = c.run_program(examples["run_executable"], bundle, tmp_path / "out", x_file,
                         env={"PYTHONPATH": "/nonexistent"})
    assert done.returncode != 0
    assert (f"odla_LoadExecutable: not a valid odla-tvm executable: {bundle}: {file} "
            f"{message}") in done.stderr
    assert not (tmp_path / "out" / "z.bin").exists()


# Loads the bundle argv[2] with the library argv[1], runs it on argv[3]'s x into argv[4]
# (.npy), and prints which of its .npy files /proc/self/maps maps: after the load, after the
# launch, after odla_DestroyExecutable.
MAPPED_FILES = """
import ctypes, sys
import numpy as np
lib, bundle, x_file, z_file = ctypes.CDLL(sys.argv[1]), *sys.argv[2:]
class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("location", ctypes.c_char_p), ("size", ctypes.c_size_t)]
def mapped(when):
    maps = open("/proc/self/maps").read()
    print(when, *[f for f in ("weights/weight0.npy", "params/v.npy") if f"{bundle}/{f}" in maps])
exe, ctx = ctypes.c_void_p(), ctypes.c_void_p()
assert lib.odla_LoadExecutable(Location(0, bundle.encode(), 0), None, ctypes.byref(exe)) == 0
mapped("loaded")
x, z = np.fromfile(x_file, np.float32).reshape(4, 64), np.empty((4, 32), np.float32)
assert lib.odla_CreateContext(ctypes.byref(ctx)) == 0
assert lib.odla_BindToArgumentById(b"x", ctypes.c_void_p(x.ctypes.data), ctx) == 0
assert lib.odla_BindToOutputById(b"z", ctypes.c_void_p(z.ctypes.data), ctx) == 0
assert lib.odla_LaunchExecutable(exe, ctx) == 0
np.save(z_file, z)
mapped("launched")
assert lib.odla_DestroyContext(ctx) == 0 and lib.odla_DestroyExecutable(exe) == 0
mapped("destroyed")
"""


def test_bundle_weights_and_variables_are_its_mapped_files(weighted_bundle, tmp_path):
    """A loaded bundle's weights and variables are views of their files, mapped (not copies),
    until the executable goes; the run gives Python's numbers."""
    bundle, x_file, expected = weighted_bundle
    done = subprocess.run([sys.executable, "-c", MAPPED_FILES, str(libodla.library_path()),
                           str(bundle.resolve()), str(x_file), str(tmp_path / "z.npy")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    files = ["weights/weight0.npy", "params/v.npy"]
    assert done.stdout.splitlines() == [" ".join(["loaded", *files]),
                                        " ".join(["launched", *files]), "destroyed"]
    np.testing.assert_array_equal(np.load(tmp_path / "z.npy"), expected)


# -- DEFAULT's oneDNN regions from C -------------------------------------------------------------
def regions_cnn_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """onednn_regions.c's fill(): input, conv kernel and gemm weights."""
    def fill(shape, scale):
        i = np.arange(int(np.prod(shape)))
        return (scale * (((i * 37) % 101).astype(np.float32) / 50 - 1)).astype(np.float32) \
            .reshape(shape)
    return fill((1, 8, 8, 8), 1.0), fill((16, 8, 3, 3), 0.2), fill((16 * 64, 10), 0.05)


def regions_cnn_reference() -> np.ndarray:
    x, w, fc_w = regions_cnn_arrays()
    y = ref.conv(x, w, strides=(1, 1), dilations=(1, 1), pads_front=(1, 1), pads_back=(1, 1))
    return (np.maximum(y, 0).reshape(1, -1).astype(np.float64) @ fc_w).ravel()


@pytest.fixture(scope="module")
def onednn_regions(tmp_path_factory):
    if default_plugin_missing() is not None:
        pytest.skip(f"DEFAULT has no oneDNN here: {default_plugin_missing()}")
    libodla.build()
    directory = tmp_path_factory.mktemp("onednn_regions")
    return c.compile_program(directory / "onednn_regions", [c.SOURCES / "onednn_regions.c"],
                             "gcc", ["-std=c99", "-Wall", "-Wextra", "-Werror"])


POOL_SETTINGS = ("TVM_THREAD_POOL_SPIN_COUNT", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY")


def run_regions(program, *args, **env) -> dict[str, list[str]]:
    """onednn_regions' lines, in a process whose pools start as ``env`` has them (else as no
    one set them: this process's odla_tvm set its own)."""
    environment = {k: v for k, v in os.environ.items() if k not in POOL_SETTINGS}
    done = subprocess.run([str(program), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env={**environment, "PYTHONPATH": str(c.ROOT), **env})
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}


def test_python_stored_onednn_regions_run_in_c_with_the_pools_python_sets(
        onednn_regions, examples, tmp_path):
    x, w, fc_w = regions_cnn_arrays()
    E, L, VT = odla.ElementType, odla.MemoryLayout, odla.ValueType
    comp = odla.create_computation()
    y = odla.conv(odla.create_argument(VT(E.FLOAT32, x.shape), "x"), L.CHANNELS_FIRST, 1,
                  odla.create_constant(VT(E.FLOAT32, w.shape), w), L.OIS, (1, 1), (1, 1),
                  (1, 1), (1, 1))
    y = odla.gemm(odla.reshape(odla.relu(y), (1, 16 * 64)), False,
                  odla.create_constant(VT(E.FLOAT32, fc_w.shape), fc_w), False, 1.0, 0.0,
                  value_id="out")
    odla.set_value_as_output(y)
    exe = odla.compile_computation(comp, odla.allocate_device())
    assert exe.module.vendor_regions
    path = tmp_path / "cnn.odla"
    odla.store_executable(str(path), exe)
    odla.destroy_computation(comp)
    x.tofile(tmp_path / "x.bin")
    (tmp_path / "out").mkdir()
    done = c.run_program(examples["run_executable"], path, tmp_path / "out", tmp_path / "x.bin",
                         env={"PYTHONPATH": "/nonexistent"})
    assert done.returncode == 0, done.stdout + done.stderr
    np.testing.assert_allclose(np.fromfile(tmp_path / "out" / "out.bin", np.float32),
                               regions_cnn_reference(), rtol=1e-4, atol=1e-5)
    # no oneDNN region polled for by TVM's workers, oneDNN's OpenMP threads spin briefly ...
    lines = run_regions(onednn_regions, "load", path, PYTHONPATH="/nonexistent")
    assert lines["maps_dnnl"] == ["yes"]
    assert lines["pool_spin"] == ["0"] and lines["gomp_spin"] == ["10000"]
    # ... unless the user chose
    lines = run_regions(onednn_regions, "load", path, PYTHONPATH="/nonexistent",
                        TVM_THREAD_POOL_SPIN_COUNT="300000")
    assert lines["pool_spin"] == ["300000"]


def test_cnn_built_in_c_runs_onednn_regions_on_default(onednn_regions):
    lines = run_regions(onednn_regions, "build")
    np.testing.assert_allclose([float(v) for v in lines["out"]], regions_cnn_reference(),
                               rtol=1e-4, atol=1e-5)
    assert lines["maps_dnnl"] == ["yes"] and lines["pool_spin"] == ["0"]
