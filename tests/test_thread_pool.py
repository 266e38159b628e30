"""The process's thread pool for CPU model libraries (targets/cpu/thread_pool.cc): the stored
library points TVM's launch at it, hidden from TVM's loader; kernels with parallel loops and
oneDNN regions (whose OpenMP regions run on it, not on libgomp) give NumPy's results through
it with one thread, two, more threads than cores, spinning, sleeping or choosing, loaded by the
C library and by tvm_ffi; and its OpenMP entry points hand out loop iterations, barriers and
team sizes as libgomp's do, the same C program run against each."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
import reference as ref
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
from targets.cpu import thread_pool
from targets.plugins.onednn import library as onednn_library

RNG = np.random.default_rng(7)
MATMUL_W = RNG.standard_normal((256, 96)).astype(np.float32)
CONV_W = (RNG.standard_normal((32, 16, 3, 3)) * 0.2).astype(np.float32)
MATMUL_X = RNG.standard_normal((5, 256)).astype(np.float32)
CONV_X = RNG.standard_normal((1, 16, 30, 30)).astype(np.float32)


def _save(path, nodes, x_shape, y_shape, weight):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


def matmul_relu(path):
    """A matmul of 5 rows (fewer than the tasks a launch makes) and a relu: TVM's kernels."""
    return _save(path, [helper.make_node("MatMul", ["x", "w"], ["h"]),
                        helper.make_node("Relu", ["h"], ["y"])], (5, 256), (5, 96), MATMUL_W)


def conv_sigmoid_mean(path):
    """A strided conv (a oneDNN region on DEFAULT) and a sigmoid and mean (TVM's kernels)."""
    return _save(path, [helper.make_node("Conv", ["x", "w"], ["h"], strides=[2, 2],
                                         pads=[1, 1, 1, 1]),
                        helper.make_node("Sigmoid", ["h"], ["s"]),
                        helper.make_node("ReduceMean", ["s"], ["y"], axes=[2, 3], keepdims=0)],
                 (1, 16, 30, 30), (1, 32), CONV_W)


def _expected_matmul():
    return np.maximum(MATMUL_X.astype(np.float64) @ MATMUL_W, 0)


def _expected_conv():
    h = ref.conv(CONV_X.astype(np.float64), CONV_W.astype(np.float64), strides=(2, 2),
                 dilations=(1, 1), pads_front=(1, 1), pads_back=(1, 1))
    return (1 / (1 + np.exp(-h))).mean(axis=(2, 3))


def _onednn_here() -> bool:
    try:
        onednn_library.check_available()
    except Exception:  # noqa: BLE001 (any reason it is missing)
        return False
    return True


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """(cache folder, [(model path, device name, NumPy's result, input)]) with the engines
    compiled and kept."""
    folder = tmp_path_factory.mktemp("pool")
    models = [(matmul_relu(folder / "mm.onnx"), "INTEL_X86", _expected_matmul(), MATMUL_X)]
    if _onednn_here():
        models.append((conv_sigmoid_mean(folder / "cv.onnx"), "DEFAULT", _expected_conv(),
                       CONV_X))
    for model, device, expected, x in models:
        session = odla.Session.from_onnx(
            model, odla.allocate_device(device_name=odla.DeviceName[device]),
            engine_cache=True, cache_dir=str(folder))
        np.testing.assert_allclose(session.run({"x": x})[0], expected, rtol=1e-4, atol=1e-5)
    return str(folder), models


def test_the_stored_library_hides_the_launch_from_tvm_s_loader(engines):
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    folder, models = engines
    libraries = [os.path.join(root, name) for root, _, names in os.walk(folder)
                 for name in names if name == "model.so"]
    assert len(libraries) == len(models)
    for library in libraries:
        local = subprocess.run(["nm", library], capture_output=True, text=True,
                               check=True).stdout
        exported = subprocess.run(["nm", "-D", library], capture_output=True, text=True,
                                  check=True).stdout
        for symbol in ("__TVMBackendParallelLaunch", "__TVMBackendParallelBarrier"):
            assert f" d {symbol}\n" in local  # defined, initialized, local
            assert symbol not in exported


_RUN = textwrap.dedent("""
    import ctypes, json, os, sys
    import numpy as np
    if sys.argv[1] == "tvm_ffi":
        import tvm_ffi  # a process that loaded tvm_ffi loads kept engines through it
    import odla_tvm as odla
    out = []
    for model, device in json.loads(sys.argv[2]):
        session = odla.Session.from_onnx(
            model, odla.allocate_device(device_name=odla.DeviceName[device]),
            engine_cache=True, cache_dir=sys.argv[3])
        y = session.run({"x": np.load(model + ".x.npy")})[0]
        out.append([type(session.executable.module).__name__, str(y.dtype), y.tolist()])
    pools = {line.split()[-1] for line in open("/proc/self/maps") if "libodla_threads" in line}
    teams = [ctypes.CDLL(p, mode=os.RTLD_NOLOAD) for p in pools]
    for pool in teams:
        pool.odla_pool_teams.restype = ctypes.c_int64
    print(json.dumps({"results": out, "teams": [pool.odla_pool_teams() for pool in teams]}))
""")


@pytest.mark.parametrize("threads, loader, policy", [
    (1, "c", None), (2, "tvm_ffi", None), (2, "c", "ACTIVE"), (3, "tvm_ffi", "PASSIVE"),
    (2, "c", "PASSIVE")])
def test_kernels_match_numpy_on_every_thread_count_and_wait(engines, threads, loader, policy):
    folder, models = engines
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    env.update({"TVM_NUM_THREADS": str(threads)}, **({"OMP_WAIT_POLICY": policy} if policy
                                                      else {}))
    for model, _, _, x in models:
        np.save(model + ".x.npy", x)
    job = json.dumps([[model, device] for model, device, _, _ in models])
    done = subprocess.run([sys.executable, "-c", _RUN, loader, job, folder], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    # one pool in the process; oneDNN's regions ran their teams on it where they ran at all
    assert len(reply["teams"]) == 1
    if len(models) > 1 and threads > 1:
        assert reply["teams"][0] > 0
    for (kind, dtype, y), (_, _, expected, _) in zip(reply["results"], models):
        assert kind == ("CLibraryModule" if loader == "c" else "CompiledModule")
        assert dtype == "float32"
        assert np.shape(y) == expected.shape
        np.testing.assert_allclose(np.array(y), expected, rtol=1e-4, atol=1e-5)


_FORK = textwrap.dedent("""
    import os, sys
    import numpy as np
    import odla_tvm as odla
    session = odla.Session.from_onnx(
        sys.argv[1], odla.allocate_device(device_name=odla.DeviceName.INTEL_X86),
        engine_cache=True, cache_dir=sys.argv[2])
    x = np.load(sys.argv[1] + ".x.npy")
    first = session.run({"x": x})[0]  # the pool's workers started
    child = os.fork()
    if child == 0:  # the child has none of them; it runs, and exits through its destructors
        sys.exit(0 if np.array_equal(session.run({"x": x})[0], first) else 3)
    _, status = os.waitpid(child, 0)
    print(os.waitstatus_to_exitcode(status), np.array_equal(session.run({"x": x})[0], first))
""")


def test_a_forked_child_runs_and_exits(engines):
    folder, models = engines
    model, _, _, x = models[0]
    np.save(model + ".x.npy", x)
    done = subprocess.run([sys.executable, "-c", _FORK, model, folder], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "TVM_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["0", "True"]


def test_a_library_whose_pool_is_gone_runs_on_tvm_s_pool(tmp_path):
    """A kept engine copied where the pool's library is not (here: the pool moved away after
    the build) still loads, and runs its loops on TVM's own pool."""
    model = matmul_relu(tmp_path / "mm.onnx")
    np.save(model + ".x.npy", MATMUL_X)
    env = {**os.environ, "TVM_NUM_THREADS": "2", "ODLA_TVM_CACHE_DIR": str(tmp_path / "cache")}
    job = json.dumps([[model, "INTEL_X86"]])
    replies = []
    for moved in (False, True):
        if moved:
            for built in (tmp_path / "cache").rglob("libodla_threads.so"):
                built.rename(built.with_name("moved.so"))
        done = subprocess.run([sys.executable, "-c", _RUN, "c", job, str(tmp_path / "engines")],
                              env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        replies.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert len(replies[0]["teams"]) == 1 and replies[1]["teams"] == []
    for reply in replies:
        (kind, dtype, y), = reply["results"]
        assert dtype == "float32"
        np.testing.assert_allclose(np.array(y), _expected_matmul(), rtol=1e-4, atol=1e-5)


def test_a_module_run_in_memory_before_it_is_kept_matches_numpy(tmp_path):
    session = odla.Session.from_onnx(matmul_relu(tmp_path / "mm.onnx"),
                                     odla.allocate_device(device_name=odla.DeviceName.INTEL_X86),
                                     engine_cache=False, cache_dir=str(tmp_path))
    y = session.run({"x": MATMUL_X})[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, _expected_matmul(), rtol=1e-4, atol=1e-5)


def test_the_pool_s_openmp_entry_points_give_libgomp_s_teams_loops_and_barriers(tmp_path):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    program = tmp_path / "openmp_team"
    # bound when it loads (-z now), as libdnnl's imports are
    built = subprocess.run(["gcc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-fopenmp",
                            "-Wl,-z,now", str(Path(__file__).with_name("c_api") / "openmp_team.c"),
                            thread_pool.library_path(), "-o", str(program)],
                           capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("OMP_", "GOMP_"))}
    runs = [subprocess.run([str(program), *mode], capture_output=True, text=True, timeout=120,
                           env=env, check=False) for mode in ([], ["pool"])]
    for done in runs:
        assert done.returncode == 0, done.stderr[-2000:]
    gomp, pool = runs
    # all eleven OpenMP imports of the program now lead to the pool
    assert pool.stderr.split() == ["adopted", "11"]
    assert gomp.stdout.count("\n") == 76  # 37 teams' loops and members, 2 lines outside
    assert "loop 1000 3 -4 5 on 3:" in gomp.stdout
    assert pool.stdout == gomp.stdout
