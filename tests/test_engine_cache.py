"""The engine cache (ENABLE_ENGINE_CACHE, CACHE_DIR): Session.from_onnx keeps the compiled
engine and a second load reads it without importing or compiling; a changed model, input or
version is a miss; a corrupted, truncated or foreign entry is rebuilt, never run; the cache is
bounded, evicting the least recently used; `odla-tvm cache` lists and clears it."""

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
import targets
from odla_tvm import engine_cache
from odla_tvm import session as session_module
from odla_tvm.cli import main as cli
from odla_tvm.device import default_plugin_missing
from odla_tvm.frontends import onnx as onnx_frontend


def _mlp(path, seed=0, hidden=8, inputs=4, outputs=3):
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((inputs, hidden)).astype(np.float32)
    w2 = rng.standard_normal((hidden, outputs)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, outputs])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path), lambda x: np.maximum(x @ w1, 0) @ w2


X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


def _load(path, cache_dir, **kwargs):
    return odla.Session.from_onnx(path, engine_cache=True, cache_dir=cache_dir, **kwargs)


def test_second_load_reads_the_engine_without_compiling(tmp_path, monkeypatch):
    path, reference = _mlp(tmp_path / "m.onnx")
    (first,) = _load(path, tmp_path / "cache").run({"x": X})
    (entry,) = engine_cache.entries(tmp_path / "cache")
    assert entry.model.endswith("m.onnx") and entry.size > 0

    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was imported and compiled again")

    monkeypatch.setattr(onnx_frontend, "import_model", refuse)
    # The library loads where it is kept, not from bytes written out to another file.
    monkeypatch.setattr(targets.CompiledModule, "from_bytes", refuse)
    assert (entry.path / "model.so").is_file()
    (second,) = _load(path, tmp_path / "cache").run({"x": X})
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(second, reference(X), rtol=1e-5, atol=1e-6)
    assert second.dtype == np.float32 and second.shape == (2, 3)


def test_a_model_given_as_path_bytes_or_proto_shares_one_entry(tmp_path, monkeypatch):
    path, reference = _mlp(tmp_path / "m.onnx")
    (first,) = _load(path, tmp_path / "cache").run({"x": X})

    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was compiled again")

    # Bytes never seen are imported while they are digested; what a hit skips is the compile.
    monkeypatch.setattr(session_module, "compile_outputs", refuse)
    with open(path, "rb") as f:
        data = f.read()
    for model in (data, onnx.load_from_string(data)):
        (again,) = _load(model, tmp_path / "cache").run({"x": X})
        np.testing.assert_array_equal(first, again)
    assert len(engine_cache.entries(tmp_path / "cache")) == 1
    np.testing.assert_allclose(first, reference(X), rtol=1e-5, atol=1e-6)


def test_a_model_with_an_empty_constant_is_kept_and_loads_again(tmp_path):
    """A constant of no elements (an empty convolution state, as onnx's CausalConvWithState
    of kernel size one has) is allocated when the engine runs, not kept in its library:
    TVM's loader could not read an empty tensor back, and the first load failed."""
    empty = np.zeros((2, 0), np.float32)
    graph = helper.make_graph(
        [helper.make_node("Concat", ["state", "x"], ["y"], axis=1),
         helper.make_node("Slice", ["y", "start", "end", "axis"], ["rest"])], "empty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("rest", TensorProto.FLOAT, [2, 0])],
        [numpy_helper.from_array(empty, "state"),
         *(numpy_helper.from_array(np.array([v], np.int64), name)
           for name, v in (("start", 4), ("end", 4), ("axis", 1)))])
    path = tmp_path / "empty.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    for _ in range(2):  # compiled and kept, then read from the cache
        y, rest = _load(str(path), tmp_path / "cache").run({"x": X})
        np.testing.assert_array_equal(y, X)
        assert rest.shape == (2, 0) and rest.dtype == np.float32
    assert len(engine_cache.entries(tmp_path / "cache")) == 1


def test_an_entry_that_does_not_load_back_is_removed_and_the_session_runs(tmp_path,
                                                                         monkeypatch, caplog):
    """Where TVM cannot load the library it has just written (as an empty constant made it
    do), the session runs from the build in hand and the entry goes: Session.from_onnx
    failed."""
    path, reference = _mlp(tmp_path / "m.onnx")

    def unreadable(_path):
        raise tvm.error.InternalError("Check failed: (read_ret) is false: Invalid DLTensor "
                                      "file format")

    monkeypatch.setattr(targets.runtime, "load_library", unreadable)
    with caplog.at_level(logging.WARNING, logger="odla_tvm.engine_cache"):
        (y,) = _load(path, tmp_path / "cache").run({"x": X})
    np.testing.assert_allclose(y, reference(X), rtol=1e-5, atol=1e-6)
    assert "does not load" in caplog.text and "Invalid DLTensor file format" in caplog.text
    assert engine_cache.entries(tmp_path / "cache") == []


def test_another_model_or_input_data_or_version_is_a_miss(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    path_a, _ = _mlp(tmp_path / "a.onnx", seed=0)
    path_b, reference_b = _mlp(tmp_path / "b.onnx", seed=1)
    _load(path_a, cache)
    (out,) = _load(path_b, cache).run({"x": X})
    np.testing.assert_allclose(out, reference_b(X), rtol=1e-5, atol=1e-6)
    assert len(engine_cache.entries(cache)) == 2
    _load(path_a, cache, input_data={"x": X})  # x fixed to data: another engine
    assert len(engine_cache.entries(cache)) == 3
    monkeypatch.setattr(engine_cache, "odla_tvm_version", lambda: "0.0.0-other")
    _load(path_a, cache)
    assert len(engine_cache.entries(cache)) == 4


def test_a_model_not_seen_before_is_digested_while_imported_and_still_finds_its_engine(
        tmp_path, monkeypatch):
    """A copy of a kept model under a new name: its digest is not remembered, so the file is
    read for it beside the import; the engine kept for the original is then found, and
    nothing is compiled."""
    path, reference = _mlp(tmp_path / "m.onnx")
    (first,) = _load(path, tmp_path / "cache").run({"x": X})
    copy = tmp_path / "copy.onnx"
    shutil.copyfile(path, copy)
    assert engine_cache.digest_remembered(path, tmp_path / "cache")
    assert not engine_cache.digest_remembered(str(copy), tmp_path / "cache")
    assert not engine_cache.digest_remembered(b"\x00not a path", tmp_path / "cache")

    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was compiled again")

    monkeypatch.setattr("odla_tvm.session.compile_computation", refuse)
    (second,) = _load(str(copy), tmp_path / "cache").run({"x": X})
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(second, reference(X), rtol=1e-5, atol=1e-6)
    assert second.dtype == np.float32 and second.shape == (2, 3)
    assert len(engine_cache.entries(tmp_path / "cache")) == 1


def test_a_model_file_is_digested_once_and_again_once_it_changes(tmp_path, monkeypatch):
    import hashlib
    import os

    cache = tmp_path / "cache"
    path, _ = _mlp(tmp_path / "m.onnx")
    expected = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert engine_cache.file_digest(path, cache) == expected
    reads = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: reads.append(a[0]) or real_open(*a, **k))
    assert engine_cache.file_digest(path, cache) == expected and path not in reads  # remembered
    monkeypatch.undo()
    # Other weights of the same size, the modification time put back: the change time moved.
    stat = os.stat(path)
    _mlp(path, seed=1)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(path).st_size == stat.st_size
    changed = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert changed != expected and engine_cache.file_digest(path, cache) == changed
    # A damaged memory of it is not believed.
    for memo in (cache / "engines" / "digests").iterdir():
        memo.write_text("not a digest")
    assert engine_cache.file_digest(path, cache) == changed
    assert cli(["cache", "clear", "--cache-dir", str(cache)]) == 0
    assert not (cache / "engines" / "digests").exists()


@pytest.mark.parametrize("damage", ["truncated", "corrupted", "foreign", "other version"])
def test_a_damaged_or_foreign_entry_is_rebuilt_never_run(tmp_path, damage, caplog):
    cache = tmp_path / "cache"
    path, reference = _mlp(tmp_path / "m.onnx")
    other, _ = _mlp(tmp_path / "other.onnx", seed=3, hidden=5)
    _load(path, cache)
    (entry,) = engine_cache.entries(cache)
    library = entry.path / "model.so"
    blob = library.read_bytes()
    info_path = entry.path.with_suffix(".json")
    # Damaged files take the library's place as a new file (written beside, renamed): this
    # process has the library loaded, and a loaded library written over in place breaks any
    # process that has it (the cache itself only ever renames new files into place).
    if damage in ("truncated", "corrupted"):
        damaged = library.with_suffix(".damaged")
        damaged.write_bytes(blob[: len(blob) // 2] if damage == "truncated"
                            else blob[:-100] + bytes(100))
        os.replace(damaged, library)
    elif damage == "foreign":  # another model's engine copied under this key
        _load(other, tmp_path / "elsewhere")
        (foreign,) = engine_cache.entries(tmp_path / "elsewhere")
        shutil.rmtree(entry.path)
        shutil.copytree(foreign.path, entry.path)
        info_path.write_text(foreign.path.with_suffix(".json").read_text())
    else:
        info = json.loads(info_path.read_text())
        info_path.write_text(json.dumps({**info, "odla-tvm": "0.0.0-other"}))
    with caplog.at_level(logging.WARNING, logger="odla_tvm.engine_cache"):
        (out,) = _load(path, cache).run({"x": X})
    np.testing.assert_allclose(out, reference(X), rtol=1e-5, atol=1e-6)
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    (rebuilt,) = engine_cache.entries(cache)
    assert rebuilt.key == entry.key and json.loads(info_path.read_text())["key"] == entry.key


def test_a_bundle_replaced_at_its_path_loads_as_it_is_now_in_the_same_process(tmp_path):
    """The dynamic loader hands back a library already loaded under the same name: a bundle
    (an engine cache entry rebuilt) put where a loaded one was must run its own code."""
    bundle = tmp_path / "model.odla"
    first_model, first = _mlp(tmp_path / "a.onnx", hidden=5)
    second_model, second = _mlp(tmp_path / "b.onnx", seed=3, hidden=7)
    odla.export(odla.Session.from_onnx(first_model, engine_cache=False).executable, None, bundle)
    (out,) = odla.Session(str(bundle)).run({"x": X})
    np.testing.assert_allclose(out, first(X), rtol=1e-5, atol=1e-6)
    staged = tmp_path / "staged.odla"  # another file at the path, as the cache writes one
    odla.export(odla.Session.from_onnx(second_model, engine_cache=False).executable, None, staged)
    shutil.rmtree(bundle)
    staged.rename(bundle)
    (out,) = odla.Session(str(bundle)).run({"x": X})
    np.testing.assert_allclose(out, second(X), rtol=1e-5, atol=1e-6)
    assert not [p for p in bundle.iterdir() if p.name.startswith(".")]  # no link left behind


def test_the_cache_is_bounded_and_evicts_the_least_recently_used(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    paths = [_mlp(tmp_path / f"m{i}.onnx", seed=i)[0] for i in range(3)]
    _load(paths[0], cache)
    size = engine_cache.entries(cache)[0].size
    monkeypatch.setenv("ODLA_TVM_ENGINE_CACHE_BYTES", str(int(size * 2.5)))
    _load(paths[1], cache)
    _load(paths[0], cache)  # a hit: m0 is now the most recently used
    _load(paths[2], cache)  # over the limit: m1 goes
    kept = [e.model for e in engine_cache.entries(cache)]
    assert len(kept) == 2 and kept[0].endswith("m2.onnx") and kept[1].endswith("m0.onnx")


def test_cache_off_keeps_nothing(tmp_path, monkeypatch):
    path, _ = _mlp(tmp_path / "m.onnx")
    odla.Session.from_onnx(path, engine_cache=False, cache_dir=tmp_path / "cache")
    monkeypatch.setenv("ODLA_TVM_ENGINE_CACHE", "0")
    odla.Session.from_onnx(path, cache_dir=tmp_path / "cache")
    assert engine_cache.entries(tmp_path / "cache") == []


def test_an_unwritable_cache_warns_and_the_session_still_runs(tmp_path, caplog):
    path, reference = _mlp(tmp_path / "m.onnx")
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory would be")
    with caplog.at_level(logging.WARNING, logger="odla_tvm.engine_cache"):
        (out,) = _load(path, blocker).run({"x": X})
    np.testing.assert_allclose(out, reference(X), rtol=1e-5, atol=1e-6)
    assert any("not written" in r.getMessage() for r in caplog.records)
    assert blocker.read_text().startswith("a file")  # nothing of the user's overwritten


def test_cli_lists_and_clears_the_cache(tmp_path, capsys):
    path, _ = _mlp(tmp_path / "m.onnx")
    _load(path, tmp_path / "cache")
    assert cli(["cache", "--cache-dir", str(tmp_path / "cache")]) == 0
    listed = capsys.readouterr().out
    assert "1 engines" in listed and "m.onnx" in listed
    assert cli(["cache", "clear", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert "removed 1 engines" in capsys.readouterr().out
    assert engine_cache.entries(tmp_path / "cache") == []
    assert cli(["cache", "shred"]) == 2  # a usage error: main returns argparse's status
    assert "invalid choice: 'shred'" in capsys.readouterr().err


def test_a_model_with_external_data_is_not_kept_and_one_without_is(tmp_path):
    path, reference = _mlp(tmp_path / "m.onnx")
    outside = tmp_path / "outside.onnx"  # its weights in another file, which the key omits
    onnx.save_model(onnx.load(path), str(outside), save_as_external_data=True,
                    location="outside.data", size_threshold=0)
    (out,) = _load(str(outside), tmp_path / "cache").run({"x": X})
    np.testing.assert_allclose(out, reference(X), rtol=1e-5, atol=1e-6)
    assert engine_cache.entries(tmp_path / "cache") == []
    _load(path, tmp_path / "cache")
    assert [e.model for e in engine_cache.entries(tmp_path / "cache")] == [path]
    (tmp_path / "outside.data").write_bytes(b"")  # telling reads no weights, theirs neither
    assert onnx_frontend.has_external_data(str(outside))
    assert not onnx_frontend.has_external_data(path)


def _resident_kib(path: str) -> int:
    """The kB of the file at ``path`` mapped into this process and resident (smaps' Rss)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = len(fields) >= 6 and fields[5] == path
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def _mapped(path: str) -> bool:
    """Whether the file at ``path`` is mapped into this process (under whatever name)."""
    inode = str(os.stat(path).st_ino)
    with open("/proc/self/maps") as maps:
        return any(line.split()[4] == inode for line in maps if len(line.split()) >= 6)


@pytest.mark.parametrize("device_name", ["INTEL_X86", "DEFAULT"])
def test_a_first_load_runs_the_kept_library_not_its_build_in_memory(tmp_path, device_name):
    """The code just kept serves the session: its library is loaded from the entry, not its
    in-memory build compiled again on the first run (TVM's LLVM JIT and the vendor parts'
    link: pure-TVM ResNet-50's first run took 1.5 s, then 0.05)."""
    device = odla.allocate_device(device_name=odla.DeviceName[device_name])
    path, reference = _mlp(tmp_path / "m.onnx", hidden=1024)
    session = _load(path, tmp_path / "cache", device=device)
    (entry,) = engine_cache.entries(tmp_path / "cache")
    library = str(entry.path / "model.so")
    assert _mapped(library)
    (out,) = session.run({"x": X})
    np.testing.assert_allclose(out, reference(X), rtol=1e-5, atol=1e-5)
    assert out.dtype == np.float32 and out.shape == (2, 3)


def _map_and_read_in_another_process(files: list[str]) -> subprocess.Popen:
    """A process holding every page of ``files`` mapped, until its stdin closes: the kernel's
    MADV_PAGEOUT then leaves those pages alone in every process (a 2-core CI machine's left a
    weight's pages resident in the same way, intermittently)."""
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, numpy as np
        maps = [np.load(f, mmap_mode="r") for f in sys.argv[1:]]
        print(sum(float(np.abs(m).sum()) > 0 for m in maps), flush=True)
        sys.stdin.read()
        """), *files], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == str(len(files))
    return reader


@pytest.mark.skipif(default_plugin_missing() is not None, reason=str(default_plugin_missing()))
@pytest.mark.parametrize("shared", [False, True], ids=["own", "mapped-elsewhere-too"])
def test_a_first_load_runs_from_its_kept_weights_and_packed_ones_leave_memory(tmp_path, shared):
    """The engine just kept serves the session: its weights memory-mapped from the entry, so
    a weight oneDNN packed is not also held (the runtime hands its file pages back), also
    where another process maps the same pages."""
    path, reference = _mlp(tmp_path / "m.onnx", hidden=4096)  # w1: 64 KiB, w2: 48 KiB
    # INTEL_DNNL: DEFAULT leaves a graph of matmuls to TVM (targets.plugins.onednn.policy)
    session = _load(path, tmp_path / "cache", device=odla.allocate_device(
        device_name=odla.DeviceName.INTEL_DNNL))
    module = session.executable.module
    (entry,) = engine_cache.entries(tmp_path / "cache")
    assert len(module.weights) == 2
    for weight in module.weights:
        assert isinstance(weight, np.memmap)
        assert str(entry.path) in str(weight.filename)
    files = [str(w.filename) for w in module.weights]
    assert all(float(np.abs(w).sum()) > 0 for w in module.weights)  # read: now resident
    assert all(_resident_kib(f) >= 48 for f in files)
    reader = _map_and_read_in_another_process(files) if shared else None
    try:
        (first,) = session.run({"x": X})
    finally:
        if reader is not None:
            reader.communicate("")
    assert module.vendor_regions  # oneDNN took the matmuls, packing both weights
    # What stays: the partial pages at each end (the first holds the .npy header).
    assert all(_resident_kib(f) <= 8 for f in files)
    (second,) = session.run({"x": X})  # the packed copies serve later runs
    for out in (first, second):
        np.testing.assert_allclose(out, reference(X), rtol=1e-5, atol=1e-5)
        assert out.dtype == np.float32 and out.shape == (2, 3)


_PACKED_RUN = """
import sys
if sys.argv[4] == "tvm_ffi":
    import tvm_ffi  # loaded already: the engine runs through it, not the C library
import numpy as np, odla_tvm as odla
from odla_tvm.c_library_module import CLibraryModule
session = odla.Session.from_onnx(sys.argv[1], odla.allocate_device(
    device_name=odla.DeviceName.INTEL_DNNL), engine_cache=True, cache_dir=sys.argv[2])
np.save(sys.argv[3], session.run({"x": np.load(sys.argv[5])})[0])
print("C library" if isinstance(session.executable.module, CLibraryModule) else "tvm_ffi")
"""


@pytest.mark.skipif(default_plugin_missing() is not None, reason=str(default_plugin_missing()))
@pytest.mark.parametrize("runner", ["C library", "tvm_ffi"])
def test_an_entry_keeps_its_packed_weights_for_the_loads_after(tmp_path, runner):
    """oneDNN packs a weight on the first run; the entry keeps the packed copy (packed/, not
    among the files it checks, so it still hits) and later processes read it instead of
    packing again: zeroed, they compute with zero weights; one of the wrong size is packed
    and kept again."""
    path, reference = _mlp(tmp_path / "m.onnx", hidden=4096)
    session = _load(path, tmp_path / "cache", device=odla.allocate_device(
        device_name=odla.DeviceName.INTEL_DNNL))
    (first,) = session.run({"x": X})
    np.testing.assert_allclose(first, reference(X), rtol=1e-5, atol=1e-5)
    (entry,) = engine_cache.entries(tmp_path / "cache")
    kept = sorted((entry.path / engine_cache.PACKED_WEIGHTS_FOLDER).iterdir())
    sizes = sorted(f.stat().st_size for f in kept)
    assert len(kept) == 2 and sizes[0] >= 4096 * 3 * 4 and sizes[1] >= 4 * 4096 * 4, sizes
    np.save(tmp_path / "x.npy", X)

    def load_in_a_new_process() -> np.ndarray:
        done = subprocess.run([sys.executable, "-c", _PACKED_RUN, path, str(tmp_path / "cache"),
                               str(tmp_path / "out.npy"), runner, str(tmp_path / "x.npy")],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split("\n")[-2] == runner, done.stdout
        assert [e.path for e in engine_cache.entries(tmp_path / "cache")] == [entry.path]
        return np.load(tmp_path / "out.npy")

    np.testing.assert_allclose(load_in_a_new_process(), reference(X), rtol=1e-5, atol=1e-5)
    for f in kept:
        f.write_bytes(bytes(f.stat().st_size))
    out = load_in_a_new_process()
    assert out.shape == (2, 3) and not out.any()  # x @ 0 -> 0
    for f in kept:
        f.write_bytes(b"short")
    np.testing.assert_allclose(load_in_a_new_process(), reference(X), rtol=1e-5, atol=1e-5)
    assert sorted(f.stat().st_size for f in kept) == sizes  # packed and kept again


@pytest.mark.skipif(default_plugin_missing() is not None, reason=str(default_plugin_missing()))
def test_a_cache_dir_given_relative_keeps_packed_weights_too(tmp_path, monkeypatch):
    """The entry's folder is matched against the files the process maps, which the kernel
    names by absolute paths."""
    monkeypatch.chdir(tmp_path)
    path, reference = _mlp(tmp_path / "m.onnx", hidden=512)
    session = _load(path, "cache", device=odla.allocate_device(
        device_name=odla.DeviceName.INTEL_DNNL))
    np.testing.assert_allclose(session.run({"x": X})[0], reference(X), rtol=1e-5, atol=1e-5)
    (entry,) = engine_cache.entries("cache")
    assert len(list((entry.path / engine_cache.PACKED_WEIGHTS_FOLDER).iterdir())) == 2


def test_weights_a_pure_tvm_compile_packs_go_to_files_linked_into_the_entry(tmp_path,
                                                                           monkeypatch):
    """INTEL_X86 packs a 1 MB matmul weight when compiling: written to a file beside the
    cache as it is made, out of memory, and linked into the entry rather than written again
    (the small weight is written as before); nothing is left beside the entries."""
    path, reference = _mlp(tmp_path / "packed.onnx", hidden=1024, inputs=256, outputs=16)
    packed_bytes = 256 * 1024 * 4  # w1: 1 MiB
    written, save = [], np.save
    monkeypatch.setattr(np, "save", lambda file, array, *a, **k: (
        written.append(np.asarray(array).nbytes), save(file, array, *a, **k))[1])
    session = _load(path, tmp_path / "cache",
                    device=odla.allocate_device(device_name=odla.DeviceName.INTEL_X86))
    (entry,) = engine_cache.entries(tmp_path / "cache")
    weight_files = sorted((entry.path / "weights").iterdir())
    assert len(weight_files) == 2 and max(f.stat().st_size for f in weight_files) > packed_bytes
    assert written and max(written) < packed_bytes  # the packed weight was not written again
    assert [p.name for p in (tmp_path / "cache" / "engines").iterdir()
            if p.name.startswith(".")] == []
    x = np.random.default_rng(3).standard_normal((2, 256)).astype(np.float32)
    (out,) = session.run({"x": x})
    np.testing.assert_allclose(out, reference(x), rtol=1e-4, atol=1e-4)
    assert out.dtype == np.float32 and out.shape == (2, 16)


def test_a_modules_build_is_replaced_before_the_first_run_only_and_by_the_same_kinds(tmp_path):
    path, _ = _mlp(tmp_path / "m.onnx", hidden=1024)
    module = odla.Session.from_onnx(path, engine_cache=False).executable.module
    assert not any(isinstance(w, np.memmap) for w in module.weights)
    library = str(tmp_path / "m.so")
    module.export(library)
    with pytest.raises(ValueError, match="expected the same dtypes and shapes"):
        module.run_from_library(library, [w.astype(np.float64) for w in module.weights])
    with pytest.raises(ValueError, match="expected the same dtypes and shapes"):
        module.run_from_library(library, module.weights[:1])
    module.run([X])
    with pytest.raises(RuntimeError, match="before its first run only"):
        module.run_from_library(library, list(module.weights))


@pytest.mark.parametrize("device_name", ["INTEL_X86", "DEFAULT"])
def test_a_session_runs_on_after_its_engine_is_cleared_from_the_cache(tmp_path, device_name):
    """The session reads its weights from the entry's files: removing the entry (clear,
    eviction by another process) unlinks them, and the mapped files stay readable."""
    path, reference = _mlp(tmp_path / "m.onnx", hidden=4096)
    session = _load(path, tmp_path / "cache",
                    device=odla.allocate_device(device_name=odla.DeviceName[device_name]))
    assert all(isinstance(w, np.memmap) for w in session.executable.module.weights)
    removed = engine_cache.clear(tmp_path / "cache")
    assert len(removed) == 1 and not removed[0].path.exists()
    for _ in range(2):
        (out,) = session.run({"x": X})
        np.testing.assert_allclose(out, reference(X), rtol=1e-5, atol=1e-5)
        assert out.dtype == np.float32 and out.shape == (2, 3)


@pytest.mark.parametrize("device_name", ["INTEL_X86", "DEFAULT"])
def test_a_session_running_from_its_kept_engine_exports_a_bundle(tmp_path, device_name):
    """A first and a second load run from the entry's library, which a loaded library cannot
    write again: their bundles copy the file they loaded, the entry cleared meanwhile."""
    path, reference = _mlp(tmp_path / "m.onnx", hidden=64)
    device = odla.allocate_device(device_name=odla.DeviceName[device_name])
    sessions = [_load(path, tmp_path / "cache", device=device) for _ in range(2)]
    engine_cache.clear(tmp_path / "cache")
    for n, session in enumerate(sessions):
        bundle = odla.export(session.executable, None, tmp_path / f"bundle{n}")
        (out,) = odla.Session(bundle).run({"x": X})
        np.testing.assert_allclose(out, reference(X), rtol=1e-5, atol=1e-5)
        assert out.dtype == np.float32 and out.shape == (2, 3)


def _first_load_in_a_fresh_process(tmp_path, model, x, device_name):
    """(MB its anonymous memory grew by, MB its peak grew by, its output for ``x``) of a
    fresh process's first load of ``model`` (the engine cache in tmp_path)."""
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import numpy as np, odla_tvm as odla
        # The compiler loaded first (its own code and tables are not what a compile frees).
        import relay_bridge.graph, targets.compiler
        def status_mb(key):
            with open("/proc/self/status") as status:
                return next(int(l.split()[1]) for l in status if l.startswith(key)) // 1024
        x = np.load({str(tmp_path / 'x.npy')!r})
        before, peak_before = status_mb("RssAnon"), status_mb("VmHWM")
        session = odla.Session.from_onnx(
            {str(path)!r}, odla.allocate_device(device_name=odla.DeviceName.{device_name}),
            engine_cache=True, cache_dir={str(tmp_path / 'cache')!r})
        grown, peaked = status_mb("RssAnon") - before, status_mb("VmHWM") - peak_before
        np.save({str(tmp_path / 'out.npy')!r}, session.run({{"x": x}})[0])
        print(grown, peaked)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    grown_mb, peaked_mb = map(int, done.stdout.split()[-2:])
    return grown_mb, peaked_mb, np.load(tmp_path / "out.npy")


@pytest.mark.parametrize("device_name", ["INTEL_X86", "DEFAULT"])
@pytest.mark.slow
def test_a_first_load_hands_back_the_memory_its_compile_freed(tmp_path, device_name):
    """48 MB of weights (48 layers of 512x512): after a fresh process's first load, which
    runs from the weights kept in the cache, its anonymous memory has grown by much less than
    the weights (glibc kept what the compile freed: 114 MB on INTEL_X86, 65 on DEFAULT;
    16 and 15 handed back), and its peak by under three times the weights (the model's bytes
    and its weights are read in: 117 MB on both; 190 on INTEL_X86 while the weights it
    packs were held beside the originals, not written to files as they were made)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes, weights, last = [], {}, "x"
    for i in range(48):
        weights[f"w{i}"] = (rng.standard_normal((512, 512)) * 0.05).astype(np.float32)
        nodes += [helper.make_node("MatMul", [last, f"w{i}"], [f"h{i}"]),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"])]
        last = f"r{i}"
    graph = helper.make_graph(
        nodes, "deep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, 512])],
        [numpy_helper.from_array(w, name) for name, w in weights.items()])
    x = rng.standard_normal((1, 512)).astype(np.float32)
    grown_mb, peaked_mb, out = _first_load_in_a_fresh_process(
        tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), x,
        device_name)
    assert grown_mb < 40, f"the first load kept {grown_mb} MB of anonymous memory"
    assert peaked_mb < 3 * 48, f"the first load's peak grew by {peaked_mb} MB"
    expected = x
    for w in weights.values():
        expected = np.maximum(expected @ w, 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device_name", ["INTEL_X86", "DEFAULT"])
@pytest.mark.slow
def test_a_weight_transposed_then_packed_is_never_held_twice_beside_its_original(
        tmp_path, device_name):
    """A 64 MB fully connected weight stored N x K (Gemm transB, as VGG's and AlexNet's):
    INTEL_X86 transposes it, then packs it per tile, each into a file a slab at a time, so a
    fresh process's first load peaks at under 2.5 times the weight (the model's bytes and
    the weight read in: 148 MB; 218 while each file was written whole, then left memory)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((2048, 8192)) * 0.02).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "fc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8192])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])],
        [numpy_helper.from_array(w, "w")])
    x = rng.standard_normal((1, 8192)).astype(np.float32)
    _grown_mb, peaked_mb, out = _first_load_in_a_fresh_process(
        tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), x,
        device_name)
    assert peaked_mb < 2.5 * 64, f"the first load's peak grew by {peaked_mb} MB"
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-4, atol=1e-4)
    assert out.dtype == np.float32 and out.shape == (1, 2048)


def test_a_precision_sets_its_item_and_keys_an_engine_of_its_own(tmp_path, monkeypatch):
    path, reference = _mlp(tmp_path / "m.onnx")
    compiled = []

    def compile_recording(computation, *args, **kwargs):
        compiled.append(computation.precision())
        return compile_outputs(computation, *args, **kwargs)

    compile_outputs = session_module.compile_outputs
    monkeypatch.setattr(session_module, "compile_outputs", compile_recording)
    (plain,) = _load(path, tmp_path / "cache").run({"x": X})
    (half,) = _load(path, tmp_path / "cache", precision="fp16").run({"x": X})
    (brain,) = _load(path, tmp_path / "cache", precision="bf16").run({"x": X})
    assert compiled == [None, "fp16", "bf16-performance"]
    assert len(engine_cache.entries(tmp_path / "cache")) == 3
    for out in (plain, half, brain):
        np.testing.assert_allclose(out, reference(X), rtol=5e-2, atol=5e-2)
        assert out.dtype == np.float32 and out.shape == (2, 3)
    # fp32 named is the default's engine; fp16 again reads its own.
    (again,) = _load(path, tmp_path / "cache", precision="fp16").run({"x": X})
    (named,) = _load(path, tmp_path / "cache", precision="fp32").run({"x": X})
    assert len(compiled) == 3 and len(engine_cache.entries(tmp_path / "cache")) == 3
    np.testing.assert_array_equal(again, half)
    np.testing.assert_array_equal(named, plain)
    with pytest.raises(odla.OdlaError) as err:
        _load(path, tmp_path / "cache", precision="int8")
    assert err.value.status == odla.Status.INVALID_PARAM
    assert "precision is 'int8'; expected one of fp32, bf16, fp16" in str(err.value)


_CACHED_RUN = """
import sys
import numpy as np, odla_tvm as odla
session = odla.Session.from_onnx(sys.argv[1], odla.allocate_device(
    device_name=odla.DeviceName[sys.argv[3]]), engine_cache=True, cache_dir=sys.argv[2])
np.save(sys.argv[4], session.run({"x": np.load(sys.argv[5])})[0])
mapped = [line.split()[-1] for line in open("/proc/self/maps") if "libtvm_compiler" in line]
print([name for name in ("tvm", "onnx") if name in sys.modules], mapped[:1])
"""


@pytest.mark.parametrize("device_name", ["INTEL_X86", "DEFAULT"])
def test_a_cached_load_runs_without_the_compiler(tmp_path, device_name):
    """A new process loading a kept engine (Session.from_onnx, a cache hit) and running it
    loads neither TVM's compiler (libtvm_compiler.so) nor onnx: TVM's runtime alone."""
    path, reference = _mlp(tmp_path / "m.onnx", hidden=64)
    device = odla.allocate_device(device_name=odla.DeviceName[device_name])
    _load(path, tmp_path / "cache", device=device)  # compiles, and keeps the engine
    np.save(tmp_path / "x.npy", X)
    done = subprocess.run([sys.executable, "-c", _CACHED_RUN, str(path), str(tmp_path / "cache"),
                           device_name, str(tmp_path / "out.npy"), str(tmp_path / "x.npy")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[] []", done.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference(X), rtol=1e-5, atol=1e-5)


def test_an_engine_built_for_another_onednn_class_is_a_miss():
    """The DEFAULT device's engine key names the CPU class oneDNN reaches: with it lowered
    (ONEDNN_MAX_CPU_ISA, read when libdnnl loads, so in a process of its own) the key
    differs, and an engine built for the higher class is not loaded."""
    script = ("import odla_tvm; from odla_tvm.engine_cache import engine_key; "
              "print(engine_key('model', odla_tvm.allocate_device()))")
    keys = []
    for limit in ("ALL", "SSE41"):
        env = {**os.environ, "ONEDNN_MAX_CPU_ISA": limit}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True)
        keys.append(done.stdout.strip())
    assert len(keys[0]) == 32 and keys[0] != keys[1]
