// The data types of a region's convolutions and matmuls: f32, or under BF16_MODE (where
// oneDNN has native bf16 kernels, bf16_policy.py) bf16 source and weights with an f32 bias
// and an f32 (accuracy) or bf16 (performance) destination. A bf16 destination is what keeps
// a region's intermediates in bf16 between its convolutions; the steps between them read
// their input in the type it has, and the region's results are reordered to f32 as TVM's
// outputs are. Weights reordered to bf16 once are packed and kept as any other (the packed
// store's digest names the type).
#pragma once
#include <dnnl.hpp>

#include "region.h"

namespace odla_onednn {
namespace {

struct ProductTypes {
  dnnl::memory::data_type operands = dnnl::memory::data_type::f32;  // src and weights
  dnnl::memory::data_type result = dnnl::memory::data_type::f32;    // dst
};

inline dnnl::memory::data_type type_or_f32(dnnl_data_type_t type) {
  return type == dnnl_data_type_undef ? dnnl::memory::data_type::f32
                                      : static_cast<dnnl::memory::data_type>(type);
}

inline ProductTypes product_types(const RegionSpec& spec) {
  return {type_or_f32(spec.product_operands), type_or_f32(spec.product_results)};
}

// ``desc`` with data type ``type``: `any` stays `any`, a strided (plain or permuted) layout
// keeps its strides; the only layouts the region converts between types.
inline dnnl::memory::desc retyped(const dnnl::memory::desc& desc, dnnl::memory::data_type type) {
  if (desc.get_data_type() == type) return desc;
  if (desc.get_format_kind() == dnnl::memory::format_kind::any)
    return dnnl::memory::desc(desc.get_dims(), type, dnnl::memory::format_tag::any);
  return dnnl::memory::desc(desc.get_dims(), type, desc.get_strides());
}

}  // namespace
}  // namespace odla_onednn
