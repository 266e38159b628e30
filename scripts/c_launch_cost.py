"""ODLA's own cost per call from C against Python: a tiny model (one add of a (1, 4) float32
argument), CPU microseconds per call of a bare TVM VM call from C++ (vm_call_cost.cc, the
module exported as a bundle) and from Python, odla_tvm.launch_executable, Session.run, and
odla_LaunchExecutable from C (c_launch_cost.c: rebinding input and output each call, as HALO's
generated code does) on the same module. Prints a table; asserts nothing.

Usage: python scripts/c_launch_cost.py [--calls N]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tvm_ffi.libinfo

import libodla
import odla_tvm as odla


def per_call_us(call, calls: int, repeats: int = 7) -> float:
    """The fastest of ``repeats`` loops of ``calls`` calls, in CPU microseconds per call."""
    for _ in range(calls // 10):
        call()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - start) / calls)
    return best * 1e6


def compiled(source: Path, program: Path, flags: list[str]) -> Path:
    compiler = "g++" if source.suffix == ".cc" else "gcc"
    standard = "-std=c++17" if source.suffix == ".cc" else "-std=c99"
    subprocess.run([compiler, standard, "-O2", "-o", str(program), str(source), *flags],
                   check=True)
    return program


def microseconds(command: list[str]) -> float:
    return float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    calls = parser.parse_args().calls
    libodla.build()
    with tempfile.TemporaryDirectory() as tmp:
        comp = odla.create_computation()
        odla.set_computation_item(comp, odla.ItemType.CACHE_DIR, tmp)
        x = odla.create_argument(odla.ValueType(odla.ElementType.FLOAT32, (1, 4)), "x")
        odla.set_value_as_output(odla.add(x, x, "y"))
        executable = odla.compile_computation(comp)
        stored = Path(tmp) / "tiny.odla"
        odla.store_executable(str(stored), executable)
        data = np.ones((1, 4), np.float32)
        context = odla.create_context()
        odla.bind_to_argument(x, data, context)
        session = odla.Session(executable)
        rows = {
            "bare VM call (Python)": per_call_us(executable.module.bare_call([data]), calls),
            "launch_executable (Python)": per_call_us(
                lambda: odla.launch_executable(executable, context), calls),
            "Session.run (Python)": per_call_us(lambda: session.run({"x": data}), calls),
        }
        here, work = Path(__file__).parent, Path(tmp)
        odla.export(executable, None, work / "bundle")
        dirs = libodla.runtime_library_dirs()
        runtime = [f"-I{tvm_ffi.libinfo.find_include_path()}", "-ltvm_runtime", "-ltvm_ffi",
                   *[flag for d in dirs for flag in (f"-L{d}", f"-Wl,-rpath,{d}")]]
        vm_call = compiled(here / "vm_call_cost.cc", work / "vm_call_cost", runtime)
        c_launch = compiled(here / "c_launch_cost.c", work / "c_launch_cost",
                            [*libodla.cflags(), *libodla.libs()])
        rows["bare VM call (C++)"] = microseconds([str(vm_call), str(work / "bundle" / "model.so"),
                                                    str(calls)])
        rows["odla_LaunchExecutable (C, bind + launch)"] = microseconds(
            [str(c_launch), str(stored), str(calls)])
    bare = rows["bare VM call (C++)"]
    print("| call | µs per call | over the bare VM call |\n| --- | --- | --- |")
    for name, us in rows.items():
        print(f"| {name} | {us:.2f} | {us - bare:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
