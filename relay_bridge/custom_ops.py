"""User implementations of ODLA's CustomOp, by function name: a TE function, a TIR PrimFunc,
or an external C function compiled into the module. The CustomOp emitter
(emitters/custom.py) lowers a CustomOp to the implementation registered for its name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import tirx

from toolchain import compile_object

from .errors import LoweringError

# (input shapes and dtypes, attributes) -> one (shape, dtype) per output
OutputTypes = Callable[[list[tuple[tuple[int, ...], str]], dict], list[tuple[tuple[int, ...], str]]]


@dataclass(frozen=True)
class CustomOpImplementation:
    function_name: str
    te: Callable | None = None  # te(*input TE tensors, **attributes) -> a TE tensor or a list
    prim_func: tirx.PrimFunc | None = None  # destination-passing: inputs, then outputs
    c_source: str | None = None  # C defining int <function_name>(DLTensor**, int, DLTensor**, int)
    output_types: OutputTypes | None = None  # for prim_func and c_source


CUSTOM_OPS: dict[str, CustomOpImplementation] = {}


def register_custom_op(implementation: CustomOpImplementation) -> None:
    kinds = [k for k in ("te", "prim_func", "c_source") if getattr(implementation, k) is not None]
    if len(kinds) != 1:
        raise LoweringError(f"custom op {implementation.function_name!r}: give exactly one of a "
                            f"TE function, a TIR PrimFunc or C source; given {kinds or 'none'}")
    if implementation.te is None and implementation.output_types is None:
        raise LoweringError(f"custom op {implementation.function_name!r}: a PrimFunc or C "
                            "function needs output_types (TE infers them)")
    if implementation.prim_func is not None and not isinstance(implementation.prim_func,
                                                               tirx.PrimFunc):
        raise LoweringError(f"custom op {implementation.function_name!r}: prim_func is a "
                            f"{type(implementation.prim_func).__name__}; expected a tvm.tirx.PrimFunc")
    CUSTOM_OPS[implementation.function_name] = implementation


def custom_op_implementation(function_name: str) -> CustomOpImplementation:
    if function_name not in CUSTOM_OPS:
        raise LoweringError(f"custom function {function_name!r} has no lowering to Relax: no "
                            f"implementation is registered for it (registered: "
                            f"{', '.join(sorted(CUSTOM_OPS)) or 'none'}); register one with "
                            "odla_tvm.register_custom_op")
    return CUSTOM_OPS[function_name]


def c_function_module(implementation: CustomOpImplementation, inputs: int,
                      outputs: int) -> tuple[str, list[tvm.runtime.Module]]:
    """The exported name of a wrapper that calls the C function with the tensors' DLTensors,
    and the modules (the C code, the wrapper) that export_library links into the model."""
    name = implementation.function_name
    wrapper = f"odla_custom_{name}_{inputs}_{outputs}"
    params = ", ".join(f"tvm::ffi::TensorView t{i}" for i in range(inputs + outputs))
    tensors = lambda start, count: ", ".join(  # noqa: E731
        f"as_dltensor(t{i})" for i in range(start, start + count))
    source = f"""#include <tvm/ffi/function.h>
#include <tvm/ffi/container/tensor.h>
extern "C" int {name}(DLTensor** inputs, int num_inputs, DLTensor** outputs, int num_outputs);
// TVM's tensors are compact: no strides.
static DLTensor as_dltensor(const tvm::ffi::TensorView& t) {{
  return DLTensor{{t.data_ptr(), t.device(), t.ndim(), t.dtype(),
                  const_cast<int64_t*>(t.shape().data()), nullptr, t.byte_offset()}};
}}
static void {wrapper}_impl({params}) {{
  DLTensor tensors[] = {{{tensors(0, inputs + outputs)}}};
  DLTensor* inputs[{inputs}];
  DLTensor* outputs[{outputs}];
  for (int i = 0; i < {inputs}; ++i) inputs[i] = &tensors[i];
  for (int i = 0; i < {outputs}; ++i) outputs[i] = &tensors[{inputs} + i];
  int status = {name}(inputs, {inputs}, outputs, {outputs});
  if (status != 0) TVM_FFI_THROW(RuntimeError) << "custom function {name} returned " << status;
}}
TVM_FFI_DLL_EXPORT_TYPED_FUNC({wrapper}, {wrapper}_impl);
"""
    objects = [compile_object(implementation.c_source, language="c"), compile_object(source)]
    return wrapper, [tvm.runtime.load_static_library(objects[0], []),
                     tvm.runtime.load_static_library(objects[1], [wrapper])]
