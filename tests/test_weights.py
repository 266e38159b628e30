"""Weights kept beside the compiled code (targets.weights): main takes its large constants as
trailing parameters; stored executables and bundles keep them apart from the library, and a
bundle's load maps them from their files. Checked against NumPy on every path."""

import json
import os
import hashlib

import numpy as np
import pytest

import odla_tvm as odla
import targets
from odla_tvm import ElementType as E
from odla_tvm import Status
from odla_tvm import ValueType as VT
from odla_tvm.executable import _HEADER, _MAGIC
from targets.weights import WEIGHT_MIN_BYTES

RNG = np.random.default_rng(11)
W = RNG.standard_normal((256, 512)).astype(np.float32)  # 512 KiB: a weight
B = RNG.standard_normal(512).astype(np.float32)  # 2 KiB: stays in the code
X = RNG.standard_normal((3, 256)).astype(np.float32)


def _reference(x):
    return np.tanh(x @ W + B)


def _computation():
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (3, 256)), "x")
    w = odla.create_constant(VT(E.FLOAT32, W.shape), W)
    b = odla.create_constant(VT(E.FLOAT32, B.shape), B)
    odla.set_value_as_output(odla.tanh(odla.gemm(x, False, w, False, 1.0, 1.0, b), "y"))
    return comp


@pytest.fixture(scope="module", params=["INTEL_X86", "DEFAULT"])
def executable(request):
    device = odla.allocate_device(device_name=odla.DeviceName[request.param])
    return odla.compile_computation(_computation(), device)


def _run(exe, x=X):
    (y,) = odla.Session(exe).run({"x": x})
    return y


def test_large_constants_are_parameters_and_small_ones_stay_in_the_code(executable):
    weights = executable.module.weights
    assert weights and all(w.nbytes >= WEIGHT_MIN_BYTES for w in weights)
    assert sum(w.nbytes for w in weights) >= W.nbytes  # W, in whatever layout its kernel reads
    assert not any(w.nbytes == B.nbytes for w in weights)
    for x in (X, X[::-1].copy()):  # a second input: weights packed once still hold
        y = _run(executable, x)
        assert y.dtype == np.float32 and y.shape == (3, 512)
        np.testing.assert_allclose(y, _reference(x), rtol=1e-4, atol=1e-5)


def test_a_stored_executable_keeps_its_weights_in_their_own_section(executable, tmp_path):
    path = tmp_path / "model.odla"
    odla.store_executable(path, executable)
    manifest_len = _HEADER.unpack_from(path.read_bytes())[2]
    manifest = json.loads(path.read_bytes()[_HEADER.size:_HEADER.size + manifest_len])
    assert manifest["sections"]["library"]["size"] < W.nbytes
    assert manifest["sections"]["weights"]["size"] >= W.nbytes
    loaded = odla.load_executable(path)
    np.testing.assert_array_equal(_run(loaded), _run(executable))


def test_a_bundle_maps_its_weights_from_their_files(executable, tmp_path):
    bundle = odla.export(executable, None, tmp_path / "bundle")
    assert os.path.getsize(bundle / "model.so") < W.nbytes
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [w["file"] for w in manifest["weights"]] == [
        f"weights/weight{i}.npy" for i in range(len(executable.module.weights))]
    assert all(manifest["files"][w["file"]] for w in manifest["weights"])  # each hashed
    loaded = odla.load_executable(bundle)
    assert all(isinstance(w, np.memmap) for w in loaded.module.weights)
    np.testing.assert_array_equal(_run(loaded), _run(executable))
    np.testing.assert_allclose(_run(loaded), _reference(X), rtol=1e-4, atol=1e-5)


def _rewrite(bundle, name, array):
    """Replaces a bundle file with ``array`` and gives the manifest its new sha256, as a
    careless tool would (the manifest's own digest too): only the shape check can tell."""
    np.save(bundle / name, array)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    text = json.dumps(manifest)
    (bundle / "manifest.json").write_text(text)
    (bundle / "manifest.sha256").write_text(hashlib.sha256(text.encode()).hexdigest() + "\n")


def test_a_bundle_with_an_altered_or_reshaped_weight_is_refused(executable, tmp_path):
    altered = odla.export(executable, None, tmp_path / "altered")
    data = bytearray((altered / "weights/weight0.npy").read_bytes())
    data[-1] ^= 0xFF
    (altered / "weights/weight0.npy").write_bytes(bytes(data))
    reshaped = odla.export(executable, None, tmp_path / "reshaped")
    shape = executable.module.weights[0].shape
    _rewrite(reshaped, "weights/weight0.npy", np.zeros((1, *shape), np.float32))
    retyped = odla.export(executable, None, tmp_path / "retyped")
    _rewrite(retyped, "weights/weight0.npy", np.zeros(shape, np.float64))
    for bundle, fragment in ((altered, "weights/weight0.npy was altered"),
                             (reshaped, f"[1, {', '.join(map(str, shape))}]"),
                             (retyped, "weight 0 is float64")):
        with pytest.raises(odla.OdlaError) as err:
            odla.load_executable(bundle)
        assert err.value.status == Status.INVALID_PARAM and fragment in str(err.value), \
            str(err.value)


def test_a_stored_file_of_before_weights_were_kept_apart_still_loads(tmp_path):
    """Such a file has no weights section: its weights are in the library."""
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, 4)), "x")
    odla.set_value_as_output(odla.add(x, odla.create_constant(VT(E.FLOAT32, (4,)), B[:4]), "y"))
    exe = odla.compile_computation(comp)
    assert exe.module.weights == []
    blob = odla.store_executable(None, exe)
    manifest_len = _HEADER.unpack_from(blob)[2]
    body = blob[_HEADER.size + manifest_len:]
    manifest = json.loads(blob[_HEADER.size:_HEADER.size + manifest_len])
    weights = manifest["sections"].pop("weights")
    del manifest["weights"]
    assert weights["offset"] + weights["size"] == len(body)  # the last section: cut it off
    text = json.dumps(manifest).encode()
    old = _HEADER.pack(_MAGIC, _HEADER.unpack_from(blob)[1], len(text)) + text + \
        body[:weights["offset"]]
    (y,) = odla.Session(odla.load_executable(old)).run({"x": X[:2, :4]})
    np.testing.assert_allclose(y, X[:2, :4] + B[:4], rtol=1e-6)


def _resident_kib(path) -> int:
    """The kB of the file at ``path`` mapped into this process and resident (smaps' Rss)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def test_weight_files_hold_large_arrays_out_of_memory_once_written(tmp_path):
    files = targets.WeightFiles(tmp_path)
    assert files.empty([16, 16], "float32") is None  # under MIN_BYTES: stays in memory
    assert files.empty([1024, 1024], "bfloat16") is None  # no NumPy dtype
    array = files.empty([512, 1024], "float32")
    assert array.shape == (512, 1024) and array.dtype == np.float32
    assert array.ctypes.data % 64 == 0  # TVM takes it without a copy
    path = files.file_of(array)
    array[...] = np.arange(array.size, dtype=np.float32).reshape(array.shape)
    assert _resident_kib(path) >= array.nbytes // 1024
    files.release(array)
    files.release(np.ones(4))  # not one of its arrays: left alone
    assert _resident_kib(path) == 0
    np.testing.assert_array_equal(np.load(path), array)  # what it wrote, read back both ways
    assert array[511, 1023] == array.size - 1
    assert files.file_of(array[1:]) is None and files.file_of(np.ones(4)) is None


def test_weight_files_copy_a_slab_at_a_time_neither_array_resident_whole(tmp_path):
    """A 4 MiB weight packed per tile (K x N into N/16 x K x 16, as a dense layer's) from a
    file into a file, 256 KiB slabs along the axis of out that is the source's leading one:
    equal to NumPy's copy, and after each slab at most two slabs of either file are resident,
    none once done. (Slabs along out's leading axis would read a column of the source each,
    mapping all of it: 4096 KiB resident after every slab.)"""
    files = targets.WeightFiles(tmp_path)
    files.SLAB_BYTES = 256 << 10
    source = files.empty([1024, 1024], "float32")
    source[...] = RNG.standard_normal(source.shape)
    files.release(source)
    out = files.empty([64, 1024, 16], "float32")
    paths = files.file_of(source), files.file_of(out)
    resident, release = [], files.release

    def measured_release(array):
        resident.append([_resident_kib(p) for p in paths])
        release(array)

    files.release = measured_release
    value = source.reshape(1024, 64, 16).transpose(1, 0, 2)
    files.copy(out, value, source, 1)
    assert len(resident) >= 2 * 16  # 16 slabs or more, each releasing both arrays
    assert max(max(r) for r in resident) <= 2 * 256, resident
    assert [_resident_kib(p) for p in paths] == [0, 0]
    np.testing.assert_array_equal(out, value)
    plain = np.empty_like(value)  # not one of its arrays: copied whole
    files.copy(plain, value, source, 1)
    np.testing.assert_array_equal(plain, value)


def test_a_compile_writes_the_weights_it_packs_to_weight_files(tmp_path):
    """INTEL_X86 packs the 512 KiB weight (laid out per tile) when compiling: with weight
    files of a smaller threshold, it is made in a file, which the module names, and runs."""
    files = targets.WeightFiles(tmp_path)
    files.MIN_BYTES = 256 << 10
    comp = _computation()
    module = targets.compile_module(comp.build_module(), targets.get_target("x86-64-avx2"),
                                    weight_files=files)
    in_files = [(w, p) for w, p in zip(module.weights, module.weight_paths) if p is not None]
    assert len(in_files) == 1 and in_files[0][0].nbytes == W.nbytes
    weight, path = in_files[0]
    np.testing.assert_array_equal(np.load(path), weight)
    assert sorted(np.load(path).ravel()) == sorted(W.ravel())  # W, laid out again
    (out,) = module.run([X])
    np.testing.assert_allclose(out, _reference(X), rtol=1e-5, atol=1e-5)
    assert out.dtype == np.float32 and out.shape == (3, 512)


def test_weights_folded_on_the_way_to_their_packing_leave_memory_too(tmp_path):
    """A dense layer stored N x K: its transpose folds with NumPy into a file, the packing
    reads it into another; once compiled, neither file's pages are resident, and the module
    runs as NumPy does."""
    from tvm import relax

    w = RNG.standard_normal((512, 256)).astype(np.float32)  # N x K, 512 KiB
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3, 256), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(x, relax.op.permute_dims(relax.const(w))))
        bb.emit_func_output(relax.Tuple([y]))
    files = targets.WeightFiles(tmp_path)
    files.MIN_BYTES = 256 << 10
    module = targets.compile_module(bb.get(), targets.get_target("x86-64-avx2"),
                                    weight_files=files)
    written = sorted(tmp_path.glob("*.npy"))
    assert len(written) == 2  # the transpose, then its packing
    assert [_resident_kib(p) for p in written] == [0, 0]
    np.testing.assert_array_equal(np.load(written[0]), w.T)
    assert module.weight_paths == [written[1]]
    (out,) = module.run([X])
    np.testing.assert_allclose(out, X @ w.T, rtol=1e-5, atol=1e-4)
    assert out.dtype == np.float32 and out.shape == (3, 512)
