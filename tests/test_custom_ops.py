"""ODLA's CustomOp reaches a user-registered implementation inside a compiled computation: a
TE function, a TIR PrimFunc, or a C function compiled into the module (and into what is
stored and exported), each checked against NumPy."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from tvm import te, tirx
from tvm.script import tirx as T

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import Status
from odla_tvm import ValueType as VT

CLIP_ADD_C = r"""
#include <dlpack/dlpack.h>
/* out = min(a + b, limit), limit from a 1-element third input */
int clip_add(DLTensor** in, int num_inputs, DLTensor** out, int num_outputs) {
  if (num_inputs != 3 || num_outputs != 1 || in[0]->dtype.code != kDLFloat) return 1;
  long n = 1;
  for (int i = 0; i < in[0]->ndim; ++i) n *= in[0]->shape[i];
  const float* a = (const float*)in[0]->data;
  const float* b = (const float*)in[1]->data;
  float limit = *(const float*)in[2]->data;
  float* o = (float*)out[0]->data;
  for (long i = 0; i < n; ++i) o[i] = a[i] + b[i] < limit ? a[i] + b[i] : limit;
  return 0;
}
"""


@T.prim_func(s_tir=True)
def _row_sums(x: T.Buffer((4, 5), "float32"), y: T.Buffer((4,), "float32")):
    for i, j in T.grid(4, 5):
        with T.sblock("sum"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                y[vi] = T.float32(0)
            y[vi] = y[vi] + x[vi, vj]


def _run(comp, feeds: dict, outputs: list[str]):
    ctx = odla.create_context()
    for name, data in feeds.items():
        odla.bind_to_argument_by_id(name, data, ctx)
    odla.execute_computation(comp, ctx, odla.ComputeMode.INFERENCE, None)
    return [odla.get_value_data(odla.find_value_by_id(o, comp), None, ctx) for o in outputs]


def _rng_floats(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_te_custom_op_with_attributes_and_two_outputs():
    odla.register_custom_op("scaled_tanh_and_square", te=lambda x, scale: [
        te.compute(x.shape, lambda *i: tirx.tanh(x(*i)) * tirx.const(scale, "float32")),
        te.compute(x.shape, lambda *i: x(*i) * x(*i))])
    comp = odla.create_computation()
    a = odla.create_argument(VT(E.FLOAT32, (2, 3)), "a")
    y, z = odla.custom_op([odla.add(a, a)], "ScaledTanh", "scaled_tanh_and_square",
                          ["y", "z"], {"scale": 2.5})
    assert y.type == VT(E.FLOAT32, (2, 3)) and z.type == VT(E.FLOAT32, (2, 3))
    odla.set_values_as_output([y, z])
    x = _rng_floats(2, 3)
    out_y, out_z = _run(comp, {"a": x}, ["y", "z"])
    np.testing.assert_allclose(out_y, np.tanh(2 * x) * 2.5, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out_z, (2 * x) ** 2, rtol=1e-5)
    assert out_y.dtype == np.float32


def test_tir_custom_op_inside_a_computation():
    odla.register_custom_op("row_sums", tir=_row_sums,
                            output_types=lambda ins, _: [VT(E.FLOAT32, (ins[0].shape.dims[0],))])
    comp = odla.create_computation()
    a = odla.create_argument(VT(E.FLOAT32, (4, 5)), "a")
    (s,) = odla.custom_op([odla.exp(a)], "RowSums", "row_sums", ["s"])
    odla.set_value_as_output(odla.log(s, "log_sums"))
    x = _rng_floats(4, 5, seed=1)
    (out,) = _run(comp, {"a": x}, ["log_sums"])
    np.testing.assert_allclose(out, np.log(np.exp(x).sum(axis=1)), rtol=1e-5)
    assert out.shape == (4,)


def _clip_add_computation():
    odla.register_custom_op("clip_add", c_source=CLIP_ADD_C,
                            output_types=lambda ins, _: [ins[0]])
    comp = odla.create_computation()
    a = odla.create_argument(VT(E.FLOAT32, (3, 4)), "a")
    b = odla.create_argument(VT(E.FLOAT32, (3, 4)), "b")
    limit = odla.create_constant(VT(E.FLOAT32, (1,)), np.array([1.5], np.float32))
    (y,) = odla.custom_op([odla.exp(a), b, limit], "ClipAdd", "clip_add", ["y"])
    odla.set_value_as_output(odla.neg(y, "z"))
    return comp


@pytest.mark.slow
def test_c_custom_op_compiled_into_the_module():
    a, b = _rng_floats(3, 4, seed=2), _rng_floats(3, 4, seed=3)
    (out,) = _run(_clip_add_computation(), {"a": a, "b": b}, ["z"])
    np.testing.assert_allclose(out, -np.minimum(np.exp(a) + b, 1.5), rtol=1e-6)


def test_c_custom_op_runs_from_a_stored_executable_in_a_fresh_process(tmp_path):
    exe = odla.compile_computation(_clip_add_computation(), odla.allocate_device())
    path = tmp_path / "clip.odla"
    odla.store_executable(str(path), exe)
    a, b = _rng_floats(3, 4, seed=4), _rng_floats(3, 4, seed=5)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    script = textwrap.dedent(f"""
        import numpy as np, odla_tvm as odla
        exe = odla.load_executable({str(path)!r})  # no implementation registered here
        ctx = odla.create_context()
        odla.bind_to_argument_by_id("a", np.load({str(tmp_path / 'a.npy')!r}), ctx)
        odla.bind_to_argument_by_id("b", np.load({str(tmp_path / 'b.npy')!r}), ctx)
        odla.launch_executable(exe, ctx)
        out = odla.get_value_data(odla.get_output_from_executable_by_idx(exe, 0), None, ctx)
        np.save({str(tmp_path / 'out.npy')!r}, out)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), -np.minimum(np.exp(a) + b, 1.5),
                               rtol=1e-6)


@pytest.mark.slow
def test_c_function_failure_is_an_odla_error_not_a_crash():
    odla.register_custom_op("clip_add", c_source=CLIP_ADD_C,
                            output_types=lambda ins, _: [ins[0]])
    comp = odla.create_computation()
    a = odla.create_argument(VT(E.FLOAT32, (2,)), "a")
    (y,) = odla.custom_op([a, a], "ClipAdd", "clip_add", ["y"])  # two inputs: returns 1
    odla.set_value_as_output(y)
    with pytest.raises(odla.OdlaError, match="custom function clip_add returned 1"):
        _run(comp, {"a": np.ones(2, np.float32)}, ["y"])


def _refused(call, status, *fragments):
    with pytest.raises(odla.OdlaError) as err:
        call()
    assert err.value.status == status, err.value
    for fragment in fragments:
        assert fragment in str(err.value)


def test_bad_registrations_and_calls_are_refused():
    odla.create_computation()
    a = odla.create_argument(VT(E.FLOAT32, (2,)), "a")
    _refused(lambda: odla.custom_op([a], "Nope", "never_registered"), Status.UNSUPPORTED_OP,
             "never_registered", "register_custom_op")
    _refused(lambda: odla.register_custom_op("two_kinds", te=lambda x: x, c_source="int f;"),
             Status.INVALID_PARAM, "exactly one", "['te', 'c_source']")
    _refused(lambda: odla.register_custom_op("nothing"), Status.INVALID_PARAM, "given none")
    _refused(lambda: odla.register_custom_op("untyped", tir=_row_sums), Status.INVALID_PARAM,
             "needs output_types")
    _refused(lambda: odla.register_custom_op("bad name"), Status.INVALID_PARAM,
             "'bad name'", "C identifier")
    _refused(lambda: odla.register_custom_op("not_tir", tir="x", output_types=lambda i, a: i),
             Status.INVALID_PARAM, "str", "tvm.tirx.PrimFunc")
    _refused(lambda: odla.custom_op([a], "", "f"), Status.INVALID_PARAM, "op_name", "''")
    _refused(lambda: odla.custom_op([a], "Op", "f", attributes=[1]), Status.INVALID_PARAM,
             "attributes is a list", "dict")
    odla.register_custom_op("broken_c", c_source="int broken_c( {", output_types=lambda i, a: i)
    _refused(lambda: odla.custom_op([a], "Broken", "broken_c"), Status.INVALID_PARAM,
             "failed on c code", "error")
    odla.register_custom_op("wrong_types", c_source=CLIP_ADD_C, output_types=lambda i, a: 3)
    _refused(lambda: odla.custom_op([a], "Wrong", "wrong_types"), Status.INVALID_PARAM,
             "output_types", "(shape, dtype)")


def test_a_prim_func_whose_buffers_disagree_with_its_tensors_is_refused():
    """A PrimFunc addresses its buffers by the shapes it declares: given a tensor of another
    shape (an input, or an output as output_types declared it) it would read or write past
    it, so the call is refused when the computation is built, naming both shapes."""
    odla.register_custom_op("row_sums_of_five", tir=_row_sums,
                            output_types=lambda ins, _: [VT(E.FLOAT32, (5,))])
    odla.register_custom_op("row_sums_fits", tir=_row_sums,
                            output_types=lambda ins, _: [VT(E.FLOAT32, (4,))])
    odla.register_custom_op("negative_dims", c_source=CLIP_ADD_C,
                            output_types=lambda ins, _: [VT(E.FLOAT32, (-1, 4))])
    comp = odla.create_computation()
    try:
        fits = odla.create_argument(VT(E.FLOAT32, (4, 5)), "fits")
        wide = odla.create_argument(VT(E.FLOAT32, (4, 6)), "wide")
        _refused(lambda: odla.custom_op([fits], "RowSums", "row_sums_of_five"),
                 Status.INVALID_PARAM, "output 0 as float32[4]", "given float32[5]")
        _refused(lambda: odla.custom_op([wide], "RowSums", "row_sums_fits"),
                 Status.INVALID_PARAM, "input 0 as float32[4, 5]", "given float32[4, 6]")
        _refused(lambda: odla.custom_op([fits, fits], "RowSums", "row_sums_fits"),
                 Status.INVALID_PARAM, "takes 2 buffers", "2 inputs and 1 declared outputs")
        _refused(lambda: odla.custom_op([fits], "Negative", "negative_dims"),
                 Status.INVALID_PARAM, "[-1, 4]", "at least 0")
    finally:
        odla.destroy_computation(comp)
