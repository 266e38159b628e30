// An int8 product the oneDNN plugin computes (int8_patterns.py): a convolution or matmul of an
// 8-bit source (u8 or s8 levels) by constant s8 weights, accumulated in int32, with what
// follows it in the graph fused in where the pattern took it: the source's zero point, the
// scales, a bias, a ReLU and the quantize of the result (oneDNN's attributes). The code
// int8_source_writer.py generates for a model is one such spec a region, as plain data;
// int8_runtime.cc builds it into a oneDNN primitive on its first call.
#ifndef ODLA_ONEDNN_INT8_REGION_H_
#define ODLA_ONEDNN_INT8_REGION_H_

#include <tvm/ffi/c_api.h>

#include <cstdint>

namespace odla_onednn_int8 {

struct Dims {
  int rank;
  int64_t dims[5];
};

struct Int8Spec {
  enum Kind { kConv, kMatmul } kind;
  int param_count;     // the region's parameters (its output follows them)
  int src;             // the parameter holding the 8-bit source
  int src_step;        // or, where not -1, the region's earlier product whose result it is
  bool src_signed;     // s8, else u8
  int weights;         // the parameter holding the constant s8 weights (packed once)
  bool channels_last;  // conv: the source and result NHWC, the weights OHWI (else NCHW, OIHW)
  Dims src_dims;       // conv: NCHW (whatever the layout); matmul: (..., M, K)
  Dims weights_dims;   // conv: OIHW, grouped (G, O/G, I/G, H, W) where groups > 1 (whatever the layout); matmul: (K, N)
  Dims dst_dims;       // conv: NCHW (whatever the layout); matmul: (..., M, N)
  int64_t strides[2], dilates[2], pad_l[2], pad_r[2];  // conv; dilates count from 0
  // The fused epilogue: parameters holding each operand (scalars unless said), -1 for none.
  // Without weights_scale the result is the int32 product itself.
  int src_zero = -1;       // the source's zero point (any 8- or 32-bit integer)
  int src_scale = -1;      // a float32 scale of the source, read every call (dynamic)
  int weights_scale = -1;  // float32, one or one per output channel
  bool weights_scale_per_channel = false;
  int bias = -1;           // float32, one per output channel
  bool relu = false;
  int dst_scale = -1;      // the quantize's float32 scale and zero point (8-bit result)
  int dst_zero = -1;
  enum DstType { kS32, kF32, kU8, kS8 } dst_type = kS32;
};

}  // namespace odla_onednn_int8

// Runs a region's ``count`` products ``specs`` in order on TVM's packed arguments (its
// parameters, then its ``output_count`` outputs, the results of the products ``outputs``
// names), building their primitives on the first call; 0, or -1 with the error raised for TVM.
extern "C" int odla_onednn_int8_run(const odla_onednn_int8::Int8Spec* specs, int count,
                                    const int* outputs, int output_count,
                                    const TVMFFIAny* args, int32_t num_args);

#endif  // ODLA_ONEDNN_INT8_REGION_H_
