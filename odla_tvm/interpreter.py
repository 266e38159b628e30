"""Interpret mode: an op whose operands hold data runs at once, on the same TVM kernels as
the compiled path. Each op is compiled once per (op, attributes, operand types) and cached,
so a loop of eager calls compiles nothing after its first pass."""

from __future__ import annotations

import logging
import threading
from collections import Counter

import relay_bridge
import targets

from .types import run_failure

log = logging.getLogger(__name__)

_modules: dict = {}
_lock = threading.Lock()
statistics = Counter()  # "compiled" and "executed" op counts, for callers and tests


def _frozen(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _module(op_name: str, operands: list, attrs: dict) -> targets.CompiledModule:
    key = (op_name, _frozen(attrs),
           tuple(None if v is None else (v.data.shape, str(v.data.dtype)) for v in operands))
    with _lock:
        module = _modules.get(key)
        if module is None:
            graph = relay_bridge.GraphBuilder()
            inputs = [None if v is None else graph.input(f"in{i}", v.data.shape, str(v.data.dtype))
                      for i, v in enumerate(operands)]
            outputs = graph.apply(op_name, inputs, attrs, op_name.lower())
            mod = graph.build([h for h in inputs if h is not None], outputs)
            module = targets.compile_module(mod, targets.host_cpu())
            _modules[key] = module
            statistics["compiled"] += 1
            log.debug("interpret mode compiled %s for %s", op_name, key[2])
    return module


def execute(op_name: str, operands: list, attrs: dict, results: list) -> None:
    """Runs one op on its operands' data and stores each output in ``results[i].data``."""
    try:
        module = _module(op_name, operands, attrs)
        arrays = module.run([v.data for v in operands if v is not None])
    except Exception as err:  # noqa: BLE001 (TVM raises many kinds; the caller gets one)
        raise run_failure(err, f"interpret mode could not run {op_name}") from None
    statistics["executed"] += 1
    for value, array in zip(results, arrays):
        value.data = array


def clear_cache() -> None:
    with _lock:
        _modules.clear()
