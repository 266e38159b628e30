// How many OpenMP threads oneDNN's primitives run on (libgomp keeps the count per calling
// thread, so each region sets it): as many as TVM's own thread pool uses, TVM_NUM_THREADS,
// else the usable cores. Shared by runtime.cc and int8_runtime.cc.
#pragma once

#include <sched.h>

#include <cstdlib>
#include <thread>

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

}  // namespace
}  // namespace odla_onednn
