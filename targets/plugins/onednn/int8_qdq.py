"""What an int8 graph computes in float32 between a dequantize and a quantize, written on the
8-bit values themselves where that is the same:

- ONNX's QDQ format pads an 8-bit activation by dequantizing it, padding the float32 values
  (and, where the Pad's fill is a tensor, selecting the fill where the padding went) and
  quantizing again by the same scale and zero point: that is the 8-bit padding by the zero
  point, which the next convolution's oneDNN primitive takes in (int8_patterns.py), its
  source's zero point counted as the padding;
- elementwise code of one 8-bit tensor (an activation, or a swish: x times its sigmoid)
  takes at most 256 values: a lookup in a table of them, computed here, instead of the
  float32 code on every element;
- a max pool between a dequantize and a quantize by the same scale and zero point is the max
  pool of the 8-bit values (dequantizing keeps their order)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ...relax_rewrites import is_scalar, op_name, rewrite_functions, static_dims


def _constant(expr) -> np.ndarray | None:
    return expr.value.numpy() if isinstance(expr, tvm.ir.expr.Constant) else None


def _same_scalars(a, b) -> bool:
    left, right = _constant(a), _constant(b)
    return (left is not None and right is not None and left.size == 1 and right.size == 1
            and left.dtype == right.dtype and left.reshape(()) == right.reshape(()))


@relax.expr_functor.mutator
class _InEightBits(relax.PyExprMutator):
    def _bound(self, expr):
        return self.lookup_binding(expr) if isinstance(expr, relax.Var) else None

    def _padding(self, expr):
        """The pad call ``expr`` is, or that a select of the padding's interior against its
        own fill selects (an identity); else None."""
        bound = self._bound(expr)
        if op_name(bound) == "relax.where":
            mask, padded, fill = bound.args
            mask, padded, fill = _constant(mask), self._bound(padded), _constant(fill)
            if (op_name(padded) != "relax.nn.pad" or mask is None or fill is None
                    or fill.size != 1 or float(fill.reshape(())) != float(padded.attrs.pad_value)
                    or not np.array_equal(mask, _interior(padded))):
                return None
            bound = padded
        if op_name(bound) != "relax.nn.pad" or bound.attrs.pad_mode != "constant":
            return None
        return bound

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        if op_name(call) != "relax.quantize" or not all(is_scalar(a) for a in call.args[1:]):
            return call
        inner = self._bound(call.args[0])
        if op_name(inner) in (*_ACTIVATIONS, *_BINARY):
            table = self._table(call)
            return call if table is None else table
        if op_name(inner) == "relax.nn.max_pool2d":
            dequantize = self._bound(inner.args[0])
            increasing = _same_quantization(call, dequantize) and float(
                _constant(call.args[1]).reshape(())) > 0  # dequantizing keeps the order
            if increasing:
                return relax.Call(inner.op, [dequantize.args[0]], inner.attrs)
            return call
        pad = self._padding(call.args[0])
        dequantize = self._bound(pad.args[0]) if pad is not None else None
        if not _same_quantization(call, dequantize) or float(pad.attrs.pad_value) != 0.0:
            return call
        zero = float(_constant(call.args[2]).reshape(()))
        return relax.op.nn.pad(dequantize.args[0], [int(p) for p in pad.attrs.pad_width],
                               "constant", zero)


    def _table(self, quantize):
        """quantize(f(q)) as a lookup of q in the table of its 256 values, where f is
        elementwise code of one 8-bit tensor q's dequantized values (activations, products
        and sums of them and of scalars, quantize and dequantize round trips)."""
        found = self._over_levels(quantize.args[0])
        target = str(quantize.ty.dtype)
        if found is None or target not in _LEVELS:
            return None
        levels, values = found
        table = _quantized(values, *quantize.args[1:], target)
        # Indexed by the level's bits read as unsigned: s8's -128 is entry 128.
        source = str(levels.ty.dtype)
        order = np.argsort(_all_levels(source).view(np.uint8))
        index = levels if source == "uint8" else self.builder_.emit(
            relax.op.astype(levels, "uint8"))
        return relax.op.take(relax.const(table[order]), index, axis=0)

    def _over_levels(self, expr, leaf=None):
        """(q, the float32 values ``expr`` takes for each of q's levels, in order), where
        ``expr`` is elementwise code of the one 8-bit tensor q, else None."""
        bound = self._bound(expr)
        name = op_name(bound)
        if (name == "relax.dequantize" and all(is_scalar(a) for a in bound.args[1:])
                and str(bound.args[0].ty.dtype) in _LEVELS):
            levels, quantized = bound.args[0], self._bound(bound.args[0])
            inner = None
            if op_name(quantized) == "relax.quantize" and all(
                    is_scalar(a) for a in quantized.args[1:]):
                inner = self._over_levels(quantized.args[0], leaf)
            if inner is not None:
                leaf, values = inner[0], _quantized(inner[1], *quantized.args[1:],
                                                    str(levels.ty.dtype))
            elif (looked_up := self._looked_up(quantized, leaf)) is not None:
                leaf, values = looked_up
            elif str(levels.ty.dtype) in _LEVELS and (leaf is None or leaf.same_as(levels)):
                leaf, values = levels, _all_levels(str(levels.ty.dtype))
            else:
                return None
            scale, zero = (_constant(a).reshape(()) for a in bound.args[1:])
            return leaf, ((values.astype(np.int32) - zero.astype(np.int32))
                          * scale).astype(np.float32)
        if name in _ACTIVATIONS and len(bound.args) == 1:
            inner = self._over_levels(bound.args[0], leaf)
            return None if inner is None else (
                inner[0], _ACTIVATIONS[name](inner[1]).astype(np.float32))
        if name in _BINARY:
            operands = []
            for operand in bound.args:
                constant = _constant(operand)
                if constant is not None and constant.size == 1:
                    operands.append(constant.reshape(()).astype(np.float32))
                    continue
                inner = self._over_levels(operand, leaf)
                if inner is None:
                    return None
                leaf = inner[0]
                operands.append(inner[1])
            if leaf is None:
                return None
            return leaf, _BINARY[name](*operands).astype(np.float32)
        return None


    def _looked_up(self, take, leaf):
        """(q, the levels ``take`` gives for each of q's), where it is a table lookup
        (_table) of q, else None."""
        table = _constant(take.args[0]) if op_name(take) == "relax.take" else None
        if table is None or table.shape != (256,):
            return None
        index = take.args[1]
        cast = self._bound(index)
        source = cast.args[0] if op_name(cast) == "relax.astype" else index
        if str(source.ty.dtype) not in _LEVELS or not (leaf is None or leaf.same_as(source)):
            return None
        return source, table[_all_levels(str(source.ty.dtype)).view(np.uint8)]


def _all_levels(dtype: str) -> np.ndarray:
    return np.arange(*_LEVELS[dtype]).astype(dtype)


def _quantized(values: np.ndarray, scale, zero, dtype: str) -> np.ndarray:
    """QuantizeLinear of ``values`` by the constant scalars ``scale`` and ``zero``."""
    low, high = _LEVELS[dtype]
    scale, zero = (_constant(a).reshape(()) for a in (scale, zero))
    levels = np.rint(values / scale.astype(np.float32)) + zero.astype(np.float32)
    return np.clip(levels, low, high - 1).astype(dtype)


_LEVELS = {"uint8": (0, 256), "int8": (-128, 128)}
_BINARY = {"relax.add": np.add, "relax.subtract": np.subtract, "relax.multiply": np.multiply,
           "relax.divide": np.divide}
_ACTIVATIONS = {
    "relax.sigmoid": lambda x: 1 / (1 + np.exp(-x.astype(np.float64))),
    "relax.tanh": np.tanh,
    "relax.exp": np.exp,
    "relax.nn.relu": lambda x: np.maximum(x, 0),
}


def _same_quantization(quantize, dequantize) -> bool:
    """Whether ``dequantize`` reads levels of ``quantize``'s type by the same constant scale
    and zero point: quantize(dequantize(q)) is q."""
    return (op_name(dequantize) == "relax.dequantize"
            and str(dequantize.args[0].ty.dtype) == str(quantize.ty.dtype)
            and all(_same_scalars(a, b) for a, b in zip(quantize.args[1:], dequantize.args[1:])))


def _interior(pad: relax.Call) -> np.ndarray | None:
    """Where ``pad``'s result holds its input's values."""
    dims = static_dims(pad.args[0])
    if dims is None:
        return None
    widths = [int(p) for p in pad.attrs.pad_width]
    return np.pad(np.ones(dims, bool), list(zip(widths[0::2], widths[1::2])))


def in_eight_bits(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with its paddings, activations and max pools between a dequantize and a
    quantize computed on the 8-bit values (see above); its constants folded first (a Pad's
    fill is the dequantized constant 0)."""
    mod = rewrite_functions(relax.transform.FoldConstant()(mod),
                            lambda m, _f: _InEightBits(m))
    return relax.transform.DeadCodeElimination()(mod)
