"""The Python-free programs: TVM's C++ runtime for a target's machine, odla_runner built
against it (source: odla_runner.cc, beside this file, with libodla's bundle reader and
run-time checks, libodla.READER_SOURCES), and odla_rpc_server, the RPC server a board runs
for tuning through a tracker (odla_rpc_server.cc)."""

from __future__ import annotations

import hashlib
import logging
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

import tvm
import tvm_ffi

from libodla.paths import INCLUDE_DIR, READER_SOURCES, SOURCE_DIR
from toolchain import ToolchainMissing, cache_dir

from ..specs import TargetSpec

log = logging.getLogger(__name__)

RUNNER_SOURCE = Path(__file__).with_name("odla_runner.cc")
RPC_SERVER_SOURCE = Path(__file__).with_name("odla_rpc_server.cc")
# The two libraries a compiled module needs at run time, by the wheel that ships them.
RUNTIME_LIBRARIES = {"libtvm_runtime.so": "apache-tvm", "libtvm_ffi.so": "apache-tvm-ffi"}
# A GPU module's besides: TVM's CUDA device and loader of its GPU code (odla_runner loads it for
# a GPU bundle only; it links libcudart.so.13 and the driver's libcuda.so.1).
CUDA_RUNTIME_LIBRARIES = {"libtvm_runtime_cuda.so": "apache-tvm"}
_WHEEL_PLATFORMS = {"aarch64": "manylinux_2_28_aarch64", "x86_64": "manylinux_2_28_x86_64"}


def _installed_library(name: str) -> Path:
    package = tvm if name.startswith("libtvm_runtime") else tvm_ffi
    package_dir = Path(package.__file__).parent
    return package_dir / "lib" / name


def include_dirs() -> list[Path]:
    """C++ headers of the runtime (the same for every architecture)."""
    return [Path(tvm_ffi.__file__).parent / "include", Path(tvm.__file__).parent / "include"]


def runtime_library_names(spec: TargetSpec) -> dict[str, str]:
    """The runtime libraries a module of ``spec`` needs, by the wheel that ships them."""
    return RUNTIME_LIBRARIES | (CUDA_RUNTIME_LIBRARIES if spec.device_kind == "cuda" else {})


def runtime_libraries(spec: TargetSpec) -> dict[str, Path]:
    """The runtime libraries (runtime_library_names) built for ``spec``'s machine, matching the
    TVM in use: this process's own for the host, else taken from the PyPI wheels of that
    architecture (downloaded once into the cache)."""
    if spec.arch == platform.machine():
        return {name: _installed_library(name) for name in runtime_library_names(spec)}
    versions = {pkg: metadata.version(pkg) for pkg in set(RUNTIME_LIBRARIES.values())}
    target_dir = cache_dir() / "runtime" / spec.arch / versions["apache-tvm"]
    libraries = {name: target_dir / name for name in RUNTIME_LIBRARIES}
    if all(p.is_file() for p in libraries.values()):
        return libraries
    if spec.arch not in _WHEEL_PLATFORMS:
        raise ToolchainMissing(f"no TVM runtime wheel is published for {spec.arch}")
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        requirements = [f"{pkg}=={version}" for pkg, version in sorted(versions.items())]
        log.info("downloading the %s TVM runtime (%s)", spec.arch, ", ".join(requirements))
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--only-binary=:all:", "--platform", _WHEEL_PLATFORMS[spec.arch],
                   "--python-version", f"{sys.version_info.major}{sys.version_info.minor}",
                   "-d", tmp, *requirements]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise ToolchainMissing(
                f"could not download the {spec.arch} TVM runtime ({' '.join(requirements)}): "
                f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
            )
        for wheel in Path(tmp).glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    if Path(member).name in RUNTIME_LIBRARIES and "/lib/" in member:
                        (target_dir / Path(member).name).write_bytes(archive.read(member))
    missing = [name for name, path in libraries.items() if not path.is_file()]
    if missing:
        raise ToolchainMissing(f"the {spec.arch} TVM wheels lack {', '.join(missing)}")
    return libraries


def compiler(spec: TargetSpec) -> str:
    """The C++ compiler that builds for ``spec``'s machine on this host."""
    cross = spec.installed_cross_compiler()
    if cross is not None:
        return cross
    found = shutil.which("g++") or shutil.which("c++")
    if found is None:
        raise ToolchainMissing("no C++ compiler found; install it with: apt-get install g++")
    return found


def runner_sources() -> list[Path]:
    """odla_runner's sources: its own and libodla's reader (its headers beside them)."""
    return [RUNNER_SOURCE, *[SOURCE_DIR / name for name in READER_SOURCES]]


def runner_headers() -> list[Path]:
    """The folders of the headers odla_runner's sources include besides TVM's."""
    return [SOURCE_DIR, INCLUDE_DIR]


def build_runner(spec: TargetSpec, output: Path, library_dir: Path) -> Path:
    """Compiles odla_runner for ``spec``'s machine, linked against the runtime libraries in
    ``library_dir`` and finding them at run time beside itself in ../lib."""
    command = [compiler(spec), "-std=c++17", "-O2", "-o", str(output),
               *map(str, runner_sources()),
               *[f"-I{d}" for d in [*runner_headers(), *include_dirs()]], f"-L{library_dir}",
               "-ltvm_runtime",
               "-ltvm_ffi", "-Wl,-rpath,$ORIGIN/../lib"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building odla_runner failed:\n{done.stderr[-2000:]}")
    return output


def build_rpc_server(spec: TargetSpec) -> Path:
    """A directory holding odla_rpc_server for ``spec``'s machine and the runtime libraries it
    finds beside itself: copy it to a board and start ``./odla_rpc_server --tracker HOST:PORT
    --key KEY`` there. Built once per source and TVM version, in the cache."""
    source = RPC_SERVER_SOURCE.read_bytes()
    versions = f"{tvm.__version__} {tvm_ffi.__version__}".encode()
    digest = hashlib.sha256(source + versions).hexdigest()[:12]
    directory = cache_dir() / "rpc-server" / f"{spec.arch}-{digest}"
    server = directory / "odla_rpc_server"
    if server.is_file():
        return directory
    libraries = runtime_libraries(spec)
    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory.parent) as tmp:
        staging = Path(tmp) / directory.name
        staging.mkdir()
        for name, path in libraries.items():
            shutil.copyfile(path, staging / name)
        command = [compiler(spec), "-std=c++17", "-O2", "-o", str(staging / server.name),
                   str(RPC_SERVER_SOURCE), *[f"-I{d}" for d in include_dirs()], f"-L{staging}",
                   "-ltvm_runtime", "-ltvm_ffi", "-Wl,-rpath,$ORIGIN"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building odla_rpc_server failed:\n{done.stderr[-2000:]}")
        try:
            staging.rename(directory)
        except OSError:  # another process built it meanwhile
            if not server.is_file():
                raise
    return directory
