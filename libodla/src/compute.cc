// odla_compute.h's entry points: compiling and executing computations, loading, storing and
// launching executables, contexts and their bindings. Executables and contexts are checked
// against the live ones, so a destroyed or foreign handle gives a status, not a crash.
#include <sys/stat.h>

#include <fstream>
#include <thread>
#include <unordered_set>

#include "build.h"
#include "mapped_file.h"
#include "runtime.h"

using namespace odla_tvm;

namespace {

std::mutex live_mutex;
std::unordered_map<_odla_executable*, std::shared_ptr<_odla_executable>> live_executables;
std::unordered_set<_odla_context*> live_contexts;

odla_executable Register(std::shared_ptr<_odla_executable> exe) {
  std::lock_guard<std::mutex> lock(live_mutex);
  live_executables[exe.get()] = exe;
  return exe.get();
}

std::shared_ptr<_odla_executable> Executable(odla_executable executable) {
  Require(executable, "executable");
  std::lock_guard<std::mutex> lock(live_mutex);
  auto found = live_executables.find(executable);
  if (found == live_executables.end())
    throw Error(ODLA_INVALID_PARAM, "executable is not one this library made (or was destroyed)");
  return found->second;
}

_odla_context& Context(odla_context context) {
  Require(context, "context");
  std::lock_guard<std::mutex> lock(live_mutex);
  if (live_contexts.count(context) == 0)
    throw Error(ODLA_INVALID_PARAM, "context is not one this library made (or was destroyed)");
  return *context;
}

void CheckMode(odla_compute_mode mode) {
  if (mode == ODLA_COMPUTE_TRAINING)
    throw Error(ODLA_UNSUPPORTED_OP, "TRAINING runs are not in the C library; train from Python "
                                     "(odla_tvm.differentiate_computation)");
  if (mode != ODLA_COMPUTE_DEFAULT && mode != ODLA_COMPUTE_INFERENCE)
    throw Error(ODLA_INVALID_PARAM,
                "mode " + std::to_string(mode) + " is not an ODLA compute mode");
}

// Runs `launch` on another thread; its status goes to the context's callback.
template <typename Launch>
void RunAsync(_odla_context& ctx, Launch launch) {
  {
    std::lock_guard<std::mutex> lock(ctx.pending_mutex);
    ++ctx.pending;
  }
  std::thread([&ctx, launch] {
    odla_status status = Guard("odla_AsyncLaunchExecutable", launch);
    if (ctx.callback != nullptr) ctx.callback(ctx.callback_arg, status);
    std::lock_guard<std::mutex> lock(ctx.pending_mutex);
    --ctx.pending;
    ctx.pending_done.notify_all();
  }).detach();
}

_odla_value* ArgumentOf(const std::vector<std::unique_ptr<_odla_value>>& slots, uint32_t idx,
                        const char* what) {
  if (idx >= slots.size())
    throw Error(ODLA_INVALID_PARAM, std::string(what) + " index " + std::to_string(idx) +
                                        " is out of range (" + std::to_string(slots.size()) + ")");
  return slots[idx].get();
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

extern "C" {

odla_status odla_CompileComputation(const odla_computation computation, const odla_device device,
                                    odla_executable* executable) {
  return Guard(__func__, [&] {
    Require(computation, "computation");
    Require(executable, "executable");
    CheckCpuDevice(device);
    *executable = Register(Compiled(*computation));
    return ODLA_SUCCESS;
  });
}

odla_status odla_ExecuteComputation(const odla_computation computation, const odla_context context,
                                    const odla_compute_mode mode, odla_device device) {
  return Guard(__func__, [&] {
    Require(computation, "computation");
    _odla_context& ctx = Context(context);
    CheckMode(mode);
    CheckCpuDevice(device);
    Launch(*Compiled(*computation), ctx);
    return ODLA_SUCCESS;
  });
}

odla_status odla_AsyncExecuteComputation(const odla_computation computation,
                                         const odla_context context, const odla_compute_mode mode,
                                         odla_device device) {
  return Guard(__func__, [&] {
    Require(computation, "computation");
    _odla_context& ctx = Context(context);
    CheckMode(mode);
    CheckCpuDevice(device);
    std::shared_ptr<_odla_executable> exe = Compiled(*computation);  // compiles before returning
    RunAsync(ctx, [exe, &ctx] {
      Launch(*exe, ctx);
      return ODLA_SUCCESS;
    });
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
    Require(computation, "computation");
    Require(value, "value");
    Arg item;
    switch (type) {
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
                    "computation item " + std::to_string(type) + " is not taken from C; "
                    "dynamic shapes go through odla_SetValueShapeInfo");
    }
    Do(computation, "set_computation_item", {Self(computation), I(type), item});
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetValueShapeInfo(odla_value value, odla_item_type type,
                                   odla_value_shape value_shape) {
  return Guard(__func__, [&] {
    Require(value, "value");
    Do(value->computation, "set_value_shape_info", {V(value), I(type), Dims(value_shape)});
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
    std::shared_ptr<_odla_executable> exe = Executable(executable);
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
    Launch(*Executable(executable), Context(context));
    return ODLA_SUCCESS;
  });
}

odla_status odla_AsyncLaunchExecutable(const odla_executable executable,
                                       const odla_constants_array constants_array,
                                       const odla_context context, const odla_compute_mode mode,
                                       odla_device device) {
  return Guard(__func__, [&] {
    std::shared_ptr<_odla_executable> exe = Executable(executable);
    _odla_context& ctx = Context(context);
    if (constants_array != nullptr)
      throw Error(ODLA_UNSUPPORTED_DATATYPE, "constants arrays are not supported; pass NULL");
    CheckMode(mode);
    CheckCpuDevice(device);
    RunAsync(ctx, [exe, &ctx] {
      Launch(*exe, ctx);
      return ODLA_SUCCESS;
    });
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetNumOfArgsFromExecutable(const odla_executable executable,
                                            odla_uint32* num_args) {
  return Guard(__func__, [&] {
    *Require(num_args, "num_args") = static_cast<odla_uint32>(Executable(executable)->args.size());
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetArgFromExecutableByIdx(const odla_executable executable,
                                           const odla_uint32 arg_idx, odla_value* arg_value) {
  return Guard(__func__, [&] {
    *Require(arg_value, "arg_value") =
        ArgumentOf(Executable(executable)->args, arg_idx, "argument");
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetNumOfOutputsFromExecutable(const odla_executable executable,
                                               odla_uint32* num_outputs) {
  return Guard(__func__, [&] {
    *Require(num_outputs, "num_outputs") =
        static_cast<odla_uint32>(Executable(executable)->outputs.size());
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetOutputFromExecutableByIdx(const odla_executable executable,
                                              const odla_uint32 output_idx,
                                              odla_value* output_value) {
  return Guard(__func__, [&] {
    *Require(output_value, "output_value") =
        ArgumentOf(Executable(executable)->outputs, output_idx, "output");
    return ODLA_SUCCESS;
  });
}

odla_status odla_DestroyExecutable(odla_executable executable) {
  return Guard(__func__, [&] {
    std::shared_ptr<_odla_executable> exe = Executable(executable);  // freed when runs end
    std::lock_guard<std::mutex> lock(live_mutex);
    live_executables.erase(executable);
    return ODLA_SUCCESS;
  });
}

odla_status odla_CreateContext(odla_context* context) {
  return Guard(__func__, [&] {
    Require(context, "context");
    auto ctx = std::make_unique<_odla_context>();
    std::lock_guard<std::mutex> lock(live_mutex);
    live_contexts.insert(ctx.get());
    *context = ctx.release();
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetContextItem(odla_context context, odla_item_type type, odla_item_value value) {
  return Guard(__func__, [&] {
    SetContextItem(Context(context), type, value);
    return ODLA_SUCCESS;
  });
}

odla_status odla_DestroyContext(odla_context context) {
  return Guard(__func__, [&] {
    _odla_context& ctx = Context(context);
    {
      std::unique_lock<std::mutex> lock(ctx.pending_mutex);  // its asynchronous runs end first
      ctx.pending_done.wait(lock, [&] { return ctx.pending == 0; });
    }
    {
      std::lock_guard<std::mutex> lock(live_mutex);
      live_contexts.erase(context);
    }
    delete context;
    return ODLA_SUCCESS;
  });
}

odla_status odla_BindToArgument(odla_value value, const odla_void* data_ptr, odla_context context) {
  return Guard(__func__, [&] {
    Context(context).inputs[Require(value, "value")->id] = Require(data_ptr, "data_ptr");
    return ODLA_SUCCESS;
  });
}

odla_status odla_BindToArgumentById(const odla_value_id value_id, const odla_void* data_ptr,
                                    odla_context context) {
  return Guard(__func__, [&] {
    Context(context).inputs[IdText(value_id, "value_id")] = Require(data_ptr, "data_ptr");
    return ODLA_SUCCESS;
  });
}

odla_status odla_BindToOutput(odla_value value, odla_void* data_ptr, odla_context context) {
  return Guard(__func__, [&] {
    Context(context).outputs[Require(value, "value")->id] = Require(data_ptr, "data_ptr");
    return ODLA_SUCCESS;
  });
}

odla_status odla_BindToOutputById(const odla_value_id value_id, odla_void* data_ptr,
                                  odla_context context) {
  return Guard(__func__, [&] {
    Context(context).outputs[IdText(value_id, "value_id")] = Require(data_ptr, "data_ptr");
    return ODLA_SUCCESS;
  });
}

odla_status odla_SetRuntimeShape(odla_context context, odla_value value,
                                 odla_value_shape value_shape) {
  return Guard(__func__, [&] {
    CheckShape(value_shape, "the run-time shape");
    Context(context).shapes[Require(value, "value")->id] = value_shape;
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetRuntimeShape(odla_context context, odla_value value,
                                 odla_value_shape* value_shape_ptr) {
  return Guard(__func__, [&] {
    _odla_context& ctx = Context(context);
    Require(value_shape_ptr, "value_shape_ptr");
    auto found = ctx.shapes.find(Require(value, "value")->id);
    *value_shape_ptr = found != ctx.shapes.end() ? found->second : value->type.shape;
    return ODLA_SUCCESS;
  });
}

odla_status odla_GetRuntimeValueType(odla_context context, odla_value value,
                                     odla_value_type* value_type_ptr) {
  return Guard(__func__, [&] {
    Require(value_type_ptr, "value_type_ptr")->element_type =
        Require(value, "value")->type.element_type;
    return odla_GetRuntimeShape(context, value, &value_type_ptr->shape);
  });
}

odla_status odla_SetRuntimeValueType(odla_context context, odla_value value,
                                     odla_value_type value_type) {
  return Guard(__func__, [&] {
    if (value_type.element_type != Require(value, "value")->type.element_type)
      throw Error(ODLA_UNSUPPORTED_DATATYPE,
                  "value " + value->id + " keeps its element type at run time");
    return odla_SetRuntimeShape(context, value, value_type.shape);
  });
}

odla_status odla_GetRuntimeNumOfOutputs(odla_context context, odla_uint32* num_output_ptr) {
  return Guard(__func__, [&] {
    _odla_context& ctx = Context(context);
    Require(num_output_ptr, "num_output_ptr");
    *num_output_ptr = ctx.inputs_of ? static_cast<odla_uint32>(ctx.inputs_of->outputs.size()) : 0;
    return ODLA_SUCCESS;
  });
}

}  // extern "C"
