"""The bench's models (onnx's light models, or ONNX files) and the inputs it feeds them."""

from __future__ import annotations

import os

import numpy as np

from ..types import OdlaError, Status, check_count

# Tuned ODLA-TVM is to reach onnxruntime's latency on these (docs/bench/perf.md says how far it is).
TARGET_MODELS = ("resnet50", "squeezenet", "inception_v1", "vgg19")
LIGHT_MODELS = TARGET_MODELS + ("bvlc_alexnet", "densenet121", "inception_v2", "shufflenet",
                                "zfnet512")


def light_model_path(name: str) -> str:
    """The file of onnx's light model ``name`` (in the onnx package)."""
    import onnx

    if name not in LIGHT_MODELS:
        raise OdlaError(Status.INVALID_PARAM,
                        f"models ['{name}'] are not light models; choose from {list(LIGHT_MODELS)}")
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")


def read_model(path):
    """The onnx.ModelProto in ``path``; an OdlaError where it is missing or not ONNX."""
    import onnx

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise OdlaError(Status.FILE_NOT_EXIST, f"model file {path!r} does not exist")
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as err:  # noqa: BLE001 (protobuf's DecodeError, and anything else)
        raise OdlaError(Status.INVALID_PARAM, f"{path!r} is not an ONNX model: {err}") from None
    if not model.graph.node or not model.graph.output:
        raise OdlaError(Status.INVALID_PARAM, f"{path!r} is not an ONNX model: no graph")
    return model


def model_inputs(model, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Data for each graph input (initializers excluded): floats seeded standard normal, int64
    inputs named like a mask ones, other integers seeded in [0, 1000), booleans seeded.
    A symbolic first dim takes ``batch``; any other symbolic dim is an error."""
    from onnx.helper import tensor_dtype_to_np_dtype

    check_count(batch, 1, "batch")
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = tuple(_fixed_dim(value.name, i, d, batch)
                      for i, d in enumerate(value.type.tensor_type.shape.dim))
        dtype = np.dtype(tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        if dtype.kind == "f":
            data = rng.standard_normal(shape)
        elif dtype == np.int64 and "mask" in value.name.lower():
            data = np.ones(shape)
        elif dtype.kind in "iu":
            data = rng.integers(0, min(1000, np.iinfo(dtype).max + 1), shape)
        elif dtype.kind == "b":
            data = rng.integers(0, 2, shape)
        else:
            raise OdlaError(Status.UNSUPPORTED_DATATYPE,
                            f"input {value.name!r} is {dtype}; the bench makes float, integer "
                            "and boolean inputs")
        feeds[value.name] = data.astype(dtype)
    return feeds


def _fixed_dim(name: str, index: int, dim, batch: int) -> int:
    if dim.HasField("dim_value") and dim.dim_value > 0:
        return dim.dim_value
    if index == 0:
        return batch
    raise OdlaError(Status.INVALID_PARAM,
                    f"input {name!r} dim {index} is symbolic ({dim.dim_param or 'unnamed'}); "
                    "the bench needs fixed dims but the first (the batch: --batch)")


def model_files(files=(), names=()) -> list[tuple[str, str]]:
    """(name, path) of each light model named (its file in the onnx package, named like it:
    light_<name>, apart from a real model of that name; an unknown name is an error) and of
    each ONNX file (named by its file; bench_models checks the files)."""
    unknown = [n for n in names if n not in LIGHT_MODELS]
    if unknown:
        raise OdlaError(Status.INVALID_PARAM,
                        f"models {unknown} are not light models; choose from {list(LIGHT_MODELS)}")
    models = [(f"light_{name}", light_model_path(name)) for name in names]
    models += [(os.path.splitext(os.path.basename(os.fspath(f)))[0], os.fspath(f)) for f in files]
    return models
