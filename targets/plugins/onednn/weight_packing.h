// A region's constant weights packed once per address into the layout their primitive
// prefers (region_state.h's Region), kept where packed_store.h keeps them.
#pragma once
#include <dnnl.hpp>

#include <algorithm>
#include <optional>
#include <string>

#include "packed_store.h"
#include "page_release.h"
#include "region_state.h"

namespace odla_onednn {
namespace {

// Where this library's regions keep their packed weights (see packed_store.h).
PackedStore packed_store;

// Weights ``source`` packed for ``desc``: a reorder runs the first time each address of
// the parameter is seen.
memory Region::packed_weights(const memory& source, const memory::desc& desc) {
  weights_.push_back({source, memory(desc, cpu_engine(), nullptr), {}});
  return weights_.back().packed;
}

void Region::refresh(Weights& w, Pagemap& pagemap, FileMappings& mappings) {
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

}  // namespace
}  // namespace odla_onednn
