"""The Stages rule: kernels of several reductions (Winograd convolutions: input transform,
batched products, inverse transform), each tiled as Contraction or SpatialReduction would,
or, for a reduction weighted by constant tables, with its (output, step) pairs unrolled."""

from __future__ import annotations

import math

from tvm import s_tir
from tvm.target import Target

from .contraction import _contraction_stage, Contraction
from .primitives import (_has_if_then_else, _is_spatial, _maybe_parallel, _out_dtype, _pow2_divisor,
                         _region_vars, _static, _uses, _vectorize_innermost, _work, vector_lanes)
from .reductions import _schedule_reductions
from .rule import _reductions, _Rule
from .spatial_reduction import _tile_spatial_reduction, _vector_axis

# Unrolled (output, step) pairs at most, per vector, of a reduction weighted by tables (see
# _tile_table_reduction): Winograd F(4x4, 3x3)'s input transform has 36 x 36.
_TABLE_UNROLL_MAX = 2048


def _tile_table_reduction(sch: s_tir.Schedule, func, target: Target, info):
    """A reduction of few steps weighted by tables computed from indices alone (Winograd's
    transforms: each of a tile's 6 x 6 outputs a sum over its 6 x 6 inputs weighted by entries
    of B, or A): the tables inlined, the outputs' axes that index them and the reduction
    unrolled, so that each weight is a constant of the code and its zeros drop out (676 of the
    input transform's 1296 products remain, 324 of the inverse's 576); the output's innermost
    axis vectorized, the other axes fused and run in parallel. A spatial producer read only
    here is not written whole first: the input's padding is computed per tile, its window of
    vectors into a local buffer, which the unrolled products read with no bounds test (tested
    at each of them, the simplifier took most of the build); any other is computed as it is
    read.
    Returns (the parallel loop, the lanes, the first reduction loop), or None where the block
    does not fit."""
    stmt = sch.get(info.block_rv)
    tables = [p for p in sch.get_producers(info.block_rv)
              if _is_spatial(sch, p) and not sch.get(p).reads]
    table_buffers = [sch.get(t).writes[0].source for t in tables]
    indexing = set()
    for region in stmt.reads:
        if any(region.source.same_as(b) for b in table_buffers):
            for variables in _region_vars(region):
                indexing |= variables
    found = _vector_axis(sch, info, func) if tables else None
    if found is None or found[1]:
        return None
    axis = found[0]
    lanes = vector_lanes(target, _out_dtype(sch, info.block_rv))
    extent = _static(info.iters[axis].dom)
    width = _pow2_divisor(extent, lanes)
    reduce = [it.loop_rv for it in info.iters if it.kind == "R"]
    unrolled = [it for n, it in enumerate(info.iters)
                if it.kind == "S" and n != axis and _uses(indexing, it.var)]
    steps = [_static(it.dom) for it in info.iters if it.kind == "R" or it in unrolled]
    if width < 2 or not reduce or None in steps or math.prod(steps) > _TABLE_UNROLL_MAX \
            or any(it.kind not in "SR" for it in info.iters):
        return None
    for table in tables:
        sch.compute_inline(table)
    paddings = []
    for producer in sch.get_producers(info.block_rv):
        if _is_spatial(sch, producer) and len(sch.get_consumers(producer)) == 1:
            if _has_if_then_else(sch.get(producer)):
                paddings.append(producer)
            else:
                sch.compute_inline(producer)
    spatial = [it.loop_rv for n, it in enumerate(info.iters)
               if it.kind == "S" and n != axis and it not in unrolled]
    if width < extent:
        outer, vector = sch.split(info.iters[axis].loop_rv, factors=[None, width])
        spatial.append(outer)
    else:
        vector = info.iters[axis].loop_rv
    inner = [it.loop_rv for it in unrolled] + reduce
    sch.reorder(*spatial, *inner, vector)
    work = _work(sch, [*spatial, *inner, vector])
    for loop in inner:
        sch.unroll(loop)
    sch.vectorize(vector)
    if not spatial:
        for padding in paddings:
            sch.compute_inline(padding)
        return None, width, reduce[0]
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    _maybe_parallel(sch, fused, work, target)
    for padding in paddings:
        sch.compute_at(padding, fused)
        sch.set_scope(padding, 0, "local")
        _vectorize_innermost(sch, padding, width)
    return fused, width, reduce[0]


class Stages(_Rule):
    """Several reductions, each a multiply-accumulate or a reduction vectorized along its
    output (Winograd convolutions), each scheduled as those rules do at the top level."""

    def schedule(self, sch, func, target):
        reductions = _reductions(sch)
        if reductions is None or len(reductions) < 2:
            return False
        return _schedule_reductions(sch, func, target, (
            _tile_table_reduction, _contraction_stage(Contraction.max_rows, Contraction.pack),
            _tile_spatial_reduction))
