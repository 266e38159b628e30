"""ODLA's CustomOp: the user's implementation registered for its function name
(relay_bridge.custom_ops), as a TE call, a TIR call, or a call of an external C function."""

from __future__ import annotations

from tvm import relax

from ..custom_ops import c_function_module, custom_op_implementation
from ..errors import LoweringError
from ..registry import register
from .common import static_dims


@register("CustomOp")
def custom_op(emit, *inputs, op_name, function_name, attributes):
    implementation = custom_op_implementation(function_name)
    attributes = dict(attributes)
    if implementation.te is not None:
        result = emit.te(implementation.te, *inputs, **attributes)
        if isinstance(result.ty, relax.TupleType):
            return [relax.TupleGetItem(result, i) for i in range(len(result.ty.fields))]
        return result
    out_types = _output_types(implementation, op_name, inputs, attributes)
    if implementation.prim_func is not None:
        result = emit.tir(function_name, implementation.prim_func, list(inputs),
                          out_types if len(out_types) > 1 else out_types[0])
    else:
        wrapper, modules = c_function_module(implementation, len(inputs), len(out_types))
        result = emit.extern(wrapper, modules, list(inputs),
                             out_types if len(out_types) > 1 else out_types[0])
    if len(out_types) > 1:
        return [relax.TupleGetItem(result, i) for i in range(len(out_types))]
    return result


def _output_types(implementation, op_name, inputs, attributes) -> list[relax.TensorType]:
    shapes = []
    for x in inputs:
        dims = static_dims(x)
        if dims is None:
            raise LoweringError(f"custom op {op_name}: input {x.ty} has a dim known only at run "
                                "time; a PrimFunc or C implementation needs static shapes")
        shapes.append((tuple(dims), str(x.ty.dtype)))
    try:
        declared = list(implementation.output_types(shapes, attributes))
        return [relax.TensorType([int(d) for d in shape], str(dtype)) for shape, dtype in declared]
    except (TypeError, ValueError) as err:
        raise LoweringError(f"custom op {op_name}: output_types of {implementation.function_name!r} "
                            f"gave {err}; expected a list of (shape, dtype) pairs") from None
