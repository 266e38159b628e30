"""A fixed slice of the fuzzing campaign (scripts/fuzz.py): every case, of every format, ends
in success or OdlaError; and the workers' supervisor reports a crash or a hang as such.

The seeds (a tuned database among them, about 90 s to make) are kept in pytest's cache
directory, so only the first run makes them."""

import os
import signal
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
from tools import fuzzing, isolation
from odla_tvm.data_checks import MEMORY_BYTES

PER_KIND = 5  # cases per format and mutation family: 55 in all


@pytest.fixture(scope="module")
def seeds(request, tmp_path_factory):
    """Kept in pytest's cache between runs where it has one (-p no:cacheprovider: none)."""
    cache = getattr(request.config, "cache", None)
    directory = cache.mkdir("fuzz-seeds") if cache else tmp_path_factory.mktemp("fuzz-seeds")
    return fuzzing.build_seeds(directory)


def test_a_fixed_slice_of_the_campaign_conforms(seeds):
    names = [f"{fmt}-{family}-{n}" for fmt, family in fuzzing.MIX for n in range(PER_KIND)]
    outcomes = fuzzing.run_campaign(names, seeds, jobs=2, timeout=60)
    bad = [f"{o.case} ({o.mutation}): {o.kind}: {o.detail[:200]}" for o in outcomes
           if not o.conforming]
    assert not bad, "\n".join(bad)
    assert {o.format for o in outcomes} == set(fuzzing.FORMATS)
    assert any(o.kind == "success" for o in outcomes)
    report = fuzzing.report(outcomes, "test slice")
    assert f"**{len(names)} cases: {len(names)} conforming" in report


def test_a_case_repeats_exactly(seeds):
    runner = fuzzing.Runner(seeds)
    first, again = runner("onnx-struct-7"), runner("onnx-struct-7")
    assert (first.mutation, first.kind, first.detail) == (again.mutation, again.kind, again.detail)


def _victim(name):
    if name == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if name == "hang":
        time.sleep(60)
    return name


def _victim_setup():
    return _victim


def test_the_supervisor_reports_crashes_and_hangs_and_goes_on():
    results = isolation.run_isolated(["a", "crash", "b", "hang", "c"], _victim_setup, jobs=1,
                                     timeout=5)
    assert [results[n] for n in "abc"] == ["a", "b", "c"]
    assert (results["crash"].kind, results["crash"].detail) == ("crash",
                                                                "worker killed by SIGSEGV")
    assert results["hang"].kind == "hang"


def _model(input_dims, initializer=None):
    inits = [initializer] if initializer is not None else []
    node = helper.make_node("Add", ["x", inits[0].name if inits else "x"], ["y"])
    graph = helper.make_graph([node], "huge", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, input_dims)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, input_dims)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_bigger_than_memory_is_refused_naming_the_tensor():
    huge = 1 << 40
    with pytest.raises(odla.OdlaError) as err:
        odla.Session.from_onnx(_model((huge, 4)))
    assert err.value.status is odla.Status.MEM_ERROR
    assert "'x'" in err.value.message and f"{huge * 16} bytes" in err.value.message
    assert f"{MEMORY_BYTES} bytes" in err.value.message
    # An initializer declaring huge dims is refused (by onnx's checker) before it is read.
    weight = numpy_helper.from_array(np.zeros(4, np.float32), "w")
    weight.dims[:] = [huge, 4]
    with pytest.raises(odla.OdlaError) as err:
        odla.Session.from_onnx(_model((1, 4), weight))
    assert "w" in err.value.message and f"{huge * 16} bytes" in err.value.message
    # So is a ConstantOfShape of a huge shape (its constant is made at import).
    shape = numpy_helper.from_array(np.array([huge, 4], np.int64), "s")
    model = _model((huge, 4), shape)
    model.graph.node.insert(0, helper.make_node("ConstantOfShape", ["s"], ["c"]))
    model.graph.node[1].input[:] = ["c", "c"]
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    with pytest.raises(odla.OdlaError) as err:
        odla.Session.from_onnx(model)
    assert err.value.status is odla.Status.MEM_ERROR and "'c'" in err.value.message
    # Dims whose product wraps in int64 are counted exactly.
    with pytest.raises(odla.OdlaError) as err:
        odla.Session.from_onnx(_model((1 << 32, 1 << 32)))
    assert err.value.status is odla.Status.MEM_ERROR


def test_an_executable_declaring_a_huge_argument_is_refused(seeds):
    def huge_argument(manifest):
        manifest["args"][0]["type"]["dims"] = [1 << 40, 4]
        return manifest

    blob = fuzzing.edit_manifest((seeds / "odla" / "conv_relu.odla").read_bytes(), huge_argument)
    with pytest.raises(odla.OdlaError) as err:
        odla.load_executable(blob)
    assert err.value.status is odla.Status.MEM_ERROR and "'image'" in err.value.message


def test_an_initializer_that_does_not_fill_its_dims_is_refused():
    weight = numpy_helper.from_array(np.zeros(5, np.float32), "w")  # onnx checks too little only
    weight.dims[:] = [4]
    with pytest.raises(odla.OdlaError) as err:
        odla.Session.from_onnx(_model((4,), weight))
    assert err.value.status is odla.Status.INVALID_PARAM and "'w'" in err.value.message
