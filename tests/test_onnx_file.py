"""An ONNX file's large weights are left in the file at import (odla_tvm.frontends.onnx_file)
and read once each, straight into its constant: the same data as onnx.load's, held once."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
from odla_tvm import OdlaError, Status
from odla_tvm.frontends.onnx import import_model
from odla_tvm.frontends.onnx_file import check_leaving_weights, read_leaving_weights

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(0)
# name -> data: large ones of each plain type, small ones and bfloat16 (kept in the proto)
WEIGHTS = {
    "w_f32": RNG.standard_normal((64, 1024)).astype(np.float32),
    "w_f16": RNG.standard_normal((128, 512)).astype(np.float16),
    "w_i64": RNG.integers(-2**40, 2**40, (16, 1024)),
    "w_u8": RNG.integers(0, 255, (256, 1024), dtype=np.uint8),
    "w_bool": RNG.random((512, 256)) < 0.5,
    "w_f64": RNG.standard_normal((32, 512)),
    "small": RNG.standard_normal((4, 4)).astype(np.float32),
}


def _model(path, weights=WEIGHTS, extra=()):
    """Each weight, cast to float32 and summed, an output of its own; ``extra``: more
    initializers (TensorProtos)."""
    nodes, outputs = [], []
    for name, data in weights.items():
        nodes += [helper.make_node("Cast", [name], [f"{name}_f"], to=TensorProto.FLOAT),
                  helper.make_node("ReduceSum", [f"{name}_f"], [f"{name}_sum"], keepdims=0)]
        outputs.append(helper.make_tensor_value_info(f"{name}_sum", TensorProto.FLOAT, []))
    initializers = [numpy_helper.from_array(d, n) for n, d in weights.items()] + list(extra)
    graph = helper.make_graph(nodes, "weights", [], outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


def test_large_weights_stay_in_the_file_and_read_back_as_onnx_load_reads_them(tmp_path):
    bf16 = helper.make_tensor("w_bf16", TensorProto.BFLOAT16, [256, 256],
                              RNG.integers(0, 2**15, 256 * 256, dtype=np.uint16).tobytes(),
                              raw=True)
    path = _model(str(tmp_path / "m.onnx"), extra=[bf16])
    proto, weights = read_leaving_weights(path)
    left = {t.name for t in proto.graph.initializer if not t.raw_data}
    assert left == set(weights.places) == {"w_f32", "w_f16", "w_i64", "w_u8", "w_bool", "w_f64"}
    for tensor in proto.graph.initializer:  # as external data in the model's own file
        external = {e.key: e.value for e in tensor.external_data}
        assert (tensor.data_location == TensorProto.EXTERNAL) == (tensor.name in weights)
        if tensor.name in weights:
            assert external == {"location": "m.onnx", "offset": str(weights.places[tensor.name][0]),
                                "length": str(weights.places[tensor.name][1])}
    check_leaving_weights(proto, weights)  # onnx's checker passes it
    loaded = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    for tensor in proto.graph.initializer:
        data = weights.read(tensor) if tensor.name in weights else numpy_helper.to_array(tensor)
        assert data.dtype == loaded[tensor.name].dtype and data.shape == loaded[tensor.name].shape
        assert data.tobytes() == loaded[tensor.name].tobytes(), tensor.name  # bfloat16 NaNs too
    # What is not weights is the model as onnx.load reads it.
    full = onnx.load(path)
    for t in full.graph.initializer:
        if t.name in weights:
            t.ClearField("raw_data")
            t.data_location = TensorProto.EXTERNAL
            t.external_data.extend(proto.graph.initializer[list(weights.places).index(t.name)]
                                   .external_data)
    assert proto == full


def test_a_model_imported_from_its_file_computes_with_its_weights(tmp_path):
    path = _model(str(tmp_path / "m.onnx"))
    session = odla.Session.from_onnx(path, engine_cache=False)
    sums = dict(zip(session.output_types, session.run({})))
    for name, data in WEIGHTS.items():
        expected = data.astype(np.float32).sum(dtype=np.float64)
        np.testing.assert_allclose(sums[f"{name}_sum"], expected, rtol=1e-4)
        assert sums[f"{name}_sum"].dtype == np.float32 and sums[f"{name}_sum"].shape == ()


def test_raw_data_that_does_not_fill_its_dims_is_refused(tmp_path):
    path = _model(str(tmp_path / "m.onnx"), {"w": WEIGHTS["w_f32"]})
    model = onnx.load(path)
    model.graph.initializer[0].dims[0] = 65  # one row more than the bytes hold
    onnx.save(model, path)
    with pytest.raises(OdlaError) as err:
        import_model(path)
    assert err.value.status == Status.INVALID_PARAM
    assert "initializer 'w'" in str(err.value) and "262144 bytes" in str(err.value) \
        and "[65, 1024]" in str(err.value) and "266240" in str(err.value)


def test_a_truncated_file_is_refused_as_onnx_load_refuses_it(tmp_path):
    path = _model(str(tmp_path / "m.onnx"), {"w": WEIGHTS["w_f32"]})
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(OdlaError) as err:
        import_model(path)
    assert err.value.status == Status.INVALID_PARAM and "truncated" in str(err.value)


_PEAK = """
import sys, numpy as np
import odla_tvm
from odla_tvm.frontends.onnx import import_model
import relay_bridge.graph  # the compiler loaded before measuring: not the weights' memory
def kb(field):
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith(field))
with open('/proc/self/clear_refs', 'w') as f:
    f.write('5')  # the peak RSS starts again from the current one
before = kb('VmRSS')
comp = import_model(sys.argv[1])
print((kb('VmHWM') - before) / 1024)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's procfs")
@pytest.mark.slow
def test_importing_a_file_holds_its_weights_once(tmp_path):
    # 128 MB of weights: onnx.load's proto and the constants together took twice that. Each is
    # added to an input, so none is folded into a constant of its own at import.
    weights = [numpy_helper.from_array(np.full((1024, 8192), i, np.float32), f"w{i}")
               for i in range(4)]
    graph = helper.make_graph(
        [helper.make_node("Add", [w.name, "x"], [f"y{i}"]) for i, w in enumerate(weights)],
        "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8192])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1024, 8192])
         for i in range(4)], weights)
    path = str(tmp_path / "big.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    done = subprocess.run([sys.executable, "-c", _PEAK, path], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr[-2000:]
    peak_mb = float(done.stdout.split()[-1])
    assert 128 <= peak_mb < 128 * 1.4, peak_mb
