"""The registry of ONNX op converters and the node view each converter gets.

A converter turns one ONNX node into ODLA calls: ``convert(node) -> Value | list[Value]``
(one Value per node output; None for an optional output it does not produce). It is found
by op type and the model's opset: ``@converter("Squeeze", since=13)`` serves opset 13 and
later, until a converter registered with a larger ``since`` takes over.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from ...computation import Value, create_constant
from ...ops.process import cast
from ...types import ElementType, OdlaError, Status, ValueType, element_type_of

CONVERTERS: dict[str, list[tuple[int, Callable]]] = {}

# Big enough to mean "to the end" in ONNX Slice ends (INT64_MAX and friends get clamped).
INT_MAX = np.iinfo(np.int64).max


DEFAULT_DOMAINS = ("", "ai.onnx")


def op_key(op_type: str, domain: str = "") -> str:
    """How an op is named in the registry and in messages: "Conv", "ai.onnx.ml.LabelEncoder"."""
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}.{op_type}"


def converter(op_type: str, since: int = 1, domain: str = ""):
    """Registers the decorated function as the converter of ``op_type`` (of ``domain``) from
    version ``since`` of its opset."""

    def decorate(convert: Callable) -> Callable:
        versions = CONVERTERS.setdefault(op_key(op_type, domain), [])
        if any(v == since for v, _ in versions):
            raise ValueError(f"ONNX op {op_type!r} already has a converter since opset {since}")
        versions.append((since, convert))
        versions.sort(key=lambda entry: entry[0])
        return convert

    return decorate


def find_converter(key: str, opset: int) -> Callable | None:
    """The converter of the op named ``key`` (see op_key) for version ``opset`` of its domain."""
    chosen = None
    for since, convert in CONVERTERS.get(key, ()):
        if since <= opset:
            chosen = convert
    return chosen


class Unsupported(OdlaError):
    """A node uses a feature of its op that ODLA cannot express."""

    def __init__(self, message: str):
        super().__init__(Status.UNSUPPORTED_OP, message)


class InputDataNeeded(Unsupported):
    """Data that ODLA needs when the model is imported (a reshape's target, reduction axes,
    pads...) is computed from small graph inputs alone: importing again with the data of
    ``input_ids`` succeeds."""

    def __init__(self, input_ids: frozenset, message: str):
        super().__init__(message)
        self.input_ids = input_ids


_ONNX_TYPES = frozenset(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}


def element_type(onnx_type: int) -> ElementType:
    """The ODLA element type of an ONNX TensorProto data type."""
    try:
        return element_type_of(helper.tensor_dtype_to_np_dtype(onnx_type))
    except (KeyError, ValueError, TypeError, OdlaError):
        name = helper.tensor_dtype_to_string(onnx_type) if onnx_type in _ONNX_TYPES else \
            f"{onnx_type} (no such type)" if onnx_type else "UNDEFINED"
        raise OdlaError(Status.UNSUPPORTED_DATATYPE,
                        f"ONNX type {name} has no ODLA element type") from None


@functools.cache
def _schema_default(op_type: str, opset: int, domain: str, name: str):
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None
    attribute = schema.attributes.get(name)
    if attribute is None or not attribute.default_value.type:
        return None
    return helper.get_attribute_value(attribute.default_value)


class Node:
    """One ONNX node as its converter sees it: operand Values, attributes, constant data."""

    def __init__(self, proto, inputs: list, opset: int, constant_data: Callable,
                 graph_outputs: frozenset = frozenset(), convert_body: Callable | None = None,
                 sources: list | None = None):
        self.proto = proto
        # Per input: the small graph inputs its data derives from (None: not from those alone).
        self.sources = sources or [None] * len(inputs)
        self.graph_outputs = graph_outputs
        self._convert_body = convert_body
        self.op_type = proto.op_type
        self.opset = opset
        self.inputs = inputs  # a Value per input, None where the input is omitted
        self.ids = list(proto.output)  # the ONNX names, which become the value ids
        self.attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
        self._constant_data = constant_data

    @property
    def id(self) -> str:
        return self.ids[0]

    def input(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def attr(self, name: str, default=None):
        """Attribute ``name``; when absent, ``default`` or else the op schema's default."""
        if name in self.attrs:
            value = self.attrs[name]
        elif default is not None:
            value = default
        else:
            value = _schema_default(self.op_type, self.opset, self.proto.domain, name)
        return value.decode() if isinstance(value, bytes) else value

    def wants(self, index: int) -> bool:
        """Whether the model uses output ``index`` (optional outputs may be left unnamed)."""
        return index < len(self.ids) and bool(self.ids[index])

    def array(self, index: int, default=None) -> np.ndarray | None:
        """The data of input ``index``, which must be known when the model is imported
        (an initializer, a Constant, or computed from those); ``default`` if omitted."""
        value = self.input(index)
        if value is None:
            return default
        data = self._constant_data(value)
        if data is None:
            message = (f"input {index} ({value.id!r}) is known only at run time; ODLA's "
                       f"{self.op_type} needs its data when the model is imported")
            if self.sources[index]:
                raise InputDataNeeded(self.sources[index], message)
            raise Unsupported(message)
        return data

    def is_constant(self, index: int) -> bool:
        value = self.input(index)
        return value is not None and self._constant_data(value) is not None

    def ints(self, index: int, attr: str | None = None, default=None) -> list[int] | None:
        """An int list given as input ``index`` (newer opsets) or attribute ``attr``."""
        if attr is not None and attr in self.attrs:
            return [int(v) for v in self.attrs[attr]]
        data = self.array(index) if index is not None else None
        return default if data is None else [int(v) for v in np.asarray(data).reshape(-1)]

    def axis(self, axis: int, x: Value) -> int:
        """``axis`` of ``x`` counted from 0, once in ONNX's [-r, r-1]: one beyond would wrap
        to another axis silently."""
        r = rank(x)
        if not -r <= int(axis) < r:
            raise OdlaError(Status.INVALID_PARAM, f"{self.op_type} {self.id!r}: axis {axis} is "
                            f"out of range; expected {-r} to {r - 1} for {x.id!r} of rank {r}")
        return int(axis) % r

    def body(self, attr: str, inputs: list) -> list[Value]:
        """Converts the graph attribute ``attr`` (a branch or loop body) into the ODLA body
        that is open, its inputs bound to ``inputs``; returns its output values."""
        return self._convert_body(self.attrs[attr], inputs)

    def constant_output(self, array, index: int = 0) -> Value:
        """A constant as output ``index``, named by it unless it is a graph output (which
        the importer copies into a computed value of that name)."""
        name = self.ids[index]
        return constant(array, None if name in self.graph_outputs else name)

    def unsupported(self, what: str) -> Unsupported:
        return Unsupported(f"{self.op_type}: {what}")


def rank(value: Value) -> int:
    return value.shape.size


def dims(value: Value) -> tuple[int, ...]:
    return value.shape.dims


def static_dims(node: Node, value: Value) -> tuple[int, ...]:
    if value.shape.is_dynamic:
        raise node.unsupported(f"{value.id!r} has dynamic shape {value.shape.dims}; this "
                               "conversion needs static dims")
    return value.shape.dims


def constant(array, value_id: str | None = None) -> Value:
    """An ODLA constant holding ``array``."""
    array = np.asarray(array)
    return create_constant(ValueType(element_type_of(array.dtype), array.shape),
                                       array, value_id)


def scalar(like: Value, number) -> Value:
    """A scalar constant of ``like``'s element type."""
    return constant(np.asarray(number, like.type.dtype))


def widened(value: Value | None) -> Value | None:
    """A 16-bit float value cast to float32, where onnxruntime computes it; others as they are."""
    if value is None or value.element_type not in (ElementType.FLOAT16, ElementType.BFLOAT16):
        return value
    return cast(value, ElementType.FLOAT32)
