"""The oneDNN vendor plugin: Intel's deep-learning kernels behind the ODLA device INTEL_DNNL.

It takes float32 NCHW convolutions (with their bias, inference batch norm, residual add and
ReLU fused in as post-ops), matmuls with a constant right-hand side (with bias and ReLU), max
and average pooling, and concatenation along channels (without it, the concats joining the
branches of squeezenet's fire modules and inception's blocks would cut the graph into many
regions, with layout reorders at every cut). Each region MergeCompositeFunctions makes becomes
one C++ function over targets/onednn/runtime.h: primitives and repacked weights are built on
the first call and reused, intermediates stay in oneDNN's blocked layouts (see runtime.h).
What it does not take runs as TVM's code in the same module.

The library is oneDNN 3.2 built with GNU OpenMP, from PyPI: ``pip install 'odla-tvm[onednn]'``.
"""

from __future__ import annotations

import os
import sys
from importlib import resources

import tvm
from tvm import relax
from tvm.relax.backend.utils import has_leaking_intermediate_variables
from tvm.relax.dpl.pattern import is_op, is_tuple, wildcard

from .plugins import PluginPattern, PluginUnavailable, VendorPlugin, composite_steps, static_library

# oneDNN's OpenMP threads wait for work asleep, not spinning, unless the user chose: TVM's own
# thread pool runs the ops between regions on the same cores, and spinning OpenMP workers starve
# it and each other whenever the machine is shared (resnet50 on 2 busy cores: 495 ms spinning,
# 112 ms asleep). libgomp reads this when it loads, with the first model library that needs it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

CALLS_FUNCTION = "odla_onednn_calls"  # exported: how many regions oneDNN has run in the module
PREFIX = sys.prefix  # where pip puts the onednn wheels' lib/ and include/
INSTALL_HINT = ("pip install 'odla-tvm[onednn]' (onednn-cpu-gomp==2023.2.0 and "
                "onednn-devel-cpu-gomp==2023.2.0)")


def library_dir() -> str:
    return os.path.join(PREFIX, "lib")


def include_dir() -> str:
    return os.path.join(PREFIX, "include")


def check_available() -> None:
    missing = [path for path in (os.path.join(include_dir(), "dnnl.hpp"),
                                 os.path.join(library_dir(), "libdnnl.so"))
               if not os.path.exists(path)]
    if missing:
        raise PluginUnavailable(f"oneDNN is not installed ({', '.join(missing)} missing); "
                                f"{INSTALL_HINT}")


def link_options() -> list[str]:
    # libgomp: the generated code sets OpenMP's thread count, which oneDNN's threads follow.
    # export_library puts these before the objects that need them, where a linker that drops
    # libraries not yet needed (--as-needed) would drop them: hence --no-as-needed.
    return [f"-L{library_dir()}", f"-Wl,-rpath,{library_dir()}", "-Wl,--no-as-needed",
            "-ldnnl", "-lgomp"]


# ---- patterns ------------------------------------------------------------------------------

def _shape(expr) -> tuple[int, ...] | None:
    """The static shape of a float32 tensor expression, else None."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.dtype != "float32" or ty.shape is None:
        return None
    dims = ty.shape.values
    if not all(isinstance(d, int) or hasattr(d, "value") for d in dims):
        return None
    return tuple(int(d) for d in dims)


def _is_per_channel(operand_shape, output_shape) -> bool:
    """Whether an operand broadcast against ``output_shape`` varies along axis 1 only: a
    per-channel bias or batch-norm scale, (C, 1, 1) or (1, C, 1, 1) for NCHW, (N,) or (1, N)
    for a matmul's (M, N)."""
    if operand_shape is None:
        return False
    channels = output_shape[1]
    trailing = (channels,) + (1,) * (len(output_shape) - 2)
    return operand_shape in (trailing, (1, *trailing))


def _is_constant(expr) -> bool:
    """Weights must be constants: the region repacks them once, keyed on their address."""
    return isinstance(expr, tvm.ir.expr.Constant)


def _plain_ok(context) -> bool:
    """What every pattern needs: float32 static shapes, nothing inside used outside."""
    return (_shape(context.matched_expr) is not None
            and not has_leaking_intermediate_variables(context))


def _fused_ok(context, output_shape) -> bool:
    """The operands of the fused elementwise ops fit the post-ops they become."""
    annotated = context.annotated_expr
    for name in ("bias", "scale", "shift"):
        if name in annotated and not _is_per_channel(_shape(annotated[name]), output_shape):
            return False
    return "residual" not in annotated or _shape(annotated["residual"]) == output_shape


def _conv2d_ok(context) -> bool:
    conv = context.annotated_expr["conv"]
    attrs = conv.attrs
    output_shape = _shape(conv)
    return (_plain_ok(context) and output_shape is not None
            and _shape(conv.args[0]) is not None and _is_constant(conv.args[1])
            and _shape(conv.args[1]) is not None
            and (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NCHW", "OIHW", "NCHW")
            and attrs.out_dtype in ("", "float32")
            and _fused_ok(context, output_shape))


def _matmul_ok(context) -> bool:
    matmul = context.annotated_expr["matmul"]
    weights = context.annotated_expr["weights"]
    output_shape = _shape(matmul)
    src_shape = _shape(matmul.args[0])
    transpose = context.annotated_expr.get("transpose")
    return (_plain_ok(context) and output_shape is not None and len(output_shape) == 2
            and src_shape is not None and len(src_shape) == 2
            and _is_constant(weights) and _shape(weights) is not None and len(_shape(weights)) == 2
            and (transpose is None or [int(a) for a in transpose.attrs.axes] == [1, 0])
            and matmul.attrs.out_dtype in ("", "float32")
            and _fused_ok(context, output_shape))


def _pool2d_ok(context) -> bool:
    pool = context.annotated_expr["root"]
    attrs = pool.attrs
    shape = _shape(pool.args[0])
    # TVM divides a ceil-mode window hanging past the padding by what it covers; oneDNN cannot.
    averages_past_padding = pool.op.name == "relax.nn.avg_pool2d" and attrs.ceil_mode \
        and attrs.count_include_pad
    return (_plain_ok(context) and shape is not None and len(shape) == 4
            and (attrs.layout, attrs.out_layout) == ("NCHW", "NCHW")
            and all(int(d) == 1 for d in attrs.dilation) and not averages_past_padding)


def _concat_ok(context) -> bool:
    concat = context.annotated_expr["root"]
    shapes = [_shape(field) for field in concat.args[0].fields]
    rank = len(shapes[0]) if shapes[0] is not None else 0
    axis = concat.attrs.axis  # None: flattened first
    return (_plain_ok(context) and rank == 4 and axis is not None and int(axis) % rank == 1
            and all(shape is not None and len(shape) == rank for shape in shapes))


def _fused_tail(chain, annotations, tail: str):
    """``chain`` followed by the residual add and ReLU ``tail`` names, annotating them."""
    if "residual" in tail:
        annotations["residual"] = wildcard()
        chain = is_op("relax.add")(chain, annotations["residual"])
    if "relu" in tail:
        chain = is_op("relax.nn.relu")(chain)
    return chain


def _conv2d_pattern(head: str, tail: str) -> PluginPattern:
    """conv2d, then per ``head`` a bias add, a batch norm (multiply and add per channel) or
    both, then per ``tail`` a residual add and a ReLU."""
    conv = is_op("relax.nn.conv2d")(wildcard(), wildcard())
    annotations = {"conv": conv}
    chain = conv
    if "bias" in head:
        annotations["bias"] = wildcard()
        chain = is_op("relax.add")(chain, annotations["bias"])
    if "batch_norm" in head:
        annotations["scale"], annotations["shift"] = wildcard(), wildcard()
        chain = is_op("relax.add")(is_op("relax.multiply")(chain, annotations["scale"]),
                                   annotations["shift"])
    chain = _fused_tail(chain, annotations, tail)
    name = "_".join(filter(None, ["onednn.conv2d", head, tail]))
    return PluginPattern(name, chain, annotations, _conv2d_ok)


def _matmul_pattern(transposed: bool, tail: str) -> PluginPattern:
    """matmul by constant weights (stored (N, K) and transposed, or (K, N)), then per
    ``tail`` a bias add and a ReLU."""
    weights = wildcard()
    annotations = {"weights": weights}
    right = weights
    if transposed:
        right = annotations["transpose"] = is_op("relax.permute_dims")(weights)
    chain = annotations["matmul"] = is_op("relax.matmul")(wildcard(), right)
    if "bias" in tail:
        annotations["bias"] = wildcard()
        chain = is_op("relax.add")(chain, annotations["bias"])
    if "relu" in tail:
        chain = is_op("relax.nn.relu")(chain)
    name = "_".join(filter(None, ["onednn.matmul", "transposed" if transposed else "", tail]))
    return PluginPattern(name, chain, annotations, _matmul_ok)


def _pool2d_pattern(op: str) -> PluginPattern:
    pool = is_op(f"relax.nn.{op}")(wildcard())
    return PluginPattern(f"onednn.{op}", pool, {"root": pool}, _pool2d_ok)


def _concat_pattern(count: int) -> PluginPattern:
    """concat of ``count`` tensors: a Tuple pattern has a fixed number of fields."""
    concat = is_op("relax.concat")(is_tuple([wildcard() for _ in range(count)]))
    return PluginPattern(f"onednn.concat{count}", concat, {"root": concat}, _concat_ok)


# The widest concat taken: one pattern per count (inception's blocks join 4 branches, a
# DenseNet block more); wider ones stay with TVM.
MAX_CONCAT_INPUTS = 16


def prepare(mod: tvm.IRModule) -> tvm.IRModule:
    """Puts every binding in a dataflow block, where FuseOpsByPattern looks (a graph of a
    single op is built without one)."""
    return relax.transform.ConvertToDataflow(min_size=1)(mod)


OP_KINDS = ("conv2d", "matmul", "pool", "concat")  # what the onednn.ops item can choose among
ITEMS = {"onednn.ops": f"the kinds of op oneDNN takes, a list from {list(OP_KINDS)} (default "
                       "all); the others stay with TVM"}


def check_item(name: str, value):
    """onednn.ops: a list of op kinds from OP_KINDS."""
    kinds = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) \
        else None
    if kinds is None or not all(kind in OP_KINDS for kind in kinds):
        raise ValueError(f"expected a list of op kinds from {list(OP_KINDS)}")
    return tuple(kinds)


def patterns(items) -> list[PluginPattern]:
    """Longest first: FuseOpsByPattern gives a binding to the first pattern that takes it.
    Only the op kinds the onednn.ops item names, when it is set."""
    kinds = items.get("onednn.ops", OP_KINDS)
    tails = ("residual_relu", "residual", "relu", "")
    taken = []
    if "conv2d" in kinds:
        taken += [_conv2d_pattern(head, tail) for head in ("bias_batch_norm", "batch_norm", "bias", "")
                  for tail in tails]
    if "matmul" in kinds:
        taken += [_matmul_pattern(transposed, tail) for transposed in (True, False)
                  for tail in ("bias_relu", "bias", "relu", "")]
    if "pool" in kinds:
        taken += [_pool2d_pattern("max_pool2d"), _pool2d_pattern("avg_pool2d")]
    if "concat" in kinds:
        taken += [_concat_pattern(count) for count in range(2, MAX_CONCAT_INPUTS + 1)]
    return taken


# ---- codegen -------------------------------------------------------------------------------

def _list(values) -> str:
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


def _shape_init(shape) -> str:
    return f"{{{len(shape)}, {_list(shape)}}}"  # runtime.h's Shape


def _operand(source: tuple[str, int]) -> str:
    kind, index = source
    return f"{kind}({index})"  # runtime.h's param(i) / step(j)


def _pads(padding) -> tuple[tuple[int, int], tuple[int, int]]:
    """Relax's (top, left, bottom, right) as oneDNN's (begin, end) pairs."""
    top, left, bottom, right = (int(p) for p in padding)
    return (top, left), (bottom, right)


class _StepWriter:
    """One composite call as the C++ initializer of a runtime.h Step."""

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

    def bias_and_post_ops(self, first: int, output_shape) -> dict[str, str]:
        """The calls from ``first`` on as the Step's bias and post-op fields."""
        bias, post_ops = "none()", []
        for index in range(first, len(self.step.calls)):
            op = self.step.calls[index].op.name
            if op == "relax.nn.relu":
                post_ops.append("{PostOp::kRelu, none()}")
                continue
            operand, expr = self.other_operand(index)
            per_channel = _is_per_channel(_shape(expr), output_shape)
            if op == "relax.add" and per_channel and index == first:
                bias = _operand(operand)
            elif op == "relax.multiply":
                post_ops.append(f"{{PostOp::kScale, {_operand(operand)}}}")
            elif per_channel:
                post_ops.append(f"{{PostOp::kShift, {_operand(operand)}}}")
            else:
                post_ops.append(f"{{PostOp::kResidual, {_operand(operand)}}}")
        return {"bias": bias, "post_op_count": str(len(post_ops)),
                "post_ops": "{" + ", ".join(post_ops) + "}"}

    def weights_param(self, call_index: int, argument: int) -> str:
        kind, index = self.input_of(call_index, argument)
        assert kind == "param", "weights are constants, so region parameters"
        return str(index)

    def conv2d(self) -> dict[str, str]:
        conv = self.step.calls[0]
        attrs = conv.attrs
        weights = _shape(conv.args[1])
        groups = int(attrs.groups)
        if groups > 1:  # oneDNN's grouped weights: (G, O/G, I/G, H, W), the same bytes
            weights = (groups, weights[0] // groups, *weights[1:])
        pad_l, pad_r = _pads(attrs.padding)
        return {"kind": "Step::kConv", "src": _operand(self.input_of(0, 0)),
                "weights": self.weights_param(0, 1),
                "src_shape": _shape_init(_shape(conv.args[0])),
                "weights_shape": _shape_init(weights), "dst_shape": _shape_init(_shape(conv)),
                "strides": _list(attrs.strides),
                "dilates": _list(int(d) - 1 for d in attrs.dilation),
                "pad_l": _list(pad_l), "pad_r": _list(pad_r),
                **self.bias_and_post_ops(1, _shape(conv))}

    def matmul(self) -> dict[str, str]:
        transposed = self.step.calls[0].op.name == "relax.permute_dims"
        first = 1 if transposed else 0
        matmul = self.step.calls[first]
        return {"kind": "Step::kMatmul", "src": _operand(self.input_of(first, 0)),
                "weights": self.weights_param(0, 0 if transposed else 1),
                "weights_transposed": "true" if transposed else "false",
                "src_shape": _shape_init(_shape(matmul.args[0])),
                "weights_shape": _shape_init(_shape(matmul.args[1])),
                "dst_shape": _shape_init(_shape(matmul)),
                **self.bias_and_post_ops(first + 1, _shape(matmul))}

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
                "pooling": f"dnnl::algorithm::{algorithm}", "kernel": _list(kernel),
                "strides": _list(strides), "dilates": "{0, 0}", "pad_l": _list(pad_l),
                "pad_r": _list(pad_r)}

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
        if kind.startswith("conv2d"):
            fields = self.conv2d()
        elif kind.startswith("matmul"):
            fields = self.matmul()
        elif kind.startswith("concat"):
            fields = self.concat(sources_name)
        else:
            fields = self.pool2d()
        # Designated initializers name each field; C++ wants them in declaration order.
        ordered = sorted(fields.items(), key=lambda item: _STEP_FIELDS.index(item[0]))
        return "{" + ", ".join(f".{name} = {value}" for name, value in ordered) + "}"


_STEP_FIELDS = ("kind", "src", "weights", "weights_transposed", "bias", "src_shape",
                "weights_shape", "dst_shape", "pooling", "kernel", "strides", "dilates", "pad_l",
                "pad_r", "post_op_count", "post_ops", "sources",
                "source_count")  # runtime.h's Step, in its order


def _region_source(region: relax.Function) -> tuple[str, str]:
    """One region as a C++ function of its parameters then its outputs (TVM's DPS call),
    taking them packed."""
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
        f"static const int {name}_results[] = {_list(index for _, index in results)};",
        # TVM's packed-call symbol for the function named ``name`` (what the export macros make)
        f'extern "C" TVM_FFI_DLL_EXPORT int __tvm_ffi_{name}(void*, const TVMFFIAny* args, '
        "int32_t num_args, TVMFFIAny*) {",
        "  TVM_FFI_SAFE_CALL_BEGIN();",
        f"  static Region region({name}_params, {name}_steps, {name}_results);",
        "  region.run(args, num_args);",
        "  TVM_FFI_SAFE_CALL_END();",
        "}",
    ]
    return name, "\n".join(lines)


def _runtime_source() -> str:
    return resources.files("targets").joinpath("onednn", "runtime.h").read_text()


def codegen(regions: list[relax.Function], _items) -> list:
    names, bodies = zip(*(_region_source(r) for r in regions))
    source = "\n\n".join([
        _runtime_source(),
        "using namespace odla_onednn;",
        f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({CALLS_FUNCTION}, calls);",
        *bodies])
    # C++20 for designated initializers: each step's fields are named.
    return [static_library(source, [*names, CALLS_FUNCTION], ["-std=c++20", "-I", include_dir()])]


PLUGIN = VendorPlugin(
    name="onednn",
    device_name="INTEL_DNNL",
    description="oneDNN 3.2 (Intel's deep-learning kernels): float32 NCHW convolution with "
                "bias, batch norm, residual add and ReLU fused; matmul; max and average pooling; "
                "concat along channels",
    patterns=patterns,
    codegen=codegen,
    link_options=link_options,
    check_available=check_available,
    items=ITEMS,
    check_item=check_item,
    prepare=prepare,
)
