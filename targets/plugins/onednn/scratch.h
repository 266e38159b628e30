// The per-thread buffer the temporaries of a region's primitives live in (runtime.cc).
#pragma once
#include <cstdlib>
#include <new>

namespace odla_onednn {
namespace {

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

}  // namespace
}  // namespace odla_onednn
