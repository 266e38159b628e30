"""Convolutions and matrix products of 8-bit integers computed on them: a conv2d or matmul whose
operands are both 8-bit levels, dequantized (R.dequantize, what ONNX's QDQ format and
QLinearConv/QLinearMatMul lower to) or widened to int32 (MatMulInteger, ConvInteger), becomes
one product of the 8-bit operands accumulated in int32, with the zero points subtracted after:

    sum_k (x - z_x) w' = product(x, w') - z_x sum_k w'      (w' = w - z_w, a constant)

then, for dequantized operands, times s_x s_w in float32. The weights (the right operand, a
constant, transposed or not) keep 8 bits in the module; their sums are computed here, once."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax import op as R

from .graph import constant

_EIGHT_BITS = ("int8", "uint8")
_PRODUCTS = ("relax.matmul", "relax.nn.conv2d")


@dataclass
class _Levels:
    """An operand as 8-bit ``levels`` less ``zero`` (an expr, None for 0), times ``scale`` (a
    float expr with the dequantize's ``axis``; None for an operand widened to int32), then
    transposed by ``axes`` where not None (Gemm's transB of a dequantized weight)."""

    levels: relax.Expr
    zero: relax.Expr | None
    scale: relax.Expr | None = None
    axis: int = 0
    axes: tuple | None = None


def _op(expr) -> str | None:
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) \
        else None


def _dtype(expr) -> str:
    return str(expr.ty.dtype) if isinstance(expr.ty, relax.TensorType) else ""


def _static_dims(expr) -> list[int] | None:
    ty = expr.ty
    dims = ty.shape.values if isinstance(ty, relax.TensorType) and ty.shape is not None else None
    if dims is None or not all(isinstance(d, tvm.tirx.IntImm) for d in dims):
        return None
    return [int(d) for d in dims]


def _size(expr) -> int | None:
    dims = _static_dims(expr)
    return None if dims is None else int(np.prod(dims))


class _Graph:
    """Lookups in a function's bindings: what a variable is bound to, and constant values."""

    def __init__(self, values: dict, remap):
        self.values, self.remap = values, remap

    def value(self, expr):
        while isinstance(expr, relax.Var) and expr in self.values:
            expr = self.values[expr]
        return expr

    def array(self, expr) -> np.ndarray | None:
        """``expr``'s data where it is a constant, or a cast or reshape of one."""
        expr = self.value(expr)
        if isinstance(expr, tvm.ir.expr.Constant):
            return expr.value.numpy()
        name = _op(expr)
        if name not in ("relax.astype", "relax.reshape"):
            return None
        inner = self.array(expr.args[0])
        if inner is None:
            return None
        dims = [int(d) for d in expr.ty.shape.values]
        return inner.astype(_dtype(expr)).reshape(dims)

    def widened(self, expr) -> relax.Expr | None:
        """The 8-bit levels of ``astype(levels, "int32")``."""
        expr = self.value(expr)
        if _op(expr) == "relax.astype" and _dtype(expr) == "int32" \
                and _dtype(expr.args[0]) in _EIGHT_BITS:
            return expr.args[0]
        return None

    def levels(self, expr) -> _Levels | None:
        """``expr`` as 8-bit levels, zero point and scale, or None where it is not one."""
        expr = self.value(expr)
        name = _op(expr)
        if name == "relax.dequantize":
            levels, scale, zero = expr.args
            if _dtype(levels) not in _EIGHT_BITS or _dtype(expr) != "float32":
                return None
            return _Levels(levels, zero, scale, int(expr.attrs.axis))
        if name == "relax.subtract" and _dtype(expr) == "int32":
            levels, zero = self.widened(expr.args[0]), self.value(expr.args[1])
            if levels is None or _op(zero) != "relax.astype":
                return None
            return _Levels(levels, zero)
        if name == "relax.permute_dims":
            inner = self.levels(expr.args[0])
            if inner is None or inner.scale is None or inner.axes is not None:
                return None
            rank = expr.ty.ndim
            axes = range(rank - 1, -1, -1) if expr.attrs.axes is None else expr.attrs.axes
            return dataclasses.replace(inner, axes=tuple(int(a) % rank for a in axes))
        levels = self.widened(expr)
        return None if levels is None else _Levels(levels, None)


def _weight(graph: _Graph, w: _Levels, channel_axis: int) -> np.ndarray | None:
    """The constant w - z_w in 8 bits (int8, else uint8), or None where it is not constant,
    does not fit 8 bits, or its scale is neither per tensor nor per output channel."""
    levels = graph.array(w.levels)
    zero = np.zeros((), np.int64) if w.zero is None else graph.array(w.zero)
    if levels is None or zero is None:
        return None
    axis = w.axis % levels.ndim
    if w.scale is not None and zero.size != 1:  # one per index of the dequantize's axis
        zero = zero.reshape([-1 if a == axis else 1 for a in range(levels.ndim)])
    try:
        shifted = levels.astype(np.int64) - zero.astype(np.int64).reshape(
            zero.shape if zero.size != 1 else ())
    except ValueError:  # a zero point that does not broadcast against the weight
        return None
    if shifted.shape != levels.shape:
        return None
    if w.axes is not None:
        shifted, axis = shifted.transpose(w.axes), w.axes.index(axis)
    if w.scale is not None and _size(w.scale) != 1 and (
            axis != channel_axis or _size(w.scale) != shifted.shape[channel_axis]):
        return None
    for dtype in _EIGHT_BITS:
        limits = np.iinfo(dtype)
        if limits.min <= shifted.min() and shifted.max() <= limits.max:
            return shifted.astype(dtype)
    return None


def _activation_zero(graph: _Graph, x: _Levels) -> relax.Expr | None:
    """The activation's zero point as an int32 expr, or None where it is 0."""
    if x.zero is None:
        return None
    data = graph.array(x.zero)
    if data is not None and not data.any():
        return None
    zero = graph.remap(x.zero)
    return zero if x.scale is None else R.astype(zero, "int32")


def _per_tensor(expr) -> bool:
    return expr is None or _size(expr) == 1


def _window_sums(weight: np.ndarray, attrs, data_dims, out_dims) -> np.ndarray:
    """Per output channel and position, the sum of the weights that meet the data rather than
    the padding: what a zero point contributes to each output of the convolution."""
    sums = weight.astype(np.int64).sum(axis=1)  # [O, KH, KW]
    padding = [int(p) for p in attrs.padding]
    if not any(padding):
        return sums.sum(axis=(1, 2)).reshape(1, -1, 1, 1)
    meets = []
    for axis in (0, 1):
        stride, dilation = int(attrs.strides[axis]), int(attrs.dilation[axis])
        taps = np.arange(weight.shape[2 + axis])[:, None] * dilation
        starts = np.arange(out_dims[axis])[None, :] * stride - padding[axis]
        meets.append(((starts + taps >= 0) & (starts + taps < data_dims[axis])).astype(np.int64))
    return np.einsum("okl,kh,lw->ohw", sums, *meets)[None]


def _conv_terms(call, x: _Levels, levels, weight: np.ndarray, zero_point: bool):
    """(the int32 product, the ``zero_point``'s window sums, the scale's shape) of a conv2d."""
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) != ("NCHW", "OIHW", "NCHW"):
        return None
    if not zero_point:
        sums = None
    elif any(int(p) for p in attrs.padding):
        data_dims, out_dims = _static_dims(x.levels), _static_dims(call)
        if data_dims is None or out_dims is None:
            return None
        sums = _window_sums(weight, attrs, data_dims[2:], out_dims[2:])
    else:
        sums = _window_sums(weight, attrs, None, None)
    product = R.nn.conv2d(levels, constant(weight), attrs.strides, attrs.padding,
                          attrs.dilation, attrs.groups, "NCHW", "OIHW", "NCHW", "int32")
    return product, sums, (1, -1, 1, 1)


def _matmul_terms(_call, _x: _Levels, levels, weight: np.ndarray, _zero_point: bool):
    """(the int32 product, the zero point's sums, the scale's shape) of a matmul by a 2-D
    weight (the arguments _conv_terms takes)."""
    product = R.matmul(levels, constant(weight), out_dtype="int32")
    return product, weight.astype(np.int64).sum(axis=0), (-1,)


def _integer_product(graph: _Graph, call: relax.Call, emit) -> relax.Expr | None:
    """``call`` (a matmul or conv2d) computed on 8-bit operands, or None where it is not one
    of 8-bit operands, or not one this rewrite takes."""
    x, w = graph.levels(call.args[0]), graph.levels(call.args[1])
    if x is None or w is None or (x.scale is None) != (w.scale is None):
        return None
    if x.axes is not None or not (_per_tensor(x.zero) and _per_tensor(x.scale)):
        return None
    is_conv = _op(call) == "relax.nn.conv2d"
    if not is_conv and (w.levels.ty.ndim != 2 or x.levels.ty.ndim < 2):
        return None
    weight = _weight(graph, w, 0 if is_conv else 1)
    if weight is None:
        return None
    # Every int32 sum (the product, the zero point's term, their difference) is at most 255
    # times an output's sum of |w'|: where that could overflow, the float32 product stays.
    reduced = tuple(range(1, weight.ndim)) if is_conv else (0,)
    if 255 * np.abs(weight.astype(np.int64)).sum(axis=reduced).max(initial=0) >= 2 ** 31:
        return None
    zero = _activation_zero(graph, x)
    terms = (_conv_terms if is_conv else _matmul_terms)(call, x, graph.remap(x.levels), weight,
                                                        zero is not None)
    if terms is None:
        return None
    product, sums, channel_shape = terms
    result = emit(product)
    if zero is not None:
        correction = emit(R.multiply(emit(zero), constant(sums.astype(np.int32))))
        result = emit(R.subtract(result, correction))
    if x.scale is None:
        return result
    w_scale = graph.remap(w.scale)
    if _size(w.scale) != 1:
        w_scale = emit(R.reshape(w_scale, channel_shape))
    scale = emit(R.multiply(graph.remap(x.scale), w_scale))
    return R.multiply(emit(R.astype(result, "float32")), scale)


@relax.expr_functor.mutator
class _IntegerProducts(relax.PyExprMutator):
    def __init__(self, mod=None):
        super().__init__(mod)
        self.graph = _Graph({}, self.visit_expr)
        self.rewrote = False

    def visit_var_binding_(self, binding):
        self.graph.values[binding.var] = binding.value
        super().visit_var_binding_(binding)

    def visit_call_(self, call):
        visited = super().visit_call_(call)
        if _op(call) not in _PRODUCTS:
            return visited
        rewritten = _integer_product(self.graph, call, self.builder_.emit)
        self.rewrote |= rewritten is not None
        return visited if rewritten is None else rewritten


def compute_in_integers(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each conv2d and matmul of 8-bit operands computed on them (see above); a
    function with none is kept as it was (not rebuilt: see composites.recognize)."""
    rewritten = {}
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and _has_eight_bit_operands(func):
            mutator = _IntegerProducts(mod)
            new_func = mutator.visit_expr(func)
            if mutator.rewrote:
                rewritten[gv] = new_func
    if not rewritten:
        return mod
    for gv, func in rewritten.items():
        mod[gv] = func
    # The dequantized weights the products no longer read go.
    return relax.transform.DeadCodeElimination()(relax.transform.Normalize()(mod))


def _has_eight_bit_operands(func: relax.Function) -> bool:
    """Whether ``func`` has a product and what may make its operands 8-bit levels."""
    names = set()
    relax.analysis.post_order_visit(func, lambda e: names.add(_op(e)))
    return bool(names & set(_PRODUCTS)) and bool(names & {"relax.dequantize", "relax.astype"})
