"""Building and running the C and C++ programs of tests/c_api/ against libodla_tvm.so."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np

import libodla

SOURCES = Path(__file__).with_name("c_api")
ROOT = Path(__file__).resolve().parents[1]


def compile_program(output: Path, sources, compiler: str = "g++", flags=(),
                    libraries=()) -> Path:
    """Compiles ``sources`` (paths; .c files as C) into the program ``output``, linked
    against the library with the flags ``odla-tvm config`` prints, then ``libraries``."""
    command = [compiler, *flags, *libodla.cflags(), "-o", str(output)]
    for source in sources:
        command += ["-x", "c" if str(source).endswith(".c") else "c++", str(source)]
    command += ["-x", "none", *libodla.libs(), *libraries, "-pthread"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr[-3000:]}"
    return output


def run_program(program: Path, *args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs ``program``; its embedded interpreter imports this tree's odla_tvm."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([str(program), *map(str, args)], capture_output=True, text=True,
                          env=environment, timeout=timeout)


def printed_values(tmp_path: Path, source: str) -> tuple[dict[str, list[str]], str]:
    """Builds and runs the C++17 program ``source`` of tests/c_api/ (warnings as errors); its
    "<id> values..." lines by id, and all it printed (for messages)."""
    libodla.build()
    program = compile_program(tmp_path / Path(source).stem, [SOURCES / source],
                              flags=["-std=c++17", "-Wall", "-Wextra", "-Werror"])
    done = run_program(program)
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}, printed


def c_arrays(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    """A C file defining each array as ``const <type> name[]``, as HALO's weights object does."""
    c_types = {np.float32: "float", np.int64: "long long", np.int32: "int"}
    lines = []
    for name, array in arrays.items():
        flat = array.ravel()
        c_type = c_types[array.dtype.type]
        values = ", ".join(repr(float(v)) if c_type == "float" else str(int(v)) for v in flat)
        lines.append(f"const {c_type} {name}[{max(flat.size, 1)}] = {{{values}}};")
    path.write_text("\n".join(lines) + "\n")
    return path
