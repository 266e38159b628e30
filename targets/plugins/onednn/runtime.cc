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
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include "bf16_types.h"
#include "omp_threads.h"
#include "packed_store.h"
#include "page_release.h"
#include "region.h"

extern "C" void omp_set_num_threads(int);  // libgomp: oneDNN's threading in this build

// Internal linkage for all of it: the same inline names in two loaded model libraries would
// otherwise be one (GNU unique symbols), sharing the call counter between models.
namespace odla_onednn {
namespace {

using dnnl::memory;
using Dims = memory::dims;

// Region calls run so far in this library (tests read it to see oneDNN's code ran).
inline std::atomic<int64_t> region_calls{0};

inline int64_t calls() { return region_calls.load(); }

inline dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

inline Dims to_dims(const Shape& shape) { return Dims(shape.dims, shape.dims + shape.rank); }

inline dnnl::algorithm algorithm(dnnl_alg_kind_t kind) { return static_cast<dnnl::algorithm>(kind); }

inline memory::format_tag plain_tag(size_t rank) {
  static const memory::format_tag tags[] = {memory::format_tag::a, memory::format_tag::ab,
                                            memory::format_tag::abc, memory::format_tag::abcd,
                                            memory::format_tag::abcde};
  return tags[rank - 1];
}

inline memory::desc plain_desc(const Dims& dims) {
  return memory::desc(dims, memory::data_type::f32, plain_tag(dims.size()));
}

// The tag of a 4-d ``desc`` among the layouts oneDNN's convolutions choose, else undef.
inline memory::format_tag format_of(const memory::desc& desc) {
  using tag = memory::format_tag;
  if (desc.get_ndims() != 4) return tag::undef;
  for (tag t : {tag::abcd, tag::acdb, tag::aBcd16b, tag::aBcd8b})
    if (desc == memory::desc(desc.get_dims(), memory::data_type::f32, t)) return t;
  return tag::undef;
}

// The strides of a 4-d nhwc (acdb) map of dims ``map`` read as ``dims``, the same dims with
// the channel axis split in two; empty where ``dims`` are not that.
inline Dims nhwc_split_strides(const Dims& map, const Dims& dims) {
  if (map.size() != 4 || dims.size() != 5 || dims[0] != map[0] || dims[1] * dims[2] != map[1] ||
      dims[3] != map[2] || dims[4] != map[3])
    return {};
  const memory::dim channels = map[1], width = map[3];
  return {map[2] * width * channels, dims[2], 1, width * channels, channels};
}

// Whether reduction step ``s`` reduces a 4-d value over its two spatial axes alone.
inline bool global_spatial(const Step& s) {
  return s.src_shape.rank == 4 && s.dst_shape.rank == 4 &&
         s.dst_shape.dims[0] == s.src_shape.dims[0] && s.dst_shape.dims[1] == s.src_shape.dims[1] &&
         s.dst_shape.dims[2] == 1 && s.dst_shape.dims[3] == 1;
}

// Whether oneDNN chose ``kind`` of code for ``pd`` ("ref": its reference code, "gemm": its
// gemm fallback), the slow ones the builders try other layouts to avoid.
template <typename PrimitiveDesc>
bool runs(const PrimitiveDesc& pd, const char* kind) {
  return std::string(pd.impl_info_str()).find(kind) != std::string::npos;
}

inline memory::desc any_desc(const Dims& dims, memory::data_type type = memory::data_type::f32) {
  return memory::desc(dims, type, memory::format_tag::any);
}

inline Dims pair(const int64_t (&values)[2]) { return Dims(values, values + 2); }

inline void* data(const TVMFFIAny& arg) {
  DLTensor* tensor = reinterpret_cast<const tvm::ffi::AnyView&>(arg).cast<DLTensor*>();
  return static_cast<char*>(tensor->data) + tensor->byte_offset;
}

constexpr size_t kAlignment = 64;  // a cache line, as oneDNN aligns what it allocates

inline size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The buffer the temporaries of every region this library runs on the calling thread live
// in, as large as the largest region needs: regions run one at a time on a thread, so their
// intermediates need not each be held for the life of the model, and within a region
// place_temporaries reuses a buffer once nothing reads it. A thread's buffer lives as long as
// the thread.
char* scratch(size_t bytes) {
  struct Arena {
    void* data = nullptr;
    size_t size = 0;
    ~Arena() { std::free(data); }
  };
  thread_local Arena arena;
  if (arena.size < bytes) {
    std::free(arena.data);
    arena.size = 0;
    arena.data = std::aligned_alloc(kAlignment, bytes);  // bytes: a multiple of kAlignment
    if (arena.data == nullptr) throw std::bad_alloc();
    arena.size = bytes;
  }
  return static_cast<char*>(arena.data);
}

// Where this library's regions keep their packed weights (see packed_store.h).
PackedStore packed_store;

class Region {
 public:
  explicit Region(const RegionSpec& spec)
      : steps_(spec.steps, spec.steps + spec.step_count),
        results_(spec.results, spec.results + spec.result_count), types_(product_types(spec)) {
    for (int i = 0; i < spec.param_count; ++i)
      params_.emplace_back(plain_desc(to_dims(spec.params[i])), cpu_engine(), nullptr);
  }

  // Whether the scalars the primitives were built with (a layer norm's epsilon, LRN's
  // factors) differ in ``args``: TVM calls one region from each place the graph repeats it,
  // and two places may pass other values.
  bool stale(const TVMFFIAny* args) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [index, value] : scalars_)
      if (*static_cast<const float*>(data(args[index])) != value) return true;
    return false;
  }

  // One call as TVM makes it (call_dps_packed): the region's parameters, then its outputs.
  void run(const TVMFFIAny* args, int32_t num_args) {
    std::lock_guard<std::mutex> lock(mutex_);  // one region's buffers serve one call at a time
    if (static_cast<size_t>(num_args) != params_.size() + results_.size())
      TVM_FFI_THROW(TypeError) << "a oneDNN region of " << params_.size() << " parameters and "
                               << results_.size() << " outputs got " << num_args << " arguments";
    if (!built_) build(args);
    ++region_calls;
    char* base = scratch(scratch_bytes_);
    for (const Temporary& t : temporaries_) t.value.set_data_handle(base + t.offset);
    omp_set_num_threads(thread_count());  // OpenMP keeps it per calling thread
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

 private:
  // The primitives, on the first call: a layer norm's epsilon is a parameter's value.
  void build(const TVMFFIAny* args) {
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

  // A buffer only this region's calls read and write (an intermediate, a reordered operand):
  // it lives in the thread's scratch buffer, at the offset place_temporaries gives it.
  memory temporary(const memory::desc& desc) {
    temporaries_.push_back({memory(desc, cpu_engine(), nullptr), 0});
    return temporaries_.back().value;
  }

  // Offsets for the temporaries such that two whose uses overlap in the actions never share
  // bytes (the larger placed first, each at the lowest offset free over its actions): a
  // buffer is reused once the last action reading it has run. A value computed in TVM's
  // output takes no room.
  void place_temporaries() {
    std::unordered_map<dnnl_memory_t, size_t> owner;  // a memory, or a view of it: its temporary
    for (size_t i = 0; i < temporaries_.size(); ++i) owner[temporaries_[i].value.get()] = i;
    for (const auto& [value, output] : in_output_) owner.erase(value.get());
    auto alias = [&](const memory& source, const memory& view) {
      auto found = owner.find(source.get());
      if (found != owner.end()) owner[view.get()] = found->second;
    };
    for (const auto& [value, writer] : writers_) alias(value, writer);
    for (const auto& [source, view] : step_views_) alias(source, view);
    std::vector<std::pair<size_t, size_t>> uses(temporaries_.size(), {SIZE_MAX, 0});
    for (size_t a = 0; a < actions_.size(); ++a)
      for (const auto& [kind, used] : actions_[a].args) {
        auto found = owner.find(used.get());
        if (found == owner.end()) continue;
        auto& [first, last] = uses[found->second];
        first = std::min(first, a);
        last = std::max(last, a);
      }
    std::vector<size_t> order;
    for (size_t i = 0; i < temporaries_.size(); ++i)
      if (uses[i].first != SIZE_MAX) order.push_back(i);
    auto size = [&](size_t i) { return aligned(temporaries_[i].value.get_desc().get_size()); };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return size(a) > size(b); });
    std::vector<size_t> placed;
    for (size_t i : order) {
      std::vector<std::pair<size_t, size_t>> taken;  // byte ranges of those live at once
      for (size_t j : placed)
        if (uses[j].first <= uses[i].second && uses[i].first <= uses[j].second)
          taken.emplace_back(temporaries_[j].offset, temporaries_[j].offset + size(j));
      std::sort(taken.begin(), taken.end());
      size_t offset = 0;
      for (const auto& [begin, end] : taken) {
        if (offset + size(i) <= begin) break;
        offset = std::max(offset, end);
      }
      temporaries_[i].offset = offset;
      scratch_bytes_ = std::max(scratch_bytes_, offset + size(i));
      placed.push_back(i);
    }
  }

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

  memory& value(Operand operand) {
    return operand.kind == Operand::kStep ? values_[operand.index] : params_[operand.index];
  }

  void add_reorder(const memory& from, const memory& to) {
    actions_.push_back({dnnl::reorder(from, to), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}});
  }

  // ``operand`` in layout ``desc``: itself when it has that layout, else a buffer a reorder
  // fills each call (made once per operand and layout, however many steps read it).
  memory as_layout(Operand operand, const memory::desc& desc) {
    memory& source = value(operand);
    if (source.get_desc() == desc) return source;
    for (const auto& [from, converted] : converted_)
      if (from.kind == operand.kind && from.index == operand.index && converted.get_desc() == desc)
        return converted;
    memory converted = temporary(desc);
    add_reorder(source, converted);
    converted_.emplace_back(operand, converted);
    return converted;
  }

  // Parameter ``index`` read as ``desc`` (same bytes, another shape or order than plain).
  memory param_view(int index, const memory::desc& desc) {
    views_.emplace_back(index, memory(desc, cpu_engine(), nullptr));
    return views_.back().second;
  }

  // Weights ``source`` packed for ``desc``: a reorder runs the first time each address of
  // the parameter is seen.
  memory packed_weights(const memory& source, const memory::desc& desc) {
    weights_.push_back({source, memory(desc, cpu_engine(), nullptr), {}});
    return weights_.back().packed;
  }

  void refresh(Weights& w, Pagemap& pagemap, FileMappings& mappings) {
    void* address = w.source.get_data_handle();
    auto known = std::find_if(w.copies.begin(), w.copies.end(),
                              [address](const PackedCopy& copy) { return copy.source == address; });
    if (known == w.copies.end()) {
      std::string kept_at = packed_store.kept_path(w.source, w.packed.get_desc(), mappings);
      std::optional<PackedCopy> kept = PackedStore::find(kept_at, w.source, w.packed.get_desc());
      if (!kept) {
        memory copy(w.packed.get_desc(), cpu_engine());
        dnnl::stream stream(cpu_engine());
        dnnl::reorder(w.source, copy).execute(stream, w.source, copy);
        stream.wait();
        PackedStore::keep(kept_at, copy);
        kept = PackedCopy{address, copy, nullptr};
      }
      release_file_pages(pagemap, address, w.source.get_desc().get_size());
      known = w.copies.insert(w.copies.end(), *kept);
    }
    w.packed.set_data_handle(known->packed.get_data_handle());
  }

  // Post-ops in graph order; ``args`` gets the memory each one reads per call.
  dnnl::primitive_attr post_op_attr(const Step& s, std::unordered_map<int, memory>& args,
                                    size_t rank = 0) {
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

  static std::vector<PostOp> post_ops(const Step& s) {
    return std::vector<PostOp>(s.post_ops, s.post_ops + s.post_op_count);
  }

  static std::vector<Operand> concat_sources(const Step& s) {
    if (s.kind != Step::kConcat) return {};
    return std::vector<Operand>(s.sources, s.sources + s.source_count);
  }

  // Whether anything but step ``current``'s residual add reads step ``index``'s buffer (its
  // value or a view of it): the current step's other operands, a later step, a region result.
  bool read_elsewhere(int index, size_t current) const {
    const int buffer = buffers_[index];
    auto shares = [&](int step) { return step < static_cast<int>(buffers_.size()) &&
                                         buffers_[step] == buffer; };
    for (int result : results_)
      if (shares(result)) return true;
    auto reads = [&](Operand o) { return o.kind == Operand::kStep && shares(o.index); };
    for (size_t i = current; i < steps_.size(); ++i) {
      const Step& s = steps_[i];
      if (reads(s.src) || reads(s.weights) || reads(s.bias)) return true;
      for (const Operand& source : concat_sources(s))
        if (reads(source)) return true;
      for (const PostOp& op : post_ops(s))
        if (reads(op.operand) && !(i == current && op.kind == PostOp::kResidual)) return true;
    }
    return false;
  }

  // Where a step writes. A sum post-op adds to what dst holds, so dst must hold the residual:
  // the residual's own buffer when it is in the same layout and nothing reads it later (no
  // copy), else a fresh buffer it is copied into first.
  memory destination(const Step& s, const memory::desc& desc) {
    for (const PostOp& op : post_ops(s)) {
      if (op.kind != PostOp::kResidual) continue;
      if (op.operand.kind == Operand::kStep && value(op.operand).get_desc() == desc &&
          !read_elsewhere(op.operand.index, values_.size())) {
        buffer_of_next_ = buffers_[op.operand.index];
        return value(op.operand);
      }
      memory dst = temporary(desc);
      add_reorder(value(op.operand), dst);
      return dst;
    }
    return temporary(desc);
  }

  void finish_step(const Step& s, dnnl::primitive primitive, const memory::desc& dst_desc,
                   std::unordered_map<int, memory> args) {
    memory dst = destination(s, dst_desc);
    args[DNNL_ARG_DST] = dst;
    actions_.push_back({primitive, std::move(args)});
    push_value(dst);
  }

  // Step values_.size()'s value; its buffer is its own unless destination() or a view said
  // otherwise.
  void push_value(const memory& value) {
    buffers_.push_back(buffer_of_next_ >= 0 ? buffer_of_next_
                                            : static_cast<int>(values_.size()));
    buffer_of_next_ = -1;
    values_.push_back(value);
  }

  void build_conv(const Step& s) {
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

  // ``operand`` read as a plain tensor of ``dims``, its last two axes swapped if ``swapped``:
  // the same bytes in another shape (a per-channel bias (C, 1, 1) as (C,), new leading axes of
  // size 1), viewed, never reordered (a reorder cannot change dims).
  memory plain_view(Operand operand, const Dims& dims, bool swapped) {
    memory::desc desc = plain_desc(dims);
    if (swapped) {  // the same bytes with the strides of the last two axes exchanged
      size_t rank = dims.size();
      Dims unswapped = dims;
      std::swap(unswapped[rank - 1], unswapped[rank - 2]);
      Dims strides = plain_desc(unswapped).get_strides();
      std::swap(strides[rank - 1], strides[rank - 2]);
      desc = memory::desc(dims, memory::data_type::f32, strides);
    }
    if (operand.kind == Operand::kParam) return param_view(operand.index, desc);
    return step_view(as_layout(operand, plain_desc(value(operand).get_desc().get_dims())), desc);
  }

  // ``source`` (a step's value) read as ``desc``: its buffer may move each call (a
  // result computed in TVM's output), and the view follows it.
  memory step_view(const memory& source, const memory::desc& desc) {
    memory view(desc, cpu_engine(), source.get_data_handle());
    step_views_.emplace_back(source, view);
    return view;
  }

  // A matmul's f32 operand as its src and weights' type: converted each call where it differs.
  memory typed(const memory& operand) {
    if (operand.get_desc().get_data_type() == types_.operands) return operand;
    memory converted = temporary(retyped(operand.get_desc(), types_.operands));
    add_reorder(operand, converted);
    return converted;
  }

  // Operand dims with leading axes of size 1 up to ``rank``; with the last two swapped when
  // ``swapped``.
  static Dims widened(Dims dims, size_t rank, bool swapped) {
    if (swapped) std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
    dims.insert(dims.begin(), rank - dims.size(), 1);
    return dims;
  }

  // Whether a matmul's rows may all be one batch: its weights are the same for every batch
  // (a Linear over [1, H, W, C]) and no post-op reads a value per row (a residual, a mask).
  // oneDNN's brgemm runs [1, 7, 7, 768] x [768, 3072] as 7 batches of 7 rows, much slower
  // than one batch of 49 rows (ConvNeXt-T's MLPs).
  static bool rows_fold(const Step& s, const Dims& weights_dims) {
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
  static Dims one_batch(const Dims& dims) {
    Dims folded = {1, dims.back()};
    for (size_t i = 0; i + 1 < dims.size(); ++i) folded[0] *= dims[i];
    return folded;
  }

  void build_matmul(const Step& s) {
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

  void finish_matmul(const Step& s, const dnnl::matmul::primitive_desc& pd, const memory& src,
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

  void build_softmax(const Step& s) {
    // Over its input in the layout that has (plain after a matmul).
    memory src = value(s.src);
    dnnl::softmax_forward::primitive_desc pd(cpu_engine(), dnnl::prop_kind::forward_inference,
                                             algorithm(s.algorithm), src.get_desc(), src.get_desc(), s.axis);
    finish_step(s, dnnl::softmax_forward(pd), pd.dst_desc(), {{DNNL_ARG_SRC, src}});
  }

  // A unary op on a computed tensor (a ReLU after a concat), in the layout it has, then the
  // step's post-ops.
  void build_eltwise(const Step& s) {
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
  void build_binary(const Step& s) {
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
  void build_transpose(const Step& s) {
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
  bool transposed_view(const Step& s, const Dims& transposed, const Dims& dst_dims) {
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

  void build_reduction(const Step& s) {
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

  // A scalar parameter's value, read while building (and recorded for stale).
  float scalar(const TVMFFIAny* args, Operand operand) {
    float value = *static_cast<const float*>(data(args[operand.index]));
    scalars_.emplace_back(operand.index, value);
    return value;
  }

  // ONNX's LRN across channels, x / (k + alpha / size * window sum of x^2)^beta, as the
  // bridge lowers it: oneDNN's lrn_across_channels, in the layout its input has.
  // Where oneDNN has only reference code for the input's layout (plain NCHW), the input is
  // reordered to one it has jit code for.
  void build_lrn(const Step& s, float alpha_over_size, float k, float beta) {
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

  void build_layer_norm(const Step& s, float epsilon) {
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

  void build_pool(const Step& s) {
    // Pooling reads its input in whatever layout it has and keeps it.
    memory src = value(s.src);
    dnnl::pooling_forward::primitive_desc pd(
        cpu_engine(), dnnl::prop_kind::forward_inference, algorithm(s.algorithm), src.get_desc(),
        any_desc(to_dims(s.dst_shape), src.get_desc().get_data_type()), pair(s.strides),
        pair(s.kernel), pair(s.dilates), pair(s.pad_l), pair(s.pad_r));
    finish_step(s, dnnl::pooling_forward(pd), pd.dst_desc(), {{DNNL_ARG_SRC, src}});
  }

  void build_concat(const Step& s) {
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
