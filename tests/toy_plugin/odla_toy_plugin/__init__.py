"""A toy vendor plugin, packaged as an installed distribution would be (the dist-info beside
this package declares the entry point): it takes float32 ReLUs and runs them in C++ that it
generates, so tests can tell its code ran by the counter the C++ keeps."""

from tvm.relax.dpl.pattern import is_op, wildcard

from targets import PluginPattern, VendorPlugin
from targets.plugins import composite_steps, static_library

CALLS_FUNCTION = "odla_toy_plugin_calls"  # returns how many regions the toy code has run


def _patterns(items):
    """Float32 ReLUs of at least the toy.min_elements item's size (default: any)."""
    least = items.get("toy.min_elements", 0)

    def takes(context) -> bool:
        ty = context.annotated_expr["root"].ty
        size = 1
        for dim in ty.shape.values:
            size *= int(dim)
        return ty.dtype == "float32" and size >= least

    relu = is_op("relax.nn.relu")(wildcard())
    return [PluginPattern("toy.relu", relu, {"root": relu}, takes)]


def _check_item(name, value):
    if not isinstance(value, int) or value < 0:
        raise ValueError("expected an integer >= 0")
    return value


def _region_source(region) -> tuple[str, str]:
    name = str(region.attrs["global_symbol"])
    steps, results = composite_steps(region)
    params = ", ".join(f"tvm::ffi::TensorView p{i}" for i in range(len(region.params)))
    lines = [f"static void {name}_impl({params}, tvm::ffi::TensorView out) {{",
             "  ++toy_calls;",
             "  int64_t n = out.numel();",
             f"  std::vector<std::vector<float>> steps({len(steps)}, std::vector<float>(n));"]
    def operand(kind, index):
        return f"static_cast<const float*>(p{index}.data_ptr())" if kind == "param" \
            else f"steps[{index}].data()"
    for index, step in enumerate(steps):
        assert step.composite == "toy.relu", step.composite
        source = operand(*step.inputs[0])
        lines.append(f"  for (int64_t i = 0; i < n; ++i) steps[{index}][i] = "
                     f"{source}[i] > 0.f ? {source}[i] : 0.f;")
    lines.append(f"  std::copy_n({operand(*results[0])}, n, static_cast<float*>(out.data_ptr()));")
    lines.append("}")
    lines.append(f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({name}, {name}_impl);")
    return name, "\n".join(lines)


def _codegen(regions, _items):
    names, bodies = zip(*(_region_source(r) for r in regions))
    source = "\n".join([
        "#include <algorithm>", "#include <vector>", "#include <tvm/ffi/function.h>",
        "#include <tvm/ffi/container/tensor.h>",
        "static int64_t toy_calls = 0;",
        "static int64_t calls() { return toy_calls; }",
        f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({CALLS_FUNCTION}, calls);", *bodies])
    return [static_library(source, [*names, CALLS_FUNCTION])]


def make_plugin():
    return VendorPlugin(name="toy", device_name="CAMBRICON_MLU220",
                        description="toy plugin: float32 ReLU in generated C++",
                        patterns=_patterns, codegen=_codegen,
                        items={"toy.min_elements": "the smallest ReLU (in elements) it takes"},
                        check_item=_check_item)
