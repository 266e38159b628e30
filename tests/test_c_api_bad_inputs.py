"""Bad input from C (tests/c_api/bad_inputs.c): every failure is an ODLA status with a message
through ODLA's logger, never an abort; ops given bad input return NULL."""

from __future__ import annotations

import shutil

import pytest

import libodla

try:
    from . import c_programs as c
except ImportError:
    import c_programs as c

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the C tests build with gcc")

OK, NULL = 0, -1  # a status, or what an op returned
FILE_NOT_EXIST, INVALID_PARAM, UNSUPPORTED_DATATYPE, UNSUPPORTED_DEVICE_TYPE = 2, 3, 5, 6
UNSUPPORTED_OP = 7
EXPECTED = {
    "load_missing_file": FILE_NOT_EXIST,
    "load_truncated_file": INVALID_PARAM,
    "load_altered_file": INVALID_PARAM,
    "load_foreign_file": INVALID_PARAM,
    "load_other_tvms_file": UNSUPPORTED_DEVICE_TYPE,
    "load_null_path": INVALID_PARAM,
    "load_from_uri": UNSUPPORTED_DATATYPE,
    "load_null_result": INVALID_PARAM,
    "load_good": OK,
    "create_context_null": INVALID_PARAM,
    "launch_null_executable": INVALID_PARAM,
    "launch_null_context": INVALID_PARAM,
    "launch_unbound_argument": INVALID_PARAM,
    "bind_null_id": INVALID_PARAM,
    "bind_null_data": INVALID_PARAM,
    "bind_unknown_id": OK,  # binding is cheap; the launch names the id the executable lacks
    "launch_with_unknown_id_only": INVALID_PARAM,
    "launch_with_an_unknown_id_beside": INVALID_PARAM,
    "arg_index_out_of_range": INVALID_PARAM,
    "num_args_null": INVALID_PARAM,
    "runtime_shape_rank_11": INVALID_PARAM,
    "launch_good": OK,
    "async_with_constants_array": UNSUPPORTED_DATATYPE,
    "launch_training_mode": UNSUPPORTED_OP,
    "launch_foreign_device": INVALID_PARAM,
    "store_to_missing_directory": FILE_NOT_EXIST,
    "destroyed_context": INVALID_PARAM,
    "destroy_context_twice": INVALID_PARAM,
    "destroy_executable": OK,
    "destroyed_executable": INVALID_PARAM,
    "op_in_a_thread_without_computation": NULL,
    "create_computation_null": INVALID_PARAM,
    "create_computation": OK,
    "argument_rank_11": NULL,
    "argument_bad_element_type": NULL,
    "constant_null_data": NULL,
    "bool_argument": OK,
    "sqrt_of_bool": NULL,
    "relu_of_null": NULL,
    "conv_of_rank_2": NULL,
    "find_unknown_id": INVALID_PARAM,
    "type_of_unknown_id": INVALID_PARAM,
    "output_by_unknown_id": INVALID_PARAM,
    "item_vendor_sim_mode": OK,  # generated code sets it and ignores the status
    "item_quant_table": UNSUPPORTED_DATATYPE,
    "item_unknown": UNSUPPORTED_DATATYPE,
    "outputs_of_null": INVALID_PARAM,
    "execute_without_outputs": INVALID_PARAM,
    "destroy_computation": OK,
    "destroy_context": OK,
}


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A good executable (x: float32 (4, 6) -> y: float32 (4, 5)) and broken copies of it."""
    import numpy as np

    import odla_tvm as odla

    directory = tmp_path_factory.mktemp("bad_inputs")
    E, VT = odla.ElementType, odla.ValueType
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (4, 6)), "x")
    w = odla.create_constant(VT(E.FLOAT32, (6, 5)), np.ones((6, 5), np.float32))
    odla.set_value_as_output(odla.gemm(x, False, w, False, 1.0, 0.0, None, None, "y"))
    blob = odla.store_executable(None, odla.compile_computation(comp))
    odla.destroy_computation(comp)
    files = {"good": blob, "truncated": blob[:len(blob) // 2],
             "altered": blob[:len(blob) // 2] + bytes([blob[len(blob) // 2] ^ 0xFF])
             + blob[len(blob) // 2 + 1:], "foreign": b"\x7fELF this is not an executable\n",
             # the manifest (unhashed) says another TVM built it: 0.27 becomes 9.27
             "other_tvm": blob.replace(b'"tvm_version": "0', b'"tvm_version": "9', 1)}
    paths = {}
    for name, data in files.items():
        paths[name] = directory / f"{name}.odla"
        paths[name].write_bytes(data)
    return paths, directory / "missing.odla"


def test_bad_input_gives_statuses_and_messages_never_a_crash(stored, tmp_path):
    libodla.build()
    program = c.compile_program(tmp_path / "bad_inputs", [c.SOURCES / "bad_inputs.c"], "gcc",
                                ["-std=c99", "-Wall", "-Wextra"])
    paths, missing = stored
    done = c.run_program(program, paths["good"], paths["truncated"], paths["altered"],
                         paths["foreign"], missing, paths["other_tvm"])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "done"
    results = {name: (int(status), int(messages))
               for name, status, messages in (line.split() for line in lines[:-1])}
    assert {name: status for name, (status, _) in results.items()} == EXPECTED
    silent = [name for name, (status, messages) in results.items()
              if status not in (OK,) and messages == 0]
    assert silent == [], "failures with no message through odla_SetLogger's logger"


@pytest.mark.parametrize("environment", [
    {"VIRTUAL_ENV": "/nonexistent"},  # a Python without odla-tvm: odla_tvm does not import
    {"PYTHONHOME": "/nonexistent"},  # a Python that cannot start
])
def test_build_calls_without_a_usable_python_give_a_status(tmp_path, environment):
    libodla.build()
    source = tmp_path / "create.c"
    source.write_text(
        "#include <ODLA/odla.h>\n#include <stdio.h>\n"
        "int main(void) {\n  odla_computation comp;\n"
        "  printf(\"%d\\n\", odla_CreateComputation(&comp));\n"
        "  printf(\"%d\\n\", odla_CreateComputation(&comp));\n  return 0;\n}\n")
    program = c.compile_program(tmp_path / "create", [source], "gcc", ["-std=c99"])
    done = c.run_program(program, env={"PYTHONPATH": "", **environment})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]  # ODLA_DL_ERROR, and again on a second call
    assert "odla_CreateComputation" in done.stderr
