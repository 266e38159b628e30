"""Ops that exporters write out in pieces, recognized once and put back as one Relax op:
GELU as torch.onnx writes it below opset 20 (erf form, x * 0.5 * (1 + erf(x / sqrt 2))) and as
GPT-2's tanh approximation (0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))), and a
zero Pad before a convolution (TensorFlow-style "same" padding, as MobileNet exports carry)
as the convolution's own padding. One op is one kernel for TVM and one post-op for a vendor
library, where five to nine ops were five to nine kernels or cut a vendor region. Layer norm
is recognized by the vendor patterns themselves, which keep the bridge's two-pass lowering of
it for TVM."""

from __future__ import annotations

import functools
import math
import operator

import tvm
from tvm import relax
from tvm.relax.dpl.pattern import is_const, is_op, wildcard

from toolchain.relax_ir import op_names

_SQRT2 = math.sqrt(2.0)
_TANH_SCALE = math.sqrt(2.0 / math.pi)


def _scalar(expr) -> float | None:
    """The value of a float scalar constant (of any rank-0 or single-element shape), else None."""
    if not isinstance(expr, tvm.ir.expr.Constant):
        return None
    data = expr.value.numpy()
    if data.size != 1 or data.dtype.kind != "f":
        return None
    return float(data.reshape(()))


def _close(value: float | None, expected: float) -> bool:
    return value is not None and abs(value - expected) <= 1e-4 * max(1.0, abs(expected))


class _Gelu:
    """One recognized form: a pattern over ``x`` and the constants it must hold."""

    def __init__(self, pattern, constants: dict, approximate: bool, x):
        self.pattern, self.constants, self.approximate, self.x = pattern, constants, approximate, x

    def rewrite(self, call: relax.Call, matches) -> relax.Expr:
        if not all(_close(_scalar(matches[p]), v) for p, v in self.constants.items()):
            return call
        x = matches[self.x]
        return relax.op.nn.gelu_tanh(x) if self.approximate else relax.op.nn.gelu(x)


def _erf_forms() -> list[_Gelu]:
    """x * (1 + erf(x / sqrt 2)) * 0.5 and (x * 0.5) * (1 + erf(x * (1 / sqrt 2))), each
    product in either order (DFPattern matches commutative ops both ways)."""
    forms = []
    for scaled_by in ("divide", "multiply"):
        x, inner, one, half = wildcard(), is_const(), is_const(), is_const()
        erf = is_op("relax.erf")(is_op(f"relax.{scaled_by}")(x, inner))
        plus_one = is_op("relax.add")(erf, one)
        inner_value = _SQRT2 if scaled_by == "divide" else 1 / _SQRT2
        constants = {inner: inner_value, one: 1.0, half: 0.5}
        halved_last = is_op("relax.multiply")(is_op("relax.multiply")(x, plus_one), half)
        halved_first = is_op("relax.multiply")(is_op("relax.multiply")(x, half), plus_one)
        forms += [_Gelu(halved_last, constants, False, x), _Gelu(halved_first, constants, False, x)]
    return forms


def _tanh_forms() -> list[_Gelu]:
    """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))."""
    x, three, cubic, scale, one, half = (wildcard(), is_const(), is_const(), is_const(),
                                         is_const(), is_const())
    inner = is_op("relax.add")(x, is_op("relax.multiply")(is_op("relax.power")(x, three), cubic))
    plus_one = is_op("relax.add")(is_op("relax.tanh")(is_op("relax.multiply")(inner, scale)), one)
    constants = {three: 3.0, cubic: 0.044715, scale: _TANH_SCALE, one: 1.0, half: 0.5}
    return [_Gelu(is_op("relax.multiply")(is_op("relax.multiply")(x, half), plus_one),
                  constants, True, x),
            _Gelu(is_op("relax.multiply")(is_op("relax.multiply")(x, plus_one), half),
                  constants, True, x)]


@functools.cache
def _forms() -> tuple[list[_Gelu], relax.dpl.DFPattern]:
    """The forms, and one pattern matching any of them: a rewrite_call pass costs about the
    same whatever its pattern, so the six forms go in one pass."""
    forms = _erf_forms() + _tanh_forms()
    return forms, functools.reduce(operator.or_, (form.pattern for form in forms))


def recognize_gelu(func: relax.Function) -> relax.Function:
    """``func`` with every float32 GELU written out elementwise as one relax.nn.gelu (or
    gelu_tanh) call; an unmatched or differently-valued chain stays as it is."""
    forms, any_form = _forms()

    def rewrite(call: relax.Call, matches) -> relax.Expr:
        # The forms differ in their ops, so a call matches one of them at most.
        form = next(f for f in forms if f.pattern in matches)
        return form.rewrite(call, matches)

    return relax.dpl.rewrite_call(any_form, rewrite, func)


def _spatial_pads(pad: relax.Call, layout: str) -> tuple[int, int, int, int] | None:
    """A zero constant pad's widths on a 2-d convolution's (top, left, bottom, right), or None
    when it pads anything else (batch, channels) or pads with another value or mode."""
    attrs = pad.attrs
    if attrs.pad_mode != "constant" or float(attrs.pad_value) != 0.0 or len(layout) != 4:
        return None
    widths = [int(w) for w in attrs.pad_width]
    height, width = layout.index("H"), layout.index("W")
    if any(widths[2 * a] or widths[2 * a + 1] for a in range(4) if a not in (height, width)):
        return None
    return (widths[2 * height], widths[2 * width], widths[2 * height + 1], widths[2 * width + 1])


def _conv_of_pad():
    x, weights = wildcard(), wildcard()
    pad = is_op("relax.nn.pad")(x)
    conv = is_op("relax.nn.conv2d")(pad, weights)

    def rewrite(call: relax.Call, matches) -> relax.Expr:
        attrs = call.attrs
        widths = _spatial_pads(matches[pad], attrs.data_layout)
        if widths is None:
            return call
        padding = [int(p) + w for p, w in zip(attrs.padding, widths)]
        return relax.op.nn.conv2d(matches[x], matches[weights], attrs.strides, padding,
                                  attrs.dilation, attrs.groups, attrs.data_layout,
                                  attrs.kernel_layout, attrs.out_layout, attrs.out_dtype)

    return conv, rewrite


def fold_pads(func: relax.Function) -> relax.Function:
    """``func`` with each zero spatial Pad feeding a 2-d convolution folded into its padding
    (a pad that other ops also read stays for them)."""
    return relax.dpl.rewrite_call(*_conv_of_pad(), func)


@relax.expr_functor.mutator
class _WeightsAsParameters(relax.expr_functor.PyExprMutator):
    """A function body's tensor constants of more than one element (weights; the patterns
    read scalars only) as new parameters: ``weights`` maps each to the constant it stands for."""

    def __init__(self):
        super().__init__()
        self.weights: dict[relax.Var, relax.Expr] = {}

    def visit_generic_const_(self, const):
        shape = getattr(const.value, "shape", None)
        if shape is None or math.prod(int(d) for d in shape) <= 1:
            return const
        var = relax.Var(f"weight{len(self.weights)}", const.ty)
        self.weights[var] = const
        return var


def rewritten_without_weights(func: relax.Function, rewrite) -> relax.Function:
    """``rewrite(func)`` (rewrite_call passes), run with the weights out of the function and
    bound back after: a rewrite_call pass hashes every constant's data, which for a model's
    weights costs most of the pass."""
    lifter = _WeightsAsParameters()
    body = lifter.visit_expr(func.body)
    if not lifter.weights:
        return rewrite(func)
    lifted = relax.Function(list(func.params) + list(lifter.weights), body, func.ret_ty,
                            func.is_pure, func.attrs)
    rewritten = rewrite(lifted)
    extra = rewritten.params[len(func.params):]
    return rewritten.bind_params(dict(zip(extra, lifter.weights.values(), strict=True)))


def recognize(mod: tvm.IRModule) -> tvm.IRModule:
    """``recognize_gelu`` and ``fold_pads`` on each Relax function of ``mod`` that has the ops
    they start from. A function without them is left as it is: rewriting rebuilds a function
    (and its bindings' order) even where nothing matches, which loop bodies with branches do
    not survive."""
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, relax.Function):
            continue
        ops = op_names(func)
        gelu = bool(ops & {"relax.erf", "relax.tanh"})
        pads = {"relax.nn.pad", "relax.nn.conv2d"} <= ops
        if gelu or pads:
            mod[gv] = rewritten_without_weights(func, functools.partial(_recognized, gelu, pads))
    return mod


def _recognized(gelu: bool, pads: bool, func: relax.Function) -> relax.Function:
    if gelu:
        func = recognize_gelu(func)
    return fold_pads(func) if pads else func
