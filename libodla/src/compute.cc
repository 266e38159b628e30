// odla_compute.h's entry points: compiling and executing computations, loading, storing and
// launching executables, contexts and their bindings. Executables and contexts are checked
// against the live ones, so a destroyed or foreign handle gives a status, not a crash.
#include <sys/stat.h>

#include <fstream>
#include <system_error>
#include <thread>

#include "build.h"
#include "mapped_file.h"
#include "runtime.h"

using namespace odla_tvm;

namespace {

// The live executables and contexts, each held here and by whoever uses it: destroying one
// takes it out (one of two destroys does), and the last user frees it.
std::mutex live_mutex;
std::unordered_map<_odla_executable*, std::shared_ptr<_odla_executable>> live_executables;
std::unordered_map<_odla_context*, std::shared_ptr<_odla_context>> live_contexts;

// An executable's handle; its slots live as long as it does.
odla_executable Register(std::shared_ptr<_odla_executable> exe) {
  std::lock_guard<std::mutex> lock(live_mutex);
  live_executables[exe.get()] = exe;
  for (const auto* slots : {&exe->args, &exe->outputs})
    for (const auto& slot : *slots) Track(slot.get(), HandleKind::kValue);
  return exe.get();
}

// What `live` holds for `handle`, taken out of it where `take` (one of two concurrent
// destroys does; the other gets a status).
template <typename Map>
typename Map::mapped_type Find(Map& live, typename Map::key_type handle, const char* what,
                               bool take = false) {
  Require(handle, what);
  std::lock_guard<std::mutex> lock(live_mutex);
  auto found = live.find(handle);
  if (found == live.end()) ThrowNotLive(what);
  if (!take) return found->second;
  typename Map::mapped_type held = std::move(found->second);
  live.erase(found);
  return held;
}

void CheckMode(odla_compute_mode mode) {
  if (mode == ODLA_COMPUTE_TRAINING)
    throw Error(ODLA_UNSUPPORTED_OP, "TRAINING runs are not in the C library; train from Python "
                                     "(odla_tvm.differentiate_computation)");
  if (mode != ODLA_COMPUTE_DEFAULT && mode != ODLA_COMPUTE_INFERENCE)
    throw Error(ODLA_INVALID_PARAM,
                "mode " + std::to_string(mode) + " is not an ODLA compute mode");
}

void EndPending(_odla_context& ctx) {
  std::lock_guard<std::mutex> lock(ctx.pending_mutex);
  --ctx.pending;
  ctx.pending_done.notify_all();
}

// Runs `exe` on `ctx` on another thread, which holds both; its status goes to the context's
// callback. A thread that cannot start is a status here, and no run left pending.
void RunAsync(std::shared_ptr<_odla_context> ctx, std::shared_ptr<_odla_executable> exe) {
  {
    std::lock_guard<std::mutex> lock(ctx->pending_mutex);
    ++ctx->pending;
  }
  try {
    std::thread([ctx, exe] {
      odla_status status = Guard("odla_AsyncLaunchExecutable", [&] {
        Launch(exe, *ctx);
        return ODLA_SUCCESS;
      });
      int (*callback)(void*, odla_status);
      void* callback_arg;
      {
        std::lock_guard<std::mutex> lock(ctx->run_mutex);
        callback = ctx->callback;
        callback_arg = ctx->callback_arg;
      }
      if (callback != nullptr) callback(callback_arg, status);
      EndPending(*ctx);
    }).detach();
  } catch (const std::system_error& e) {
    EndPending(*ctx);
    throw Error(ODLA_FAILURE, std::string("cannot start a thread for the run: ") + e.what());
  }
}

_odla_value* ArgumentOf(const std::vector<std::unique_ptr<_odla_value>>& slots, uint32_t idx,
                        const char* what) {
  if (idx >= slots.size())
    throw Error(ODLA_INVALID_PARAM, std::string(what) + " index " + std::to_string(idx) +
                                        " is out of range (" + std::to_string(slots.size()) + ")");
  return slots[idx].get();
}

// Binds `data` to `id` in one of the context's maps, never while a run reads them; an id
// new to the context is checked against the executable at the next launch.
template <typename Data>
void Bind(odla_context context, std::unordered_map<std::string, Data> _odla_context::*map,
          std::string id, Data data) {
  Require(data, "data_ptr");
  std::shared_ptr<_odla_context> ctx = LiveContext(context);
  std::lock_guard<std::mutex> lock(ctx->run_mutex);
  auto [at, added] = ((*ctx).*map).try_emplace(std::move(id), data);
  if (added)
    ctx->ids_checked = false;
  else
    at->second = data;
}

std::string ReadFile(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode))
    throw Error(ODLA_FILE_NOT_EXIST, "executable file " + path + " does not exist");
  std::shared_ptr<const MappedFile> file = MappedFile::Open(path);
  if (!file) throw Error(ODLA_FILE_NOT_EXIST, "executable file " + path + " cannot be read");
  return std::string(file->bytes());
}

}  // namespace

namespace odla_tvm {

std::shared_ptr<_odla_executable> LiveExecutable(odla_executable executable) {
  return Find(live_executables, executable, "executable");
}

std::shared_ptr<_odla_context> LiveContext(odla_context context) {
  return Find(live_contexts, context, "context");
}

}  // namespace odla_tvm

extern "C" {

odla_status odla_CompileComputation(const odla_computation computation, const odla_device device,
                                    odla_executable* executable) {
  return Guard(__func__, [&] {
    Live(computation, HandleKind::kComputation, "computation");
    Require(executable, "executable");
    CheckCpuDevice(device);
    *executable = Register(Compiled(*computation));
    return ODLA_SUCCESS;
  });
}

odla_status odla_ExecuteComputation(const odla_computation computation, const odla_context context,
                                    const odla_compute_mode mode, odla_device device) {
  return Guard(__func__, [&] {
    Live(computation, HandleKind::kComputation, "computation");
    std::shared_ptr<_odla_context> ctx = LiveContext(context);
    CheckMode(mode);
    CheckCpuDevice(device);
    Launch(Compiled(*computation), *ctx);
    return ODLA_SUCCESS;
  });
}

odla_status odla_AsyncExecuteComputation(const odla_computation computation,
                                         const odla_context context, const odla_compute_mode mode,
                                         odla_device device) {
  return Guard(__func__, [&] {
    Live(computation, HandleKind::kComputation, "computation");
    std::shared_ptr<_odla_context> ctx = LiveContext(context);
    CheckMode(mode);
    CheckCpuDevice(device);
    RunAsync(ctx, Compiled(*computation));  // compiles before returning
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetNumOfArgsFromComputation(const odla_computation computation,
                                             odla_uint32* num_args) {
  return Guard(__func__, [&] {
    *Require(num_args, "num_args") =
        static_cast<odla_uint32>(Integer(computation, "get_num_of_args_from_computation"));
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetArgFromComputationByIdx(const odla_computation computation,
                                            const odla_uint32 arg_idx, odla_value* arg_value) {
  return Guard(__func__, [&] {
    Require(arg_value, "arg_value");
    *arg_value = Values(computation, "get_arg_from_computation_by_idx",
                        {Self(computation), I(arg_idx)}).at(0);
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetNumOfOutputsFromComputation(const odla_computation computation,
                                                odla_uint32* num_outputs) {
  return Guard(__func__, [&] {
    *Require(num_outputs, "num_outputs") =
        static_cast<odla_uint32>(Integer(computation, "get_num_of_outputs_from_computation"));
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetOutputFromComputationByIdx(const odla_computation computation,
                                               const odla_uint32 output_idx,
                                               odla_value* output_value) {
  return Guard(__func__, [&] {
    Require(output_value, "output_value");
    *output_value = Values(computation, "get_output_from_computation_by_idx",
                           {Self(computation), I(output_idx)}).at(0);
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetComputationItem(odla_computation computation, odla_item_type type,
                                    odla_item_value value) {
  return Guard(__func__, [&] {
    Live(computation, HandleKind::kComputation, "computation");
    Require(value, "value");
    Arg item;
    const int item_type = EnumNumber(type);  // any int a caller passes, not a C++ enum load
    switch (item_type) {
      case ODLA_DYNAMIC_BATCH: case ODLA_USE_SIM_MODE: case ODLA_ENABLE_ENGINE_CACHE:
        // flags: generated code points at a C++ bool or an odla_bool; the first byte says
        item = I(*reinterpret_cast<const unsigned char*>(value) != 0);
        break;
      case ODLA_MIN_BATCH_SIZE: case ODLA_MAX_BATCH_SIZE: case ODLA_OPT_BATCH_SIZE:
      case ODLA_RUN_BATCH_SIZE: case ODLA_BF16_MODE: case ODLA_FP16_MODE:
      case ODLA_PROCESSOR_NUM: case ODLA_BATCHES_PER_STEP: case ODLA_USE_DATA_TYPE:
      case ODLA_LOAD_ENGINE_MODE: case ODLA_USE_DLA_CORE:
        item = I(*reinterpret_cast<const odla_int32*>(value));
        break;
      case ODLA_CACHE_DIR:
        item = S(reinterpret_cast<const char*>(value));
        break;
      default:
        throw Error(ODLA_UNSUPPORTED_DATATYPE,
                    "computation item " + std::to_string(item_type) + " is not taken from C; "
                    "dynamic shapes go through odla_SetValueShapeInfo");
    }
    Do(computation, "set_computation_item", {Self(computation), I(item_type), item});
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetValueShapeInfo(odla_value value, odla_item_type type,
                                   odla_value_shape value_shape) {
  return Guard(__func__, [&] {
    Arg v = V(Require(value, "value"));  // live, and of a computation
    Do(value->computation, "set_value_shape_info", {v, I(type), Dims(value_shape)});
    return ODLA_SUCCESS;
  });
}

odla_status odla_DifferentiateComputation(odla_computation computation) {
  return Guard(__func__, [&] {
    Do(computation, "differentiate_computation", {Self(computation)});
    return ODLA_SUCCESS;
  });
}

odla_status odla_LoadExecutable(odla_resource_location location, odla_device device,
                                odla_executable* executable) {
  return Guard(__func__, [&] {
    Require(executable, "executable");
    Require(location.location, "location.location");
    CheckCpuDevice(device);
    std::string blob, what;
    if (location.location_type == ODLA_LOCATION_PATH) {
      what = static_cast<const char*>(location.location);
      struct stat info;
      if (stat(what.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {  // an exported bundle
        *executable = Register(LoadBundle(what));
        return ODLA_SUCCESS;
      }
      blob = ReadFile(what);
    } else if (location.location_type == ODLA_LOCATION_MEMORY) {
      what = "the executable in memory";
      blob.assign(static_cast<const char*>(location.location), location.size);
    } else {
      throw Error(ODLA_UNSUPPORTED_DATATYPE, "executables load from a PATH or from MEMORY");
    }
    *executable = Register(LoadExecutableBytes(std::move(blob), what));
    return ODLA_SUCCESS;
  });
}

// odla-tvm's own entry point, in no ODLA header: a bundle folder whose files the caller has
// checked (odla_tvm's engine cache, against the sizes and times it stored them with), loaded
// without hashing them again.
odla_status odla_tvm_LoadCheckedBundle(const char* root, odla_executable* executable) {
  return Guard(__func__, [&] {
    Require(executable, "executable");
    *executable = Register(LoadBundle(Require(root, "root"), false));
    return ODLA_SUCCESS;
  });
}

odla_status odla_StoreExecutable(odla_resource_location location, odla_executable executable) {
  return Guard(__func__, [&] {
    std::shared_ptr<_odla_executable> exe = LiveExecutable(executable);
    if (exe->blob.empty())
      throw Error(ODLA_UNSUPPORTED_OP, "an executable loaded from a bundle is stored by copying "
                                       "the bundle's folder");
    if (location.location_type != ODLA_LOCATION_PATH)
      throw Error(ODLA_UNSUPPORTED_DATATYPE, "executables are stored to a PATH (odla-tvm's "
                                             "stored executable, which Python loads too)");
    std::string path = static_cast<const char*>(Require(location.location, "location.location"));
    std::string partial = path + ".partial";  // renamed into place: never half a file
    {
      std::ofstream file(partial, std::ios::binary);
      if (!file) throw Error(ODLA_FILE_NOT_EXIST, "cannot write " + partial);
      file.write(exe->blob.data(), static_cast<std::streamsize>(exe->blob.size()));
      if (!file) throw Error(ODLA_MEM_ERROR, "cannot write all of " + partial);
    }
    if (std::rename(partial.c_str(), path.c_str()) != 0)
      throw Error(ODLA_FILE_NOT_EXIST, "cannot rename " + partial + " to " + path);
    return ODLA_SUCCESS;
  });
}

odla_status odla_LaunchExecutable(odla_executable executable, odla_context context) {
  return Guard(__func__, [&] {
    Launch(LiveExecutable(executable), *LiveContext(context));
    return ODLA_SUCCESS;
  });
}

odla_status odla_AsyncLaunchExecutable(const odla_executable executable,
                                       const odla_constants_array constants_array,
                                       const odla_context context, const odla_compute_mode mode,
                                       odla_device device) {
  return Guard(__func__, [&] {
    std::shared_ptr<_odla_executable> exe = LiveExecutable(executable);
    std::shared_ptr<_odla_context> ctx = LiveContext(context);
    if (constants_array != nullptr)
      throw Error(ODLA_UNSUPPORTED_DATATYPE, "constants arrays are not supported; pass NULL");
    CheckMode(mode);
    CheckCpuDevice(device);
    RunAsync(std::move(ctx), std::move(exe));
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetNumOfArgsFromExecutable(const odla_executable executable,
                                            odla_uint32* num_args) {
  return Guard(__func__, [&] {
    *Require(num_args, "num_args") =
        static_cast<odla_uint32>(LiveExecutable(executable)->args.size());
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetArgFromExecutableByIdx(const odla_executable executable,
                                           const odla_uint32 arg_idx, odla_value* arg_value) {
  return Guard(__func__, [&] {
    *Require(arg_value, "arg_value") =
        ArgumentOf(LiveExecutable(executable)->args, arg_idx, "argument");
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetNumOfOutputsFromExecutable(const odla_executable executable,
                                               odla_uint32* num_outputs) {
  return Guard(__func__, [&] {
    *Require(num_outputs, "num_outputs") =
        static_cast<odla_uint32>(LiveExecutable(executable)->outputs.size());
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetOutputFromExecutableByIdx(const odla_executable executable,
                                              const odla_uint32 output_idx,
                                              odla_value* output_value) {
  return Guard(__func__, [&] {
    *Require(output_value, "output_value") =
        ArgumentOf(LiveExecutable(executable)->outputs, output_idx, "output");
    return ODLA_SUCCESS;
  });
}

odla_status odla_DestroyExecutable(odla_executable executable) {
  return Guard(__func__, [&] {
    // freed when the runs and contexts holding it end; its slots are not live from now
    std::shared_ptr<_odla_executable> exe = Find(live_executables, executable, "executable", true);
    for (const auto* slots : {&exe->args, &exe->outputs})
      for (const auto& slot : *slots) Untrack(slot.get(), HandleKind::kValue);
    return ODLA_SUCCESS;
  });
}

odla_status odla_CreateContext(odla_context* context) {
  return Guard(__func__, [&] {
    Require(context, "context");
    auto ctx = std::make_shared<_odla_context>();
    std::lock_guard<std::mutex> lock(live_mutex);
    live_contexts[ctx.get()] = ctx;
    *context = ctx.get();
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetContextItem(odla_context context, odla_item_type type, odla_item_value value) {
  return Guard(__func__, [&] {
    std::shared_ptr<_odla_context> ctx = LiveContext(context);
    std::lock_guard<std::mutex> lock(ctx->run_mutex);
    SetContextItem(*ctx, EnumNumber(type), value);
    return ODLA_SUCCESS;
  });
}

odla_status odla_DestroyContext(odla_context context) {
  return Guard(__func__, [&] {
    std::shared_ptr<_odla_context> ctx = Find(live_contexts, context, "context", true);
    std::unique_lock<std::mutex> lock(ctx->pending_mutex);  // its asynchronous runs end first
    ctx->pending_done.wait(lock, [&] { return ctx->pending == 0; });
    return ODLA_SUCCESS;
  });
}

odla_status odla_BindToArgument(odla_value value, const odla_void* data_ptr, odla_context context) {
  return Guard(__func__, [&] {
    Bind(context, &_odla_context::inputs, LiveCopy(value, "value").id, data_ptr);
    return ODLA_SUCCESS;
  });
}

odla_status odla_BindToArgumentById(const odla_value_id value_id, const odla_void* data_ptr,
                                    odla_context context) {
  return Guard(__func__, [&] {
    Bind(context, &_odla_context::inputs, IdText(value_id, "value_id"), data_ptr);
    return ODLA_SUCCESS;
  });
}

odla_status odla_BindToOutput(odla_value value, odla_void* data_ptr, odla_context context) {
  return Guard(__func__, [&] {
    Bind(context, &_odla_context::outputs, LiveCopy(value, "value").id, data_ptr);
    return ODLA_SUCCESS;
  });
}

odla_status odla_BindToOutputById(const odla_value_id value_id, odla_void* data_ptr,
                                  odla_context context) {
  return Guard(__func__, [&] {
    Bind(context, &_odla_context::outputs, IdText(value_id, "value_id"), data_ptr);
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetRuntimeShape(odla_context context, odla_value value,
                                 odla_value_shape value_shape) {
  return Guard(__func__, [&] {
    CheckShape(value_shape, "the run-time shape");
    std::string id = LiveCopy(value, "value").id;
    std::shared_ptr<_odla_context> ctx = LiveContext(context);
    std::lock_guard<std::mutex> lock(ctx->run_mutex);
    ctx->shapes[id] = value_shape;
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetRuntimeShape(odla_context context, odla_value value,
                                 odla_value_shape* value_shape_ptr) {
  return Guard(__func__, [&] {
    _odla_value v = LiveCopy(value, "value");
    std::shared_ptr<_odla_context> ctx = LiveContext(context);
    Require(value_shape_ptr, "value_shape_ptr");
    std::lock_guard<std::mutex> lock(ctx->run_mutex);
    auto found = ctx->shapes.find(v.id);
    *value_shape_ptr = found != ctx->shapes.end() ? found->second : v.type.shape;
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetRuntimeValueType(odla_context context, odla_value value,
                                     odla_value_type* value_type_ptr) {
  return Guard(__func__, [&] {
    Require(value_type_ptr, "value_type_ptr")->element_type =
        LiveCopy(value, "value").type.element_type;
    return odla_GetRuntimeShape(context, value, &value_type_ptr->shape);
  });
}

odla_status odla_SetRuntimeValueType(odla_context context, odla_value value,
                                     odla_value_type value_type) {
  return Guard(__func__, [&] {
    _odla_value v = LiveCopy(value, "value");
    if (EnumNumber(value_type.element_type) != EnumNumber(v.type.element_type))
      throw Error(ODLA_UNSUPPORTED_DATATYPE,
                  "value " + v.id + " keeps its element type at run time");
    return odla_SetRuntimeShape(context, value, value_type.shape);
  });
}

odla_status odla_GetRuntimeNumOfOutputs(odla_context context, odla_uint32* num_output_ptr) {
  return Guard(__func__, [&] {
    std::shared_ptr<_odla_context> ctx = LiveContext(context);
    Require(num_output_ptr, "num_output_ptr");
    std::lock_guard<std::mutex> lock(ctx->run_mutex);
    std::shared_ptr<_odla_executable> last = ctx->inputs_of.lock();  // NULL once destroyed
    *num_output_ptr = last ? static_cast<odla_uint32>(last->outputs.size()) : 0;
    return ODLA_SUCCESS;
  });
}

}  // extern "C"
