"""The C++ a region becomes: a table of steps (region.h's Step, one a composite call) and a
function handing it to runtime.cc, which builds the primitives and repacked weights on the
first call and reuses them; both compiled as static libraries linked into the model."""

from __future__ import annotations

import os
from importlib import resources

import tvm
from tvm import relax

from .. import KEEP_PACKED_WEIGHTS_FUNCTION, PRECISION_ITEM, composite_steps, static_library
from .bf16_policy import product_types
from .library import include_dir
from .source_files import c_list, source_dir
from .patterns import (_is_per_channel, _shape, _transpose_axes, BINARY_POST_OPS, MAX_POST_OPS,
                       UNARY_POST_OPS)

CALLS_FUNCTION = "odla_onednn_calls"  # exported: how many regions oneDNN has run in the module
# The headers of this package runtime.cc includes, directly or not: their text is in the key
# of its cached object, so that a change to any of them rebuilds it.
RUNTIME_HEADERS = ("bf16_types.h", "build_conv_matmul.h", "build_primitives.h", "memory_descs.h",
                   "omp_threads.h", "packed_store.h", "page_release.h", "region.h",
                   "region_state.h", "region_values.h", "scratch.h", "weight_packing.h")


def _shape_init(shape) -> str:
    return f"{{{len(shape)}, {c_list(shape)}}}"  # region.h's Shape


def _operand(source: tuple[str, int]) -> str:
    kind, index = source
    return f"{kind}({index})"  # region.h's param(i) / step(j)


def _pads(padding) -> tuple[tuple[int, int], tuple[int, int]]:
    """Relax's (top, left, bottom, right) as oneDNN's (begin, end) pairs."""
    top, left, bottom, right = (int(p) for p in padding)
    return (top, left), (bottom, right)


class _StepWriter:
    """One composite call as the C++ initializer of a region.h Step."""

    def __init__(self, step):
        self.step = step

    def input_of(self, call_index: int, argument: int) -> tuple[str, int]:
        kind, index = self.step.arguments[call_index][argument]
        assert kind == "input", (self.step.composite, kind)
        return self.step.inputs[index]

    def other_operand(self, call_index: int) -> tuple[tuple[str, int], relax.Expr]:
        """The operand of an elementwise call that is not the chain before it, and its expr."""
        for argument, (kind, _) in enumerate(self.step.arguments[call_index]):
            if kind == "input":
                return self.input_of(call_index, argument), \
                    self.step.calls[call_index].args[argument]
        raise ValueError(f"{self.step.composite}: call {call_index} has no outside operand")

    def is_swish(self, index: int) -> bool:
        """Whether call ``index`` (a sigmoid) and the next are chain * sigmoid(chain)."""
        calls, arguments = self.step.calls, self.step.arguments
        return (calls[index].op.name == "relax.sigmoid" and index + 1 < len(calls)
                and calls[index + 1].op.name == "relax.multiply"
                and ("call", index) in arguments[index + 1]
                and arguments[index][0] in arguments[index + 1])

    def bias_and_post_ops(self, first: int, output_shape, channel_axis: int,
                          takes_bias: bool = True, residual_sum: bool = False) -> dict[str, str]:
        """The calls from ``first`` on as the Step's bias and post-op fields: the first add of a
        per-channel operand is the bias (where the step has one); with ``residual_sum`` (a
        convolution's), the first add of a whole tensor is a sum into the output, which must
        hold it first: oneDNN sums what dst held, so a second would add the same again."""
        bias, post_ops = "none()", []
        calls = self.step.calls
        index = first
        while index < len(calls):
            op = calls[index].op.name
            if self.is_swish(index):
                post_ops.append("{PostOp::kEltwise, none(), dnnl_eltwise_swish}")
                index += 2
                continue
            index += 1
            if op in UNARY_POST_OPS:
                post_ops.append(f"{{PostOp::kEltwise, none(), dnnl_{UNARY_POST_OPS[op]}}}")
                continue
            operand, expr = self.other_operand(index - 1)
            shape = _shape(expr)
            per_channel = _is_per_channel(shape, output_shape, channel_axis)
            if op == "relax.add" and per_channel and index - 1 == first and takes_bias:
                bias = _operand(operand)
            elif op == "relax.add" and residual_sum and shape == output_shape:
                post_ops.append(f"{{PostOp::kResidual, {_operand(operand)}}}")
                residual_sum = False
            else:
                widened = (1,) * (len(output_shape) - len(shape)) + shape
                post_ops.append(f"{{PostOp::kBinary, {_operand(operand)}, "
                                f"dnnl_{BINARY_POST_OPS[op]}, {_shape_init(widened)}}}")
        if len(post_ops) > MAX_POST_OPS:
            raise ValueError(f"{self.step.composite}: {len(post_ops)} post-ops; region.h holds 8")
        return {"bias": bias, "post_op_count": str(len(post_ops)),
                "post_ops": "{" + ", ".join(post_ops) + "}"}

    def conv2d(self) -> dict[str, str]:
        conv = self.step.calls[0]
        attrs = conv.attrs
        weights = _shape(conv.args[1])
        groups = int(attrs.groups)
        if groups > 1:  # oneDNN's grouped weights: (G, O/G, I/G, H, W), the same bytes
            weights = (groups, weights[0] // groups, *weights[1:])
        pad_l, pad_r = _pads(attrs.padding)
        return {"kind": "Step::kConv", "src": _operand(self.input_of(0, 0)),
                "weights": _operand(self.input_of(0, 1)),
                "src_shape": _shape_init(_shape(conv.args[0])),
                "weights_shape": _shape_init(weights), "dst_shape": _shape_init(_shape(conv)),
                "strides": c_list(attrs.strides),
                "dilates": c_list(int(d) - 1 for d in attrs.dilation),
                "pad_l": c_list(pad_l), "pad_r": c_list(pad_r),
                **self.bias_and_post_ops(1, _shape(conv), 1, residual_sum=True)}

    def matmul(self) -> dict[str, str]:
        transposed = self.step.calls[0].op.name == "relax.permute_dims"
        first = 1 if transposed else 0
        matmul = self.step.calls[first]
        weights = self.step.calls[0].args[0] if transposed else matmul.args[1]
        return {"kind": "Step::kMatmul", "src": _operand(self.input_of(first, 0)),
                "weights": _operand(self.input_of(0, 0) if transposed else self.input_of(0, 1)),
                "weights_constant": "true" if "constant" in self.step.composite else "false",
                "weights_transposed": "true" if transposed else "false",
                "src_shape": _shape_init(_shape(matmul.args[0])),
                "weights_shape": _shape_init(_shape(weights)),
                "dst_shape": _shape_init(_shape(matmul)),
                **self.bias_and_post_ops(first + 1, _shape(matmul), len(_shape(matmul)) - 1)}

    def binary(self) -> dict[str, str]:
        """The operand of the output's shape as src, the other (broadcast) as weights."""
        call = self.step.calls[0]
        output_shape = _shape(call)
        full = 0 if _shape(call.args[0]) == output_shape else 1
        other = 1 - full
        return {"kind": "Step::kBinary", "src": _operand(self.input_of(0, full)),
                "weights": _operand(self.input_of(0, other)),
                "src_shape": _shape_init(output_shape),
                "weights_shape": _shape_init(_shape(call.args[other])),
                "dst_shape": _shape_init(output_shape),
                "algorithm": f"dnnl_{BINARY_POST_OPS[call.op.name]}",
                **self.bias_and_post_ops(1, output_shape, len(output_shape) - 1, takes_bias=False)}

    def transpose(self) -> dict[str, str]:
        """src_shape: the transpose's input (a reshape before it is a view); dst_shape: the
        step's result (after a reshape after it)."""
        calls = self.step.calls
        transpose = next(c for c in calls if c.op.name == "relax.permute_dims")
        src = _shape(transpose.args[0])
        return {"kind": "Step::kTranspose", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(src), "dst_shape": _shape_init(_shape(calls[-1])),
                "axes": c_list(_transpose_axes(transpose, len(src)))}

    def lrn(self) -> dict[str, str]:
        """The calls: x*x, pad, the slices, their sum, * alpha/size, + k, ^beta, x / that."""
        calls = self.step.calls
        size = int(self.step.composite.removeprefix("onednn.lrn"))
        shape = _shape(calls[0].args[0])
        power = [c.op.name for c in calls].index("relax.power")  # after * alpha/size, + k
        return {"kind": "Step::kLrn", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(shape), "dst_shape": _shape_init(shape),
                "kernel": c_list([size, size]),
                "scale": _operand(self.other_operand(power - 2)[0]),
                "shift": _operand(self.other_operand(power - 1)[0]),
                "epsilon": _operand(self.other_operand(power)[0])}

    def unary(self) -> dict[str, str]:
        call = self.step.calls[0]
        shape = _shape(call)
        return {"kind": "Step::kEltwise", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(shape), "dst_shape": _shape_init(shape),
                "algorithm": f"dnnl_{UNARY_POST_OPS[call.op.name]}",
                **self.bias_and_post_ops(1, shape, len(shape) - 1, takes_bias=False)}

    def reduction(self) -> dict[str, str]:
        mean = self.step.calls[0]
        return {"kind": "Step::kReduction", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(_shape(mean.args[0])),
                "dst_shape": _shape_init(_shape(mean)), "algorithm": "dnnl_reduction_mean"}

    def softmax(self) -> dict[str, str]:
        softmax = self.step.calls[0]
        shape = _shape(softmax)
        algorithm = "softmax_log" if softmax.op.name == "relax.nn.log_softmax" else "softmax_accurate"
        return {"kind": "Step::kSoftmax", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(shape), "dst_shape": _shape_init(shape),
                "algorithm": f"dnnl_{algorithm}",
                "axis": str(int(softmax.attrs.axis) % len(shape))}

    def layer_norm(self) -> dict[str, str]:
        calls = self.step.calls
        names = [c.op.name for c in calls]
        shape = _shape(calls[0].args[0])
        epsilon_add = names.index("relax.add")  # variance + epsilon
        normalized = names.index("relax.rsqrt" if "relax.rsqrt" in names else "relax.sqrt") + 1
        fields = {"kind": "Step::kLayerNorm", "src": _operand(self.input_of(0, 0)),
                  "src_shape": _shape_init(shape), "dst_shape": _shape_init(shape),
                  "epsilon": _operand(self.other_operand(epsilon_add)[0]),
                  "scale": "none()", "shift": "none()"}
        for index in range(normalized + 1, len(calls)):
            field = "scale" if names[index] == "relax.multiply" else "shift"
            fields[field] = _operand(self.other_operand(index)[0])
        return fields

    def pool2d(self) -> dict[str, str]:
        pool = self.step.calls[0]
        attrs = pool.attrs
        src, dst = _shape(pool.args[0]), _shape(pool)
        kernel = [int(k) for k in attrs.pool_size]
        strides = [int(s) for s in attrs.strides]
        pad_l, pad_r = _pads(attrs.padding)
        # oneDNN derives the output size rounding down: in ceil mode, pad the end so that the
        # last window TVM makes fits.
        pad_r = [max(end, (out - 1) * stride + k - size - begin) for end, out, stride, k, size, begin
                 in zip(pad_r, dst[2:], strides, kernel, src[2:], pad_l)]
        if pool.op.name == "relax.nn.max_pool2d":
            algorithm = "pooling_max"
        elif attrs.count_include_pad:
            algorithm = "pooling_avg_include_padding"
        else:
            algorithm = "pooling_avg_exclude_padding"
        return {"kind": "Step::kPool", "src": _operand(self.input_of(0, 0)),
                "src_shape": _shape_init(src), "dst_shape": _shape_init(dst),
                "algorithm": f"dnnl_{algorithm}", "kernel": c_list(kernel),
                "strides": c_list(strides), "dilates": "{0, 0}", "pad_l": c_list(pad_l),
                "pad_r": c_list(pad_r)}

    def concat(self, sources_name: str) -> dict[str, str]:
        return {"kind": "Step::kConcat", "dst_shape": _shape_init(_shape(self.step.calls[0])),
                "sources": sources_name, "source_count": str(len(self.concat_sources()))}

    def concat_sources(self) -> list[str]:
        """The concatenated operands in order (a composite takes a repeated operand once)."""
        return [_operand(self.step.inputs[index]) for _, index in self.step.arguments[0][0]]

    def declarations(self, sources_name: str) -> list[str]:
        """What the Step's initializer points to, declared before the steps."""
        if not self.step.composite.startswith("onednn.concat"):
            return []
        return [f"static const Operand {sources_name}[] = "
                f"{{{', '.join(self.concat_sources())}}};"]

    def source(self, sources_name: str) -> str:
        kind = self.step.composite.split(".", 1)[1]
        if kind.startswith("concat"):
            fields = self.concat(sources_name)
        else:
            writer = next(w for prefix, w in (("conv2d", self.conv2d), ("matmul", self.matmul),
                                              ("layer_norm", self.layer_norm),
                                              ("softmax", self.softmax), ("log_softmax", self.softmax),
                                              ("max_pool2d", self.pool2d),
                                              ("avg_pool2d", self.pool2d), ("binary", self.binary),
                                              ("reduction", self.reduction),
                                              ("transpose", self.transpose),
                                              ("lrn", self.lrn), ("unary", self.unary))
                          if kind.startswith(prefix))
            fields = writer()
        # Designated initializers name each field; C++ wants them in declaration order.
        ordered = sorted(fields.items(), key=lambda item: _STEP_FIELDS.index(item[0]))
        return "{" + ", ".join(f".{name} = {value}" for name, value in ordered) + "}"


_STEP_FIELDS = ("kind", "src", "weights", "weights_constant", "weights_transposed", "bias",
                "src_shape", "weights_shape", "dst_shape", "algorithm", "kernel", "strides",
                "dilates", "pad_l", "pad_r", "post_op_count", "post_ops", "sources",
                "source_count", "axis", "axes", "scale", "shift", "epsilon")  # region.h's Step, in order


def _region_source(region: relax.Function, types: tuple[str, str]) -> tuple[str, str]:
    """One region as a C++ function of its parameters then its outputs (TVM's DPS call),
    taking them packed; ``types``: its convolutions' and matmuls' (operands, result) types."""
    name = str(region.attrs["global_symbol"])
    steps, results = composite_steps(region)
    if any(kind != "step" for kind, _ in results):
        raise ValueError(f"region {name} returns a parameter; patterns never make one")
    writers = [_StepWriter(step) for step in steps]
    sources = [f"{name}_sources{index}" for index in range(len(steps))]
    step_lines = ",\n    ".join(w.source(s) for w, s in zip(writers, sources))
    lines = [
        *(line for w, s in zip(writers, sources) for line in w.declarations(s)),
        f"static const Shape {name}_params[] = "
        f"{{{', '.join(_shape_init(_shape(p)) for p in region.params)}}};",
        f"static const Step {name}_steps[] = {{\n    {step_lines}}};",
        f"static const int {name}_results[] = {c_list(index for _, index in results)};",
        f"static const RegionSpec {name}_spec = {{{name}_params, {len(region.params)}, "
        f"{name}_steps, {len(steps)}, {name}_results, {len(results)}, {', '.join(types)}}};",
        # TVM's packed-call symbol for the function named ``name`` (what the export macros make)
        f'extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_{name}(void*, const TVMFFIAny* args, '
        "int32_t num_args, TVMFFIAny*) {",
        f"  return odla_onednn_run(&{name}_spec, args, num_args);",
        "}",
    ]
    return name, "\n".join(lines)


def _region_header() -> str:
    return os.path.join(source_dir(), "region.h")


def _runtime() -> tvm.runtime.Module:
    """runtime.cc as an object every model library with regions links: compiled once per
    machine and cached (it takes g++ seconds; the tables of a model's regions take a fraction
    of one). Its symbols are hidden but the call counter and where packed weights are kept:
    each model library has its own."""
    source = resources.files("targets.plugins.onednn").joinpath("runtime.cc").read_text()
    return static_library(source, [CALLS_FUNCTION, KEEP_PACKED_WEIGHTS_FUNCTION],
                          ["-std=c++20", "-fvisibility=hidden", "-I", include_dir(),
                           "-I", source_dir()],
                          headers=[os.path.join(source_dir(), h) for h in RUNTIME_HEADERS])


def codegen(regions: list[relax.Function], items) -> list:
    types = product_types(items.get(PRECISION_ITEM))
    names, bodies = zip(*(_region_source(r, types) for r in regions))
    source = "\n\n".join(['#include "region.h"', "using namespace odla_onednn;", *bodies])
    # C++20 for designated initializers (each step's fields are named); -O0: tables only.
    tables = static_library(source, list(names),
                            ["-std=c++20", "-O0", "-I", include_dir(), "-I", source_dir()],
                            headers=[_region_header()])
    return [tables, _runtime()]
