// What every int8 region (int8_region.h) needs at run time: its oneDNN convolution or matmul,
// built on the region's first call and reused, with the weights packed once for each
// constant it is called with. Compiled once per machine and linked into
// each model library with int8 regions, like runtime.cc.
#include <dnnl.hpp>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include "int8_region.h"
#include "omp_threads.h"

extern "C" void omp_set_num_threads(int);  // libgomp: oneDNN's threading in this build

namespace odla_onednn_int8 {
namespace {

using dnnl::memory;
using dt = memory::data_type;

// Int8 region calls run so far in this library (tests read it to see oneDNN's code ran).
std::atomic<int64_t> region_calls{0};

int64_t calls() { return region_calls.load(); }

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

class Int8Region {
 public:
  explicit Int8Region(const Int8Spec& spec) : spec_(spec) { build(); }

  void run(const TVMFFIAny* args, int32_t num_args) {
    std::lock_guard<std::mutex> lock(mutex_);  // one region's buffers serve one call at a time
    if (num_args != spec_.param_count + 1)
      TVM_FFI_THROW(TypeError) << "an int8 oneDNN region of " << spec_.param_count
                               << " parameters and 1 output got " << num_args << " arguments";
    ++region_calls;
    omp_set_num_threads(odla_onednn::thread_count());  // OpenMP keeps it per calling thread
    dnnl::stream stream(cpu_engine());
    void* weights = data(args[spec_.weights]);
    auto packed = packed_.find(weights);
    if (packed == packed_.end()) {
      memory source(weights_plain_, cpu_engine(), weights);
      packed = packed_.emplace(weights, memory(weights_desc_, cpu_engine())).first;
      dnnl::reorder(source, packed->second).execute(stream, source, packed->second);
    }
    memory src(src_plain_, cpu_engine(), data(args[spec_.src]));
    if (src_ != nullptr) {
      dnnl::reorder(src, *src_).execute(stream, src, *src_);
      src = *src_;
    }
    memory output(dst_plain_, cpu_engine(), data(args[spec_.param_count]));
    memory dst = dst_ != nullptr ? *dst_ : output;
    std::unordered_map<int, memory> arguments{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed->second}, {DNNL_ARG_DST, dst}};
    primitive_.execute(stream, arguments);
    if (dst_ != nullptr) dnnl::reorder(*dst_, output).execute(stream, *dst_, output);
    stream.wait();
  }

 private:
  void build() {
    const dt src_type = spec_.src_signed ? dt::s8 : dt::u8, dst_type = dt::s32;
    memory::desc src_desc, dst_desc;
    if (spec_.kind == Int8Spec::kConv) {
      memory::dims src = to_dims(spec_.src_dims), weights = to_dims(spec_.weights_dims),
                   dst = to_dims(spec_.dst_dims);
      if (spec_.channels_last) {  // NHWC data, OHWI weights ((G, O/G, KH, KW, I/G) grouped)
        using tag = memory::format_tag;
        src_plain_ = memory::desc(src, src_type, tag::acdb);
        weights_plain_ = memory::desc(weights, dt::s8, weights.size() == 5 ? tag::abdec : tag::acdb);
        dst_plain_ = memory::desc(dst, dst_type, tag::acdb);
      } else {
        src_plain_ = plain(src, src_type);
        weights_plain_ = plain(weights, dt::s8);
        dst_plain_ = plain(dst, dst_type);
      }
      dnnl::convolution_forward::primitive_desc pd(
          cpu_engine(), dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
          any(src, src_type), any(weights, dt::s8), memory::desc(), any(dst, dst_type),
          memory::dims(spec_.strides, spec_.strides + 2),
          memory::dims(spec_.dilates, spec_.dilates + 2),
          memory::dims(spec_.pad_l, spec_.pad_l + 2), memory::dims(spec_.pad_r, spec_.pad_r + 2));
      primitive_ = dnnl::convolution_forward(pd);
      src_desc = pd.src_desc(), weights_desc_ = pd.weights_desc(), dst_desc = pd.dst_desc();
    } else {
      memory::dims src = rows(spec_.src_dims), dst = rows(spec_.dst_dims),
                   weights = to_dims(spec_.weights_dims);
      src_plain_ = plain(src, src_type);
      weights_plain_ = plain(weights, dt::s8);
      dst_plain_ = plain(dst, dst_type);
      dnnl::matmul::primitive_desc pd(cpu_engine(), src_plain_, any(weights, dt::s8),
                                      dst_plain_);
      primitive_ = dnnl::matmul(pd);
      src_desc = pd.src_desc(), weights_desc_ = pd.weights_desc(), dst_desc = pd.dst_desc();
    }
    if (src_desc != src_plain_) src_ = std::make_unique<memory>(src_desc, cpu_engine());
    if (dst_desc != dst_plain_) dst_ = std::make_unique<memory>(dst_desc, cpu_engine());
  }

  Int8Spec spec_;
  memory::desc src_plain_, weights_plain_, dst_plain_;  // TVM's tensors, as they are
  dnnl::primitive primitive_;
  memory::desc weights_desc_;             // the layout the primitive chose for the weights
  // The weights packed in that layout, by the constant's address: TVM calls one region from
  // each place the graph repeats its product, each with its own weights.
  std::unordered_map<void*, memory> packed_;
  std::unique_ptr<memory> src_, dst_;     // the source and result in the primitive's layouts,
                                          // where those are not TVM's
  std::mutex mutex_;
};

std::mutex regions_mutex;
std::unordered_map<const Int8Spec*, std::unique_ptr<Int8Region>> regions;

Int8Region& region_for(const Int8Spec* spec) {
  std::lock_guard<std::mutex> lock(regions_mutex);
  std::unique_ptr<Int8Region>& region = regions[spec];
  if (!region) region = std::make_unique<Int8Region>(*spec);
  return *region;
}

}  // namespace
}  // namespace odla_onednn_int8

extern "C" int odla_onednn_int8_run(const odla_onednn_int8::Int8Spec* spec,
                                    const TVMFFIAny* args, int32_t num_args) {
  TVM_FFI_SAFE_CALL_BEGIN();
  odla_onednn_int8::region_for(spec).run(args, num_args);
  TVM_FFI_SAFE_CALL_END();
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(odla_onednn_int8_calls, odla_onednn_int8::calls);
