"""ODLA's CustomOp: the user's implementation registered for its function name
(relay_bridge.custom_ops), as a TE call, a TIR call, or a call of an external C function."""

from __future__ import annotations

from tvm import relax, tirx

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
        _check_buffers(implementation, op_name, inputs, out_types)
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
        declared = [([int(d) for d in shape], str(dtype))
                    for shape, dtype in implementation.output_types(shapes, attributes)]
    except (TypeError, ValueError) as err:
        raise LoweringError(f"custom op {op_name}: output_types of {implementation.function_name!r} "
                            f"gave {err}; expected a list of (shape, dtype) pairs") from None
    for shape, dtype in declared:  # the outputs are allocated as declared
        if any(d < 0 for d in shape):
            raise LoweringError(f"custom op {op_name}: output_types of "
                                f"{implementation.function_name!r} declared shape {shape}; "
                                "expected dims of at least 0")
    return [relax.TensorType(shape, dtype) for shape, dtype in declared]


def _check_buffers(implementation, op_name, inputs, out_types) -> None:
    """A PrimFunc addresses its buffers by the shapes it declares: each must be the shape
    of the tensor it is given (the inputs, then the outputs as output_types declared them),
    or it would read or write past that tensor. (A C function is given the tensors' shapes
    and must keep to them itself.)"""
    func = implementation.prim_func
    given = [x.ty for x in inputs] + list(out_types)
    if len(func.params) != len(given):
        raise LoweringError(f"custom op {op_name}: PrimFunc {implementation.function_name!r} "
                            f"takes {len(func.params)} buffers; it is given {len(inputs)} inputs "
                            f"and {len(out_types)} declared outputs")
    for i, (param, ty) in enumerate(zip(func.params, given)):
        buffer = param.ty  # a buffer parameter's type: its shape and dtype
        if not hasattr(buffer, "shape"):
            continue
        dims = [int(d) if isinstance(d, tirx.IntImm) else d for d in buffer.shape]
        wanted = [int(d) for d in ty.shape.values]
        static = all(isinstance(d, int) for d in dims)
        if (static and dims != wanted) or len(dims) != len(wanted) or \
                str(buffer.dtype) != str(ty.dtype):
            role = f"input {i}" if i < len(inputs) else f"output {i - len(inputs)}"
            raise LoweringError(
                f"custom op {op_name}: PrimFunc {implementation.function_name!r} declares its "
                f"{role} as {buffer.dtype}{dims}; it is given {ty.dtype}{wanted}")
