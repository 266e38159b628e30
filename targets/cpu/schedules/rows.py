"""The Rows rule: row-wise stages (softmax, layer and RMS norms, sums, means and
arg-reductions over the last axis) where every stage has the same rows."""

from __future__ import annotations

from tvm import tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func

from .primitives import (_extent, _is_spatial, _out_dtype, _region_vars, _root_blocks, _static,
                         _uses, _vectorize_innermost, vector_lanes)
from .rule import _Rule


def _shared_rows(infos) -> int:
    """How many leading spatial axes (the rows) every block has, with the same extents in
    every block; 0 where they differ."""
    leads = []
    for info in infos:
        kinds = info.dom_kind()
        leads.append([_static(d) for d in info.dom()[:len(kinds) - len(kinds.lstrip("S"))]])
    rows = min(len(lead) for lead in leads)
    return rows if all(lead[:rows] == leads[0][:rows] for lead in leads) else 0


class Rows(_Rule):
    """Row-wise stages (softmax, layer and RMS norms; sums, means and arg-reductions over the
    last axis): every stage of a row computed under one parallel loop over the rows, as TVM's
    dlight.cpu.Reduction has it, and each reduction along the row vectorized too: split by
    the vector width and rfactored, each lane accumulating every width-th element (the last,
    partial vector guarded) and the lanes combined at the end, where dlight leaves a
    reduction one scalar chain of as many dependent steps as the row is long. The stages'
    loops over the rows are merged
    rather than computed at one another: compute_at drops an rfactored block's guard (TVM
    0.27), which then reads past the row."""

    def schedule(self, sch, func, target):
        infos = normalize_prim_func(sch)
        rows = _shared_rows(infos) if infos else 0
        if not rows or all(info.is_injective() for info in infos):
            return False
        lanes = vector_lanes(target, _out_dtype(sch, infos[-1].block_rv))
        factored = [self._rfactor(sch, info.block_rv, lanes) for info in infos
                    if not info.is_injective()]
        partials = {sch.get(rf).name_hint for rf in factored if rf is not None}
        if not partials:
            return False
        blocks = _root_blocks(sch)
        row_loops = [sch.get_loops(block)[:rows] for block in blocks]
        sch.parallel(sch.merge(*(sch.fuse(*loops) if rows > 1 else loops[0]
                                 for loops in row_loops)))
        for block in blocks:
            loops = sch.get_loops(block)
            if len(loops) < 2:
                continue  # a row's one value (a global pool's)
            extent = _extent(sch, loops[-1])
            if sch.get(block).name_hint in partials:
                sch.vectorize(loops[-1])  # the lanes' partial results
            elif _is_spatial(sch, block):
                _vectorize_innermost(sch, block, lanes)
            elif extent is None or extent > lanes:  # a reduction not rfactored, as dlight's
                sch.annotate(sch.split(loops[-1], factors=[None, lanes])[1],
                             "pragma_auto_unroll_max_step", lanes)
        return True

    @staticmethod
    def _rfactor(sch, block, lanes: int):
        """The block of lanes' partial results ``block`` is rfactored into, or None where its
        innermost loop is no reduction along the row of 8 elements or more. Rows shorter
        than two vectors take fewer lanes (a power of two, 4 at least)."""
        stmt = sch.get(block)
        inner = sch.get_loops(block)[-1]
        extent = _extent(sch, inner)
        row_var = stmt.iter_vars[-1]
        if extent is None or extent < 8 or row_var.iter_type == tirx.IterVar.DataPar \
                or not all(_uses(_region_vars(read)[-1], row_var.var) for read in stmt.reads):
            return None
        lanes = min(lanes, 1 << ((extent // 2).bit_length() - 1))
        lane = sch.split(inner, factors=[None, lanes])[1]
        return sch.rfactor(lane, factor_axis=len(stmt.writes[0].region))
