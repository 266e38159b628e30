"""The bfloat16 parts of float32 operands: each float32 is the exact sum of three bfloat16
parts (its bits cut after 8, 16 and 24 significant bits). The activations' parts are made by
a kernel (as tiles of A: rows, pointwise pixels or a convolution's Window), scheduled here;
the weights' parts (as tiles of B) when compiling, a slab of columns at a time."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx

from ..schedules import RULE_ATTR
from .tiles import _round_up, COLUMNS, PARTS, ROWS, STEPS

_SLAB_COLUMNS = 1024  # weight_parts' columns at a time
_SMALLEST_NORMAL = 0x0080  # bfloat16 2^-126


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
    # every element took most of the time.
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
    through a reshape to [M, K], whose index a fused producer (a GELU) is slower through."""
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
    once; the default rules' loops made each part alone, and each of those computed all
    three)."""
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
    ``after_slab`` after each (made whole, a large weight's parts needed four temporaries
    as large)."""
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
