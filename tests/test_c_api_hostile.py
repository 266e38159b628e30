"""Handles, ids and threads misused from C (tests/c_api/hostile_handles.c): each case in its own
process ends in the ODLA statuses (and results) expected, with no signal, no hang, and, where
the C tests run under the sanitizers (tests/test_c_sanitized.py), no sanitizer report."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import libodla

try:
    from . import c_programs as c
except ImportError:
    import c_programs as c

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the C tests build with gcc")

OK, INVALID_PARAM, FAILURE = "0", "3", "14"
# x of ones: A's y is 6 everywhere, B's 7 (z of ones)
EXPECTED = {
    # launch A, destroy A, load and launch B (one argument more) on the same context
    "context_outlives_executable": [OK, OK, OK, "7"],
    "bind_value_of_destroyed_executable": [INVALID_PARAM, INVALID_PARAM],
    # after A is destroyed the context no longer knows its outputs
    "runtime_outputs_of_destroyed_executable": [OK, OK, "1", OK, "0"],
    # create, destroy, destroy again, a value of it, make it current, an op on its value
    "destroy_computation_twice": [OK, OK, INVALID_PARAM, INVALID_PARAM, INVALID_PARAM, "1"],
    "stale_handles": [INVALID_PARAM] * 9,
    "foreign_handles": [INVALID_PARAM] * 12,
    "concurrent_destroys": ["200", "200"],  # of 200 twin destroys, one each succeeded
    # destroy the executable, then the context, while 40 runs are under way: all 40 ran
    "destroy_during_async_runs": [OK, OK, "0", "40"],
    "thread_start_fails": [FAILURE, OK],
    # "Y" bound: refused, and still refused with "y" bound beside it; a new context runs
    "misspelt_output_id": [INVALID_PARAM, INVALID_PARAM, OK, "6"],
    "unknown_argument_id_beside": [INVALID_PARAM],
    # layouts holding 0xA5A5A5A5: a (1, 1, 3, 3) of ones transposed by (1, 2, 3, 3) of ones
    # gives 1 at a corner and 9 at the centre
    "deconv_stray_layouts": ["1", OK, "1", "9"],
}


@pytest.fixture(scope="module")
def program_and_executables(tmp_path_factory):
    import odla_tvm as odla

    directory = tmp_path_factory.mktemp("hostile")
    E, VT = odla.ElementType, odla.ValueType
    paths = []
    for name, with_z in (("a", False), ("b", True)):
        comp = odla.create_computation()
        x = odla.create_argument(VT(E.FLOAT32, (4, 6)), "x")
        w = odla.create_constant(VT(E.FLOAT32, (6, 5)), np.ones((6, 5), np.float32))
        y = odla.gemm(x, False, w, False, 1.0, 0.0, None, None, "xw" if with_z else "y")
        if with_z:
            y = odla.add(y, odla.create_argument(VT(E.FLOAT32, (4, 5)), "z"), "y")
        odla.set_value_as_output(y)
        paths.append(directory / f"{name}.odla")
        paths[-1].write_bytes(odla.store_executable(None, odla.compile_computation(comp)))
        odla.destroy_computation(comp)
    libodla.build()
    program = c.compile_program(directory / "hostile_handles", [c.SOURCES / "hostile_handles.c"],
                                "gcc", ["-std=c99", "-Wall", "-Wextra", "-Werror"], ["-ldl"])
    return program, paths


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_misused_handle_gives_a_status_never_a_crash(program_and_executables, case):
    program, (a, b) = program_and_executables
    done = c.run_program(program, case, a, b, timeout=120)
    assert done.returncode == 0, f"{case}: exit {done.returncode}\n{done.stderr[-4000:]}"
    assert done.stdout.split() == EXPECTED[case], done.stderr[-4000:]
