// A region's convolutions and matmuls as oneDNN primitives (region_state.h's Region): their
// fused post-ops, operands in the product types (bf16_types.h), and packed weights.
#pragma once
#include <dnnl.hpp>

#include <unordered_map>
#include <utility>
#include <vector>

#include "region_state.h"

namespace odla_onednn {
namespace {

// Post-ops in graph order; ``args`` gets the memory each one reads per call.
dnnl::primitive_attr Region::post_op_attr(const Step& s, std::unordered_map<int, memory>& args,
                                          size_t rank) {
  dnnl::post_ops ops;
  for (const PostOp& op : post_ops(s)) {
    switch (op.kind) {
      case PostOp::kResidual:  // dst holds the residual when the step runs: see destination()
        ops.append_sum(1.f);
        break;
      case PostOp::kEltwise:  // alpha: ReLU's negative slope 0, swish's x * sigmoid(1 * x)
        ops.append_eltwise(algorithm(op.algorithm), op.algorithm == dnnl_eltwise_swish, 0.f);
        break;
      case PostOp::kBinary: {
        Dims dims = to_dims(op.shape);
        if (rank != 0) dims.erase(dims.begin(), dims.end() - rank);  // leading 1s dropped
        memory::desc operand = plain_desc(dims);
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(ops.len()) | DNNL_ARG_SRC_1] =
            plain_view(op.operand, dims, false);
        ops.append_binary(algorithm(op.algorithm), operand);
        break;
      }
    }
  }
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  return attr;
}

void Region::build_conv(const Step& s) {
  std::unordered_map<int, memory> args;
  dnnl::primitive_attr attr = post_op_attr(s, args);
  Dims dst_dims = to_dims(s.dst_shape);
  memory::desc bias_desc =
      s.bias.kind == Operand::kNone ? memory::desc() : plain_desc({dst_dims[1]});
  auto conv_desc = [&](const memory::desc& src, const memory::desc& dst) {
    return dnnl::convolution_forward::primitive_desc(
        cpu_engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        src, any_desc(to_dims(s.weights_shape), types_.operands), bias_desc, dst, pair(s.strides),
        pair(s.dilates), pair(s.pad_l), pair(s.pad_r), attr);
  };
  auto pd = conv_desc(any_desc(to_dims(s.src_shape), types_.operands),
                      any_desc(dst_dims, types_.result));
  // Free to choose, oneDNN 3.2 runs a grouped convolution of few channels per group (6 in
  // ShuffleNet) as its reference gemm on NCHW, far slower than channels-last brgemm.
  if (runs(pd, "gemm") &&
      s.weights_shape.rank == 5) {
    auto channels_last = [](const Dims& dims, memory::data_type type) {
      return memory::desc(dims, type, memory::format_tag::acdb);
    };
    auto retried = conv_desc(channels_last(to_dims(s.src_shape), types_.operands),
                             channels_last(dst_dims, types_.result));
    if (!runs(retried, "gemm")) pd = retried;
  }
  args[DNNL_ARG_SRC] = as_layout(s.src, pd.src_desc());
  // OIHW weights read in oneDNN's grouped shape where groups > 1: the same bytes.
  args[DNNL_ARG_WEIGHTS] =
      packed_weights(param_view(s.weights.index, plain_desc(to_dims(s.weights_shape))),
                     pd.weights_desc());
  if (s.bias.kind != Operand::kNone) args[DNNL_ARG_BIAS] = plain_view(s.bias, bias_desc.get_dims(), false);
  finish_step(s, dnnl::convolution_forward(pd), pd.dst_desc(), std::move(args));
}

// A matmul's f32 operand as its src and weights' type: converted each call where it differs.
memory Region::typed(const memory& operand) {
  if (operand.get_desc().get_data_type() == types_.operands) return operand;
  memory converted = temporary(retyped(operand.get_desc(), types_.operands));
  add_reorder(operand, converted);
  return converted;
}

// Operand dims with leading axes of size 1 up to ``rank``; with the last two swapped when
// ``swapped``.
Dims Region::widened(Dims dims, size_t rank, bool swapped) {
  if (swapped) std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  dims.insert(dims.begin(), rank - dims.size(), 1);
  return dims;
}

// Whether a matmul's rows may all be one batch: its weights are the same for every batch
// (a Linear over [1, H, W, C]) and no post-op reads a value per row (a residual, a mask).
// oneDNN's brgemm runs [1, 7, 7, 768] x [768, 3072] as 7 batches of 7 rows, much slower
// than one batch of 49 rows (ConvNeXt-T's MLPs).
bool Region::rows_fold(const Step& s, const Dims& weights_dims) {
  size_t rank = weights_dims.size();
  if (rank < 3) return false;
  for (size_t i = 0; i + 2 < rank; ++i)
    if (weights_dims[i] != 1) return false;
  for (const PostOp& op : post_ops(s)) {
    if (op.kind == PostOp::kResidual) return false;
    if (op.kind != PostOp::kBinary) continue;
    Dims dims = to_dims(op.shape);
    for (size_t i = 0; i + 1 < dims.size(); ++i)
      if (dims[i] != 1) return false;
  }
  return true;
}

// ``dims`` with every row of every batch in one matrix: [rows, columns] (2-d, where
// oneDNN's brgemm packs constant weights; it reads 4-d ones plain).
Dims Region::one_batch(const Dims& dims) {
  Dims folded = {1, dims.back()};
  for (size_t i = 0; i + 1 < dims.size(); ++i) folded[0] *= dims[i];
  return folded;
}

void Region::build_matmul(const Step& s) {
  std::unordered_map<int, memory> args;
  Dims dst_dims = to_dims(s.dst_shape);
  size_t rank = dst_dims.size();
  Dims src_dims = widened(to_dims(s.src_shape), rank, false);
  Dims weights_dims = widened(to_dims(s.weights_shape), rank, s.weights_transposed);
  const bool folded = rows_fold(s, weights_dims);
  if (folded) {
    weights_dims.erase(weights_dims.begin(), weights_dims.end() - 2);
    rank = 2;
  }
  dnnl::primitive_attr attr = post_op_attr(s, args, folded ? 2 : 0);
  Dims bias_dims(rank, 1);
  bias_dims[rank - 1] = dst_dims.back();
  memory::desc bias_desc = s.bias.kind == Operand::kNone ? memory::desc() : plain_desc(bias_dims);
  memory src = typed(plain_view(s.src, folded ? one_batch(src_dims) : src_dims, false));
  memory::desc dst_desc = folded ? retyped(plain_desc(one_batch(dst_dims)), types_.result)
                                 : any_desc(dst_dims, types_.result);
  if (s.weights_constant) {  // packed once to the layout the primitive prefers
    dnnl::matmul::primitive_desc pd(cpu_engine(), src.get_desc(),
                                    any_desc(weights_dims, types_.operands), bias_desc,
                                    dst_desc, attr);
    args[DNNL_ARG_WEIGHTS] = packed_weights(
        plain_view(s.weights, weights_dims, s.weights_transposed), pd.weights_desc());
    finish_matmul(s, pd, src, bias_desc, folded, std::move(args));
  } else {  // read as they are, each call
    memory weights = typed(plain_view(s.weights, weights_dims, s.weights_transposed));
    dnnl::matmul::primitive_desc pd(cpu_engine(), src.get_desc(), weights.get_desc(),
                                    bias_desc, dst_desc, attr);
    args[DNNL_ARG_WEIGHTS] = weights;
    finish_matmul(s, pd, src, bias_desc, folded, std::move(args));
  }
}

void Region::finish_matmul(const Step& s, const dnnl::matmul::primitive_desc& pd, const memory& src,
                           const memory::desc& bias_desc, bool folded,
                           std::unordered_map<int, memory> args) {
  args[DNNL_ARG_SRC] = src;
  if (s.bias.kind != Operand::kNone) args[DNNL_ARG_BIAS] = plain_view(s.bias, bias_desc.get_dims(), false);
  if (!folded) return finish_step(s, dnnl::matmul(pd), pd.dst_desc(), std::move(args));
  // The step's value keeps its dims; the primitive writes it through a one-batch view,
  // which follows its buffer (a result computed in TVM's output moves each call).
  memory dst = temporary(retyped(plain_desc(to_dims(s.dst_shape)), types_.result));
  args[DNNL_ARG_DST] = step_view(dst, pd.dst_desc());
  actions_.push_back({dnnl::matmul(pd), std::move(args)});
  push_value(dst);
}

}  // namespace
}  // namespace odla_onednn
