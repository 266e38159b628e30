"""odla-tvm as an ONNX backend (``onnx.backend.base``), so that onnx's own backend test runner
can drive it and users can write ``prepare(model).run(inputs)``.

    from odla_tvm.frontends import onnx_backend
    rep = onnx_backend.prepare("model.onnx")      # imported and compiled once
    outputs = rep.run([x])                        # or rep.run({"input": x})

``prepare``'s option ``precision`` ("fp32", "bf16" or "fp16") is Session.from_onnx's.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, namedtupledict

from ..data_checks import host_data
from ..device import DEVICE_ALIASES, allocate_device, available_devices
from ..session import Session, precision_items
from ..types import DeviceName, OdlaError, Status
from . import onnx as onnx_frontend
from .onnx_converters.registry import InputDataNeeded


def _device_name(device: str) -> DeviceName | None:
    """The ODLA device an ONNX device string ("CPU", "CUDA", "CUDA:0"; "GPU" too) names."""
    kind = str(device).partition(":")[0].strip().upper()
    return DEVICE_ALIASES.get(kind)


def _odla_device(device: str):
    name = _device_name(device)
    if name is None or name not in available_devices():
        raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE, f"ONNX device {device!r} is not "
                        f"available here; expected one of {OdlaBackend.devices()}")
    return allocate_device(device_name=name)


def _array(data, name: str) -> np.ndarray:
    """A feed as an array; a DLPack tensor viewed, or refused when on another device."""
    return np.asarray(host_data(data, f"input {name!r}"))


class OdlaBackendRep(BackendRep):
    """A model imported and compiled once; ``run`` feeds its graph inputs in order.

    Small graph inputs whose data ODLA needs when the model is imported (a Reshape's
    target, reduction axes, pads, or what is computed from them) are taken from the feeds of
    a run: the model is compiled for their values, and again when they change (one
    executable kept per set of values). ``precision``: as Session.from_onnx's."""

    def __init__(self, model: onnx.ModelProto, device: str, precision: str | None = None):
        precision_items(precision)  # checked before the model is read
        self.precision = precision
        self.model = onnx_frontend.load_model(model)
        self.device = _odla_device(device)
        initializers = {t.name for t in self.model.graph.initializer}
        self.input_names = [i.name for i in self.model.graph.input if i.name not in initializers]
        self.output_names = [o.name for o in self.model.graph.output]
        self.data_inputs: list[str] = []  # graph inputs compiled in as constants
        self._sessions: dict[tuple, Session] = {}
        try:
            self._sessions[()] = Session.from_onnx(self.model, self.device,
                                                   precision=precision)
        except InputDataNeeded as err:
            self.data_inputs += sorted(err.input_ids)

    def _session(self, feeds: dict) -> Session:
        while True:
            data = {name: feeds[name] for name in self.data_inputs}
            key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in data.values())
            if key in self._sessions:
                return self._sessions[key]
            try:
                session = Session.from_onnx(self.model, self.device, data,
                                            precision=self.precision)
            except InputDataNeeded as err:
                if err.input_ids <= set(self.data_inputs):
                    raise
                self.data_inputs += sorted(err.input_ids - set(self.data_inputs))
                continue
            self._sessions[key] = session
            return session

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = {name: _array(a, name) for name, a in inputs.items()}
        else:
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(arrays) != len(self.input_names):
                raise OdlaError(Status.INVALID_PARAM, f"{len(arrays)} inputs given; the model "
                                f"takes {len(self.input_names)}: {self.input_names}")
            feeds = {name: _array(a, name) for name, a in zip(self.input_names, arrays)}
        missing = [name for name in self.input_names if name not in feeds]
        if missing:
            raise OdlaError(Status.INVALID_PARAM, f"no data for graph inputs {missing}")
        session = self._session(feeds)
        arguments = {n: a for n, a in feeds.items() if n not in self.data_inputs}
        outputs = session.run(arguments, self.output_names)
        return namedtupledict("Outputs", self.output_names)(*outputs)


class OdlaBackend(Backend):
    @classmethod
    def devices(cls) -> list[str]:
        return [alias for alias, name in DEVICE_ALIASES.items() if name in available_devices()]

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return _device_name(device) in available_devices()

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> bool:
        """Whether every op of the model has a converter (it may still use a feature of an op
        that ODLA cannot express)."""
        try:
            proto = onnx_frontend.load_model(model)
            return cls.supports_device(device) and \
                not onnx_frontend.unsupported_ops(proto, onnx_frontend.model_opset(proto))
        except OdlaError:
            return False

    @classmethod
    def prepare(cls, model, device: str = "CPU", precision: str | None = None,
                **kwargs) -> OdlaBackendRep:
        """``model`` imported and compiled for ``device`` in ``precision`` ("fp32", "bf16" or
        "fp16"; default fp32)."""
        return OdlaBackendRep(model, device, precision)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs, device: str = "CPU", outputs_info=None,
                 **kwargs):
        """Runs one node on ``inputs`` (arrays in the node's input order)."""
        arrays = [np.asarray(a) for a in inputs]
        graph_inputs = [onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for name, a in zip(node.input, arrays)]
        graph_outputs = [onnx.helper.make_empty_tensor_value_info(name) for name in node.output]
        graph = onnx.helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        # Shape inference gives the outputs the types a valid model declares.
        return cls.run_model(onnx.shape_inference.infer_shapes(model), arrays, device)


prepare = OdlaBackend.prepare
run_model = OdlaBackend.run_model
run_node = OdlaBackend.run_node
supports_device = OdlaBackend.supports_device
