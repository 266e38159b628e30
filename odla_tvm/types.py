"""ODLA 0.5 enums, value types and the error type.

Enum members keep ODLA's names (without the ``ODLA_`` prefix) and numeric values, so
``ElementType.FLOAT32 == 18`` exactly as ``ODLA_FLOAT32`` in ``odla_common.h``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import ml_dtypes
import numpy as np

import relay_bridge

ODLA_API_VERSION = "0.5.0"
MAX_DIMENSION = 10  # ODLA_MAX_DIMENSION


class ElementType(IntEnum):
    INT8 = 0
    INT16 = 1
    INT32 = 2
    INT64 = 3
    UINT8 = 4
    UINT16 = 5
    UINT32 = 6
    UINT64 = 7
    QINT8 = 8
    QINT16 = 9
    QINT32 = 10
    QINT64 = 11
    QUINT8 = 12
    QUINT16 = 13
    QUINT32 = 14
    QUINT64 = 15
    FLOAT16 = 16
    BFLOAT16 = 17
    FLOAT32 = 18
    FLOAT64 = 19
    BOOL = 20
    STRING = 21


class Status(IntEnum):
    SUCCESS = 0
    DL_ERROR = 1
    FILE_NOT_EXIST = 2
    INVALID_PARAM = 3
    MEM_ERROR = 4
    UNSUPPORTED_DATATYPE = 5
    UNSUPPORTED_DEVICE_TYPE = 6
    UNSUPPORTED_OP = 7
    TIMEOUT = 8
    INTERNAL_LOGIC_ERR = 9
    RECOVERABLE_ERR = 10
    PARTITION_RESET = 11
    FULL_RESET = 12
    UNRECOVERABLE_ERR = 13
    FAILURE = 14


class ItemType(IntEnum):
    DYNAMIC_BATCH = 0
    MIN_BATCH_SIZE = 1
    MAX_BATCH_SIZE = 2
    OPT_BATCH_SIZE = 3
    RUN_BATCH_SIZE = 4
    DYNAMIC_SHAPE = 5
    MIN_SHAPE = 6
    MAX_SHAPE = 7
    OPT_SHAPE = 8
    DYNAMIC_VALUE = 9
    MIN_VALUE = 10
    MAX_VALUE = 11
    OPT_VALUE = 12
    BF16_MODE = 13
    FP16_MODE = 14
    USE_SIM_MODE = 15
    PROCESSOR_NUM = 16
    BATCHES_PER_STEP = 17
    USE_DATA_TYPE = 18
    LOAD_ENGINE_MODE = 19
    USE_DLA_CORE = 20
    QUANT_TABLE = 21
    QUANT_TABLE_SIZE = 22
    AGGREGATE_OPS = 23
    ENABLE_ENGINE_CACHE = 24
    CACHE_DIR = 25
    ASYNC_CALLBACK_FUNC = 26
    ASYNC_CALLBACK_ARG = 27


class ComputeMode(IntEnum):
    DEFAULT = 0
    INFERENCE = 1
    TRAINING = 2


class MemoryLayout(IntEnum):
    CHANNELS_FIRST = 0
    CHANNELS_LAST = 1
    SIO = 2  # spatial dims, input channels, output channels
    SOI = 3
    OIS = 4
    IOS = 5


class RnnDirection(IntEnum):
    FORWARD = 0
    REVERSE = 1
    BIDIRECTIONAL = 2


class RnnOutputs(IntEnum):
    """Which states an RNN returns besides its output sequence."""

    NO_STATE = 0
    HIDDEN_STATE = 1
    CELL_STATE = 2
    HIDDEN_CELL_STATE = 3


class RnnWeightFormat(IntEnum):
    LDGOI = 0  # directions, gates x outputs, inputs (ONNX's layout)
    LDIGO = 1  # directions, inputs, gates x outputs


class RnnGateOrder(IntEnum):
    IOFC = 0  # input, output, forget, cell (ONNX LSTM)
    IFCO = 1
    IFOC = 2
    ICOF = 3
    URO = 4  # update, reset, hidden (ONNX GRU)


class TfIdfMode(IntEnum):
    TF = 0
    IDF = 1
    TFIDF = 2


class ReductionMode(IntEnum):
    """How a loss reduces its per-element values (odla_reduction_mode)."""

    NONE = 0
    MEAN = 1
    SUM = 2


class InterpolationMode(IntEnum):
    """``odla_interpolation_mode`` (odla_ops_process.h)."""

    NEAREST = 0
    LINEAR = 1
    CUBIC = 2


class ResizeCoordinateMode(IntEnum):
    """``odla_resize_coordinate_mode``: how an output coordinate maps to an input one."""

    ASSYMMETRIC = 0  # ODLA's spelling
    HALF_PIXEL = 1
    HALF_PIXEL_TF = 2
    ALIGN_CORNERS = 3


class FillMethod(IntEnum):
    """``odla_fill_method``: ODLA's names, as ``ODLA_EyeLike`` and so on."""

    EyeLike = 0
    RandomNormal = 1
    RandomUniform = 2


class LoopOutputMode(IntEnum):
    """``odla_loop_output_mode``: what a loop returns for a loop variable besides its last value."""

    LAST_VALUE = 0
    FWD_BEFORE = 1  # the values before each iteration, stacked: [init ... last)
    FWD_AFTER = 2  # the values after each iteration: [first update ... last]
    REV_BEFORE = 3  # FWD_BEFORE reversed
    REV_AFTER = 4  # FWD_AFTER reversed


class Bf16Mode(IntEnum):
    """Values of the BF16_MODE item (odla_bf16_mode)."""

    DISABLE = 0
    ACCURACY_MODE = 1
    PERFORMACE_MODE = 2  # sic, as ODLA spells it
    AUTO_MODE = 3


class VendorName(IntEnum):
    DEFAULT = 0
    ALIBABA = 1
    ARM = 2
    CAMBRICON = 3
    GRAPHCORE = 4
    HABANA = 5
    INTEL = 6
    NVIDIA = 7
    QUALCOMM = 8


class DeviceName(IntEnum):
    DEFAULT = 0
    ALIBABA_HANGUANG = 1
    ARM_CORTEX_M = 2
    CAMBRICON_MLU220 = 3
    CAMBRICON_MLU270 = 4
    GRAPHCORE_IPU = 5
    HABANA_GAUDI = 6
    HABANA_GOYA = 7
    INTEL_X86 = 8
    INTEL_DNNL = 9
    NVIDIA_GPU = 10
    NVIDIA_TENSORRT = 11
    QUALCOMM_AIC100 = 12


class DeviceInfo(IntEnum):
    ODLA_LIB_VERSION = 0
    DEV_COUNT = 1
    DEV_INDEX = 2
    DEV_TYPE = 3
    DEV_UUID = 4
    PROCESSOR_UTIL = 5
    MEMORY_UTIL = 6
    TOTAL_MEMORY = 7
    USED_MEMORY = 8
    POWER_USAGE = 9
    POWER_LIMIT = 10
    DRIVER_VERSION = 11
    SDK_VERSION = 12


class ResourceLocationType(IntEnum):
    PATH = 0
    MEMORY = 1
    URI = 2


class OdlaError(Exception):
    """Every failure of the ODLA API: carries the ODLA ``Status`` a C caller would get."""

    def __init__(self, status: Status, message: str):
        super().__init__(f"[{status.name}] {message}")
        self.status = Status(status)
        self.message = message


def run_failure(err: Exception, what: str) -> OdlaError:
    """The OdlaError for a compiled run that raised ``err``: the caller's data that a check
    refused (an index or a parameter out of range, an integer divisor of zero or a quotient
    that overflows, a shape that does not fit) is INVALID_PARAM; anything else is a FAILURE
    of ``what``."""
    for refusal in relay_bridge.REFUSED_DATA:
        refused = refusal.message_in(err)
        if refused is not None:
            return OdlaError(Status.INVALID_PARAM, refused)
    return OdlaError(Status.FAILURE, f"{what}: {err}")


# Quantized ODLA types are stored as their plain integer counterparts.
_NUMPY_DTYPES = {
    ElementType.INT8: np.dtype(np.int8),
    ElementType.INT16: np.dtype(np.int16),
    ElementType.INT32: np.dtype(np.int32),
    ElementType.INT64: np.dtype(np.int64),
    ElementType.UINT8: np.dtype(np.uint8),
    ElementType.UINT16: np.dtype(np.uint16),
    ElementType.UINT32: np.dtype(np.uint32),
    ElementType.UINT64: np.dtype(np.uint64),
    ElementType.QINT8: np.dtype(np.int8),
    ElementType.QINT16: np.dtype(np.int16),
    ElementType.QINT32: np.dtype(np.int32),
    ElementType.QINT64: np.dtype(np.int64),
    ElementType.QUINT8: np.dtype(np.uint8),
    ElementType.QUINT16: np.dtype(np.uint16),
    ElementType.QUINT32: np.dtype(np.uint32),
    ElementType.QUINT64: np.dtype(np.uint64),
    ElementType.FLOAT16: np.dtype(np.float16),
    ElementType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    ElementType.FLOAT32: np.dtype(np.float32),
    ElementType.FLOAT64: np.dtype(np.float64),
    ElementType.BOOL: np.dtype(np.bool_),
}
_ELEMENT_TYPES = {
    dtype: etype for etype, dtype in reversed(list(_NUMPY_DTYPES.items()))
}


def numpy_dtype(element_type: ElementType) -> np.dtype:
    """The NumPy dtype that holds data of ``element_type``."""
    try:
        return _NUMPY_DTYPES[ElementType(element_type)]
    except (KeyError, ValueError):
        raise OdlaError(
            Status.UNSUPPORTED_DATATYPE,
            f"element type {element_type!r} has no tensor representation; expected one of "
            f"{', '.join(t.name for t in _NUMPY_DTYPES)}",
        ) from None


def element_type_of(dtype) -> ElementType:
    """The ODLA element type of a NumPy (or TVM dtype-string) ``dtype``."""
    try:
        return _ELEMENT_TYPES[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise OdlaError(
            Status.UNSUPPORTED_DATATYPE,
            f"dtype {dtype!s} has no ODLA element type; expected one of "
            f"{', '.join(str(d) for d in _ELEMENT_TYPES)}",
        ) from None


@dataclass(frozen=True)
class ValueShape:
    """``odla_value_shape``: a tuple of dims, -1 for a dim only known at run time."""

    dims: tuple[int, ...]

    def __init__(self, dims=()):
        try:
            dims = tuple(int(d) for d in dims)
        except (TypeError, ValueError):
            raise OdlaError(
                Status.INVALID_PARAM, f"shape is {dims!r}; expected a sequence of integers"
            ) from None
        if len(dims) > MAX_DIMENSION:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"shape {dims} has {len(dims)} dims; ODLA allows at most {MAX_DIMENSION}",
            )
        if any(d < -1 for d in dims):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"shape {dims} has a dim below -1; expected sizes >= 0 or -1 (dynamic)",
            )
        object.__setattr__(self, "dims", dims)

    @property
    def size(self) -> int:
        """Number of dims (``odla_value_shape.size``)."""
        return len(self.dims)

    @property
    def is_dynamic(self) -> bool:
        return any(d == -1 for d in self.dims)

    def element_count(self) -> int:
        return math.prod(self.dims)  # exact: int64 would wrap for huge dims

    def matches(self, concrete: tuple[int, ...]) -> bool:
        """Whether a concrete shape fits this one, a -1 dim accepting any size."""
        return len(concrete) == len(self.dims) and all(
            d == -1 or d == c for d, c in zip(self.dims, concrete)
        )

    @property
    def any_size_note(self) -> str:
        """What an error message adds after these dims: the meaning of -1, where one is."""
        return " (-1: any size)" if self.is_dynamic else ""

    def __iter__(self):
        return iter(self.dims)

    def __len__(self):
        return len(self.dims)

    def __getitem__(self, index):
        return self.dims[index]

    def __repr__(self):
        return f"ValueShape({self.dims})"


def as_shape(shape) -> ValueShape:
    return shape if isinstance(shape, ValueShape) else ValueShape(shape)


@dataclass(frozen=True)
class ValueType:
    """``odla_value_type``: element type and shape."""

    element_type: ElementType
    shape: ValueShape

    def __init__(self, element_type, shape):
        try:
            element_type = ElementType(element_type)
        except ValueError:
            raise OdlaError(
                Status.UNSUPPORTED_DATATYPE,
                f"element type is {element_type!r}; expected an ODLA element type (0..21)",
            ) from None
        object.__setattr__(self, "element_type", element_type)
        object.__setattr__(self, "shape", as_shape(shape))

    @property
    def dtype(self) -> np.dtype:
        return numpy_dtype(self.element_type)

    def to_dict(self) -> dict:
        return {"element_type": self.element_type.name, "dims": list(self.shape.dims)}

    @classmethod
    def from_dict(cls, d: dict) -> "ValueType":
        return cls(ElementType[d["element_type"]], d["dims"])

    def __repr__(self):
        return f"ValueType({self.element_type.name}, {self.shape.dims})"


def checked(obj, cls, what: str, expected: str):
    """``obj`` when it is a ``cls``; else an INVALID_PARAM error naming what was given."""
    if not isinstance(obj, cls):
        raise OdlaError(
            Status.INVALID_PARAM, f"{what} is a {type(obj).__name__}; expected {expected}"
        )
    return obj


def check_count(value, minimum: int, what: str) -> None:
    """An INVALID_PARAM error unless ``value`` is an integer (not a bool) of at least
    ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise OdlaError(Status.INVALID_PARAM,
                        f"{what} is {value!r}; expected an integer >= {minimum}")


def odla_enum(enum_cls, value, what: str, status: Status = Status.INVALID_PARAM):
    """``value`` (a member, its number or its name in any case) as a member of ODLA enum
    ``enum_cls``; else an error listing the valid names."""
    if isinstance(value, str):
        member = enum_cls.__members__.get(value.strip().upper())
        if member is not None:
            return member
    else:
        try:
            return enum_cls(value)
        except (ValueError, TypeError):
            pass
    names = ", ".join(enum_cls.__members__)
    raise OdlaError(status, f"{what} is {value!r}; expected an ODLA {enum_cls.__name__}: one "
                            f"of {names} (or their numbers 0..{len(enum_cls) - 1})")
