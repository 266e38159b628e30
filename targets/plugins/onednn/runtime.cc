// What every oneDNN region needs at run time (region.h's data built into oneDNN primitives
// on a region's first call and reused on every later call), compiled once per machine and
// linked into each model library that has oneDNN regions. The regions take TVM's packed
// arguments as they come: unpacking a region's hundreds of typed arguments
// (TVM_FFI_DLL_EXPORT_TYPED_FUNC) takes g++ -O2 minutes.
//
// Layouts: the region's parameters and results are TVM's plain row-major tensors. Inside the
// region every convolution chooses its own layouts (format `any`), so intermediates stay in
// oneDNN's blocked layouts; a reorder happens only where a step wants another layout than its
// input has (at the region's boundaries, nearly always).
// Weights (parameters bound to constants, which the patterns insist on) are reordered once to
// the layout their primitive prefers, and again only if the constant's address changes.
#include <dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include "build_conv_matmul.h"
#include "build_primitives.h"
#include "omp_threads.h"
#include "region.h"
#include "region_state.h"
#include "region_values.h"
#include "scratch.h"
#include "weight_packing.h"


// Internal linkage for all of it (and for the headers of its own it includes): the same
// inline names in two loaded model libraries would otherwise be one (GNU unique symbols),
// sharing the call counter between models.
namespace odla_onednn {
namespace {

// Region calls run so far in this library (tests read it to see oneDNN's code ran).
inline std::atomic<int64_t> region_calls{0};

inline int64_t calls() { return region_calls.load(); }

inline void* data(const TVMFFIAny& arg) {
  DLTensor* tensor = reinterpret_cast<const tvm::ffi::AnyView&>(arg).cast<DLTensor*>();
  return static_cast<char*>(tensor->data) + tensor->byte_offset;
}

Region::Region(const RegionSpec& spec)
    : steps_(spec.steps, spec.steps + spec.step_count),
      results_(spec.results, spec.results + spec.result_count), types_(product_types(spec)) {
  for (int i = 0; i < spec.param_count; ++i)
    params_.emplace_back(plain_desc(to_dims(spec.params[i])), cpu_engine(), nullptr);
}

// Whether the scalars the primitives were built with (a layer norm's epsilon, LRN's
// factors) differ in ``args``: TVM calls one region from each place the graph repeats it,
// and two places may pass other values.
bool Region::stale(const TVMFFIAny* args) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [index, value] : scalars_)
    if (*static_cast<const float*>(data(args[index])) != value) return true;
  return false;
}

// One call as TVM makes it (call_dps_packed): the region's parameters, then its outputs.
void Region::run(const TVMFFIAny* args, int32_t num_args) {
  std::lock_guard<std::mutex> lock(mutex_);  // one region's buffers serve one call at a time
  if (static_cast<size_t>(num_args) != params_.size() + results_.size())
    TVM_FFI_THROW(TypeError) << "a oneDNN region of " << params_.size() << " parameters and "
                             << results_.size() << " outputs got " << num_args << " arguments";
  ready_threads();  // before building: packing the weights runs parallel regions
  if (!built_) build(args);
  ++region_calls;
  char* base = scratch(scratch_bytes_);
  for (const Temporary& t : temporaries_) t.value.set_data_handle(base + t.offset);
  std::vector<void*> params;
  for (size_t i = 0; i < params_.size(); ++i) {
    params.push_back(data(args[i]));
    params_[i].set_data_handle(params.back());
  }
  for (auto& [index, view] : views_) view.set_data_handle(params[index]);
  for (size_t i = 0; i < outputs_.size(); ++i)
    outputs_[i].set_data_handle(data(args[params_.size() + i]));
  for (auto& [value, output] : in_output_) value.set_data_handle(outputs_[output].get_data_handle());
  for (auto& [value, writer] : writers_) writer.set_data_handle(value.get_data_handle());
  for (auto& [source, view] : step_views_) view.set_data_handle(source.get_data_handle());
  Pagemap pagemap;
  FileMappings mappings;
  for (Weights& w : weights_) refresh(w, pagemap, mappings);
  dnnl::stream stream(cpu_engine());
  for (Action& action : actions_) action.primitive.execute(stream, action.args);
  stream.wait();
}

// The primitives, on the first call: a layer norm's epsilon is a parameter's value.
void Region::build(const TVMFFIAny* args) {
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::kConv: build_conv(s); break;
      case Step::kMatmul: build_matmul(s); break;
      case Step::kConcat: build_concat(s); break;
      case Step::kPool: build_pool(s); break;
      case Step::kSoftmax: build_softmax(s); break;
      case Step::kBinary: build_binary(s); break;
      case Step::kReduction: build_reduction(s); break;
      case Step::kTranspose: build_transpose(s); break;
      case Step::kEltwise: build_eltwise(s); break;
      case Step::kLayerNorm: build_layer_norm(s, scalar(args, s.epsilon)); break;
      case Step::kLrn:
        build_lrn(s, scalar(args, s.scale), scalar(args, s.shift), scalar(args, s.epsilon));
        break;
    }
  }
  for (size_t i = 0; i < results_.size(); ++i) {
    memory& value = values_[results_[i]];
    outputs_.emplace_back(plain_desc(value.get_desc().get_dims()), cpu_engine(), nullptr);
    // A plain result is computed in the output itself (its memory is pointed there each
    // call); another layout, or a step returned twice, is reordered into it.
    bool first = std::find(results_.begin(), results_.begin() + i, results_[i]) ==
                 results_.begin() + i;
    if (first && value.get_desc() == outputs_.back().get_desc())
      in_output_.emplace_back(value, i);
    else
      add_reorder(value, outputs_.back());
  }
  place_temporaries();
  built_ = true;
}

// A scalar parameter's value, read while building (and recorded for stale).
float Region::scalar(const TVMFFIAny* args, Operand operand) {
  float value = *static_cast<const float*>(data(args[operand.index]));
  scalars_.emplace_back(operand.index, value);
  return value;
}

inline void keep_packed_weights(const tvm::ffi::String& root) { packed_store.keep_in(root); }

// Each generated region's state, made on its first call.
std::mutex regions_mutex;
std::unordered_map<const RegionSpec*, std::shared_ptr<Region>> regions;

// The region for a call with ``args``: built anew when its scalars differ (a call running on
// the one before keeps it alive until it returns).
std::shared_ptr<Region> region_for(const RegionSpec* spec, const TVMFFIAny* args) {
  std::lock_guard<std::mutex> lock(regions_mutex);
  std::shared_ptr<Region>& region = regions[spec];
  if (!region || region->stale(args)) region = std::make_shared<Region>(*spec);
  return region;
}

}  // namespace
}  // namespace odla_onednn

extern "C" int odla_onednn_run(const odla_onednn::RegionSpec* spec, const TVMFFIAny* args,
                               int32_t num_args) {
  TVM_FFI_SAFE_CALL_BEGIN();
  odla_onednn::region_for(spec, args)->run(args, num_args);
  TVM_FFI_SAFE_CALL_END();
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(odla_onednn_calls, odla_onednn::calls);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(odla_keep_packed_weights, odla_onednn::keep_packed_weights);
