"""``odla_CustomOp`` (ops/odla_ops_custom.h) and the registry of user implementations it
reaches: a TVM TE function, a TIR PrimFunc, or an external C function compiled into the
module."""

from __future__ import annotations

from collections.abc import Callable

import relay_bridge

from ..types import OdlaError, Status, ValueType, element_type_of
from ._args import apply_values, invalid


def register_custom_op(function_name: str, *, te: Callable | None = None, tir=None,
                       c_source: str | None = None,
                       output_types: Callable[[list[ValueType], dict], list[ValueType]] | None = None
                       ) -> None:
    """Registers the implementation CustomOp calls for ``function_name``; exactly one of:

    - ``te(*inputs, **attributes)``: TVM TE tensors in, a TE tensor (or a list) out;
    - ``tir``: a TIR PrimFunc in destination-passing style (inputs, then outputs);
    - ``c_source``: C source defining ``int <function_name>(DLTensor** inputs, int num_inputs,
      DLTensor** outputs, int num_outputs)``, returning 0 on success; it is compiled with the
      host C compiler and linked into the module (and into exported libraries).

    ``output_types(input_types, attributes) -> [ValueType, ...]`` is required for ``tir`` and
    ``c_source`` (TE infers them). Registering a name again replaces its implementation."""
    if not isinstance(function_name, str) or not function_name.isidentifier():
        raise OdlaError(Status.INVALID_PARAM, f"register_custom_op: function_name is "
                                              f"{function_name!r}; expected a C identifier")
    if output_types is not None and not callable(output_types):
        raise OdlaError(Status.INVALID_PARAM, f"register_custom_op: output_types is a "
                                              f"{type(output_types).__name__}; expected a function")
    try:
        from relay_bridge.custom_ops import CustomOpImplementation  # the compiler: a build

        relay_bridge.register_custom_op(CustomOpImplementation(
            function_name, te=te, prim_func=tir, c_source=c_source,
            output_types=None if output_types is None else _typed(output_types)))
    except relay_bridge.LoweringError as err:
        raise OdlaError(Status.INVALID_PARAM, f"register_custom_op: {err}") from None


def _typed(output_types):
    """``output_types`` over ODLA ValueTypes, as the bridge calls it: (shape, dtype) pairs."""
    def bridge_output_types(inputs, attributes):
        given = [ValueType(element_type_of(dtype), shape) for shape, dtype in inputs]
        declared = output_types(given, attributes)
        if not all(isinstance(t, ValueType) for t in declared):
            raise TypeError(f"{declared!r}, not a list of ValueType")
        return [(t.shape.dims, str(t.dtype)) for t in declared]
    return bridge_output_types


def custom_op(inputs, op_name: str, function_name: str, ids=None, attributes: dict | None = None):
    """Calls the implementation registered for ``function_name`` on ``inputs`` with
    ``attributes`` (plain values: numbers, strings, tuples); ``op_name`` names the op (as
    the model's framework called it). Returns one value per output."""
    for name, text in (("op_name", op_name), ("function_name", function_name)):
        if not isinstance(text, str) or not text:
            raise invalid("CustomOp", f"{name} is {text!r}; expected a non-empty string")
    if attributes is not None and not isinstance(attributes, dict):
        raise invalid("CustomOp", f"attributes is a {type(attributes).__name__}; expected a dict")
    inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    attributes = tuple(sorted((attributes or {}).items()))
    return apply_values("CustomOp", {}, {"op_name": op_name, "function_name": function_name,
                                         "attributes": attributes}, ids, variadic=tuple(inputs))
