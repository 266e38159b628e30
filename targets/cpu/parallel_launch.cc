// TVM's parallel launch in a model library, pointed at the process's one thread pool
// (thread_pool.cc, libodla_threads.so, at the path ODLA_THREAD_POOL this library was built
// with). These strong hidden definitions of the context pointers replace the weak ones TVM's
// code generator emits, and being hidden, TVM's loader (which fills the pointers it finds by
// dlsym) leaves them as they are, whichever program loads the library.
//
// The pool is opened at the first launch, not named as a dependency: a library copied where
// that file is not still loads, and runs on TVM's own pool (or, without TVM's runtime in the
// process, each loop whole on the calling thread).
#include <dlfcn.h>

// The pool's library, opened (below).
extern "C" __attribute__((visibility("hidden"))) void* odla_thread_pool();

namespace {

struct ParallelGroupEnv {  // TVM's TVMParallelGroupEnv (c_backend_api.h)
  void* sync_handle;
  int num_task;
};
using Lambda = int (*)(int task_id, ParallelGroupEnv* env, void* cdata);
using Launch = int (*)(void* lambda, void* cdata, int num_task);

int run_whole(void* lambda, void* cdata, int) {
  ParallelGroupEnv env{nullptr, 1};
  return reinterpret_cast<Lambda>(lambda)(0, &env, cdata);
}

Launch find_launch() {
  if (void* pool = odla_thread_pool())
    if (void* launch = dlsym(pool, "odla_pool_launch")) return reinterpret_cast<Launch>(launch);
  if (void* tvm = dlopen("libtvm_runtime.so", RTLD_NOW | RTLD_NOLOAD))
    if (void* launch = dlsym(tvm, "TVMBackendParallelLaunch"))
      return reinterpret_cast<Launch>(launch);
  return run_whole;
}

int launch(void* lambda, void* cdata, int num_task) {
  static const Launch chosen = find_launch();
  return chosen(lambda, cdata, num_task);
}

// No kernel of this project synchronizes inside a launch (TVM emits this call only for the
// parallel_barrier_when_finish pragma, which no schedule uses).
int barrier(int, void*) { __builtin_trap(); }

}  // namespace

extern "C" {
__attribute__((visibility("hidden"))) void* __TVMBackendParallelLaunch =
    reinterpret_cast<void*>(&launch);
__attribute__((visibility("hidden"))) void* __TVMBackendParallelBarrier =
    reinterpret_cast<void*>(&barrier);

// The pool's library, opened (null where it is not there), for this library's oneDNN regions
// (targets/plugins/onednn/omp_threads.h).
__attribute__((visibility("hidden"))) void* odla_thread_pool() {
  static void* const pool = dlopen(ODLA_THREAD_POOL, RTLD_NOW | RTLD_LOCAL);
  return pool;
}
}
