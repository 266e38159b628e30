"""ODLA's own cost per call from C: a bare VM call from C++ (vm_call_cost.cc, on the module
exported as a bundle) and odla_LaunchExecutable from C (c_launch_cost.c, rebinding input and
output each call as HALO's generated code does), on the tiny model of timing.call_overhead."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..bundle import export
from ..executable import Executable, store_executable
from ..types import OdlaError, Status

SOURCES = Path(__file__).parent


def _compiled(source: Path, program: Path, flags: list[str]) -> Path:
    compiler, standard = ("g++", "-std=c++17") if source.suffix == ".cc" else ("gcc", "-std=c99")
    subprocess.run([compiler, standard, "-O2", "-o", str(program), str(source), *flags],
                   check=True, capture_output=True, text=True)
    return program


def _microseconds(command: list[str]) -> float:
    return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def c_call_overhead(executable: Executable, calls: int) -> dict[str, float]:
    """CPU microseconds per call from C++ and C; OdlaError where no C compiler or C library
    can be had here (the message says which)."""
    import libodla
    import tvm_ffi.libinfo

    if not (shutil.which("gcc") and shutil.which("g++")):
        raise OdlaError(Status.DL_ERROR, "no gcc/g++ here (apt-get install g++)")
    try:
        libodla.build()
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            store_executable(str(work / "tiny.odla"), executable)
            export(executable, None, work / "bundle")
            dirs = libodla.runtime_library_dirs()
            runtime = [f"-I{tvm_ffi.libinfo.find_include_path()}", "-ltvm_runtime", "-ltvm_ffi",
                       *[flag for d in dirs for flag in (f"-L{d}", f"-Wl,-rpath,{d}")]]
            vm_call = _compiled(SOURCES / "vm_call_cost.cc", work / "vm_call_cost", runtime)
            launch = _compiled(SOURCES / "c_launch_cost.c", work / "c_launch_cost",
                               [*libodla.cflags(), *libodla.libs()])
            return {
                "bare VM call (C++)": _microseconds(
                    [str(vm_call), str(work / "bundle" / "model.so"), str(calls)]),
                "odla_LaunchExecutable (C)": _microseconds(
                    [str(launch), str(work / "tiny.odla"), str(calls)]),
            }
    except subprocess.CalledProcessError as err:
        last = (err.stderr or "").strip().splitlines()[-1:] or ["no message"]
        raise OdlaError(Status.DL_ERROR, f"{err.cmd[0]} failed: {last[0]}") from None
    except RuntimeError as err:  # libodla.build: the library does not build here
        raise OdlaError(Status.DL_ERROR, f"libodla_tvm.so does not build: {err}") from None
