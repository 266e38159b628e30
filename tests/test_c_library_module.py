"""A cached engine loaded by a process that has not loaded tvm_ffi runs in ODLA's C library
(odla_tvm.c_library_module): no tvm_ffi, no importlib.metadata, no compiler in the process,
the same outputs; what needs the compiled module switches to it; an engine whose code calls
the run-time checks runs there too, refusing bad data with Python's message."""

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
from odla_tvm import engine_cache
from odla_tvm.device import default_plugin_missing

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


def _mlp(path, hidden=64):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((4, hidden)).astype(np.float32)
    w2 = rng.standard_normal((hidden, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path), lambda x: np.maximum(x @ w1, 0) @ w2


def _gather(path):
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)], "gather",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [numpy_helper.from_array(table, "table")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path), table


_CACHED_PROCESS = """
import sys
import numpy as np, odla_tvm as odla
model, cache, device, feeds = sys.argv[1:5]
session = odla.Session.from_onnx(model, odla.allocate_device(
    device_name=odla.DeviceName[device]), engine_cache=True, cache_dir=cache)
loaded = [n for n in ("tvm_ffi", "importlib.metadata", "tvm") if n in sys.modules]
loaded += ["libodla_tvm"] if "libodla_tvm" in open("/proc/self/maps").read() else []
print(type(session.executable.module).__name__, loaded)
try:
    outputs = session.run(dict(np.load(feeds)))
    np.save(sys.argv[5], outputs[0])
    print("ran")
except odla.OdlaError as err:
    print(err.status.name, str(err).splitlines()[0])
if sys.argv[6:] == ["store"]:  # needs the compiled module, through tvm_ffi
    session.executable.store(sys.argv[5] + ".odla")
    again = session.run(dict(np.load(feeds)))[0]
    print("stored", "tvm_ffi" in sys.modules, bool(np.array_equal(again, outputs[0])))
"""


def _cached_process(tmp_path, model, device_name, feeds, *extra, env=None) -> list[str]:
    np.savez(tmp_path / "feeds.npz", **feeds)
    done = subprocess.run([sys.executable, "-c", _CACHED_PROCESS, model, str(tmp_path / "cache"),
                           device_name, str(tmp_path / "feeds.npz"), str(tmp_path / "out.npy"),
                           *extra], capture_output=True, text=True, timeout=300,
                          env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.mark.parametrize("device_name", ["INTEL_X86", "INTEL_DNNL"])
def test_a_cached_engine_runs_in_the_c_library_without_tvm_ffi(tmp_path, device_name):
    if device_name == "INTEL_DNNL" and default_plugin_missing() is not None:
        pytest.skip(default_plugin_missing())
    path, reference = _mlp(tmp_path / "m.onnx")
    device = odla.allocate_device(device_name=odla.DeviceName[device_name])
    odla.Session.from_onnx(path, device, engine_cache=True, cache_dir=tmp_path / "cache")
    lines = _cached_process(tmp_path, path, device_name, {"x": X}, "store")
    assert lines[:2] == ["CLibraryModule ['libodla_tvm']", "ran"]
    out = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(out, reference(X), rtol=1e-5, atol=1e-5)
    assert out.dtype == np.float32 and out.shape == (2, 3)
    # storing it again loads the compiled module, which then runs: the same outputs
    assert lines[2] == "stored True True"
    stored = odla.Session(str(tmp_path / "out.npy.odla"), device).run({"x": X})[0]
    np.testing.assert_array_equal(stored, out)


def test_an_engine_with_run_time_checks_runs_in_the_c_library_and_keeps_its_errors(tmp_path):
    path, table = _gather(tmp_path / "g.onnx")
    session = odla.Session.from_onnx(path, engine_cache=True, cache_dir=tmp_path / "cache")
    (entry,) = engine_cache.entries(tmp_path / "cache")
    manifest = json.loads((entry.path / "manifest.json").read_text())
    assert manifest["python_functions"] == ["odla_tvm.check_indices"]
    lines = _cached_process(tmp_path, path, "DEFAULT", {"idx": np.array([1, 2, 9])})
    assert lines[0] == "CLibraryModule ['libodla_tvm']"  # no tvm_ffi, no compiler
    assert lines[1] == "ran"
    out = np.load(tmp_path / "out.npy")
    np.testing.assert_array_equal(out, table[[1, 2, 9]])
    assert out.dtype == np.float32 and out.shape == (3, 4)
    with pytest.raises(odla.OdlaError) as python_run:  # the same refusal, through tvm_ffi
        session.run({"idx": np.array([1, 12, 9])})
    lines = _cached_process(tmp_path, path, "DEFAULT", {"idx": np.array([1, 12, 9])})
    assert lines[0] == "CLibraryModule ['libodla_tvm']"
    assert lines[1] == f"INVALID_PARAM {str(python_run.value).splitlines()[0]}"


def test_without_the_c_library_a_cached_engine_runs_through_tvm_ffi(tmp_path):
    """Where the C library is not built (a folder without it), the engine loads as before."""
    path, reference = _mlp(tmp_path / "m.onnx")
    odla.Session.from_onnx(path, engine_cache=True, cache_dir=tmp_path / "cache")
    lines = _cached_process(tmp_path, path, "DEFAULT", {"x": X},
                            env={"ODLA_TVM_LIBODLA_DIR": str(tmp_path / "no-library")})
    assert lines == ["CompiledModule ['tvm_ffi', 'importlib.metadata']", "ran"]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference(X), rtol=1e-5, atol=1e-5)
