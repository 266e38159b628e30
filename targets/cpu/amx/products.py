"""The Relax rewrite: a float32 matmul by constant [K, N] weights, and an NHWC convolution
by constant weights, becomes a kernel making the activations' parts and the AMX kernel,
which reads the weights' parts laid out when compiling (written to the engine's weight files
as they are made). Products of fewer than MIN_ROWS rows or less than MIN_FLOPS stay float32."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from toolchain.relax_ir import computed_constant, constant_view

from ...weights import WeightFiles
from ...relax_rewrites import op_name, rewrite_functions, static_dims
from .kernel import amx_kernel
from .parts import (_activation_parts, _pointwise_parts, _window_parts, parts_kernel, weight_parts,
                    weight_parts_shape, Window)
from .tiles import _round_up, ROWS, STEPS

MIN_ROWS = 32  # fewer rows leave most of a task's tiles empty: the float32 kernels take them
# Less arithmetic than this (2 M K N) stays float32, where the float32 kernel's fused epilogue
# and no parts to write beat AMX.
MIN_FLOPS = 1 << 26


def _constant_array(expr, lookup) -> np.ndarray | None:
    """A view of a constant's data, or of a constant's permute_dims (weights in another
    layout, folded later), else None; ``lookup`` gives a var's bound value."""
    if isinstance(expr, relax.Var):
        bound = lookup(expr)
        if op_name(bound) != "relax.permute_dims":
            return None
        value = _constant_array(bound.args[0], lookup)
        axes = bound.attrs.axes
        return None if value is None else np.transpose(
            value, None if axes is None else [int(a) for a in axes])
    return constant_view(expr) if isinstance(expr, tvm.ir.expr.Constant) else None


def _float32(*exprs) -> bool:
    return all(str(e.ty.dtype) == "float32" for e in exprs)


def _matmul_operands(call: relax.Call, lookup):
    """(x dims, [K, N] weights, None) of a float32 matmul by constant weights, else None."""
    x, weight = call.args
    x_dims, weight_dims = static_dims(x), static_dims(weight)
    if x_dims is None or weight_dims is None or len(weight_dims) != 2 or len(x_dims) < 2 \
            or x_dims[-1] != weight_dims[0] or not _float32(x, weight, call):
        return None
    weights = _constant_array(weight, lookup)
    return None if weights is None else (x_dims, weights, None)


def _convolution_operands(call: relax.Call, lookup):
    """(x dims, [KH KW C, O] weights, Window or None) of a float32 NHWC convolution by
    constant OHWI weights, ungrouped and undilated, of a multiple of STEPS input channels and
    equal strides of 1 or 2 (2 x 2 phases at most), else None. The Window is None for a 1x1
    unpadded one (its pixels are the rows: _pointwise_parts)."""
    attrs = call.attrs
    x_dims, weight_dims = static_dims(call.args[0]), static_dims(call.args[1])
    strides = [int(s) for s in attrs.strides]
    if (x_dims is None or weight_dims is None or attrs.data_layout != "NHWC"
            or attrs.kernel_layout != "OHWI" or (attrs.out_layout or "NHWC") != "NHWC"
            or attrs.groups != 1 or any(int(d) != 1 for d in attrs.dilation)
            or strides[0] != strides[1] or strides[0] not in (1, 2) or x_dims[3] % STEPS
            or not _float32(*call.args, call)):
        return None
    weights = _constant_array(call.args[1], lookup)
    if weights is None:
        return None
    weights = weights.reshape(weights.shape[0], -1).T
    padding = [int(p) for p in attrs.padding]
    if weight_dims[1:3] == [1, 1] and not any(padding):
        return x_dims, weights, None
    batch, height, width, channels = x_dims
    window = Window(batch, -(-(height + padding[0] + padding[2]) // strides[0]),
                    -(-(width + padding[1] + padding[3]) // strides[0]), channels // STEPS,
                    tuple(weight_dims[1:3]), strides[0])
    return x_dims, weights, window


@relax.expr_functor.mutator
class _AmxProducts(relax.expr_functor.PyExprMutator):
    def __init__(self, mod, weight_files: WeightFiles | None):
        super().__init__(mod)
        self.kernels: dict[tuple, tvm.ir.GlobalVar] = {}  # one AMX kernel a shape
        self.parts_kernels: dict[tuple, tuple] = {}  # (kernel, parts' shape) an input shape
        self.weight_files = weight_files

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        name = op_name(call)
        if name == "relax.matmul":
            operands = _matmul_operands(call, self.lookup_binding)
        elif name == "relax.nn.conv2d":
            operands = _convolution_operands(call, self.lookup_binding)
        else:
            return call
        out_dims = static_dims(call)
        rows = int(np.prod(out_dims[:-1]))
        if operands is None or rows < MIN_ROWS:
            return call
        x_dims, weights, window = operands
        depth, columns = weights.shape
        if 2 * rows * depth * columns < MIN_FLOPS:
            return call
        x = call.args[0]
        if window is not None:
            # C's rows are the phase images' pixels; for one image, up to its last output row
            rows = window.rows if window.batch > 1 else out_dims[1] * window.width
            parts = (_window_parts, window, tuple(int(p) for p in call.attrs.padding[:2]))
        elif name == "relax.matmul":
            parts = (_activation_parts, _round_up(rows, 2 * ROWS), _round_up(depth, STEPS))
        else:
            parts = (_pointwise_parts, tuple(int(v) for v in call.attrs.strides),
                     _round_up(rows, 2 * ROWS))
        parts_key = (parts[0], tuple(x_dims), *parts[1:])
        if parts_key not in self.parts_kernels:
            kernel, shape = parts_kernel(*parts_key)
            self.parts_kernels[parts_key] = self.builder_.add_func(kernel, "amx_parts"), shape
        kernel, shape = self.parts_kernels[parts_key]
        parts_call = relax.call_tir(kernel, [x], relax.TensorType(shape, "uint16"))
        key = (rows, depth, columns, window)
        if key not in self.kernels:
            self.kernels[key] = self.builder_.add_func(amx_kernel(*key), "amx_matmul")
        product = relax.call_tir(
            self.kernels[key], [self.builder_.emit(parts_call), self._weight_parts(weights)],
            relax.TensorType([rows, columns], "float32"))
        if window is not None:  # C's rows are the phase image's pixels: the outputs' come out
            images = relax.op.reshape(self.builder_.emit(product), [
                window.batch, rows // (window.batch * window.width), window.width, columns])
            return relax.op.strided_slice(self.builder_.emit(images), axes=[1, 2],
                                          begin=[0, 0], end=out_dims[1:3])
        if len(out_dims) == 2:
            return product
        return relax.op.reshape(self.builder_.emit(product), out_dims)

    def _weight_parts(self, weights: np.ndarray) -> relax.Constant:
        """The weights' parts as a constant, made in a weight file a slab at a time where
        there are weight files (the parts leave memory as they are written)."""
        shape = weight_parts_shape(*weights.shape)
        out = self.weight_files.empty(shape, "uint16") if self.weight_files else None
        if out is None:
            return computed_constant(shape, "uint16", lambda array: weight_parts(weights, array))
        weight_parts(weights, out, lambda: self.weight_files.release(out))
        self.weight_files.release(weights)  # read: where it is a weight file's, it leaves too
        return relax.const(tvm.runtime.from_dlpack(out))


def amx_products(weight_files: WeightFiles | None = None) -> tvm.transform.Pass:
    """The rewrite, the weights' parts written to ``weight_files`` where given."""

    @tvm.transform.module_pass(opt_level=0, name="AmxProducts")
    def rewrite(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, lambda m, _f: _AmxProducts(m, weight_files))

    return rewrite
