// Where and on how many threads oneDNN's primitives run: libdnnl's OpenMP regions on the
// process's thread pool (targets/cpu/thread_pool.cc), on as many threads as TVM's kernels use,
// TVM_NUM_THREADS, else the usable cores. Shared by runtime.cc and int8_runtime.cc.
#pragma once

#include <sched.h>

#include <cstdlib>
#include <thread>

#include <dlfcn.h>

extern "C" void omp_set_num_threads(int);  // libgomp's, should libdnnl not be adopted
// The thread pool's library, opened by targets/cpu/parallel_launch.cc in the same model
// library (null where it is not there, or for a library built without it).
extern "C" void* odla_thread_pool() __attribute__((weak));

namespace odla_onednn {
namespace {

inline int thread_count() {
  static const int count = [] {
    const char* value = std::getenv("TVM_NUM_THREADS");
    if (value != nullptr && std::atoi(value) > 0) return std::atoi(value);
    cpu_set_t cores;
    if (sched_getaffinity(0, sizeof(cores), &cores) == 0) return CPU_COUNT(&cores);
    return static_cast<int>(std::thread::hardware_concurrency());
  }();
  return count;
}

// Before a region's primitives run on the calling thread: libdnnl's OpenMP imports pointed at
// the pool (once: before its first parallel region), and the count for libgomp, which keeps
// it per calling thread, should they still lead there.
inline void ready_threads() {
  static const int adopted = [] {
    void* pool = odla_thread_pool != nullptr ? odla_thread_pool() : nullptr;
    void* adopt = pool != nullptr ? dlsym(pool, "odla_pool_adopt_openmp") : nullptr;
    return adopt != nullptr ? reinterpret_cast<int (*)(const char*)>(adopt)("libdnnl.so") : 0;
  }();
  (void)adopted;
  omp_set_num_threads(thread_count());
}

}  // namespace
}  // namespace odla_onednn
