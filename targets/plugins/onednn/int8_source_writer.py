"""The C++ an int8 region (int8_patterns.py) becomes: its product as int8_region.h's Int8Spec
and a function handing it to int8_runtime.cc, both compiled as static libraries linked into
the model (the runtime once per machine, cached)."""

from __future__ import annotations

from importlib import resources

import tvm
from tvm import relax

from .. import composite_steps, static_library
from .int8_patterns import CODEGEN, _dims
from .library import include_dir
from .source_writer import _list, _pads, _source_dir

CALLS_FUNCTION = "odla_onednn_int8_calls"  # exported: how many int8 regions oneDNN has run


def _dims_init(dims) -> str:
    return f"{{{len(dims)}, {_list(dims)}}}"  # int8_region.h's Dims


def _nchw(dims):
    """NHWC (or OHWI) dims in NCHW's (OIHW's) order."""
    return (dims[0], dims[3], dims[1], dims[2])


def _spec(region: relax.Function) -> str:
    """The region's Int8Spec initializer: one product, its source and weights parameters."""
    steps, results = composite_steps(region)
    if len(steps) != 1 or results != [("step", 0)]:
        raise ValueError(f"{CODEGEN} region {region.attrs['global_symbol']}: {len(steps)} "
                         "products; its patterns make regions of one")
    step = steps[0]
    call = step.calls[0]
    src, weights = (step.inputs[index] for _, index in step.arguments[0])
    src_dims, weights_dims, dst_dims = _dims(call.args[0]), _dims(call.args[1]), _dims(call)
    channels_last = call.op.name == "relax.nn.conv2d" and call.attrs.data_layout == "NHWC"
    if channels_last:  # oneDNN names dims NCHW and OIHW whatever the layout
        src_dims, dst_dims = (_nchw(d) for d in (src_dims, dst_dims))
        weights_dims = _nchw(weights_dims)
    fields = {"param_count": str(len(region.params)), "src": str(src[1]),
              "src_signed": "true" if str(call.args[0].ty.dtype) == "int8" else "false",
              "weights": str(weights[1]), "channels_last": str(channels_last).lower(),
              "src_dims": _dims_init(src_dims), "dst_dims": _dims_init(dst_dims)}
    if call.op.name == "relax.nn.conv2d":
        attrs = call.attrs
        groups = int(attrs.groups)
        if groups > 1:  # oneDNN's grouped weights: (G, O/G, I/G, H, W), the same bytes
            weights_dims = (groups, weights_dims[0] // groups, *weights_dims[1:])
        pad_l, pad_r = _pads(attrs.padding)
        fields.update(kind="Int8Spec::kConv", strides=_list(attrs.strides),
                      dilates=_list(int(d) - 1 for d in attrs.dilation), pad_l=_list(pad_l),
                      pad_r=_list(pad_r))
    else:
        fields["kind"] = "Int8Spec::kMatmul"
    fields["weights_dims"] = _dims_init(weights_dims)
    ordered = sorted(fields.items(), key=lambda item: _SPEC_FIELDS.index(item[0]))
    return "{" + ", ".join(f".{name} = {value}" for name, value in ordered) + "}"


_SPEC_FIELDS = ("kind", "param_count", "src", "src_signed", "weights", "channels_last", "src_dims",
                "weights_dims", "dst_dims", "strides", "dilates", "pad_l", "pad_r")  # in order


def _region_source(region: relax.Function) -> tuple[str, str]:
    name = str(region.attrs["global_symbol"])
    return name, "\n".join([
        f"static const Int8Spec {name}_spec = {_spec(region)};",
        # TVM's packed-call symbol for the function named ``name``
        (f'extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_{name}(void*, const TVMFFIAny* args, '
         "int32_t num_args, TVMFFIAny*) {"),
        f"  return odla_onednn_int8_run(&{name}_spec, args, num_args);",
        "}"])


def _runtime() -> tvm.runtime.Module:
    """int8_runtime.cc as an object every model library with int8 regions links, compiled
    once per machine and cached."""
    folder = _source_dir()
    source = resources.files("targets.plugins.onednn").joinpath("int8_runtime.cc").read_text()
    return static_library(source, [CALLS_FUNCTION],
                          ["-std=c++20", "-fvisibility=hidden", "-I", include_dir(), "-I", folder],
                          headers=[f"{folder}/int8_region.h"])


def codegen(regions: list[relax.Function]) -> list:
    names, bodies = zip(*(_region_source(r) for r in regions))
    source = "\n\n".join(['#include "int8_region.h"', "using namespace odla_onednn_int8;",
                          *bodies])
    tables = static_library(source, list(names),
                            ["-std=c++20", "-O0", "-I", include_dir(), "-I", _source_dir()],
                            headers=[f"{_source_dir()}/int8_region.h"])
    return [tables, _runtime()]
