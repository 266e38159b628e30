"""Kernels that write their result over an operand dying with them (targets.cpu.in_place): a
residual sum is written over its residual where nothing reads that after, never over a model's
input, a weight, a value read later or one shared with a view; results against NumPy, the
caller's arrays unchanged."""

import numpy as np
import pytest
from tvm import relax
from tvm.script import tirx as T

from targets.cpu import in_place
from targets.compiler import compile_module
from tests.test_cpu_schedules import HOST, data, relax_module

N, K = 8, 32


def _matmul_relu(x, w):
    return relax.op.nn.relu(relax.op.matmul(x, w))


def _in_place_kernels(module) -> list[str]:
    return sorted(name for name in module.kernel_bindings if name.endswith(in_place.SUFFIX))


def _run(mod, inputs):
    module = compile_module(mod, HOST)
    kept = [a.copy() for a in inputs]
    outputs = module.run(inputs)
    for given, copy in zip(inputs, kept):
        np.testing.assert_array_equal(given, copy)  # the caller's arrays are never written
    return module, outputs


def _weights():
    return [data((K, K)) * 0.2 for _ in range(3)]


def test_a_residual_sum_is_written_over_its_dying_residual():
    """h = relu(x W1); out = relu(relu(h W2) W3 + h): h dies in the last kernel, whose store
    reads it at the element it writes."""
    x = data((N, K))
    w1, w2, w3 = _weights()
    mod = relax_module({"x": ((N, K), "float32")}, lambda x_: (lambda h: relax.op.nn.relu(
        relax.op.add(relax.op.matmul(_matmul_relu(h, relax.const(w2)), relax.const(w3)), h)))(
            _matmul_relu(x_, relax.const(w1))))
    module, (out,) = _run(mod, [x])
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    h = relu(x @ w1)
    np.testing.assert_allclose(out, relu(relu(h @ w2) @ w3 + h), rtol=1e-5, atol=1e-5)
    assert len(_in_place_kernels(module)) == 1


def test_a_residual_read_after_the_sum_keeps_its_own_buffer():
    """h is read again after its sum (total = h W2 + h; out = (total W2) * h): the sum writes
    a buffer of its own; the product, where h dies, writes over it."""
    x = data((N, K))
    w1, w2, _ = _weights()

    def body(x_):
        h = _matmul_relu(x_, relax.const(w1))
        total = relax.op.add(relax.op.matmul(h, relax.const(w2)), h)
        return relax.op.multiply(relax.op.matmul(total, relax.const(w2)), h)

    module, (out,) = _run(relax_module({"x": ((N, K), "float32")}, body), [x])
    h = np.maximum(x @ w1, 0)
    np.testing.assert_allclose(out, ((h @ w2 + h) @ w2) * h, rtol=1e-5, atol=1e-5)
    (kernel,) = _in_place_kernels(module)
    assert "multiply" in kernel and "add" not in kernel


def test_a_models_input_and_a_view_are_never_written_over():
    """The first sum's residual is the model's input x (the caller's array); the second's is
    a reshaped view of h, which the model returns: both sums write buffers of their own."""
    x = data((N, K))
    w1, w2, w3 = _weights()

    def body(x_):
        first = relax.op.add(relax.op.matmul(x_, relax.const(w1)), x_)
        h = _matmul_relu(first, relax.const(w2))
        second = relax.op.add(relax.op.matmul(relax.const(w3), relax.op.reshape(first, (K, N))),
                              relax.op.reshape(h, (K, N)))
        return [second, h]

    module, (second, h_out) = _run(relax_module({"x": ((N, K), "float32")}, body), [x])
    first = x @ w1 + x
    h = np.maximum(first @ w2, 0)
    np.testing.assert_allclose(h_out, h, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, w3 @ first.reshape(K, N) + h.reshape(K, N),
                               rtol=1e-5, atol=1e-5)
    assert _in_place_kernels(module) == []


@T.prim_func(s_tir=True)
def _elementwise(a: T.Buffer((4, 16), "float32"), r: T.Buffer((4, 16), "float32"),
                 o: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.sblock("sum"):
            vi, vj = T.axis.remap("SS", [i, j])
            o[vi, vj] = T.max(a[vi, vj] + r[vi, vj], T.float32(0))


@T.prim_func(s_tir=True)
def _mirrored(a: T.Buffer((4, 16), "float32"), r: T.Buffer((4, 16), "float32"),
              o: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.sblock("sum"):
            vi, vj = T.axis.remap("SS", [i, j])
            o[vi, vj] = a[vi, vj] + r[vi, 15 - vj]


@T.prim_func(s_tir=True)
def _read_twice(a: T.Buffer((4, 16), "float32"), r: T.Buffer((4, 16), "float32"),
                o: T.Buffer((4, 16), "float32")):
    t = T.sblock_alloc_buffer((4, 16))
    for i, j in T.grid(4, 16):
        with T.sblock("scaled"):
            vi, vj = T.axis.remap("SS", [i, j])
            t[vi, vj] = r[vi, vj] * T.float32(2)
    for i, j in T.grid(4, 16):
        with T.sblock("sum"):
            vi, vj = T.axis.remap("SS", [i, j])
            o[vi, vj] = a[vi, vj] + r[vi, vj] + t[vi, vj]


@T.prim_func(s_tir=True)
def _accumulated(a: T.Buffer((4, 16), "float32"), r: T.Buffer((4, 16), "float32"),
                 o: T.Buffer((4, 16), "float32")):
    for i, j, k in T.grid(4, 16, 16):
        with T.sblock("sum"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                o[vi, vj] = r[vi, vj]
            o[vi, vj] = o[vi, vj] + a[vi, vk]


@T.prim_func(s_tir=True)
def _address_taken(a: T.Buffer((4, 16), "float32"), r: T.Buffer((4, 16), "float32"),
                   o: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.sblock("sum"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(a[vi, vj], r[0:4, 0:16])
            T.writes(o[vi, vj])
            o[vi, vj] = a[vi, vj] + r[vi, vj]
            T.evaluate(T.call_extern("int32", "keep", r.data))


@pytest.mark.parametrize("func, fits", [
    (_elementwise, [0, 1]),  # both operands are read at the element written
    (_mirrored, [0]),  # r is read at another element than the one written
    (_read_twice, [0]),  # r is read by a second block too
    (_accumulated, []),  # the output is read (accumulated into)
    (_address_taken, [0]),  # r's data pointer is given to a call
])
def test_the_operands_a_kernel_may_write_over(func, fits):
    assert in_place.overwritable(func, 2) == fits
