"""odla_runner (no Python) answers the run-time checks odla-tvm's modules call on the host
(odla_tvm.check_*, libodla/src/checks.cc): a gather with good indices runs and matches
NumPy, a bad index or a zero divisor fails the run, naming what was wrong."""

import subprocess

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import ValueType as VT


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    comp = odla.create_computation()
    table = odla.create_argument(VT(E.FLOAT32, (10, 4)), "table")
    ids = odla.create_argument(VT(E.INT64, (3,)), "ids")
    a = odla.create_argument(VT(E.INT32, (4,)), "a")
    b = odla.create_argument(VT(E.INT32, (4,)), "b")
    odla.set_values_as_output([odla.gather(table, ids, 0, value_id="rows"),
                               odla.div(a, b, value_id="quotient")])
    return odla.export(comp, "host-cpu", tmp_path_factory.mktemp("checks") / "b",
                       with_runner=True)


def _run(bundle, tmp_path, ids, b):
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    feeds = {"table": table, "ids": np.asarray(ids, np.int64),
             "a": np.array([7, -7, 8, 9], np.int32), "b": np.asarray(b, np.int32)}
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
    return subprocess.run([str(bundle / "bin" / "odla_runner"), str(bundle), str(tmp_path),
                           "--repeat", "1", *[str(tmp_path / f"{n}.npy") for n in feeds]],
                          capture_output=True, text=True, timeout=120)


def test_good_indices_and_divisors_run(bundle, tmp_path):
    done = _run(bundle, tmp_path, [2, -1, 0], [2, 2, 3, 4])
    assert done.returncode == 0, done.stderr
    table = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.testing.assert_array_equal(np.load(tmp_path / "rows.npy"), table[[2, -1, 0]])


def test_a_bad_index_fails_the_run_naming_it(bundle, tmp_path):
    done = _run(bundle, tmp_path, [2, 10, 0], [2, 2, 3, 4])
    assert done.returncode == 1
    assert "index 10 (element 1 of the indices) is out of range; expected -10 to 9" \
        in done.stderr, done.stderr


def test_a_zero_divisor_fails_the_run_naming_it(bundle, tmp_path):
    done = _run(bundle, tmp_path, [0, 1, 2], [2, 0, 3, 4])
    assert done.returncode == 1
    assert "divides by zero (element 1 of the divisor)" in done.stderr, done.stderr
