"""Weights kept beside the compiled code, not inside it.

Compiled in, a model's constants are part of the library: storing it writes them into the
shared object, and loading it copies them out of the mapped file into TVM tensors and again
into the VM's constant pool, the weights held three times.
So, once every compile-time fold has run, ``main``'s large constants become trailing
parameters of ``main``; the compiled module keeps their arrays and passes them on every call,
and a bundle keeps them as .npy files that load memory-mapped (see odla_tvm.bundle).
"""

from __future__ import annotations

import functools
import mmap
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

# Smaller constants (scalars, shapes, small tables) stay in the code, where they cost nothing.
WEIGHT_MIN_BYTES = 4096


@functools.lru_cache(maxsize=None)
def numpy_views(dtype: str) -> bool:
    """Whether NumPy views TVM tensors of ``dtype`` (not bfloat16, say)."""
    try:
        np.from_dlpack(tvm.runtime.empty((1,), dtype))
        return True
    except (RuntimeError, TypeError, BufferError):
        return False


def tensor_array(tensor: tvm.runtime.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's memory (it keeps the tensor alive), else a copy (a
    dtype NumPy does not view)."""
    return np.from_dlpack(tensor) if numpy_views(str(tensor.dtype)) else tensor.numpy()


def _nbytes(constant: tvm.ir.expr.Constant) -> int:
    return int(np.prod(constant.value.shape)) * tvm.runtime.DataType(constant.value.dtype).bits // 8


@relax.expr_functor.mutator
class _WeightsAsParameters(relax.expr_functor.PyExprMutator):
    """Replaces each constant operand of WEIGHT_MIN_BYTES or more with a parameter (one
    parameter per constant, however often it is used), and each of no elements with an
    allocation."""

    def __init__(self, mod: tvm.IRModule):
        super().__init__(mod)
        self.parameters: dict[tvm.ir.expr.Constant, relax.Var] = {}

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        args = [self._parameter_for(a) for a in call.args]
        if all(a.same_as(b) for a, b in zip(args, call.args)):
            return call
        return relax.Call(call.op, args, call.attrs, call.ty_args)

    def visit_tuple_(self, tup: relax.Tuple) -> relax.Expr:
        tup = self.visit_expr_post_order(tup)
        fields = [self._parameter_for(f) for f in tup.fields]
        if all(a.same_as(b) for a, b in zip(fields, tup.fields)):
            return tup
        return relax.Tuple(fields)

    def _parameter_for(self, expr: relax.Expr) -> relax.Expr:
        if not (isinstance(expr, tvm.ir.expr.Constant)
                and isinstance(expr.value, tvm.runtime.Tensor)):  # not a string constant
            return expr
        if 0 in expr.value.shape:  # made at run time: TVM's loader cannot read one back
            return self.builder_.emit(relax.op.builtin.alloc_tensor(
                relax.ShapeExpr(list(expr.value.shape)), str(expr.value.dtype), 0))
        if _nbytes(expr) < WEIGHT_MIN_BYTES:
            return expr
        if expr not in self.parameters:
            self.parameters[expr] = relax.Var(f"weight{len(self.parameters)}", expr.ty)
        return self.parameters[expr]


def lift_weights(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """``mod`` with ``main``'s constants of WEIGHT_MIN_BYTES or more made its trailing
    parameters, and their arrays in parameter order (views of the constants' memory); those
    of no elements are allocated when it runs instead."""
    main = mod.get_global_var("main")
    func = mod[main]
    lifter = _WeightsAsParameters(mod)
    body = lifter.visit_expr(func).body
    if body.same_as(func.body):
        return mod, []
    mod = mod.clone()
    mod[main] = relax.Function(list(func.params) + list(lifter.parameters.values()), body,
                               func.ret_ty, func.is_pure, func.attrs)
    return mod, [tensor_array(c.value) for c in lifter.parameters]


class WeightFiles:
    """Weights a compile computes from constants (a weight transposed, Winograd's taps, a
    layout a kernel prepacks), each written to a .npy file in ``directory`` as it is made and
    dropped from the process's memory once written: a shared file mapping, whose pages the
    page cache keeps and a kernel maps again when it reads them, rather than held beside the
    originals they were made from. Whoever keeps the compiled module and its weights
    (the engine cache) links these files rather than writing the weights again
    (``file_of``). The mappings live as long as this does, so no other array takes one's
    address meanwhile."""

    MIN_BYTES = 1 << 20  # smaller weights stay in memory: a file each would cost more
    SLAB_BYTES = 16 << 20  # what ``copy`` writes before its pages leave memory

    def __init__(self, directory):
        self.directory = Path(directory)
        self._files: dict[int, tuple[Path, int, mmap.mmap]] = {}  # address -> (file, size, map)

    def empty(self, shape: list[int], dtype: str) -> np.ndarray | None:
        """A new array of ``shape`` and ``dtype`` in a file of its own, or None where it is
        smaller than MIN_BYTES or of a dtype NumPy does not view (bfloat16)."""
        if not numpy_views(dtype):
            return None
        dt = np.dtype(dtype)
        size = int(np.prod(shape)) * dt.itemsize
        if size < self.MIN_BYTES:
            return None
        path = self.directory / f"w{len(self._files)}.npy"
        with open(path, "w+b") as f:
            # np.save's header, padded so the data lies 64-byte aligned, as TVM wants it.
            np.lib.format.write_array_header_1_0(f, {
                "descr": np.lib.format.dtype_to_descr(dt), "fortran_order": False,
                "shape": tuple(shape)})
            offset = f.tell()
            f.truncate(offset + size)
            mapped = mmap.mmap(f.fileno(), offset + size)
        array = np.frombuffer(mapped, dt, int(np.prod(shape)), offset).reshape(shape)
        self._files[array.__array_interface__["data"][0]] = path, size, mapped
        return array

    def _found(self, array) -> tuple[Path, int, mmap.mmap] | None:
        """(file, size, map) of the array ``empty`` made at ``array``'s address (a NumPy
        array or a TVM tensor), else None."""
        address = array.data_ptr() if isinstance(array, tvm.runtime.Tensor) else \
            array.__array_interface__["data"][0]
        return self._files.get(address)

    @staticmethod
    def copy_plain(out: np.ndarray, value: np.ndarray, _read=None, _read_axis: int = 0) -> None:
        """``copy`` where nothing goes to files."""
        np.copyto(out, value)

    def copy(self, out: np.ndarray, value: np.ndarray, read: np.ndarray | None = None,
             read_axis: int = 0) -> None:
        """np.copyto(out, value), a slab at a time where ``empty`` made ``out``: after each
        slab, its pages leave memory, and those of ``read`` (the array ``value`` views, where
        ``empty`` made it too), so neither is ever resident whole. Slabs go along out's
        leading axis, or where read is a file, along ``read_axis`` (the axis of out that is
        read's leading one), reading it a contiguous part at a time: a page read maps its
        neighbours too, and a slab reading a column of a file would map all of it."""
        if self._found(out) is None:
            self.copy_plain(out, value)
            return
        axis = read_axis if read is not None and self._found(read) is not None else 0
        rows = max(1, self.SLAB_BYTES * out.shape[axis] // max(out.nbytes, 1))
        for start in range(0, out.shape[axis], rows):
            slab = (slice(None),) * axis + (slice(start, start + rows),)
            np.copyto(out[slab], value[slab])
            for array in (out, read):
                if array is not None:
                    self.release(array)

    def release(self, array) -> None:
        """Where ``empty`` made ``array`` (a NumPy array or a TVM tensor), its pages leave the
        process's memory, its file keeping them: once it is written, or read for now (a
        shared mapping loses nothing it wrote; a later read maps them again)."""
        found = self._found(array)
        if found is not None:
            found[2].madvise(mmap.MADV_DONTNEED)

    def file_of(self, array: np.ndarray) -> Path | None:
        """The file holding ``array`` whole (one ``empty`` made, or a view of all of it)."""
        found = self._found(array)
        return found[0] if found is not None and found[1] == array.nbytes else None
