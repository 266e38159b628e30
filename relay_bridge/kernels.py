"""Kernels for ODLA ops that Relax and TOPI have no computation for: TE computations (for
``emit.te``) and hand-written TIR (for ``emit.tir``).

The matrix kernels take a batch of square matrices ``(batch, n, n)`` with both sizes
symbolic, so one kernel serves every shape of a dtype. Each batch element is one spatial
block whose body runs sequentially; the row-reduction scratch is a kernel output (``work``)
rather than an allocation of symbolic size, so that GPU schedules can bind the batch loop to
threads.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import tvm
from tvm import te, tirx, topi
from tvm.script import tirx as T

from . import checks  # noqa: F401  registers the check functions the kernels' callers call


def select_by(values: list, position):
    """``values[position]`` for a PrimExpr ``position``, as a chain of selects."""
    chosen = values[-1]
    for i in range(len(values) - 2, -1, -1):
        chosen = tirx.Select(position == i, values[i], chosen)
    return chosen


def dims_tensor(dims: list) -> te.Tensor:
    """A 1-D INT64 tensor of ``dims``, which may be symbolic (known at run time only)."""
    values = [tirx.Cast("int64", d) for d in dims]
    return te.compute((len(dims),), lambda i: select_by(values, i), name="dims")


def scaled_dims(dims: list, scales: te.Tensor) -> te.Tensor:
    """floor(dim * scale) for each dim, as ONNX's Resize computes its output size."""
    return te.compute(
        (len(dims),),
        lambda i: tirx.Cast("int64", tirx.floor(
            tirx.Cast("float64", select_by(dims, i)) * tirx.Cast("float64", scales[i]))),
        name="scaled_dims",
    )


def _size_of(sizes: list, i: tuple, dtype: str):
    """The dim an index at position ``i`` addresses: one size for all, or one per position
    along the last axis (index tuples)."""
    return tirx.Cast(dtype, select_by(sizes, i[-1]) if len(sizes) > 1 else sizes[0])


def wrap_negative(indices: te.Tensor, sizes: list, checked: te.Tensor | None = None) -> te.Tensor:
    """``indices``, each negative one counted from the end of its dim (``sizes`` as for
    _size_of). ``checked``: check_indices' verdict on them, which orders this kernel after
    the check; a bad index (never reached: the check raises) would address element 0."""

    def element(*i):
        index = indices(*i)
        wrapped = tirx.Select(index < 0, index + _size_of(sizes, i, indices.dtype), index)
        if checked is None:
            return wrapped
        return tirx.Select(checked[0] == 0, wrapped, tirx.const(0, indices.dtype))

    return te.compute(indices.shape, element, name="wrapped")


def count_where(x: te.Tensor, bad) -> te.Tensor:
    """How many elements of ``x`` ``bad(element, index)`` holds for, as a 1-element int64
    tensor: a reduction every target schedules, GPUs included. The counting half of each
    run-time check; a host call after it names the first bad element."""
    if not x.shape:
        return te.compute((1,), lambda _: tirx.Cast("int64", bad(x(), ())), name="bad_count")
    axes = [te.reduce_axis((0, dim)) for dim in x.shape]
    return te.compute((1,), lambda _: te.sum(tirx.Cast("int64", bad(x(*axes), axes)), axis=axes),
                      name="bad_count")


def out_of_range_count(indices: te.Tensor, sizes: list, negative: bool = True) -> te.Tensor:
    """How many of ``indices`` lie outside [-size, size-1] of their dim (``sizes`` as for
    _size_of; [0, size-1] unless ``negative``)."""

    def bad(index, i):
        size = _size_of(sizes, i, indices.dtype)
        lowest = -size if negative else tirx.const(0, indices.dtype)
        return tirx.any(index < lowest, index >= size)

    return count_where(indices, bad)



def zero_count(x: te.Tensor) -> te.Tensor:
    """How many elements of ``x`` are 0, as a 1-element int64 tensor."""
    return count_where(x, lambda element, _: element == 0)


def nonzero_count(x: te.Tensor) -> te.Tensor:
    """How many elements of ``x`` are not 0, as a 1-element int64 tensor. (Give a mask as
    int8: LLVM's vectorized reduction of BOOL loads mixes i1 and i8.)"""
    return count_where(x, lambda element, _: element != tirx.const(0, str(x.dtype)))


def outside_count(x: te.Tensor, lowest, highest, nonzero: bool) -> te.Tensor:
    """How many elements of ``x`` lie outside [lowest, highest] (or are 0 where ``nonzero``);
    NaN lies outside any range."""
    dtype = str(x.dtype)
    low, high = tirx.const(lowest, dtype), tirx.const(highest, dtype)

    def bad(element, _):
        outside = tirx.Not(tirx.all(element >= low, element <= high))
        if dtype.startswith(("float", "bfloat")):  # said outright: compilers may assume no NaN
            outside = tirx.any(outside, tirx.isnan(element))
        return tirx.any(outside, element == tirx.const(0, dtype)) if nonzero else outside

    return count_where(x, bad)







def strided_gather(x: te.Tensor, start: te.Tensor, stride: te.Tensor, sizes: list) -> te.Tensor:
    """``sizes[k]`` elements of each dim k of ``x`` from ``start[k]`` (negative: from the end)
    in steps of ``stride[k]``, start and stride read at run time; a position outside ``x``
    reads its nearest element."""
    dims = x.shape

    def position(k, i):
        first = tirx.Cast("int64", start[k])
        first = tirx.Select(first < 0, first + dims[k], first)
        at = first + i * tirx.Cast("int64", stride[k])
        return tirx.max(tirx.min(at, dims[k] - 1), 0)

    return te.compute(sizes, lambda *i: x(*[position(k, ik) for k, ik in enumerate(i)]),
                      name="strided_gather")


def _extreme_identity(dtype: str, largest: bool):
    """What the largest (smallest) element of an empty set is: -inf (+inf) for floats, the
    type's least (greatest) value for integers."""
    if dtype.startswith(("float", "bfloat")):
        return -math.inf if largest else math.inf
    return int(np.iinfo(dtype).min if largest else np.iinfo(dtype).max)


def extreme(x: te.Tensor, axes: list[int], keep_dims: bool, largest: bool) -> te.Tensor:
    """The largest (or smallest) element of ``x`` over ``axes`` (sorted, non-negative). A
    float reduction starts from -inf (+inf), so that a run of infinities reduces to
    infinity; TOPI's starts from the largest finite number."""
    start = tirx.const(_extreme_identity(str(x.dtype), largest), str(x.dtype))
    combine = tirx.max if largest else tirx.min
    reducer = te.comm_reducer(lambda a, b: combine(a, b), lambda t: start, name="extreme")
    spans = {a: te.reduce_axis((0, x.shape[a]), f"k{a}") for a in axes}
    kept = [a for a in range(len(x.shape)) if a not in spans]
    out_dims = [1 if a in spans else x.shape[a] for a in range(len(x.shape))] if keep_dims \
        else [x.shape[a] for a in kept]

    def element(*i):
        outer = dict(zip(range(len(x.shape)) if keep_dims else kept, i))
        index = [spans[a] if a in spans else outer[a] for a in range(len(x.shape))]
        return reducer(x(*index), axis=list(spans.values()))

    return te.compute(out_dims, element, name="extreme")


def _legalize_extreme(largest: bool):
    """relax.max / relax.min lowered through ``extreme``: the Relax ops stay in the graph, so
    their gradients still apply, and lower without TOPI's finite starting value. A reduction
    over a dim of size 0 is the identity (TVM's own lowering would leave it unwritten)."""
    def legalize(bb, call):
        x = call.args[0]
        dims = x.ty.shape.values
        axes = range(len(dims)) if call.attrs.axis is None else \
            {int(a) % len(dims) for a in call.attrs.axis}
        dtype = str(x.ty.dtype)
        if any(isinstance(dims[a], tirx.IntImm) and int(dims[a]) == 0 for a in axes):
            return bb.call_te(topi.full, call.ty.shape.values, dtype,
                              _extreme_identity(dtype, largest))
        return bb.call_te(extreme, x, sorted(axes), bool(call.attrs.keepdims), largest)
    return legalize


# Above TVM's own legalization (level 10), for every module this process compiles.
tvm.ir.register_op_attr("relax.max", "FLegalize", _legalize_extreme(True), level=11)
tvm.ir.register_op_attr("relax.min", "FLegalize", _legalize_extreme(False), level=11)


def _mix(h):
    """A 32-bit integer hash with good avalanche (Wellons' lowbias32)."""
    h = h ^ (h >> 16)
    h = h * tirx.const(0x7FEB352D, "uint32")
    h = h ^ (h >> 15)
    h = h * tirx.const(0x846CA68B, "uint32")
    return h ^ (h >> 16)


def random_fill(dims: tuple, dtype: str, normal: bool, p0: float, p1: float,
                seed: int) -> te.Tensor:
    """Counter-based random numbers: each element hashes its flat index with ``seed``, so
    a seed gives the same numbers on every run and device. Uniform in [p0, p1), or normal
    with mean p0 and deviation p1 (Box-Muller on two uniforms)."""
    seed_key = _mix(tirx.const(seed & 0xFFFFFFFF, "uint32"))

    def uniform(flat, stream, offset):  # in [offset, 1 + offset) * 2**-24 steps
        key = tirx.Cast("uint32", flat * 2 + stream) ^ seed_key
        return (tirx.Cast("float32", _mix(key) >> 8) + offset) * (1.0 / (1 << 24))

    def element(*i):
        flat = tirx.const(0, "int64")
        for index, size in zip(i, dims):
            flat = flat * size + tirx.Cast("int64", index)
        if normal:  # u1 in (0, 1] keeps the log finite
            radius = tirx.sqrt(-2.0 * tirx.log(uniform(flat, 0, 1.0)))
            value = p0 + p1 * radius * tirx.cos(2.0 * math.pi * uniform(flat, 1, 0.0))
        else:
            value = p0 + (p1 - p0) * uniform(flat, 0, 0.0)
        return tirx.Cast(dtype, value)

    return te.compute(dims, element, name="random_fill")


@T.macro
def _find_pivot(work, vb, k, n, pivot_row, pivot_size):
    """The row from ``k`` down whose entry in column ``k`` is largest in magnitude."""
    pivot_row[0] = k
    pivot_size[0] = T.abs(work[vb, k, k])
    for r in range(k + 1, n):
        if T.abs(work[vb, r, k]) > pivot_size[0]:
            pivot_row[0] = r
            pivot_size[0] = T.abs(work[vb, r, k])


@T.macro
def _swap_rows(matrix, vb, k, other, n, held):
    for j in range(n):
        held[0] = matrix[vb, k, j]
        matrix[vb, k, j] = matrix[vb, other, j]
        matrix[vb, other, j] = held[0]


@functools.cache
def determinant_kernel(dtype: str):
    """``(matrices) -> (work, determinants)`` by LU decomposition with partial pivoting."""

    @T.prim_func(private=True, s_tir=True)
    def determinant(a: T.handle, w: T.handle, d: T.handle):
        batch, n = T.int64(), T.int64()
        matrices = T.match_buffer(a, (batch, n, n), dtype)
        work = T.match_buffer(w, (batch, n, n), dtype)
        determinants = T.match_buffer(d, (batch,), dtype)
        for b in range(batch):
            with T.sblock("determinant"):
                vb = T.axis.spatial(batch, b)
                # Declared rather than inferred: the block's own use of its scratch rows is
                # internal, so schedules may treat each batch element as independent.
                T.reads(matrices[vb, 0:n, 0:n])
                T.writes(work[vb, 0:n, 0:n], determinants[vb])
                pivot_row = T.sblock_alloc_buffer((1,), "int64", scope="local")
                pivot_size = T.sblock_alloc_buffer((1,), dtype, scope="local")
                held = T.sblock_alloc_buffer((1,), dtype, scope="local")  # a swapped entry, a factor
                product = T.sblock_alloc_buffer((1,), dtype, scope="local")
                for i, j in T.grid(n, n):
                    work[vb, i, j] = matrices[vb, i, j]
                product[0] = T.Cast(dtype, 1)
                for k in range(n):
                    _find_pivot(work, vb, k, n, pivot_row, pivot_size)
                    if pivot_row[0] != k:
                        product[0] = -product[0]
                        _swap_rows(work, vb, k, pivot_row[0], n, held)
                    product[0] = product[0] * work[vb, k, k]
                    if work[vb, k, k] != T.Cast(dtype, 0):
                        for r in range(k + 1, n):
                            held[0] = work[vb, r, k] / work[vb, k, k]
                            for j in range(k + 1, n):
                                work[vb, r, j] = work[vb, r, j] - held[0] * work[vb, k, j]
                determinants[vb] = product[0]

    return determinant


@functools.cache
def inverse_kernel(dtype: str):
    """``(matrices) -> (work, inverses)`` by Gauss-Jordan elimination with partial pivoting;
    a singular matrix gives infinities or NaNs, as a division by zero does."""

    @T.prim_func(private=True, s_tir=True)
    def inverse(a: T.handle, w: T.handle, o: T.handle):
        batch, n = T.int64(), T.int64()
        matrices = T.match_buffer(a, (batch, n, n), dtype)
        work = T.match_buffer(w, (batch, n, n), dtype)
        inverses = T.match_buffer(o, (batch, n, n), dtype)
        for b in range(batch):
            with T.sblock("inverse"):
                vb = T.axis.spatial(batch, b)
                T.reads(matrices[vb, 0:n, 0:n])  # declared, as in determinant_kernel
                T.writes(work[vb, 0:n, 0:n], inverses[vb, 0:n, 0:n])
                pivot_row = T.sblock_alloc_buffer((1,), "int64", scope="local")
                pivot_size = T.sblock_alloc_buffer((1,), dtype, scope="local")
                held = T.sblock_alloc_buffer((1,), dtype, scope="local")  # a swapped entry, a factor
                for i, j in T.grid(n, n):
                    work[vb, i, j] = matrices[vb, i, j]
                    inverses[vb, i, j] = T.Select(i == j, T.Cast(dtype, 1), T.Cast(dtype, 0))
                for k in range(n):
                    _find_pivot(work, vb, k, n, pivot_row, pivot_size)
                    if pivot_row[0] != k:
                        _swap_rows(work, vb, k, pivot_row[0], n, held)
                        _swap_rows(inverses, vb, k, pivot_row[0], n, held)
                    held[0] = T.Cast(dtype, 1) / work[vb, k, k]
                    for j in range(n):
                        work[vb, k, j] = work[vb, k, j] * held[0]
                        inverses[vb, k, j] = inverses[vb, k, j] * held[0]
                    for r in range(n):
                        if r != k:
                            held[0] = work[vb, r, k]
                            for j in range(n):
                                work[vb, r, j] = work[vb, r, j] - held[0] * work[vb, k, j]
                                inverses[vb, r, j] = inverses[vb, r, j] - held[0] * inverses[vb, k, j]

    return inverse
