"""Which code oneDNN would run an int8 product by here: the primitive descriptor created
through libdnnl's C API (the library the plugin links, with ONEDNN_MAX_CPU_ISA honoured) and
its implementation asked for, as int8_runtime.cc will create it. Where that is oneDNN's
reference code (a grouped convolution of few channels a group on AVX2, say), the product
stays with TVM. The enum values are oneDNN 3.2's (dnnl_types.h), the version library.py
installs."""

from __future__ import annotations

import ctypes
import functools
import os

from .library import library_dir

_SUCCESS, _CPU, _FORWARD_INFERENCE, _CONVOLUTION_DIRECT = 0, 1, 96, 1
_QUERY_IMPL_INFO_STR = 8
_ANY, _AB = 1, 3  # dnnl_format_tag_t
_TYPES = {"int32": 4, "int8": 5, "uint8": 6}  # dnnl_data_type_t
_MAX_DIMS = 12  # DNNL_MAX_NDIMS: dnnl_dims_t's length
_Dims = ctypes.c_int64 * _MAX_DIMS


@functools.cache
def _library() -> ctypes.CDLL:
    return ctypes.CDLL(os.path.join(library_dir(), "libdnnl.so"))


@functools.cache
def _engine() -> ctypes.c_void_p:
    engine = ctypes.c_void_p()
    _checked(_library().dnnl_engine_create(ctypes.byref(engine), _CPU, ctypes.c_size_t(0)))
    return engine


def _checked(status: int) -> None:
    if status != _SUCCESS:
        raise RuntimeError(f"oneDNN status {status}")


def _dims(values) -> _Dims:
    return _Dims(*values)


def _desc(dims, dtype: str, tag: int) -> ctypes.c_void_p:
    desc = ctypes.c_void_p()
    _checked(_library().dnnl_memory_desc_create_with_tag(
        ctypes.byref(desc), len(dims), _dims(dims), _TYPES[dtype], tag))
    return desc


def _implementation(create) -> str | None:
    """The implementation of the primitive descriptor ``create(pd_pointer)`` makes, None
    where oneDNN has none for it."""
    lib = _library()
    pd = ctypes.c_void_p()
    if create(ctypes.byref(pd)) != _SUCCESS:
        return None
    try:
        info = ctypes.c_char_p()
        _checked(lib.dnnl_primitive_desc_query(pd, _QUERY_IMPL_INFO_STR, 0, ctypes.byref(info)))
        return info.value.decode()
    finally:
        lib.dnnl_primitive_desc_destroy(pd)


@functools.cache
def conv_implementation(src_dtype: str, src, weights, dst, strides, dilates, pad_l,
                        pad_r) -> str | None:
    """A convolution's (dims NCHW, OIHW or grouped (G, O/G, I/G, H, W); dilates from 0),
    as int8_runtime.cc creates it: every layout oneDNN's choice, an int32 result."""
    descs = [_desc(src, src_dtype, _ANY), _desc(weights, "int8", _ANY), _desc(dst, "int32", _ANY)]
    try:
        return _implementation(lambda pd: _library().dnnl_convolution_forward_primitive_desc_create(
            pd, _engine(), _FORWARD_INFERENCE, _CONVOLUTION_DIRECT, descs[0], descs[1], None,
            descs[2], _dims(strides), _dims(dilates), _dims(pad_l), _dims(pad_r), None))
    finally:
        for desc in descs:
            _library().dnnl_memory_desc_destroy(desc)


@functools.cache
def matmul_implementation(src_dtype: str, rows: int, k: int, n: int) -> str | None:
    """A 2-D matmul's (rows x k by k x n), as int8_runtime.cc creates it: the weights in
    oneDNN's layout, source and result row-major."""
    descs = [_desc((rows, k), src_dtype, _AB), _desc((k, n), "int8", _ANY),
             _desc((rows, n), "int32", _AB)]
    try:
        return _implementation(lambda pd: _library().dnnl_matmul_primitive_desc_create(
            pd, _engine(), descs[0], descs[1], None, descs[2], None))
    finally:
        for desc in descs:
            _library().dnnl_memory_desc_destroy(desc)


def is_reference(implementation: str | None) -> bool:
    """Whether oneDNN has only its reference code (or nothing) for a primitive."""
    return implementation is None or implementation.startswith("ref")
