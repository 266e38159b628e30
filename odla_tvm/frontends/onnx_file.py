"""An ONNX file read with its large weights left in the file.

``onnx.load`` parses every initializer's bytes into the proto, whose memory (protobuf's arena)
lives as long as any part of the proto does: with the ODLA constants made from it, the weights
were held twice at the import's peak, and onnx's checker read the
file whole once more. ``read_leaving_weights`` walks the file's protobuf encoding instead and
parses the model with its large initializers as external data in the model file itself (what
onnx's external-data format writes, so the checker validates the model without their bytes);
``FileWeights.read`` reads one straight into an array when the importer needs it.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from dataclasses import dataclass

import numpy as np
import onnx


def _plain_dtype(data_type: int) -> np.dtype | None:
    """The little-endian NumPy dtype raw data of ``data_type`` reads as, for NumPy's own
    booleans, integers and floats (not ml_dtypes' bfloat16, float8 or packed int4, which
    onnx converts itself); None for the others."""
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(data_type)
    except (KeyError, ValueError):
        return None
    return dtype.newbyteorder("<") if dtype.isbuiltin == 1 and dtype.kind in "biuf" else None

# Smaller raw data stays in the proto: cutting it saves nothing worth a read of its own.
_LEFT_IN_FILE_BYTES = 64 * 1024

# Field numbers (onnx.proto) and protobuf wire types.
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_DATA_TYPE, _TENSOR_NAME, _TENSOR_RAW_DATA = 2, 8, 9
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 13, 14
_ENTRY_KEY, _ENTRY_VALUE = 1, 2
_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


class _Malformed(ValueError):
    """The bytes are not the protobuf encoding the walk expects; onnx.load says what is wrong."""


@dataclass(frozen=True)
class FileWeights:
    """Where the raw data of initializers left in the model file are: name -> (offset, bytes)."""

    path: str
    places: dict[str, tuple[int, int]]

    def __contains__(self, name: str) -> bool:
        return name in self.places

    def read(self, tensor: onnx.TensorProto) -> np.ndarray:
        """The initializer's data, read from the file; ValueError when its bytes do not fill
        its dims (the message says both)."""
        offset, size = self.places[tensor.name]
        dtype = _plain_dtype(tensor.data_type)
        count = int(np.prod(tensor.dims, dtype=np.int64))
        if count * dtype.itemsize != size:
            raise ValueError(f"its raw data has {size} bytes; its dims {list(tensor.dims)} of "
                             f"{dtype} take {count * dtype.itemsize}")
        with open(self.path, "rb") as f:
            data = np.fromfile(f, dtype=dtype, count=count, offset=offset)
        return data.astype(dtype.newbyteorder("="), copy=False).reshape(tuple(tensor.dims))


def read_leaving_weights(path: str, load_external_data: bool = True
                         ) -> tuple[onnx.ModelProto, FileWeights]:
    """The model at ``path`` with the raw data of its large initializers (of plain numeric
    types) left in the file, and where they are. A file the walk does not understand, or with
    nothing to leave, is read whole by onnx.load (with its external data as asked);
    DecodeError and the like as onnx.load raises them."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return onnx.load(path, load_external_data=load_external_data), FileWeights(path, {})
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            view = memoryview(data)
            try:
                encoded, places = _model_without_weights(view, os.path.basename(path))
            except _Malformed:
                encoded, places = None, {}
            finally:
                view.release()
    if encoded is None:
        return onnx.load(path, load_external_data=load_external_data), FileWeights(path, {})
    proto = onnx.ModelProto()
    proto.ParseFromString(encoded)
    return proto, FileWeights(path, places)


def check_leaving_weights(proto: onnx.ModelProto, weights: FileWeights) -> None:
    """onnx's checker (ValidationError) on a model read_leaving_weights read. The checker
    wants the file its external data names to be a regular file beside the model it checks
    (given a proto alone, in the working directory), and reads none of it; links it refuses.
    So a copy is checked beside an empty file of that name; where the data is, the walk
    found."""
    with tempfile.TemporaryDirectory(prefix="odla-tvm-check-") as tmp:
        name = os.path.basename(weights.path)
        open(os.path.join(tmp, name), "wb").close()
        copy = os.path.join(tmp, name + ".checked.onnx")
        with open(copy, "wb") as f:
            f.write(proto.SerializeToString())
        onnx.checker.check_model(copy)


def _varint(data, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise _Malformed("varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data, start: int, end: int):
    """(field number, wire type, start of the field, start and end of its value) in
    data[start:end]; the value of a varint is its bytes."""
    at = start
    while at < end:
        tag, value_start = _varint(data, at)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            _, value_end = _varint(data, value_start)
        elif wire == _FIXED64:
            value_end = value_start + 8
        elif wire == _FIXED32:
            value_end = value_start + 4
        elif wire == _BYTES:
            length, value_start = _varint(data, value_start)
            value_end = value_start + length
        else:  # groups: not in onnx.proto
            raise _Malformed("wire type")
        if number == 0 or value_end > end:
            raise _Malformed("field")
        yield number, wire, at, value_start, value_end
        at = value_end


def _length_delimited(number: int, value: bytes) -> bytes:
    return _encode_varint(number << 3 | _BYTES) + _encode_varint(len(value)) + value


def _model_without_weights(data, location: str) -> tuple[bytes | None, dict]:
    """The model's encoding with large raw data of the main graph's initializers made external
    data in file ``location``, and where each is; (None, {}) when nothing is worth it."""
    pieces, places, graphs = [], {}, 0
    for number, wire, at, start, end in _fields(data, 0, len(data)):
        if number == _MODEL_GRAPH and wire == _BYTES:
            graphs += 1
            pieces.append(_length_delimited(_MODEL_GRAPH, _graph_without_weights(
                data, start, end, places, location)))
        else:
            pieces.append(bytes(data[at:end]))
    if graphs != 1 or not places:  # several graph fields merge: leave that to onnx.load
        return None, {}
    return b"".join(pieces), places


def _graph_without_weights(data, start: int, end: int, places: dict, location: str) -> bytes:
    pieces = []
    for number, wire, at, value_start, value_end in _fields(data, start, end):
        cut = None
        if number == _GRAPH_INITIALIZER and wire == _BYTES:
            cut = _tensor_without_weights(data, value_start, value_end, places, location)
        pieces.append(bytes(data[at:value_end]) if cut is None
                      else _length_delimited(_GRAPH_INITIALIZER, cut))
    return b"".join(pieces)


def _tensor_without_weights(data, start: int, end: int, places: dict,
                            location: str) -> bytes | None:
    """The tensor's encoding with its raw data as external data in file ``location`` (the
    model's own), recording where it is; None to keep it as it is (small, of another type,
    unnamed, fields repeated, or external already)."""
    kept, name, data_type, raw, names = [], None, onnx.TensorProto.UNDEFINED, None, 0
    for number, wire, at, value_start, value_end in _fields(data, start, end):
        if number == _TENSOR_RAW_DATA and wire == _BYTES and raw is None:
            raw = (value_start, value_end - value_start)
            continue
        if number == _TENSOR_NAME and wire == _BYTES:
            names += 1
            try:
                name = bytes(data[value_start:value_end]).decode("utf-8")
            except UnicodeDecodeError:  # protobuf's name may differ: keep the data in place
                return None
        elif number == _TENSOR_DATA_TYPE and wire == _VARINT:
            data_type = _varint(data, value_start)[0]
        elif number in (_TENSOR_RAW_DATA, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION):
            return None
        kept.append(bytes(data[at:value_end]))
    if raw is None or raw[1] < _LEFT_IN_FILE_BYTES or _plain_dtype(data_type) is None or names != 1 \
            or not name or name in places:
        return None
    places[name] = raw
    return b"".join(kept) + _external_data(location, *raw)


def _external_data(location: str, offset: int, size: int) -> bytes:
    """The fields that say the data is in file ``location`` at ``offset``: what onnx's checker
    validates (a file beside the model), as for any model with external data."""
    entries = b"".join(
        _length_delimited(_TENSOR_EXTERNAL_DATA, _length_delimited(_ENTRY_KEY, key.encode())
                          + _length_delimited(_ENTRY_VALUE, value.encode()))
        for key, value in (("location", location), ("offset", str(offset)),
                           ("length", str(size))))
    return entries + _encode_varint(_TENSOR_DATA_LOCATION << 3 | _VARINT) + \
        _encode_varint(onnx.TensorProto.EXTERNAL)
