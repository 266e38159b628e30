"""ONNX models as ODLA computations.

``import_model`` reads an ONNX model (a path, bytes or a ModelProto; opsets 7 and later) and
builds it through the public ODLA op API only, as HALO's generated code does: initializers
become constants, graph inputs arguments (symbolic dims dynamic, -1), and values keep their
ONNX names as ids. Each ONNX op type has one converter in ``onnx_converters`` (a module per
ODLA op header), chosen by the model's opset. A node whose inputs are all known at import
(initializers, Constant nodes and what is computed from them, such as shape arithmetic) is
evaluated once by onnx's reference implementation and becomes an ODLA constant, as HALO folds
constants; everything else runs as compiled ODLA ops.
"""

from __future__ import annotations

import collections
import logging
import os

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from .. import computation as _computation
from ..computation import Computation, Value, ValueKind
from ..data_checks import check_fits_in_memory
from ..ops.process import cast
from ..types import OdlaError, Status, ValueType, element_type_of
from .onnx_file import FileWeights, check_leaving_weights, read_leaving_weights
from .onnx_converters.registry import (
    DEFAULT_DOMAINS,
    InputDataNeeded,
    Node,
    Unsupported,
    element_type,
    find_converter,
    op_key,
)

logger = logging.getLogger(__name__)

MIN_OPSET = 7
# Graph inputs of at most this many elements may be fixed to the data of a run when ODLA
# needs that data at import (see InputDataNeeded).
SMALL_INPUT_ELEMENTS = 64
# Ops whose results differ from run to run must not be folded into constants.
_NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                     "Multinomial", "Bernoulli", "Dropout"}


def load_model(model) -> onnx.ModelProto:
    """``model`` (a path, bytes or ModelProto) as a checked ModelProto with its local
    functions inlined; a missing, malformed or truncated model raises OdlaError."""
    return _load(model, leave_weights=False)[0]


def _load(model, leave_weights: bool) -> tuple[onnx.ModelProto, FileWeights | None]:
    """What load_model gives, and with ``leave_weights`` a file's large initializers left in
    it: their data is read (from FileWeights) only as each becomes a constant."""
    checked, weights, path = False, None, None
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model))
    else:
        try:
            path = os.fspath(model)
        except TypeError:
            raise OdlaError(Status.INVALID_PARAM, f"model is a {type(model).__name__}; expected "
                            "an ONNX file path, bytes or an onnx.ModelProto") from None
        if not os.path.isfile(path):
            raise OdlaError(Status.FILE_NOT_EXIST, f"ONNX model file {path!r} does not exist")
        try:
            if leave_weights:  # checked below, the weights' bytes unread (external data)
                proto, weights = read_leaving_weights(path)
                if _needs_upgrade(proto):  # the version converter wants the data in the proto
                    proto, weights = onnx.load(path), None
            else:
                checked = _passes_checker(path)
                proto = onnx.load(path)
        except (DecodeError, ValueError, RuntimeError, OSError) as err:
            raise OdlaError(Status.INVALID_PARAM, f"{path!r} is not a readable ONNX model "
                            f"(malformed or truncated): {err}") from None
    if not proto.HasField("graph"):
        source = "the ONNX model" if path is None else f"ONNX model file {path!r}"
        raise OdlaError(Status.INVALID_PARAM, f"{source} has no graph (empty, malformed or "
                        "truncated); expected a model saved by onnx.save or an exporter")
    try:
        if weights is not None and weights.places:
            check_leaving_weights(proto, weights)
        elif not checked:
            onnx.checker.check_model(proto)
    except (onnx.checker.ValidationError, ValueError) as err:  # ValueError: text not UTF-8
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else "invalid"
        raise OdlaError(Status.INVALID_PARAM, f"the ONNX model is invalid: {first_line}") from None
    proto = onnx.inliner.inline_local_functions(proto) if proto.functions else proto
    return _upgraded(proto), weights


def _passes_checker(path: str) -> bool:
    """Whether onnx's checker passes the file at ``path``, reading it itself: checking a loaded
    proto serializes it, a second copy of the weights at the peak. A file
    it refuses is checked again once loaded, for the message."""
    try:
        onnx.checker.check_model(path)
    except Exception:  # noqa: BLE001 (the checker raises several kinds on a damaged file)
        return False
    return True


def has_external_data(model) -> bool:
    """Whether an ONNX model (path, bytes or ModelProto) keeps tensors in other files."""
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model))
    else:  # read without its large weights' bytes, which a whole proto would hold
        proto, left = read_leaving_weights(os.fspath(model), load_external_data=False)
        return any(onnx.external_data_helper.uses_external_data(t) and t.name not in left
                   for t in proto.graph.initializer)
    return any(onnx.external_data_helper.uses_external_data(t) for t in proto.graph.initializer)


def _parse(blob: bytes) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(blob)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise OdlaError(Status.INVALID_PARAM, "the model bytes are not an ONNX model (malformed "
                        f"or truncated): {err}") from None
    return proto


def model_opset(proto: onnx.ModelProto) -> int:
    """The model's default-domain opset (the newest onnx knows for a model of other domains)."""
    versions = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    opset = max(versions) if versions else onnx.defs.onnx_opset_version()
    if opset < MIN_OPSET:
        raise OdlaError(Status.UNSUPPORTED_OP, f"the ONNX model uses opset {opset}; expected "
                        f"opset {MIN_OPSET} or later, and onnx.version_converter could not "
                        "upgrade it")
    return opset


def _needs_upgrade(proto: onnx.ModelProto) -> bool:
    versions = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    return bool(versions) and max(versions) < MIN_OPSET


def _upgraded(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A model of an opset before MIN_OPSET upgraded by onnx's version converter."""
    if not _needs_upgrade(proto):
        return proto
    try:
        return onnx.version_converter.convert_version(proto, MIN_OPSET)
    except Exception as err:  # noqa: BLE001 (the converter raises several kinds)
        logger.info("onnx.version_converter could not upgrade the model: %s", err)
        return proto


def domain_versions(proto: onnx.ModelProto, opset: int) -> dict[str, int]:
    """The version of each opset the model imports, the default domain's as ``opset``."""
    versions = {o.domain: o.version for o in proto.opset_import}
    versions.update({domain: opset for domain in DEFAULT_DOMAINS})
    return versions


def _all_nodes(graph: onnx.GraphProto):
    """The nodes of ``graph`` and of every subgraph in it (If branches, Loop bodies...)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                yield from _all_nodes(subgraph)


def unsupported_ops(proto: onnx.ModelProto, opset: int) -> collections.Counter:
    """How often each op type without a converter occurs in the model."""
    versions = domain_versions(proto, opset)
    missing = collections.Counter()
    for node in _all_nodes(proto.graph):
        key = op_key(node.op_type, node.domain)
        if find_converter(key, versions.get(node.domain, 1)) is None:
            missing[key] += 1
    return missing


def check_supported(proto: onnx.ModelProto, opset: int) -> None:
    """One UNSUPPORTED_OP error naming every op type without a converter and its count."""
    missing = unsupported_ops(proto, opset)
    if missing:
        listing = ", ".join(f"{op} ({count})" for op, count in sorted(missing.items()))
        raise OdlaError(Status.UNSUPPORTED_OP, f"the ONNX model (opset {opset}) uses "
                        f"{sum(missing.values())} nodes of {len(missing)} op types that ODLA "
                        f"cannot express: {listing}")


def import_model(model, input_data: dict | None = None) -> Computation:
    """An ONNX model as a new ODLA computation (made the thread's current one); its outputs
    are the graph outputs in order, each with its ONNX name as value id.

    ``input_data`` maps graph inputs to data they are fixed to: they become constants. A
    model that needs data at import (a reshape's target, reduction axes...) that derives
    from small graph inputs only raises InputDataNeeded naming them; the ONNX backend then
    imports the model again with their data from the run."""
    proto, weights = _load(model, leave_weights=True)
    opset = model_opset(proto)
    check_supported(proto, opset)
    comp = _computation.create_computation()
    try:
        with comp:
            _Importer(proto, opset, input_data or {}, weights).run()
    except BaseException:
        _computation.destroy_computation(comp)
        raise
    comp.make_current()
    return comp


class _Importer:
    def __init__(self, proto: onnx.ModelProto, opset: int, input_data: dict,
                 weights: FileWeights | None = None):
        self.graph = proto.graph
        self.weights = weights
        self.versions = domain_versions(proto, opset)
        self.input_data = input_data
        self.graph_outputs = frozenset(o.name for o in proto.graph.output)
        self.values: dict[str, Value] = {}
        # Per value: the small graph inputs its data derives from; None when it derives from
        # others too (see InputDataNeeded).
        self.sources: dict[str, frozenset | None] = {}

    def run(self) -> None:
        initializers = {t.name for t in self.graph.initializer}
        for tensor in self.graph.initializer:
            self.values[tensor.name] = self._constant(_initializer_data(tensor, self.weights),
                                                      tensor.name)
        for info in self.graph.input:
            if info.name in self.input_data:
                self.values[info.name] = self._input_constant(info)
            elif info.name not in initializers:
                value = _computation.create_argument(_input_type(info), info.name)
                self.values[info.name] = value
                small = not value.shape.is_dynamic and \
                    value.shape.element_count() <= SMALL_INPUT_ELEMENTS
                self.sources[info.name] = frozenset([info.name]) if small else None
        for node in self.graph.node:
            self._convert(node)
        outputs = [self._output(info.name) for info in self.graph.output]
        for value in outputs:
            _computation.set_value_as_output(value)

    @staticmethod
    def _constant(array: np.ndarray, value_id: str | None) -> Value:
        try:
            etype = element_type_of(array.dtype)
        except OdlaError:
            raise OdlaError(Status.UNSUPPORTED_DATATYPE, f"constant {value_id!r} has dtype "
                            f"{array.dtype}, which ODLA cannot hold") from None
        return _computation.create_constant(ValueType(etype, array.shape), array, value_id)

    def _input_constant(self, info: onnx.ValueInfoProto) -> Value:
        declared = _input_type(info)
        data = np.asarray(self.input_data[info.name])
        if data.dtype != declared.dtype or not declared.shape.matches(data.shape):
            raise OdlaError(Status.INVALID_PARAM, f"data for graph input {info.name!r} is "
                            f"{data.dtype}{list(data.shape)}; expected {declared.dtype}"
                            f"{list(declared.shape.dims)}{declared.shape.any_size_note}")
        return self._constant(data, info.name)

    def _output(self, name: str) -> Value:
        """The value of graph output ``name`` under that id: an input, a constant or a value
        that is already an output is copied by a cast to its own type."""
        if name not in self.values:
            raise OdlaError(Status.INVALID_PARAM, f"graph output {name!r} is not produced by any "
                            "node, graph input or initializer")
        value = self.values[name]
        if value.id != name or value.kind is not ValueKind.RESULT:
            value = cast(value, value.element_type, name)
        return value

    def _free_id(self, name: str) -> str | None:
        try:
            _computation.find_value_by_id(name)
        except OdlaError:
            return name
        return None

    def _operand(self, name: str) -> Value | None:
        if not name:
            return None
        if name not in self.values:
            raise OdlaError(Status.INVALID_PARAM, f"ONNX value {name!r} is used before any node "
                            "or input defines it")
        return self.values[name]

    def _source(self, name: str) -> frozenset | None:
        return self.sources.get(name, frozenset()) if name else frozenset()

    def _convert(self, proto: onnx.NodeProto) -> None:
        inputs = [self._operand(name) for name in proto.input]
        sources = [self._source(name) for name in proto.input]
        label = f"ONNX node {proto.name or proto.output[0]!r} ({proto.op_type})"
        results = self._fold(proto, inputs)
        if results is None:
            version = self.versions.get(proto.domain, 1)
            node = Node(proto, inputs, version, _constant_data, self.graph_outputs,
                        self.convert_body, sources)
            convert = find_converter(op_key(proto.op_type, proto.domain), version)
            try:
                results = convert(node)
            except InputDataNeeded as err:
                raise InputDataNeeded(err.input_ids, f"{label}: {err.message}") from None
            except OdlaError as err:
                raise OdlaError(err.status, f"{label}: {err.message}") from err
            except (ValueError, TypeError, KeyError, IndexError, AttributeError,
                    ArithmeticError) as err:  # ArithmeticError: an axis of a scalar, say
                raise OdlaError(Status.INTERNAL_LOGIC_ERR,
                                f"{label}: converting failed: {type(err).__name__}: {err}") from err
            except MemoryError as err:  # a constant it makes is too big for what is free
                raise OdlaError(Status.MEM_ERROR, f"{label}: {err}") from None
        results = results if isinstance(results, (list, tuple)) else [results]
        derived = None if None in sources else frozenset().union(*sources)
        for name, value in zip(proto.output, results):
            if name:
                if value is None:
                    raise Unsupported(f"{label}: output {name!r} cannot be produced")
                self.values[name] = value
                self.sources[name] = frozenset() if _constant_data(value) is not None else derived

    def convert_body(self, graph: onnx.GraphProto, inputs: list[Value]) -> list[Value]:
        """Converts a body graph (an If branch, a Loop or Scan body) into the ODLA body that is
        open: its inputs bound to ``inputs``, the enclosing graphs' values visible; returns
        the values of its outputs."""
        enclosing = self.values
        self.values = dict(enclosing)
        try:
            for tensor in graph.initializer:
                self.values[tensor.name] = self._constant(_initializer_data(tensor), None)
            for info, value in zip(graph.input, inputs):
                self.values[info.name] = value
                self.sources[info.name] = None  # a loop's state differs per iteration
            for node in graph.node:
                self._convert(node)
            return [self.values[info.name] for info in graph.output]
        finally:
            self.values = enclosing

    def _fold(self, proto: onnx.NodeProto, inputs: list) -> list[Value] | None:
        """The node's outputs as constants when its inputs are all constants; else None."""
        present = [v for v in inputs if v is not None]
        if (not present or proto.op_type in _NONDETERMINISTIC
                or any(_constant_data(v) is None for v in present)
                or _eight_bit_weight(proto, present)
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                       for a in proto.attribute)):
            return None
        feeds = {name: _constant_data(v) for name, v in zip(proto.input, inputs) if v is not None}
        try:
            arrays = [_constant_of_shape(proto, feeds[proto.input[0]])] \
                if proto.op_type == "ConstantOfShape" and proto.domain in ("", "ai.onnx") else \
                ReferenceEvaluator(proto, opsets=self.versions).run(None, feeds)
            return [self._constant(np.asarray(a), None if name in self.graph_outputs
                                   else self._free_id(name)) if name else None
                    for name, a in zip(proto.output, arrays)]
        except OdlaError:
            return None
        except Exception as err:  # noqa: BLE001 (the reference may lack the op or this case)
            logger.debug("not folding %s %s: %s", proto.op_type, proto.name, err)
            return None


def _eight_bit_weight(proto: onnx.NodeProto, inputs: list) -> bool:
    """Whether ``proto`` dequantizes 8-bit levels: left unfolded, a convolution or matmul of
    them computes on the 8 bits (relay_bridge.integer_products) and the weight keeps them."""
    return proto.op_type == "DequantizeLinear" and proto.domain in ("", "ai.onnx") and \
        _constant_data(inputs[0]).dtype in (np.int8, np.uint8)


def _constant_of_shape(proto: onnx.NodeProto, shape: np.ndarray) -> np.ndarray:
    """ConstantOfShape's output, a view of its one value broadcast: the reference evaluator
    fills an array, which the constant then copied (a large weight held twice while
    importing)."""
    value = next((numpy_helper.to_array(a.t) for a in proto.attribute if a.name == "value"),
                 np.zeros(1, np.float32))
    if value.size != 1 or shape.ndim != 1 or (shape < 0).any():
        raise ValueError(f"ConstantOfShape of value {value} over shape {shape}")
    return np.broadcast_to(value.reshape(()), tuple(int(d) for d in shape))


def _initializer_data(tensor: onnx.TensorProto, weights: FileWeights | None = None) -> np.ndarray:
    """An initializer's data (from ``weights`` when left there); one too big for this machine
    is refused before any of it is read, one whose data does not fill its dims is refused as
    malformed."""
    try:
        value_type = ValueType(element_type(tensor.data_type), tuple(tensor.dims))
    except OdlaError as err:
        raise OdlaError(err.status, f"initializer {tensor.name!r}: {err.message}") from None
    check_fits_in_memory(tensor.name, value_type)
    try:
        if weights is not None and tensor.name in weights:
            return weights.read(tensor)
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError, OSError) as err:
        raise OdlaError(Status.INVALID_PARAM, f"initializer {tensor.name!r} of type {value_type} "
                        f"does not hold data of that type and shape: {err}") from None


def _constant_data(value: Value) -> np.ndarray | None:
    return value.data if value.kind is ValueKind.CONSTANT else None


def _input_type(info: onnx.ValueInfoProto) -> ValueType:
    if not info.type.HasField("tensor_type"):
        kind = info.type.WhichOneof("value") or "unknown"
        raise Unsupported(f"graph input {info.name!r} is a {kind}; ODLA arguments are tensors")
    tensor = info.type.tensor_type
    if not tensor.HasField("shape"):
        raise Unsupported(f"graph input {info.name!r} has no known rank; ODLA needs one")
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim]
    return ValueType(element_type(tensor.elem_type), dims)
