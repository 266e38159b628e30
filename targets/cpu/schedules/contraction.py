"""The Contraction rule: one multiply-accumulate ``C[.., i, j] += A[.., i, k] * B[.., k, j]``
(matmul, batch matmul, dense, NHWC convolutions) and its elementwise epilogue, in register
tiles of a few rows of i by one to three vectors of j accumulated over every reduction step
in a local buffer, the tiles run in parallel. A constant B (weights) is laid out again when
compiling, each tile's columns for every step in a row; i and j are padded to whole tiles
where no tile divides them (TVM's pad_einsum)."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import collect_vars_used_in_prim_expr
from tvm.target import Target

from .primitives import (_lay_out_again, _layout_free, _maybe_parallel, _pow2_divisor, _PREPROC,
                         _preproc_writer, _region_vars, _static, _static_bytes, _uses, _work,
                         vector_lanes, vector_registers)
from . import pair_dot
from .reductions import _schedule_reductions
from .rule import _reductions, _Rule

# A multiply-accumulate whose B (the weights) fits in half a core's L2 cache walks its tiles of
# j innermost: each tile of rows of A is read once into L1 and its outputs are written as whole
# rows, where tiles of j outermost went over all of A and the output once per tile of j, a
# strided stream. B's larger than this stay outermost, read from L1 per tile instead of L2.
_B_INSIDE_MAX_BYTES = 512 << 10


def _loads(expr, buffer) -> bool:
    return isinstance(expr, tvm.ir.expr.TensorLoad) and expr.source.same_as(buffer)


@dataclass
class _Axes:
    """How a block is ``C[..] += A[..] * B[..]``, by positions in its iterators: ``j`` indexes
    C's innermost dimension and B (dimension ``b_dim``) but not A, ``i`` is C's innermost
    dimension that B does not read, ``outer_b`` other spatial iterators B reads (batches),
    ``outer_a`` the rest, ``reduce`` the reductions."""

    a: int
    b: int
    b_dim: int
    j: int
    i: int | None
    outer_b: list
    outer_a: list
    reduce: list
    group: int | None = None  # grouped convolutions: j's values per group (A reads its group)


def _whole_dimension(region, var) -> bool:
    """Whether ``var`` is one dimension of ``region``, alone."""
    return any(r.min.same_as(var) for r in region.region)


def _group_size(region, var, extent: int) -> int | None:
    """G where ``region`` reads ``var`` only through ``var // G`` (a grouped convolution's
    input channels), checked by writing ``var`` as q G + r: nothing may depend on r."""
    found = []
    for r in region.region:
        tvm_ffi.structural_walk(r.min, (tirx.FloorDiv, lambda d: found.append(int(d.b)) if (
            d.a.same_as(var) and isinstance(d.b, tirx.IntImm)) else None), order="post")
    for size in sorted(set(found)):
        if size <= 1 or extent % size:
            continue
        dtype = str(var.ty)
        q, rest = tirx.Var("q", dtype), tirx.Var("r", dtype)
        analyzer = tvm.sym.Analyzer()
        analyzer.bind(q, tvm.ir.Range(tirx.const(0, dtype), tirx.const(extent // size, dtype)))
        analyzer.bind(rest, tvm.ir.Range(tirx.const(0, dtype), tirx.const(size, dtype)))
        split = q * tirx.const(size, dtype) + rest
        if not any(_uses(collect_vars_used_in_prim_expr(analyzer.simplify(tvm_ffi.structural_map(
                r.min, (tirx.Var, lambda v: split if v.same_as(var) else v), order="post"))),
                rest) for r in region.region):
            return size
    return None


def _contraction_axes(sch: s_tir.Schedule, info) -> _Axes | None:
    stmt = sch.get(info.block_rv)
    if len(stmt.reads) != 2 or len(stmt.writes) != 1 or not stmt.writes[0].region:
        return None
    store = stmt.body
    if not (isinstance(store, tirx.BufferStore) and isinstance(store.value, tirx.Add)):
        return None
    value = store.value
    if _loads(value.a, store.buffer):
        product = value.b
    elif _loads(value.b, store.buffer):
        product = value.a
    else:
        return None
    while isinstance(product, tirx.Cast):
        product = product.value
    if not isinstance(product, tirx.Mul):
        return None
    iter_vars = [it.var for it in info.iters]
    j_start = stmt.writes[0].region[-1].min
    j = next((n for n, v in enumerate(iter_vars) if v.same_as(j_start)), None)
    if j is None or info.iters[j].kind != "S" or _static(info.iters[j].dom) is None:
        return None
    reads = [set().union(*_region_vars(r)) for r in stmt.reads]
    in_reads = [[_uses(vs, v) for vs in reads] for v in iter_vars]
    group = None
    if in_reads[j] == [False, True]:
        a, b = 0, 1
    elif in_reads[j] == [True, False]:
        a, b = 1, 0
    elif in_reads[j] == [True, True]:
        # A grouped convolution: A reads the group of j only (its input channels).
        whole = [_whole_dimension(stmt.reads[n], iter_vars[j]) for n in (0, 1)]
        if whole[0] == whole[1]:
            return None
        b = 0 if whole[0] else 1
        a = 1 - b
        group = _group_size(stmt.reads[a], iter_vars[j], _static(info.iters[j].dom))
        if group is None:
            return None
        in_reads[j] = [n == b for n in (0, 1)]
    else:
        return None
    b_dims = [n for n, vs in enumerate(_region_vars(stmt.reads[b])) if _uses(vs, iter_vars[j])]
    if len(b_dims) != 1 or not stmt.reads[b].region[b_dims[0]].min.same_as(iter_vars[j]):
        return None
    out_position = {}
    for n, vs in enumerate(_region_vars(stmt.writes[0])):
        for m, v in enumerate(iter_vars):
            if _uses(vs, v):
                out_position[m] = n
    axes = _Axes(a=a, b=b, b_dim=b_dims[0], j=j, i=None, outer_b=[], outer_a=[], reduce=[],
                 group=group)
    for n, it in enumerate(info.iters):
        if n == j:
            continue
        if it.kind == "R":
            if not all(in_reads[n]):
                return None
            axes.reduce.append(n)
        elif it.kind != "S":
            return None
        elif in_reads[n][b]:
            axes.outer_b.append(n)
        else:
            axes.outer_a.append(n)
    candidates = [n for n in axes.outer_a if _static(info.iters[n].dom) != 1 and n in out_position]
    if candidates:
        axes.i = max(candidates, key=lambda n: out_position[n])
        axes.outer_a.remove(axes.i)
    return axes if axes.reduce else None


def _row_tile(extent: int | None, rows: int) -> int:
    """Rows per register tile, at most ``rows``: the one that wastes least on the last tile
    (which TVM guards) among those of at least half ``rows``, else a smaller divisor."""
    if extent is None:
        return rows
    if extent <= rows:
        return extent
    best = min(range(rows, (rows + 1) // 2 - 1, -1), key=lambda t: -(-extent // t) * t - extent)
    return best


def _tile_shape(target: Target, dtype: str, j_extent: int, i_extent: int | None,
                max_rows: int) -> tuple[int, int, int]:
    """(jv, jt, it): lanes per vector of j, vectors per tile, rows of i per tile."""
    jv = _pow2_divisor(j_extent, vector_lanes(target, dtype))
    # Vectors per tile: three where they divide the count (8 rows of them: 24 accumulators
    # where 2 x 8 held 16), else two, four when there are few rows to share each loaded
    # value of A with.
    jt = next(t for t in ((4, 2, 3, 1) if i_extent is not None and i_extent < 4 else (3, 2, 1))
              if (j_extent // jv) % t == 0)
    it = _row_tile(i_extent, max(1, min(max_rows, vector_registers(target) * 3 // 4 // jt)))
    return jv, jt, it


def _einsum_shaped(stmt) -> bool:
    """Whether every access of the block indexes each dimension by one iterator or a
    constant (what TVM's pad_einsum takes)."""
    return all(isinstance(r.min, (tirx.Var, tirx.IntImm))
               for region in (*stmt.reads, *stmt.writes) for r in region.region)


def _pad_tiles(sch: s_tir.Schedule, func, target: Target, info, axes: _Axes,
               max_rows: int) -> None:
    """Pads a multiply-accumulate to whole tiles: j up to whole vectors where no vector width
    divides it (odd: ViT's 197 tokens in its attention scores Q K^T), i up to whole tiles of
    rows where none divides it (197 again, prime: the last tile's guard slowed every tile).
    TVM's pad_einsum reads the operands through copies
    with zeros added and writes back the result's own elements; a constant operand's copy is
    marked as its layout rewrite, made once when compiling."""
    main = info.block_rv
    stmt = sch.get(main)
    dtype = str(stmt.writes[0].source.dtype)
    lanes = vector_lanes(target, dtype)
    j_extent = _static(info.iters[axes.j].dom)
    i_extent = _static(info.iters[axes.i].dom) if axes.i is not None else 1
    if axes.group or j_extent is None or i_extent is None or not _einsum_shaped(stmt):
        return
    padding = [1] * len(info.iters)
    if j_extent > lanes and _pow2_divisor(j_extent, lanes) == 1:
        vectors = -(-j_extent // lanes)
        # A count of vectors neither 2 nor 3 divides tiles one vector at a time (a load of B
        # for each of A's broadcasts); one vector more makes tiles of two.
        step = lanes * (2 if vectors % 2 and vectors % 3 else 1)
        padding[axes.j] = step
        j_extent = -(-j_extent // step) * step
    if _pow2_divisor(j_extent, lanes) < 2:
        return  # no vector of j to tile (the rule declines it)
    _, _, rows = _tile_shape(target, dtype, j_extent, i_extent, max_rows)
    if i_extent % rows:
        padding[axes.i] = rows
    if padding == [1] * len(info.iters):
        return
    constant = [_layout_free(func, read.source) for read in stmt.reads]
    try:
        sch.pad_einsum(main, padding)
    except Exception:  # pylint: disable=broad-except
        return  # refused before anything changed: the tiles keep their guarded tail
    for index, read in enumerate(sch.get(main).reads):
        if constant[index] and not read.source.same_as(stmt.reads[index].source):
            copy = next(p for p in sch.get_producers(main)
                        if any(w.source.same_as(read.source) for w in sch.get(p).writes))
            sch.annotate(copy, _PREPROC, True)


def _tile_contraction(sch: s_tir.Schedule, func, target: Target, info, axes: _Axes,
                      max_rows: int, pack: bool, pairs: bool = False):
    """Register tiles for a multiply-accumulate: j split into vectors (``jv`` lanes) and
    ``jt`` of them, i into ``it`` rows, the reduction loops between the tiles and the tile;
    the tiles fused and run in parallel, the tile unrolled and vectorized. B, when constant,
    laid out as [j / (jt jv), .., jt jv] (one contiguous stream per tile). Returns (the fused
    loop, the lanes, the first reduction loop), or None where j has no vector width."""
    main = info.block_rv
    stmt = sch.get(main)
    # A tile of j lies within one group of a grouped convolution.
    j_extent = axes.group or _static(info.iters[axes.j].dom)
    i_extent = _static(info.iters[axes.i].dom) if axes.i is not None else 1
    jv, jt, it = _tile_shape(target, str(stmt.writes[0].source.dtype), j_extent, i_extent,
                             max_rows)
    if jv < 2:
        return None
    b_read = stmt.reads[axes.b]
    contiguous = axes.b_dim == len(b_read.region) - 1
    free = _layout_free(func, b_read.source) or _preproc_writer(sch, main, axes.b) is not None
    if not contiguous and not free:
        return None
    pairs = _pairs(sch, target, info, axes, jv) if free and pairs else None
    width, dim = jt * jv, axes.b_dim
    if pairs is not None:
        # [j / tile, .., k / 2, .., j % tile, k % 2]: a vector's pairs in a row of 16
        k_dim = pairs[1]
        _lay_out_again(sch, main, axes.b, lambda *x: (
            x[dim] // width, *(v // 2 if n == k_dim else v for n, v in enumerate(x) if n != dim),
            x[dim] % width, x[k_dim] % 2))
    elif free and (pack or not contiguous):
        _lay_out_again(sch, main, axes.b, lambda *x: (
            x[dim] // width, *(v for n, v in enumerate(x) if n != dim), x[dim] % width))
    loops = [it_.loop_rv for it_ in info.iters]
    j_outer, j_tile, j_vector = sch.split(loops[axes.j], factors=[None, jt, jv])
    if axes.i is not None:
        i_outer, i_tile = sch.split(loops[axes.i], factors=[None, it])
        i_loops = [i_outer]
    else:
        i_tile, i_loops = None, []
    b_bytes = _static_bytes(b_read.source)
    j_inside = [j_outer] if b_bytes is not None and b_bytes <= _B_INSIDE_MAX_BYTES else []
    outer = ([loops[n] for n in axes.outer_b] + ([] if j_inside else [j_outer])
             + [loops[n] for n in axes.outer_a] + i_loops + j_inside)
    reduce = [loops[n] for n in axes.reduce]
    tile = ([i_tile] if i_tile is not None else []) + [j_tile, j_vector]
    if pairs is not None:
        k_outer, k_pair = sch.split(loops[pairs[0]], factors=[None, pair_dot.STEPS])
        reduce = [k_outer if n == pairs[0] else loops[n] for n in axes.reduce]
        tile.append(k_pair)
    sch.reorder(*outer, *reduce, *tile)
    work = _work(sch, [*outer, *reduce, *tile])
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    _maybe_parallel(sch, fused, work, target)
    if i_tile is not None:
        sch.unroll(i_tile)
    sch.unroll(j_tile)
    if pairs is None:
        sch.vectorize(j_vector)
        return fused, jv, reduce[0]

    def tensorized():  # after the driver splits off the initialization (the intrinsic has none)
        vector = sch.blockize(j_vector)
        sch.tensorize(vector, pairs[2])
        return vector

    return fused, jv, reduce[0], tensorized


def _pairs(sch: s_tir.Schedule, target: Target, info, axes: _Axes, jv: int):
    """(the iterator, B's dimension, the intrinsic) of a multiply-accumulate of 8-bit A and B
    into int32 that pair_dot computes: its innermost reduction of even extent is A's last
    dimension and one dimension of B, its vectors of j as wide as the intrinsic's; else
    None."""
    stmt = sch.get(info.block_rv)
    a_read, b_read = stmt.reads[axes.a], stmt.reads[axes.b]
    found = pair_dot.pair_dot_intrin(target, str(a_read.source.dtype), str(b_read.source.dtype),
                                     str(stmt.writes[0].source.dtype))
    if found is None or jv != found[1] or axes.group:
        return None
    intrin = found[0]
    k = axes.reduce[-1]
    var, extent = info.iters[k].var, _static(info.iters[k].dom)
    if extent is None or extent % pair_dot.STEPS or \
            not a_read.region[-1].min.same_as(var):
        return None
    k_dim = next((n for n, r in enumerate(b_read.region) if r.min.same_as(var)), None)
    return None if k_dim is None else (k, k_dim, intrin)


def _contraction_stage(max_rows: int, pack: bool, pairs: bool = False):
    """A tiling for _schedule_reductions: a multiply-accumulate's (None for other blocks),
    with ``pairs`` by pair_dot where it fits."""

    def tile(sch, func, target, info):
        axes = _contraction_axes(sch, info)
        return None if axes is None else _tile_contraction(sch, func, target, info, axes,
                                                           max_rows, pack, pairs)
    return tile


class Contraction(_Rule):
    """One multiply-accumulate (matmul, batch matmul, dense, NHWC convolution) and its
    elementwise epilogue: register tiles of ``it`` rows of i (at most ``max_rows``) by ``jt``
    vectors of j, accumulated in a local buffer over every reduction step, then passed
    through the epilogue; the tiles run in parallel. With ``pack``, constant B operands are
    laid out per tile when compiling even where j is already their innermost dimension (a
    tile's rows would lie a row of B apart). With ``pairs``, 8-bit operands add two reduction
    steps a lane where the target has pair_dot's instruction."""

    max_rows = 8
    pack = True
    pairs = True

    def apply(self, func, target, tunable):
        scheduled = super().apply(func, target, tunable)
        if scheduled is not None or not self.pairs or not isinstance(func, tirx.PrimFunc) or \
                not {str(p.dtype) for p in func.params if hasattr(p, "dtype")} & \
                {"int8", "uint8"}:
            return scheduled
        # TVM refuses to tensorize some accesses of 8-bit kernels: tiled again without pairs.
        vectors = copy.copy(self)
        vectors.pairs = False
        return vectors.apply(func, target, tunable)

    def schedule(self, sch, func, target):
        reductions = _reductions(sch)
        if reductions is None or len(reductions) != 1:
            return False
        axes = _contraction_axes(sch, reductions[0])
        if axes is None:
            return False
        _pad_tiles(sch, func, target, reductions[0], axes, self.max_rows)
        return _schedule_reductions(sch, func, target,
                                    (_contraction_stage(self.max_rows, self.pack, self.pairs),))
