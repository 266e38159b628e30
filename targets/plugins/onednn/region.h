// The data a generated oneDNN region is made of, shared by the code source_writer.py
// generates for each model (plain constant tables, compiled in well under a second) and
// runtime.cc, which builds them into oneDNN primitives and runs them (compiled once per
// machine and cached, as it includes dnnl.hpp). A region is a list of steps (convolution,
// matmul, pooling, concat, softmax, layer norm, binary op, reduction) as plain constant data: an initializer of the
// same size built from std::vector takes g++ -O2 minutes.
#ifndef ODLA_ONEDNN_REGION_H_
#define ODLA_ONEDNN_REGION_H_

#include <oneapi/dnnl/dnnl_types.h>
#include <tvm/ffi/c_api.h>

#include <cstdint>

namespace odla_onednn {

// Where a step's operand comes from: a region parameter or an earlier step's result.
struct Operand {
  enum Kind { kNone, kParam, kStep } kind;
  int index;
};
constexpr Operand none() { return {Operand::kNone, -1}; }
constexpr Operand param(int index) { return {Operand::kParam, index}; }
constexpr Operand step(int index) { return {Operand::kStep, index}; }

struct Shape {
  int rank;
  int64_t dims[5];
};

// An elementwise op fused after a convolution or matmul, in the order the graph applies them.
struct PostOp {
  // residual: a sum into dst (conv); eltwise: a unary op (`algorithm`); binary: `algorithm`
  // with `operand`, of dims `shape` (as many as dst's), broadcast to dst.
  enum Kind { kResidual, kEltwise, kBinary } kind;
  Operand operand;  // none() for kEltwise
  dnnl_alg_kind_t algorithm;
  Shape shape;
};

struct Step {
  enum Kind {
    kConv, kMatmul, kPool, kConcat, kSoftmax, kLayerNorm, kBinary, kReduction, kTranspose, kLrn,
    kEltwise
  } kind;
  Operand src;
  Operand weights;          // conv: constant weights (a parameter); matmul: the right operand;
                            // binary: the operand broadcast to src (weights_shape: its dims,
                            // as many as src's)
  bool weights_constant;    // matmul: weights are a constant parameter, packed once
  bool weights_transposed;  // matmul: the graph swaps the last two axes of `weights` first
  Operand bias;             // conv, matmul: none() when there is none
  Shape src_shape, weights_shape, dst_shape;  // conv weights grouped when groups > 1; matmul
                                              // operands as stored, before any transpose
  dnnl_alg_kind_t algorithm;  // pool: max or average (with or without the padding); softmax:
                              // accurate or log; binary, eltwise: the op; reduction: mean
  int64_t kernel[2], strides[2], dilates[2], pad_l[2], pad_r[2];  // dilates count from 0
  int post_op_count;
  PostOp post_ops[8];
  const Operand* sources;  // concat: its operands in order (along channels), source_count
  int source_count;        // of them
  int axis;                // softmax: the axis it normalizes over
  int64_t axes[5];         // transpose: output axis i is input axis axes[i]
  Operand scale, shift;    // layer norm over the last axis: none() where the graph has none;
                           // LRN: scalar parameters alpha / size and the bias k
  Operand epsilon;         // layer norm: the scalar parameter holding epsilon; LRN: beta
                           // (LRN's window size is kernel[0])
};

// One region: its parameters' shapes, its steps, and the steps whose values it returns.
struct RegionSpec {
  const Shape* params;
  int param_count;
  const Step* steps;
  int step_count;
  const int* results;
  int result_count;
  // Its convolutions' and matmuls' src and weights, and their dst (bf16 under BF16_MODE,
  // bf16_types.h); dnnl_data_type_undef (a table that names none): f32.
  dnnl_data_type_t product_operands, product_results;
};

}  // namespace odla_onednn

// Runs ``spec`` on TVM's packed arguments (its parameters, then its outputs: TVM's DPS call),
// building its primitives on the first call; 0, or -1 with the error raised for TVM.
extern "C" int odla_onednn_run(const odla_onednn::RegionSpec* spec, const TVMFFIAny* args,
                               int32_t num_args);

#endif  // ODLA_ONEDNN_REGION_H_
