"""Graph rewrites around convolutions for CPU builds, made after their layouts are chosen
(targets.cpu.layouts) and before their kernels are fused; each keeps the graph's results exact.

- split_concat_convs: a convolution of a channel concatenation becomes a sum of convolutions
  of its parts; pool_concat_parts: a pool of one, a concatenation of the parts' pools.
- pad_conv_channels: output channels padded to a multiple of the vector lanes (MetaSchedule
  tiles only by exact divisors), the result sliced back.
- winograd_convs: a 3x3 stride-1 convolution by constant weights computes as Winograd's
  F(4x4, 3x3), or F(2x2, 3x3) on maps too small for enough 4x4 tiles.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import tvm
from tvm import relax, te, topi

# TVM makes its Winograd matrices with these two (Cook-Toom, at interpolation points chosen for
# accuracy); its public winograd_transform_matrices returns them only as TE constants, and the
# weights are transformed here in the graph, which needs their numbers.
from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

from ..relax_rewrites import op_name, rewrite_functions, static_dims

_CONV2D = "relax.nn.conv2d"


def _constant_derived(expr, lookup) -> bool:
    """Whether ``expr`` is made of constants only (weights in a new layout are permute_dims of
    a constant, which FoldConstant folds later); ``lookup`` gives a var's bound value."""
    if isinstance(expr, tvm.ir.expr.Constant):
        return True
    if isinstance(expr, relax.Tuple):
        return all(_constant_derived(field, lookup) for field in expr.fields)
    if isinstance(expr, relax.Var):
        bound = lookup(expr)
        return op_name(bound) is not None and all(_constant_derived(a, lookup) for a in bound.args)
    return not isinstance(expr, relax.Call)  # an op's integers, shapes and strings


def _conv_with_constant_weight(call, lookup) -> bool:
    return (op_name(call) == _CONV2D and call.attrs.groups == 1
            and _constant_derived(call.args[1], lookup) and static_dims(call.args[1]) is not None)


def _concats_read_only_by(func: relax.Function, reader) -> set:
    """Concatenations (of static shapes) that only calls accepted by ``reader(call, var,
    lookup)`` read."""
    found = set()
    for block in func.body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            continue
        values = {binding.var: binding.value for binding in block.bindings}
        for var, users in relax.analysis.udchain(block).items():
            value = values.get(var)
            if (op_name(value) == "relax.concat" and isinstance(var, relax.DataflowVar)
                    and isinstance(value.args[0], relax.Tuple) and users
                    and all(static_dims(part) is not None for part in value.args[0].fields)
                    and all(reader(values.get(user), var, values.get) for user in users)):
                found.add(var)
    return found


def _conv_of_concat(call, var, lookup) -> bool:
    """A convolution with constant weights reading ``var`` (a concatenation) as its data,
    concatenated along its channel axis, whose result is smaller than the concatenation: each
    part but the first reads the sum so far and writes it again, which costs more than the
    concatenation where the result is larger (squeezenet's classifier: 1000 channels of 512)."""
    if not (_conv_with_constant_weight(call, lookup) and call.args[0].same_as(var)
            and call.attrs.data_layout.index("C") == lookup(var).attrs.axis):
        return False
    extra_parts = len(lookup(var).args[0].fields) - 1
    return np.prod(static_dims(call)) * extra_parts < np.prod(static_dims(var))


_POOLS = ("relax.nn.max_pool2d", "relax.nn.avg_pool2d")


def _pool_of_concat(call, var, lookup) -> bool:
    """A pool of ``var`` (a concatenation along channels: pools take each channel alone)."""
    return (op_name(call) in _POOLS and call.attrs.layout.index("C") == lookup(var).attrs.axis)


@relax.expr_functor.mutator
class _ConcatReaders(relax.expr_functor.PyExprMutator):
    """Rewrites each call of ``ops`` whose data is one of ``concats`` as
    ``rewrite(builder, call, parts)`` makes it from the concatenation's parts."""

    def __init__(self, mod, ops: tuple, concats: set, rewrite):
        super().__init__(mod)
        self.ops, self.concats, self.rewrite = ops, concats, rewrite

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if op_name(call) not in self.ops or call.args[0] not in self.concats:
            return call
        parts = self.lookup_binding(call.args[0]).args[0].fields
        return self.rewrite(self.builder_, call, parts)


def _conv_per_part(builder, call: relax.Call, parts) -> relax.Expr:
    """The sum of each part's convolution with its slice of the weights."""
    in_axis = call.attrs.kernel_layout.index("I")
    total, offset = None, 0
    for index, part in enumerate(parts):
        channels = static_dims(part)[call.attrs.data_layout.index("C")]
        weight = builder.emit(relax.op.strided_slice(
            call.args[1], axes=[in_axis], begin=[offset], end=[offset + channels]))
        offset += channels
        conv = builder.emit(relax.Call(call.op, [part, weight], call.attrs))
        # Each part's convolution adds the sum so far: FuseOps puts that add in its kernel.
        total = conv if total is None else relax.op.add(conv, total)
        if 0 < index < len(parts) - 1:
            total = builder.emit(total)
    return total


def _pool_per_part(builder, call: relax.Call, parts) -> relax.Expr:
    """The concatenation of each part's pool."""
    pooled = [builder.emit(relax.Call(call.op, [part], call.attrs)) for part in parts]
    return relax.op.concat(pooled, axis=call.attrs.out_layout.index("C"))


@relax.expr_functor.mutator
class _PadConvChannels(relax.expr_functor.PyExprMutator):
    def __init__(self, mod, vector_bits: int):
        super().__init__(mod)
        self.vector_bits = vector_bits

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        if op_name(call) != _CONV2D or static_dims(call.args[1]) is None or \
                not _constant_derived(call.args[1], self.lookup_binding):
            return call
        weight = call.args[1]
        dims = static_dims(weight)
        o_axis = call.attrs.kernel_layout.index("O")
        groups = int(call.attrs.groups)
        channels, dtype = dims[o_axis] // groups, str(weight.ty.dtype)  # a group's outputs
        # The vectors are the results': 8-bit products accumulate in int32 vectors.
        vector_dtype = str(call.ty.dtype) if str(call.ty.dtype).startswith("int") else dtype
        lanes = self.vector_bits // tvm.runtime.DataType(vector_dtype).bits
        padded = -(-channels // lanes) * lanes
        if groups == 1:
            # Padding a few channels to whole vectors pays; doubling 8 channels' work does not.
            worth = (padded - channels) * 8 <= channels
        else:
            # A group's outputs are its vectors' width: ShuffleNet's groups of 34 made 2-lane
            # vectors, padded to 48 they make 16-lane ones for 1.4 times the work. Not a
            # depthwise convolution's (one input channel a group: SpatialReduction's).
            worth = (channels & -channels) < lanes and (padded - channels) * 2 <= channels \
                and dims[call.attrs.kernel_layout.index("I")] > 1
        if padded == channels or not worth:
            return call
        grouped = [*dims[:o_axis], groups, channels, *dims[o_axis + 1:]]
        zeros = list(grouped)
        zeros[o_axis + 1] = padded - channels
        weight = relax.op.concat([relax.op.reshape(weight, grouped),
                                  relax.const(np.zeros(zeros, dtype), dtype)], axis=o_axis + 1)
        dims[o_axis] = groups * padded
        weight = self.builder_.emit(relax.op.reshape(weight, dims))
        conv = self.builder_.emit(relax.Call(call.op, [call.args[0], weight], call.attrs))
        out_axis = (call.attrs.out_layout or call.attrs.data_layout).index("C")
        out = static_dims(conv)
        parts = self.builder_.emit(relax.op.reshape(
            conv, [*out[:out_axis], groups, padded, *out[out_axis + 1:]]))
        kept = relax.op.strided_slice(parts, axes=[out_axis + 1], begin=[0], end=[channels])
        return relax.op.reshape(kept, static_dims(call))


# The output tile sides Winograd computes in, tried largest first, each with the fewest channels
# it takes: F(4x4, 3x3) saves 4 times the multiplications, F(2x2, 3x3) 2.25 times.
# Where the transforms cost more than the multiplications they save, a convolution stays direct:
# narrow ones, those whose transformed tiles spill the caches, and those with too few tiles to
# share each transformed weight, (tile + 2)^2 / 9 times the 3x3 one (docs/cpu-codegen.md).
WINOGRAD_TILINGS = ((4, 32), (2, 128))  # (output tile side, fewest channels in and out)
WINOGRAD_MIN_TILES = 16
WINOGRAD_MAX_TILE_BYTES = 8 << 20


@functools.cache  # Cook-Toom's rational arithmetic is slow: once a tile size
def _winograd_matrices(tile: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A (alpha x tile), B (alpha x alpha) and G (alpha x 3) of F(tile x tile, 3 x 3), alpha =
    tile + 2, in float32."""
    points = _interpolation_points(tile + 3 - 2)
    matrices = tuple(m.astype("float32") for m in _cook_toom_convolution(points, tile, 3))
    for matrix in matrices:
        matrix.flags.writeable = False  # shared by every caller
    return matrices


def _tile_transform(tiles: te.Tensor, matrix: te.Tensor, stage: str) -> te.Tensor:
    """matrix^T t matrix for each tile t of ``tiles`` (its two leading axes; the others are the
    tile and the channel), scheduled by MetaSchedule's rule for that Winograd ``stage``."""
    size, side = (int(d) for d in matrix.shape)
    r_a, r_b = te.reduce_axis((0, size), "r_a"), te.reduce_axis((0, size), "r_b")
    return te.compute(
        (side, side, *tiles.shape[2:]),
        lambda i, j, p, c: te.sum(tiles[r_a, r_b, p, c] * matrix[r_a, i] * matrix[r_b, j],
                                  axis=[r_a, r_b]),
        name=stage, attrs={"schedule_rule": f"conv2d_nhwc_winograd_{stage}"})


def _winograd_conv_nhwc(data: te.Tensor, weight_pack: te.Tensor, padding) -> te.Tensor:
    """The convolution of NHWC ``data`` with ``weight_pack`` (alpha, alpha, O, I): the weights
    transformed as G w G^T for F(alpha - 2 x alpha - 2, 3 x 3). Its stages carry the names and
    schedule rules MetaSchedule's Winograd rules take (as topi.nn.conv2d_winograd_nhwc, which
    transforms the weights in the kernel at every run). The weights are a constant, which
    fused_kernels marks layout-free for prepacking like any kernel's."""
    batch, height, width, _ = (int(d) for d in data.shape)
    alpha, _, out_channels, in_channels = (int(d) for d in weight_pack.shape)
    m = alpha - 2
    a, b = (topi.utils.const_matrix(matrix, name)
            for matrix, name in zip(_winograd_matrices(m)[:2], "AB"))
    top, left, bottom, right = padding
    out_height, out_width = height + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = -(-out_height // m), -(-out_width // m)
    tiles = batch * tiles_h * tiles_w
    data_pad = topi.nn.pad(
        data, (0, top, left, 0),
        (0, tiles_h * m + 2 - height - top, tiles_w * m + 2 - width - left, 0),
        name="data_pad", attrs={"schedule_rule": "None"})
    input_tile = te.compute(
        (alpha, alpha, tiles, in_channels),
        lambda eps, nu, p, ci: data_pad[p // (tiles_h * tiles_w),
                                        (p // tiles_w) % tiles_h * m + eps,
                                        p % tiles_w * m + nu, ci],
        name="input_tile", attrs={"schedule_rule": "None"})
    data_pack = _tile_transform(input_tile, b, "data_pack")
    ci = te.reduce_axis((0, in_channels), "ci")
    bgemm = te.compute(
        (alpha, alpha, tiles, out_channels),
        lambda eps, nu, p, co: te.sum(data_pack[eps, nu, p, ci] * weight_pack[eps, nu, co, ci],
                                      axis=[ci]),
        name="bgemm", attrs={"meta_schedule.write_cache_level": [2]})
    inverse = _tile_transform(bgemm, a, "inverse")
    return te.compute(
        (batch, out_height, out_width, out_channels),
        lambda n, h, w, co: inverse[h % m, w % m,
                                    n * tiles_h * tiles_w + h // m * tiles_w + w // m, co],
        name="conv2d_winograd")


def winograd_tile(call, lookup) -> int | None:
    """The output tile side a float32 3x3 convolution of stride 1 with constant weights
    computes by Winograd in, in whatever layout it is (the rewrite takes it in NHWC): the
    largest of WINOGRAD_TILINGS whose transforms cost less than the multiplications they save;
    None where it stays direct. ``lookup`` gives a var's bound value."""
    if not _conv_with_constant_weight(call, lookup) or static_dims(call) is None:
        return None
    attrs = call.attrs
    weight = dict(zip(attrs.kernel_layout, static_dims(call.args[1])))
    output = dict(zip(attrs.out_layout or attrs.data_layout, static_dims(call)))
    if not ([int(s) for s in attrs.strides] == [1, 1]
            and [int(d) for d in attrs.dilation] == [1, 1] and (weight["H"], weight["W"]) == (3, 3)
            and str(call.args[0].ty.dtype) == str(call.args[1].ty.dtype) == "float32"
            and str(attrs.out_dtype or "float32") == "float32"):
        return None
    for tile, min_channels in WINOGRAD_TILINGS:
        tiles = output["N"] * -(-output["H"] // tile) * -(-output["W"] // tile)
        tile_bytes = (tile + 2) ** 2 * tiles * max(weight["O"], weight["I"]) * 4
        if (min(weight["O"], weight["I"]) >= min_channels and WINOGRAD_MIN_TILES <= tiles
                and tile_bytes <= WINOGRAD_MAX_TILE_BYTES):
            return tile
    return None


def _multiply_adds(call: relax.Call) -> int:
    """A convolution's or a matmul's multiply-adds (0 for other calls and unknown shapes)."""
    output = static_dims(call)
    if output is None or op_name(call) not in (_CONV2D, "relax.matmul"):
        return 0
    if op_name(call) == _CONV2D:
        weight = static_dims(call.args[1])
        per_output = weight and math.prod(weight) // weight[call.attrs.kernel_layout.index("O")]
    else:
        per_output = (static_dims(call.args[0]) or [0])[-1]
    return math.prod(output) * (per_output or 0)


def _multiply_add_share(func: relax.Function, counted) -> float:
    """The share of ``func``'s multiply-adds (of its convolutions and matmuls) in the calls
    ``counted(call, lookup)`` holds true of; 0.0 where it has none."""
    values = {binding.var: binding.value for block in func.body.blocks
              for binding in block.bindings}
    total = in_counted = 0
    for value in values.values():
        if isinstance(value, relax.Call):
            count = _multiply_adds(value)
            total += count
            if count and counted(value, values.get):
                in_counted += count
    return in_counted / total if total else 0.0


def winograd_share(func: relax.Function) -> float:
    """The share of ``func``'s multiply-adds (of its convolutions and matmuls) in the
    convolutions that winograd_convs computes by Winograd; 0.0 where it has none."""
    return _multiply_add_share(func, lambda call, lookup: winograd_tile(call, lookup) is not None)


def matmul_share(func: relax.Function) -> float:
    """The share of ``func``'s multiply-adds (of its convolutions and matmuls) in matmuls;
    0.0 where it has none."""
    return _multiply_add_share(func, lambda call, _lookup: op_name(call) == "relax.matmul")


def integer_share(func: relax.Function) -> float:
    """The share of ``func``'s multiply-adds (of its convolutions and matmuls) in those that
    accumulate integers (8-bit operands: relay_bridge.integer_products); 0.0 where it has
    none."""
    return _multiply_add_share(func, lambda call, _lookup: str(call.ty.dtype).startswith("int"))


@relax.expr_functor.mutator
class _WinogradConvs(relax.expr_functor.PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        # (data dims, weight dims, padding) -> the kernel call made for them: convolutions of
        # one shape share the kernel, made once (TVM's te.create_prim_func is slow).
        self.kernels: dict[tuple, relax.Call] = {}

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        attrs = getattr(call, "attrs", None)
        nhwc = (op_name(call) == _CONV2D and (attrs.data_layout, attrs.kernel_layout)
                == ("NHWC", "OHWI") and (attrs.out_layout or "NHWC") == "NHWC")
        tile = winograd_tile(call, self.lookup_binding) if nhwc else None
        if tile is None:
            return call
        _, _, g = _winograd_matrices(tile)
        # G w G^T over each (O, I) as one product with kron(G, G): FoldConstant makes it a
        # constant, so runs never transform the weights.
        out_channels, _, _, in_channels = static_dims(call.args[1])
        taps = relax.op.reshape(relax.op.permute_dims(call.args[1], [1, 2, 0, 3]),
                                [9, out_channels * in_channels])
        packed = relax.op.reshape(relax.op.matmul(relax.const(np.kron(g, g)), taps),
                                  [tile + 2, tile + 2, out_channels, in_channels])
        weight_pack = self.builder_.emit(packed)
        padding = [int(p) for p in call.attrs.padding]
        key = (tuple(static_dims(call.args[0])), (out_channels, in_channels), tuple(padding))
        made = self.kernels.get(key)
        if made is not None:
            return relax.call_tir(made.args[0], [call.args[0], weight_pack], made.ty)
        made = self.kernels[key] = self.builder_.call_te(
            _winograd_conv_nhwc, call.args[0], weight_pack, padding=padding,
            primfunc_name_hint="conv2d_winograd")
        return made


@tvm.transform.module_pass(opt_level=0, name="WinogradConvs")
def winograd_convs(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return rewrite_functions(mod, lambda m, _f: _WinogradConvs(m))


@tvm.transform.module_pass(opt_level=0, name="PoolConcatParts")
def pool_concat_parts(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return rewrite_functions(mod, lambda m, f: _ConcatReaders(
        m, _POOLS, _concats_read_only_by(f, _pool_of_concat), _pool_per_part))


@tvm.transform.module_pass(opt_level=0, name="SplitConcatConvs")
def split_concat_convs(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    return rewrite_functions(mod, lambda m, f: _ConcatReaders(
        m, (_CONV2D,), _concats_read_only_by(f, _conv_of_concat), _conv_per_part))


def pad_conv_channels(vector_bits: int) -> tvm.transform.Pass:
    @tvm.transform.module_pass(opt_level=0, name="PadConvChannels")
    def pad(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, lambda m, _f: _PadConvChannels(m, vector_bits))

    return pad


def conv_rewrites(target: tvm.target.Target, before_winograd: tuple | list = ()) -> list:
    """The rewrites, channels padded to ``target``'s vector width; ``before_winograd`` are
    rewrites that take convolutions Winograd's would otherwise (targets.cpu.amx's)."""
    with target:
        vector_bits = tvm.target.codegen.llvm_get_vector_width(target)
    return [pool_concat_parts, split_concat_convs, pad_conv_channels(vector_bits),
            *before_winograd, winograd_convs]
