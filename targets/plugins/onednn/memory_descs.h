// oneDNN memory descriptors and dims as the region runtime (runtime.cc) builds them: the
// plain and `any` layouts, the tags the convolutions choose, and which code oneDNN picked.
#pragma once
#include <dnnl.hpp>

#include <cstdint>
#include <string>

#include "region.h"

namespace odla_onednn {
namespace {

using dnnl::memory;
using Dims = memory::dims;

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

}  // namespace
}  // namespace odla_onednn
