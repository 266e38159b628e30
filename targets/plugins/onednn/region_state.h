// One oneDNN region's state at run time: its steps built into primitives on the first call
// (build_*.h, region_values.h, weight_packing.h) and run on every call (runtime.cc).
#pragma once
#include <dnnl.hpp>

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tvm/ffi/c_api.h>

#include "bf16_types.h"
#include "memory_descs.h"
#include "packed_store.h"
#include "page_release.h"
#include "region.h"

namespace odla_onednn {
namespace {

class Region {
 public:
  explicit Region(const RegionSpec& spec);
  bool stale(const TVMFFIAny* args);
  void run(const TVMFFIAny* args, int32_t num_args);

 private:
  struct Temporary {
    memory value;
    size_t offset;  // in the scratch buffer
  };
  struct Action {
    dnnl::primitive primitive;
    std::unordered_map<int, memory> args;
  };
  // A constant parameter in the layout its primitive prefers. TVM calls one region from as
  // many places as the graph repeats it (BERT's 11 identical layers), each with its own
  // weights: one packed copy per weights address, so each is packed once, not every call.
  struct Weights {
    memory source;  // the parameter as the graph stores it
    memory packed;  // what the primitive reads: points at the copy for source's address
    std::vector<PackedCopy> copies;
  };

  // runtime.cc: the first call's build and the scalars it reads
  void build(const TVMFFIAny* args);
  float scalar(const TVMFFIAny* args, Operand operand);

  // region_values.h: where each step's value and operands live
  memory temporary(const memory::desc& desc);
  void place_temporaries();
  memory& value(Operand operand);
  void add_reorder(const memory& from, const memory& to);
  memory as_layout(Operand operand, const memory::desc& desc);
  memory param_view(int index, const memory::desc& desc);
  memory plain_view(Operand operand, const Dims& dims, bool swapped);
  memory step_view(const memory& source, const memory::desc& desc);
  static std::vector<PostOp> post_ops(const Step& s);
  static std::vector<Operand> concat_sources(const Step& s);
  bool read_elsewhere(int index, size_t current) const;
  memory destination(const Step& s, const memory::desc& desc);
  void finish_step(const Step& s, dnnl::primitive primitive, const memory::desc& dst_desc,
                   std::unordered_map<int, memory> args);
  void push_value(const memory& value);

  // weight_packing.h
  memory packed_weights(const memory& source, const memory::desc& desc);
  void refresh(Weights& w, Pagemap& pagemap, FileMappings& mappings);

  // build_conv_matmul.h: the steps with fused post-ops and bf16 products
  dnnl::primitive_attr post_op_attr(const Step& s, std::unordered_map<int, memory>& args,
                                    size_t rank = 0);
  void build_conv(const Step& s);
  memory typed(const memory& operand);
  static Dims widened(Dims dims, size_t rank, bool swapped);
  static bool rows_fold(const Step& s, const Dims& weights_dims);
  static Dims one_batch(const Dims& dims);
  void build_matmul(const Step& s);
  void finish_matmul(const Step& s, const dnnl::matmul::primitive_desc& pd, const memory& src,
                     const memory::desc& bias_desc, bool folded,
                     std::unordered_map<int, memory> args);

  // build_primitives.h: the other steps
  void build_softmax(const Step& s);
  void build_eltwise(const Step& s);
  void build_binary(const Step& s);
  void build_transpose(const Step& s);
  bool transposed_view(const Step& s, const Dims& transposed, const Dims& dst_dims);
  void build_reduction(const Step& s);
  void build_lrn(const Step& s, float alpha_over_size, float k, float beta);
  void build_layer_norm(const Step& s, float epsilon);
  void build_pool(const Step& s);
  void build_concat(const Step& s);

  std::vector<Step> steps_;
  std::vector<int> results_;     // the steps whose values the region returns
  ProductTypes types_;           // of its convolutions and matmuls
  std::vector<memory> params_;   // the region's parameters, plain, pointing at TVM's tensors
  std::vector<std::pair<int, memory>> views_;  // parameters read in another shape: param_view
  std::vector<memory> values_;   // each step's result, in the layout the step chose
  std::vector<int> buffers_;     // each step's buffer: the step whose buffer its value is in
  int buffer_of_next_ = -1;      // the next step's buffer where it is another step's
  std::vector<memory> outputs_;  // the region's results, plain, pointing at TVM's tensors
  std::vector<std::pair<memory, size_t>> in_output_;  // step values computed in output i
  std::vector<std::pair<memory, memory>> writers_;  // a transpose's value, the view it is written by
  std::vector<std::pair<memory, memory>> step_views_;  // a step's value, a view of its buffer
  std::vector<std::pair<Operand, memory>> converted_;  // as_layout's buffers, by source
  std::vector<Weights> weights_;
  std::vector<Temporary> temporaries_;
  size_t scratch_bytes_ = 0;     // the scratch buffer this region's temporaries need
  std::vector<Action> actions_;
  std::vector<std::pair<int, float>> scalars_;  // parameter index, value built with
  bool built_ = false;
  std::mutex mutex_;
};

}  // namespace
}  // namespace odla_onednn
