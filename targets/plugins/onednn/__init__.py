"""The oneDNN vendor plugin: Intel's deep-learning kernels behind the ODLA device INTEL_DNNL.

It takes float32 NCHW convolutions (grouped, depthwise, dilated, any padding) and matmuls of
any rank (batch axes broadcast; the right operand constant and packed once, or computed, as
attention's; transposed or not), each with up to five elementwise ops fused in as post-ops
(bias, batch norm, residual add, scaling, ReLU, GELU, sigmoid, tanh, swish, clamps); softmax and
log-softmax on any axis; layer normalization over the last axis (as the bridge lowers it, and
as exporters below opset 17 write it); max and average pooling; and concatenation along
channels (without it, the concats joining the
branches of squeezenet's fire modules and inception's blocks would cut the graph into many
regions, with layout reorders at every cut). Each region MergeCompositeFunctions makes becomes
a table of steps (targets/onednn/region.h) and one C++ function calling targets/onednn/
runtime.cc, which builds the primitives and repacked weights on the first call and reuses them;
intermediates stay in oneDNN's blocked layouts (see runtime.cc).
What it does not take runs as TVM's code in the same module.

The library is oneDNN 3.2 built with GNU OpenMP, from PyPI, part of odla-tvm's install on x86-64
Linux (the DEFAULT device uses it there).
"""

from __future__ import annotations

import os
import sys
from importlib import resources

import tvm
from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl.pattern import is_const, is_op, is_tuple, wildcard

from ...cpu.conv_rewrites import matmul_share, winograd_share
from ...cpu.layouts import op_name, rewrite_functions
from .. import PluginPattern, PluginUnavailable, VendorPlugin, composite_steps, static_library

# oneDNN's OpenMP threads wait for the next region spinning about 0.1 ms (libgomp counts some
# 100000 spins a millisecond), then asleep, unless the user chose a policy. Asleep at once
# (OMP_WAIT_POLICY=PASSIVE), every region woke them: MobileNetV2 8.5 ms in the bench's turns,
# 3.5 ms so; ResNet-50 on 2 cores two other processes keep busy 88 ms, 63 ms so, 72 ms with
# libgomp's default 3 ms spin, which takes the cores from TVM's pool running the ops between
# regions (2-core Xeon). libgomp reads this when it loads, with the first model library that
# needs it. (Until TVM stopped importing torch, toolchain.load_tvm, oneDNN ran on torch's
# libgomp, loaded before any of this was set.)
if "OMP_WAIT_POLICY" not in os.environ:
    os.environ.setdefault("GOMP_SPINCOUNT", "10000")
# And TVM's workers sleep as soon as their kernel ends in a process running oneDNN's regions
# (PLUGIN.pool_spin): they yield-spin 300000 times by default, which on 2 cores halved the
# speed of the oneDNN region that came next on their core, for many runs in a row (DistilBERT
# 45 or 100 ms by turns; 49 ms steadily with no spin). On a 2-core AMD EPYC, DEFAULT with no
# spin against 10,000, fresh processes in turns: BERT-base 108.6 / 109.5 against 114.4 / 117.4
# ms, ResNet-50 38.6 / 37.1 against 39.2 / 39.1, DistilBERT 55.8-59.2 against 59.8-61.5. A
# process running TVM's code alone keeps targets.runtime's spin, which its back-to-back kernels
# want (GPT-2 left to TVM by DEFAULT: 53-58 ms so, 57-62 with no spin).
ONEDNN_POOL_SPIN = 0

CALLS_FUNCTION = "odla_onednn_calls"  # exported: how many regions oneDNN has run in the module
PREFIX = sys.prefix  # where pip puts the onednn wheels' lib/ and include/
INSTALL_HINT = ("pip install onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 "
                "(odla-tvm's own install brings them on x86-64 Linux)")


def library_dir() -> str:
    return os.path.join(PREFIX, "lib")


def include_dir() -> str:
    return os.path.join(PREFIX, "include")


def check_available() -> None:
    missing = [path for path in (os.path.join(include_dir(), "dnnl.hpp"),
                                 os.path.join(library_dir(), "libdnnl.so"))
               if not os.path.exists(path)]
    if missing:
        raise PluginUnavailable(f"oneDNN is not installed ({', '.join(missing)} missing); "
                                f"{INSTALL_HINT}")


def link_options() -> list[str]:
    # libgomp: the generated code sets OpenMP's thread count, which oneDNN's threads follow.
    # export_library puts these before the objects that need them, where a linker that drops
    # libraries not yet needed (--as-needed) would drop them: hence --no-as-needed.
    return [f"-L{library_dir()}", f"-Wl,-rpath,{library_dir()}", "-Wl,--no-as-needed",
            "-ldnnl", "-lgomp"]


# ---- patterns ------------------------------------------------------------------------------

def _shape(expr) -> tuple[int, ...] | None:
    """The static shape of a float32 tensor expression, else None."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.dtype != "float32" or ty.shape is None:
        return None
    dims = ty.shape.values
    if not all(isinstance(d, int) or hasattr(d, "value") for d in dims):
        return None
    return tuple(int(d) for d in dims)


def _is_per_channel(operand_shape, output_shape, axis: int = 1) -> bool:
    """Whether an operand broadcast against ``output_shape`` varies along ``axis`` only: a
    per-channel bias or batch-norm scale, (C, 1, 1) or (1, C, 1, 1) for NCHW, (N,) or
    (1, 1, N) for a matmul's (..., M, N) and axis -1."""
    if operand_shape is None or len(operand_shape) > len(output_shape):
        return False
    axis %= len(output_shape)
    trailing = (output_shape[axis],) + (1,) * (len(output_shape) - 1 - axis)
    lead = len(operand_shape) - len(trailing)
    return lead >= 0 and operand_shape[lead:] == trailing and all(d == 1 for d in operand_shape[:lead])


def _is_constant(expr) -> bool:
    """Weights must be constants: the region repacks them once, keyed on their address."""
    return isinstance(expr, tvm.ir.expr.Constant)


MAX_RANK = 5  # region.h's Shape holds 5 dims


def _within_rank(shape) -> bool:
    """A static shape the region's steps can hold (a 7-D log softmax, as a 5-D cross-entropy
    loss makes, failed to compile: too many dims for Shape)."""
    return shape is not None and 1 <= len(shape) <= MAX_RANK


def _plain_ok(context) -> bool:
    """What every pattern needs: float32 static shapes, nothing inside used outside."""
    return (_shape(context.matched_expr) is not None
            and not has_leaking_intermediate_variables(context))


# Elementwise ops fused after a convolution or matmul as oneDNN post-ops: binary ops by their
# relax name (the other operand broadcast to the output), unary ones as eltwise algorithms.
BINARY_POST_OPS = {"relax.add": "binary_add", "relax.multiply": "binary_mul",
                   "relax.subtract": "binary_sub", "relax.divide": "binary_div",
                   "relax.maximum": "binary_max", "relax.minimum": "binary_min"}
UNARY_POST_OPS = {"relax.nn.relu": "eltwise_relu", "relax.nn.gelu": "eltwise_gelu_erf",
                  "relax.nn.gelu_tanh": "eltwise_gelu_tanh", "relax.sigmoid": "eltwise_logistic",
                  "relax.tanh": "eltwise_tanh"}
COMMUTATIVE = ("relax.add", "relax.multiply", "relax.maximum", "relax.minimum")
MAX_POST_OPS = 5  # a conv's bias, batch-norm scale and shift, residual add, ReLU


def _broadcasts_to(shape, output_shape) -> bool:
    """Whether ``shape`` broadcasts to ``output_shape`` without changing it (NumPy's rule)."""
    if shape is None or len(shape) > len(output_shape):
        return False
    return all(d in (1, o) for d, o in zip(reversed(shape), reversed(output_shape)))


def _post_ops_ok(context, output_shape) -> bool:
    """Each fused elementwise op takes the chain before it and, for a binary op, an operand
    that broadcasts to the output; subtract and divide only with the chain on the left."""
    bound = context.value_to_bound_var
    previous = context.annotated_expr["root_op"]
    for index in range(MAX_POST_OPS):
        call = context.annotated_expr.get(f"post{index}")
        if call is None:
            break
        name = call.op.name
        if name in BINARY_POST_OPS:
            chain = bound.get(previous)
            first, second = call.args
            if first.same_as(chain) and second.same_as(chain):
                return False  # chain * chain: no operand from outside for the post-op
            if first.same_as(chain):
                other = second
            elif name in COMMUTATIVE and second.same_as(chain):
                other = first
            else:
                return False
            if not _broadcasts_to(_shape(other), output_shape):
                return False
        previous = call
    return True


def _conv2d_ok(context) -> bool:
    conv = context.annotated_expr["root_op"]
    attrs = conv.attrs
    output_shape = _shape(conv)
    return (_plain_ok(context) and output_shape is not None
            and _shape(conv.args[0]) is not None and _is_constant(conv.args[1])
            and _shape(conv.args[1]) is not None
            and (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NCHW", "OIHW", "NCHW")
            and attrs.out_dtype in ("", "float32")
            and _post_ops_ok(context, output_shape))


MAX_MATMUL_RANK = 5  # oneDNN's matmul: up to 3 batch axes


def _matmul_ok(context) -> bool:
    """Any rank up to 5, batch axes broadcast; the right operand constant (packed once) or
    computed (as attention's Q.K^T and P.V), its last two axes swapped or not."""
    matmul = context.annotated_expr["root_op"]
    output_shape = _shape(matmul)
    src_shape = _shape(matmul.args[0])
    weights_shape = _shape(context.annotated_expr["weights"])
    transpose = context.annotated_expr.get("transpose")
    if output_shape is None or src_shape is None or weights_shape is None:
        return False
    rank = len(output_shape)
    if transpose is not None:
        axes = list(range(len(weights_shape))) if transpose.attrs.axes is None \
            else [int(a) for a in transpose.attrs.axes]
        swap = list(range(len(weights_shape) - 2)) + [len(weights_shape) - 1, len(weights_shape) - 2]
        if axes != swap and not (transpose.attrs.axes is None and len(weights_shape) == 2):
            return False
    return (_plain_ok(context) and 2 <= rank <= MAX_MATMUL_RANK
            and 2 <= len(src_shape) and 2 <= len(weights_shape)
            and matmul.attrs.out_dtype in ("", "float32")
            and _post_ops_ok(context, output_shape))


def _pool2d_ok(context) -> bool:
    pool = context.annotated_expr["root"]
    attrs = pool.attrs
    shape = _shape(pool.args[0])
    # TVM divides a ceil-mode window hanging past the padding by what it covers; oneDNN cannot.
    averages_past_padding = pool.op.name == "relax.nn.avg_pool2d" and attrs.ceil_mode \
        and attrs.count_include_pad
    return (_plain_ok(context) and shape is not None and len(shape) == 4
            and (attrs.layout, attrs.out_layout) == ("NCHW", "NCHW")
            and all(int(d) == 1 for d in attrs.dilation) and not averages_past_padding)


def _concat_ok(context) -> bool:
    concat = context.annotated_expr["root"]
    shapes = [_shape(field) for field in concat.args[0].fields]
    rank = len(shapes[0]) if shapes[0] is not None else 0
    axis = concat.attrs.axis  # None: flattened first
    return (_plain_ok(context) and rank == 4 and axis is not None and int(axis) % rank == 1
            and all(shape is not None and len(shape) == rank for shape in shapes))


def _post_op(chain, annotations, index: int):
    """Any one fused elementwise op after ``chain``: a binary op with another operand, a unary
    op, or swish (chain * sigmoid(chain), oneDNN's eltwise_swish)."""
    post = is_op("relax.multiply")(chain, is_op("relax.sigmoid")(chain))
    for name in BINARY_POST_OPS:
        post = post | is_op(name)(chain, wildcard())
    for name in UNARY_POST_OPS:
        post = post | is_op(name)(chain)
    annotations[f"post{index}"] = post
    return post


def _with_post_ops(name: str, root, annotations, count: int, check,
                   before_folding: bool = False) -> PluginPattern:
    annotations["root_op"] = root
    chain = root
    for index in range(count):
        chain = _post_op(chain, annotations, index)
    return PluginPattern(f"{name}_{count}", chain, annotations, check, before_folding)


def _conv2d_pattern(post_ops: int) -> PluginPattern:
    """conv2d, then ``post_ops`` elementwise ops (bias, batch norm, residual add, ReLU, ...)."""
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    return _with_post_ops("onednn.conv2d", conv, {}, post_ops, _conv2d_ok)


def _matmul_pattern(constant: bool, transposed: bool, post_ops: int) -> PluginPattern:
    """matmul, the right operand a constant (packed once) or computed, (..., N, K) transposed
    or (..., K, N) as it is, then ``post_ops`` elementwise ops."""
    weights = is_const() if constant else wildcard()
    annotations = {"weights": weights}
    right = weights
    if transposed:
        right = annotations["transpose"] = is_op("relax.permute_dims")(weights)
    matmul = is_op("relax.matmul")(wildcard(), right)
    name = "_".join(["onednn.matmul", *(["constant"] if constant else []),
                     *(["transposed"] if transposed else [])])
    # A constant's transpose is read as it is, packed once like any constant weight.
    return _with_post_ops(name, matmul, annotations, post_ops, _matmul_ok,
                          before_folding=constant and transposed)


def _binary_ok(context) -> bool:
    """An elementwise binary op of two computed float32 tensors where one has the output's
    shape (the first, for subtract and divide) and the other broadcasts to it, then post-ops.
    A constant operand (a batch norm's factors, a bias) is left to TVM's fused elementwise
    kernels or to a convolution's post-ops: standing alone in oneDNN it cut DenseNet's
    concat-batch-norm chains into 122 binary steps, with reorders and reference concats
    between them (13x onnxruntime)."""
    call = context.annotated_expr["root_op"]
    output_shape = _shape(call)
    if not _within_rank(output_shape) or not _plain_ok(context):
        return False
    if any(_is_constant(a) for a in call.args):
        return False
    first, second = (_shape(a) for a in call.args)
    full_first = first == output_shape and _broadcasts_to(second, output_shape)
    full_second = second == output_shape and _broadcasts_to(first, output_shape)
    return (full_first or (call.op.name in COMMUTATIVE and full_second)) and \
        _post_ops_ok(context, output_shape)


def _binary_pattern(op: str, post_ops: int) -> PluginPattern:
    """A binary op between two tensors (a residual add, a squeeze-excitation scale), then
    ``post_ops`` elementwise ops: it joins the regions on either side instead of cutting
    them."""
    root = is_op(op)(wildcard(), wildcard())
    return _with_post_ops(f"onednn.binary_{op.split('.')[-1]}", root, {}, post_ops, _binary_ok)


def _transpose_axes(transpose, rank: int) -> list[int]:
    axes = transpose.attrs.axes
    return list(range(rank))[::-1] if axes is None else [int(a) % rank for a in axes]


def _transpose_ok(context) -> bool:
    annotated = context.annotated_expr
    shapes = [_shape(annotated[name]) for name in ("input", "transpose", "root")]
    return (_plain_ok(context) and all(_within_rank(s) for s in shapes)
            and len(shapes[1]) >= 2 and not _is_constant(annotated["input"]))


def _transpose_pattern(reshaped_before: bool, reshaped_after: bool) -> PluginPattern:
    """A transpose of a computed tensor (ConvNeXt's NCHW <-> NHWC around its layer norms),
    with the reshapes around it (attention's heads split and merged, ShuffleNet's channel
    shuffle): one reorder, in the region of the ops around it rather than TVM kernels
    between regions. A reshape alone stays with TVM, where it is free."""
    x = wildcard()
    before = is_op("relax.reshape")(x, wildcard()) if reshaped_before else x
    transpose = is_op("relax.permute_dims")(before)
    root = is_op("relax.reshape")(transpose, wildcard()) if reshaped_after else transpose
    name = "_".join(["onednn.transpose", *(["reshaped"] if reshaped_before else []),
                     *(["reshape"] if reshaped_after else [])])
    return PluginPattern(name, root, {"input": x, "transpose": transpose, "root": root},
                         _transpose_ok)


LRN_SIZES = (3, 5, 7)  # odd windows: centred alike in ONNX and oneDNN


def _lrn_ok(context) -> bool:
    """Across channels of an NCHW map, the window padded as the bridge pads it, the factors
    scalar constants."""
    annotated = context.annotated_expr
    shape, pad = _shape(annotated["input"]), annotated["pad"]
    slices = [annotated[name] for name in sorted(annotated) if name.startswith("slice")]
    size = len(slices)
    widths = [int(w) for w in pad.attrs.pad_width]
    front = (size - 1) // 2
    # strided_slice(x, axes, begin, end): each a channel window, starting at 0 .. size-1
    windows = sorted(tuple(int(v.value) for part in s.args[1:] for v in part.fields)
                     for s in slices)
    channels = shape[1] if shape is not None and len(shape) == 4 else 0
    return (_plain_ok(context) and channels > 0
            and widths == [0, 0, front, size - 1 - front, 0, 0, 0, 0]
            and windows == [(1, k, k + channels) for k in range(size)]
            and all(_is_constant(annotated[name]) and _shape(annotated[name]) == ()
                    for name in ("alpha", "bias", "beta")))


def _lrn_pattern(size: int) -> PluginPattern:
    """LRN across channels as the bridge lowers it: x / (x^2 padded along channels, its
    ``size`` shifted slices summed, times alpha / size, plus the bias k)^beta."""
    x = wildcard()
    pad = is_op("relax.nn.pad")(is_op("relax.multiply")(x, x))
    slices = [is_op("relax.strided_slice")(pad, wildcard(), wildcard(), wildcard())
              for _ in range(size)]
    window_sum = slices[0]
    for shifted in slices[1:]:
        window_sum = is_op("relax.add")(window_sum, shifted)
    alpha, bias, beta = wildcard(), wildcard(), wildcard()
    scaled = is_op("relax.add")(is_op("relax.multiply")(window_sum, alpha), bias)
    lrn = is_op("relax.divide")(x, is_op("relax.power")(scaled, beta))
    annotations = {"input": x, "pad": pad, "alpha": alpha, "bias": bias, "beta": beta,
                   "root": lrn, **{f"slice{k}": shifted for k, shifted in enumerate(slices)}}
    return PluginPattern(f"onednn.lrn{size}", lrn, annotations, _lrn_ok)


def _unary_ok(context) -> bool:
    """A unary op of a computed tensor, then post-ops."""
    call = context.annotated_expr["root_op"]
    shape = _shape(call)
    return (_within_rank(shape) and _plain_ok(context)
            and not _is_constant(call.args[0]) and _post_ops_ok(context, shape))


def _unary_pattern(op: str, post_ops: int) -> PluginPattern:
    """A unary op standing alone (a ReLU after a concat, a GELU between reshapes), then
    ``post_ops`` elementwise ops: it joins the regions on either side instead of cutting them."""
    root = is_op(op)(wildcard())
    return _with_post_ops(f"onednn.unary_{op.split('.')[-1]}", root, {}, post_ops, _unary_ok)


def _mean_ok(context) -> bool:
    # oneDNN has no reduction that reduces nothing (a mean over axes of size 1).
    mean = context.annotated_expr["root"]
    shape = _shape(mean.args[0])
    return (_plain_ok(context) and _within_rank(shape) and bool(mean.attrs.keepdims)
            and shape != _shape(mean))


def _mean_pattern() -> PluginPattern:
    """A mean over any axes, keeping them (global average pooling, a squeeze-excitation's)."""
    mean = is_op("relax.mean")(wildcard())
    return PluginPattern("onednn.reduction_mean", mean, {"root": mean}, _mean_ok)


def _softmax_ok(context) -> bool:
    return _plain_ok(context) and _within_rank(_shape(context.annotated_expr["root"].args[0]))


def _softmax_pattern(op: str) -> PluginPattern:
    softmax = is_op(f"relax.nn.{op}")(wildcard())
    return PluginPattern(f"onednn.{op}", softmax, {"root": softmax}, _softmax_ok)


def _layer_norm_ok(context) -> bool:
    """Over the last axis only, with a scalar epsilon and per-channel scale and offset."""
    annotated = context.annotated_expr
    shape = _shape(annotated["input"])
    if not _within_rank(shape) or not _plain_ok(context):
        return False
    for mean in (annotated["mean"], annotated["variance"]):
        axes = [int(a) % len(shape) for a in mean.attrs.axis or ()]
        if axes != [len(shape) - 1] or not mean.attrs.keepdims:
            return False
    channels = shape[-1]
    affine_ok = all(_shape(annotated[name]) in ((channels,), (1,) * (len(shape) - 1) + (channels,))
                    for name in ("scale", "offset") if name in annotated)
    return affine_ok and _shape(annotated["epsilon"]) == () and _is_constant(annotated["epsilon"])


def _layer_norm_pattern(form: str, affine: str) -> PluginPattern:
    """Layer normalization over the last axis as the bridge lowers it ("rsqrt": (x - mean) *
    rsqrt(variance + eps)), or as exporters below opset 17 write it ("sqrt": (x - mean) /
    sqrt(variance + eps), the square a power of 2); then per ``affine`` a scale, an offset."""
    x, epsilon = wildcard(), wildcard()
    mean = is_op("relax.mean")(x)
    centered = is_op("relax.subtract")(x, mean)
    squared = is_op("relax.multiply")(centered, centered) if form == "rsqrt" \
        else is_op("relax.power")(centered, wildcard())
    variance = is_op("relax.mean")(squared)
    if form == "rsqrt":
        y = is_op("relax.multiply")(centered, is_op("relax.rsqrt")(is_op("relax.add")(variance, epsilon)))
    else:
        y = is_op("relax.divide")(centered, is_op("relax.sqrt")(is_op("relax.add")(variance, epsilon)))
    annotations = {"input": x, "mean": mean, "variance": variance, "epsilon": epsilon,
                   "centered": centered, "squared": squared}
    if "scale" in affine:
        annotations["scale"] = wildcard()
        y = is_op("relax.multiply")(y, annotations["scale"])
    if "offset" in affine:
        annotations["offset"] = wildcard()
        y = is_op("relax.add")(y, annotations["offset"])
    annotations["root"] = y
    return PluginPattern(f"onednn.layer_norm_{form}_{affine or 'plain'}", y, annotations,
                         _layer_norm_ok if form == "rsqrt" else _layer_norm_power_ok)


def _layer_norm_power_ok(context) -> bool:
    """The exporters' form squares by a power of exactly 2."""
    power = context.annotated_expr["squared"].args[1]
    return (_layer_norm_ok(context) and _is_constant(power) and _shape(power) == ()
            and float(power.value.numpy()) == 2.0)


def _pool2d_pattern(op: str) -> PluginPattern:
    pool = is_op(f"relax.nn.{op}")(wildcard())
    return PluginPattern(f"onednn.{op}", pool, {"root": pool}, _pool2d_ok)


def _concat_pattern(count: int) -> PluginPattern:
    """concat of ``count`` tensors: a Tuple pattern has a fixed number of fields."""
    concat = is_op("relax.concat")(is_tuple([wildcard() for _ in range(count)]))
    return PluginPattern(f"onednn.concat{count}", concat, {"root": concat}, _concat_ok)


# The widest concat taken: one pattern per count (inception's blocks join 4 branches, a
# DenseNet block more); wider ones stay with TVM.
MAX_CONCAT_INPUTS = 16


# Ops whose result no pattern takes an elementwise op after (they have no post-ops).
_NO_POST_OPS = ("relax.concat", "relax.nn.max_pool2d", "relax.nn.avg_pool2d")


@relax.expr_functor.mutator
class _ChannelScales(relax.expr_functor.PyExprMutator):
    """x * scale, with x a concatenation's or a pool's NCHW result and one constant scale per
    channel, as the same products by a depthwise 1x1 convolution: the convolution pattern then
    takes it, with the shift, ReLU and the rest as post-ops. A pre-activation batch norm
    (DenseNet's, on each concatenation) was otherwise left to TVM between regions, cutting a
    dense block into one region per layer, each reordering the whole concatenation into
    oneDNN's layout (light densenet121: 122 reorders, 5.9 ms of a 39 ms run)."""

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if op_name(call) != "relax.multiply":
            return call
        x, scale = call.args if _is_constant(call.args[1]) else call.args[::-1]
        shape = _shape(x)
        if (not _is_constant(scale) or _shape(scale) is None or shape is None
                or len(shape) != 4 or _shape(call) != shape
                or _shape(scale) not in ((1, shape[1], 1, 1), (shape[1], 1, 1))
                or not isinstance(x, relax.Var)
                or op_name(self.lookup_binding(x)) not in _NO_POST_OPS):
            return call
        weight = relax.const(scale.value.numpy().reshape(shape[1], 1, 1, 1))
        return relax.op.nn.conv2d(x, weight, groups=shape[1], out_dtype="float32")


def prepare(mod: tvm.IRModule, items) -> tvm.IRModule:
    """Channel scales after concatenations and pools as depthwise convolutions
    (_ChannelScales), where oneDNN takes convolutions; then every binding in a dataflow block,
    where FuseOpsByPattern looks (a graph of a single op is built without one)."""
    if "conv2d" in items.get("onednn.ops", OP_KINDS):
        mod = rewrite_functions(mod, lambda m, _f: _ChannelScales(m))
    return relax.transform.ConvertToDataflow(min_size=1)(mod)


OP_KINDS = ("conv2d", "matmul", "pool", "concat", "softmax", "layer_norm",
            "elementwise", "transpose", "lrn")  # what the onednn.ops item chooses among
ITEMS = {"onednn.ops": f"the kinds of op oneDNN takes, a list from {list(OP_KINDS)} (default "
                       "all); the others stay with TVM"}


def check_item(name: str, value):
    """onednn.ops: a list of op kinds from OP_KINDS."""
    kinds = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) \
        else None
    if kinds is None or not all(kind in OP_KINDS for kind in kinds):
        raise ValueError(f"expected a list of op kinds from {list(OP_KINDS)}")
    return tuple(kinds)


def patterns(items) -> list[PluginPattern]:
    """Longest first: FuseOpsByPattern gives a binding to the first pattern that takes it.
    Only the op kinds the onednn.ops item names, when it is set."""
    kinds = items.get("onednn.ops", OP_KINDS)
    taken = []
    if "conv2d" in kinds:
        taken += [_conv2d_pattern(count) for count in range(MAX_POST_OPS, -1, -1)]
    if "matmul" in kinds:
        taken += [_matmul_pattern(constant, transposed, count)
                  for count in range(MAX_POST_OPS, -1, -1)
                  for constant in (True, False) for transposed in (True, False)]
    if "layer_norm" in kinds:
        taken += [_layer_norm_pattern(form, affine) for form in ("rsqrt", "sqrt")
                  for affine in ("scale_offset", "scale", "")]
    if "softmax" in kinds:
        taken += [_softmax_pattern("softmax"), _softmax_pattern("log_softmax")]
    if "lrn" in kinds:
        taken += [_lrn_pattern(size) for size in LRN_SIZES]
    if "pool" in kinds:
        taken += [_pool2d_pattern("max_pool2d"), _pool2d_pattern("avg_pool2d")]
    if "concat" in kinds:
        taken += [_concat_pattern(count) for count in range(2, MAX_CONCAT_INPUTS + 1)]
    if "elementwise" in kinds:  # last: what the patterns above leave of these ops
        taken += [_mean_pattern()]
        taken += [_binary_pattern(op, count) for count in range(2, -1, -1)
                  for op in BINARY_POST_OPS]
        taken += [_unary_pattern(op, count) for count in range(2, -1, -1)
                  for op in UNARY_POST_OPS]
    if "transpose" in kinds:  # after the matmuls, which take their weights' transposes
        taken += [_transpose_pattern(before, after) for before in (True, False)
                  for after in (True, False)]
    return taken


# ---- codegen -------------------------------------------------------------------------------

def _list(values) -> str:
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


def _shape_init(shape) -> str:
    return f"{{{len(shape)}, {_list(shape)}}}"  # region.h's Shape


def _operand(source: tuple[str, int]) -> str:
    kind, index = source
    return f"{kind}({index})"  # region.h's param(i) / step(j)


def _pads(padding) -> tuple[tuple[int, int], tuple[int, int]]:
    """Relax's (top, left, bottom, right) as oneDNN's (begin, end) pairs."""
    top, left, bottom, right = (int(p) for p in padding)
    return (top, left), (bottom, right)


class _StepWriter:
    """One composite call as the C++ initializer of a region.h Step."""

    def __init__(self, step):
        self.step = step

    def input_of(self, call_index: int, argument: int) -> tuple[str, int]:
        kind, index = self.step.arguments[call_index][argument]
        assert kind == "input", (self.step.composite, kind)
        return self.step.inputs[index]

    def other_operand(self, call_index: int) -> tuple[tuple[str, int], relax.Expr]:
        """The operand of an elementwise call that is not the chain before it, and its expr."""
        for argument, (kind, _) in enumerate(self.step.arguments[call_index]):
            if kind == "input":
                return self.input_of(call_index, argument), \
                    self.step.calls[call_index].args[argument]
        raise ValueError(f"{self.step.composite}: call {call_index} has no outside operand")

    def is_swish(self, index: int) -> bool:
        """Whether call ``index`` (a sigmoid) and the next are chain * sigmoid(chain)."""
        calls, arguments = self.step.calls, self.step.arguments
        return (calls[index].op.name == "relax.sigmoid" and index + 1 < len(calls)
                and calls[index + 1].op.name == "relax.multiply"
                and ("call", index) in arguments[index + 1]
                and arguments[index][0] in arguments[index + 1])

    def bias_and_post_ops(self, first: int, output_shape, channel_axis: int,
                          takes_bias: bool = True, residual_sum: bool = False) -> dict[str, str]:
        """The calls from ``first`` on as the Step's bias and post-op fields: the first add of a
        per-channel operand is the bias (where the step has one); with ``residual_sum`` (a
        convolution's), the first add of a whole tensor is a sum into the output, which must
        hold it first: oneDNN sums what dst held, so a second would add the same again."""
        bias, post_ops = "none()", []
        calls = self.step.calls
        index = first
        while index < len(calls):
            op = calls[index].op.name
            if self.is_swish(index):
                post_ops.append("{PostOp::kEltwise, none(), dnnl_eltwise_swish}")
                index += 2
                continue
            index += 1
            if op in UNARY_POST_OPS:
                post_ops.append(f"{{PostOp::kEltwise, none(), dnnl_{UNARY_POST_OPS[op]}}}")
                continue
            operand, expr = self.other_operand(index - 1)
            shape = _shape(expr)
            per_channel = _is_per_channel(shape, output_shape, channel_axis)
            if op == "relax.add" and per_channel and index - 1 == first and takes_bias:
                bias = _operand(operand)
            elif op == "relax.add" and residual_sum and shape == output_shape:
                post_ops.append(f"{{PostOp::kResidual, {_operand(operand)}}}")
                residual_sum = False
            else:
                widened = (1,) * (len(output_shape) - len(shape)) + shape
                post_ops.append(f"{{PostOp::kBinary, {_operand(operand)}, "
                                f"dnnl_{BINARY_POST_OPS[op]}, {_shape_init(widened)}}}")
        if len(post_ops) > MAX_POST_OPS:
            raise ValueError(f"{self.step.composite}: {len(post_ops)} post-ops; region.h holds 8")
        return {"bias": bias, "post_op_count": str(len(post_ops)),
                "post_ops": "{" + ", ".join(post_ops) + "}"}

    def conv2d(self) -> dict[str, str]:
        conv = self.step.calls[0]
        attrs = conv.attrs
        weights = _shape(conv.args[1])
        groups = int(attrs.groups)
        if groups > 1:  # oneDNN's grouped weights: (G, O/G, I/G, H, W), the same bytes
            weights = (groups, weights[0] // groups, *weights[1:])
        pad_l, pad_r = _pads(attrs.padding)
        return {"kind": "Step::kConv", "src": _operand(self.input_of(0, 0)),
                "weights": _operand(self.input_of(0, 1)),
                "src_shape": _shape_init(_shape(conv.args[0])),
                "weights_shape": _shape_init(weights), "dst_shape": _shape_init(_shape(conv)),
                "strides": _list(attrs.strides),
                "dilates": _list(int(d) - 1 for d in attrs.dilation),
                "pad_l": _list(pad_l), "pad_r": _list(pad_r),
                **self.bias_and_post_ops(1, _shape(conv), 1, residual_sum=True)}

    def matmul(self) -> dict[str, str]:
        transposed = self.step.calls[0].op.name == "relax.permute_dims"
        first = 1 if transposed else 0
        matmul = self.step.calls[first]
        weights = self.step.calls[0].args[0] if transposed else matmul.args[1]
        return {"kind": "Step::kMatmul", "src": _operand(self.input_of(first, 0)),
                "weights": _operand(self.input_of(0, 0) if transposed else self.input_of(0, 1)),
                "weights_constant": "true" if "constant" in self.step.composite else "false",
                "weights_transposed": "true" if transposed else "false",
                "src_shape": _shape_init(_shape(matmul.args[0])),
                "weights_shape": _shape_init(_shape(weights)),
                "dst_shape": _shape_init(_shape(matmul)),
                **self.bias_and_post_ops(first + 1, _shape(matmul), len(_shape(matmul)) - 1)}

    def binary(self) -> dict[str, str]:
        """The operand of the output's shape as src, the other (broadcast) as weights."""
        call = self.step.calls[0]
        output_shape = _shape(call)
        full = 0 if _shape(call.args[0]) == output_shape else 1
        other = 1 - full
        return {"kind": "Step::kBinary", "src": _operand(self.input_of(0, full)),
                "weights": _operand(self.input_of(0, other)),
                "src_shape": _shape_init(output_shape),
                "weights_shape": _shape_init(_shape(call.args[other])),
                "dst_shape": _shape_init(output_shape),
                "algorithm": f"dnnl_{BINARY_POST_OPS[call.op.name]}",
                **self.bias_and_post_ops(1, output_shape, len(output_shape) - 1, takes_bias=False)}

    def transpose(self) -> dict[str, str]:
        """src_shape: the transpose's input (a reshape before it is a view); dst_shape: the
        step's result (after a reshape after it)."""
        calls = self.step.calls
        transpose = next(c for c in calls if c.op.name == "relax.permute_dims")
        src = _shape(transpose.args[0])
        return {"kind": "Step::kTranspose", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(src), "dst_shape": _shape_init(_shape(calls[-1])),
                "axes": _list(_transpose_axes(transpose, len(src)))}

    def lrn(self) -> dict[str, str]:
        """The calls: x*x, pad, the slices, their sum, * alpha/size, + k, ^beta, x / that."""
        calls = self.step.calls
        size = int(self.step.composite.removeprefix("onednn.lrn"))
        shape = _shape(calls[0].args[0])
        power = [c.op.name for c in calls].index("relax.power")  # after * alpha/size, + k
        return {"kind": "Step::kLrn", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(shape), "dst_shape": _shape_init(shape),
                "kernel": _list([size, size]),
                "scale": _operand(self.other_operand(power - 2)[0]),
                "shift": _operand(self.other_operand(power - 1)[0]),
                "epsilon": _operand(self.other_operand(power)[0])}

    def unary(self) -> dict[str, str]:
        call = self.step.calls[0]
        shape = _shape(call)
        return {"kind": "Step::kEltwise", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(shape), "dst_shape": _shape_init(shape),
                "algorithm": f"dnnl_{UNARY_POST_OPS[call.op.name]}",
                **self.bias_and_post_ops(1, shape, len(shape) - 1, takes_bias=False)}

    def reduction(self) -> dict[str, str]:
        mean = self.step.calls[0]
        return {"kind": "Step::kReduction", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(_shape(mean.args[0])),
                "dst_shape": _shape_init(_shape(mean)), "algorithm": "dnnl_reduction_mean"}

    def softmax(self) -> dict[str, str]:
        softmax = self.step.calls[0]
        shape = _shape(softmax)
        algorithm = "softmax_log" if softmax.op.name == "relax.nn.log_softmax" else "softmax_accurate"
        return {"kind": "Step::kSoftmax", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(shape), "dst_shape": _shape_init(shape),
                "algorithm": f"dnnl_{algorithm}",
                "axis": str(int(softmax.attrs.axis) % len(shape))}

    def layer_norm(self) -> dict[str, str]:
        calls = self.step.calls
        names = [c.op.name for c in calls]
        shape = _shape(calls[0].args[0])
        epsilon_add = names.index("relax.add")  # variance + epsilon
        normalized = names.index("relax.rsqrt" if "relax.rsqrt" in names else "relax.sqrt") + 1
        fields = {"kind": "Step::kLayerNorm", "src": _operand(self.input_of(0, 0)),
                  "src_shape": _shape_init(shape), "dst_shape": _shape_init(shape),
                  "epsilon": _operand(self.other_operand(epsilon_add)[0]),
                  "scale": "none()", "shift": "none()"}
        for index in range(normalized + 1, len(calls)):
            field = "scale" if names[index] == "relax.multiply" else "shift"
            fields[field] = _operand(self.other_operand(index)[0])
        return fields

    def pool2d(self) -> dict[str, str]:
        pool = self.step.calls[0]
        attrs = pool.attrs
        src, dst = _shape(pool.args[0]), _shape(pool)
        kernel = [int(k) for k in attrs.pool_size]
        strides = [int(s) for s in attrs.strides]
        pad_l, pad_r = _pads(attrs.padding)
        # oneDNN derives the output size rounding down: in ceil mode, pad the end so that the
        # last window TVM makes fits.
        pad_r = [max(end, (out - 1) * stride + k - size - begin) for end, out, stride, k, size, begin
                 in zip(pad_r, dst[2:], strides, kernel, src[2:], pad_l)]
        if pool.op.name == "relax.nn.max_pool2d":
            algorithm = "pooling_max"
        elif attrs.count_include_pad:
            algorithm = "pooling_avg_include_padding"
        else:
            algorithm = "pooling_avg_exclude_padding"
        return {"kind": "Step::kPool", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(src), "dst_shape": _shape_init(dst),
                "algorithm": f"dnnl_{algorithm}", "kernel": _list(kernel),
                "strides": _list(strides), "dilates": "{0, 0}", "pad_l": _list(pad_l),
                "pad_r": _list(pad_r)}

    def concat(self, sources_name: str) -> dict[str, str]:
        return {"kind": "Step::kConcat", "dst_shape": _shape_init(_shape(self.step.calls[0])),
                "sources": sources_name, "source_count": str(len(self.concat_sources()))}

    def concat_sources(self) -> list[str]:
        """The concatenated operands in order (a composite takes a repeated operand once)."""
        return [_operand(self.step.inputs[index]) for _, index in self.step.arguments[0][0]]

    def declarations(self, sources_name: str) -> list[str]:
        """What the Step's initializer points to, declared before the steps."""
        if not self.step.composite.startswith("onednn.concat"):
            return []
        return [f"static const Operand {sources_name}[] = "
                f"{{{', '.join(self.concat_sources())}}};"]

    def source(self, sources_name: str) -> str:
        kind = self.step.composite.split(".", 1)[1]
        if kind.startswith("concat"):
            fields = self.concat(sources_name)
        else:
            writer = next(w for prefix, w in (("conv2d", self.conv2d), ("matmul", self.matmul),
                                              ("layer_norm", self.layer_norm),
                                              ("softmax", self.softmax), ("log_softmax", self.softmax),
                                              ("max_pool2d", self.pool2d),
                                              ("avg_pool2d", self.pool2d), ("binary", self.binary),
                                              ("reduction", self.reduction),
                                              ("transpose", self.transpose),
                                              ("lrn", self.lrn), ("unary", self.unary))
                          if kind.startswith(prefix))
            fields = writer()
        # Designated initializers name each field; C++ wants them in declaration order.
        ordered = sorted(fields.items(), key=lambda item: _STEP_FIELDS.index(item[0]))
        return "{" + ", ".join(f".{name} = {value}" for name, value in ordered) + "}"


_STEP_FIELDS = ("kind", "src", "weights", "weights_constant", "weights_transposed", "bias",
                "src_shape", "weights_shape", "dst_shape", "algorithm", "kernel", "strides",
                "dilates", "pad_l", "pad_r", "post_op_count", "post_ops", "sources",
                "source_count", "axis", "axes", "scale", "shift", "epsilon")  # region.h's Step, in order


def _region_source(region: relax.Function) -> tuple[str, str]:
    """One region as a C++ function of its parameters then its outputs (TVM's DPS call),
    taking them packed."""
    name = str(region.attrs["global_symbol"])
    steps, results = composite_steps(region)
    if any(kind != "step" for kind, _ in results):
        raise ValueError(f"region {name} returns a parameter; patterns never make one")
    writers = [_StepWriter(step) for step in steps]
    sources = [f"{name}_sources{index}" for index in range(len(steps))]
    step_lines = ",\n    ".join(w.source(s) for w, s in zip(writers, sources))
    lines = [
        *(line for w, s in zip(writers, sources) for line in w.declarations(s)),
        f"static const Shape {name}_params[] = "
        f"{{{', '.join(_shape_init(_shape(p)) for p in region.params)}}};",
        f"static const Step {name}_steps[] = {{\n    {step_lines}}};",
        f"static const int {name}_results[] = {_list(index for _, index in results)};",
        f"static const RegionSpec {name}_spec = {{{name}_params, {len(region.params)}, "
        f"{name}_steps, {len(steps)}, {name}_results, {len(results)}}};",
        # TVM's packed-call symbol for the function named ``name`` (what the export macros make)
        f'extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_{name}(void*, const TVMFFIAny* args, '
        "int32_t num_args, TVMFFIAny*) {",
        f"  return odla_onednn_run(&{name}_spec, args, num_args);",
        "}",
    ]
    return name, "\n".join(lines)


def _source_dir() -> str:
    """targets/onednn: region.h, which generated code includes, and runtime.cc."""
    return os.fspath(resources.files("targets.plugins.onednn"))


def _region_header() -> str:
    return os.path.join(_source_dir(), "region.h")


def _runtime() -> tvm.runtime.Module:
    """runtime.cc as an object every model library with regions links: compiled once per
    machine and cached (it takes g++ seconds; the tables of a model's regions take a fraction
    of one). Its symbols are hidden but the call counter: each model library has its own."""
    source = resources.files("targets.plugins.onednn").joinpath("runtime.cc").read_text()
    return static_library(source, [CALLS_FUNCTION],
                          ["-std=c++20", "-fvisibility=hidden", "-I", include_dir(),
                           "-I", _source_dir()], headers=[_region_header()])


def codegen(regions: list[relax.Function], _items) -> list:
    names, bodies = zip(*(_region_source(r) for r in regions))
    source = "\n\n".join(['#include "region.h"', "using namespace odla_onednn;", *bodies])
    # C++20 for designated initializers (each step's fields are named); -O0: tables only.
    tables = static_library(source, list(names),
                            ["-std=c++20", "-O0", "-I", include_dir(), "-I", _source_dir()],
                            headers=[_region_header()])
    return [tables, _runtime()]


# oneDNN computes convolutions directly; TVM's own build computes 3x3 stride-1 ones by Winograd
# (targets.conv_rewrites), with 2.25-4 times fewer multiplications. Handing oneDNN all but those
# cuts the graph into regions with layout reorders at every cut (ResNet-50 38.6 -> 47.3 ms), so a
# graph with enough of its multiply-adds in them goes to TVM whole. 2-core AMD EPYC, DEFAULT with
# oneDNN against TVM whole (share in Winograd's convolutions), alternated in one process:
# ResNet-34 and ResNet-18 of scripts/export_models.py 31.2 / 22.5 ms (0.92) and 16.7 / 14.5
# (0.83); onnx's light VGG-19 186.9 / 114.6 (0.75) and Inception v2 19.6 / 18.8 (0.65). In fresh
# processes in turns, where TVM alone polls for its next kernel (VendorPlugin.pool_spin):
# ResNet-50 38.7 / 37.0 / 37.5 against 36.3 / 35.7 / 35.1 (0.37); light ZFNet-512 23.8 / 25.0
# against 16.7 / 20.3 (0.57), Inception v1 13.6 / 14.0 against 16.6 / 13.4 (0.58), SqueezeNet
# 3.6 / 5.4 against 3.8 / 3.9 (0.38), DenseNet-121 38.3 / 37.7 against 39.8 / 39.1 (0.43); light
# AlexNet (0.19), 14.5 / 14.3 against 10.3 / 12.4, stays below the line all the same.
WINOGRAD_SHARE_FOR_TVM = 0.35


# TVM's own build, its matmuls fused with the elementwise ops around them, ran transformers
# faster than oneDNN's matmuls with TVM's code between its regions. On a 2-core AMD EPYC, DEFAULT
# leaving them to TVM against INTEL_DNNL (oneDNN), fresh processes in turns: GPT-2 53.1 / 54.1
# / 53.4 against 59.7 / 65.6 / 57.2 ms, BERT-base 116.4 / 108.4 / 107.2 against 119.4 / 109.4 /
# 110.1 (share in matmuls 1.00; DistilBERT 1.00, ViT-B/16 0.99); and docs/perf.md's bench of a
# 2-core Xeon with AMX, before this rule, had BERT-base on TVM alone at 70.9 ms, on DEFAULT at
# 91.1. ConvNeXt-T (0.93) keeps oneDNN: 49.4 ms against TVM's 55.2 (odla-tvm bench, AMD EPYC).
MATMUL_SHARE_FOR_TVM = 0.95


def declines(mod: tvm.IRModule) -> str | None:
    share = winograd_share(mod["main"])
    if share >= WINOGRAD_SHARE_FOR_TVM:
        return (f"{share:.0%} of its multiply-adds are in 3x3 convolutions that TVM computes by "
                f"Winograd (oneDNN computes them directly; the line is "
                f"{WINOGRAD_SHARE_FOR_TVM:.0%})")
    share = matmul_share(mod["main"])
    if share >= MATMUL_SHARE_FOR_TVM:
        return (f"{share:.0%} of its multiply-adds are in matmuls, which TVM's build runs "
                f"faster with the ops between them (the line is {MATMUL_SHARE_FOR_TVM:.0%})")
    return None


PLUGIN = VendorPlugin(
    name="onednn",
    device_name="INTEL_DNNL",
    description="oneDNN 3.2 (Intel's deep-learning kernels): float32 convolutions and matmuls "
                "of any rank with their elementwise ops fused, softmax, layer norm, pooling, "
                "concat along channels",
    patterns=patterns,
    codegen=codegen,
    link_options=link_options,
    check_available=check_available,
    items=ITEMS,
    check_item=check_item,
    prepare=prepare,
    declines=declines,
    pool_spin=ONEDNN_POOL_SPIN,
)
