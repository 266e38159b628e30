"""Building and running the C and C++ programs of tests/c_api/ against libodla_tvm.so.

With ODLA_TVM_SANITIZE set (gcc's -fsanitize= list, "address,undefined"), the programs and
the library (libodla.builder's instrumented build) are built with those sanitizers, and a run
that reports anything fails its test: what tests/test_c_sanitized.py runs the C tests with.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np

import libodla

SOURCES = Path(__file__).with_name("c_api")
ROOT = Path(__file__).resolve().parents[1]
SANITIZE = os.environ.get("ODLA_TVM_SANITIZE", "")
# Built into each sanitized program, however a test runs it: leaks are not looked for (the
# embedded interpreter and TVM's runtime keep what they allocate until exit), and a report
# ends the run with exit code 86.
SANITIZER_DEFAULTS = """#ifdef __cplusplus
extern "C" {
#endif
const char* __asan_default_options(void) { return "detect_leaks=0:exitcode=86"; }
const char* __ubsan_default_options(void) {
  return "print_stacktrace=1:halt_on_error=1:exitcode=86";
}
#ifdef __cplusplus
}
#endif
"""
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "SUMMARY: UndefinedBehavior")


def _library_flags() -> tuple[list[str], list[str]]:
    """The compile and link flags of a program using the library (the instrumented one and
    the sanitizers where SANITIZE names them)."""
    if not SANITIZE:
        return [], libodla.libs()
    from libodla.builder import build_library

    directory = build_library(sanitize=SANITIZE).parent
    sanitizers = [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer", "-g"]
    return sanitizers, [*sanitizers, f"-L{directory}", "-lodla_tvm", f"-Wl,-rpath,{directory}"]


def compile_program(output: Path, sources, compiler: str = "g++", flags=(),
                    libraries=()) -> Path:
    """Compiles ``sources`` (paths; .c files as C) into the program ``output``, linked
    against the library with the flags ``odla-tvm config`` prints, then ``libraries``."""
    compile_flags, link_flags = _library_flags()
    command = [compiler, *flags, *compile_flags, *libodla.cflags(), "-o", str(output)]
    if SANITIZE:
        # in the first source's language, which the flags are for
        suffix = Path(str(sources[0])).suffix
        defaults = output.with_name(f"{output.name}-sanitizer-defaults{suffix}")
        defaults.write_text(SANITIZER_DEFAULTS)
        sources = [*sources, defaults]
    for source in sources:
        command += ["-x", "c" if str(source).endswith(".c") else "c++", str(source)]
    command += ["-x", "none", *link_flags, *libraries, "-pthread"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr[-3000:]}"
    return output


def run_program(program: Path, *args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """Runs ``program``; its embedded interpreter imports this tree's odla_tvm. Under the
    sanitizers, a run that reports anything fails here."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    done = subprocess.run([str(program), *map(str, args)], capture_output=True, text=True,
                          env=environment, timeout=timeout)
    if SANITIZE:
        reported = [line for line in done.stderr.splitlines()
                    if any(report in line for report in SANITIZER_REPORTS)]
        assert not reported, f"{program.name} {args}: sanitizer report\n{done.stderr[-6000:]}"
    return done


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
