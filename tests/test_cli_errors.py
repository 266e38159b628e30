"""The odla-tvm command facing a user's mistakes and its `run` command: every mistake in the
arguments is one line on stderr and exit status 2 (a failure of the job: 1), never a
traceback; a closed stdout ends it quietly; `run` round-trips inputs and outputs as the
Python API computes them; `bench` writes only where -o says."""

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
from odla_tvm import cli as cli_module
from odla_tvm.bench.results import ModelResult
from odla_tvm.cli import main as cli
from odla_tvm.profiler import random_inputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
B = np.array([0.5, -0.25, 1.0], np.float32)


def _model(path, batch=2):
    """y = x @ W + B, x of shape (batch, 4) (batch may be a symbolic name)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A model, inputs good and bad, a text file, a plain directory; the cache in tmp_path."""
    monkeypatch.setenv("ODLA_TVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    paths = {"model": _model(tmp_path / "m.onnx"), "dir": str(tmp_path / "folder"),
             "text": str(tmp_path / "notes.txt")}
    os.mkdir(paths["dir"])
    with open(paths["text"], "w") as f:
        f.write("not data\n")
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    arrays = {"x": x, "x64": x.astype(np.float64), "x35": np.ones((3, 5), np.float32)}
    for name, array in arrays.items():
        paths[name] = str(tmp_path / f"{name}.npy")
        np.save(paths[name], array)
    return paths


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    return err


# (arguments, with {name} for the files of the fixture; exit status; what stderr says)
MISTAKES = [
    ([], 2, "odla-tvm: error: the following arguments are required: command"),
    (["frob"], 2, "argument command: invalid choice: 'frob'"),
    (["run"], 2, "odla-tvm run: error: the following arguments are required: model"),
    (["run", "{model}", "--runs", "0"], 2, "odla-tvm run: error: --runs is 0; expected an "
     "integer >= 1"),
    (["run", "{model}", "--runs", "-3"], 2, "--runs is -3; expected an integer >= 1"),
    (["run", "{model}", "--runs", "many"], 2, "argument --runs: invalid int value: 'many'"),
    (["run", "missing.onnx"], 2, "MODEL 'missing.onnx' does not exist"),
    (["run", "{dir}"], 2, "is a directory but not an exported bundle (it has no manifest.json)"),
    (["run", "{model}", "--device", "TPU"], 2, "--device: device name is 'TPU'; expected an "
     "ODLA DeviceName: one of DEFAULT, "),
    (["run", "{model}", "--precision", "int8"], 2, "odla-tvm run: error: --precision is 'int8'; "
     "expected one of fp32, bf16, fp16"),
    (["bench", "{model}", "--precision", "int4"], 2, "odla-tvm bench: error: --precision is "
     "'int4'; expected one of fp32, bf16, fp16, int8"),
    (["export", "{model}", "-o", "new", "--precision", "fp8"], 2, "odla-tvm export: error: "
     "--precision is 'fp8'; expected one of fp32, bf16, fp16"),
    (["tune", "{model}", "--precision", "half"], 2, "odla-tvm tune: error: --precision is "
     "'half'; expected one of fp32, bf16, fp16"),
    (["run", "{model}", "--output", "{text}"], 2, "notes.txt' exists; refusing to overwrite it "
     "(give a new path, or add --force to replace it)"),
    (["run", "{model}", "--output", "{dir}"], 2, "folder' is a directory; expected a file name"),
    (["run", "{model}", "--output", "{text}/out.npz"], 2, "cannot be written: "),
    (["run", "{model}", "--input", "{x}"], 2, "x.npy': expected NAME=FILE.npy"),
    (["run", "{model}", "--input", "=x.npy"], 2, "expected NAME=FILE.npy"),
    (["run", "{model}", "--input", "z={x}"], 2, "--input names ['z'], not inputs of the "
     "model; its inputs: x"),
    (["run", "{model}", "--input", "x=missing.npy"], 2, "--input x: 'missing.npy' does not exist"),
    (["run", "{model}", "--input", "x={dir}"], 2, "folder' is a directory; expected a file"),
    (["run", "{model}", "--input", "x={text}"], 2, "notes.txt' is not a .npy file"),
    (["run", "{model}", "--input", "x={x64}"], 2, "--input x: the file holds float64 (2, 4); "
     "expected float32 (2, 4)"),
    (["run", "{model}", "--input", "x={x35}"], 2, "holds float32 (3, 5); expected float32 (2, 4)"),
    (["run", "{model}", "--input", "x={x}", "--input", "x={x}"], 2, "--input names 'x' twice"),
    (["run", "{model}", "--device", "NVIDIA_GPU"], 1, "odla-tvm: error: [UNSUPPORTED_DEVICE_TYPE] "
     "device NVIDIA_GPU cannot run here: no CUDA device"),
    (["run", "{text}"], 1, "odla-tvm: error: [INVALID_PARAM] not a valid odla-tvm executable"),
    (["profile", "{model}", "--runs", "0"], 2, "odla-tvm profile: error: --runs is 0"),
    (["profile", "{model}", "--top", "0"], 2, "--top is 0; expected an integer >= 1"),
    (["profile", "{model}", "-o", "{text}"], 2, "notes.txt' exists; refusing to overwrite it"),
    (["profile", "missing.onnx"], 2, "MODEL 'missing.onnx' does not exist"),
    (["bench", "{model}", "--batch", "0"], 2, "odla-tvm bench: error: --batch is 0"),
    (["bench", "{model}", "--batch", "-1"], 2, "--batch is -1; expected an integer >= 1"),
    (["bench", "{model}", "--threads", "0"], 2, "--threads is 0; expected an integer >= 1"),
    (["bench", "{model}", "--runs", "0"], 2, "--runs is 0; expected an integer >= 3"),
    (["bench", "{dir}"], 2, "model file '{dir}' is a directory; expected a file"),
    (["bench", "{model}", "-o", "{text}"], 2, "notes.txt' exists; refusing to overwrite it"),
    (["bench", "{model}", "--cache-dir", "{text}"], 2, "--cache-dir '{text}' is not a directory"),
    (["export", "{model}", "-o", "{text}"], 2, "odla-tvm export: error: -o: {text} exists and "
     "is not an odla-tvm bundle; refusing to overwrite it"),
    (["export", "{model}", "-o", "new", "--target", "tpu-v9"], 2, "--target: unknown target "
     "'tpu-v9'; available: aarch64-linux"),
    (["export", "{model}"], 2, "the following arguments are required: -o/--output"),
    (["rpc-server", "--target", "tpu-v9"], 2, "odla-tvm rpc-server: error: --target: unknown "
     "target 'tpu-v9'"),
    (["rpc-server", "--tracker", "nohost"], 2, "--tracker is 'nohost'; expected HOST:PORT"),
    (["cache", "--cache-dir", "{text}"], 2, "odla-tvm cache: error: --cache-dir '{text}' is "
     "not a directory"),
    (["cache", "empty"], 2, "argument action: invalid choice: 'empty'"),
    (["info", "--target-spec", "{text}"], 2, "odla-tvm info: error: --target-spec '{text}' "
     "exists; refusing to overwrite it"),
    (["info", "--target-spec", "{dir}"], 2, "folder' is a directory; expected a file name"),
]


@pytest.mark.parametrize("args, status, message", MISTAKES,
                         ids=[" ".join(m[0]) or "nothing" for m in MISTAKES])
def test_a_mistake_is_one_line_and_its_exit_status(files, capsys, args, status, message):
    assert cli([a.format(**files) for a in args]) == status
    out, err = capsys.readouterr()
    assert message.format(**files) in _one_line(err)
    assert err.startswith("odla-tvm")
    assert not os.path.exists("new") and not os.path.exists(os.path.join(files["text"], "out.npz"))


def test_an_unreadable_file_is_a_mistake(files, capsys, monkeypatch):
    os.chmod(files["x"], 0)
    if os.geteuid() == 0:  # root reads it anyway: the check's own question is answered no
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: path != files["x"]
                            and access(path, mode, **kw))
    for args in (["run", files["x"]], ["run", files["model"], "--input", f"x={files['x']}"]):
        assert cli(args) == 2
        assert "x.npy' cannot be read (permission denied)" in _one_line(capsys.readouterr().err)


def test_a_bug_is_one_line_unless_asked_for_its_traceback(files, capsys, monkeypatch):
    def broken(_args):
        raise RuntimeError("something broke\nTVM's long story")

    monkeypatch.setitem(cli_module.COMMANDS, "cache", broken)
    assert cli(["cache"]) == 1
    assert _one_line(capsys.readouterr().err) == (
        "odla-tvm: internal error: RuntimeError: something broke (rerun with "
        "ODLA_TVM_DEBUG=1 for the traceback)\n")
    monkeypatch.setenv("ODLA_TVM_DEBUG", "1")
    with pytest.raises(RuntimeError, match="something broke"):
        cli(["cache"])


def test_version(capsys):
    assert cli(["--version"]) == 0
    assert capsys.readouterr().out == f"odla-tvm {odla.__version__}\n"


def test_run_round_trips_inputs_and_outputs_as_the_python_api(files, capsys, tmp_path):
    out = str(tmp_path / "outs" / "y.npz")  # its folder is made
    assert cli(["run", files["model"], "--input", f"x={files['x']}", "--output", out,
                "--runs", "2"]) == 0
    printed = capsys.readouterr().out
    x = np.load(files["x"])
    (expected,) = odla.Session.from_onnx(files["model"]).run({"x": x})
    with np.load(out) as saved:
        assert list(saved) == ["y"]
        y = saved["y"]
    assert y.dtype == expected.dtype == np.float32 and y.shape == expected.shape == (2, 3)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y, x @ W + B, rtol=1e-5, atol=1e-5)
    assert f"output y: float32 (2, 3): [{y.reshape(-1)[0]:.5f}" in printed
    assert f"outputs written to {out} (keys: y)" in printed
    assert "latency over 2 runs after the first: median " in printed
    assert "(device DEFAULT, fp32)" in printed
    # The same path again: refused, unless --force.
    assert cli(["run", files["model"], "--output", out, "--runs", "1"]) == 2
    assert "exists; refusing to overwrite it" in _one_line(capsys.readouterr().err)
    assert cli(["run", files["model"], "--output", out, "--runs", "1", "--force"]) == 0
    with np.load(out) as saved:  # now seeded random inputs: what random_inputs makes
        session = odla.Session.from_onnx(files["model"])
        (expected,) = session.run(random_inputs(session.executable))
        np.testing.assert_allclose(saved["y"], expected, rtol=1e-6, atol=1e-6)
    assert "input x: seeded random float32 (2, 4)\n" in capsys.readouterr().out


def test_run_a_stored_executable_and_a_dynamic_model_in_a_precision(files, capsys, tmp_path):
    stored = str(tmp_path / "m.odla")
    odla.Session.from_onnx(files["model"]).save(stored)
    assert cli(["run", stored, "--input", f"x={files['x']}", "--output", "s.npz",
                "--runs", "1"]) == 0
    x = np.load(files["x"])
    np.testing.assert_allclose(np.load("s.npz")["y"], x @ W + B, rtol=1e-5, atol=1e-5)
    assert cli(["run", stored, "--precision", "fp16"]) == 2
    err = _one_line(capsys.readouterr().err)
    assert "--precision fp16 applies where MODEL compiles here" in err
    dynamic = _model(tmp_path / "dynamic.onnx", batch="n")
    assert cli(["run", dynamic, "--precision", "fp16", "--runs", "1", "--output", "d.npz"]) == 0
    printed = capsys.readouterr().out
    assert "input x: seeded random float32 (1, 4) (its dynamic dims set to 1)" in printed
    assert "(device DEFAULT, fp16)" in printed
    data = random_inputs(odla.Session.from_onnx(dynamic).executable)["x"]
    np.testing.assert_allclose(np.load("d.npz")["y"], data @ W + B, rtol=2e-2, atol=2e-2)


def test_export_and_tune_compile_in_the_precision_asked_for(files, capsys, tmp_path,
                                                            monkeypatch):
    """Their jobs replaced by stand-ins that note what they were given."""
    given = {}
    monkeypatch.setattr(cli_module, "export_bundle", lambda model, *_args, **_kw:
                        given.setdefault("export", model.precision()) and tmp_path)
    (tmp_path / "README.txt").write_text("")
    assert cli(["export", files["model"], "-o", "b", "--precision", "bf16"]) == 0
    monkeypatch.setattr("odla_tvm.tuning.tune", lambda *_args, **kw: SimpleNamespace(
        summary=lambda: given.setdefault("tune", kw["precision"])))
    assert cli(["tune", files["model"], "--precision", "fp16"]) == 0
    assert given == {"export": "bf16-performance", "tune": "fp16"}
    stored = str(tmp_path / "m.odla")
    odla.Session.from_onnx(files["model"]).save(stored)
    for command in (["export", stored, "-o", "b2"], ["tune", stored]):
        assert cli([*command, "--precision", "bf16"]) == 2
        assert "--precision bf16 applies where MODEL compiles here" in \
            _one_line(capsys.readouterr().err)


def test_bench_writes_only_where_o_says_and_leaves_a_repository_clean(files, capsys, tmp_path,
                                                                      monkeypatch):
    """From a repository's root (the bench itself replaced by a quick stand-in)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    with open(os.path.join(ROOT, ".gitignore")) as f:
        (repo / ".gitignore").write_text(f.read())
    git = lambda *args: subprocess.run(["git", *args], cwd=repo, capture_output=True,  # noqa: E731
                                       text=True, check=True).stdout
    git("init", "-q")
    git("add", ".gitignore")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.chdir(repo)
    monkeypatch.setattr(cli_module.bench_driver, "bench_models",
                        lambda models, *args, **kwargs: [ModelResult(n, p, error="stand-in")
                                                         for n, p in models])
    monkeypatch.setattr(cli_module, "call_overhead",
                        lambda: {"bare VM call": 1.0, "Session.run": 3.5})
    for _ in range(2):  # the second replaces the report the first wrote
        assert cli(["bench", files["model"]]) == 0
        assert "written to odla-bench/perf.md" in capsys.readouterr().out
    assert git("status", "--porcelain", "--ignored") == "!! odla-bench/\n"
    assert git("status", "--porcelain") == ""
    assert os.listdir(repo / "odla-bench") == ["perf.md"]
    # Not over a file that is no bench report, unless --force.
    (repo / "notes.md").write_text("# My notes\n")
    assert cli(["bench", files["model"], "-o", "notes.md"]) == 2
    assert "notes.md' exists; refusing to overwrite it" in _one_line(capsys.readouterr().err)
    assert (repo / "notes.md").read_text() == "# My notes\n"
    assert cli(["bench", files["model"], "-o", "notes.md", "--force"]) == 0
    assert (repo / "notes.md").read_text().startswith("# Performance: ODLA-TVM")
    # A chart beside a new report is no bench's either.
    (repo / "fresh.png").write_bytes(b"a picture")
    assert cli(["bench", files["model"], "-o", "fresh.md"]) == 2
    assert "-o's chart 'fresh.png' exists" in _one_line(capsys.readouterr().err)


def test_bench_without_onnxruntime_says_how_to_install_it(files, capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args:
                        None if name == "onnxruntime" else find_spec(name, *args))
    assert cli(["bench", files["model"], "-o", "perf.md"]) == 1
    assert _one_line(capsys.readouterr().err) == (
        "odla-tvm: error: [DL_ERROR] onnxruntime is not installed (no module named "
        "'onnxruntime'); pip install -e '.[bench]'\n")
    assert not os.path.exists("perf.md")


def _command(*args):
    return [sys.executable, "-m", "odla_tvm.cli", *args]


def _environment(tmp_path):
    return {**os.environ, "PYTHONPATH": ROOT, "ODLA_TVM_CACHE_DIR": str(tmp_path / "cache")}


def test_in_a_process_of_its_own_mistakes_are_one_line_and_a_closed_pipe_is_quiet(files,
                                                                               tmp_path):
    for args, message in [(["run", "missing.onnx"], "MODEL 'missing.onnx' does not exist"),
                          (["bench", files["model"], "--batch", "-1"], "--batch is -1")]:
        done = subprocess.run(_command(*args), capture_output=True, text=True, timeout=120,
                              env=_environment(tmp_path), cwd=tmp_path)
        assert done.returncode == 2 and message in _one_line(done.stderr), done.stderr
    # `| head -1` as a user types it, and `| true`, which closes the pipe before anything
    # is written: no stderr, and 0 or 141 (as a shell's command killed by SIGPIPE).
    command = " ".join(_command("cache"))
    for reader in ("head -1", "true"):
        done = subprocess.run(["bash", "-c", f"{command} 2>err.txt | {reader}; "
                               "echo ${PIPESTATUS[0]}"], capture_output=True, text=True,
                              timeout=120, env=_environment(tmp_path), cwd=tmp_path)
        assert done.stdout.splitlines()[-1] in ("0", "141"), done.stdout
        assert (tmp_path / "err.txt").read_text() == "", reader
