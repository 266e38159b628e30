"""Session: the convenient layer, like onnxruntime's InferenceSession.

Compile (or load) once, then ``run({"input": array})`` many times.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from . import engine_cache as engine_cache_module
from .computation import Computation, destroy_computation, set_computation_item
from .context import argument_data
from .device import Device, checked_device
from .executable import (Executable, compile_computation, compile_outputs, load_executable,
                         store_executable)
from .types import Bf16Mode, ItemType, OdlaError, Status, ValueType

# Session.from_onnx's ``precision``: the ODLA items each name sets on the computation.
PRECISIONS = {"fp32": {}, "bf16": {ItemType.BF16_MODE: Bf16Mode.PERFORMACE_MODE},
              "fp16": {ItemType.FP16_MODE: True}}


def _onnx_frontend():
    """odla_tvm.frontends.onnx, imported (with onnx) where a model is imported: a cache hit
    needs neither."""
    from .frontends import onnx

    return onnx


def _describe(model) -> str:
    """What an engine was built from, for `odla-tvm cache`: the file, or the model's graph."""
    if isinstance(model, (str, os.PathLike)):
        return os.path.abspath(os.fspath(model))
    graph = getattr(model, "graph", None)
    return f"ONNX graph {graph.name!r}" if graph is not None else "ONNX model bytes"


def precision_items(precision: str | None) -> dict:
    """The ODLA items of ``precision`` (a name of PRECISIONS, or None for fp32)."""
    if precision is None:
        return {}
    if precision not in PRECISIONS:
        raise OdlaError(Status.INVALID_PARAM, f"precision is {precision!r}; expected one of "
                        f"{', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


def set_precision(computation: Computation, precision: str | None) -> None:
    """Sets the items of ``precision`` (see PRECISIONS) on ``computation``."""
    for item, value in precision_items(precision).items():
        set_computation_item(computation, item, value)


class Session:
    """Runs one executable. ``source``: a Computation (compiled here), an Executable, or a
    stored executable (file path or bytes)."""

    def __init__(self, source, device: Device | None = None):
        if isinstance(source, Executable):
            self.executable = source
        elif isinstance(source, Computation):
            self.executable = compile_computation(source, device)
        elif isinstance(source, (str, bytes, bytearray, memoryview, os.PathLike)):
            self.executable = load_executable(source, device)
        else:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"Session source is a {type(source).__name__}; expected a Computation, an "
                "Executable, or a stored executable path or bytes",
            )
        self._args = {v.id: v for v in self.executable.args}
        # What every run checks, worked out once: the argument ids, the output ids in order,
        # and per argument its dtype and static shape (None when dynamic).
        self._arg_ids = set(self._args)
        self._output_ids = [v.id for v in self.executable.outputs]
        self._types = [(v, v.type.dtype, None if v.shape.is_dynamic else v.shape.dims)
                       for v in self.executable.args]

    @classmethod
    def from_onnx(cls, model, device: Device | None = None, input_data: dict | None = None,
                  engine_cache: bool | None = None, cache_dir=None,
                  precision: str | None = None) -> "Session":
        """A session over an ONNX model (a path, bytes or onnx.ModelProto) imported through
        the ODLA op API (odla_tvm.frontends.onnx); inputs and outputs keep their ONNX names.
        ``input_data`` fixes graph inputs to data (see ``import_model``). ``engine_cache``
        (ODLA's ENABLE_ENGINE_CACHE; default on unless ODLA_TVM_ENGINE_CACHE=0) keeps the
        compiled engine in ``cache_dir`` (ODLA's CACHE_DIR; default $ODLA_TVM_CACHE_DIR or
        ~/.cache/odla-tvm), so the next load of the same model for the same device reads it
        instead of compiling (see odla_tvm.engine_cache). ``precision`` ("fp32", "bf16" or
        "fp16"; default fp32) sets the items of PRECISIONS before the compile (on a CPU
        without that precision's instructions: float32 on weights rounded to it, see
        Computation.build_module); it is part of the engine's key."""
        device = checked_device(device)
        items = precision_items(precision)
        use_cache = engine_cache_module.enabled() if engine_cache is None else bool(engine_cache)
        digest, computation = None, None
        if use_cache and engine_cache_module.digest_remembered(model, cache_dir):
            digest = engine_cache_module.model_digest(model, input_data, cache_dir)
        elif use_cache:
            # Not seen before (a miss, but for the same model under another name): the file
            # is read for its digest while it is imported, hiding the read behind the import.
            import concurrent.futures  # (a miss's alone: a cached load does not import it)

            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                digesting = pool.submit(engine_cache_module.model_digest, model, input_data,
                                        cache_dir)
                computation = _onnx_frontend().import_model(model, input_data)
                digest = digesting.result()
        key = None if digest is None else engine_cache_module.engine_key(
            digest, device, cache_dir, {"precision": precision} if items else None)
        if key is not None:
            cached = engine_cache_module.load(key, device, cache_dir)
            if cached is not None:
                if computation is not None:
                    destroy_computation(computation)
                return cls(cached)
        if computation is None:
            computation = _onnx_frontend().import_model(model, input_data)
        # A model whose weights live in other files is keyed on the .onnx file alone: not kept.
        keep = key is not None and not _onnx_frontend().has_external_data(model)
        # The weights the compile lays out go to files beside the engine it keeps, out of
        # memory, and into the engine as they are (linked, not written again).
        with engine_cache_module.weight_files(cache_dir) if keep else \
                contextlib.nullcontext() as weight_files:
            try:
                if cache_dir is not None:
                    set_computation_item(computation, ItemType.CACHE_DIR, os.fspath(cache_dir))
                set_precision(computation, precision)
                executable = compile_outputs(computation, device, computation.args,
                                             computation.outputs, weight_files)
            finally:
                destroy_computation(computation)
            if keep:
                engine_cache_module.store(key, executable, _describe(model), cache_dir)
        return cls(executable)

    @property
    def input_types(self) -> dict[str, ValueType]:
        return {v.id: v.type for v in self.executable.args}

    @property
    def output_types(self) -> dict[str, ValueType]:
        return {v.id: v.type for v in self.executable.outputs}

    def run(self, feeds: dict, output_ids: list[str] | None = None) -> list[np.ndarray]:
        """Outputs (all, or those named in ``output_ids``) as NumPy arrays, in order."""
        if not isinstance(feeds, dict):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"feeds is a {type(feeds).__name__}; expected a dict of argument id to array",
            )
        if feeds.keys() != self._arg_ids:
            unknown = sorted(set(feeds) - self._arg_ids)
            missing = sorted(self._arg_ids - set(feeds))
            raise OdlaError(
                Status.INVALID_PARAM,
                f"feeds name {sorted(feeds)}; expected exactly {sorted(self._args)}"
                + (f" (unknown: {unknown})" if unknown else "")
                + (f" (missing: {missing})" if missing else ""),
            )
        if output_ids is not None:
            bad = [i for i in output_ids if i not in self._output_ids]
            if bad:
                raise OdlaError(Status.INVALID_PARAM, f"output ids {bad} are not outputs; "
                                f"outputs: {sorted(self._output_ids)}")
        # The checks bind_to_argument makes, in full only for data that is not already an
        # array of the argument's static dtype and shape.
        inputs = []
        for value, dtype, dims in self._types:
            data = feeds[value.id]
            if type(data) is not np.ndarray or data.dtype != dtype or data.shape != dims:
                data = argument_data(value, data)
            inputs.append(data)
        results = self.executable._run(inputs)
        if output_ids is None:
            return results
        return [results[self._output_ids.index(i)] for i in output_ids]

    def save(self, path) -> None:
        store_executable(path, self.executable)
