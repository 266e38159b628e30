"""int8 models made by onnxruntime's own quantizer, for the bench's ``--precision int8``: the
file every engine runs, made as a user of onnxruntime would make it.

A model of float inputs (a CNN) is quantized statically in the QDQ format, per output channel,
u8 activations and s8 weights, calibrated on seeded random inputs; a model of integer inputs (a
transformer) dynamically (DynamicQuantizeLinear + MatMulInteger). On a CPU without VNNI the
weights keep 7 bits (``reduce_range``), as onnxruntime advises there: its u8 x s8 products,
and oneDNN's, go through vpmaddubsw, whose 16-bit pair sums saturate with 8-bit weights.
The quantized file names the float32 file it was made from (FLOAT_MODEL_KEY), which the
bench's accuracy is measured against.
"""

from __future__ import annotations

import os
import tempfile

from ..types import OdlaError, Status
from .models import model_inputs, read_model

FLOAT_MODEL_KEY = "odla_tvm.float_model"  # metadata: the float32 file's absolute path
CALIBRATION_SAMPLES = 8
# What a CPU needs for onnxruntime's and oneDNN's u8 x s8 products not to saturate with 8-bit
# weights (a dot product instruction accumulating in 32 bits).
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def has_vnni(flags) -> bool:
    return any(flag in flags for flag in VNNI_FLAGS)


def is_static(model) -> bool:
    """Whether ``model`` (an onnx.ModelProto) is quantized statically: its inputs are floats
    (images); integer inputs (token ids) make it a transformer, quantized dynamically."""
    from onnx import TensorProto

    initializers = {t.name for t in model.graph.initializer}
    return all(v.type.tensor_type.elem_type in (TensorProto.FLOAT, TensorProto.FLOAT16)
               for v in model.graph.input if v.name not in initializers)


class _SeededInputs:
    """onnxruntime's CalibrationDataReader: CALIBRATION_SAMPLES seeded random inputs."""

    def __init__(self, model):
        self.feeds = iter([model_inputs(model, 1, seed) for seed in range(CALIBRATION_SAMPLES)])

    def get_next(self):
        return next(self.feeds, None)


def quantize(float_path: str, out_path: str, reduce_range: bool | None = None) -> str:
    """Writes ``float_path`` quantized to ``out_path`` (see the module's doc) and returns
    "static" or "dynamic"; ``reduce_range``: 7-bit weights (default: where this CPU has no
    VNNI)."""
    import onnx
    from onnxruntime import quantization as q

    from targets.specs import host_cpu_flags

    model = read_model(float_path)
    if reduce_range is None:
        reduce_range = not has_vnni(host_cpu_flags())
    static = is_static(model)
    folder = os.path.dirname(os.path.abspath(out_path))
    with tempfile.TemporaryDirectory(dir=folder) as work:
        partial = os.path.join(work, "model.onnx")
        try:
            if static:
                q.quantize_static(float_path, partial, _SeededInputs(model),
                                  quant_format=q.QuantFormat.QDQ, per_channel=True,
                                  reduce_range=reduce_range, activation_type=q.QuantType.QUInt8,
                                  weight_type=q.QuantType.QInt8)
            else:
                q.quantize_dynamic(float_path, partial, reduce_range=reduce_range,
                                   weight_type=q.QuantType.QInt8)
        except Exception as err:  # noqa: BLE001 (the quantizer's own errors, named)
            raise OdlaError(Status.FAILURE, f"onnxruntime could not quantize {float_path!r}: "
                            f"{type(err).__name__}: {err}") from None
        quantized = onnx.load(partial)
        entry = quantized.metadata_props.add()
        entry.key, entry.value = FLOAT_MODEL_KEY, os.path.abspath(float_path)
        onnx.save(quantized, partial)
        os.replace(partial, out_path)
    return "static" if static else "dynamic"


def float32_outputs(path: str, feeds: dict, threads: int) -> list:
    """onnxruntime's outputs of the float32 file the quantized ``path`` was made from."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(float_model(path), options,
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def float_model(path: str) -> str:
    """The float32 file the quantized model in ``path`` was made from (FLOAT_MODEL_KEY); an
    OdlaError where it names none or that file is gone."""
    model = read_model(path)
    named = next((p.value for p in model.metadata_props if p.key == FLOAT_MODEL_KEY), None)
    if named is None:
        raise OdlaError(Status.INVALID_PARAM,
                        f"{path!r} names no float32 model ({FLOAT_MODEL_KEY}); an int8 bench "
                        "takes files made by scripts/quantize_models.py")
    if not os.path.isfile(named):
        raise OdlaError(Status.FILE_NOT_EXIST,
                        f"{path!r} was made from {named!r}, which does not exist")
    return named

