"""The reduction stages' driver: each reduction block of a kernel tiled by the first tiling
that takes it (contraction, spatial_reduction, stages' tables), its result written back
through the epilogue, and a padding computed per tile where its windows are small."""

from __future__ import annotations

from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.target import Target

from .primitives import (_extent, _inline_spatial, _is_spatial, _kept_apart, _out_dtype, _PREPROC,
                         _root_blocks, _schedule_spatial, _static_elements, _vectorize_innermost,
                         _work, vector_lanes)

# A padding computed per tile of its reduction (see _padded_per_tile): at most this many
# elements a tile, and at most this many times the padded input's elements in all.
_PAD_WINDOW_MAX = 4096
_PAD_RECOMPUTE_MAX = 2


def _write_back(sch: s_tir.Schedule, block, loop, lanes: int, fuse_consumer: bool) -> str | None:
    """Keeps ``block``'s result in a local buffer per iteration of ``loop``. With
    ``fuse_consumer``, its one spatial consumer (the elementwise epilogue, its stages
    inlined into it) is computed there too, and its name returned; else (or where TVM
    refuses that) a copy out to the block's own output is."""
    consumers = sch.get_consumers(block)
    if fuse_consumer and len(consumers) == 1 and _is_spatial(sch, consumers[0]):
        epilogue = consumers[0]
        name = sch.get(epilogue).name_hint
        try:
            sch.reverse_compute_at(epilogue, loop, preserve_unit_loops=True)
        except Exception:  # pylint: disable=broad-except
            pass  # refused before anything changed: the epilogue stays a loop nest of its own
        else:
            sch.set_scope(block, 0, "local")
            _vectorize_innermost(sch, epilogue, lanes)
            return name
    copy = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(copy, loop, preserve_unit_loops=True)
    _vectorize_innermost(sch, copy, lanes)
    return None


def _schedule_reductions(sch: s_tir.Schedule, func, target: Target, stages) -> bool:
    """Inlines the spatial blocks (but padding and tables), then schedules each reduction
    block with the first of ``stages`` (tilings, ``tile(sch, func, target, info)``, None
    where the block is not theirs) that fits it, the last one with its epilogue; the spatial
    blocks left are scheduled as loop nests of their own."""
    infos = normalize_prim_func(sch)
    if infos is None:
        return False
    names = [info.name for info in infos
             if not info.is_injective() or not _is_spatial(sch, info.block_rv)]
    keep = {sch.get(b).name_hint for b in _root_blocks(sch)
            if _is_spatial(sch, b) and _kept_apart(sch, b)}
    _inline_spatial(sch, keep=keep)
    infos = normalize_prim_func(sch)
    if infos is None:
        return False
    by_name = {info.name: info for info in infos}
    if any(name not in by_name for name in names):
        return False
    others = [info.name for info in infos if info.name not in names]
    reductions = {name: by_name[name].block_rv for name in names}
    for position, name in enumerate(names):
        info = by_name[name]
        tiled = None
        for tile in stages:
            tiled = tile(sch, func, target, info)
            if tiled is not None:
                break
        if tiled is None:
            return False
        # A tiling may end with a step to take after the initialization is split off, which
        # may give the block that computes the reduction from then on.
        fused, lanes, first_reduce, *after_init = tiled
        if fused is not None:
            fused_in = _write_back(sch, info.block_rv, fused, lanes,
                                   fuse_consumer=position == len(names) - 1)
            if fused_in in others:
                others.remove(fused_in)
        init = sch.decompose_reduction(info.block_rv, first_reduce)
        _vectorize_innermost(sch, init, lanes)
        for step in after_init:
            reductions[name] = step() or reductions[name]
    reductions = list(reductions.values())
    left = {sch.get(block).name_hint for block in _root_blocks(sch)}  # tables may be inlined
    for name in (name for name in others if name in left):
        block = sch.get_sblock(name)
        if not _padded_per_tile(sch, block, reductions, target):
            _schedule_spatial(sch, block, target)
    return True


def _padded_per_tile(sch: s_tir.Schedule, block, reductions: list, target: Target) -> bool:
    """Computes ``block`` (a padding) inside the parallel loop of the one reduction reading
    it, a tile's window at a time, vectorized, where a window has at most _PAD_WINDOW_MAX
    elements and all of them at most _PAD_RECOMPUTE_MAX times the padded input's, rather
    than a whole padded input written and read again at every call. Windows over
    many input channels (a convolution's, padded again for each tile of output channels)
    stay padded whole, as does a constant's padding (made once, when compiling)."""
    consumers = sch.get_consumers(block)
    if _PREPROC in sch.get(block).annotations or len(consumers) != 1 or not any(
            sch.get(consumers[0]).same_as(sch.get(rv)) for rv in reductions):
        return False
    parallel = next((loop for loop in sch.get_loops(consumers[0])
                     if sch.get(loop).kind == tirx.ForKind.PARALLEL), None)
    if parallel is None:
        return False
    if any(sch.get(loop).same_as(sch.get(parallel)) for loop in sch.get_loops(block)):
        return True  # computed per tile already (a table reduction's window)
    trial = sch.copy()
    try:
        trial.compute_at(block, parallel)
    except Exception:  # pylint: disable=broad-except  # TVM refused: padded whole
        return False
    loops = list(trial.get_loops(block))
    inside = next(n for n, loop in enumerate(loops)
                  if trial.get(loop).same_as(trial.get(parallel)))
    window, tiles = _work(trial, loops[inside + 1:]), _extent(trial, parallel)
    padded = _static_elements(sch.get(block).writes[0].source)
    if window is None or tiles is None or padded is None or window > _PAD_WINDOW_MAX or \
            window * tiles > _PAD_RECOMPUTE_MAX * padded:
        return False
    sch.compute_at(block, parallel)
    _vectorize_innermost(sch, block, vector_lanes(target, _out_dtype(sch, block)))
    return True
