"""The C library (libodla): ODLA 0.5's headers and ABI, every declared function exported, a
model written as HALO's compiler generates it, built and run from C++ against NumPy, and the
SHA-256 its loads check files with, against hashlib."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import libodla

try:
    from . import c_programs as c
    from . import reference as ref
except ImportError:
    import c_programs as c
    import reference as ref

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("gcc") is None,
                                reason="the C library and its tests build with gcc and g++")


@pytest.fixture(scope="session")
def library():
    return libodla.build()


def declared_functions() -> set[str]:
    """Every function ODLA's headers declare (function pointer typedefs aside)."""
    text = "\n".join(p.read_text() for p in libodla.INCLUDE_DIR.rglob("*.h"))
    return set(re.findall(r"(?<!\(\*)\b(odla_[A-Z]\w*)\s*\(", text))


@pytest.mark.parametrize("compiler, standard", [
    ("gcc", "c99"), ("gcc", "c11"), ("gcc", "c17"),
    ("g++", "c++11"), ("g++", "c++14"), ("g++", "c++17"), ("g++", "c++20")])
def test_headers_compile_with_odla_05_layout(tmp_path, compiler, standard):
    """layout.c checks struct sizes, offsets and enum values at compile time."""
    source = tmp_path / ("layout.c" if compiler == "gcc" else "layout.cc")
    shutil.copy(c.SOURCES / "layout.c", source)
    program = tmp_path / "layout"
    done = subprocess.run([compiler, f"-std={standard}", "-Wall", "-Wextra", "-Werror",
                           *libodla.cflags(), str(source), "-o", str(program)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert subprocess.run([str(program)], capture_output=True, text=True).stdout == "layout ok\n"


def test_every_declared_function_is_exported_with_c_linkage(library):
    declared = declared_functions()
    assert len(declared) == 229  # ODLA 0.5's headers
    listed = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                            text=True, check=True).stdout
    exported = {line.split()[-1] for line in listed.splitlines() if " T " in line}
    assert declared - exported == set()
    assert {name for name in exported if not name.startswith("odla_")} == set()


def cnn_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = {"input_data": (1, 3, 8, 8), "conv_w": (4, 3, 3, 3), "conv_b": (4,),
              "fc_w": (64, 10), "fc_b": (1, 10)}
    return {name: (rng.standard_normal(shape) * 0.3).astype(np.float32)
            for name, shape in shapes.items()}


def cnn_reference(a: dict[str, np.ndarray]) -> tuple[np.ndarray, int]:
    y = ref.conv(a["input_data"], a["conv_w"], a["conv_b"], strides=(1, 1), dilations=(1, 1),
                 pads_front=(1, 1), pads_back=(1, 1))
    y = ref.max_pool(np.maximum(y, 0), window=(2, 2), strides=(2, 2), pads_front=(0, 0),
                     pads_back=(0, 0))
    fc = y.reshape(1, 64).astype(np.float64) @ a["fc_w"] + a["fc_b"]
    return ref.softmax(fc, 1).ravel(), int(np.argmax(fc))


@pytest.fixture(scope="session")
def generated_cnn(library, tmp_path_factory):
    """generated_cnn.cc (as HALO generates a model) and its weights object, built."""
    directory = tmp_path_factory.mktemp("generated_cnn")
    weights = c.c_arrays(directory / "weights.c", cnn_arrays())
    return c.compile_program(directory / "generated_cnn",
                             [c.SOURCES / "generated_cnn.cc", weights], flags=["-std=c++20"])


def parse_cnn_output(stdout: str) -> tuple[np.ndarray, int]:
    lines = stdout.split()
    return np.array([float(v) for v in lines[:10]]), int(lines[lines.index("best") + 1])


def test_generated_model_compiles_at_first_execute_and_matches_numpy(generated_cnn):
    """Ops on the thread's current computation, static const weights, uninitialized
    output_dims hints, by-id binding, an int64 output, ExecuteComputation run 3 times."""
    done = c.run_program(generated_cnn, 3)
    assert done.returncode == 0, done.stdout + done.stderr
    probabilities, best = parse_cnn_output(done.stdout)
    expected, expected_best = cnn_reference(cnn_arrays())
    np.testing.assert_allclose(probabilities, expected, rtol=1e-4, atol=1e-6)
    assert best == expected_best


def test_config_flags_and_pkg_config_build_a_program(library, tmp_path, capsys):
    from odla_tvm import cli

    assert cli.main(["config", "--cflags", "--libs"]) == 0
    flags = capsys.readouterr().out.split()
    assert flags == [*libodla.cflags(), *libodla.libs()]
    assert cli.main(["config", "--libdir"]) == 0
    libdir = Path(capsys.readouterr().out.strip())
    assert (libdir / "libodla_tvm.so").is_file() and (libdir / "odla_tvm.pc").is_file()
    source = tmp_path / "version.c"
    source.write_text('#include <ODLA/odla.h>\n#include <stdio.h>\n'
                      'int main(void) { puts(odla_GetVersionString()); return 0; }\n')
    if shutil.which("pkg-config"):
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "odla_tvm"], check=True,
                               capture_output=True, text=True,
                               env={"PKG_CONFIG_PATH": str(libdir)}).stdout.split()
    subprocess.run(["gcc", "-std=c99", str(source), "-o", str(tmp_path / "version"), *flags],
                   check=True)
    # runs with no LD_LIBRARY_PATH: the rpath finds the library
    done = subprocess.run([str(tmp_path / "version")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.startswith("odla-tvm")


@pytest.mark.parametrize("code", ["chosen", "portable"])
@pytest.mark.slow
def test_sha256_matches_hashlib_at_every_tail_length(tmp_path, code):
    """The digest bundles and stored executables are checked with, by the SHA extensions where
    this CPU has them and by the portable code: every length over a block boundary, and more
    than one block's worth of whole blocks."""
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{libodla.SOURCE_DIR}"]
    if code == "portable":
        flags.append("-DODLA_TVM_PORTABLE_SHA256")
    program = tmp_path / "sha256_digests"
    subprocess.run(["g++", *flags, str(c.SOURCES / "sha256_digests.cc"),
                    str(libodla.SOURCE_DIR / "sha256.cc"), "-o", str(program)], check=True)
    lengths = [*range(0, 200), 1000, 4096, 65536 + 55, 1 << 20]
    printed = subprocess.run([str(program), *map(str, lengths)], check=True, capture_output=True,
                             text=True).stdout.split()
    expected = []
    for length in lengths:
        data = ((np.arange(length, dtype=np.uint64) * 167 + 13) % 256).astype(np.uint8)
        expected += [str(length), hashlib.sha256(data.tobytes()).hexdigest()]
    assert printed == expected
