"""The schedule steps and queries the CPU rules share: what the target offers (vector
widths, cores), static extents and divisors, inlining, a spatial loop nest fused, run in
parallel and vectorized (its innermost axis partitioned where a condition picks the operand),
a constant operand laid out again when compiling."""

from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir.dlight.analysis import collect_vars_used_in_prim_expr
from tvm.sym.pattern import detect_linear_equation
from tvm.target import Target
from tvm.target.codegen import target_has_features

RULE_ATTR = "cpu_schedule_rule"  # names the rule that scheduled a kernel
_PREPROC = "meta_schedule.layout_rewrite_preproc"  # what SplitLayoutRewritePreproc splits out
# A loop nest with less work than this (output elements times reduction steps) runs on one
# core: starting the thread pool's tasks costs more than it saves.
_PARALLEL_MIN_WORK = 16384
_has_if_then_else = tvm.get_global_func("s_tir.schedule.HasIfThenElse")
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


class _Schedule(s_tir.Schedule):
    """s_tir.Schedule without the run-time type check TVM wraps each of its Python methods in
    (typing hints resolved and matched per argument on every call, a large share of the
    rules' time). The rules pass TVM's own handles."""


def _private(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A copy of ``func`` a schedule may change: TVM's schedules change the blocks and loops
    of the function they are given in place (its copy-on-write takes a node only its parent
    holds for its own), so a rule that declines a kernel after a step (normalizing it, a
    split, an rfactor) handed the next rule that step's result, not the kernel. Renewing its
    variables and buffers rebuilds every node."""
    return s_tir.renew_defs(func)


for _name, _method in vars(s_tir.Schedule).items():
    if hasattr(_method, "__wrapped__"):  # functools.wraps of TVM's type_checked
        setattr(_Schedule, _name, _method.__wrapped__)


def vector_bits(target: Target) -> int:
    """The width of the target's vector registers in bits, from its LLVM features (LLVM's
    llvm_get_vector_width answers for this machine's CPU whatever the target's mcpu)."""
    if target.kind.name != "llvm":
        return 128
    if target_has_features("avx512f", target):
        return 512
    if target_has_features("avx", target):
        return 256
    return 128  # SSE2 (every x86-64), NEON (every AArch64), and a safe guess elsewhere


def vector_registers(target: Target) -> int:
    """The target's vector registers: 32 with AVX-512 and on AArch64, else 16."""
    if target.kind.name != "llvm":
        return 16
    if target_has_features("avx512f", target) or "aarch64" in str(target.attrs.get("mtriple", "")):
        return 32
    return 16


def vector_lanes(target: Target, dtype: str) -> int:
    """Elements of ``dtype`` per vector register (booleans counted as bytes)."""
    bits = max(8, tvm.DataType(dtype).bits)
    return max(1, min(64, vector_bits(target) // bits))


def _cores(target: Target) -> int:
    return int(target.attrs.get("num-cores", 1) or 1)


def _static(extent) -> int | None:
    if isinstance(extent, int):
        return extent
    return int(extent) if isinstance(extent, tirx.IntImm) else None


def _extent(sch: s_tir.Schedule, loop) -> int | None:
    return _static(sch.get(loop).extent)


def _pow2_divisor(extent: int, limit: int) -> int:
    """The largest power of two that divides ``extent`` and is at most ``limit``."""
    factor = 1
    while factor * 2 <= limit and extent % (factor * 2) == 0:
        factor *= 2
    return factor


def _divisor(extent: int, limit: int) -> int:
    """The largest divisor of ``extent`` that is at most ``limit``."""
    for factor in range(min(extent, limit), 0, -1):
        if extent % factor == 0:
            return factor
    return 1


def _static_elements(buffer: tirx.Buffer) -> int | None:
    """The buffer's number of elements, None where a dimension is not static."""
    dims = [_static(d) for d in buffer.shape]
    return None if None in dims else math.prod(dims)


def _static_bytes(buffer: tirx.Buffer) -> int | None:
    elements = _static_elements(buffer)
    return None if elements is None else \
        elements * tvm.runtime.DataType(buffer.dtype).bits // 8


def _out_dtype(sch: s_tir.Schedule, block) -> str:
    writes = sch.get(block).writes
    return str(writes[0].source.dtype) if writes else "float32"


def _reads_booleans(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block`` loads booleans: vectorized, TVM's LLVM code takes a vector of them
    as their bytes, so a logical not flips every bit (true -> -2, false -> -1 as a float;
    an attention's fully masked rows came out NaN, not zero)."""
    return any(str(region.source.dtype) == "bool" for region in sch.get(block).reads)


def _region_vars(region) -> list[set]:
    """Per dimension of a buffer region, the variables its start uses."""
    return [collect_vars_used_in_prim_expr(r.min) for r in region.region]


def _uses(variables, var) -> bool:
    return any(var.same_as(v) for v in variables)


def _work(sch: s_tir.Schedule, loops) -> int | None:
    total = 1
    for loop in loops:
        extent = _extent(sch, loop)
        if extent is None:
            return None
        total *= extent
    return total


def _maybe_parallel(sch: s_tir.Schedule, loop, work: int | None, target: Target) -> None:
    if _cores(target) > 1 and (work is None or work >= _PARALLEL_MIN_WORK):
        sch.parallel(loop)


def _root_blocks(sch: s_tir.Schedule) -> list:
    return sch.get_child_blocks(sch.get_sblock("root"))


def _is_spatial(sch: s_tir.Schedule, block) -> bool:
    """No reduction (normalizing makes a one-step reduction's iterator spatial, but its
    init stays)."""
    stmt = sch.get(block)
    return stmt.init is None and all(i.iter_type == tirx.IterVar.DataPar for i in stmt.iter_vars)


def _kept_apart(sch: s_tir.Schedule, block) -> bool:
    """Spatial blocks a reduction should not inline: padding (it would test bounds at every
    reduction step) and tables computed from indices alone (Winograd's matrices: a chain of
    selects at every step)."""
    stmt = sch.get(block)
    return bool(_has_if_then_else(stmt)) or not stmt.reads


# Calls that cost no more than the load they wrap; any other call (sin, pow, sqrt, exp) makes
# a value costly to compute again. Op.get fails at import on a name TVM does not know.
_CHEAP_CALLS = (_IF_THEN_ELSE, tvm.ir.Op.get("tirx.reinterpret"), tvm.ir.Op.get("prim.likely"))


def _read_often_and_costly(sch: s_tir.Schedule, block) -> bool:
    """Whether ``block``'s consumers read it at two or more places (summed over them: a window
    of channels, shifted slices) and its value holds a costly call. Inlining it would compute
    that call again for every place, and chained windows multiply the copies: three LRNs
    fused, each inlined into the next, made one kernel of 125 copies of the first, whose
    build took 55 s on a 2-core Xeon."""
    stmt = sch.get(block)
    calls = []
    tvm_ffi.structural_map(stmt.body, (tvm.ir.expr.Call, lambda call: calls.append(call) or call))
    if all(any(call.op.same_as(op) for op in _CHEAP_CALLS) for call in calls
           if isinstance(call.op, tvm.ir.Op)):
        return False
    buffer, places = stmt.writes[0].source, 0
    for consumer in sch.get_consumers(block):
        loads = []
        tvm_ffi.structural_map(sch.get(consumer).body, (
            tvm.ir.expr.TensorLoad, lambda load: loads.append(load) or load))
        places += len({str(load.indices) for load in loads if load.source.same_as(buffer)})
    return places >= 2


def _inline_spatial(sch: s_tir.Schedule, keep=(), keep_read_often=False) -> None:
    """Inlines every spatial block it can (into its consumers, else into its producer), but
    those named in ``keep`` and, with ``keep_read_often``, those _read_often_and_costly."""
    progress = True
    while progress:
        progress = False
        for inline in (sch.compute_inline, sch.reverse_compute_inline):
            for block in _root_blocks(sch):
                if sch.get(block).name_hint in keep or not _is_spatial(sch, block):
                    continue
                if keep_read_often and inline == sch.compute_inline and \
                        _read_often_and_costly(sch, block):
                    continue
                if inline == sch.reverse_compute_inline and not all(
                        _is_spatial(sch, p) for p in sch.get_producers(block)):
                    continue  # TVM would apply it to a reduction's init as well
                try:
                    inline(block)
                except Exception:  # pylint: disable=broad-except  # not inlinable: next
                    continue
                progress = True
                break
            if progress:
                break


def _schedule_spatial(sch: s_tir.Schedule, block, target: Target,
                      partition: bool = False) -> None:
    """Fuses a spatial loop nest, runs its outer part in parallel and vectorizes its innermost
    axis by a power of two that divides it. Where a read gathers along that axis (a channel
    shuffle's permuted channels), the loop over its vectors goes outermost, serial: the
    gathers that only the innermost axis indexes (a shuffled channel's scale and shift) then
    stay the same over the parallel loop inside, and LLVM loads them once. Where a condition
    on the innermost axis picks what an element is (a concatenation's parts, padded
    channels), that loop is partitioned where the condition changes, each part vectorized,
    if ``partition`` (a kernel of its own: in a rule's own pass over the kernel the parts
    would be blocks it does not expect)."""
    loops = list(sch.get_loops(block))
    if not loops:
        return
    work = _work(sch, loops)
    lanes = 1 if _reads_booleans(sch, block) else vector_lanes(target, _out_dtype(sch, block))
    cuts = _innermost_cuts(sch.get(block)) if partition and lanes >= 2 and len(loops) > 1 \
        else []
    if cuts and _partitioned_innermost(sch, loops, cuts, lanes):
        fused = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        _maybe_parallel(sch, fused, work, target)
        return
    inner, vectors = None, None
    extent = _extent(sch, loops[-1])
    if extent is not None and extent >= 2 and lanes >= 2:
        factor = _pow2_divisor(extent, lanes)
        if factor >= 2:
            if factor < extent:
                vectors, inner = sch.split(loops[-1], factors=[None, factor])
                loops[-1] = vectors
            else:
                inner = loops.pop()
    if vectors is not None and len(loops) > 1 and _gathers_innermost(sch.get(block), factor):
        vectors = loops.pop()
        sch.reorder(vectors, *loops)
        rest = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        # The vectors' loop in parallel where it shares out well over the cores; else the
        # loop inside it (one fork and join per vector).
        many = (_extent(sch, vectors) or 0) >= 4 * _cores(target)
        _maybe_parallel(sch, vectors if many else rest, work, target)
    elif loops:
        outer = _parallel_prefix(sch, loops, target) if inner is None else loops
        fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
        _maybe_parallel(sch, fused, work, target)
    if inner is not None:
        sch.vectorize(inner)


def _parallel_prefix(sch: s_tir.Schedule, loops: list, target: Target) -> list:
    """The outer loops to fuse and run in parallel where no vector divides the innermost axis
    (a transpose to or from 3 or 7 columns): all but the two innermost, else all but the
    innermost, where those still give each core 4 iterations, else all. The loops left out
    stay serial: fused, every element would pay a division and a modulo to find its indices,
    and LLVM could not unroll or vectorize the rows itself."""
    for kept in (2, 1):
        if len(loops) > kept and (_work(sch, loops[:-kept]) or 0) >= 4 * _cores(target):
            return loops[:-kept]
    return loops


# Where a comparison of an iterator v with a constant c changes: v OP c at c + this, c OP v at
# c + 1 - this (v < c and c <= v at c, v <= c and c < v at c + 1).
_COMPARISONS = {tirx.LT: 0, tirx.LE: 1, tirx.GT: 1, tirx.GE: 0}


def _innermost_cuts(block: s_tir.SBlock) -> list[int]:
    """Where the conditions of ``block``'s if_then_else change along its innermost iterator,
    when each compares that iterator alone with a constant (a concatenation's parts, padded
    channels); [] where there is none, or a condition uses the iterator otherwise (TVM's
    vectorizer scalarizes a loop whose lanes take either branch)."""
    if not block.iter_vars:
        return []
    last, extent = block.iter_vars[-1].var, _static(block.iter_vars[-1].dom.extent)
    conditions = []
    tvm_ffi.structural_walk(block.body, (tvm.ir.expr.Call, lambda call: conditions.append(
        call.args[0]) if call.op.same_as(_IF_THEN_ELSE) else None), order="post")
    if extent is None or not conditions:
        return []
    cuts, other = set(), []

    def compare(node):
        if not any(isinstance(side, tirx.Var) and side.same_as(last) for side in (node.a, node.b)):
            return None
        bound = next((side for side in (node.a, node.b) if isinstance(side, tirx.IntImm)), None)
        past = _COMPARISONS[type(node)]
        if bound is None:
            other.append(node)
        else:
            cuts.add(bound.value + (past if node.a.same_as(last) else 1 - past))
        return tvm_ffi.WalkResult.SKIP

    def var(node):
        if node.same_as(last):  # used otherwise than compared with a constant
            other.append(node)

    for condition in conditions:
        tvm_ffi.structural_walk(condition, [(tuple(_COMPARISONS), compare), (tirx.Var, var)],
                                order="pre")
    return [] if other else sorted(c for c in cuts if 0 < c < extent)


def _partitioned_innermost(sch: s_tir.Schedule, loops: list, cuts: list[int],
                           lanes: int) -> bool:
    """The innermost of ``loops`` split into vectors by a power of two of at most ``lanes``
    that divides it and every cut, and the loop over those vectors partitioned at ``cuts``
    (each part's conditions then hold throughout, so its vectors take one branch); False,
    and nothing done, where no such power of two reaches 2."""
    extent = _extent(sch, loops[-1])
    factor = _pow2_divisor(math.gcd(extent, *cuts), lanes) if extent is not None else 1
    if factor < 2:
        return False
    vectors, lane = sch.split(loops[-1], factors=[None, factor])
    sch.vectorize(lane)
    bounds = [cut // factor for cut in cuts]
    # The parts' sizes, the last one (the rest) left out.
    sch.loop_partition(vectors, [end - start for start, end in zip([0, *bounds], bounds)])
    return True


def _gathers_innermost(block: s_tir.SBlock, lanes: int) -> bool:
    """Whether a vector of ``lanes`` of the innermost iterator of ``block`` reads elements
    apart in some operand's innermost dimension (a gather): there, each lane's index is not
    the lane plus what is the same for every lane."""
    if not block.iter_vars:
        return False
    iterator = block.iter_vars[-1]
    last, extent = iterator.var, _static(iterator.dom.extent)
    if extent is None:
        return False
    vector, lane = tirx.Var("vector", last.ty), tirx.Var("lane", last.ty)
    analyzer = tvm.sym.Analyzer()
    analyzer.bind(vector, tvm.ir.Range(0, extent // lanes))
    analyzer.bind(lane, tvm.ir.Range(0, lanes))
    for region in block.reads:
        if not region.region:
            continue
        start = region.region[-1].min
        if not _uses(collect_vars_used_in_prim_expr(start), last):
            continue
        split = vector * lanes + lane
        start = analyzer.simplify(tvm_ffi.structural_map(
            start, (tirx.Var, lambda var: split if var.same_as(last) else var), order="post"))
        linear = detect_linear_equation(start, [lane])
        if len(linear) != 2 or not (isinstance(linear[0], tirx.IntImm) and linear[0].value == 1) \
                or _uses(collect_vars_used_in_prim_expr(linear[1]), lane):
            return True
    return False


def _vectorize_innermost(sch: s_tir.Schedule, block, lanes: int) -> None:
    """Vectorizes the innermost loop of ``block`` by a power of two dividing it (at most
    ``lanes``)."""
    loops = sch.get_loops(block)
    extent = _extent(sch, loops[-1]) if loops else None
    if extent is None or extent < 2 or _reads_booleans(sch, block):
        return
    factor = _pow2_divisor(extent, lanes)
    if factor < 2:
        return
    inner = sch.split(loops[-1], factors=[None, factor])[1] if factor < extent else loops[-1]
    sch.vectorize(inner)


def _layout_free(func: tirx.PrimFunc, buffer) -> bool:
    """Whether ``buffer`` is an operand the kernel may read in a layout of its own: a constant
    at every call (runtime._layout_free_constants marks them)."""
    free = func.attrs.get("layout_free_buffers", None) if func.attrs else None
    if free is None:
        return False
    # A PrimFunc's parameters are its buffers.
    index = next((n for n, param in enumerate(func.params) if param.same_as(buffer)), None)
    return index is not None and any(int(i) == index for i in free)


def _preproc_writer(sch: s_tir.Schedule, block, read_index: int):
    """The block writing operand ``read_index`` of ``block`` when it is marked as a layout
    rewrite (computed when compiling), else None."""
    source = sch.get(block).reads[read_index].source
    return next((p for p in sch.get_producers(block) if _PREPROC in sch.get(p).annotations
                 and any(w.source.same_as(source) for w in sch.get(p).writes)), None)


def _lay_out_again(sch: s_tir.Schedule, block, read_index: int, index_map) -> None:
    """Reads operand ``read_index`` of ``block`` in the layout ``index_map`` gives, from a
    copy marked as a layout rewrite (or the one it already reads): SplitLayoutRewritePreproc
    moves the copy out of the kernel and FoldConstant computes it when compiling."""
    if _preproc_writer(sch, block, read_index) is None:
        copy = sch.cache_read(block, read_index, "global")
        sch.annotate(copy, _PREPROC, True)
    sch.transform_layout(block, ("read", read_index), index_map)
