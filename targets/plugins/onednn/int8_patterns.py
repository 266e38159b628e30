"""What oneDNN takes of a graph's int8 products: the convolutions and matmuls that
relay_bridge.integer_products makes of 8-bit operands (an 8-bit source by constant s8
weights, accumulated in int32), each computed by oneDNN's int8 primitive with the zero
point's correction, the scales, bias, ReLU and quantize after it (int8_epilogue.py).

Which products it takes depends on the CPU class oneDNN reaches (isa.onednn_isa): with a dot
product instruction accumulating in 32 bits (VNNI, AMX) every one; without (AVX2, AVX-512
without VNNI) oneDNN multiplies u8 by s8 pairs into 16 bits (vpmaddubsw), which saturates
unless the source is u8 and the weights keep 7 bits (|w| <= 64: 255 * 128 < 2^15); the others
stay on TVM's exact kernel.

Its regions are a codegen of their own (composites ``onednn_int8.*``, int8_source_writer.py),
so that MergeCompositeFunctions never merges one into a float32 region.
"""

from __future__ import annotations

import logging

import numpy as np
import tvm
from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl.pattern import is_const, is_op, wildcard

from ...cpu.conv_rewrites import _multiply_add_share, integer_share
from ...cpu.layouts import layout_passes
from ...specs import CPU_LAYOUTS
from .. import PluginPattern
from . import int8_epilogue, int8_impl
from .int8_layouts import transposes_moved
from .int8_qdq import in_eight_bits
from .isa import reaches

log = logging.getLogger(__name__)

CODEGEN = "onednn_int8"  # the composites' prefix, and relax.ext.<CODEGEN>
# oneDNN's ISAs (isa.onednn_isa) with a dot product accumulating 8-bit products in 32 bits.
DOT_PRODUCT_ISAS = ("avx2_vnni", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx")
# Without one: the largest weight magnitude whose u8 pair products fit int16 (255 * 2 * 64).
MAX_WEIGHT_WITHOUT_DOT_PRODUCT = 64
# The share of a graph's integer multiply-adds these must take for oneDNN to run the graph
# (policy.py leaves it to TVM whole otherwise).
MOST_TAKEN = 0.5
_PRODUCTS = {"conv2d": "relax.nn.conv2d", "matmul": "relax.matmul"}


def _dims(expr) -> tuple[int, ...] | None:
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    dims = ty.shape.values
    if not all(isinstance(d, int) or hasattr(d, "value") for d in dims):
        return None
    return tuple(int(d) for d in dims)


def _is_constant(expr) -> bool:
    return isinstance(expr, tvm.ir.expr.Constant)


def _dtype(expr) -> str:
    return str(expr.ty.dtype) if isinstance(expr.ty, relax.TensorType) else ""


def why_not_taken(isa: str, src_dtype: str, weights: np.ndarray) -> str | None:
    """Why oneDNN's int8 kernels on ``isa`` would not compute a product of a ``src_dtype``
    source by ``weights`` (s8) exactly, or None where they would."""
    if isa in DOT_PRODUCT_ISAS:
        return None
    if not reaches(isa, "avx2"):
        return f"oneDNN reaches {isa} here, where it has only reference int8 code"
    if src_dtype != "uint8":
        return (f"an s8 source on {isa} (no 32-bit dot product: oneDNN halves the weights, "
                f"which is not exact)")
    largest = int(np.abs(weights.astype(np.int64)).max(initial=0))
    if largest > MAX_WEIGHT_WITHOUT_DOT_PRODUCT:
        return (f"weights up to {largest} on {isa} (u8 x s8 pairs saturate 16 bits above "
                f"{MAX_WEIGHT_WITHOUT_DOT_PRODUCT}: quantize with reduce_range)")
    return None


def product_fits(call: relax.Call, weights) -> bool:
    """Whether ``call`` is a product oneDNN's int8 primitives compute (shapes, layouts,
    dtypes), ``weights`` its constant right operand; the CPU class aside."""
    src, dst = call.args[0], call
    src_dims, weights_dims, dst_dims = _dims(src), _dims(weights), _dims(dst)
    if (src_dims is None or weights_dims is None or dst_dims is None
            or _dtype(src) not in ("uint8", "int8") or _dtype(weights) != "int8"
            or _dtype(dst) != "int32"):
        return False
    if call.op.name == _PRODUCTS["conv2d"]:
        attrs = call.attrs
        layouts = (attrs.data_layout, attrs.kernel_layout, attrs.out_layout or attrs.data_layout)
        return layouts in (("NCHW", "OIHW", "NCHW"), ("NHWC", "OHWI", "NHWC")) and len(src_dims) == 4
    return len(weights_dims) == 2 and 2 <= len(src_dims) <= 5


def _nchw(dims):
    """NHWC (or OHWI) dims in NCHW's (OIHW's) order."""
    return (dims[0], dims[3], dims[1], dims[2])


def primitive_of(call: relax.Call, pad: relax.Call | None = None) -> dict:
    """The oneDNN primitive a product (product_fits) becomes: ``conv``, whether
    ``channels_last``, the ``src``, ``weights`` and ``dst`` dims as oneDNN names them (NCHW and
    OIHW whatever the layout, grouped weights (G, O/G, I/G, H, W); a matmul's (..., M, K) by
    (K, N)), and a convolution's ``strides``, ``dilates`` (from 0), ``pad_l``, ``pad_r``, the
    convolution's source being what ``pad`` (a spatial padding, int8_qdq.py) pads where given."""
    src, weights, dst = _dims(call.args[0]), _dims(call.args[1]), _dims(call)
    if call.op.name != _PRODUCTS["conv2d"]:
        return {"conv": False, "channels_last": False, "src": src, "weights": weights, "dst": dst}
    attrs = call.attrs
    channels_last = attrs.data_layout == "NHWC"
    top, left, bottom, right = (int(p) for p in attrs.padding)
    if pad is not None:
        src, widths = _dims(pad.args[0]), [int(w) for w in pad.attrs.pad_width]
        rows, columns = (2, 4) if channels_last else (4, 6)  # the spatial axes' widths
        top, bottom = top + widths[rows], bottom + widths[rows + 1]
        left, right = left + widths[columns], right + widths[columns + 1]
    if channels_last:
        src, weights, dst = _nchw(src), _nchw(weights), _nchw(dst)
    groups = int(attrs.groups)
    if groups > 1:  # the same bytes
        weights = (groups, weights[0] // groups, *weights[1:])
    return {"conv": True, "channels_last": channels_last, "src": src, "weights": weights,
            "dst": dst, "strides": tuple(int(s) for s in attrs.strides),
            "dilates": tuple(int(d) - 1 for d in attrs.dilation), "pad_l": (top, left),
            "pad_r": (bottom, right)}


def reference_code(call: relax.Call, pad: relax.Call | None = None,
                   epilogue: int8_impl.Epilogue = int8_impl.Epilogue()) -> str | None:
    """Where oneDNN would compute ``call`` (its source padded by ``pad``, ``epilogue`` fused)
    by its reference code here: what it would run (int8_impl); else None."""
    p = primitive_of(call, pad)
    src_dtype = _dtype(call.args[0])
    if p["conv"]:
        found = int8_impl.conv_implementation(src_dtype, p["src"], p["weights"], p["dst"],
                                              p["strides"], p["dilates"], p["pad_l"],
                                              p["pad_r"], epilogue)
    else:
        rows = int(np.prod(p["src"][:-1]))
        found = int8_impl.matmul_implementation(src_dtype, rows, *p["weights"], epilogue)
    return (found or "no implementation") if int8_impl.is_reference(found) else None


def _why_left(call: relax.Call, weights, isa: str, annotated=None) -> str | None:
    """Why oneDNN leaves ``call`` (a product of ``weights``; what else its match took
    ``annotated``, int8_epilogue.py) to TVM here, None where it takes it."""
    annotated = annotated or {}
    if not _is_constant(weights) or not product_fits(call, weights):
        return "its weights are not a constant s8 tensor"
    why = why_not_taken(isa, _dtype(call.args[0]), weights.value.numpy())
    if why is None and "scale" in annotated:
        why = int8_epilogue.why_not_fused(annotated, call)
    if why is None and "pad" in annotated and not int8_epilogue.padding_fused(annotated):
        why = "its padding is not by the source's zero point"
    if why is None and (found := reference_code(call, annotated.get("pad"),
                                                int8_epilogue.described(annotated))) is not None:
        why = f"oneDNN would run it by its reference code ({found})"
    return why


def _check(isa: str):
    def check(context) -> bool:
        annotated = context.annotated_expr
        call, weights = annotated["root"], annotated["weights"]
        if has_leaking_intermediate_variables(context):
            return False
        why = _why_left(call, weights, isa, annotated)
        if why is not None and why.startswith("oneDNN would"):
            log.info("the oneDNN plugin leaves an int8 %s of %s to TVM: %s",
                     call.op.name.rsplit(".", 1)[-1], _dims(call.args[0]), why)
        return why is None
    return check


def _product_patterns(kind: str, isa: str) -> list[PluginPattern]:
    """The product alone (its int32 result) and with each epilogue oneDNN computes
    (int8_epilogue.py), longest first; a convolution's with the padding before it too."""
    found = []
    sources = [is_op("relax.nn.pad")(wildcard()), wildcard()] if kind == "conv2d" else [wildcard()]
    for source in sources:
        weights = is_const()
        product = is_op(_PRODUCTS[kind])(source, weights)
        parts = {"root": product, "weights": weights, **(
            {"pad": source} if source is not sources[-1] else {})}
        found += [PluginPattern(f"{CODEGEN}.{kind}", chain, {**parts, **notes}, _check(isa))
                  for chain, notes in int8_epilogue.chains(product)]
        found.append(PluginPattern(f"{CODEGEN}.{kind}", product, parts, _check(isa)))
    return found


def patterns(kinds, isa: str) -> list[PluginPattern]:
    """The int8 products of the op kinds ``kinds`` (the onednn.ops item's) that oneDNN's
    kernels on ``isa`` compute exactly, with the ops after them that its attributes compute
    (int8_source_writer.register gives them their codegen)."""
    return [p for kind in _PRODUCTS if kind in kinds for p in _product_patterns(kind, isa)]


def prepare(mod: tvm.IRModule, kinds, isa: str) -> tvm.IRModule | None:
    """``mod`` made ready for oneDNN's int8 primitives where they take most of its integer
    products, else None. Its aliases go (a pattern matches through bindings of calls only),
    and an int8 CNN's convolutions go to NHWC: oneDNN's int8 primitives read and write only
    NHWC (in NCHW it takes its reference code), and TVM's code between them follows the
    layout, computing on 8 bits where QDQ's float round trips allow (int8_qdq.py), so no
    tensor is reordered between them. Its float32 convolutions are then TVM's (the float32
    patterns take NCHW)."""
    products = []
    relax.analysis.post_order_visit(mod["main"], lambda e: products.append(e.op.name) if (
        isinstance(e, relax.Call) and getattr(e.op, "name", "") in _PRODUCTS.values()
        and _dtype(e) == "int32") else None)
    if not products or taken_share(mod["main"], isa)[0] < MOST_TAKEN:
        return None
    mod = relax.transform.CanonicalizeBindings()(mod)
    if "conv2d" not in kinds or _PRODUCTS["conv2d"] not in products:
        return mod
    return in_eight_bits(transposes_moved(
        tvm.transform.Sequential(layout_passes(CPU_LAYOUTS))(mod)))


def taken_share(func: relax.Function, isa: str) -> tuple[float, str | None]:
    """(the share of ``func``'s integer multiply-adds that oneDNN's int8 kernels on ``isa``
    take, why one of those left is left or None)."""
    left = []

    def taken(call, lookup) -> bool:
        if not (_dtype(call) == "int32" and getattr(call.op, "name", "") in _PRODUCTS.values()):
            return False
        weights = call.args[1]
        while isinstance(weights, relax.Var) and lookup(weights) is not None:
            weights = lookup(weights)
        why = _why_left(call, weights, isa)
        left.extend([why] if why else [])
        return why is None

    share = integer_share(func)
    return (_multiply_add_share(func, taken) / share if share else 0.0), next(iter(left), None)
