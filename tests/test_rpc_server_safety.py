"""odla_rpc_server safe by default (built for this machine, with TVM's tracker and client here):
it listens on 127.0.0.1 unless told otherwise, a handshake trickled byte by byte is cut at its
deadline without holding the server, and a session's uploads, downloads and removals stay in
its own directory (no absolute name, no "..", no symlink out)."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import time

import pytest

import targets

try:
    from .test_rpc_tuning import LocalFleet, _free_port
except ImportError:
    from test_rpc_tuning import LocalFleet, _free_port

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the server builds with g++")


@pytest.fixture
def server(tmp_path):
    directory = targets.build_rpc_server(targets.host_cpu())
    fleet = LocalFleet(tmp_path)
    port = _free_port()
    work = tmp_path / "work"
    work.mkdir()
    with open(tmp_path / "server.log", "w") as log:
        process = subprocess.Popen(
            [str(directory / "odla_rpc_server"), "--tracker", fleet.address, "--key", "safe",
             "--port", str(port), "--port-end", str(port + 1), "--work-dir", str(work)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    fleet.processes.append(process)
    tracker = targets.Tracker("127.0.0.1", fleet.port, "safe")
    deadline = time.monotonic() + 60
    while tracker.servers()[1] < 1:
        assert process.poll() is None, (tmp_path / "server.log").read_text()
        assert time.monotonic() < deadline, "odla_rpc_server did not register"
        time.sleep(0.2)
    try:
        yield fleet, port, tmp_path / "server.log"
    finally:
        for p in fleet.processes:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()


def session(fleet):
    from tvm import rpc

    return rpc.connect_tracker("127.0.0.1", fleet.port).request("safe", session_timeout=60)


def test_listens_on_loopback_by_default(server):
    _, port, log = server
    assert f"listening on 127.0.0.1:{port}" in log.read_text()


def test_a_trickled_handshake_is_cut_and_the_server_still_serves(server):
    fleet, port, log = server
    # a TVM client's handshake (magic, key length, key), a byte every half second: each recv
    # waits less than a per-recv limit would allow
    handshake = struct.pack("<ii", 0xFF271, 16) + b"client:safe:1234"
    cut = False
    with socket.create_connection(("127.0.0.1", port)) as slow:
        slow.settimeout(0.5)
        for byte in handshake:
            try:
                slow.sendall(bytes([byte]))
                cut = slow.recv(1) == b""
            except TimeoutError:
                continue
            except OSError:
                cut = True
            if cut:
                break
    assert cut, log.read_text()
    assert "passed its deadline" in log.read_text()
    remote = session(fleet)
    remote.upload(bytearray(b"still here"), "alive.bin")
    assert bytes(remote.download("alive.bin")) == b"still here"


def test_session_files_stay_in_the_session_directory(server, tmp_path):
    fleet, _, _ = server
    remote = session(fleet)
    remote.upload(bytearray(b"data"), "ok.bin")
    assert bytes(remote.download("ok.bin")) == b"data"
    session_dir = os.path.dirname(remote.get_function("tvm.rpc.server.workpath")("ok.bin"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"secret")
    os.symlink(outside, os.path.join(session_dir, "link"))
    for name in ("../escape.bin", str(outside / "abs.bin"), "sub/../../escape.bin",
                 "link/new.bin"):
        with pytest.raises(Exception, match="session's directory"):
            remote.upload(bytearray(b"x"), name)
    for name in (str(outside / "secret"), "../../outside/secret", "link/secret"):
        with pytest.raises(Exception, match="session's directory"):
            remote.download(name)
        with pytest.raises(Exception, match="session's directory"):
            remote.remove(name)
    assert sorted(os.listdir(outside)) == ["secret"]
    assert not (tmp_path / "work" / "escape.bin").exists()
    assert (outside / "secret").read_bytes() == b"secret"
