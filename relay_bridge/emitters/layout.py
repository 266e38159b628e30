"""Layout strings and window arithmetic shared by the convolution and pooling lowerings."""

from __future__ import annotations

from tvm import relax, tirx

from ..errors import LoweringError

_SPATIAL = "DHW"


def spatial_rank(x: relax.Expr) -> int:
    rank = x.ty.ndim - 2
    if rank not in (1, 2, 3):
        raise LoweringError(
            f"input {x.ty} has rank {x.ty.ndim}; expected 3, 4 or 5 (batch, channels, 1-3 spatial dims)"
        )
    return rank


def data_layout(rank: int, channels_last: bool) -> str:
    spatial = _SPATIAL[-rank:]
    return f"N{spatial}C" if channels_last else f"NC{spatial}"


def kernel_layout(rank: int, odla_layout: str) -> str:
    """ODLA's kernel layout name (OIS, IOS, SIO, SOI) as a TVM layout string."""
    return odla_layout.replace("S", _SPATIAL[-rank:])


def kernel_permutation(rank: int, src: str, dst: str) -> list[int]:
    """The axis order that turns a kernel in ODLA layout ``src`` into layout ``dst``."""
    src_axes, dst_axes = kernel_layout(rank, src), kernel_layout(rank, dst)
    return [src_axes.index(axis) for axis in dst_axes]


def to_channels_first_order(rank: int) -> list[int]:
    """Axis order from (N, spatial..., C) to (N, C, spatial...)."""
    return [0, rank + 1] + list(range(1, rank + 1))


def to_channels_last_order(rank: int) -> list[int]:
    """Axis order from (N, C, spatial...) to (N, spatial..., C)."""
    return [0] + list(range(2, rank + 2)) + [1]


def spatial_dims(x: relax.Expr, channels_last: bool) -> list[int]:
    dims = list(x.ty.shape.values)
    return dims[1:-1] if channels_last else dims[2:]


def check_window(input_dims, window, strides, dilations, paddings_front, paddings_back):
    """Refuse a window that does not fit its padded input, naming the dim."""
    for axis, values in {
        "window": window,
        "strides": strides,
        "dilations": dilations,
        "paddings_front": paddings_front,
        "paddings_back": paddings_back,
    }.items():
        if len(values) != len(input_dims):
            raise LoweringError(
                f"{axis} has {len(values)} entries; expected {len(input_dims)} (one per spatial dim)"
            )
    for i, (size, k, s, d, f, b) in enumerate(
        zip(input_dims, window, strides, dilations, paddings_front, paddings_back)
    ):
        if s < 1 or d < 1 or k < 1:
            raise LoweringError(
                f"spatial dim {i}: window {k}, stride {s}, dilation {d}; expected all >= 1"
            )
        if not isinstance(size, tirx.IntImm):
            continue  # a dynamic dim is checked at run time
        padded = int(size) + f + b
        extent = d * (k - 1) + 1
        if extent > padded:
            raise LoweringError(
                f"spatial dim {i}: window extent {extent} (size {k}, dilation {d}) is larger "
                f"than the padded input {padded} (size {int(size)} + padding {f}+{b})"
            )
