"""Tuning through TVM's RPC tracker: a tracker and RPC servers (TVM's own, in subprocesses on
127.0.0.1, always killed afterwards) measure what is built here; every server measures, the
records apply at compile time, a server killed mid-run costs no record, and bad arguments or
an empty tracker end in OdlaError naming what was given and what was expected. A board's
server (odla_rpc_server, built for aarch64) runs here under qemu and measures aarch64-linux
candidates."""

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm.rpc import base

import odla_tvm as odla
import targets
import targets.tuning.rpc
from odla_tvm import Status
from odla_tvm.cli import main as cli
from odla_tvm.frontends.onnx import import_model
from targets.tuning.builder import export_shared
from targets.tuning.run_off import RUN_OFF_ROUNDS

QEMU = shutil.which("qemu-aarch64-static")
X = np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32)
# Tuned through local servers, so it must run here: LLVM's AVX2 level, as another machine's CPU.
REMOTE = "llvm:x86-64-v3:2"

pytestmark = pytest.mark.skipif(
    os.uname().machine != "x86_64" or not targets.get_target(REMOTE).runs_here(),
    reason="the servers here run x86-64-v3 code: needs an x86-64 CPU with AVX2 and FMA")


def matmul_onnx(path):
    """A matmul and a relu: one kernel, with a large search space."""
    weight = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["out"])],
        "matmul_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (16, 64))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (16, 64))],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalFleet:
    """A tracker and servers on 127.0.0.1, each in its own process group (a server forks a
    process per session: killing the group kills what it is measuring too)."""

    def __init__(self, logs):
        self.logs = logs
        self.port = _free_port()
        self.processes = []
        self.tracker = self._start("tracker", "tvm.exec.rpc_tracker")
        deadline = time.monotonic() + 60
        while True:  # servers retry a missing tracker only every 5 s: start them once it listens
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (self.logs / "tracker.log").read_text()
                time.sleep(0.1)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name, module, *args):
        port = self.port if name == "tracker" else _free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--host", "127.0.0.1", "--port", str(port),
             "--port-end", str(port + 1), *args],
            stdout=open(self.logs / f"{name}.log", "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        self.processes.append(process)
        return process

    def servers(self, key, count):
        """``count`` servers under ``key``, once the tracker has them all free: their
        processes, and their addresses."""
        started = [self._start(f"{key}{i}", "tvm.exec.rpc_server", "--tracker", self.address,
                               "--key", key) for i in range(count)]
        tracker = targets.Tracker("127.0.0.1", self.port, key)
        deadline = time.monotonic() + 60
        while tracker.servers()[1] < count:
            assert time.monotonic() < deadline, "the RPC servers did not register"
            time.sleep(0.2)
        return started, sorted(tracker.servers()[0])

    def board_server(self, key, directory):
        """odla_rpc_server of ``directory`` (built for aarch64) under qemu, registered under
        ``key``, once the tracker has it free: its process and its address."""
        port = _free_port()
        process = subprocess.Popen(
            [QEMU, "-L", "/usr/aarch64-linux-gnu", str(directory / "odla_rpc_server"),
             "--tracker", self.address, "--key", key, "--host", "127.0.0.1", "--port", str(port),
             "--port-end", str(port + 1), "--work-dir", str(self.logs)],
            stdout=open(self.logs / f"{key}0.log", "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        self.processes.append(process)
        tracker = targets.Tracker("127.0.0.1", self.port, key)
        deadline = time.monotonic() + 60
        while tracker.servers()[1] < 1:
            assert process.poll() is None, (self.logs / f"{key}0.log").read_text()
            assert time.monotonic() < deadline, "odla_rpc_server did not register"
            time.sleep(0.2)
        return process, f"127.0.0.1:{port}"

    def sessions(self, name) -> int:
        """Sessions a server served, by its log."""
        return (self.logs / f"{name}.log").read_text().count("connected from")

    def kill(self, process):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def close(self):
        for process in self.processes:
            self.kill(process)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    local = LocalFleet(tmp_path_factory.mktemp("rpc"))
    try:
        yield local
    finally:
        local.close()


def _records(directory):
    lines = (directory / "database_tuning_record.json").read_text().splitlines()
    return [json.loads(line)[1][1] for line in lines]


def _measurements(report, trials):
    """What a run of ``trials`` measured on its servers: each trial, the kernel's default
    schedule once and, where that took RUN_OFF_MIN_S or more (a busy machine: the suite's
    other worker), the rounds of the run-off between the best record and it."""
    run_offs = json.loads((report.directory / "target.json").read_text()).get("run_offs", {})
    return trials + 1 + 2 * RUN_OFF_ROUNDS * len(run_offs)


def _run(module):
    return module.run([X])[0]


def test_two_servers_measure_and_the_records_apply(fleet, tmp_path):
    model = matmul_onnx(tmp_path / "m.onnx")
    _, addresses = fleet.servers("two", 2)
    report = odla.tune(model, REMOTE, trials=32, cache_dir=tmp_path, rpc_tracker=fleet.address,
                       rpc_key="two", progress=False)
    assert (report.trials_run, report.trials_recorded, report.stopped_by) == (32, 32, "trials")
    # Both servers measured: by what the runner counted, and by the servers' own logs; the
    # kernel's default schedule too, once, before its candidates.
    assert report.tasks == 1
    assert sorted(report.measured_on) == addresses, report.measured_on
    assert all(count > 0 for count in report.measured_on.values())
    measurements = _measurements(report, 32)
    assert sum(report.measured_on.values()) == measurements and report.measured_again == 0
    sessions = [fleet.sessions(f"two{i}") for i in range(2)]
    assert all(sessions) and sum(sessions) == measurements, sessions
    records = _records(report.directory)
    assert len(records) == 32 and all(max(secs) < 1 for secs in records)
    run = json.loads((report.directory / "target.json").read_text())["runs"][-1]
    assert run["rpc_key"] == "two" and run["measured_on"] == report.measured_on
    assert "measured on 2 RPC servers" in report.summary()
    # The records are those host-cpu looks for on a machine of that CPU (a fleet's database
    # ships with its models), and compiles for the target apply them.
    spec = targets.get_target(REMOTE)
    there = dataclasses.replace(targets.host_cpu(), target=spec.target)
    assert targets.TuningDatabase(there, tmp_path).directory == report.directory
    comp = import_model(model)
    database = targets.find_database(spec, tmp_path)
    [default_s] = database.default_seconds().values()
    assert 0 < default_s < 1
    # Records apply where they beat the kernel's default schedule: said here to take 1 s.
    database.add_default_seconds(dict.fromkeys(database.default_seconds(), 1.0))
    tuned = targets.compile_module(comp.build_module(), spec, database=database)
    plain = targets.compile_module(comp.build_module(), spec, database=None)
    assert tuned.tuned_kernels == ["fused_matmul_relu_prepacked"] and plain.tuned_kernels == []
    np.testing.assert_allclose(_run(tuned), np.maximum(X @ onnx.numpy_helper.to_array(
        onnx.load(model).graph.initializer[0]), 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_run(tuned), _run(plain), rtol=1e-5, atol=1e-5)


def test_a_server_lost_mid_run_costs_no_record(fleet, tmp_path):
    model = matmul_onnx(tmp_path / "m.onnx")
    (doomed, _), addresses = fleet.servers("lose", 2)

    def kill_on_third_session():
        # The server logs a session as it opens it, then measures for 0.1 s at least.
        deadline = time.monotonic() + 300
        while fleet.sessions("lose0") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        fleet.kill(doomed)

    killer = threading.Thread(target=kill_on_third_session, daemon=True)
    killer.start()
    report = odla.tune(model, "host-cpu", trials=16, cache_dir=tmp_path,
                       rpc_tracker=fleet.address, rpc_key="lose", progress=False)
    killer.join()
    assert doomed.poll() is not None
    assert (report.trials_run, report.stopped_by) == (16, "trials")
    # The candidate the lost server was measuring was measured again on the other: every
    # trial has its record, with a run time (a lost measurement would read 1e10 s).
    assert report.measured_again >= 1
    assert sum(report.measured_on.values()) == _measurements(report, 16)
    assert report.measured_on[max(addresses, key=lambda a: report.measured_on.get(a, 0))] >= 8
    records = _records(report.directory)
    assert len(records) == 16 and all(max(secs) < 1 for secs in records)


def test_no_free_server_ends_after_a_bounded_wait(fleet, tmp_path, monkeypatch):
    monkeypatch.setattr(targets.tuning.rpc, "SERVER_WAIT_S", 1.0)
    started = time.monotonic()
    with pytest.raises(odla.OdlaError) as err:
        odla.tune(matmul_onnx(tmp_path / "m.onnx"), trials=2, cache_dir=tmp_path,
                  rpc_tracker=fleet.address, rpc_key="nobody")
    assert time.monotonic() - started < 30
    assert err.value.status == Status.TIMEOUT
    message = str(err.value)
    assert f"no free RPC server under key 'nobody' at the tracker {fleet.address}" in message
    assert "after waiting 1 s" in message
    assert f"python -m tvm.exec.rpc_server --tracker {fleet.address} --key nobody" in message


def test_bad_rpc_arguments_are_refused(tmp_path, capsys):
    model = matmul_onnx(tmp_path / "m.onnx")
    nothing = f"127.0.0.1:{_free_port()}"
    bad = [
        ({"rpc_tracker": "localhost", "rpc_key": "k"}, Status.INVALID_PARAM,
         "rpc_tracker is 'localhost'; expected 'HOST:PORT'"),
        ({"rpc_tracker": "h:port", "rpc_key": "k"}, Status.INVALID_PARAM, "rpc_tracker is 'h:port'"),
        ({"rpc_tracker": "h:70000", "rpc_key": "k"}, Status.INVALID_PARAM, "a port 1-65535"),
        ({"rpc_tracker": 9190, "rpc_key": "k"}, Status.INVALID_PARAM, "rpc_tracker is 9190"),
        ({"rpc_tracker": "h:9190"}, Status.INVALID_PARAM, "rpc_tracker is given without rpc_key"),
        ({"rpc_key": "k"}, Status.INVALID_PARAM, "rpc_key is given without rpc_tracker"),
        ({"rpc_tracker": "h:9190", "rpc_key": "a:b"}, Status.INVALID_PARAM,
         "rpc_key is 'a:b'; expected a non-empty string without ':'"),
        ({"rpc_tracker": "h:9190", "rpc_key": ""}, Status.INVALID_PARAM, "rpc_key is ''"),
        ({"rpc_tracker": nothing, "rpc_key": "k"}, Status.FAILURE,
         f"rpc_tracker '{nothing}': cannot reach an RPC tracker at {nothing}"),
    ]
    for kwargs, status, fragment in bad:
        with pytest.raises(odla.OdlaError) as err:
            odla.tune(model, trials=2, cache_dir=tmp_path, **kwargs)
        assert err.value.status == status and fragment in str(err.value), (kwargs, err.value)
    assert "python -m tvm.exec.rpc_tracker" in str(err.value)
    assert cli(["tune", model, "--trials", "2", "--rpc-tracker", "localhost",
                "--rpc-key", "k"]) == 1
    assert "rpc_tracker is 'localhost'" in capsys.readouterr().err


def test_another_machines_cpu_is_a_target(tmp_path):
    spec = targets.get_target("llvm:skylake-avx512:16")
    assert spec.target == {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 16}
    assert "avx512f" in spec.cpu_flags and spec.database_name == "host-cpu"
    arm = targets.get_target("llvm:cortex-a76:4")
    assert (arm.arch, arm.cross_compiler) == ("aarch64", "aarch64-linux-gnu-g++")
    assert arm.target["mtriple"] == "aarch64-linux-gnu"
    model = matmul_onnx(tmp_path / "m.onnx")
    with pytest.raises(odla.OdlaError) as err:
        odla.tune(model, "llvm:skylake-avx512:16", trials=2, cache_dir=tmp_path)
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE
    assert "another machine's CPU" in str(err.value) and "--rpc-tracker" in str(err.value)
    for name, fragment in [("llvm:skylak:16", "LLVM knows no CPU 'skylak' for x86_64 or "
                            "aarch64; close names: skylake"),
                           ("llvm:skylake:x", "not of the form llvm:MCPU:CORES")]:
        with pytest.raises(odla.OdlaError) as err:
            odla.tune(model, name, trials=2)
        assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE and fragment in str(err.value)
    # Compiled and exported for it like any target.
    assert cli(["export", model, "--target", "llvm:skylake-avx512:16", "-o",
                str(tmp_path / "bundle")]) == 0
    assert any((tmp_path / "bundle").iterdir())


# A target spec file as one written on a 16-core Skylake-SP machine reads.
SKYLAKE_16 = {"target_spec_version": 1, "mcpu": "skylake-avx512", "cores": 16, "arch": "x86_64",
              "vector_features": ["avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"]}
WRITE_A_SPEC = "write it with `odla-tvm info --target-spec FILE` on the machine it describes"


def _spec_file(path, fields):
    path.write_text(fields if isinstance(fields, str) else json.dumps(fields))
    return str(path)


def test_a_target_spec_file_written_here_is_this_cpu(tmp_path, capsys):
    path = tmp_path / "here.json"
    assert cli(["info", "--target-spec", str(path)]) == 0
    assert f"wrote {path}: this machine's CPU" in capsys.readouterr().out
    host = targets.host_cpu()
    written = json.loads(path.read_text())
    assert written == {"target_spec_version": 1, "mcpu": host.target["mcpu"],
                       "cores": host.target["num-cores"], "arch": "x86_64",
                       "vector_features": list(targets.get_target(
                           f"llvm:{host.target['mcpu']}:{host.target['num-cores']}").cpu_flags),
                       **({"mattr": host.target["mattr"]} if "mattr" in host.target else {})}
    # Read back, it is host-cpu's target, and its records go into host-cpu's database.
    spec = targets.get_target(str(path))
    assert spec.target == host.target and not spec.remote and str(path) in spec.description
    assert (targets.TuningDatabase(spec, tmp_path).directory
            == targets.TuningDatabase(host, tmp_path).directory)


def test_a_target_spec_file_is_not_overwritten_unless_forced(tmp_path, capsys):
    path = tmp_path / "mine.json"
    path.write_text("my notes")
    assert cli(["info", "--target-spec", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--target-spec '{path}' exists; refusing to overwrite it" in err and "--force" in err
    assert path.read_text() == "my notes"
    assert cli(["info", "--target-spec", str(path), "--force"]) == 0
    assert targets.get_target(str(path)).target == targets.host_cpu().target
    assert cli(["info", "--target-spec", str(tmp_path / "spec.txt")]) == 1
    assert "does not end in .json" in capsys.readouterr().err
    assert not (tmp_path / "spec.txt").exists()


def test_another_machines_target_spec_file_is_its_cpu(tmp_path):
    path = tmp_path / "skylake.json"
    spec = targets.get_target(_spec_file(path, SKYLAKE_16))
    named = targets.get_target("llvm:skylake-avx512:16")
    assert (spec.target, spec.cpu_flags) == (named.target, named.cpu_flags)
    assert spec == dataclasses.replace(named, description=spec.description)
    assert str(path) in spec.description and spec.database_name == "host-cpu"
    # AMX on a machine LLVM names by a CPU without it: the file's mattr, and its flags needed.
    amx = targets.get_target(_spec_file(tmp_path / "amx.json", {
        **SKYLAKE_16, "mattr": ["+amx-tile", "+amx-bf16"]}))
    assert amx.target == {**named.target, "mattr": ["+amx-tile", "+amx-bf16"]}
    assert amx.cpu_flags == named.cpu_flags + ("amx_tile", "amx_bf16")
    # The file's architecture decides where LLVM knows the CPU name on both.
    arm = targets.get_target(_spec_file(tmp_path / "arm.json", {
        **SKYLAKE_16, "mcpu": "generic", "cores": 4, "arch": "aarch64", "vector_features": []}))
    assert (arm.arch, arm.target["mtriple"]) == ("aarch64", "aarch64-linux-gnu")
    assert targets.get_target("llvm:generic:4").arch == "x86_64"
    # Tuned (through RPC servers only) and exported like the llvm:MCPU:CORES form.
    model = matmul_onnx(tmp_path / "m.onnx")
    with pytest.raises(odla.OdlaError) as err:
        odla.tune(model, path, trials=2, cache_dir=tmp_path)
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE
    assert "another machine's CPU" in str(err.value) and "--rpc-tracker" in str(err.value)
    assert cli(["export", model, "--target", str(path), "-o", str(tmp_path / "bundle")]) == 0
    assert any((tmp_path / "bundle").iterdir())


def test_a_bad_target_spec_file_is_refused(tmp_path, capsys):
    model = matmul_onnx(tmp_path / "m.onnx")
    (tmp_path / "directory.json").mkdir()
    bad = [
        ("missing.json", None, "no such file"),
        ("directory.json", None, "cannot be read (Is a directory)"),
        ("text.json", "skylake-avx512 16", "is not JSON (Expecting value"),
        ("list.json", [SKYLAKE_16], "holds a JSON list; expected an object"),
        ("unversioned.json", {k: v for k, v in SKYLAKE_16.items() if k != "target_spec_version"},
         "target_spec_version is None; expected 1"),
        ("newer.json", {**SKYLAKE_16, "target_spec_version": 2},
         "target_spec_version is 2; expected 1, the version this odla-tvm reads"),
        ("coreless.json", {k: v for k, v in SKYLAKE_16.items() if k != "cores"},
         "cores is missing; expected the cores its code may use, an integer >= 1"),
        ("no-cores.json", {**SKYLAKE_16, "cores": 0}, "cores is 0; expected"),
        ("text-cores.json", {**SKYLAKE_16, "cores": "16"}, "cores is '16'; expected"),
        ("empty-mcpu.json", {**SKYLAKE_16, "mcpu": ""},
         "mcpu is ''; expected LLVM's name for the CPU"),
        ("riscv.json", {**SKYLAKE_16, "arch": "riscv64"},
         "arch is 'riscv64'; expected the machine's architecture, 'x86_64' or 'aarch64'"),
        ("features.json", {**SKYLAKE_16, "vector_features": "avx2"},
         "vector_features is 'avx2'; expected a list"),
        ("typo.json", {**SKYLAKE_16, "mcpu": "skylak"},
         "target 'llvm:skylak:16': LLVM knows no CPU 'skylak' for x86_64; close names: "
         "skylake"),
        ("edited.json", {**SKYLAKE_16, "vector_features": ["avx2", "fma"]},
         "vector_features is ['avx2', 'fma'], without avx512f, avx512bw, avx512dq, avx512vl; "
         "expected every vector feature LLVM's code for 'skylake-avx512' uses"),
        ("mattr.json", {**SKYLAKE_16, "mattr": ["+avx512f"]},
         "mattr is ['+avx512f']; expected a list of features LLVM's mcpu lacks, of "
         "['+amx-tile', '+amx-bf16']"),
        ("text-mattr.json", {**SKYLAKE_16, "mattr": "+amx-tile"}, "mattr is '+amx-tile'; "),
    ]
    for name, fields, fragment in bad:
        path = str(tmp_path / name) if fields is None else _spec_file(tmp_path / name, fields)
        with pytest.raises(odla.OdlaError) as err:
            odla.tune(model, path, trials=2, cache_dir=tmp_path)
        message = str(err.value)
        assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE, (name, message)
        assert f"target spec file '{path}': {fragment}" in message, (name, message)
        assert message.endswith(WRITE_A_SPEC), (name, message)
    assert cli(["export", model, "--target", str(tmp_path / "missing.json"), "-o",
                str(tmp_path / "bundle")]) == 2
    assert "missing.json': no such file" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None,
                    reason="needs the aarch64 cross compiler (g++-aarch64-linux-gnu)")
def test_candidates_for_a_board_are_linked_here_for_its_architecture():
    # What an aarch64-linux run through a tracker uploads to the board's server.
    from tvm.script import tirx as T

    @T.prim_func
    def add_one(a: T.Buffer((64,), "float32"), b: T.Buffer((64,), "float32")):
        for i in range(64):
            b[i] = a[i] + T.float32(1)

    spec = targets.get_target("aarch64-linux")
    path = export_shared(tvm.compile(add_one, target=spec.tvm_target()), spec.cross_compiler)
    header = open(path, "rb").read(20)
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # AArch64


@pytest.mark.skipif(QEMU is None or shutil.which("aarch64-linux-gnu-g++") is None,
                    reason="needs qemu-aarch64-static and the aarch64 cross compiler "
                    "(qemu-user-static, g++-aarch64-linux-gnu)")
def test_a_boards_server_measures_aarch64_candidates(fleet, tmp_path, capsys):
    # odla_rpc_server as a board runs it (here under qemu): each candidate is linked here for
    # aarch64, uploaded, loaded, given random inputs and timed there.
    spec = targets.get_target("aarch64-linux")
    assert cli(["rpc-server", "--tracker", fleet.address, "--key", "board"]) == 0
    directory = targets.build_rpc_server(spec)
    printed = capsys.readouterr().out
    assert f"{directory}" in printed
    assert f"./odla_rpc_server --tracker {fleet.address} --key board" in printed
    assert sorted(p.name for p in directory.iterdir()) == [
        "libtvm_ffi.so", "libtvm_runtime.so", "odla_rpc_server"]
    _, address = fleet.board_server("board", directory)
    model = matmul_onnx(tmp_path / "m.onnx")
    report = odla.tune(model, "aarch64-linux", trials=4, cache_dir=tmp_path,
                       rpc_tracker=fleet.address, rpc_key="board", progress=False)
    assert (report.trials_run, report.trials_recorded, report.stopped_by) == (4, 4, "trials")
    # The candidates and the kernel's default schedule, once; then the best record and the
    # default in turns, each RUN_OFF_ROUNDS times (under qemu the kernel takes long enough).
    sessions = 5 + 2 * targets.tuning.run_off.RUN_OFF_ROUNDS
    assert report.measured_on == {address: sessions} and report.measured_again == 0
    database = targets.find_database(spec, tmp_path)
    assert set(database.metadata()["run_offs"]) == set(database.default_seconds())
    deadline = time.monotonic() + 10  # the last session ends once its client has closed
    while (log := (fleet.logs / "board0.log").read_text()).count("finished serving") < sessions:
        assert time.monotonic() < deadline, log
        time.sleep(0.1)
    assert log.count("connected from") == sessions, log
    assert log.count("finished serving") == sessions, log
    records = _records(report.directory)
    assert len(records) == 4 and all(0 < max(secs) < 1 for secs in records), records
    # Compiles for aarch64-linux apply the records (where they beat the default schedule,
    # as here they are said to).
    comp = import_model(model)
    [default_s] = database.default_seconds().values()
    assert 0 < default_s < 1
    database.add_default_seconds(dict.fromkeys(database.default_seconds(), 1.0))
    tuned = targets.compile_module(comp.build_module(), spec, database=database)
    assert tuned.tuned_kernels == ["fused_matmul_relu_prepacked"]
    # A client with another key is refused; a session past its client's timeout is ended,
    # and the client told why; the server stays registered for the next.
    with socket.create_connection(address.split(":")) as sock:
        key = b"client:board:0 -timeout=5"
        sock.sendall(struct.pack("<ii", base.RPC_MAGIC, len(key)) + key)
        assert struct.unpack("<i", base.recvall(sock, 4))[0] == base.RPC_CODE_MISMATCH
    tracker = targets.Tracker("127.0.0.1", fleet.port, "board")
    session, _ = tracker.open_session(2)
    time.sleep(2.5)
    with pytest.raises(Exception, match="RPCSessionTimeoutError: Your 2s session has expired"):
        session.get_function("tvm.rpc.server.workpath")("x")
    assert tracker.wait_for_servers(10) == 1
