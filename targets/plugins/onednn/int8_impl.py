"""Which code oneDNN would run an int8 product by here: the primitive descriptor created
through libdnnl's C API (the library the plugin links, with ONEDNN_MAX_CPU_ISA honoured) and
its implementation asked for, as int8_runtime.cc will create it. Where that is oneDNN's
reference code (a grouped convolution of few channels a group on AVX2, say), the product
stays with TVM. The enum values are oneDNN 3.2's (dnnl_types.h), the version library.py
installs."""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from .library import load_dnnl

_SUCCESS, _CPU, _FORWARD_INFERENCE, _CONVOLUTION_DIRECT = 0, 1, 96, 1
_QUERY_IMPL_INFO_STR = 8
_ANY, _A, _AB = 1, 2, 3  # dnnl_format_tag_t
_TYPES = {"float32": 3, "int32": 4, "int8": 5, "uint8": 6}  # dnnl_data_type_t
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS = 1, 17, 33  # DNNL_ARG_*
_ELTWISE_RELU = 0x20


@dataclass(frozen=True)
class Epilogue:
    """What int8_runtime.cc fuses into a product (int8_region.h's fields): the attributes
    and result type its primitive is created with."""

    src_zero: bool = False
    src_scale: bool = False
    weights_scale: str | None = None  # "one" or "channel"
    bias: bool = False
    relu: bool = False
    dst: str = "int32"  # the result's type; an 8-bit one has the quantize's scale and zero


def _attributes(epilogue: Epilogue, channel_mask: int) -> ctypes.c_void_p:
    """A primitive attribute as int8_runtime.cc's epilogue_attributes makes it."""
    lib, attr = _library(), ctypes.c_void_p()
    _checked(lib.dnnl_primitive_attr_create(ctypes.byref(attr)))
    masks = [(lib.dnnl_primitive_attr_set_zero_points_mask, _ARG_SRC, 0, epilogue.src_zero),
             (lib.dnnl_primitive_attr_set_scales_mask, _ARG_SRC, 0, epilogue.src_scale),
             (lib.dnnl_primitive_attr_set_scales_mask, _ARG_WEIGHTS,
              channel_mask if epilogue.weights_scale == "channel" else 0,
              epilogue.weights_scale is not None)]
    if epilogue.dst in ("uint8", "int8"):
        masks += [(lib.dnnl_primitive_attr_set_scales_mask, _ARG_DST, 0, True),
                  (lib.dnnl_primitive_attr_set_zero_points_mask, _ARG_DST, 0, True)]
    for setter, arg, mask, wanted in masks:
        if wanted:
            _checked(setter(attr, arg, mask))
    if epilogue.relu:
        ops = ctypes.c_void_p()
        _checked(lib.dnnl_post_ops_create(ctypes.byref(ops)))
        _checked(lib.dnnl_post_ops_append_eltwise(ops, _ELTWISE_RELU, ctypes.c_float(0),
                                                  ctypes.c_float(0)))
        _checked(lib.dnnl_primitive_attr_set_post_ops(attr, ops))
        lib.dnnl_post_ops_destroy(ops)
    return attr
_MAX_DIMS = 12  # DNNL_MAX_NDIMS: dnnl_dims_t's length
_Dims = ctypes.c_int64 * _MAX_DIMS


def _library() -> ctypes.CDLL:
    return load_dnnl()


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
                        pad_r, epilogue: Epilogue = Epilogue()) -> str | None:
    """A convolution's (dims NCHW, OIHW or grouped (G, O/G, I/G, H, W); dilates from 0),
    as int8_runtime.cc creates it: every layout oneDNN's choice, ``epilogue`` fused."""
    descs = [_desc(src, src_dtype, _ANY), _desc(weights, "int8", _ANY),
             _desc(dst, epilogue.dst, _ANY)]
    bias = _desc((dst[1],), "float32", _A) if epilogue.bias else None
    attr = _attributes(epilogue, 0b11 if len(weights) == 5 else 0b1)
    try:
        return _implementation(lambda pd: _library().dnnl_convolution_forward_primitive_desc_create(
            pd, _engine(), _FORWARD_INFERENCE, _CONVOLUTION_DIRECT, descs[0], descs[1], bias,
            descs[2], _dims(strides), _dims(dilates), _dims(pad_l), _dims(pad_r), attr))
    finally:
        _destroyed(descs + [bias], attr)


@functools.cache
def matmul_implementation(src_dtype: str, rows: int, k: int, n: int,
                          epilogue: Epilogue = Epilogue()) -> str | None:
    """A 2-D matmul's (rows x k by k x n), as int8_runtime.cc creates it: the weights in
    oneDNN's layout, source and result row-major, ``epilogue`` fused; where oneDNN's matmul
    is its gemm, the 1x1 convolution over the rows that the runtime runs instead."""
    descs = [_desc((rows, k), src_dtype, _AB), _desc((k, n), "int8", _ANY),
             _desc((rows, n), epilogue.dst, _AB)]
    bias = _desc((1, n), "float32", _AB) if epilogue.bias else None
    attr = _attributes(epilogue, 0b10)
    try:
        found = _implementation(lambda pd: _library().dnnl_matmul_primitive_desc_create(
            pd, _engine(), descs[0], descs[1], bias, descs[2], attr))
    finally:
        _destroyed(descs + [bias], attr)
    if found is None or not found.startswith("gemm"):
        return found
    return conv_implementation(src_dtype, (1, k, rows, 1), (n, k, 1, 1), (1, n, rows, 1),
                               (1, 1), (0, 0), (0, 0), (0, 0), epilogue)


def _destroyed(descs, attr) -> None:
    for desc in descs:
        if desc is not None:
            _library().dnnl_memory_desc_destroy(desc)
    _library().dnnl_primitive_attr_destroy(attr)


def is_reference(implementation: str | None) -> bool:
    """Whether oneDNN has only its reference code (or nothing) for a primitive."""
    return implementation is None or implementation.startswith("ref")
