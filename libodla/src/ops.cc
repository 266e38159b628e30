// Every op of ODLA 0.5's op headers: each calls odla_tvm's op function of the same name
// (snake_case) with its C arguments in the same order. Arrays whose length ODLA leaves implied
// take it from the input's rank; output_dims that ODLA makes a hint are not passed on.
#include <cstdarg>

#include "build.h"

using namespace odla_tvm;

namespace {

// Spatial dims of an N, C, spatial... input (convolutions, pools).
size_t Spatial(odla_value input) {
  int rank = Rank(input, "input");
  if (rank < 3) throw Error(ODLA_INVALID_PARAM, "input has rank " + std::to_string(rank) +
                                                    "; expected N, C and 1 to 3 spatial dims");
  return static_cast<size_t>(rank - 2);
}

size_t Dimensions(odla_value input) { return static_cast<size_t>(Rank(input, "input")); }

// An op's result element type; the shape ODLA gives with it is only a hint.
Arg ResultType(odla_value_type type) {
  type.shape.size = 0;
  return Type(type);
}

// ArgMax/ArgMin's index type. A caller may leave it uninitialized (HALO's own op tests do,
// its backends ignore it): an element type outside ODLA's enum means int32.
Arg IndexType(odla_value_type type) {
  int element = EnumNumber(type.element_type);
  if (element < ODLA_INT8 || element > ODLA_STRING)
    type.element_type = ODLA_INT32;
  return ResultType(type);
}

// A layout left uninitialized (HALO's op tests leave some, their backends ignore them): one
// outside odla_memory_layout takes `fallback`, with a warning, so that a program's result never
// depends on what its stack held.
odla_memory_layout Layout(const odla_memory_layout& layout, odla_memory_layout fallback,
                          const char* op, const char* what) {
  int given = EnumNumber(layout);
  if (given >= ODLA_CHANNELS_FIRST && given <= ODLA_IOS)
    return static_cast<odla_memory_layout>(given);
  Log(ODLA_LOG_LEVEL_WARN, op, std::string(what) + " is " + std::to_string(given) +
                                   ", not an odla_memory_layout (0..5); taking " +
                                   std::to_string(static_cast<int>(fallback)));
  return fallback;
}

Arg InputLayout(const odla_memory_layout& layout, const char* op) {
  return I(Layout(layout, ODLA_CHANNELS_FIRST, op, "input_layout"));
}

// A kernel layout given as an input's (HALO's own op tests pass the input's): channels first
// means the op's ONNX kernel layout, channels last its TensorFlow one; one out of range the
// ONNX layout.
Arg KernelLayout(const odla_memory_layout& given, odla_memory_layout onnx, odla_memory_layout tf,
                 const char* op) {
  odla_memory_layout layout = Layout(given, onnx, op, "kernel_layout");
  return I(layout == ODLA_CHANNELS_FIRST ? onnx : layout == ODLA_CHANNELS_LAST ? tf : layout);
}

// DeConv's output_dims: the output size when it has the input's rank, else left unset (the
// size ODLA's formula gives; callers that do not need it may leave it uninitialized).
Arg DeConvOutputSize(const odla_value_shape& output_dims, odla_value input) {
  return output_dims.size == Rank(input, "input") ? Dims(output_dims) : None();
}

}  // namespace

#define UNARY(C, PY)                                                   \
  odla_value odla_##C(odla_value input, const odla_value_id value_id) { \
    ODLA_OP(Op(#PY, {V(input), Id(value_id)}));                        \
  }
#define BINARY(C, PY)                                                                   \
  odla_value odla_##C(odla_value lhs, odla_value rhs, const odla_value_id value_id) {    \
    ODLA_OP(Op(#PY, {V(lhs), V(rhs), Id(value_id)}));                                   \
  }
#define REDUCE(C, PY)                                                                      \
  odla_value odla_##C(odla_value input, odla_size_t num_of_axes, const odla_uint32* axes,   \
                      odla_bool keep_dims, odla_value_shape output_dims,                    \
                      const odla_value_id value_id) {                                       \
    ODLA_OP(Op(#PY, {V(input), I(num_of_axes), Ints(axes, Count(num_of_axes, "num_of_axes")), \
                     I(keep_dims), Hint(output_dims), Id(value_id)}));                      \
  }
#define NORM_REDUCE(C, PY)                                                                  \
  odla_value odla_##C(odla_value input, odla_size_t num_of_axes, const odla_uint32* axes,    \
                      odla_bool keep_dims, odla_float32 epsilon, odla_value_shape output_dims, \
                      const odla_value_id value_id) {                                        \
    ODLA_OP(Op(#PY, {V(input), I(num_of_axes), Ints(axes, Count(num_of_axes, "num_of_axes")),  \
                     I(keep_dims), F(epsilon), Hint(output_dims), Id(value_id)}));           \
  }
#define ARG_REDUCE(C, PY)                                                                   \
  odla_value odla_##C(odla_value input, odla_int32 axis, odla_bool keep_dims,                \
                      odla_bool return_last_index, odla_value_type output_value_type,        \
                      const odla_value_id value_id) {                                        \
    ODLA_OP(Op(#PY, {V(input), I(axis), I(keep_dims), I(return_last_index),                   \
                     IndexType(output_value_type), Id(value_id)}));                          \
  }
#define ALPHA(C, PY)                                                                       \
  odla_value odla_##C(odla_value input, odla_float32 alpha, const odla_value_id value_id) { \
    ODLA_OP(Op(#PY, {V(input), F(alpha), Id(value_id)}));                                  \
  }
#define AXIS(C, PY)                                                                      \
  odla_value odla_##C(odla_value input, odla_int32 axis, const odla_value_id value_id) { \
    ODLA_OP(Op(#PY, {V(input), I(axis), Id(value_id)}));                                 \
  }

extern "C" {

// odla_ops_math.h
UNARY(Abs, abs) UNARY(ACos, acos) UNARY(ACosh, acosh) UNARY(ASin, asin) UNARY(ASinh, asinh)
UNARY(ATan, atan) UNARY(ATanh, atanh) UNARY(Ceil, ceil) UNARY(Cos, cos) UNARY(Cosh, cosh)
UNARY(Erf, erf) UNARY(Exp, exp) UNARY(Floor, floor) UNARY(Log, log) UNARY(Neg, neg)
UNARY(Not, not_) UNARY(Reciprocal, reciprocal) UNARY(Round, round) UNARY(Rsqrt, rsqrt)
UNARY(Sign, sign) UNARY(Sin, sin) UNARY(Sinh, sinh) UNARY(Sqrt, sqrt) UNARY(Tan, tan)
UNARY(Tanh, tanh) UNARY(IsNaN, is_nan) UNARY(Inverse, inverse)
BINARY(Add, add) BINARY(Sub, sub) BINARY(Mul, mul) BINARY(Div, div) BINARY(Pow, pow)
BINARY(Max, max) BINARY(Min, min) BINARY(SquaredDifference, squared_difference)
BINARY(Equal, equal) BINARY(NotEqual, not_equal) BINARY(Greater, greater)
BINARY(GreaterOrEqual, greater_or_equal) BINARY(Less, less) BINARY(LessOrEqual, less_or_equal)
BINARY(And, and_) BINARY(Or, or_) BINARY(Xor, xor)
REDUCE(ReduceLogSum, reduce_log_sum) REDUCE(ReduceLogSumExp, reduce_log_sum_exp)
REDUCE(ReduceMax, reduce_max) REDUCE(ReduceMean, reduce_mean) REDUCE(ReduceMin, reduce_min)
REDUCE(ReduceProd, reduce_prod) REDUCE(ReduceSum, reduce_sum)
REDUCE(ReduceSumSquare, reduce_sum_square)
NORM_REDUCE(ReduceL1, reduce_l1) NORM_REDUCE(ReduceL2, reduce_l2)
ARG_REDUCE(ArgMax, arg_max) ARG_REDUCE(ArgMin, arg_min)

odla_value odla_Clamp(odla_value input, odla_float32 lo, odla_float32 hi,
                      const odla_value_id value_id) {
  ODLA_OP(Op("clamp", {V(input), F(lo), F(hi), Id(value_id)}));
}

odla_value odla_Det(odla_value input, odla_value_shape output_shape, const odla_value_id value_id) {
  ODLA_OP(Op("det", {V(input), Hint(output_shape), Id(value_id)}));
}

odla_value odla_CumSum(odla_value input, odla_value axis, odla_bool exclusion, odla_bool reverse,
                       const odla_value_id value_id) {
  ODLA_OP(Op("cum_sum", {V(input), V(Require(axis, "axis")), I(exclusion), I(reverse),
                         Id(value_id)}));
}

odla_value odla_Einsum(odla_values inputs, const odla_char* equation, odla_value_shape output_dims,
                       const odla_value_id value_id) {
  ODLA_OP(Op("einsum", {Vs(inputs), S(Require(equation, "equation")), Hint(output_dims),
                        Id(value_id)}));
}

odla_value odla_BatchMatMul(odla_value A, odla_bool A_transpose, odla_value B,
                            odla_bool B_transpose,
                            odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("batch_mat_mul", {V(A), I(A_transpose), V(B), I(B_transpose), Hint(output_dims),
                               Id(value_id)}));
}

odla_value odla_Gemm(odla_value A, odla_bool A_transpose, odla_value B, odla_bool B_transpose,
                     odla_float32 alpha, odla_float32 beta, odla_value C,
                     odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("gemm", {V(A), I(A_transpose), V(B), I(B_transpose), F(alpha), F(beta), V(C),
                      Hint(output_dims), Id(value_id)}));
}

odla_value odla_IsInf(odla_value input, odla_bool detect_pos, odla_bool detect_neg,
                      const odla_value_id value_id) {
  ODLA_OP(Op("is_inf", {V(input), I(detect_pos), I(detect_neg), Id(value_id)}));
}

odla_value odla_Mean(odla_values inputs, const odla_value_id value_id) {
  ODLA_OP(Op("mean", {Vs(inputs), Id(value_id)}));
}

odla_value odla_Mod(odla_value lhs, odla_value rhs, odla_int64 fmod, const odla_value_id value_id) {
  ODLA_OP(Op("mod", {V(lhs), V(rhs), I(fmod), Id(value_id)}));
}

odla_value odla_Select(odla_value condition, odla_value a, odla_value b,
                       odla_value_shape output_dims,
                       const odla_value_id value_id) {
  ODLA_OP(Op("select", {V(condition), V(a), V(b), Hint(output_dims), Id(value_id)}));
}

odla_value odla_Shift(odla_value input, odla_value shift_amount, odla_bool is_left_shift,
                      const odla_value_id value_id) {
  ODLA_OP(Op("shift", {V(input), V(shift_amount), I(is_left_shift), Id(value_id)}));
}

// odla_ops_nn.h
UNARY(Relu, relu) UNARY(Sigmoid, sigmoid) UNARY(Softplus, softplus) UNARY(Softsign, softsign)
ALPHA(Celu, celu) ALPHA(Elu, elu) ALPHA(LeakyRelu, leaky_relu)
ALPHA(ThresholdedRelu, thresholded_relu)
AXIS(Hardmax, hardmax) AXIS(LogSoftmax, log_softmax) AXIS(Softmax, softmax)

odla_value odla_AveragePool(odla_value input, odla_memory_layout input_layout,
                            const odla_uint32* window_dims, const odla_uint32* strides,
                            const odla_uint32* paddings_front, const odla_uint32* paddings_back,
                            odla_bool padding_included, odla_value_shape output_dims,
                            const odla_value_id value_id) {
  ODLA_OP(Op("average_pool", {V(input), InputLayout(input_layout, "odla_AveragePool"),
                              Ints(window_dims, Spatial(input)),
                              Ints(strides, Spatial(input)), Ints(paddings_front, Spatial(input)),
                              Ints(paddings_back, Spatial(input)), I(padding_included),
                              Hint(output_dims), Id(value_id)}));
}

odla_value odla_MaxPool(odla_value input, odla_memory_layout input_layout,
                        const odla_uint32* window_dims, const odla_uint32* strides,
                        const odla_uint32* paddings_front, const odla_uint32* paddings_back,
                        odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("max_pool", {V(input), InputLayout(input_layout, "odla_MaxPool"),
                          Ints(window_dims, Spatial(input)),
                          Ints(strides, Spatial(input)), Ints(paddings_front, Spatial(input)),
                          Ints(paddings_back, Spatial(input)), Hint(output_dims), Id(value_id)}));
}

odla_value odla_LRN(odla_value input, odla_memory_layout input_layout, odla_int32 window_size,
                    odla_float32 alpha, odla_float32 beta, odla_float32 bias,
                    const odla_value_id value_id) {
  ODLA_OP(Op("lrn", {V(input), InputLayout(input_layout, "odla_LRN"),
                     I(window_size), F(alpha), F(beta), F(bias),
                     Id(value_id)}));
}

odla_value odla_BatchNormalization(odla_value input, odla_memory_layout input_layout,
                                   odla_value mean, odla_value var, odla_float32 epsilon,
                                   odla_value scale, odla_value offset, odla_float32 scalar_scale,
                                   odla_float32 scalar_offset, const odla_value_id value_id) {
  ODLA_OP(Op("batch_normalization", {V(input), InputLayout(input_layout, "odla_BatchNormalization"),
                                     V(mean), V(var), F(epsilon),
                                     V(scale), V(offset), F(scalar_scale), F(scalar_offset),
                                     Id(value_id)}));
}

odla_value odla_Conv(odla_value input, odla_memory_layout input_layout, odla_uint32 group,
                     odla_value kernel, odla_memory_layout kernel_layout,
                     const odla_uint32* strides, const odla_uint32* dilations,
                     const odla_uint32* paddings_front, const odla_uint32* paddings_back,
                     odla_value bias, odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("conv", {V(input), InputLayout(input_layout, "odla_Conv"), I(group), V(kernel),
                      KernelLayout(kernel_layout, ODLA_OIS, ODLA_SIO, "odla_Conv"),
                      Ints(strides, Spatial(input)), Ints(dilations, Spatial(input)),
                      Ints(paddings_front, Spatial(input)), Ints(paddings_back, Spatial(input)),
                      V(bias), Hint(output_dims), Id(value_id)}));
}

odla_value odla_DeConv(odla_value input, odla_memory_layout input_layout, odla_uint32 group,
                       odla_value kernel, odla_memory_layout kernel_layout,
                       const odla_uint32* strides, const odla_uint32* dilations,
                       const odla_uint32* paddings_front, const odla_uint32* paddings_back,
                       odla_value bias, odla_value_shape output_dims,
                       const odla_value_id value_id) {
  // output_dims picks among the sizes a transposed convolution may give: passed on
  ODLA_OP(Op("de_conv", {V(input), InputLayout(input_layout, "odla_DeConv"), I(group), V(kernel),
                         KernelLayout(kernel_layout, ODLA_IOS, ODLA_SOI, "odla_DeConv"),
                         Ints(strides, Spatial(input)), Ints(dilations, Spatial(input)),
                         Ints(paddings_front, Spatial(input)), Ints(paddings_back, Spatial(input)),
                         V(bias), DeConvOutputSize(output_dims, input), Id(value_id)}));
}

odla_value odla_Gelu(odla_value input, odla_bool use_approx, const odla_value_id value_id) {
  ODLA_OP(Op("gelu", {V(input), I(use_approx), Id(value_id)}));
}

odla_values odla_GRU(odla_value input, odla_rnn_weight_format weight_format,
                     odla_rnn_gate_order gate_order, odla_value_shape weight_dims, odla_value W,
                     odla_value R, odla_value B, odla_value sequence_lens, odla_value initial_h,
                     odla_int32 hidden_size, odla_rnn_direction direction,
                     odla_bool linear_before_reset, odla_rnn_outputs outputs,
                     const odla_value_ids value_id) {
  ODLA_OPS(Ops("gru", {V(input), I(weight_format), I(gate_order), Hint(weight_dims), V(W), V(R),
                       V(B), V(sequence_lens), V(initial_h), I(hidden_size), I(direction),
                       I(linear_before_reset), I(outputs), Ids(value_id)}));
}

odla_value odla_HardSigmoid(odla_value input, odla_float32 alpha, odla_float32 beta,
                            const odla_value_id value_id) {
  ODLA_OP(Op("hard_sigmoid", {V(input), F(alpha), F(beta), Id(value_id)}));
}

odla_value odla_GroupNormalization(odla_value input, odla_memory_layout input_layout,
                                   odla_int32 groups, odla_float32 epsilon, odla_value scale,
                                   odla_value offset, odla_float32 scalar_scale,
                                   odla_float32 scalar_offset, const odla_value_id value_id) {
  ODLA_OP(Op("group_normalization", {V(input), InputLayout(input_layout, "odla_GroupNormalization"),
                                     I(groups), F(epsilon), V(scale),
                                     V(offset), F(scalar_scale), F(scalar_offset), Id(value_id)}));
}

odla_value odla_InstanceNormalization(odla_value input, odla_memory_layout input_layout,
                                      odla_float32 epsilon, odla_value scale, odla_value offset,
                                      odla_float32 scalar_scale, odla_float32 scalar_offset,
                                      const odla_value_id value_id) {
  ODLA_OP(Op("instance_normalization", {V(input),
                                        InputLayout(input_layout, "odla_InstanceNormalization"),
                                        F(epsilon), V(scale), V(offset),
                                        F(scalar_scale), F(scalar_offset), Id(value_id)}));
}

odla_value odla_LpNormalize(odla_value input, odla_int32 p, odla_memory_layout input_layout,
                            odla_size_t axes_size, const odla_int32* axes, odla_float32 epsilon,
                            odla_value scale, const odla_value_id value_id) {
  ODLA_OP(Op("lp_normalize", {V(input), I(p), InputLayout(input_layout, "odla_LpNormalize"),
                              I(axes_size),
                              Ints(axes, Count(axes_size, "axes_size")), F(epsilon), V(scale),
                              Id(value_id)}));
}

odla_values odla_LSTM(odla_value input, odla_rnn_weight_format weight_format,
                      odla_rnn_gate_order gate_order, odla_value_shape weight_dims, odla_value W,
                      odla_value R, odla_value B, odla_value sequence_lens, odla_value initial_h,
                      odla_value initial_c, odla_value P, odla_int32 hidden_size,
                      odla_rnn_direction direction, odla_rnn_outputs outputs,
                      const odla_value_ids value_ids) {
  ODLA_OPS(Ops("lstm", {V(input), I(weight_format), I(gate_order), Hint(weight_dims), V(W), V(R),
                        V(B), V(sequence_lens), V(initial_h), V(initial_c), V(P), I(hidden_size),
                        I(direction), I(outputs), Ids(value_ids)}));
}

odla_value odla_NegativeLogLikeliHoodLoss(odla_value input, odla_value gt, odla_int32 ignored,
                                          odla_reduction_mode reduction, odla_value weight,
                                          odla_value_shape output_shape, odla_value_id value_id) {
  ODLA_OP(Op("negative_log_likeli_hood_loss", {V(input), V(gt), I(ignored), I(reduction), V(weight),
                                               Hint(output_shape), Id(value_id)}));
}

odla_value odla_NMS(odla_value boxes, odla_value scores, odla_uint32 max_num_outputs,
                    odla_float32 iou_threshold, odla_float32 score_threshold,
                    odla_value_type output_value_type, const odla_value_id value_id) {
  ODLA_OP(Op("nms", {V(boxes), V(scores), I(max_num_outputs), F(iou_threshold), F(score_threshold),
                     ResultType(output_value_type), Id(value_id)}));
}

odla_value odla_PRelu(odla_value input, odla_value slope, const odla_value_id value_id) {
  ODLA_OP(Op("prelu", {V(input), V(slope), Id(value_id)}));
}

odla_values odla_RNN(odla_value input, odla_rnn_weight_format weight_format,
                     odla_value_shape weight_dims, odla_value W, odla_value R, odla_value B,
                     odla_value sequence_lens, odla_value initial_h, odla_int32 hidden_size,
                     odla_rnn_direction direction, odla_rnn_outputs outputs,
                     const odla_value_ids value_id) {
  ODLA_OPS(Ops("rnn", {V(input), I(weight_format), Hint(weight_dims), V(W), V(R), V(B),
                       V(sequence_lens), V(initial_h), I(hidden_size), I(direction), I(outputs),
                       Ids(value_id)}));
}

odla_value odla_ROIAlign(odla_value input, odla_memory_layout input_layout, odla_value rois,
                         odla_int32 sampling_ratio, odla_float32 scale, odla_value_shape output_dim,
                         const odla_value_id value_id) {
  ODLA_OP(Op("roi_align", {V(input), InputLayout(input_layout, "odla_ROIAlign"),
                           V(rois), I(sampling_ratio), F(scale),
                           Dims(output_dim), Id(value_id)}));
}

odla_value odla_ROIMaxPool(odla_value input, odla_memory_layout input_layout, odla_value rois,
                           odla_int32 win_h, odla_int32 win_w, odla_float32 scale,
                           odla_value_shape output_dim, const odla_value_id value_id) {
  ODLA_OP(Op("roi_max_pool", {V(input), InputLayout(input_layout, "odla_ROIMaxPool"),
                              V(rois), I(win_h), I(win_w), F(scale),
                              Dims(output_dim), Id(value_id)}));
}

odla_value odla_Selu(odla_value input, odla_float32 alpha, odla_float32 gamma,
                     const odla_value_id value_id) {
  ODLA_OP(Op("selu", {V(input), F(alpha), F(gamma), Id(value_id)}));
}

odla_value odla_Shrink(odla_value input, odla_float32 bias, odla_float32 lambd,
                       const odla_value_id value_id) {
  ODLA_OP(Op("shrink", {V(input), F(bias), F(lambd), Id(value_id)}));
}

odla_value odla_TFIDFVectorize(odla_value input, odla_int32 min_gram_length,
                               odla_int32 max_gram_length, odla_int32 max_skip_count,
                               odla_tf_idf_mode mode, odla_value pool, odla_value gram_counts,
                               odla_value output_indices, odla_value weights,
                               odla_value_shape output_shape, odla_value_id value_id) {
  ODLA_OP(Op("tfidf_vectorize", {V(input), I(min_gram_length), I(max_gram_length),
                                 I(max_skip_count), I(mode), V(pool), V(gram_counts),
                                 V(output_indices), V(weights), Dims(output_shape), Id(value_id)}));
}

odla_values odla_TopK(odla_value input, odla_uint32 K, odla_bool largest, odla_bool sorted,
                      odla_uint32 axis, odla_value_type output_value_type,
                      odla_value_type output_value_index_type, const odla_value_ids value_ids) {
  ODLA_OPS(Ops("topk", {V(input), I(K), I(largest), I(sorted), I(axis),
                        ResultType(output_value_type),
                        ResultType(output_value_index_type), Ids(value_ids)}));
}

odla_values odla_PostProcess(odla_value, odla_value, odla_value, odla_value, odla_value,
                             const odla_value_id) {
  return GuardValue<odla_values>(__func__, []() -> odla_values {
    throw Error(ODLA_UNSUPPORTED_OP, "PostProcess (a YOLOv3 box decoder of one vendor) is not "
                                     "an op here; decode the boxes with the other ops");
  });
}

// odla_ops_process.h
odla_value odla_Broadcast(const odla_value input, odla_value_shape output_shape,
                          const odla_value_id value_id) {
  ODLA_OP(Op("broadcast", {V(input), Dims(output_shape), Id(value_id)}));
}

odla_value odla_Cast(odla_value input, odla_element_type target_type,
                     const odla_value_id value_id) {
  ODLA_OP(Op("cast", {V(input), I(target_type), Id(value_id)}));
}

odla_value odla_Compress(odla_value input, odla_value condition, odla_int32 axis,
                         odla_value_shape max_output_shape, const odla_value_id value_id) {
  ODLA_OP(Op("compress", {V(input), V(condition), I(axis), Hint(max_output_shape), Id(value_id)}));
}

odla_value odla_Concat(odla_values inputs, odla_int32 axis, odla_value_shape output_shape,
                       const odla_value_id value_id) {
  ODLA_OP(Op("concat", {Vs(inputs), I(axis), Hint(output_shape), Id(value_id)}));
}

odla_value odla_ExpandDims(odla_value input, odla_value_shape output_dims,
                           const odla_value_id value_id) {
  ODLA_OP(Op("expand_dims", {V(input), Dims(output_dims), Id(value_id)}));
}

odla_value odla_Fill(odla_value_type type, odla_fill_method method, odla_float32 p0,
                     odla_float32 p1, odla_float32 seed, const odla_value_id value_id) {
  ODLA_OP(Op("fill", {Type(type), I(method), F(p0), F(p1), F(seed), Id(value_id)}));
}

odla_value odla_Gather(odla_value input, odla_value indices, odla_int32 axis,
                       odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("gather", {V(input), V(indices), I(axis), Hint(output_dims), Id(value_id)}));
}

odla_value odla_GatherND(odla_value input, odla_value indices, odla_int32 num_batch_dims,
                         odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("gather_nd", {V(input), V(indices), I(num_batch_dims), Hint(output_dims),
                           Id(value_id)}));
}

odla_value odla_GatherElements(odla_value input, odla_value indices, odla_int32 axis,
                               odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("gather_elements", {V(input), V(indices), I(axis), Hint(output_dims), Id(value_id)}));
}

odla_value odla_OneHot(odla_value indices, odla_int32 depth, odla_value values, odla_int32 axis,
                       odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("one_hot", {V(indices), I(depth), V(values), I(axis), Hint(output_dims),
                         Id(value_id)}));
}

odla_value odla_Pad(odla_value input, const odla_uint32* padding_front,
                    const odla_uint32* padding_back, odla_value_shape output_dims,
                    const odla_value_id value_id) {
  ODLA_OP(Op("pad", {V(input), Ints(padding_front, Dimensions(input)),
                     Ints(padding_back, Dimensions(input)), Hint(output_dims), Id(value_id)}));
}

odla_value odla_Reshape(odla_value input, odla_value_shape output_dims,
                        const odla_value_id value_id) {
  ODLA_OP(Op("reshape", {V(input), Dims(output_dims), Id(value_id)}));
}

odla_value odla_ReshapeDynamic(odla_value input, odla_value output_shape,
                               const odla_value_id value_id) {
  ODLA_OP(Op("reshape_dynamic", {V(input), V(output_shape), Id(value_id)}));
}

odla_value odla_Resize(odla_value input, odla_interpolation_mode interpolation,
                       odla_resize_coordinate_mode mode, odla_uint32 axes_mask,
                       odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("resize", {V(input), I(interpolation), I(mode), I(axes_mask), Dims(output_dims),
                        Id(value_id)}));
}

odla_value odla_ResizeDynamic(odla_value input, odla_value scales, odla_value sizes,
                              odla_interpolation_mode interpolation,
                              odla_resize_coordinate_mode mode, odla_value_shape output_dims,
                              const odla_value_id value_id) {
  ODLA_OP(Op("resize_dynamic", {V(input), V(scales), V(sizes), I(interpolation), I(mode),
                                Hint(output_dims), Id(value_id)}));
}

odla_value odla_Shape(odla_value input, odla_value_shape output_dims,
                      const odla_value_id value_id) {
  ODLA_OP(Op("shape", {V(input), Hint(output_dims), Id(value_id)}));
}

odla_value odla_Slice(odla_value input, const odla_int32* start, const odla_int32* end,
                      const odla_int32* stride, odla_value_shape output_dims,
                      const odla_value_id value_id) {
  ODLA_OP(Op("slice", {V(input), Ints(start, Dimensions(input)), Ints(end, Dimensions(input)),
                       Ints(stride, Dimensions(input)), Hint(output_dims), Id(value_id)}));
}

odla_value odla_DimsExpand(odla_value input, odla_value original, odla_value axes,
                           odla_value_shape output_dims, const odla_value_id id) {
  ODLA_OP(Op("dims_expand", {V(input), V(original), V(axes), Hint(output_dims), Id(id)}));
}

odla_value odla_SliceDynamic(odla_value input, odla_value start, odla_value size, odla_value stride,
                             odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("slice_dynamic", {V(input), V(start), V(size), V(stride), Hint(output_dims),
                               Id(value_id)}));
}

odla_values odla_Split(odla_value input, odla_value split_dim, odla_int32 num_split,
                       const odla_value_ids value_ids) {
  ODLA_OPS(Ops("split", {V(input), V(Require(split_dim, "split_dim")), I(num_split),
                         Ids(value_ids)}));
}

odla_value odla_Squeeze(odla_value input, odla_size_t num_of_axes, const odla_uint32* axes,
                        odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("squeeze", {V(input), I(num_of_axes), Ints(axes, Count(num_of_axes, "num_of_axes")),
                         Hint(output_dims), Id(value_id)}));
}

odla_value odla_Stack(odla_values inputs, odla_int32 axis, odla_value_shape output_shape,
                      const odla_value_id value_id) {
  ODLA_OP(Op("stack", {Vs(inputs), I(axis), Hint(output_shape), Id(value_id)}));
}

odla_value odla_Transpose(odla_value input, odla_value_shape permutations,
                          odla_value_shape output_dims, const odla_value_id value_id) {
  ODLA_OP(Op("transpose", {V(input), Dims(permutations), Hint(output_dims), Id(value_id)}));
}

odla_value odla_Tile(odla_value input, const odla_uint32* repeat, odla_value_shape output_dims,
                     const odla_value_id value_id) {
  ODLA_OP(Op("tile", {V(input), Ints(repeat, Dimensions(input)), Hint(output_dims), Id(value_id)}));
}

odla_value odla_TileDynamic(odla_value input, odla_value repeat, odla_value_shape output_dims,
                            const odla_value_id value_id) {
  ODLA_OP(Op("tile_dynamic", {V(input), V(repeat), Hint(output_dims), Id(value_id)}));
}

// odla_ops_quantization.h
odla_value odla_Dequantize(odla_value input, odla_value scale, odla_value zero_point,
                           odla_int32 axis, odla_element_type target_data_type,
                           const odla_value_id value_id) {
  ODLA_OP(Op("dequantize", {V(input), V(scale), V(zero_point), I(axis), I(target_data_type),
                            Id(value_id)}));
}

odla_value odla_Quantize(odla_value input, odla_value scale, odla_value zero_point, odla_int32 axis,
                         odla_element_type target_data_type, const odla_value_id value_id) {
  ODLA_OP(Op("quantize", {V(input), V(scale), V(zero_point), I(axis), I(target_data_type),
                          Id(value_id)}));
}

// odla_ops_control_flow.h
odla_value odla_CreateLoopVariable(odla_value init_value, odla_value_id value_id) {
  ODLA_OP(Op("create_loop_variable", {V(init_value), Id(value_id)}));
}

odla_status odla_BeginLoop(odla_value trip_count, odla_value_id value_id) {
  return Guard(__func__, [&] {
    Do(CurrentComputation(), "begin_loop", {V(trip_count), Id(value_id)});
    return ODLA_SUCCESS;
  });
}

odla_values odla_EndLoop(odla_value condition, odla_values output_values,
                         const odla_loop_output_mode* flags, odla_value_ids value_ids) {
  ODLA_OPS(Ops("end_loop", {V(condition), Vs(output_values), Ints(flags, output_values.size),
                            Ids(value_ids)}));
}

odla_status odla_BeginIf(odla_value condition, odla_value_id value_id) {
  return Guard(__func__, [&] {
    Do(CurrentComputation(), "begin_if", {V(condition), Id(value_id)});
    return ODLA_SUCCESS;
  });
}

odla_status odla_EnterBranchBody(odla_bool true_branch) {
  return Guard(__func__, [&] {
    Do(CurrentComputation(), "enter_branch_body", {I(true_branch)});
    return ODLA_SUCCESS;
  });
}

odla_values odla_EndIf(odla_value_ids value_ids) { ODLA_OPS(Ops("end_if", {Ids(value_ids)})); }

// odla_ops_custom.h: ODLA leaves the trailing arguments to each vendor; none are read here,
// and the op runs the implementation registered in odla_tvm for `function_name`.
odla_values odla_CustomOp(odla_values inputs, const odla_char* op_name,
                          const odla_char* function_name, const odla_value_ids ids, ...) {
  ODLA_OPS(Ops("custom_op", {Vs(inputs), S(Require(op_name, "op_name")),
                             S(Require(function_name, "function_name")), Ids(ids), None()}));
}

}  // extern "C"
