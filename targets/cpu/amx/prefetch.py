"""The AMX kernel's prefetches into L1, spread between the tile products of a step block:
the next step block's weight lines (and, in kernel.py, the activations'), in a block's last
step block its lines of C for writing, and, in a task of columns with many blocks of rows,
a share of the next task's weights."""

from __future__ import annotations

from tvm import tirx
from tvm.script import tirx as T

from .tiles import COLUMNS, PARTS, ROWS, STEPS

_PRODUCTS = 24  # a step block's tile products: six part products of 2 x 2 tiles
_PART_LINES = STEPS // 2  # lines of 64 bytes in a tile of B
# A column (row) pair's step block's lines, a product's share.
_PREFETCHES = 2 * PARTS * _PART_LINES // _PRODUCTS


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
    memory keeps streaming while the tiles multiply; all at once after a step block's
    products, the tile loads wait behind the prefetches. Weights read from L2 gain too (the
    tile loads wait on L2 otherwise)."""
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
    for ownership from L2 or memory as they store. One step block earlier was no faster."""
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
    the tile loads from L2 wait for."""
    if _next_task_line(step_blocks, slot, slots) > _next_task_line(step_blocks, slot - 1, slots):
        T.evaluate(_prefetch(_weight_line(
            b, column_tile + 2 + _next_task_line(step_blocks, slot, slots) // (
                step_blocks * PARTS * _PART_LINES),
            _next_task_line(step_blocks, slot, slots) // (PARTS * _PART_LINES) % step_blocks,
            _next_task_line(step_blocks, slot, slots) % (PARTS * _PART_LINES))))
