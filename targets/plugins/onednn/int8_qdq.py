"""What an int8 graph computes in float32 between a dequantize and a quantize, written on the
8-bit values themselves where that is the same:

- ONNX's QDQ format pads an 8-bit activation by dequantizing it, padding the float32 values
  (and, where the Pad's fill is a tensor, selecting the fill where the padding went) and
  quantizing again by the same scale and zero point: that is the 8-bit padding by the zero
  point, which the next convolution's oneDNN primitive takes in (int8_patterns.py), its
  source's zero point counted as the padding;
- an activation of one 8-bit tensor (a sigmoid, say) takes at most 256 values: a lookup in
  a table of them, computed here, instead of the float32 function on every element;
- a max pool between a dequantize and a quantize by the same scale and zero point is the max
  pool of the 8-bit values (dequantizing keeps their order)."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from ...relax_rewrites import op_name, rewrite_functions, static_dims


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
        if op_name(call) != "relax.quantize" or not all(_is_scalar(a) for a in call.args[1:]):
            return call
        inner = self._bound(call.args[0])
        if op_name(inner) in _ACTIVATIONS:
            table = self._table(call, inner)
            return call if table is None else table
        if op_name(inner) == "relax.nn.max_pool2d":
            dequantize = self._bound(inner.args[0])
            if _same_quantization(call, dequantize):
                return relax.Call(inner.op, [dequantize.args[0]], inner.attrs)
            return call
        pad = self._padding(call.args[0])
        dequantize = self._bound(pad.args[0]) if pad is not None else None
        if not _same_quantization(call, dequantize) or float(pad.attrs.pad_value) != 0.0:
            return call
        zero = float(_constant(call.args[2]).reshape(()))
        return relax.op.nn.pad(dequantize.args[0], [int(p) for p in pad.attrs.pad_width],
                               "constant", zero)


    def _table(self, quantize, activation):
        """quantize(f(dequantize(q))) as a lookup of q in the table of its 256 values."""
        dequantize = self._bound(activation.args[0])
        if (op_name(dequantize) != "relax.dequantize" or len(activation.args) != 1
                or not all(_is_scalar(a) for a in dequantize.args[1:])):
            return None
        levels = dequantize.args[0]
        source, target = str(levels.ty.dtype), str(quantize.ty.dtype)
        if source not in _LEVELS or target not in _LEVELS:
            return None
        values = np.arange(*_LEVELS[source]).astype(source)
        scale, zero = (_constant(a).reshape(()) for a in dequantize.args[1:])
        real = ((values.astype(np.int32) - zero.astype(np.int32)) * scale).astype(np.float32)
        result = _ACTIVATIONS[op_name(activation)](real).astype(np.float32)
        out_scale, out_zero = (_constant(a).reshape(()) for a in quantize.args[1:])
        levels_out = np.rint(result / out_scale) + out_zero.astype(np.float32)
        low, high = _LEVELS[target]
        table = np.clip(levels_out, low, high - 1)
        # Indexed by the level's bits read as unsigned: s8's -128 is entry 128.
        index = levels if source == "uint8" else self.builder_.emit(
            relax.op.astype(levels, "uint8"))
        order = np.argsort(values.view(np.uint8))
        return relax.op.take(relax.const(table.astype(target)[order]), index, axis=0)


_LEVELS = {"uint8": (0, 256), "int8": (-128, 128)}
_ACTIVATIONS = {
    "relax.sigmoid": lambda x: 1 / (1 + np.exp(-x.astype(np.float64))),
    "relax.tanh": np.tanh,
    "relax.exp": np.exp,
    "relax.nn.relu": lambda x: np.maximum(x, 0),
}


def _is_scalar(expr) -> bool:
    dims = static_dims(expr)
    return dims is not None and int(np.prod(dims)) == 1


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
