"""Building libodla_tvm.so and libodla_tvm_compiler.so with the system g++ (see the package's
doc): imported only to build, so that a process running the library loads none of this."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .paths import (COMPILER_LIBRARY, COMPILER_SOURCES, INCLUDE_DIR, LIBRARY, PKG_CONFIG,
                    RUNTIME_SOURCES, SOURCE_DIR, _package_dir, library_dir,
                    runtime_library_dirs)


def _ffi_include_dirs() -> list[str]:
    return [str(_package_dir("tvm_ffi") / "include")]  # dlpack/ is there too


def _python_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags embedding the Python running this, which has odla-tvm."""
    libdir = sysconfig.get_config_var("LIBDIR")
    version = sysconfig.get_config_var("LDVERSION") or sysconfig.get_config_var("VERSION")
    compile_flags = [f"-I{sysconfig.get_paths()['include']}",
                     f'-DODLA_TVM_PYTHON="{sys.executable}"']
    return compile_flags, [f"-L{libdir}", f"-lpython{version}", f"-Wl,-rpath,{libdir}"]


def _commands(directory: Path, sanitize: str = "") -> list[tuple[list[str], list[str], str]]:
    """(sources, extra flags, output) of each library; ``sanitize``: gcc's -fsanitize= list."""
    runtime_dirs = runtime_library_dirs()
    includes = [f"-I{INCLUDE_DIR}", f"-I{SOURCE_DIR}",
                *[flag for d in _ffi_include_dirs() for flag in ("-isystem", d)]]
    python_compile, python_link = _python_flags()
    exported = directory / "exports.map"
    runtime_link = [*[f"-L{d}" for d in runtime_dirs], "-ltvm_runtime", "-ltvm_ffi",
                    *[f"-Wl,-rpath,{d}" for d in runtime_dirs], "-ldl", "-pthread",
                    f"-Wl,--version-script={exported}"]
    # what stored executables must have been built by, and what odla_GetVersionString says
    versions = [f'-DODLA_TVM_TVM_VERSION="{_version("apache-tvm")}"',
                f'-DODLA_TVM_VERSION="{_version("odla-tvm")}"']
    # -O1: the instrumented build compiles much faster than at -O2
    sanitizers = ([f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g", "-O1"]
                  if sanitize else [])
    return [
        ([str(SOURCE_DIR / s) for s in RUNTIME_SOURCES],
         includes + versions + runtime_link + sanitizers, LIBRARY),
        ([str(SOURCE_DIR / s) for s in COMPILER_SOURCES],
         [f"-I{INCLUDE_DIR}", f"-I{SOURCE_DIR}", *python_compile, *python_link, *sanitizers],
         COMPILER_LIBRARY),
    ]


def _digest(commands) -> str:
    text = [str(c) for c in commands]
    for path in sorted([*SOURCE_DIR.iterdir(), *INCLUDE_DIR.rglob("*.h")]):
        if path.is_file():
            text.append(path.read_text())
    return hashlib.sha256("\0".join(text).encode()).hexdigest()


def _compile(source: str, flags: list[str], output: Path) -> None:
    command = ["g++", "-std=c++17", "-O2", "-fPIC", "-Wall", "-Wextra", "-c", source, "-o",
               str(output), *_compile_flags(flags)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"g++ failed on {source}:\n{done.stderr[-4000:]}")


def _compile_flags(flags: list[str]) -> list[str]:
    return [f for f in flags if not f.startswith(("-L", "-l", "-Wl,", "-pthread"))]


def _link_flags(flags: list[str]) -> list[str]:
    return [f for f in flags if f.startswith(("-L", "-l", "-Wl,", "-pthread", "-fsanitize="))]


# digest -> the error its build failed with in this process, not tried again (each try takes
# minutes on a small machine)
_failed_builds: dict[str, RuntimeError] = {}


def build_library(force: bool = False, sanitize: str = "") -> Path:
    """Builds the library into library_dir() unless built from these sources already;
    returns libodla_tvm.so's path. ``sanitize`` ("address,undefined"): a build instrumented
    with gcc's sanitizers, in sanitize_dir(sanitize), for the C tests to run under."""
    directory = sanitize_dir(sanitize) if sanitize else library_dir()
    directory.mkdir(parents=True, exist_ok=True)
    # One build at a time per folder (parallel test workers, two programs): the one that
    # waited finds the stamp written and builds nothing.
    with open(directory / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_unless_current(directory, force, sanitize)


def sanitize_dir(sanitize: str) -> Path:
    """Where the build instrumented with ``sanitize`` lies: beside the plain one."""
    return library_dir() / f"sanitize-{sanitize.replace(',', '-')}"


def _build_unless_current(directory: Path, force: bool, sanitize: str) -> Path:
    commands = _commands(directory, sanitize)
    stamp = directory / "build.sha256"
    digest = _digest(commands)
    if not force and stamp.is_file() and stamp.read_text() == digest and all(
            (directory / name).is_file() for _, _, name in commands):
        return directory / LIBRARY
    if not force and digest in _failed_builds:
        raise _failed_builds[digest]
    try:
        _build(directory, commands)
    except RuntimeError as err:
        _failed_builds[digest] = err
        raise
    _write_pkg_config(directory)
    stamp.write_text(digest)
    return directory / LIBRARY


def _build(directory: Path, commands) -> None:
    (directory / "exports.map").write_text("{ global: odla_*; local: *; };\n")
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        jobs = [(s, flags, Path(tmp) / f"{Path(s).stem}.o") for sources, flags, _ in commands
                for s in sources]
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            for future in [pool.submit(_compile, *job) for job in jobs]:
                future.result()
        for sources, flags, name in commands:
            objects = [str(Path(tmp) / f"{Path(s).stem}.o") for s in sources]
            partial = Path(tmp) / name
            link = ["g++", "-shared", "-o", str(partial), *objects, *_link_flags(flags)]
            done = subprocess.run(link, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"linking {name} failed:\n{done.stderr[-4000:]}")
            os.replace(partial, directory / name)  # atomic: a running program keeps its copy


def _write_pkg_config(directory: Path) -> None:
    (directory / PKG_CONFIG).write_text(
        f"libdir={directory}\nincludedir={INCLUDE_DIR}\n\n"
        "Name: odla_tvm\nDescription: ODLA 0.5 C API on Apache TVM (odla-tvm)\n"
        f"Version: {_version('odla-tvm')}\n"
        "Cflags: -I${includedir}\nLibs: -L${libdir} -lodla_tvm -Wl,-rpath,${libdir}\n")


def _version(distribution: str) -> str:
    """An installed distribution's version, "" where it is not installed (a source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return ""
