"""Which implementation oneDNN picks for a bf16 convolution and a bf16 matmul on this CPU, asked
of the libdnnl.so the plugin links through its C API (a primitive descriptor made, its
impl_info_str read, nothing run): what the ISA class alone does not tell, such as a build or a
limit that leaves only the reference code or the gemm emulation."""

from __future__ import annotations

import ctypes
import os

from .library import library_dir, load_dnnl

# oneDNN 3.2's C enums (dnnl_types.h, dnnl_common_types.h).
_CPU_ENGINE = 1  # dnnl_cpu
_TYPES = {"bf16": 2, "f32": 3}  # dnnl_data_type_t
_FORMAT_ANY = 1  # dnnl_format_tag_any
_FORWARD_INFERENCE = 96
_CONVOLUTION_DIRECT = 1
_QUERY_IMPL_INFO_STR = 8
_SUCCESS = 0

_Dims = ctypes.c_int64 * 12  # dnnl_dims_t

# Shapes of the probes: a ResNet 3x3 convolution and a BERT-base projection.
CONV = {"src": (1, 64, 56, 56), "weights": (64, 64, 3, 3), "dst": (1, 64, 56, 56)}
MATMUL = {"src": (128, 768), "weights": (768, 768), "dst": (128, 768)}


class _Library:
    """libdnnl's functions the probes call, their arguments declared."""

    def __init__(self):
        self.dnnl = load_dnnl()
        handle, out = ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)
        signatures = {
            "dnnl_engine_create": [out, ctypes.c_int, ctypes.c_size_t],
            "dnnl_engine_destroy": [handle],
            "dnnl_memory_desc_create_with_tag": [out, ctypes.c_int, _Dims, ctypes.c_int,
                                                 ctypes.c_int],
            "dnnl_memory_desc_destroy": [handle],
            "dnnl_matmul_primitive_desc_create": [out, handle, handle, handle, handle, handle,
                                                  handle],
            "dnnl_convolution_forward_primitive_desc_create": [
                out, handle, ctypes.c_int, ctypes.c_int, handle, handle, handle, handle, _Dims,
                _Dims, _Dims, _Dims, handle],
            "dnnl_primitive_desc_query": [handle, ctypes.c_int, ctypes.c_int, ctypes.c_void_p],
            "dnnl_primitive_desc_destroy": [handle],
        }
        for name, argtypes in signatures.items():
            function = getattr(self.dnnl, name)
            function.argtypes, function.restype = argtypes, ctypes.c_int

    def __getattr__(self, name):
        return getattr(self.dnnl, name)


def _dims(values) -> _Dims:
    return _Dims(*values)


def _impl(lib: _Library, make_pd) -> str | None:
    """impl_info_str of the descriptor ``make_pd(out)`` makes, None where oneDNN has none."""
    pd = ctypes.c_void_p()
    if make_pd(ctypes.byref(pd)) != _SUCCESS:
        return None
    try:
        text = ctypes.c_char_p()
        if lib.dnnl_primitive_desc_query(pd, _QUERY_IMPL_INFO_STR, 0, ctypes.byref(text)) \
                != _SUCCESS:
            return None
        return text.value.decode()
    finally:
        lib.dnnl_primitive_desc_destroy(pd)


def probe_impls(result_type: str) -> dict[str, str | None]:
    """{"conv2d": ..., "matmul": ...}: the implementation oneDNN picks for each with bf16
    source and weights (`any` layouts), an f32 bias and a ``result_type`` ("f32" or "bf16")
    destination; None where it has none (or libdnnl is not installed)."""
    path = os.path.join(library_dir(), "libdnnl.so")
    if not os.path.exists(path):
        return {"conv2d": None, "matmul": None}
    lib = _Library()
    engine = ctypes.c_void_p()
    if lib.dnnl_engine_create(ctypes.byref(engine), _CPU_ENGINE, 0) != _SUCCESS:
        return {"conv2d": None, "matmul": None}
    descs = []

    def desc(shape, dtype):
        md = ctypes.c_void_p()
        lib.dnnl_memory_desc_create_with_tag(ctypes.byref(md), len(shape), _dims(shape),
                                             _TYPES[dtype], _FORMAT_ANY)
        descs.append(md)
        return md

    try:
        conv = (desc(CONV["src"], "bf16"), desc(CONV["weights"], "bf16"),
                desc(CONV["dst"][1:2], "f32"), desc(CONV["dst"], result_type))
        matmul = (desc(MATMUL["src"], "bf16"), desc(MATMUL["weights"], "bf16"),
                  desc(MATMUL["dst"], result_type))
        ones, zeros = _dims((1, 1)), _dims((0, 0))
        return {
            "conv2d": _impl(lib, lambda out: lib.dnnl_convolution_forward_primitive_desc_create(
                out, engine, _FORWARD_INFERENCE, _CONVOLUTION_DIRECT, *conv, ones, zeros,
                _dims((1, 1)), _dims((1, 1)), None)),
            "matmul": _impl(lib, lambda out: lib.dnnl_matmul_primitive_desc_create(
                out, engine, matmul[0], matmul[1], None, matmul[2], None)),
        }
    finally:
        for md in descs:
            lib.dnnl_memory_desc_destroy(md)
        lib.dnnl_engine_destroy(engine)
