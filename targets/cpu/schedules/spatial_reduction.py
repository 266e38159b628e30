"""The SpatialReduction rule: one reduction whose output's innermost axis is also its
inputs' (pooling in NHWC, sums over outer axes, depthwise convolutions): that axis vectorized
inside the reduction loops, a few outputs of the next axis accumulated side by side, the
other output axes fused and run in parallel."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import collect_vars_used_in_prim_expr
from tvm.sym.pattern import detect_linear_equation
from tvm.target import Target

from .primitives import (_divisor, _lay_out_again, _layout_free, _maybe_parallel, _out_dtype,
                         _pow2_divisor, _region_vars, _static, _uses, _work, vector_lanes)
from .reductions import _schedule_reductions
from .rule import _reductions, _Rule

_SPATIAL_ROWS = 8  # outputs per tile of a reduction vectorized along its output (see below)
# Rows of those tiles per parallel step (see _tile_spatial_reduction).
_SPATIAL_BAND = 4


def _vector_axis(sch: s_tir.Schedule, info, func: tirx.PrimFunc):
    """For a block of one output, the position of the iterator of the output's innermost
    dimension, and the reads (index, dimension) to lay out again so that it indexes their
    innermost dimension too; None where a read uses it otherwise."""
    stmt = sch.get(info.block_rv)
    if len(stmt.writes) != 1 or not stmt.writes[0].region:
        return None
    last = stmt.writes[0].region[-1].min
    axis = next((n for n, it in enumerate(info.iters) if it.var.same_as(last)), None)
    if axis is None or info.iters[axis].kind != "S" or _static(info.iters[axis].dom) is None:
        return None
    packs = []
    for index, region in enumerate(stmt.reads):
        dims = [n for n, vs in enumerate(_region_vars(region)) if _uses(vs, last)]
        if not dims:
            continue
        if len(dims) != 1:
            return None
        start = region.region[dims[0]].min
        if dims[0] == len(region.region) - 1:
            # Innermost, with any constant stride (pools in NCHW read every other element).
            linear = detect_linear_equation(start, [last])
            if len(linear) != 2 or not isinstance(linear[0], tirx.IntImm) or \
                    _uses(collect_vars_used_in_prim_expr(linear[1]), last):
                return None
        elif start.same_as(last) and _layout_free(func, region.source):
            packs.append((index, dims[0]))
        else:
            return None
    return axis, packs


def _innermost(dim: int):
    """The index map moving dimension ``dim`` innermost (no default arguments: IndexMap takes
    every parameter for an index)."""
    return lambda *x: (*(v for n, v in enumerate(x) if n != dim), x[dim])


def _rows_axis(sch: s_tir.Schedule, info, axis: int, dim: int = -2) -> int | None:
    """The position of the spatial iterator indexing the output's dimension ``dim`` (the one
    next to its innermost, ``axis``'s, by default), alone and of static extent; None where
    there is none."""
    region = sch.get(info.block_rv).writes[0].region
    if len(region) < -dim:
        return None
    start = region[dim].min
    found = next((n for n, it in enumerate(info.iters) if it.var.same_as(start)), None)
    if found is None or found == axis or info.iters[found].kind != "S" or \
            _static(info.iters[found].dom) is None:
        return None
    return found


def _tile_spatial_reduction(sch: s_tir.Schedule, func, target: Target, info):
    """The output's innermost axis vectorized inside the reduction loops under a tile of the
    next axis, in bands of the axis before, the other spatial loops fused and run in
    parallel. Returns (the loop whose steps write their outputs back: the band's, else the
    fused loop, else None, the lanes, the first reduction loop), or None where the block does
    not fit."""
    found = _vector_axis(sch, info, func)
    if found is None:
        return None
    axis, packs = found
    main = info.block_rv
    lanes = vector_lanes(target, _out_dtype(sch, main))
    extent = _static(info.iters[axis].dom)
    width = _pow2_divisor(extent, lanes)
    reduce = [it.loop_rv for it in info.iters if it.kind == "R"]
    if width < 2 or not reduce or any(it.kind not in "SR" for it in info.iters):
        return None
    rows_axis = _rows_axis(sch, info, axis)
    for index, dim in packs:
        _lay_out_again(sch, main, index, _innermost(dim))
    loops = [it.loop_rv for it in info.iters]
    spatial = [loops[n] for n, it in enumerate(info.iters) if it.kind == "S" and n != axis]
    # A few outputs along the next axis (a row's pixels) share each weight vector loaded and
    # accumulate side by side.
    rows = _divisor(_static(info.iters[rows_axis].dom), _SPATIAL_ROWS) \
        if rows_axis is not None else 1
    tile = []
    if rows > 1:
        position = spatial.index(loops[rows_axis])
        spatial[position], row = sch.split(loops[rows_axis], factors=[None, rows])
        tile.append(row)
    # A band of such rows (image rows) per parallel step, one row of outputs after another:
    # a padding computed per step then pads (band + 2) input rows for a 3x3 window's band of
    # outputs, not 3 rows for each (see _padded_per_tile).
    band_axis = _rows_axis(sch, info, axis, -3) if rows > 1 else None
    band = []
    if band_axis is not None:
        band_rows = _divisor(_static(info.iters[band_axis].dom), _SPATIAL_BAND)
        if band_rows > 1:
            position = spatial.index(loops[band_axis])
            spatial[position], inner = sch.split(loops[band_axis], factors=[None, band_rows])
            band.append(inner)
    if width < extent:
        outer, vector = sch.split(loops[axis], factors=[None, width])
        spatial.append(outer)
    else:
        vector = loops[axis]
    sch.reorder(*spatial, *band, *reduce, *tile, vector)
    work = _work(sch, [*spatial, *band, *reduce, *tile, vector])
    for row in tile:
        sch.unroll(row)
    sch.vectorize(vector)
    fused = None
    if spatial:
        fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        _maybe_parallel(sch, fused, work, target)
    return (band[0] if band else fused), width, reduce[0]


class SpatialReduction(_Rule):
    """One reduction whose output's innermost axis is also its inputs' (pooling and channel
    reductions in NHWC, reductions over outer axes, depthwise convolutions): that axis
    vectorized inside the reduction loops, tiles of a few outputs along the next axis, the
    other output axes fused and run in parallel, the result in a local buffer and the epilogue
    computed per tile."""

    def schedule(self, sch, func, target):
        reductions = _reductions(sch)
        if reductions is None or len(reductions) != 1 or \
                _vector_axis(sch, reductions[0], func) is None:
            return False
        return _schedule_reductions(sch, func, target, (_tile_spatial_reduction,))
