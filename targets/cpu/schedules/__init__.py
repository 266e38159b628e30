"""Default CPU schedules for the kernels a build leaves unscheduled: small rules in the style
of TVM's ``s_tir.dlight``, each taking the kernels of one kind and returning None for the
rest, applied by one driver (``default_schedules``) in this order:

- ``Injective``: kernels of spatial loops only (elementwise, broadcast, transpose, gather,
  padding). Producers are inlined; each remaining loop nest has its loops fused, its outer
  part run in parallel and its innermost axis vectorized; that axis partitioned where a
  condition on it picks the operand (a concatenation's parts), and its vectors looped over
  outermost where their lanes gather (a channel shuffle).
- ``Contraction``: one multiply-accumulate reduction, ``C[.., i, j] += A[.., i, k] *
  B[.., k, j]`` (matmul, batch matmul, dense, convolutions in NHWC), with its elementwise
  epilogue (bias, batch norm, activations, residual adds): register tiles of a few rows of i
  by one to three vectors of j accumulated over every reduction step in a local buffer, the
  epilogue computed per tile, the tiles run in parallel. A constant operand B (weights) is
  laid out again when compiling, each tile's columns for every reduction step in a row.
- ``SpatialReduction``: one reduction whose output's innermost axis is also the innermost
  axis of what it reads (pooling in NHWC, sums over outer axes, depthwise convolutions):
  that axis vectorized inside the reduction loops, a few outputs of the next axis (a row's
  pixels) accumulated side by side, the others fused and run in parallel.
- ``Stages``: kernels of several reductions of those two kinds (Winograd convolutions: input
  transform, batched products, inverse transform), each scheduled so at the kernel's top level.
- TVM's ``dlight.cpu.GEMV``.
- ``Rows``: row-wise stages (softmax, layer and RMS norms, sums, means and arg-reductions
  over the last axis) where every stage has the same rows: parallel over the rows, a row's
  stages computed together, as ``dlight.cpu.Reduction`` does, and each reduction along the
  row rfactored into a vector of partial results.
- TVM's ``dlight.cpu.Reduction`` (``SameRows``) for such kernels Rows leaves (rows shorter
  than 8), only where every stage has the same rows (it recomputes a whole softmax per
  element of a 1 x N one).
- ``Fallback``: any other kernel, loop nest by loop nest: spatial loops first, fused and run
  in parallel where TVM proves that safe; a spatial nest also vectorized.

A rule that fails on a kernel returns None and the next one is tried on the kernel as it was
(each rule schedules its own copy: TVM's schedules change the function they are given in
place); ``Fallback`` takes every kernel, so none is left unscheduled. Vectors and tiles of j
split loops by divisors (no tail to guard; Rows guards a row's last, partial vector); where
none divides an odd j, or no tile of rows divides i, ``Contraction`` pads them to whole tiles
first (TVM's pad_einsum: zeros added to copies of the operands, the result's own elements
written back; a constant's copy made when compiling; j to a count of vectors 2 or 3
divides). Vector widths
come from the target's features (AVX-512: 16 float32 lanes, AVX/AVX2: 8, SSE and NEON: 4).
The rule that scheduled a kernel is named in its ``cpu_schedule_rule`` attribute, and those
kernels compute exp, erf, tanh, sigmoid, sinh and cosh by polynomials that vectorize, and
isnan by a test of the bits (``vector_math``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.s_tir import dlight as dl
from tvm.s_tir.dlight.analysis import collect_vars_used_in_prim_expr, normalize_prim_func
from tvm.sym.pattern import detect_linear_equation
from tvm.target import Target
from tvm.target.codegen import target_has_features

RULE_ATTR = "cpu_schedule_rule"  # names the rule that scheduled a kernel
_PREPROC = "meta_schedule.layout_rewrite_preproc"  # what SplitLayoutRewritePreproc splits out
# A loop nest with less work than this (output elements times reduction steps) runs on one
# core: starting the thread pool's tasks costs more than it saves.
_PARALLEL_MIN_WORK = 16384
# A padding computed per tile of its reduction (see _padded_per_tile): at most this many
# elements a tile, and at most this many times the padded input's elements in all.
_PAD_WINDOW_MAX = 4096
_PAD_RECOMPUTE_MAX = 2
_SPATIAL_ROWS = 8  # outputs per tile of a reduction vectorized along its output (see below)
# Rows of those tiles per parallel step (see _tile_spatial_reduction). Pure TVM, median ms with
# 1 / 2 / 4 / 8: MobileNetV2 3.26 / 3.11 / 3.02 / 3.12; EfficientNet-B0 7.30 / - / 7.16 / 7.17.
_SPATIAL_BAND = 4
# A multiply-accumulate whose B (the weights) fits in half a core's L2 cache walks its tiles of
# j innermost: each tile of rows of A is read once into L1 and its outputs are written as whole
# rows, where tiles of j outermost went over all of A and the output once per tile of j, a
# strided stream. B's larger than this stay outermost, read from L1 per tile instead of L2.
# Pure-TVM on a 2-core Xeon (2 MB of L2 a core), median ms with B's up to 0 / 256 KiB / 512
# KiB / 1 MiB / 4 MiB inside: ResNet-50 29.8 / 27.6 / 26.9 / 26.8 / 31.5 (its 1x1
# convolutions of 64 to 256 channels at 56x56 ran at 100 GFLOP/s, onnxruntime's at 340);
# MobileNetV2 4.3 / - / 3.6 / 3.6; BERT-base, ViT-B/16 and GPT-2 unchanged within noise.
_B_INSIDE_MAX_BYTES = 512 << 10
# Unrolled (output, step) pairs at most, per vector, of a reduction weighted by tables (see
# _tile_table_reduction): Winograd F(4x4, 3x3)'s input transform has 36 x 36.
_TABLE_UNROLL_MAX = 2048
_has_if_then_else = tvm.get_global_func("s_tir.schedule.HasIfThenElse")
_IF_THEN_ELSE = tvm.ir.Op.get("prim.if_then_else")


class _Schedule(s_tir.Schedule):
    """s_tir.Schedule without the run-time type check TVM wraps each of its Python methods in
    (typing hints resolved and matched per argument on every call): 0.12 s of the 0.73 s
    the rules took on pure-TVM ResNet-50's kernels. The rules pass TVM's own handles."""


def _private(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A copy of ``func`` a schedule may change: TVM's schedules change the blocks and loops
    of the function they are given in place (its copy-on-write takes a node only its parent
    holds for its own), so a rule that declines a kernel after a step (normalizing it, a
    split, an rfactor) handed the next rule that step's result, not the kernel. Renewing its
    variables and buffers rebuilds every node (0.08 ms for a softmax)."""
    return s_tir.renew_defs(func)


for _name, _method in vars(s_tir.Schedule).items():
    if hasattr(_method, "__wrapped__"):  # functools.wraps of TVM's type_checked
        setattr(_Schedule, _name, _method.__wrapped__)


# ---------------------------------------------------------------------------------------
# What the target offers


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


# ---------------------------------------------------------------------------------------
# Small helpers


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


# ---------------------------------------------------------------------------------------
# Reduction stages: multiply-accumulates and reductions vectorized along their output


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
    # where 2 x 8 held 16; ViT-B/16's 197 x 768 by 3072 matmul 2.56-2.72 -> 2.31-2.50 ms,
    # BERT-base's 128 x 768 by 768 0.39 -> 0.36), else two, four when there are few rows to
    # share each loaded value of A with.
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
    divides it (odd: ViT's 197 tokens in its attention scores Q K^T, 12.3 ms a call under the
    Fallback rule, 0.9 ms so), i up to whole tiles of rows where none divides it (197 again,
    prime: the last tile's guard slowed every tile, ViT's 197 x 768 by 3072 ran at 150-180
    GFLOP/s where 192 rows ran at 290). TVM's pad_einsum reads the operands through copies
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
        # for each of A's broadcasts); one vector more makes tiles of two: ViT-B/16's Q K^T,
        # 13 -> 14 vectors, ran 16-18% faster.
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
                      max_rows: int, pack: bool):
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
    if free and (pack or not contiguous):
        width, dim = jt * jv, axes.b_dim
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
    sch.reorder(*outer, *reduce, *tile)
    work = _work(sch, [*outer, *reduce, *tile])
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    _maybe_parallel(sch, fused, work, target)
    if i_tile is not None:
        sch.unroll(i_tile)
    sch.unroll(j_tile)
    sch.vectorize(j_vector)
    return fused, jv, reduce[0]


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
    # accumulate side by side: a depthwise 3x3 convolution over 112 x 112 x 32 took 0.8-0.9
    # ms one vector of outputs at a time, 0.4-0.5 ms so.
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


def _tile_table_reduction(sch: s_tir.Schedule, func, target: Target, info):
    """A reduction of few steps weighted by tables computed from indices alone (Winograd's
    transforms: each of a tile's 6 x 6 outputs a sum over its 6 x 6 inputs weighted by entries
    of B, or A): the tables inlined, the outputs' axes that index them and the reduction
    unrolled, so that each weight is a constant of the code and its zeros drop out (676 of the
    input transform's 1296 products remain, 324 of the inverse's 576); the output's innermost
    axis vectorized, the other axes fused and run in parallel. A spatial producer read only
    here is not written whole first: the input's padding is computed per tile, its window of
    vectors into a local buffer, which the unrolled products read with no bounds test (tested
    at each of them, the simplifier took most of the build: ResNet-50's F(4x4) kernels 1.8
    -> 1.0 s each); any other is computed as it is read.
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


def _schedule_reductions(sch: s_tir.Schedule, func, target: Target, stages, max_rows: int,
                         pack: bool) -> bool:
    """Inlines the spatial blocks (but padding and tables), then schedules each reduction
    block with the first of ``stages`` ("contraction", "spatial") that fits it, the last one
    with its epilogue; the spatial blocks left are scheduled as loop nests of their own."""
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
    for position, name in enumerate(names):
        info = by_name[name]
        tiled = None
        for stage in stages:
            if stage == "contraction":
                axes = _contraction_axes(sch, info)
                if axes is not None:
                    tiled = _tile_contraction(sch, func, target, info, axes, max_rows, pack)
            elif stage == "spatial":
                tiled = _tile_spatial_reduction(sch, func, target, info)
            elif stage == "table":
                tiled = _tile_table_reduction(sch, func, target, info)
            if tiled is not None:
                break
        if tiled is None:
            return False
        fused, lanes, first_reduce = tiled
        if fused is not None:
            fused_in = _write_back(sch, info.block_rv, fused, lanes,
                                   fuse_consumer=position == len(names) - 1)
            if fused_in in others:
                others.remove(fused_in)
        init = sch.decompose_reduction(info.block_rv, first_reduce)
        _vectorize_innermost(sch, init, lanes)
    reductions = [by_name[name].block_rv for name in names]
    left = {sch.get(block).name_hint for block in _root_blocks(sch)}  # tables may be inlined
    for name in (name for name in others if name in left):
        block = sch.get_sblock(name)
        if not _padded_per_tile(sch, block, reductions, target):
            _schedule_spatial(sch, block, target)
    return True


def _padded_per_tile(sch: s_tir.Schedule, block, reductions: list, target: Target) -> bool:
    """Computes ``block`` (a padding) inside the parallel loop of the one reduction reading
    it, a tile's window at a time, vectorized, where a window has at most _PAD_WINDOW_MAX
    elements and all of them at most _PAD_RECOMPUTE_MAX times the padded input's: padded
    whole, MobileNetV2's first convolution's input (224 x 224 x 3) and ResNet-50's max
    pool's (114 x 114 x 64: 3.3 MB) were written and read again at every call. Windows over
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


# ---------------------------------------------------------------------------------------
# Rules


class _Rule(dl.ScheduleRule):
    """A CPU rule: None off LLVM targets and wherever scheduling raises (so that the next
    rule is tried); subclasses write ``schedule(sch, func, target) -> bool``."""

    def apply(self, func, target: Target, _tunable: bool):
        if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
            return None
        try:
            func = _private(func)
            sch = _Schedule(func.with_attr(RULE_ATTR, type(self).__name__))
            return sch if self.schedule(sch, func, target) else None
        except Exception:  # pylint: disable=broad-except
            return None

    def schedule(self, sch: s_tir.Schedule, func: tirx.PrimFunc, target: Target) -> bool:
        raise NotImplementedError


def _reductions(sch: s_tir.Schedule) -> list | None:
    """The reduction blocks (a reduction of one step counts, though normalizing drops it)."""
    infos = normalize_prim_func(sch)
    return None if infos is None else [
        info for info in infos if not info.is_injective() or not _is_spatial(sch, info.block_rv)]


class Injective(_Rule):
    """Spatial loops only: inline, then fuse, parallelize and vectorize each loop nest left."""

    def schedule(self, sch, func, target):
        if _reductions(sch) != []:
            return False
        _inline_spatial(sch, keep_read_often=True)
        for block in _root_blocks(sch):
            _schedule_spatial(sch, block, target, partition=True)
        return True


class Contraction(_Rule):
    """One multiply-accumulate (matmul, batch matmul, dense, NHWC convolution) and its
    elementwise epilogue: register tiles of ``it`` rows of i (at most ``max_rows``) by ``jt``
    vectors of j, accumulated in a local buffer over every reduction step, then passed
    through the epilogue; the tiles run in parallel. With ``pack``, constant B operands are
    laid out per tile when compiling even where j is already their innermost dimension (a
    tile's rows then lie a row of B apart: measured 2.5-3.5x slower on BERT's matmuls)."""

    max_rows = 8
    pack = True

    def schedule(self, sch, func, target):
        reductions = _reductions(sch)
        if reductions is None or len(reductions) != 1:
            return False
        axes = _contraction_axes(sch, reductions[0])
        if axes is None:
            return False
        _pad_tiles(sch, func, target, reductions[0], axes, self.max_rows)
        return _schedule_reductions(sch, func, target, ("contraction",), self.max_rows,
                                    self.pack)


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
        return _schedule_reductions(sch, func, target, ("spatial",), 0, False)


class Stages(_Rule):
    """Several reductions, each a multiply-accumulate or a reduction vectorized along its
    output (Winograd convolutions), each scheduled as those rules do at the top level."""

    def schedule(self, sch, func, target):
        reductions = _reductions(sch)
        if reductions is None or len(reductions) < 2:
            return False
        return _schedule_reductions(sch, func, target, ("table", "contraction", "spatial"),
                                    Contraction.max_rows, Contraction.pack)


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
    partial vector guarded) and the lanes combined at the end. dlight leaves a reduction one
    scalar chain of as many dependent steps as the row is long: a softmax over 12 x 197 x 197
    (ViT-B/16's) took 0.73 ms, onnxruntime's 0.13. The stages' loops over the rows are merged
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


class Guarded(dl.ScheduleRule):
    """Another rule (TVM's), its schedule errors turned into None."""

    def __init__(self, rule: dl.ScheduleRule):
        self.rule = rule

    def apply(self, func, target: Target, tunable: bool):
        if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
            return None
        func = _private(func)
        if not self.fits(func):
            return None
        try:
            return self.rule.apply(func.with_attr(RULE_ATTR, type(self.rule).__name__), target,
                                   tunable)
        except Exception:  # pylint: disable=broad-except
            return None

    def fits(self, func) -> bool:  # pylint: disable=unused-argument
        return True


class SameRows(Guarded):
    """TVM's ``dlight.cpu.Reduction`` where every block's leading spatial axes (the rows it
    runs in parallel and computes a row's stages under) have the same extents."""

    def __init__(self):
        super().__init__(dl.cpu.Reduction())

    def fits(self, func) -> bool:
        try:
            infos = normalize_prim_func(_Schedule(func))
        except Exception:  # pylint: disable=broad-except
            return False
        return bool(infos) and _shared_rows(infos) > 0


class Fallback(_Rule):
    """Every kernel, loop nest by loop nest: spatial loops first, fused and run in parallel
    where TVM allows it; spatial nests also vectorized. Nests TVM cannot analyse (opaque
    blocks, loop-carried scans) keep their loops."""

    def schedule(self, sch, func, target):
        for block in _root_blocks(sch):
            try:
                self._nest(sch, block, target)
            except Exception:  # pylint: disable=broad-except
                continue  # checked before anything changes: the nest keeps its loops
        return True

    @staticmethod
    def _nest(sch, block, target):
        stmt = sch.get(block)
        loops = sch.get_loops(block)
        if not loops:
            return
        if not stmt.iter_vars or len(loops) != len(stmt.iter_vars):
            sch.parallel(loops[0])  # TVM refuses where it cannot prove that safe
            return
        kinds = [i.iter_type for i in stmt.iter_vars]  # one loop per iterator, as TE makes them
        spatial = [loop for loop, k in zip(loops, kinds) if k == tirx.IterVar.DataPar]
        reduce = [loop for loop, k in zip(loops, kinds) if k != tirx.IterVar.DataPar]
        if not reduce:
            _schedule_spatial(sch, block, target)
        elif spatial:
            sch.reorder(*spatial, *reduce)
            work = _work(sch, loops)
            fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            _maybe_parallel(sch, fused, work, target)


# ---------------------------------------------------------------------------------------
# Vector math: LLVM expands exp, erf, tanh and sigmoid of a vector into one libm call per lane
# (softmax, GELU, tanh and sigmoid kernels then ran scalar); these are polynomials of float32
# that vectorize, accurate to a few units in the last place (checked in the tests). TVM's
# vectorizer cannot vectorize TVM's own isnan (it scalarizes a loop holding one inside a
# parallel loop), so float32 isnan is rewritten as well, as a test of its bits. float16 ones
# compute in float32.
# Other float32 functions (log, sin, ...) keep LLVM's lowering: correct, one call per lane.


def _f32(value: float):
    return tirx.const(value, "float32")


def _horner(x, coefficients):
    result = _f32(coefficients[0])
    for c in coefficients[1:]:
        result = result * x + _f32(c)
    return result


def _is_nan(x):
    """Whether float32 ``x`` is a NaN (its exponent all ones, its mantissa not 0), as bits:
    TVM's vectorizer cannot vectorize its own isnan, and scalarized every loop with one
    inside a parallel loop (every exp, erf, tanh and sigmoid of a kernel then ran a lane at
    a time)."""
    bits = tirx.reinterpret("int32", x)
    return (tirx.bitwise_and(bits, tirx.const(0x7FFFFFFF, "int32"))
            > tirx.const(0x7F800000, "int32"))


def _nan_kept(x, value):
    return tirx.Select(_is_nan(x), x, value)


_EXP_LOW, _EXP_HIGH = -87.33654475055310, 88.72283905206835  # ln(FLT_MIN), ln(FLT_MAX)


def _exp_within(c, past_127: bool):
    """Cephes' expf of ``c`` in [_EXP_LOW, _EXP_HIGH]: c = n ln2 + r (ln2 in two parts), exp(r)
    by a degree-7 polynomial, 2^n from the exponent bits. ``past_127``: c may exceed 88.03,
    so n may be 128, past what one exponent holds: 2^n as 2^(n // 2) 2^(n - n // 2)."""
    n = tirx.floor(c * _f32(1.44269504088896341) + _f32(0.5))
    r = c - n * _f32(0.693359375) + n * _f32(2.12194440e-4)
    p = _horner(r, (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                    1.6666665459e-1, 5.0000001201e-1))
    y = p * r * r + r + _f32(1.0)
    n = tirx.Cast("int32", n)
    if not past_127:
        return y * _power_of_two(n)
    low = tirx.shift_right(n, tirx.const(1, "int32"))
    return y * _power_of_two(low) * _power_of_two(n - low)


def _exp(x):
    """expf: 0 below ln(FLT_MIN) (no denormals), inf above ln(FLT_MAX)."""
    value = _exp_within(tirx.max(tirx.min(x, _f32(_EXP_HIGH)), _f32(_EXP_LOW)), past_127=True)
    value = tirx.Select(x < _f32(_EXP_LOW), _f32(0.0), value)
    return _nan_kept(x, tirx.Select(x > _f32(_EXP_HIGH), _f32(float("inf")), value))


def _power_of_two(n):
    """2^n for an int32 n in [-126, 127], from the exponent bits."""
    return tirx.reinterpret("float32", tirx.shift_left(n + tirx.const(127, "int32"),
                                                       tirx.const(23, "int32")))


def _unit(value):
    return tirx.max(tirx.min(value, _f32(1.0)), _f32(-1.0))


def _erf(x):
    """Eigen's float erf: a rational function of x on [-4, 4] (erf is +-1 in float32 beyond)."""
    c = tirx.max(tirx.min(x, _f32(4.0)), _f32(-4.0))
    c2 = c * c
    p = c * _horner(c2, (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                         -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                         -1.60960333262415e-02))
    q = _horner(c2, (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                     -7.37332916720468e-03, -1.42647390514189e-02))
    return _nan_kept(x, _unit(p / q))


def _tanh(x):
    """Eigen's float tanh: a rational function of x on [-9, 9] (+-1 in float32 beyond)."""
    c = tirx.max(tirx.min(x, _f32(9.0)), _f32(-9.0))
    c2 = c * c
    p = c * _horner(c2, (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                         5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                         4.89352455891786e-03))
    q = _horner(c2, (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                     4.89352518554385e-03))
    return _nan_kept(x, _unit(p / q))


def _sigmoid(x):
    """1 / (1 + e^-x), e^-x with -x held in [ln(FLT_MIN), 88]: beyond, the sigmoid is 1, or
    under FLT_MIN, either way (so no test of the bounds, and one power of two: a third fewer
    instructions than exp's, for EfficientNet's every SiLU)."""
    e = _exp_within(tirx.max(tirx.min(-x, _f32(88.0)), _f32(_EXP_LOW)), past_127=False)
    return _nan_kept(x, _f32(1.0) / (_f32(1.0) + e))


def _cosh_sinh_large(a):
    """e^a / 2 for a > 10 (e^-a no longer counts), as (e^(a/2) / 2) e^(a/2): finite wherever
    the result is."""
    half = _exp(a * _f32(0.5))
    return half * _f32(0.5) * half


def _cosh(x):
    a = tirx.abs(x)
    e = _exp(a)
    return tirx.Select(a > _f32(10.0), _cosh_sinh_large(a), _f32(0.5) * (e + _f32(1.0) / e))


def _sinh(x):
    """Taylor's series to x^11 below 1 in magnitude (the exponentials cancel there)."""
    a = tirx.abs(x)
    e = _exp(a)
    large = tirx.Select(a > _f32(10.0), _cosh_sinh_large(a), _f32(0.5) * (e - _f32(1.0) / e))
    x2 = x * x
    small = x + x * x2 * _horner(x2, (1 / 39916800, 1 / 362880, 1 / 5040, 1 / 120, 1 / 6))
    signed = tirx.Select(x < _f32(0.0), -large, large)
    return _nan_kept(x, tirx.Select(a < _f32(1.0), small, signed))


# LLVM has no vector form of sinh and cosh at all: vectorized, they would not compile.
_VECTOR_MATH = {"tirx.exp": _exp, "tirx.erf": _erf, "tirx.tanh": _tanh, "tirx.sigmoid": _sigmoid,
                "tirx.sinh": _sinh, "tirx.cosh": _cosh, "tirx.isnan": _is_nan}


def vector_math(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with float32 exp, erf, tanh, sigmoid, sinh, cosh and isnan written as
    vectorizable arithmetic; float16 ones too, computed in float32 (LLVM's own float16 exp,
    GELU and tanh ran 4 times slower than these). Not bfloat16's: TVM's legalizing of bfloat16
    arithmetic rebinds the polynomial's variable, and the build fails."""

    def rewrite(call):
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
        dtype = str(call.args[0].ty)
        if name not in _VECTOR_MATH or dtype not in ("float32", "float16"):
            return call
        x = tirx.Var("x", "float32")
        argument = call.args[0] if dtype == "float32" else tirx.Cast("float32", call.args[0])
        value = tirx.Let(x, argument, _VECTOR_MATH[name](x))
        return value if str(value.ty) == str(call.ty) else tirx.Cast(str(call.ty), value)

    body = tvm_ffi.structural_map(func.body, (tvm.ir.expr.Call, rewrite), order="post")
    return func if body.same_as(func.body) else func.with_body(body)


@tvm.transform.module_pass(opt_level=0, name="CPUVectorMath")
def _vector_math_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """vector_math on the kernels these rules scheduled (tuned kernels stay as measured)."""
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and func.attrs and RULE_ATTR in func.attrs:
            mod[gvar] = vector_math(func)
    return mod


def default_rules() -> list[dl.ScheduleRule]:
    """The rules, in the order they are tried."""
    return [Injective(), Contraction(), SpatialReduction(), Stages(), Guarded(dl.cpu.GEMV()),
            Rows(), SameRows(), Fallback()]


def default_schedules() -> tvm.transform.Pass:
    """Schedules every kernel still unscheduled with the CPU rules, under the current target,
    and writes their float32 exp, erf, tanh and sigmoid as vector arithmetic."""
    return tvm.transform.Sequential([dl.ApplyDefaultSchedule(*default_rules()),
                                     _vector_math_pass])
