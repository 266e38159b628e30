"""The precompiled workflow as HALO's generated C code drives it: a stored executable loaded
in a fresh process and used only through value ids."""

import os
import subprocess
import sys
import textwrap

import numpy as np

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import ValueType as VT

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What the fresh process runs: no computation, no Value objects, ids only.
C_STYLE = textwrap.dedent("""
    import sys
    import numpy as np
    import odla_tvm as odla

    stored, x_path, y_path, out_path = sys.argv[1:]
    exe = odla.load_executable(stored)
    ctx = odla.create_context()
    odla.bind_to_argument_by_id("x", np.load(x_path), ctx)
    odla.bind_to_argument_by_id("y", np.load(y_path), ctx)
    total = np.zeros((2, 3), np.float32)
    odla.bind_to_output_by_id("total", total, ctx)
    odla.launch_executable(exe, ctx)
    product = np.zeros(6, np.float32)
    odla.get_value_data("product", product, ctx)
    np.savez(out_path, total=total, product=product,
             product_copy=odla.get_value_data("product", None, ctx))
    for bad in ({"total": np.zeros((2, 3), np.int32)}, {"totl": np.zeros((2, 3), np.float32)}):
        ctx = odla.create_context()
        odla.bind_to_argument_by_id("x", np.load(x_path), ctx)
        odla.bind_to_argument_by_id("y", np.load(y_path), ctx)
        (value_id, buffer), = bad.items()
        odla.bind_to_output_by_id(value_id, buffer, ctx)
        try:
            odla.launch_executable(exe, ctx)
        except odla.OdlaError as err:
            print("refused:", err)
""")


def test_stored_executable_runs_by_ids_in_a_fresh_process(tmp_path):
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, 3)), "x")
    y = odla.create_argument(VT(E.FLOAT32, (2, 3)), "y")
    odla.set_value_as_output(odla.add(x, y, "total"))
    odla.set_value_as_output(odla.mul(x, y, "product"))
    stored = tmp_path / "model.odla"
    odla.store_executable(stored, odla.compile_computation(comp))
    odla.destroy_computation(comp)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    np.save(tmp_path / "x.npy", a)
    np.save(tmp_path / "y.npy", b)
    script = tmp_path / "c_style.py"
    script.write_text(C_STYLE)
    done = subprocess.run(
        [sys.executable, str(script), str(stored), str(tmp_path / "x.npy"),
         str(tmp_path / "y.npy"), str(tmp_path / "out.npz")],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True,
        timeout=300)
    assert done.returncode == 0, done.stderr
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["total"], a + b)
    np.testing.assert_array_equal(out["product"], (a * b).reshape(-1))
    np.testing.assert_array_equal(out["product_copy"], a * b)
    refusals = done.stdout.splitlines()
    assert len(refusals) == 2, done.stdout
    assert "INVALID_PARAM" in refusals[0] and "'total'" in refusals[0] and "int32" in refusals[0]
    assert "INVALID_PARAM" in refusals[1] and "'totl'" in refusals[1] and "'total'" in refusals[1]
