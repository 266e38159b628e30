"""An int8 graph's transposes moved past its per-tensor quantizes: ConvertLayout knows no
layout for relax.quantize and relax.dequantize, so after it every NHWC convolution's result
goes back to NCHW for the quantize that follows and to NHWC again for the next convolution.
A transpose moved after the elementwise ops that follow it (a per-tensor quantize or
dequantize, a cast, an activation, a reduction keeping its dims, an op of two tensors
transposed alike or of a scalar) meets the
one back and both go: the activations stay NHWC from one convolution to the next."""

from __future__ import annotations

import tvm
from tvm import relax

from ...relax_rewrites import is_scalar, op_name, rewrite_functions

_UNARY = ("relax.astype", "relax.clip", "relax.nn.relu", "relax.sigmoid", "relax.tanh",
          "relax.exp", "relax.nn.silu", "relax.nn.gelu", "relax.negative", "relax.abs")
_QUANTIZE = ("relax.quantize", "relax.dequantize")
_REDUCTIONS = ("relax.mean", "relax.sum", "relax.max", "relax.min")  # kept dims: a global pool
_BINARY = ("relax.add", "relax.subtract", "relax.multiply", "relax.maximum", "relax.minimum")


def _axes(call) -> list[int] | None:
    if op_name(call) != "relax.permute_dims" or call.attrs.axes is None:
        return None
    return [int(a) for a in call.attrs.axes]


@relax.expr_functor.mutator
class _TransposesMoved(relax.PyExprMutator):
    def _transposed(self, expr):
        """(what ``expr`` transposes, the axes) where it is a permute_dims, else None."""
        bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        axes = _axes(bound) if bound is not None else None
        return None if axes is None else (bound.args[0], axes)

    def visit_call_(self, call):
        call = self.visit_expr_post_order(call)
        name = op_name(call)
        if name == "relax.where":
            return self._where(call)
        first = self._transposed(call.args[0]) if call.args else None
        if first is None:
            return call
        inner, axes = first
        if name == "relax.permute_dims":  # a transpose undoing another: neither
            return inner if [axes[a] for a in _axes(call)] == list(range(len(axes))) else call
        if name in _QUANTIZE and all(is_scalar(a) for a in call.args[1:]) or name in _UNARY:
            args = [inner, *call.args[1:]]
        elif name == "relax.nn.pad" and call.attrs.pad_mode == "constant":
            return self._padded(call, inner, axes)
        elif name in _REDUCTIONS and call.attrs.keepdims and call.attrs.axis is not None:
            reduced = [axes[int(a) % len(axes)] for a in call.attrs.axis]
            moved = self.builder_.emit(getattr(relax.op, name.removeprefix("relax."))(
                inner, reduced, keepdims=True))
            return relax.op.permute_dims(moved, axes)
        elif name in _BINARY:
            other = self._transposed(call.args[1])
            if other is not None and other[1] == axes:
                args = [inner, other[0]]
            elif is_scalar(call.args[1]):
                args = [inner, call.args[1]]
            else:
                return call
        else:
            return call
        moved = self.builder_.emit(relax.Call(call.op, args, call.attrs, call.ty_args))
        return relax.op.permute_dims(moved, axes)


    def _where(self, call):
        """where(c, permute_dims(x, axes), f) as permute_dims(where(c', x, f')), c and f
        transposed back where they are not scalars (constants: folded)."""
        transposed = self._transposed(call.args[1])
        if transposed is None:
            return call
        inner, axes = transposed
        back = [axes.index(a) for a in range(len(axes))]
        operands = []
        for operand in (call.args[0], call.args[2]):
            if is_scalar(operand):
                operands.append(operand)
            elif operand.ty.ndim == len(axes):
                operands.append(self.builder_.emit(relax.op.permute_dims(operand, back)))
            else:
                return call
        chosen = self.builder_.emit(relax.op.where(operands[0], inner, operands[1]))
        return relax.op.permute_dims(chosen, axes)

    def _padded(self, call, inner, axes):
        """pad(permute_dims(x, axes)) as permute_dims(pad(x)), the widths permuted back."""
        widths = [int(w) for w in call.attrs.pad_width]
        moved = [0] * len(widths)
        for axis, source in enumerate(axes):  # the result's axis ``axis`` is x's ``source``
            moved[2 * source:2 * source + 2] = widths[2 * axis:2 * axis + 2]
        padded = self.builder_.emit(relax.op.nn.pad(inner, moved, "constant",
                                                    float(call.attrs.pad_value)))
        return relax.op.permute_dims(padded, axes)


def transposes_moved(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with its transposes moved past elementwise ops (see the module's doc)."""
    mod = rewrite_functions(mod, lambda m, _f: _TransposesMoved(m))
    return relax.transform.DeadCodeElimination()(mod)
