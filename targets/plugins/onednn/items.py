"""The oneDNN plugin's computation items: which kinds of op it takes (onednn.ops)."""

from __future__ import annotations

OP_KINDS = ("conv2d", "matmul", "pool", "concat", "softmax", "layer_norm",
            "elementwise", "transpose", "lrn")  # what the onednn.ops item chooses among
ITEMS = {"onednn.ops": f"the kinds of op oneDNN takes, a list from {list(OP_KINDS)} (default "
                       "all); the others stay with TVM"}


def check_item(name: str, value):
    """onednn.ops: a list of op kinds from OP_KINDS."""
    kinds = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) \
        else None
    if kinds is None or not all(kind in OP_KINDS for kind in kinds):
        raise ValueError(f"expected a list of op kinds from {list(OP_KINDS)}")
    return tuple(kinds)
