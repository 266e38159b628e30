"""What oneDNN takes of a graph: the patterns of its regions (convolutions and matmuls with
their elementwise ops as post-ops, softmax, layer norm, LRN, pooling, concatenation, the
elementwise ops and transposes left over), each with the checks of what oneDNN can run, the
graph's preparation for them, and the onednn.ops item choosing among the kinds of op."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl.pattern import is_const, is_op, is_tuple, wildcard

from ...relax_rewrites import op_name, rewrite_functions
from ...specs import host_cpu_flags
from .. import PREPARED_ITEMS_ATTR, PluginPattern
from .int8_patterns import patterns as int8_patterns
from .int8_patterns import prepare as int8_prepare
from .int8_source_writer import register as register_int8_codegen
from .isa import onednn_isa
from .items import ITEMS, OP_KINDS, check_item  # noqa: F401  (the patterns read the items)


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
# The item prepare sets on a graph whose int8 products oneDNN takes (int8_patterns.prepare),
# without which no int8 pattern is tried: of its float32 ops only these kinds go to oneDNN;
# its pools, elementwise ops and concatenations, between a dequantize and a quantize, run
# faster as TVM's code fused with them, in NHWC, than as float32 regions that transpose to NCHW.
INT8_GRAPH = "onednn.int8_graph"
INT8_GRAPH_KINDS = ("conv2d", "matmul", "softmax", "layer_norm")


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


# Without AVX-512, oneDNN runs a grouped (not depthwise) convolution with fewer input channels
# a group than AVX2's 8 floats by its gemm-based convolution, tens of times slower than TVM's
# (ShuffleNet's first grouped 1x1 one, 6 a group; docs/onednn.md).
_AVX2_CHANNEL_BLOCK = 8


def _gemm_based_in_onednn(conv) -> bool:
    groups, in_channels = int(conv.attrs.groups), int(_shape(conv.args[0])[1])
    depthwise = groups == in_channels == int(_shape(conv)[1])
    return (groups > 1 and not depthwise and in_channels // groups < _AVX2_CHANNEL_BLOCK
            and "avx512f" not in host_cpu_flags())


def _conv2d_ok(context) -> bool:
    conv = context.annotated_expr["root_op"]
    attrs = conv.attrs
    output_shape = _shape(conv)
    return (_plain_ok(context) and output_shape is not None
            and _shape(conv.args[0]) is not None and _is_constant(conv.args[1])
            and _shape(conv.args[1]) is not None
            and (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NCHW", "OIHW", "NCHW")
            and attrs.out_dtype in ("", "float32")
            and not _gemm_based_in_onednn(conv)
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
    oneDNN's layout."""

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
    where FuseOpsByPattern looks (a graph of a single op is built without one). An int8
    graph's convolutions first go to NHWC (int8_patterns.prepare), and its float32 ops stay
    TVM's, fused with the quantizes around them (the INT8_GRAPH item)."""
    prepared = int8_prepare(mod, items.get("onednn.ops", OP_KINDS), onednn_isa())
    if prepared is not None:
        mod = prepared.with_attr(PREPARED_ITEMS_ATTR, {INT8_GRAPH: "1"})
    if "conv2d" in items.get("onednn.ops", OP_KINDS):
        mod = rewrite_functions(mod, lambda m, _f: _ChannelScales(m))
    return relax.transform.ConvertToDataflow(min_size=1)(mod)


def patterns(items) -> list[PluginPattern]:
    """Longest first: FuseOpsByPattern gives a binding to the first pattern that takes it.
    Only the op kinds the onednn.ops item names, when it is set."""
    kinds = items.get("onednn.ops", OP_KINDS)
    if INT8_GRAPH in items:
        kinds = [kind for kind in kinds if kind in INT8_GRAPH_KINDS]
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
    if INT8_GRAPH not in items:  # no int8 product for oneDNN: its patterns would only cost
        return taken               # a walk of the graph each
    register_int8_codegen()
    return taken + int8_patterns(kinds, onednn_isa())
