// A region's steps other than convolutions and matmuls as oneDNN primitives
// (region_state.h's Region): softmax, eltwise, binary, transpose, reduction, LRN, layer
// norm, pooling and concat.
#pragma once
#include <dnnl.hpp>

#include <algorithm>
#include <unordered_map>
#include <utility>
#include <vector>

#include "region_state.h"

namespace odla_onednn {
namespace {

void Region::build_softmax(const Step& s) {
  // Over its input in the layout that has (plain after a matmul).
  memory src = value(s.src);
  dnnl::softmax_forward::primitive_desc pd(cpu_engine(), dnnl::prop_kind::forward_inference,
                                           algorithm(s.algorithm), src.get_desc(), src.get_desc(), s.axis);
  finish_step(s, dnnl::softmax_forward(pd), pd.dst_desc(), {{DNNL_ARG_SRC, src}});
}

// A unary op on a computed tensor (a ReLU after a concat), in the layout it has, then the
// step's post-ops.
void Region::build_eltwise(const Step& s) {
  std::unordered_map<int, memory> args;
  dnnl::primitive_attr attr = post_op_attr(s, args);
  memory src = value(s.src);
  dnnl::eltwise_forward::primitive_desc pd(cpu_engine(), dnnl::prop_kind::forward_inference,
                                           algorithm(s.algorithm), src.get_desc(),
                                           src.get_desc(), 0.f, 0.f, attr);
  args[DNNL_ARG_SRC] = src;
  finish_step(s, dnnl::eltwise_forward(pd), pd.dst_desc(), std::move(args));
}

// src (of dst's dims, in whatever layout it has) op weights (of as many dims or fewer,
// broadcast, read plain), then the step's post-ops.
void Region::build_binary(const Step& s) {
  std::unordered_map<int, memory> args;
  dnnl::primitive_attr attr = post_op_attr(s, args);
  memory src = value(s.src);
  Dims stored = to_dims(s.weights_shape);
  // Both operands in one layout: oneDNN 3.2 runs a blocked operand with a plain one as its
  // reference code (ZFNet's LRN product over 1x96x109x109). An
  // operand broadcast along some axes goes to src's layout too; where oneDNN still has
  // only reference code, both are read plain.
  auto binary_desc = [&](const memory::desc& other) {
    return dnnl::binary::primitive_desc(cpu_engine(), algorithm(s.algorithm), src.get_desc(),
                                        other, any_desc(to_dims(s.dst_shape)), attr);
  };
  Dims dims = widened(stored, s.dst_shape.rank, false);
  bool same_dims = stored == src.get_desc().get_dims();
  memory::format_tag tag = format_of(src.get_desc());
  memory::desc wanted = same_dims ? src.get_desc()
                        : tag != memory::format_tag::undef
                            ? memory::desc(dims, memory::data_type::f32, tag)
                            : plain_desc(dims);
  auto pd = binary_desc(wanted);
  if (runs(pd, "ref")) {
    src = as_layout(s.src, plain_desc(src.get_desc().get_dims()));
    wanted = plain_desc(dims);
    pd = binary_desc(wanted);
  }
  // Reordered only into the layout chosen: from wherever it is (same dims), or from its
  // view in src's rank.
  memory other = same_dims ? as_layout(s.weights, wanted) : plain_view(s.weights, dims, false);
  if (other.get_desc() != wanted) {
    memory converted = temporary(wanted);
    add_reorder(other, converted);
    other = converted;
  }
  args[DNNL_ARG_SRC_0] = src;
  args[DNNL_ARG_SRC_1] = other;
  finish_step(s, dnnl::binary(pd), pd.dst_desc(), std::move(args));
}

// A transpose is a reorder into the output's plain buffer seen with the input's axis
// order: transposed axis i is input axis axes[i] (whatever the input's layout, a
// convolution's blocked one included). The reshapes around it (attention's heads split
// and merged, a channel shuffle) are views: a reshaped input is read plain in src_shape,
// and the plain result is dst_shape. A channel shuffle of an nhwc map (its channels split
// in two, the halves swapped and merged again) reads and writes nhwc: one reorder instead
// of three (to plain, the shuffle, back to nhwc).
void Region::build_transpose(const Step& s) {
  Dims src_dims = to_dims(s.src_shape), dst_dims = to_dims(s.dst_shape);
  Dims transposed(src_dims.size()), strides(src_dims.size());
  for (size_t i = 0; i < src_dims.size(); ++i) transposed[i] = src_dims[s.axes[i]];
  if (transposed_view(s, transposed, dst_dims)) return;
  memory src = value(s.src);
  const Dims src_nhwc = format_of(src.get_desc()) == memory::format_tag::acdb
                            ? nhwc_split_strides(src.get_desc().get_dims(), src_dims)
                            : Dims{};
  const Dims dst_nhwc = src_nhwc.empty() ? Dims{} : nhwc_split_strides(dst_dims, transposed);
  memory::desc result_desc = plain_desc(dst_dims);
  if (!dst_nhwc.empty()) {
    result_desc = memory::desc(dst_dims, memory::data_type::f32, memory::format_tag::acdb);
    for (size_t i = 0; i < transposed.size(); ++i) strides[s.axes[i]] = dst_nhwc[i];
  } else {
    memory::dim stride = 1;
    for (size_t i = transposed.size(); i-- > 0;) {
      strides[s.axes[i]] = stride;
      stride *= transposed[i];
    }
  }
  memory result = temporary(result_desc);
  memory writer(memory::desc(src_dims, memory::data_type::f32, strides), cpu_engine(),
                nullptr);
  if (!src_nhwc.empty()) {
    src = step_view(src, memory::desc(src_dims, memory::data_type::f32, src_nhwc));
  } else if (src.get_desc().get_dims() != src_dims) {
    if (s.src.kind == Operand::kParam)
      src = param_view(s.src.index, plain_desc(src_dims));
    else
      src = step_view(as_layout(s.src, plain_desc(src.get_desc().get_dims())),
                      plain_desc(src_dims));
  }
  actions_.push_back({dnnl::reorder(src, writer), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, writer}}});
  writers_.emplace_back(result, writer);
  push_value(result);
}

// A transpose that only renames a step's strides is a view of its buffer: ConvNeXt's
// NCHW map in nhwc (acdb) to NHWC (plain) before its layer norm and MLP, and back after
// (reorders otherwise). Not for a region result, which TVM's output holds.
bool Region::transposed_view(const Step& s, const Dims& transposed, const Dims& dst_dims) {
  const memory::desc src_desc = value(s.src).get_desc();
  const bool returned =
      std::find(results_.begin(), results_.end(), static_cast<int>(values_.size())) !=
      results_.end();
  if (s.src.kind != Operand::kStep || returned || src_desc.get_dims() != to_dims(s.src_shape) ||
      src_desc.get_inner_nblks() != 0)
    return false;
  Dims src_strides = src_desc.get_strides(), strides(transposed.size());
  for (size_t i = 0; i < transposed.size(); ++i) strides[i] = src_strides[s.axes[i]];
  // In its own type: a bf16 value is no f32 plain view (a reorder converts it instead).
  const memory::desc view(transposed, src_desc.get_data_type(), strides);
  memory::desc desc;
  if (view == plain_desc(transposed))
    desc = plain_desc(dst_dims);  // a reshape after it is a view too
  else if (dst_dims == transposed && format_of(view) == memory::format_tag::acdb)
    desc = view;
  else
    return false;
  buffer_of_next_ = buffers_[s.src.index];
  push_value(step_view(value(s.src), desc));
  return true;
}

void Region::build_reduction(const Step& s) {
  // A mean over the spatial axes of a map in a blocked or nhwc layout (a squeeze-excite
  // block's, after a convolution) is an average pooling over the whole map, which reads
  // that layout as it is, where reordered to plain, the reduction went channel by channel.
  memory::desc src_desc = value(s.src).get_desc();
  if (s.algorithm == dnnl_reduction_mean && global_spatial(s) &&
      src_desc != plain_desc(src_desc.get_dims())) {
    const Dims window = {s.src_shape.dims[2], s.src_shape.dims[3]};
    dnnl::pooling_forward::primitive_desc pd(
        cpu_engine(), dnnl::prop_kind::forward_inference,
        dnnl::algorithm::pooling_avg_exclude_padding, src_desc,
        any_desc(to_dims(s.dst_shape), src_desc.get_data_type()), window, window, {0, 0},
        {0, 0}, {0, 0});
    return finish_step(s, dnnl::pooling_forward(pd), pd.dst_desc(),
                       {{DNNL_ARG_SRC, value(s.src)}});
  }
  // Plain: oneDNN reduces blocked layouts with its reference code, far slower.
  memory src = as_layout(s.src, plain_desc(to_dims(s.src_shape)));
  dnnl::reduction::primitive_desc pd(cpu_engine(), algorithm(s.algorithm), src.get_desc(),
                                     any_desc(to_dims(s.dst_shape)), 0.f, 0.f);
  finish_step(s, dnnl::reduction(pd), pd.dst_desc(), {{DNNL_ARG_SRC, src}});
}

// ONNX's LRN across channels, x / (k + alpha / size * window sum of x^2)^beta, as the
// bridge lowers it: oneDNN's lrn_across_channels, in the layout its input has.
// Where oneDNN has only reference code for the input's layout (plain NCHW), the input is
// reordered to one it has jit code for.
void Region::build_lrn(const Step& s, float alpha_over_size, float k, float beta) {
  memory::dim size = s.kernel[0];
  auto lrn_desc = [&](const memory::desc& src) {
    return dnnl::lrn_forward::primitive_desc(
        cpu_engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::lrn_across_channels,
        src, src, size, alpha_over_size * static_cast<float>(size), beta, k);
  };
  memory src = value(s.src);
  auto pd = lrn_desc(src.get_desc());
  for (auto tag : {memory::format_tag::aBcd16b, memory::format_tag::acdb}) {
    if (!runs(pd, "ref")) break;
    memory::desc blocked(src.get_desc().get_dims(), memory::data_type::f32, tag);
    auto retried = lrn_desc(blocked);
    if (!runs(retried, "ref")) {
      src = as_layout(s.src, blocked);
      pd = retried;
    }
  }
  finish_step(s, dnnl::lrn_forward(pd), pd.dst_desc(), {{DNNL_ARG_SRC, src}});
}

void Region::build_layer_norm(const Step& s, float epsilon) {
  memory src = as_layout(s.src, plain_desc(to_dims(s.src_shape)));
  Dims channels = {s.src_shape.dims[s.src_shape.rank - 1]};
  auto flags = dnnl::normalization_flags::none;
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src}};
  if (s.scale.kind != Operand::kNone) {
    flags |= dnnl::normalization_flags::use_scale;
    args[DNNL_ARG_SCALE] = plain_view(s.scale, channels, false);
  }
  if (s.shift.kind != Operand::kNone) {
    flags |= dnnl::normalization_flags::use_shift;
    args[DNNL_ARG_SHIFT] = plain_view(s.shift, channels, false);
  }
  dnnl::layer_normalization_forward::primitive_desc pd(
      cpu_engine(), dnnl::prop_kind::forward_inference, src.get_desc(), src.get_desc(),
      epsilon, flags);
  finish_step(s, dnnl::layer_normalization_forward(pd), pd.dst_desc(), std::move(args));
}

void Region::build_pool(const Step& s) {
  // Pooling reads its input in whatever layout it has and keeps it.
  memory src = value(s.src);
  dnnl::pooling_forward::primitive_desc pd(
      cpu_engine(), dnnl::prop_kind::forward_inference, algorithm(s.algorithm), src.get_desc(),
      any_desc(to_dims(s.dst_shape), src.get_desc().get_data_type()), pair(s.strides),
      pair(s.kernel), pair(s.dilates), pair(s.pad_l), pair(s.pad_r));
  finish_step(s, dnnl::pooling_forward(pd), pd.dst_desc(), {{DNNL_ARG_SRC, src}});
}

void Region::build_concat(const Step& s) {
  // Concat reads its inputs in whatever layouts they have (no reorder before it), and oneDNN
  // derives the destination's layout from theirs (nhwc from nhwc, as squeezenet's
  // convolutions choose), so the convolutions after it mostly read it as it is.
  // Inputs in different layouts go to the layout of the largest first: oneDNN concatenates
  // mixed layouts with its reference code, and DenseNet's largest input, the features so
  // far, comes plain from TVM.
  std::vector<memory::desc> sources;
  std::unordered_map<int, memory> args;
  memory::desc largest = value(concat_sources(s)[0]).get_desc();
  bool mixed = false;
  for (const Operand& source : concat_sources(s)) {
    memory::desc desc = value(source).get_desc();
    mixed = mixed || desc != largest;
    if (desc.get_size() > largest.get_size()) largest = desc;
  }
  const memory::format_tag largest_tag = largest == plain_desc(largest.get_dims())
                                             ? memory::format_tag::abcd
                                             : memory::format_tag::acdb;
  for (const Operand& source : concat_sources(s)) {
    memory input = value(source);
    if (mixed && s.dst_shape.rank == 4)
      input = as_layout(source, memory::desc(input.get_desc().get_dims(), memory::data_type::f32,
                                             largest_tag));
    args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(sources.size())] = input;
    sources.push_back(input.get_desc());
  }
  dnnl::concat::primitive_desc pd(
      cpu_engine(), any_desc(to_dims(s.dst_shape), sources[0].get_data_type()), 1, sources);
  finish_step(s, dnnl::concat(pd), pd.dst_desc(), std::move(args));
}

}  // namespace
}  // namespace odla_onednn
