"""What an int8 product's region takes of the ops after it (int8_patterns.py), as oneDNN's
attributes: relay_bridge.integer_products writes each product of 8-bit operands as

    product(x, w) [- astype(z_x) * sums(w)] -> float32 -> * scale [+ bias] [relu] [quantize]

and oneDNN computes the same with z_x as the source's zero point (its padding counted as
z_x, as the sums' windows do), ``scale`` as weights scales (per output channel) or, where it
is a run-time scale times constant ones (dynamic quantization), source and weights scales,
``bias`` as the primitive's, ReLU as a post-op and the quantize's scale and zero point as the
result's, which is then u8/s8: activations stay 8-bit from one product to the next."""

from __future__ import annotations

import itertools

import numpy as np
import tvm
from tvm import relax
from tvm.relax.dpl.pattern import is_const, is_op, wildcard

from ...relax_rewrites import is_scalar, static_dims
from .int8_impl import Epilogue

EIGHT_BITS = ("uint8", "int8")


def _is(name: str):
    return is_op(f"relax.{name}")


def chains(product):
    """(pattern, annotations) of every epilogue after ``product`` (a pattern), longest first;
    the annotations name the parts why_not_fused and described read."""
    found = []
    for correction, bias, relu, quantize in itertools.product((True, False), repeat=4):
        notes = {}
        value = product
        if correction:
            notes["zero"], notes["sums"] = zero, sums = wildcard(), is_const()
            sums = _is("multiply")(_is("astype")(zero), sums)
            value = _is("subtract")(value, sums | _is("permute_dims")(sums))
        value = _is("astype")(value)
        notes["scale"] = scale = is_const() | _is("multiply")(wildcard(), is_const())
        value = notes["scaled"] = _is("multiply")(value, scale)
        if bias:
            notes["bias"] = bias_value = is_const()
            value = _is("add")(value, bias_value)
        if relu:
            value = notes["relu"] = _is("nn.relu")(value)
        if quantize:
            notes["dst_scale"], notes["dst_zero"] = is_const(), is_const()
            value = notes["quantize"] = _is("quantize")(value, notes["dst_scale"],
                                                         notes["dst_zero"])
        found.append((correction + bias + relu + quantize, value, notes))
    return [(value, notes) for _, value, notes in sorted(found, key=lambda f: -f[0])]


def _dtype(expr) -> str:
    return str(expr.ty.dtype) if isinstance(expr.ty, relax.TensorType) else ""


def channel_axis(call: relax.Call) -> int:
    """The axis of a product's result that its weights' output channels index."""
    if call.op.name == "relax.nn.conv2d" and call.attrs.data_layout == "NCHW":
        return 1
    return -1


def per_channel(expr, product: relax.Call) -> str | None:
    """"one" where ``expr`` (float32) holds one value, "channel" where it holds one per output
    channel of ``product`` laid along its channel axis, else None."""
    dims, out = static_dims(expr), static_dims(product)
    if dims is None or out is None or _dtype(expr) != "float32" or len(dims) > len(out):
        return None
    size = int(np.prod(dims))
    if size == 1:
        return "one"
    axis = channel_axis(product) % len(out)
    padded = [1] * (len(out) - len(dims)) + dims
    expected = [out[axis] if a == axis else 1 for a in range(len(out))]
    return "channel" if padded == expected else None


def why_not_fused(annotated, product: relax.Call) -> str | None:
    """Why oneDNN's attributes cannot compute a match of chains() (``annotated``: its
    annotated exprs), None where they can."""
    zero = annotated.get("zero")
    if zero is not None and (_dtype(zero) not in (*EIGHT_BITS, "int32") or not is_scalar(zero)):
        return "the source's zero point is not one integer"
    if zero is not None and not _zero_point_sums(annotated["sums"], product,
                                                 annotated["weights"]):
        return "what multiplies its zero point is not its weights' sums"
    scale = annotated["scale"]
    factors = scale.args if isinstance(scale, relax.Call) else [scale]
    kinds = [per_channel(f, product) for f in factors]
    if None in kinds or kinds.count("channel") > 1:
        return "its scale is not one per output channel"
    if "bias" in annotated and per_channel(annotated["bias"], product) != "channel":
        return "its bias is not one per output channel"
    quantize = annotated.get("quantize")
    if quantize is not None and (
            _dtype(quantize) not in EIGHT_BITS
            or not all(is_scalar(a) for a in quantize.args[1:])):
        return "its quantize is not to 8 bits by one scale and zero point"
    result = quantize if quantize is not None else annotated["scaled"]
    if static_dims(result) != static_dims(product):
        return "its operands broadcast the product's shape"
    return None


def _zero_point_sums(sums, product: relax.Call, weights) -> bool:
    """Whether ``sums`` (a constant) is what oneDNN subtracts for a source zero point of 1:
    per output channel (and, for a padded convolution, position), the sum of the weights that
    meet the source rather than the padding."""
    found, w = sums.value.numpy().astype(np.int64), weights.value.numpy().astype(np.int64)
    if product.op.name == "relax.matmul":
        return found.shape[-1:] == w.shape[1:] and np.array_equal(found.reshape(-1), w.sum(0))
    attrs = product.attrs
    if attrs.kernel_layout == "OHWI":
        w = w.transpose(0, 3, 1, 2)
    taps = w.sum(axis=1)  # (O, KH, KW)
    spatial = slice(1, 3) if attrs.data_layout == "NHWC" else slice(2, 4)
    size, out = static_dims(product.args[0])[spatial], static_dims(product)[spatial]
    top, left, bottom, right = (int(p) for p in attrs.padding)
    inside = np.pad(np.ones(size, np.int64), ((top, bottom), (left, right)))
    (sh, sw), (dh, dw) = ((int(v) for v in attrs.strides), (int(v) for v in attrs.dilation))
    expected = np.zeros((taps.shape[0], *out), np.int64)
    for kh in range(taps.shape[1]):
        for kw in range(taps.shape[2]):
            window = inside[kh * dh:kh * dh + (out[0] - 1) * sh + 1:sh,
                            kw * dw:kw * dw + (out[1] - 1) * sw + 1:sw]
            expected += taps[:, kh, kw, None, None] * window
    if found.size == taps.shape[0]:  # one a channel: every window meets the source whole
        return bool((expected == found.reshape(-1, 1, 1)).all())
    return found.size == expected.size and np.array_equal(found.reshape(expected.shape), expected)


def described(annotated) -> Epilogue:
    """The epilogue (int8_impl.Epilogue) a match of chains() fuses (``annotated``: its
    annotated exprs; none for the product alone)."""
    if "scale" not in annotated:
        return Epilogue()
    product, scale = annotated["root"], annotated["scale"]
    factors = scale.args if isinstance(scale, relax.Call) else [scale]
    quantize = annotated.get("quantize")
    return Epilogue(src_zero="zero" in annotated, src_scale=len(factors) == 2,
                    weights_scale="channel" if any(per_channel(f, product) == "channel"
                                                   for f in factors) else "one",
                    bias="bias" in annotated, relu="relu" in annotated,
                    dst=_dtype(quantize) if quantize is not None else "float32")


def padding_fused(annotated) -> bool:
    """Whether a convolution's padding (int8_qdq.py) is the source's zero point along its
    spatial axes, which oneDNN counts as the padding: a constant-mode pad by the constant
    zero point (0 without one)."""
    pad, zero = annotated["pad"], annotated.get("zero")
    widths = [int(p) for p in pad.attrs.pad_width]
    spatial = (2, 3) if annotated["root"].attrs.data_layout == "NCHW" else (1, 2)
    if pad.attrs.pad_mode != "constant" or any(
            widths[2 * a] or widths[2 * a + 1] for a in range(len(widths) // 2) if a not in spatial):
        return False
    if zero is None:
        return float(pad.attrs.pad_value) == 0.0
    value = zero.value.numpy() if isinstance(zero, tvm.ir.expr.Constant) else None
    return value is not None and value.size == 1 and float(value.reshape(())) == float(
        pad.attrs.pad_value)


def _parameter(step, source) -> int:
    """The region parameter a composite call's argument ``source`` is."""
    kind, index = source
    if kind != "input" or step.inputs[index][0] != "param":
        raise ValueError(f"{step.composite}: an operand that is no region parameter ({source})")
    return step.inputs[index][1]


def spec_fields(step, params) -> dict[str, str]:
    """int8_region.h's epilogue fields of a region's single ``step`` (a match of chains()),
    its ``params`` the region's parameters."""
    fields = {}
    first = product_index(step)
    product, widened = step.calls[first], _widened(step)
    for call, sources in zip(step.calls, step.arguments):
        name = call.op.name.removeprefix("relax.")
        if name == "astype" and _dtype(call) == "int32":
            fields["src_zero"] = _parameter(step, sources[0])
        elif name == "multiply" and widened in sources:
            (scale,) = [s for s in sources if s != widened]
            fields.update(_scales(step, scale, params, product))
        elif name == "add":
            fields["bias"] = _parameter(step, next(s for s in sources if s[0] == "input"))
        elif name == "nn.relu":
            fields["relu"] = "true"
        elif name == "quantize":
            fields["dst_scale"] = _parameter(step, sources[1])
            fields["dst_zero"] = _parameter(step, sources[2])
            fields["dst_type"] = "Int8Spec::kU8" if _dtype(call) == "uint8" else "Int8Spec::kS8"
    fields.setdefault("dst_type", "Int8Spec::kF32")
    return {k: str(v) for k, v in fields.items()}


def _scales(step, scale, params, product) -> dict:
    """The fields of the scale ``scale`` (a call's source): a parameter (the weights'
    scales), or an earlier multiply of a run-time scale by constant ones."""
    if scale[0] == "input":
        factors = [_parameter(step, scale)]
    else:
        factors = [_parameter(step, s) for s in step.arguments[scale[1]]]
    per = [per_channel(params[f], product) for f in factors]
    weights = per.index("channel") if "channel" in per else len(factors) - 1
    fields = {"weights_scale": factors[weights],
              "weights_scale_per_channel": str(per[weights] == "channel").lower()}
    if len(factors) == 2:
        fields["src_scale"] = factors[1 - weights]
    return fields


_PRODUCTS = ("relax.nn.conv2d", "relax.matmul")


def product_index(step) -> int:
    """Which of a step's calls is its product (calls come in the graph's order: a padding,
    or the multiply of a run-time scale, may come before it)."""
    return next(i for i, c in enumerate(step.calls) if c.op.name in _PRODUCTS)


def padding_index(step) -> int | None:
    """Which of a step's calls is the padding of its convolution's source, if any."""
    return next((i for i, c in enumerate(step.calls) if c.op.name == "relax.nn.pad"), None)


def _widened(step) -> tuple[str, int]:
    """The source of the product's conversion to float32 (a ("call", j))."""
    index = next(i for i, c in enumerate(step.calls)
                 if c.op.name == "relax.astype" and _dtype(c) == "float32")
    return ("call", index)
