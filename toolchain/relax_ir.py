"""Small reads and makes of Relax IR that both relay_bridge and targets use: a constant's data
as a NumPy view, a constant computed in its own memory, the ops a function calls."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax


def _view(tensor) -> np.ndarray | None:
    """A NumPy view of a TVM tensor's memory (None for a dtype NumPy lacks, bfloat16: NumPy
    2.4 says so with a RuntimeError)."""
    try:
        return np.from_dlpack(tensor)
    except (TypeError, ValueError, BufferError, RuntimeError):
        return None


def constant_view(handle) -> np.ndarray | None:
    """A read-only NumPy view of a constant's data (None for a dtype NumPy lacks, bfloat16)."""
    view = _view(handle.value)
    if view is not None:
        view.flags.writeable = False
    return view


def computed_constant(shape, dtype: str, write) -> relax.Constant:
    """A Relax constant whose data ``write(out)`` puts in ``out``, a NumPy view of the
    constant's own memory: a result computed in place, never copied (folded weights are
    large)."""
    tensor = tvm.runtime.empty(tuple(shape), dtype)
    out = _view(tensor)
    if out is None:  # bfloat16: computed beside, then copied in
        out = tensor.numpy()
        write(out)
        tensor.copyfrom(out)
    else:
        write(out)
    return relax.const(tensor)


def op_names(func: relax.Function) -> set[str]:
    """Names of the relax ops ``func`` calls."""
    names = set()

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
            names.add(expr.op.name)

    relax.analysis.post_order_visit(func, visit)
    return names
