"""The C tests under AddressSanitizer and UndefinedBehaviorSanitizer: C test modules run again
with ODLA_TVM_SANITIZE (tests/c_programs.py), so libodla_tvm.so (libodla.builder's instrumented
build) and every C program they build are instrumented, and a run that reports anything fails.
The model libraries TVM compiles are not instrumented. Here the quick ones (misused handles,
bad input, HALO's habits, a stored executable run by examples/c/run_executable.c); every C
test: ODLA_TVM_SANITIZE=address,undefined pytest tests/test_c_api*.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SANITIZE = "address,undefined"
TESTS = Path(__file__).parent
C_TESTS = ["test_c_api_hostile.py", "test_c_api_bad_inputs.py", "test_c_api_halo.py",
           ("test_c_api_executables.py::"
            "test_python_stored_executable_runs_in_c_without_python_or_compiler")]


def _sanitizers_link(tmp_path: Path) -> bool:
    source = tmp_path / "empty.c"
    source.write_text("int main(void) { return 0; }\n")
    done = subprocess.run(["gcc", f"-fsanitize={SANITIZE}", "-o", str(tmp_path / "empty"),
                           str(source)], check=False, capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(shutil.which("gcc") is None, reason="the C tests build with gcc")
@pytest.mark.skipif(bool(os.environ.get("ODLA_TVM_SANITIZE")), reason="already sanitized")
def test_c_tests_are_clean_under_address_and_undefined_behavior_sanitizers(tmp_path):
    if not _sanitizers_link(tmp_path):
        pytest.skip("gcc here has no libasan/libubsan")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "run"), *[str(TESTS / t) for t in C_TESTS]],
        check=False, capture_output=True, text=True, cwd=TESTS.parent, timeout=1800,
        env={**os.environ, "ODLA_TVM_SANITIZE": SANITIZE})
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
