// What every int8 region (int8_region.h) needs at run time: its oneDNN convolutions and matmuls,
// built on the region's first call and reused, with the weights packed once for each
// constant it is called with. Compiled once per machine and linked into
// each model library with int8 regions, like runtime.cc.
#include <dnnl.hpp>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include "int8_region.h"
#include "omp_threads.h"


namespace odla_onednn_int8 {
namespace {

using dnnl::memory;
using dt = memory::data_type;

// Int8 products run so far in this library (tests read it to see oneDNN's code ran).
std::atomic<int64_t> products_run{0};

int64_t calls() { return products_run.load(); }

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

void* data(const TVMFFIAny& arg) {
  DLTensor* tensor = reinterpret_cast<const tvm::ffi::AnyView&>(arg).cast<DLTensor*>();
  return static_cast<char*>(tensor->data) + tensor->byte_offset;
}

memory::format_tag plain_tag(size_t rank) {
  static const memory::format_tag tags[] = {memory::format_tag::a, memory::format_tag::ab,
                                            memory::format_tag::abc, memory::format_tag::abcd,
                                            memory::format_tag::abcde};
  return tags[rank - 1];
}

memory::dims to_dims(const Dims& d) { return memory::dims(d.dims, d.dims + d.rank); }

memory::desc plain(const memory::dims& dims, dt type) {
  return memory::desc(dims, type, plain_tag(dims.size()));
}

memory::desc any(const memory::dims& dims, dt type) {
  return memory::desc(dims, type, memory::format_tag::any);
}

// A matmul's (..., M, K) operand as the 2-D (rows, K) the constant weights multiply.
memory::dims rows(const Dims& d) {
  int64_t count = 1;
  for (int i = 0; i + 1 < d.rank; ++i) count *= d.dims[i];
  return {count, d.dims[d.rank - 1]};
}

// One product of a region: its primitive, its packed weights, its epilogue's arguments.
class Int8Product {
 public:
  explicit Int8Product(const Int8Spec& spec) : spec_(spec) { build(); }

  // Computes from ``source`` into ``result`` (TVM's tensors or the region's buffers), the
  // other operands read from ``args``.
  void run(const TVMFFIAny* args, void* source, void* result, dnnl::stream& stream) {
    void* weights = data(args[spec_.weights]);
    auto packed = packed_.find(weights);
    if (packed == packed_.end()) {
      memory plain_weights(weights_plain_, cpu_engine(), weights);
      packed = packed_.emplace(weights, memory(weights_desc_, cpu_engine())).first;
      dnnl::reorder(plain_weights, packed->second).execute(stream, plain_weights, packed->second);
    }
    memory src(src_plain_, cpu_engine(), source);
    if (src_ != nullptr) {
      dnnl::reorder(src, *src_).execute(stream, src, *src_);
      src = *src_;
    }
    memory output(dst_plain_, cpu_engine(), result);
    memory dst = dst_ != nullptr ? *dst_ : output;
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed->second}, {DNNL_ARG_DST, dst}};
    add_epilogue(args, arguments);
    primitive_.execute(stream, arguments);
    if (dst_ != nullptr) dnnl::reorder(*dst_, output).execute(stream, *dst_, output);
  }

  size_t result_bytes() const { return dst_plain_.get_size(); }

 private:
  // The attributes of the fused epilogue; every value is a run-time argument (add_epilogue).
  // ``convolution``: for a convolution's primitive (a matmul may run as one, see build).
  dnnl::primitive_attr epilogue_attributes(bool convolution) const {
    dnnl::primitive_attr attr;
    if (spec_.src_zero >= 0) attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
    if (spec_.src_scale >= 0) attr.set_scales_mask(DNNL_ARG_SRC, 0);
    if (spec_.weights_scale >= 0) {
      // Per output channel: a convolution's first weights dim (and groups'), a matmul's N.
      const int per_channel = !convolution ? 1 << 1
                              : spec_.weights_dims.rank == 5 ? (1 << 0) | (1 << 1) : 1 << 0;
      attr.set_scales_mask(DNNL_ARG_WEIGHTS, spec_.weights_scale_per_channel ? per_channel : 0);
    }
    if (spec_.relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(ops);
    }
    if (spec_.dst_scale >= 0) attr.set_scales_mask(DNNL_ARG_DST, 0);
    if (spec_.dst_zero >= 0) attr.set_zero_points_mask(DNNL_ARG_DST, 0);
    return attr;
  }

  dt dst_type() const {
    static const dt types[] = {dt::s32, dt::f32, dt::u8, dt::s8};
    return types[spec_.dst_type];
  }

  // The epilogue's run-time arguments, read from TVM's tensors on every call (a dynamically
  // quantized source has a new scale and zero point each time).
  void add_epilogue(const TVMFFIAny* args, std::unordered_map<int, memory>& arguments) {
    auto scalar_f32 = [&](int param) {
      return memory({{1}, dt::f32, memory::format_tag::a}, cpu_engine(), data(args[param]));
    };
    if (spec_.src_zero >= 0) {
      src_zero_ = integer(args[spec_.src_zero]);
      arguments.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC,
                        memory({{1}, dt::s32, memory::format_tag::a}, cpu_engine(), &src_zero_));
    }
    if (spec_.src_scale >= 0)
      arguments.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, scalar_f32(spec_.src_scale));
    if (spec_.weights_scale >= 0) {
      const memory::dim count = spec_.weights_scale_per_channel ? channels_ : 1;
      arguments.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS,
                        memory({{count}, dt::f32, memory::format_tag::a}, cpu_engine(),
                               data(args[spec_.weights_scale])));
    }
    if (spec_.bias >= 0)
      arguments.emplace(DNNL_ARG_BIAS, memory(bias_desc_, cpu_engine(), data(args[spec_.bias])));
    if (spec_.dst_scale >= 0)
      arguments.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_DST, scalar_f32(spec_.dst_scale));
    if (spec_.dst_zero >= 0) {
      dst_zero_ = integer(args[spec_.dst_zero]);
      arguments.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST,
                        memory({{1}, dt::s32, memory::format_tag::a}, cpu_engine(), &dst_zero_));
    }
  }

  // A zero point's value: a scalar tensor of 8 or 32 bits, signed or not.
  static int32_t integer(const TVMFFIAny& arg) {
    DLTensor* tensor = reinterpret_cast<const tvm::ffi::AnyView&>(arg).cast<DLTensor*>();
    const void* value = static_cast<const char*>(tensor->data) + tensor->byte_offset;
    if (tensor->dtype.bits == 8)
      return tensor->dtype.code == kDLUInt ? *static_cast<const uint8_t*>(value)
                                           : *static_cast<const int8_t*>(value);
    return *static_cast<const int32_t*>(value);
  }

  void build() {
    using tag = memory::format_tag;
    const dt src_type = spec_.src_signed ? dt::s8 : dt::u8;
    if (spec_.kind == Int8Spec::kConv) {
      memory::dims src = to_dims(spec_.src_dims), weights = to_dims(spec_.weights_dims),
                   dst = to_dims(spec_.dst_dims);
      if (spec_.channels_last) {  // NHWC data, OHWI weights ((G, O/G, KH, KW, I/G) grouped)
        src_plain_ = memory::desc(src, src_type, tag::acdb);
        weights_plain_ = memory::desc(weights, dt::s8, weights.size() == 5 ? tag::abdec : tag::acdb);
        dst_plain_ = memory::desc(dst, dst_type(), tag::acdb);
      } else {
        src_plain_ = plain(src, src_type);
        weights_plain_ = plain(weights, dt::s8);
        dst_plain_ = plain(dst, dst_type());
      }
      build_convolution(memory::dims(spec_.strides, spec_.strides + 2),
                        memory::dims(spec_.dilates, spec_.dilates + 2),
                        memory::dims(spec_.pad_l, spec_.pad_l + 2),
                        memory::dims(spec_.pad_r, spec_.pad_r + 2));
      return;
    }
    memory::dims src = rows(spec_.src_dims), dst = rows(spec_.dst_dims),
                 weights = to_dims(spec_.weights_dims);
    channels_ = weights[1];
    src_plain_ = plain(src, src_type);
    weights_plain_ = plain(weights, dt::s8);
    dst_plain_ = plain(dst, dst_type());
    bias_desc_ = spec_.bias >= 0 ? plain({1, channels_}, dt::f32) : memory::desc();
    dnnl::matmul::primitive_desc pd(cpu_engine(), src_plain_, any(weights, dt::s8), bias_desc_,
                                    dst_plain_, epilogue_attributes(false));
    if (std::string(pd.impl_info_str()).rfind("gemm", 0) == 0) {
      // Without brgemm (AVX2 before VNNI) oneDNN's int8 matmul is its gemm, which packs the
      // weights on every call: the same product as a 1x1 convolution over M rows (the same
      // bytes: (M, K) rows are NHWC pixels, (K, N) weights IOHW) packs them once, and runs
      // faster (docs/onednn.md).
      src_plain_ = memory::desc({1, src[1], src[0], 1}, src_type, tag::acdb);
      weights_plain_ = memory::desc({channels_, src[1], 1, 1}, dt::s8, tag::bacd);
      dst_plain_ = memory::desc({1, channels_, src[0], 1}, dst_type(), tag::acdb);
      build_convolution({1, 1}, {0, 0}, {0, 0}, {0, 0});
      return;
    }
    primitive_ = dnnl::matmul(pd);
    weights_desc_ = pd.weights_desc();
    keep_layouts(pd.src_desc(), pd.dst_desc());
  }

  // A convolution of the plain descriptors set, the primitive choosing the weights' layout
  // and, where it must, the source's and result's.
  void build_convolution(const memory::dims& strides, const memory::dims& dilates,
                         const memory::dims& pad_l, const memory::dims& pad_r) {
    channels_ = dst_plain_.get_dims()[1];
    bias_desc_ = spec_.bias >= 0 ? plain({channels_}, dt::f32) : memory::desc();
    dnnl::convolution_forward::primitive_desc pd(
        cpu_engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        any(src_plain_.get_dims(), src_plain_.get_data_type()),
        any(weights_plain_.get_dims(), dt::s8), bias_desc_,
        any(dst_plain_.get_dims(), dst_type()), strides, dilates, pad_l, pad_r,
        epilogue_attributes(true));
    primitive_ = dnnl::convolution_forward(pd);
    weights_desc_ = pd.weights_desc();
    keep_layouts(pd.src_desc(), pd.dst_desc());
  }

  // Buffers for the source and result where the primitive's layouts are not TVM's.
  void keep_layouts(const memory::desc& src, const memory::desc& dst) {
    if (src != src_plain_) src_ = std::make_unique<memory>(src, cpu_engine());
    if (dst != dst_plain_) dst_ = std::make_unique<memory>(dst, cpu_engine());
  }

  Int8Spec spec_;
  memory::desc src_plain_, weights_plain_, dst_plain_;  // TVM's tensors, as they are
  dnnl::primitive primitive_;
  memory::desc weights_desc_;             // the layout the primitive chose for the weights
  memory::desc bias_desc_;                // empty without a bias
  memory::dim channels_ = 0;              // output channels (a matmul's N)
  int32_t src_zero_ = 0, dst_zero_ = 0;   // this call's zero points, as oneDNN reads them
  // The weights packed in that layout, by the constant's address: TVM calls one region from
  // each place the graph repeats its product, each with its own weights.
  std::unordered_map<void*, memory> packed_;
  std::unique_ptr<memory> src_, dst_;     // the source and result in the primitive's layouts,
                                          // where those are not TVM's
};

// A region: its products in order, each reading a parameter or an earlier product's result
// and writing one of the region's outputs or a buffer of its own.
class Int8Region {
 public:
  Int8Region(const Int8Spec* specs, int count, const int* outputs, int output_count)
      : specs_(specs, specs + count), output_of_(count, -1), output_count_(output_count),
        buffers_(count) {
    for (int output = 0; output < output_count; ++output) output_of_[outputs[output]] = output;
    odla_onednn::ready_threads();  // before building: packing the weights runs parallel regions
    for (const Int8Spec& spec : specs_) products_.push_back(std::make_unique<Int8Product>(spec));
    for (int step = 0; step < count; ++step)
      if (output_of_[step] < 0) buffers_[step].resize(products_[step]->result_bytes());
  }

  void run(const TVMFFIAny* args, int32_t num_args) {
    std::lock_guard<std::mutex> lock(mutex_);  // one region's buffers serve one call at a time
    const int param_count = specs_[0].param_count;
    if (num_args != param_count + output_count_)
      TVM_FFI_THROW(TypeError) << "an int8 oneDNN region of " << param_count << " parameters and "
                               << output_count_ << " outputs got " << num_args << " arguments";
    products_run += specs_.size();
    odla_onednn::ready_threads();
    dnnl::stream stream(cpu_engine());
    for (size_t step = 0; step < specs_.size(); ++step) {
      const Int8Spec& spec = specs_[step];
      void* source = spec.src_step >= 0 ? result(args, spec.src_step) : data(args[spec.src]);
      products_[step]->run(args, source, result(args, step), stream);
    }
    stream.wait();
  }

 private:
  void* result(const TVMFFIAny* args, int step) {
    const int output = output_of_[step];
    return output >= 0 ? data(args[specs_[0].param_count + output]) : buffers_[step].data();
  }

  std::vector<Int8Spec> specs_;
  std::vector<int> output_of_;  // per product, the region's output holding its result, or -1
  int output_count_;
  std::vector<std::unique_ptr<Int8Product>> products_;
  std::vector<std::vector<uint8_t>> buffers_;  // the results no output holds
  std::mutex mutex_;
};

std::mutex regions_mutex;
std::unordered_map<const Int8Spec*, std::unique_ptr<Int8Region>> regions;

Int8Region& region_for(const Int8Spec* specs, int count, const int* outputs, int output_count) {
  std::lock_guard<std::mutex> lock(regions_mutex);
  std::unique_ptr<Int8Region>& region = regions[specs];
  if (!region) region = std::make_unique<Int8Region>(specs, count, outputs, output_count);
  return *region;
}

}  // namespace
}  // namespace odla_onednn_int8

extern "C" int odla_onednn_int8_run(const odla_onednn_int8::Int8Spec* specs, int count,
                                    const int* outputs, int output_count,
                                    const TVMFFIAny* args, int32_t num_args) {
  TVM_FFI_SAFE_CALL_BEGIN();
  odla_onednn_int8::region_for(specs, count, outputs, output_count).run(args, num_args);
  TVM_FFI_SAFE_CALL_END();
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(odla_onednn_int8_calls, odla_onednn_int8::calls);
