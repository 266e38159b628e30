// The run path's handles: an executable (a loaded compiled module and its slots) and a
// context (what is bound for a run). C++ over TVM's runtime only: no Python here.
#ifndef ODLA_TVM_RUNTIME_H_
#define ODLA_TVM_RUNTIME_H_

#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <condition_variable>
#include <optional>

#include "internal.h"
#include "stored_executable.h"

struct _odla_executable {
  std::string blob;  // the stored executable, which odla_StoreExecutable writes again
  std::vector<std::unique_ptr<_odla_value>> args, outputs;
  std::vector<tvm::ffi::Tensor> extra;  // passed after the arguments: variables, then weights
  std::optional<tvm::ffi::Module> library;
  // One VM per concurrent launch (a VM's registers are its own): idle ones wait here.
  struct Vm {
    std::optional<tvm::ffi::Module> module;
    tvm::ffi::Function main;
  };
  std::mutex pool_mutex;
  std::vector<Vm> idle;
};

struct _odla_context {
  // Bindings and items: changed and read under run_mutex, so never while a run reads them.
  std::unordered_map<std::string, const void*> inputs;
  std::unordered_map<std::string, void*> outputs;
  // run-time shapes: of dynamic arguments, set by the caller; of outputs, after each run
  std::unordered_map<std::string, odla_value_shape> shapes;
  std::unordered_map<std::string, tvm::ffi::Tensor> results;  // of the last run, not bound
  int64_t run_batch = 0;  // RUN_BATCH_SIZE, if set
  int (*callback)(void*, odla_status) = nullptr;
  void* callback_arg = nullptr;
  // Input tensors of the last run, reused while their data pointers and shapes stay.
  struct Input {
    const void* data = nullptr;
    odla_value_shape shape{};
    tvm::ffi::Tensor tensor;
    bool staged = false;  // a copy (the caller's data is not 64-byte aligned)
  };
  // The executable the cached inputs are of: weak, so a destroyed one is freed and never
  // mistaken for a new one at its address (the control block outlives it).
  std::weak_ptr<_odla_executable> inputs_of;
  std::vector<Input> cached;
  bool ids_checked = false;  // every id bound is one of inputs_of's (reset by a new id)
  std::mutex run_mutex;  // one run of a context at a time
  std::mutex pending_mutex;
  std::condition_variable pending_done;
  int pending = 0;  // asynchronous runs not yet finished
};

namespace odla_tvm {

// Runs `exe` on what `ctx` binds, writing the bound outputs.
void Launch(const std::shared_ptr<_odla_executable>& exe, _odla_context& ctx);

// The executable `computation` compiles to, compiled (by the build library) at the first call.
std::shared_ptr<_odla_executable> Compiled(_odla_computation& computation);

// odla_SetContextItem's meaning here; `type` an odla_item_type's number (any int a caller gave).
void SetContextItem(_odla_context& ctx, int type, odla_item_value value);

}  // namespace odla_tvm

#endif  // ODLA_TVM_RUNTIME_H_
