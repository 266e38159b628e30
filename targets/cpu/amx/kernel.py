"""The AMX kernel: C = A B from the parts of A and B. A task computes 32 x 32 blocks of C,
each in four tiles over the whole reduction: a block of rows across the columns where the
weights' parts fit in L2 (a convolution's), else a block of columns down the rows (a
transformer's weights, read once from memory a run); the tasks run in parallel, each
configuring its thread's tiles (ldtilecfg) first. One template a kind (tasks of rows or
columns, a window or none), specialized to each size."""

from __future__ import annotations

import functools

from tvm import tirx
from tvm.script import tirx as T

from .parts import Window
from .prefetch import (_prefetch, _prefetch_next_task, _prefetch_output, _prefetch_weights,
                       _PREFETCHES, _PRODUCTS, _SPREAD_BLOCKS, _tile_part_row)
from .tiles import _round_up, AMX_PERMISSION_SYSCALL, COLUMNS, PARTS, ROWS, STEPS

_RESIDENT_BYTES = 1 << 20  # weights' parts held in L2 across a task's column blocks
_ROW_TASKS_MIN = 8


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


@functools.cache
def _amx_template(rows_outer: bool, window: tuple | None) -> tirx.PrimFunc:
    """The AMX kernel of one kind (tasks of rows or of columns; a window's ``(kernel,
    stride)`` or None) with its sizes as parameters, for amx_kernel to specialize: rows,
    columns, step_blocks, and a window's width, channel_blocks and A's rows (parsing
    TVMScript is slow, and a model has many sizes of few kinds)."""
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
        it, from L1 much less."""
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
