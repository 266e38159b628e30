"""The C++ an int8 region (int8_patterns.py) becomes: its product as int8_region.h's Int8Spec
and a function handing it to int8_runtime.cc, both compiled as static libraries linked into
the model (the runtime once per machine, cached)."""

from __future__ import annotations

from importlib import resources

import tvm
from tvm import relax

from .. import composite_steps, static_library
from .int8_epilogue import padding_index, product_index, spec_fields
from .int8_patterns import CODEGEN, primitive_of
from .library import include_dir
from .source_files import c_list, source_dir

CALLS_FUNCTION = "odla_onednn_int8_calls"  # exported: how many int8 products oneDNN has run


def _dims_init(dims) -> str:
    return f"{{{len(dims)}, {c_list(dims)}}}"  # int8_region.h's Dims


def _spec(region: relax.Function, step) -> str:
    """A product's Int8Spec initializer: its source and weights parameters (or the earlier
    product whose result is its source), its primitive and its epilogue's operands."""
    first, pad = product_index(step), padding_index(step)
    call = step.calls[first]
    source = step.arguments[first][0] if pad is None else step.arguments[pad][0]
    src, weights = (step.inputs[index] for _, index in (source, step.arguments[first][1]))
    p = primitive_of(call, None if pad is None else step.calls[pad])
    epilogue = spec_fields(step, region.params) if len(step.calls) > 1 + (pad is not None) else {}
    fields = {**epilogue, "kind": "Int8Spec::kConv" if p["conv"] else "Int8Spec::kMatmul",
              "param_count": str(len(region.params)),
              "src": str(src[1]) if src[0] == "param" else "-1",
              "src_step": str(src[1]) if src[0] == "step" else "-1",
              "src_signed": "true" if str(call.args[0].ty.dtype) == "int8" else "false",
              "weights": str(weights[1]), "channels_last": str(p["channels_last"]).lower(),
              **{f"{name}_dims": _dims_init(p[name]) for name in ("src", "weights", "dst")},
              **{name: c_list(p[name]) for name in ("strides", "dilates", "pad_l", "pad_r")
                 if name in p}}
    ordered = sorted(fields.items(), key=lambda item: _SPEC_FIELDS.index(item[0]))
    return "{" + ", ".join(f".{name} = {value}" for name, value in ordered) + "}"


_SPEC_FIELDS = ("kind", "param_count", "src", "src_step", "src_signed", "weights", "channels_last", "src_dims",
                "weights_dims", "dst_dims", "strides", "dilates", "pad_l", "pad_r", "src_zero",
                "src_scale", "weights_scale", "weights_scale_per_channel", "bias", "relu",
                "dst_scale", "dst_zero", "dst_type")  # int8_region.h's order


def _region_source(region: relax.Function) -> tuple[str, str]:
    """The region's products as an Int8Spec array, the product each of its outputs is, and
    its packed-call function running them."""
    name = str(region.attrs["global_symbol"])
    steps, results = composite_steps(region)
    if any(kind != "step" for kind, _ in results):
        raise ValueError(f"{CODEGEN} region {name}: an output that no product computes")
    specs = ",\n    ".join(_spec(region, step) for step in steps)
    return name, "\n".join([
        f"static const Int8Spec {name}_specs[] = {{\n    {specs}}};",
        f"static const int {name}_outputs[] = {c_list(index for _, index in results)};",
        # TVM's packed-call symbol for the function named ``name``
        (f'extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_{name}(void*, const TVMFFIAny* args, '
         "int32_t num_args, TVMFFIAny*) {"),
        f"  return odla_onednn_int8_run({name}_specs, {len(steps)}, {name}_outputs, "
        f"{len(results)}, args, num_args);",
        "}"])


def _runtime() -> tvm.runtime.Module:
    """int8_runtime.cc as an object every model library with int8 regions links, compiled
    once per machine and cached."""
    folder = source_dir()
    source = resources.files("targets.plugins.onednn").joinpath("int8_runtime.cc").read_text()
    return static_library(source, [CALLS_FUNCTION],
                          ["-std=c++20", "-fvisibility=hidden", "-I", include_dir(), "-I", folder],
                          headers=[f"{folder}/int8_region.h", f"{folder}/omp_threads.h"])


def codegen(regions: list[relax.Function]) -> list:
    names, bodies = zip(*(_region_source(r) for r in regions))
    source = "\n\n".join(['#include "int8_region.h"', "using namespace odla_onednn_int8;",
                          *bodies])
    tables = static_library(source, list(names),
                            ["-std=c++20", "-O0", "-I", include_dir(), "-I", source_dir()],
                            headers=[f"{source_dir()}/int8_region.h"])
    return [tables, _runtime()]


def register() -> None:
    """Registers the int8 regions' codegen (relax.ext.onednn_int8), which RunCodegen finds by
    that name."""
    tvm.register_global_func(f"relax.ext.{CODEGEN}",
                             lambda functions, _options, _constants: codegen(list(functions)),
                             override=True)
