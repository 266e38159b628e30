"""Matrix products by constant weights on Intel AMX tiles, in float32 precision, for CPU builds
whose target has AMX (amx-tile and amx-bf16: Sapphire Rapids and later Xeons).

AMX multiplies bfloat16 (8 significant bits) and accumulates in float32, 16 times as many
multiply-adds a cycle as AVX-512 does in float32. Each float32 here is the exact sum of three
bfloat16 parts (its bits cut after 8, 16 and 24 significant bits), and a product of two is the
sum of the six part products that reach 2^-24 of it (a0 b0, a0 b1, a1 b0, a0 b2, a1 b1, a2 b0):
against float64, the result's error is that of a float32 product's accumulation, measured over
128 x 3072 by 3072 x 768 (0.07e-6 RMS for the parts dropped, 0.4e-6 for float32's own sums).
Six bfloat16 products still take 2.7 times fewer cycles than one float32 product. Pure-TVM
BERT-base on a 2-core Xeon, kernel medians in the model (float32 kernels -> AMX): 128 x 768 by
768 x 768 0.60 -> 0.42 ms, by 768 x 3072 2.41 -> 1.52, 128 x 3072 by 3072 x 768 2.48 -> 1.98
(the weights' parts come from memory at each run: hot in cache, 0.26, 1.07 and 1.27 ms); all
kernels 95.9 -> 76.7 ms.

- ``amx_products``: a float32 matmul of activations [.., M, K] by a constant [K, N], and an
  NHWC convolution by constant weights (a matmul of its windows by the weights), becomes a
  kernel splitting the activations into their parts (``parts_kernel``; fusion gives it the
  bias and activation before it where the parts are their only reader, and
  ``parts_schedules`` schedules it, tuning leaving it) and the AMX kernel, which reads
  the weights' parts laid out when compiling (``weight_parts``; 1.5 times the float32 weights'
  bytes, written to the engine's weight files as they are made). A 1x1 convolution's rows are
  its pixels; a wider window's taps are read from its input's parts in place (``Window``), so
  3x3 convolutions take AMX before Winograd's rewrite. Products of fewer than 32 rows or less
  than MIN_FLOPS stay float32. Tuning leaves both kernels as they are (their tasks are
  dropped). Pure-TVM ResNet-50, one process a build, median of 25: 34.2 -> 32.7 ms with its
  1x1 convolutions on AMX, 33.8 -> 30.5 with its 3x3 ones too (these 13.5 -> 10.0 ms a run:
  56 x 56 ones 680 GFLOP/s, 7 x 7 ones, 512 channels, 200, bound by reading their weights'
  parts), -> 26.9 with the parts kernels scheduled here, 23.4 -> 21.9 with the bias and ReLU
  before written as parts (and 3x3 ones of one image stopping at the last output row);
  ViT-B/16 149.8 -> 127.0 (108.5 -> 106.1 with its GELU written as parts); ConvNeXt-T 41.2 ->
  38.5.

Tiles are 16 rows of 64 bytes: tiles of A are 16 rows by 32 reduction steps, tiles of B 16
pairs of reduction steps by 16 columns (each column's two steps side by side), tiles of C 16 x
16 float32. A task computes 32 x 32 blocks of C, each in four tiles over the whole reduction:
a block of rows across the columns where the weights' parts fit in L2 (a convolution's), else
a block of columns down the rows (a transformer's weights, read once from memory a run); the
tasks run in parallel, each configuring its thread's tiles (ldtilecfg) first. Between the
products of a step block, a share of the next step block's lines of both operands is
prefetched into L1 (_prefetch_weights, prefetch_activations): the first rows of a task of
columns read its weights from memory, and tile loads from L2 wait on it otherwise; in a
block's last step block, its lines of C, for writing (_prefetch_output). A task of columns
with many blocks of rows also prefetches the next task's weights over its later blocks
(_prefetch_next_task). Denormal parts count as zero (AMX's
rule), so inputs under 2^-110 or so lose their low parts, and the results flush to zero under
float32's smallest normal.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, s_tir, te, tirx
from tvm.script import tirx as T
from tvm.target.codegen import target_has_features

from toolchain.relax_ir import computed_constant, constant_view

from .cpu_schedules import RULE_ATTR
from .layouts import op_name, rewrite_functions, static_dims
from .weights import WeightFiles

AMX_FEATURES = ("amx-tile", "amx-bf16")  # LLVM's names; /proc/cpuinfo says amx_tile, amx_bf16
MIN_ROWS = 32  # fewer rows leave most of a task's tiles empty: the float32 kernels take them
# Less arithmetic than this (2 M K N) stays float32, where the float32 kernel's fused epilogue
# and no parts to write beat AMX: MobileNetV2's 1x1 convolutions (5-40 MFLOP) took 6.2 ms a
# run on AMX, 4.7 without; ResNet-50's (103-206 MFLOP) 350-530 GFLOP/s on AMX.
MIN_FLOPS = 1 << 26
ROWS, STEPS, COLUMNS = 16, 32, 16  # a tile of A: ROWS x STEPS bfloat16; of C: ROWS x COLUMNS
PARTS = 3
_SLAB_COLUMNS = 1024  # weight_parts' columns at a time
_RESIDENT_BYTES = 1 << 20  # weights' parts held in L2 across a task's column blocks
_ROW_TASKS_MIN = 8
_SMALLEST_NORMAL = 0x0080  # bfloat16 2^-126
# syscall's arguments asking Linux for AMX's tile state: arch_prctl(ARCH_REQ_XCOMP_PERM,
# XFEATURE_XTILEDATA), x86-64's numbers.
AMX_PERMISSION_SYSCALL = (158, 0x1023, 18)


def has_amx(target: tvm.target.Target) -> bool:
    return target.kind.name == "llvm" and all(target_has_features(f, target)
                                               for f in AMX_FEATURES)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


# ---------------------------------------------------------------------------------------
# The parts of a float32


def float32_parts(values: np.ndarray) -> list[np.ndarray]:
    """The three bfloat16 parts (as uint16 bits) whose sum is each float32 of ``values``: its
    bits cut after 8 significant bits, then the rest's, then the rest's again. An infinity or
    NaN is its first part alone (a NaN kept a NaN); a nonzero number's zero parts are the
    smallest normal bfloat16 of its sign (2^-126, nothing to any sum of float32 products), so
    an infinity of the other operand times the number is an infinity, as in float32, not the
    NaN of infinity times zero."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    parts, rest = [(bits >> 16).astype(np.uint16)], bits.view(np.float32)
    with np.errstate(invalid="ignore"):  # an infinity's rest (NaN), replaced below
        for _ in range(PARTS - 1):
            rest = rest - (rest.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
            parts.append((rest.view(np.uint32) >> 16).astype(np.uint16))
    # The few elements the rule makes otherwise, found by index: masks and selects over
    # every element took most of the time (weight_parts of 768 x 3072: 63 -> 47 ms).
    flat, parts_flat = bits.reshape(-1), [part.reshape(-1) for part in parts]
    for part in parts_flat[1:]:
        zero = np.flatnonzero(part == 0)
        zero = zero[(flat[zero] & 0x7FFFFFFF != 0) & (flat[zero] & 0x7F800000 != 0x7F800000)]
        part[zero] = (flat[zero] >> 16) & 0x8000 | _SMALLEST_NORMAL
    special = np.flatnonzero(flat & 0x7F800000 == 0x7F800000)
    parts_flat[0][special] |= np.where(flat[special] & 0x7FFFFF != 0, 0x40, 0).astype(np.uint16)
    for part in parts_flat[1:]:
        part[special] = 0
    return parts


def _part(value: tirx.PrimExpr, part: tirx.PrimExpr) -> tirx.PrimExpr:
    """float32_parts in TIR: part ``part`` (0, 1 or 2) of ``value``'s bits."""
    u32 = "uint32"

    def const(number):
        return tirx.const(number, u32)

    def high(v):
        return tirx.reinterpret("float32", tirx.reinterpret(u32, v) & const(0xFFFF0000))

    bits = tirx.reinterpret(u32, value)
    special = (bits & const(0x7F800000)) == const(0x7F800000)
    first = (bits >> const(16)) | tirx.Select(
        tirx.all(special, (bits & const(0x7FFFFF)) != const(0)), const(0x40), const(0))
    rest1 = tirx.Select(special, tirx.const(0.0, "float32"), value - high(value))
    rest2 = rest1 - high(rest1)
    smallest = (bits >> const(16)) & const(0x8000) | const(_SMALLEST_NORMAL)
    finite_nonzero = tirx.all(tirx.Not(special), (bits & const(0x7FFFFFFF)) != const(0))

    def nonzero(part_bits):
        return tirx.Select(tirx.all(finite_nonzero, part_bits == const(0)), smallest, part_bits)

    bits_of = [first, nonzero(tirx.reinterpret(u32, rest1) >> const(16)),
               nonzero(tirx.reinterpret(u32, rest2) >> const(16))]
    return tirx.Select(part == 0, bits_of[0], tirx.Select(part == 1, bits_of[1], bits_of[2])
                       ).astype("uint16")


def _part_inside(conditions: list, value: tirx.PrimExpr, part: tirx.PrimExpr) -> tirx.PrimExpr:
    """_part of ``value`` where every condition holds, else zero, ``value`` loaded only there.
    Not a Select: a Select loads its value everywhere, and TVM's simplifier drops an index's
    clamps that its condition makes redundant, so the parts kernels read up to a padded row
    before and after their input (a crash where the input began or ended a mapping: ResNet-50
    from the engine cache, one load in six). Conditions that differ across the vectorized
    channels (a matmul's depth not a multiple of STEPS) make the vectorizer scalarize."""
    if not conditions:
        return _part(value, part)
    return tirx.if_then_else(tirx.all(*conditions), _part(value, part), tirx.const(0, "uint16"))


def _int64(dims) -> list[tirx.IntImm]:
    """Dims as relax's kernels type them: a kernel whose loops and buffers mix int32 and
    int64 fails to fuse with them (FuseTIR, compute_inline)."""
    return [tirx.IntImm("int64", d) for d in dims]


def _activation_parts(x: te.Tensor, padded_rows: int, padded_depth: int) -> te.Tensor:
    """[.., M, K] float32 (its rows M: all but the last axis) -> parts as tiles of A, [Mp /
    ROWS, Kp / STEPS, PARTS, ROWS, STEPS] uint16, zeros past M and K. Read in place, not
    through a reshape to [M, K]: a fused producer read through the reshape's index (a GELU's
    in ViT-B/16) took 3.8 ms a run, 3.2 so."""
    dims = [int(d) for d in x.shape]
    rows, depth = int(np.prod(dims[:-1])), dims[-1]

    def element(tile_row, step_block, part, row, step):
        i, k = tile_row * ROWS + row, step_block * STEPS + step
        conditions = ([i < rows] if padded_rows > rows else []) + \
            ([k < depth] if padded_depth > depth else [])
        index, rest = [], i
        for extent in reversed(dims[:-1]):
            index.insert(0, rest % extent)
            rest = rest // extent
        return _part_inside(conditions, x[(*index, k)], part)

    return te.compute(_int64((padded_rows // ROWS, padded_depth // STEPS, PARTS, ROWS, STEPS)),
                      element, name="amx_parts")


def _pointwise_parts(x: te.Tensor, strides: tuple, padded_rows: int) -> te.Tensor:
    """The parts of a 1x1 convolution's input as tiles of A: row i is output pixel i of [N, OH,
    OW], reduction step k its channel k of NHWC ``x`` (a multiple of STEPS channels), zeros past
    the rows."""
    batch, height, width, channels = (int(d) for d in x.shape)
    out_h, out_w = (height - 1) // strides[0] + 1, (width - 1) // strides[1] + 1
    rows = batch * out_h * out_w

    def element(tile_row, step_block, part, row, step):
        i = tile_row * ROWS + row
        n, pixel = i // (out_h * out_w), i % (out_h * out_w)
        h, w = pixel // out_w * strides[0], pixel % out_w * strides[1]
        c = step_block * STEPS + step
        return _part_inside([i < rows] if padded_rows > rows else [], x[n, h, w, c], part)

    return te.compute(_int64((padded_rows // ROWS, channels // STEPS, PARTS, ROWS, STEPS)),
                      element, name="amx_parts")


@dataclasses.dataclass(frozen=True)
class Window:
    """A convolution's windows as rows of A. Its padded input splits into stride x stride
    phases (phase (a, b): pixels (stride i + a, stride j + b)), each an image of ``height`` x
    ``width`` pixels, stored as rows (image, i, j) of ``channel_blocks`` x STEPS channels
    (_window_parts). Output pixel (n, h, w) is row (n, h, w) of C, and its window's tap (kh,
    kw) is row (n, h + kh // stride, w + kw // stride) of phase (kh % stride, kw % stride):
    for every tap, 16 outputs in a row read 16 rows in a row, one strided tile, so no window
    is copied (as im2col would, 9 x 1.5 times the input's bytes for 3x3). C's rows past an
    output row's end (the phase image is wider) are computed and dropped; for one image, C
    stops at its last output row (ResNet-50's 14 x 14 ones: 224 rows of 256, 7 x 7: 63 of 81)."""
    batch: int
    height: int
    width: int
    channel_blocks: int
    kernel: tuple[int, int]
    stride: int

    @property
    def rows(self) -> int:
        return self.batch * self.height * self.width

    @property
    def shape(self) -> tuple[int, ...]:
        """The parts' shape: [phase, row, channel block, part, channel]; zero rows follow
        the last image, as far as the last tile's farthest tap reads."""
        reach = (self.kernel[0] - 1) // self.stride * self.width + \
            (self.kernel[1] - 1) // self.stride
        return (self.stride ** 2, _round_up(self.rows, 2 * ROWS) + reach,
                self.channel_blocks, PARTS, STEPS)


def _window_parts(x: te.Tensor, window: Window, padding: tuple) -> te.Tensor:
    """The parts of NHWC ``x`` (padded by ``padding``: top, left) laid out as ``window``
    reads them, zeros in the padding and past the last image."""
    batch, height, width, _ = (int(d) for d in x.shape)
    stride, image = window.stride, window.height * window.width

    def element(phase, row, block, part, step):
        n, pixel = row // image, row % image
        h = pixel // window.width * stride + phase // stride - padding[0]
        w = pixel % window.width * stride + phase % stride - padding[1]
        return _part_inside([n < batch, h >= 0, h < height, w >= 0, w < width],
                            x[n, h, w, block * STEPS + step], part)

    return te.compute(_int64(window.shape), element, name="amx_window_parts")


# The parts kernels' blocks, by the axis of their parts.
_PARTS_BLOCKS = {"amx_parts": 2, "amx_window_parts": 3}


def scheduled_parts(func: tirx.PrimFunc) -> tirx.PrimFunc | None:
    """A parts kernel scheduled, with whatever producers fusion gave it (the bias and ReLU
    after the AMX product before, where the parts are their only reader, so that activation
    is written once as parts, not also as float32), else None: the producers inlined, the
    first two loops in parallel, a row's channels in vectors, and the three parts unrolled
    within, so they share the value's load, producers and bit operations (LLVM computes them
    once: ViT-B/16's fused GELU took 3.21 ms a run so, 3.23 with its vector computed into a
    buffer first; the default rules' loops made each part alone, and each of those computed
    all three: ResNet-50's 56 x 56 x 256 pixels took 0.40 ms, 0.15 so)."""
    names = []
    tvm_ffi.structural_map(func.body, (s_tir.SBlock, lambda b: names.append(b.name_hint) or b))
    found = [name for name in _PARTS_BLOCKS if name in names]
    if not found:
        return None
    sch = s_tir.Schedule(s_tir.renew_defs(func))  # a failed try must leave func as it was
    block = sch.get_sblock(found[0])
    producers = [b for b in sch.get_child_blocks(sch.get_sblock("root"))
                 if sch.get(b).name_hint != found[0]]
    try:
        for producer in reversed(producers):
            sch.compute_inline(producer)
    except s_tir.ScheduleError:
        return None
    loops = list(sch.get_loops(block))
    part = loops.pop(_PARTS_BLOCKS[found[0]])
    sch.reorder(*loops[:-1], part, loops[-1])
    sch.parallel(sch.fuse(loops[0], loops[1]))
    sch.unroll(part)
    sch.vectorize(loops[-1])
    return sch.mod["main"].with_attr("tirx.is_scheduled", True).with_attr(RULE_ATTR, "AMX parts")


@tvm.transform.module_pass(opt_level=0, name="AmxPartsScheduled")
def parts_schedules(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Fused kernels with scheduled_parts' schedule where they make parts (tuning leaves them)."""
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and not (func.attrs and func.attrs.get(
                "tirx.is_scheduled", False)):
            scheduled = scheduled_parts(func)
            if scheduled is not None:
                mod[gvar] = scheduled
    return mod


@functools.cache
def parts_kernel(parts, x_dims: tuple, *args) -> tuple[tirx.PrimFunc, list[int]]:
    """The kernel making ``parts(x, *args)`` (_activation_parts, _pointwise_parts or
    _window_parts) of a float32 ``x`` of ``x_dims``, for fusion to take its producers and
    parts_schedules to schedule, and the parts' shape."""
    x = te.placeholder(_int64(x_dims), "float32", name="x")
    made = parts(x, *args)
    kernel = te.create_prim_func([x, made]).without_attr("global_symbol")
    return kernel, [int(d) for d in made.shape]


def weight_parts_shape(depth: int, columns: int) -> list[int]:
    return [_round_up(columns, 2 * COLUMNS) // COLUMNS, _round_up(depth, STEPS) // STEPS, PARTS,
            STEPS // 2, 2 * COLUMNS]


def weight_parts(weight: np.ndarray, out: np.ndarray, after_slab=None) -> None:
    """[K, N] float32 -> parts as tiles of B in ``out`` (weight_parts_shape, uint16): a tile's
    row holds its 16 columns' values for two reduction steps, the columns' pairs side by side
    (AMX's layout); zeros past K and N. Made _SLAB_COLUMNS columns at a time, calling
    ``after_slab`` after each (GPT-2's output projection's parts, 232 MB, were made whole
    with four temporaries as large)."""
    depth, columns = weight.shape
    padded_depth = _round_up(depth, STEPS)
    for first in range(0, out.shape[0] * COLUMNS, _SLAB_COLUMNS):
        width = min(_SLAB_COLUMNS, out.shape[0] * COLUMNS - first)
        padded = np.zeros((padded_depth, width), np.float32)
        padded[:depth, :max(0, min(width, columns - first))] = weight[:, first:first + width]
        # [part, step block, step pair, step in pair, column block, column]
        tiles = np.stack(float32_parts(padded)).reshape(
            PARTS, padded_depth // STEPS, STEPS // 2, 2, width // COLUMNS, COLUMNS)
        out[first // COLUMNS:(first + width) // COLUMNS] = tiles.transpose(4, 1, 0, 2, 5, 3) \
            .reshape(width // COLUMNS, padded_depth // STEPS, PARTS, STEPS // 2, 2 * COLUMNS)
        if after_slab is not None:
            after_slab()


# ---------------------------------------------------------------------------------------
# The AMX kernel


def _intrinsic(name: str, *args) -> tirx.PrimExpr:
    return T.call_llvm_intrin("void", f"llvm.x86.{name}", *args)


@functools.cache
def amx_kernel(rows: int, depth: int, columns: int, window: Window | None = None
               ) -> tirx.PrimFunc:
    """``(A parts, B parts) -> C``: C[M, N] float32 = A B, from their parts as weight_parts
    and _activation_parts lay them out, or as _window_parts does for ``window`` (M its
    rows): _amx_template's kernel for its kind, specialized to these sizes."""
    padded_depth, padded_columns = _round_up(depth, STEPS), _round_up(columns, 2 * COLUMNS)
    # A parallel task: a block of rows across all columns where the weights' parts stay in
    # L2 and there are rows enough to share out (each task reads the weights again); else a
    # block of columns down all rows (the weights read once).
    rows_outer = 6 * padded_depth * padded_columns <= _RESIDENT_BYTES and \
        _round_up(rows, 2 * ROWS) // (2 * ROWS) >= _ROW_TASKS_MIN
    template = _amx_template(rows_outer, None if window is None else (window.kernel,
                                                                    window.stride))
    sizes = {"rows": rows, "columns": columns, "step_blocks": padded_depth // STEPS}
    if window is not None:
        sizes.update(width=window.width, channel_blocks=window.channel_blocks,
                     a_rows=window.shape[1])
    params = {param.name: param for param in template.params}
    return template.specialize({params[name]: tirx.const(value, "int64")
                                for name, value in sizes.items()})


def _window_tile(a: tirx.Buffer, kernel: tuple, stride: int, width, channel_blocks, first_row,
                 step_block, part) -> tirx.PrimExpr:
    """The first element of A's tile for rows ``first_row`` on and step block ``step_block``
    (tap (kh, kw), channel block: the weights' [KH KW C, O] rows), in a Window's parts of
    phase images ``width`` wide and ``channel_blocks`` deep."""
    tap, block = step_block // channel_blocks, step_block % channel_blocks
    kh, kw = tap // kernel[1], tap % kernel[1]
    return a[kh % stride * stride + kw % stride, first_row + kh // stride * width + kw // stride,
             block, part, 0]


_PRODUCTS = 24  # a step block's tile products: six part products of 2 x 2 tiles
_PART_LINES = STEPS // 2  # lines of 64 bytes in a tile of B
_PREFETCHES = 2 * PARTS * _PART_LINES // _PRODUCTS  # a column (row) pair's step block's
# lines, a product's share


def _prefetch(line: tirx.PrimExpr, write: bool = False) -> tirx.PrimExpr:
    """A prefetch into L1 of the 64 bytes at ``line`` (a buffer's element), to be read, or
    written (owned by this core first)."""
    return T.call_llvm_intrin("void", "llvm.prefetch.p0", T.address_of(line),
                              T.int32(int(write)), T.int32(3), T.int32(1))


def _tile_part_row(line) -> tuple:
    """(tile of the pair, part, row) of line ``line`` of a pair of tiles' step block, counted
    tile by tile, part by part, row by row. A function, not an assignment in the macros:
    TVMScript makes an assigned value a one-element buffer, a workspace the kernel stores to
    and loads from."""
    return (line // (PARTS * _PART_LINES), line % (PARTS * _PART_LINES) // _PART_LINES,
            line % _PART_LINES)


def _weight_line(b: tirx.Buffer, column_tile, step_block, line) -> tirx.PrimExpr:
    """Line ``line`` (_tile_part_row's count) of step block ``step_block`` of the weights'
    parts ``b`` for column tiles ``column_tile`` and the next."""
    tile, part, row = _tile_part_row(line)
    return b[column_tile + tile, step_block, part, row, 0]


@T.macro
def _prefetch_weights(b, column_tile, step_block, product):
    """After product ``product`` (0 to _PRODUCTS - 1) of a step block, a prefetch into L1 of
    its share of step block ``step_block``'s weight lines. Spread between the products, the
    memory keeps streaming while the tiles multiply: the 49 x 1024 by 1024 x 2048 kernel, its
    weights from memory, 0.81 -> 0.72 ms; all at once after a step block's products, it slowed
    down (0.53 -> 0.55-0.69 ms), its tile loads then waiting behind the prefetches. Weights
    read from L2 gain too (the tile loads wait on L2 otherwise; with the activations', below)."""
    for share in T.unroll(_PREFETCHES):
        T.evaluate(_prefetch(_weight_line(b, column_tile, step_block,
                                          product * _PREFETCHES + share)))


_OUTPUT_LINES = 2 * ROWS * 2  # a block of C's lines: 32 rows of 32 float32
_OUTPUT_PREFETCHES = -(-_OUTPUT_LINES // _PRODUCTS)  # a product's share of them


def _output_line(c: tirx.Buffer, row_tile, column_tile, line, rows, columns) -> tirx.PrimExpr:
    """Line ``line`` of C's block at ``row_tile``, ``column_tile`` (two lines a row of 32
    float32); past C's edge, its last row's or column's."""
    return c[T.min(row_tile * ROWS + line // 2, rows - 1),
             T.min(column_tile * COLUMNS + line % 2 * COLUMNS, columns - 1)]


@T.macro
def _prefetch_output(c, row_tile, column_tile, product, rows, columns):
    """During a block's last step block, after product ``product``, a prefetch for writing of
    a share of the block's lines of C, which its tile stores then find in L1 rather than read
    for ownership from L2 or memory as they store (alternated with the kernels before: ResNet-50
    23.66 -> 23.13, 23.38 -> 23.16 and 23.24 -> 23.00 ms; BERT-base 63.46 -> 61.96 and 65.31 ->
    63.92). One step block earlier was no faster."""
    for share in T.unroll(_OUTPUT_PREFETCHES):
        if product * _OUTPUT_PREFETCHES + share < _OUTPUT_LINES:
            T.evaluate(_prefetch(_output_line(c, row_tile, column_tile,
                                              product * _OUTPUT_PREFETCHES + share, rows,
                                              columns), write=True))


_SPREAD_BLOCKS = 5  # a task of columns with this many blocks of rows or more streams the next


def _next_task_line(step_blocks, slot, slots):
    """The next task's weight line (of its step_blocks x PARTS x _PART_LINES x 2, step block
    by step block of its first column tile, then its second's) that product ``slot`` of
    ``slots`` prefetches."""
    return (slot + 1) * (step_blocks * _PREFETCHES * _PRODUCTS) // slots - 1


@T.macro
def _prefetch_next_task(b, column_tile, step_blocks, slot, slots):
    """At product ``slot`` of ``slots`` in the blocks of rows after a task's first, which read
    its weights from L2, a prefetch into L1 of a share of the next task's weights (its two
    column tiles follow this task's), at most one line a product: more held the fill buffers
    the tile loads from L2 wait for (49 x 1024 by 1024 x 2048, 2 blocks, 4 lines a product:
    0.76 -> 0.91 ms from memory), while one at most gains (from memory, 196 x 256 by 256 x
    1024, 7 blocks: 0.25 -> 0.23 ms; 224 x 2304 by 2304 x 256, a 3x3 window, 0.49 -> 0.44)."""
    if _next_task_line(step_blocks, slot, slots) > _next_task_line(step_blocks, slot - 1, slots):
        T.evaluate(_prefetch(_weight_line(
            b, column_tile + 2 + _next_task_line(step_blocks, slot, slots) // (
                step_blocks * PARTS * _PART_LINES),
            _next_task_line(step_blocks, slot, slots) // (PARTS * _PART_LINES) % step_blocks,
            _next_task_line(step_blocks, slot, slots) % (PARTS * _PART_LINES))))


@functools.cache
def _amx_template(rows_outer: bool, window: tuple | None) -> tirx.PrimFunc:
    """The AMX kernel of one kind (tasks of rows or of columns; a window's ``(kernel,
    stride)`` or None) with its sizes as parameters, for amx_kernel to specialize: rows,
    columns, step_blocks, and a window's width, channel_blocks and A's rows. Parsing
    TVMScript takes 0.1 s a kernel, and ResNet-50 has 21 sizes of 6 kinds."""
    tile_bytes = 2 * STEPS

    def pairs(extent):
        return (extent + 2 * ROWS - 1) // (2 * ROWS)

    def a_shape(rows, step_blocks, channel_blocks, a_rows):
        if window is None:
            return (2 * pairs(rows), step_blocks, PARTS, ROWS, STEPS)
        return (window[1] ** 2, a_rows, channel_blocks, PARTS, STEPS)

    def a_row(a, row, step_block, part, width, channel_blocks):
        """A's first element of part ``part`` of step block ``step_block`` for row ``row``: a
        tile's first row, or any one row of it, which its tile load reads ``a_stride`` on."""
        if window is None:
            return a[row // ROWS, step_block, part, row % ROWS, 0]
        return _window_tile(a, *window, width, channel_blocks, row, step_block, part)

    def activation_line(a, row_tile, step_block, line, width, channel_blocks):
        """Line ``line`` (_tile_part_row's count) of the activations' step block
        ``step_block`` for row tiles ``row_tile`` and the next."""
        tile, part, row = _tile_part_row(line)
        return a_row(a, (row_tile + tile) * ROWS + row, step_block, part, width, channel_blocks)

    @T.macro
    def prefetch_activations(a, row_tile, step_block, product, width, channel_blocks):
        """_prefetch_weights' share of the activations' lines: tile loads from L2 wait on
        it, from L1 much less (tuned pure-TVM ResNet-50, with the weights' prefetches in every
        block too, alternated with the kernels before: 25.10 -> 23.21 ms)."""
        for share in T.unroll(_PREFETCHES):
            T.evaluate(_prefetch(activation_line(a, row_tile, step_block,
                                                 product * _PREFETCHES + share, width,
                                                 channel_blocks)))

    def product_slot(pa, pb, product):
        """A step block's tile product (0 to _PRODUCTS - 1): product ``product`` of the part
        product (pa, pb), counted in the order the kernel takes the six."""
        return (pa * PARTS - pa * (pa - 1) // 2 + pb) * 4 + product

    def a_stride(channel_blocks):  # bytes from a tile's row to the next
        return T.int64(tile_bytes) if window is None else channel_blocks * (tile_bytes * PARTS)

    def tasks(rows, columns):
        return pairs(rows) if rows_outer else pairs(columns)

    def blocks(rows, columns):
        return pairs(columns) if rows_outer else pairs(rows)

    @T.prim_func(private=True)
    def amx_matmul(a_data: T.handle, b_data: T.handle, c_data: T.handle, rows: T.int64,
                   columns: T.int64, step_blocks: T.int64, width: T.int64,
                   channel_blocks: T.int64, a_rows: T.int64):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True,
                     "cpu_schedule_rule": "AMX"})
        a = T.match_buffer(a_data, a_shape(rows, step_blocks, channel_blocks, a_rows), "uint16")
        b = T.match_buffer(b_data, (2 * pairs(columns), step_blocks, PARTS, STEPS // 2,
                                    2 * COLUMNS), "uint16")
        c = T.match_buffer(c_data, (rows, columns), "float32")
        # Linux lends a process AMX's 8 KiB of tile state only once it asks (else the first
        # tile instruction raises SIGILL); asking again is a no-op.
        T.evaluate(T.call_extern("int64", "syscall",
                                 *[T.int64(number) for number in AMX_PERMISSION_SYSCALL]))
        for task in T.parallel(tasks(rows, columns)):
            config = T.alloc_buffer((64,), "uint8", scope="local")
            staged = T.alloc_buffer((2 * ROWS, 2 * COLUMNS), "float32", scope="local")
            for byte in range(64):
                config[byte] = T.uint8(0)
            config[0] = T.uint8(1)  # palette 1: 8 tiles of up to 16 rows of 64 bytes
            for tile in range(8):
                config[16 + 2 * tile] = T.uint8(tile_bytes)
                config[48 + tile] = T.uint8(ROWS)
            T.evaluate(_intrinsic("ldtilecfg", T.address_of(config[0])))
            for block in range(blocks(rows, columns)):
                row_tile = (task if rows_outer else block) * 2
                column_tile = (block if rows_outer else task) * 2
                for tile in T.unroll(4):
                    T.evaluate(_intrinsic("tilezero", T.int8(tile)))
                for step_block in range(step_blocks):
                    # Tiles 4, 5: A's two row tiles; 6, 7: B's two column tiles; 0-3: C.
                    for pa in T.unroll(PARTS):
                        T.evaluate(_intrinsic("tileloadd64", T.int8(4), T.address_of(a_row(
                            a, row_tile * ROWS, step_block, pa, width, channel_blocks)),
                            a_stride(channel_blocks)))
                        T.evaluate(_intrinsic("tileloadd64", T.int8(5), T.address_of(a_row(
                            a, row_tile * ROWS + ROWS, step_block, pa, width, channel_blocks)),
                            a_stride(channel_blocks)))
                        for pb in T.unroll(PARTS):
                            if pa + pb < PARTS:  # products of 2^-16 of a product and more
                                T.evaluate(_intrinsic("tileloadd64", T.int8(6), T.address_of(
                                    b[column_tile, step_block, pb, 0, 0]), T.int64(tile_bytes)))
                                T.evaluate(_intrinsic("tileloadd64", T.int8(7), T.address_of(
                                    b[column_tile + 1, step_block, pb, 0, 0]), T.int64(tile_bytes)))
                                for product in T.unroll(4):  # C tile: A tile 4 + row, B 6 + column
                                    T.evaluate(_intrinsic("tdpbf16ps", T.int8(product), T.int8(
                                        4 + product // 2), T.int8(6 + product % 2)))
                                    if step_block + 1 < step_blocks:
                                        _prefetch_weights(b, column_tile, step_block + 1,
                                                          product_slot(pa, pb, product))
                                        prefetch_activations(a, row_tile, step_block + 1,
                                                             product_slot(pa, pb, product),
                                                             width, channel_blocks)
                                    else:
                                        _prefetch_output(c, row_tile, column_tile,
                                                         product_slot(pa, pb, product), rows,
                                                         columns)
                                    if not rows_outer and block > 0 and blocks(
                                            rows, columns) >= _SPREAD_BLOCKS and \
                                            task + 1 < tasks(rows, columns):
                                        _prefetch_next_task(b, column_tile, step_blocks, (
                                            (block - 1) * step_blocks + step_block) * _PRODUCTS
                                            + product_slot(pa, pb, product),
                                            # (at least 1: a task of fewer blocks builds it too)
                                            T.max(blocks(rows, columns) - 1, 1) * step_blocks *
                                            _PRODUCTS)
                i0, j0 = row_tile * ROWS, column_tile * COLUMNS
                if (rows % (2 * ROWS) == 0 and columns % (2 * COLUMNS) == 0) or (
                        i0 + 2 * ROWS <= rows and j0 + 2 * COLUMNS <= columns):
                    for tile in T.unroll(4):
                        T.evaluate(_intrinsic("tilestored64", T.int8(tile), T.address_of(
                            c[i0 + tile // 2 * ROWS, j0 + tile % 2 * COLUMNS]), columns * 4))
                else:  # a block past C's edge: through a whole block on the stack
                    for tile in T.unroll(4):
                        T.evaluate(_intrinsic("tilestored64", T.int8(tile), T.address_of(
                            staged[tile // 2 * ROWS, tile % 2 * COLUMNS]), T.int64(8 * COLUMNS)))
                    for i, j in T.grid(2 * ROWS, 2 * COLUMNS):
                        if i0 + i < rows and j0 + j < columns:
                            c[i0 + i, j0 + j] = staged[i, j]
            T.evaluate(_intrinsic("tilerelease"))

    if window is None:  # width, channel_blocks and a_rows size a window's A only
        unused = {param.name: param for param in amx_matmul.params}
        amx_matmul = amx_matmul.specialize({unused[name]: tirx.const(1, "int64")
                                            for name in ("width", "channel_blocks", "a_rows")})
    return amx_matmul


# ---------------------------------------------------------------------------------------
# The graph rewrite


def _constant_array(expr, lookup) -> np.ndarray | None:
    """A view of a constant's data, or of a constant's permute_dims (weights in another
    layout, folded later), else None; ``lookup`` gives a var's bound value."""
    if isinstance(expr, relax.Var):
        bound = lookup(expr)
        if op_name(bound) != "relax.permute_dims":
            return None
        value = _constant_array(bound.args[0], lookup)
        axes = bound.attrs.axes
        return None if value is None else np.transpose(
            value, None if axes is None else [int(a) for a in axes])
    return constant_view(expr) if isinstance(expr, tvm.ir.expr.Constant) else None


def _float32(*exprs) -> bool:
    return all(str(e.ty.dtype) == "float32" for e in exprs)


def _matmul_operands(call: relax.Call, lookup):
    """(x dims, [K, N] weights, None) of a float32 matmul by constant weights, else None."""
    x, weight = call.args
    x_dims, weight_dims = static_dims(x), static_dims(weight)
    if x_dims is None or weight_dims is None or len(weight_dims) != 2 or len(x_dims) < 2 \
            or x_dims[-1] != weight_dims[0] or not _float32(x, weight, call):
        return None
    weights = _constant_array(weight, lookup)
    return None if weights is None else (x_dims, weights, None)


def _convolution_operands(call: relax.Call, lookup):
    """(x dims, [KH KW C, O] weights, Window or None) of a float32 NHWC convolution by
    constant OHWI weights, ungrouped and undilated, of a multiple of STEPS input channels and
    equal strides of 1 or 2 (2 x 2 phases at most), else None. The Window is None for a 1x1
    unpadded one (its pixels are the rows: _pointwise_parts)."""
    attrs = call.attrs
    x_dims, weight_dims = static_dims(call.args[0]), static_dims(call.args[1])
    strides = [int(s) for s in attrs.strides]
    if (x_dims is None or weight_dims is None or attrs.data_layout != "NHWC"
            or attrs.kernel_layout != "OHWI" or (attrs.out_layout or "NHWC") != "NHWC"
            or attrs.groups != 1 or any(int(d) != 1 for d in attrs.dilation)
            or strides[0] != strides[1] or strides[0] not in (1, 2) or x_dims[3] % STEPS
            or not _float32(*call.args, call)):
        return None
    weights = _constant_array(call.args[1], lookup)
    if weights is None:
        return None
    weights = weights.reshape(weights.shape[0], -1).T
    padding = [int(p) for p in attrs.padding]
    if weight_dims[1:3] == [1, 1] and not any(padding):
        return x_dims, weights, None
    batch, height, width, channels = x_dims
    window = Window(batch, -(-(height + padding[0] + padding[2]) // strides[0]),
                    -(-(width + padding[1] + padding[3]) // strides[0]), channels // STEPS,
                    tuple(weight_dims[1:3]), strides[0])
    return x_dims, weights, window


@relax.expr_functor.mutator
class _AmxProducts(relax.expr_functor.PyExprMutator):
    def __init__(self, mod, weight_files: WeightFiles | None):
        super().__init__(mod)
        self.kernels: dict[tuple, tvm.ir.GlobalVar] = {}  # one AMX kernel a shape
        self.parts_kernels: dict[tuple, tuple] = {}  # (kernel, parts' shape) an input shape
        self.weight_files = weight_files

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = self.visit_expr_post_order(call)
        name = op_name(call)
        if name == "relax.matmul":
            operands = _matmul_operands(call, self.lookup_binding)
        elif name == "relax.nn.conv2d":
            operands = _convolution_operands(call, self.lookup_binding)
        else:
            return call
        out_dims = static_dims(call)
        rows = int(np.prod(out_dims[:-1]))
        if operands is None or rows < MIN_ROWS:
            return call
        x_dims, weights, window = operands
        depth, columns = weights.shape
        if 2 * rows * depth * columns < MIN_FLOPS:
            return call
        x = call.args[0]
        if window is not None:
            # C's rows are the phase images' pixels; for one image, up to its last output row
            rows = window.rows if window.batch > 1 else out_dims[1] * window.width
            parts = (_window_parts, window, tuple(int(p) for p in call.attrs.padding[:2]))
        elif name == "relax.matmul":
            parts = (_activation_parts, _round_up(rows, 2 * ROWS), _round_up(depth, STEPS))
        else:
            parts = (_pointwise_parts, tuple(int(v) for v in call.attrs.strides),
                     _round_up(rows, 2 * ROWS))
        parts_key = (parts[0], tuple(x_dims), *parts[1:])
        if parts_key not in self.parts_kernels:
            kernel, shape = parts_kernel(*parts_key)
            self.parts_kernels[parts_key] = self.builder_.add_func(kernel, "amx_parts"), shape
        kernel, shape = self.parts_kernels[parts_key]
        parts_call = relax.call_tir(kernel, [x], relax.TensorType(shape, "uint16"))
        key = (rows, depth, columns, window)
        if key not in self.kernels:
            self.kernels[key] = self.builder_.add_func(amx_kernel(*key), "amx_matmul")
        product = relax.call_tir(
            self.kernels[key], [self.builder_.emit(parts_call), self._weight_parts(weights)],
            relax.TensorType([rows, columns], "float32"))
        if window is not None:  # C's rows are the phase image's pixels: the outputs' come out
            images = relax.op.reshape(self.builder_.emit(product), [
                window.batch, rows // (window.batch * window.width), window.width, columns])
            return relax.op.strided_slice(self.builder_.emit(images), axes=[1, 2],
                                          begin=[0, 0], end=out_dims[1:3])
        if len(out_dims) == 2:
            return product
        return relax.op.reshape(self.builder_.emit(product), out_dims)

    def _weight_parts(self, weights: np.ndarray) -> relax.Constant:
        """The weights' parts as a constant, made in a weight file a slab at a time where
        there are weight files (the parts leave memory as they are written)."""
        shape = weight_parts_shape(*weights.shape)
        out = self.weight_files.empty(shape, "uint16") if self.weight_files else None
        if out is None:
            return computed_constant(shape, "uint16", lambda array: weight_parts(weights, array))
        weight_parts(weights, out, lambda: self.weight_files.release(out))
        self.weight_files.release(weights)  # read: where it is a weight file's, it leaves too
        return relax.const(tvm.runtime.from_dlpack(out))


def amx_products(weight_files: WeightFiles | None = None) -> tvm.transform.Pass:
    """The rewrite, the weights' parts written to ``weight_files`` where given."""

    @tvm.transform.module_pass(opt_level=0, name="AmxProducts")
    def rewrite(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return rewrite_functions(mod, lambda m, _f: _AmxProducts(m, weight_files))

    return rewrite
