"""One converter per ONNX op type, grouped like ODLA's op headers; importing this package
registers them all (see ``registry``)."""

from . import (
    attention,
    control_flow,
    math,
    nn,
    process,
    quantization,
    sampling,
    signal,
    training,
)
