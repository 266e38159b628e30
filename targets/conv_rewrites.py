"""Graph rewrites around convolutions for tuned CPU builds, made after their layouts are chosen
(targets.layouts) and before their kernels are fused; each keeps the graph's results exact.

- split_concat_convs: a convolution of a channel concatenation becomes a sum of convolutions of
  its parts, when nothing else reads the concatenation and the result is the smaller (as a
  squeezenet fire module's squeeze convolution is). The concatenation was a kernel of its own
  that wrote every activation once more (squeezenet's fire modules: 7% of its run), and the
  sum fuses into the last part's convolution.
- pool_concat_parts: a pool of a channel concatenation becomes a concatenation of the parts'
  pools (a pool takes each channel alone), which a convolution may then split as above.
- pad_conv_channels: a convolution whose output channels are not a multiple of the vector lanes
  gets zero weights up to the next multiple, and its result is sliced back. MetaSchedule tiles
  only by exact divisors, so 1000 channels (a classifier) vectorized by 8 or 40 where 1008 takes
  16: squeezenet's last convolution as a model of its own, tuned 80 trials each, took 1.42 ms
  with 1000 channels and 1.09 ms with 1008.
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from .layouts import op_name, rewrite_functions, static_dims

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
        if op_name(call) not in self.ops or not call.args[0] in self.concats:
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
        if not _conv_with_constant_weight(call, self.lookup_binding):
            return call
        weight = call.args[1]
        dims = static_dims(weight)
        o_axis = call.attrs.kernel_layout.index("O")
        channels, dtype = dims[o_axis], str(weight.ty.dtype)
        lanes = self.vector_bits // tvm.runtime.DataType(dtype).bits
        padded = -(-channels // lanes) * lanes
        # Padding a few channels to whole vectors pays; doubling 8 channels' work does not.
        if padded == channels or (padded - channels) * 8 > channels:
            return call
        dims[o_axis] = padded - channels
        weight = self.builder_.emit(relax.op.concat(
            [weight, relax.const(np.zeros(dims, dtype), dtype)], axis=o_axis))
        conv = self.builder_.emit(relax.Call(call.op, [call.args[0], weight], call.attrs))
        out_axis = (call.attrs.out_layout or call.attrs.data_layout).index("C")
        return relax.op.strided_slice(conv, axes=[out_axis], begin=[0], end=[channels])


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


def conv_rewrites(target: tvm.target.Target) -> list:
    """The rewrites, channels padded to ``target``'s vector width."""
    with target:
        vector_bits = tvm.target.codegen.llvm_get_vector_width(target)
    return [pool_concat_parts, split_concat_convs, pad_conv_channels(vector_bits)]
