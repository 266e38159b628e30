"""Ops of every header group through the C library against NumPy: tests/c_api/op_groups.cc
(basic, math, nn, process, quantization, control flow; async launch with callbacks, the
profiler, counts and indices, run-time shapes, the interpreter, device info), and a custom op
called through ctypes from this Python process, which already runs odla_tvm (as HALO's driver
does): the library uses this interpreter, taking the GIL, from several threads at once."""

from __future__ import annotations

import ctypes
import shutil
import threading

import numpy as np
import pytest

import libodla
import odla_tvm as odla

try:
    from . import c_programs as c
except ImportError:
    import c_programs as c

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the C tests build with g++")

X = np.array([[-1.5, -0.5, 0.25], [0.75, 1.5, 2.0]], np.float32)
C = np.array([[0.5, 1.0, -1.0], [2.0, -2.0, 0.1]], np.float32)


def softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


EXPECTED = {
    "clone": X, "rsum": np.exp(X + C).sum(axis=1), "lrelu": np.where(X > 0, X, 0.1 * X),
    "softmax": softmax(X), "transpose": X.T, "concat": np.concatenate([X, C]), "slice": X[:, 1:3],
    "cast": X.astype(np.int32), "q": np.clip(np.rint(X / np.float32(0.05)), -128, 127),
    "dq": np.clip(np.rint(X / np.float32(0.05)), -128, 127) * np.float32(0.05),
    "branch_true": X + 1, "branch_false": X - 1, "concat_shape": [4, 3],
    "dynamic_shape": [5, 3], "dynamic": np.maximum(np.arange(15) - 7.0, 0),
    "batch_shape": [2, 3], "batch": np.maximum(np.arange(6) - 7.0, 0),
    "interpreted_exp": np.exp(X),
}


def test_op_groups_from_cpp_match_numpy(tmp_path):
    lines, printed = c.printed_values(tmp_path, "op_groups.cc")
    assert lines["device_count"] == ["1"] and lines["library"][0] == "odla-tvm"
    assert lines["counts"] == ["2", "11", "2", "11"]  # args and outputs, computation and executable
    assert lines["outputs"] == ["clone", "rsum", "lrelu", "softmax", "transpose", "concat",
                                "slice", "cast", "q", "dq", "branch"]
    assert lines["callback"] == ["1", "0"]  # called once, with ODLA_SUCCESS
    assert lines["profiler"] == ["0", "0", "0"]
    assert "odla_StopDeviceProfiler: 1 launches profiled" in printed
    for name, expected in EXPECTED.items():
        got = np.array([float(v) for v in lines[name]])
        np.testing.assert_allclose(got, np.ravel(expected), rtol=1e-5, atol=1e-6, err_msg=name)


# -- ctypes, as HALO's driver loads a generated library ------------------------------------------
class Shape(ctypes.Structure):
    _fields_ = [("size", ctypes.c_int32), ("dims", ctypes.c_int64 * 10)]


class Type(ctypes.Structure):
    _fields_ = [("element_type", ctypes.c_int), ("shape", Shape)]


class Values(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("values", ctypes.c_void_p * 64)]


class Ids(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("value_ids", ctypes.c_char_p * 64)]


def library_api(loader):
    lib = loader(str(libodla.build()))
    lib.odla_CreateArgument.restype = ctypes.c_void_p
    lib.odla_CreateArgument.argtypes = [Type, ctypes.c_char_p]
    lib.odla_CustomOp.restype = Values
    lib.odla_CustomOp.argtypes = [Values, ctypes.c_char_p, ctypes.c_char_p, Ids]
    lib.odla_SetValueAsOutput.argtypes = [ctypes.c_void_p]
    lib.odla_CreateComputation.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.odla_CreateContext.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.odla_BindToArgumentById.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.odla_BindToOutputById.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.odla_ExecuteComputation.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                            ctypes.c_void_p]
    for name in ("odla_DestroyComputation", "odla_DestroyContext"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    return lib


def build_with_custom_op(lib, tag: str):
    """a (2, 3) float32 -> CustomOp "twice_plus_one" -> output "y_<tag>"."""
    comp = ctypes.c_void_p()
    assert lib.odla_CreateComputation(ctypes.byref(comp)) == 0
    shape = Shape(2, (ctypes.c_int64 * 10)(2, 3))
    a = lib.odla_CreateArgument(Type(int(odla.ElementType.FLOAT32), shape), f"a_{tag}".encode())
    inputs = Values(1, (ctypes.c_void_p * 64)(a))
    ids = Ids(1, (ctypes.c_char_p * 64)(f"y_{tag}".encode()))
    outputs = lib.odla_CustomOp(inputs, b"TwicePlusOne", b"twice_plus_one", ids)
    assert outputs.size == 1
    assert lib.odla_SetValueAsOutput(outputs.values[0]) == 0
    return comp


def execute(lib, comp, tag: str, x: np.ndarray) -> np.ndarray:
    ctx = ctypes.c_void_p()
    assert lib.odla_CreateContext(ctypes.byref(ctx)) == 0
    y = np.zeros_like(x)
    lib.odla_BindToArgumentById(f"a_{tag}".encode(), x.ctypes.data, ctx)
    lib.odla_BindToOutputById(f"y_{tag}".encode(), y.ctypes.data, ctx)
    assert lib.odla_ExecuteComputation(comp, ctx, 1, None) == 0
    lib.odla_DestroyContext(ctx)
    return y


def test_ctypes_in_a_python_process_uses_its_interpreter_from_many_threads():
    from tvm import te

    odla.register_custom_op("twice_plus_one", te=lambda x: te.compute(
        x.shape, lambda *i: x(*i) * 2.0 + 1.0))
    # PyDLL holds the GIL during the call, CDLL releases it: the library takes it either way
    held, released = library_api(ctypes.PyDLL), library_api(ctypes.CDLL)
    comps = {tag: build_with_custom_op(held, tag) for tag in ("t0", "t1", "t2")}
    results, errors = {}, []

    def run(tag):
        try:
            x = np.arange(6, dtype=np.float32).reshape(2, 3) + int(tag[1])
            results[tag] = (x, execute(released, comps[tag], tag, x))
        except Exception as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    threads = [threading.Thread(target=run, args=(tag,)) for tag in comps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "deadlocked"
    assert errors == []
    for x, y in results.values():
        np.testing.assert_allclose(y, x * 2 + 1)
    for comp in comps.values():
        released.odla_DestroyComputation(comp)
